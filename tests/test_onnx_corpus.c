/*
 * The ONNX import corpus (tests/fixtures/onnx/corpus/make_corpus.py): the models people
 * export, from every exporter setting, against PyTorch's train-mode references. A row that
 * keeps training semantics must import, match PyTorch's output, loss and every gradient
 * (relative L2 <= 1e-4, fp32, harness/verify/faithful.h) and run plain vs checkpointed
 * bitwise identically on the CPU with non-zero gradients. A row whose exporter folds
 * BatchNorm must be refused with a line saying so. A row the importer cannot take yet is
 * refused with a line naming the module and node (never imported as something else).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/registry.h"
#include "harness/engine/train.h"
#include "harness/io/onnx.h"
#include "harness/io/safetensors.h"
#include "harness/io/tensorload.h"
#include "harness/model/onnx_import.h"
#include "harness/verify/faithful.h"
#include "harness/verify/run_case.h"
#include "tests/test_util.h"

/* LOST: the exporter dropped part of the training-mode model (a dropout); the import works,
 * the faithfulness check refuses it, as NOT_YET's second form */
typedef enum { FAITHFUL, FOLDED, NOT_YET, LOST } outcome;

typedef struct {
    const char *stem;   /* corpus/<stem>.onnx */
    const char *model;  /* corpus/<model>.ref.npz */
    const char *loss;
    outcome want;
    const char *why;    /* FOLDED / NOT_YET: a fragment of the refusal */
} corpus_row;

#define FOLD_LINE "the exporter folded BatchNorm into the convolutions"
#define DROP_LINE "dropout layers: the exporter removed them"

static const corpus_row rows[] = {
    {"unet3d_ts13_opset14", "unet3d", "mean", FAITHFUL, NULL},
    {"unet3d_ts13_opset17", "unet3d", "mean", FAITHFUL, NULL},
    {"unet3d_ts2_opset14", "unet3d", "mean", FAITHFUL, NULL},
    {"unet3d_ts2_opset17", "unet3d", "mean", FAITHFUL, NULL},
    {"unet3d_dynamo", "unet3d", "mean", FOLDED, FOLD_LINE},
    {"unet3d_dynamo_inline", "unet3d", "mean", FOLDED, FOLD_LINE},
    {"resnet18_ts13_opset14", "resnet18", "mean", FAITHFUL, NULL},
    {"resnet18_ts2_opset14", "resnet18", "mean", FAITHFUL, NULL},
    {"resnet18_dynamo", "resnet18", "mean", FOLDED, FOLD_LINE}, /* its global pool: ReduceMean */
    {"llama_block_ts13_opset17", "llama_block", "cross_entropy", FAITHFUL, NULL},
    {"llama_block_ts2_opset17", "llama_block", "cross_entropy", FAITHFUL, NULL},
    /* the dynamo exporter folds Transpose(weight) into new initializers (val_N) and records
     * the parameter each came from (folded_from): imported under the parameter's name */
    {"llama_block_dynamo", "llama_block", "cross_entropy", FAITHFUL, NULL},
    {"unet2d_ts13_opset17", "unet2d", "mean", FAITHFUL, NULL},
    {"unet2d_ts2_opset17", "unet2d", "mean", FAITHFUL, NULL},
    {"unet2d_dynamo", "unet2d", "mean", FOLDED, FOLD_LINE},
    {"nanogpt_ts13_opset17", "nanogpt", "cross_entropy", FAITHFUL, NULL},
    {"nanogpt_ts2_opset17", "nanogpt", "cross_entropy", FAITHFUL, NULL},
    /* dynamo: the head's folded transposed copy of the tied weight (val_85, folded from
     * lm_head.weight) is checked equal to the embedding's and shared; the positions folded
     * from wpe.weight and constants are wpe.weight; PyTorch names the tied weight
     * wte.weight, the exporter lm_head.weight: the reference says so (tied.lm_head.weight) */
    {"nanogpt_dynamo", "nanogpt", "cross_entropy", FAITHFUL, NULL},
    /* nn.MultiheadAttention on the generic path: scaling by constants, the additive -inf
     * mask inside the softmax (softmax's mask_shape) */
    {"mha_block_ts13_opset17", "mha_block", "mean", FAITHFUL, NULL},
    /* torch 2 exports the attention dropout of nn.MultiheadAttention and
     * scaled_dot_product_attention as an ONNX Dropout without training_mode (an identity):
     * everything else matches, the check refuses the lost dropout */
    {"mha_block_ts2_opset17", "mha_block", "mean", LOST, DROP_LINE},
    {"mha_block_dynamo", "mha_block", "mean", LOST, DROP_LINE},
    {"sdpa_block_ts2_opset17", "sdpa_block", "mean", LOST, DROP_LINE},
    {"sdpa_block_dynamo", "sdpa_block", "mean", LOST, DROP_LINE},
    /* the same SDPA block without attention dropout: nothing is lost, so it imports */
    {"sdpa_nodrop_block_ts2_opset17", "sdpa_nodrop_block", "mean", FAITHFUL, NULL},
    {"sdpa_nodrop_block_dynamo", "sdpa_nodrop_block", "mean", FAITHFUL, NULL},
    /* nn.LayerNorm below opset 17 (ReduceMean/Sub/Pow/.../Div/Mul/Add): the LayerNorm pattern */
    {"ln_block_ts13_opset14", "ln_block", "mean", FAITHFUL, NULL},
    {"ln_block_ts2_opset14", "ln_block", "mean", FAITHFUL, NULL},
    {"ln_block_dynamo", "ln_block", "mean", FAITHFUL, NULL},
};

#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

/* An edit of the loaded model before the import (a lying folded_from record), or NULL. */
static void (*edit_model)(ck_onnx_model *m);

/* The imported case of a row: built with dropout as exported (ckpt) or with every dropout
 * rate 0 (the comparison), its weights in wpath; scopes false: the module scopes of torch's
 * dynamo exporter (node metadata) are forgotten before the import, as if another exporter
 * had written the file. Returns the import's status. */
static ck_status import_row(const corpus_row *r, bool dropout_off, bool scopes,
                            tu_built_case *bc, ck_onnx_origins *origins, int *n_bn,
                            int *n_drop, char *wpath, size_t wn, ck_error *err)
{
    char rel[256], full[1100];
    snprintf(rel, sizeof rel, "onnx/corpus/%s.onnx", r->stem);
    tu_fixture_path(full, sizeof full, rel);
    ck_onnx_model m;
    ck_status st = ck_onnx_load(full, &m, err);
    if (st != CK_OK)
        return st;
    for (int i = 0; !scopes && i < m.n_nodes; i++)
        m.nodes[i].torch_scopes[0] = '\0';
    if (edit_model)
        edit_model(&m);
    snprintf(wpath, wn, "/tmp/ck_test_corpus_XXXXXX.safetensors");
    int fd = mkstemps(wpath, 12);
    ck_assert(fd >= 0);
    close(fd);
    ck_onnx_import_opts o = {.name = r->model, .weights_path = wpath, .loss = r->loss,
                             .origins = origins};
    cJSON *root = NULL;
    ck_tensorset w;
    st = ck_onnx_import(&m, full, &o, &root, &w, err);
    ck_onnx_free(&m);
    if (st != CK_OK) {
        unlink(wpath);
        return st;
    }
    ck_assert_int_eq(ck_safetensors_write(wpath, w.n, w.t, err), CK_OK);
    ck_tensorset_free(&w);
    *n_bn = *n_drop = 0;
    cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(root, "layers"))
    {
        const char *op = cJSON_GetObjectItem(L, "op")->valuestring;
        *n_bn += strcmp(op, "batchnorm") == 0 && !cJSON_IsTrue(cJSON_GetObjectItem(L, "eval"));
        const char *key = strcmp(op, "dropout") == 0 ? "rate"
                          : strcmp(op, "attention") == 0 ? "dropout" : NULL;
        if (key && cJSON_GetObjectItem(L, key)->valuedouble > 0) {
            (*n_drop)++;
            if (dropout_off)
                cJSON_ReplaceItemInObject(L, key, cJSON_CreateNumber(0.0));
        }
    }
    char *text = cJSON_Print(root);
    ck_assert_ptr_nonnull(text);
    tu_build_named(bc, text, full);
    free(text);
    cJSON_Delete(root);
    return CK_OK;
}

static int count_grads(const ck_tensorset *ref)
{
    int n = 0;
    for (int i = 0; i < ref->n; i++)
        n += strncmp(ref->t[i].name, "grad.", 5) == 0;
    return n;
}

/* Faithful: every tensor compared and within 1e-4; nothing of the reference left out. */
static void check_faithful(const corpus_row *r)
{
    tu_built_case bc;
    ck_onnx_origins origins;
    int n_bn, n_drop;
    char wpath[256], rel[256], ref_path[1100];
    ck_error err;
    ck_assert_msg(import_row(r, true, true, &bc, &origins, &n_bn, &n_drop, wpath, sizeof wpath,
                             &err) == CK_OK, "%s: %s", r->stem, err.msg);
    snprintf(rel, sizeof rel, "onnx/corpus/%s.ref.npz", r->model);
    tu_fixture_path(ref_path, sizeof ref_path, rel);
    ck_tensorset ref;
    ck_assert_msg(ck_tensorset_load(ref_path, &ref, &err) == CK_OK, "%s", err.msg);
    ck_backend *b = tu_cpu_backend();
    ck_faithful_result res;
    ck_assert_msg(ck_faithful_check(b, &bc.g, &origins, &ref, ref_path, n_bn, n_drop, &res,
                                    &err) == CK_OK, "%s: %s", r->stem, err.msg);
    ck_assert_msg(res.pass, "%s: %s", r->stem, res.why);
    ck_assert_msg(res.has_loss && res.has_grads && res.has_eval, "%s: all compared", r->stem);
    ck_assert_int_eq(res.n_grads_missing, 0);
    ck_assert_int_eq(res.n, 2 + count_grads(&ref)); /* output, loss, every gradient */
    for (int i = 0; i < res.n; i++)
        ck_assert_msg(res.items[i].rel_l2 <= CK_FAITHFUL_REL_L2, "%s: %s rel L2 %g", r->stem,
                      res.items[i].name, res.items[i].rel_l2);
    ck_faithful_result_free(&res);
    ck_tensorset_free(&ref);
    ck_onnx_origins_free(&origins);
    tu_free_built(&bc);
    unlink(wpath);
    /* plain vs checkpointed, dropout as exported */
    ck_assert_int_eq(import_row(r, false, true, &bc, NULL, &n_bn, &n_drop, wpath, sizeof wpath,
                                &err),
                     CK_OK);
    ck_result run;
    ck_assert_msg(ck_run_case(b, &bc.g, CK_F32, &run, &err) == CK_OK, "%s", err.msg);
    ck_assert_msg(run.verdict == CK_VERDICT_IDENTICAL, "%s: %s", r->stem,
                  ck_verdict_name(run.verdict));
    ck_assert_int_gt(run.n_segments, 1);
    ck_assert_int_gt(run.ckpt.recomputed_layers, 0);
    ck_result_free(&run);
    ck_record rec;
    ck_assert_msg(ck_train(b, &bc.g, NULL, CK_F32, NULL, &rec, &err) == CK_OK, "%s", err.msg);
    for (int i = 0; i < rec.n; i++) {
        if (rec.e[i].kind != CK_KIND_GRAD)
            continue;
        bool nz = false;
        for (int64_t j = 0; j < ck_shape_numel(&rec.e[i].shape) && !nz; j++)
            nz = ((const float *)rec.e[i].data)[j] != 0.0f;
        ck_assert_msg(nz, "%s: gradient %s is all zero", r->stem, rec.e[i].name);
    }
    ck_record_free(&rec);
    b->destroy(b);
    tu_free_built(&bc);
    unlink(wpath);
}

/* Folded: the importer refuses it, naming the BatchNorm's module, from what torch's dynamo
 * exporter writes in the node metadata (the Conv's own scope is the BatchNorm op). Without
 * that metadata (another exporter, or stripped) the import succeeds (the graph is valid
 * ONNX) and the check refuses it. */
static void check_folded(const corpus_row *r)
{
    tu_built_case bc;
    ck_onnx_origins origins;
    int n_bn, n_drop;
    char wpath[256], rel[256], ref_path[1100];
    ck_error err;
    ck_status st = import_row(r, true, true, &bc, &origins, &n_bn, &n_drop, wpath, sizeof wpath,
                              &err);
    ck_assert_msg(st == CK_ERR_INPUT && strstr(err.msg, r->why) && strstr(err.msg, "module ") &&
                  strstr(err.msg, "the exporter's rewrite of BatchNorm") &&
                  !strchr(err.msg, '\n'), "%s: '%s'", r->stem, err.msg);
    st = import_row(r, true, false, &bc, &origins, &n_bn, &n_drop, wpath, sizeof wpath, &err);
    if (st != CK_OK) { /* an op the importer lacks comes first: refused all the same */
        ck_assert_msg(st == CK_ERR_INPUT && !strchr(err.msg, '\n'), "%s: '%s'", r->stem, err.msg);
        return;
    }
    ck_assert_int_eq(n_bn, 0);
    snprintf(rel, sizeof rel, "onnx/corpus/%s.ref.npz", r->model);
    tu_fixture_path(ref_path, sizeof ref_path, rel);
    ck_tensorset ref;
    ck_assert_int_eq(ck_tensorset_load(ref_path, &ref, &err), CK_OK);
    ck_backend *b = tu_cpu_backend();
    ck_faithful_result res;
    ck_assert_int_eq(ck_faithful_check(b, &bc.g, &origins, &ref, ref_path, n_bn, n_drop, &res,
                                       &err), CK_OK);
    ck_assert_msg(!res.pass && strstr(res.why, r->why), "%s: '%s'", r->stem, res.why);
    /* without the module counts the missing BatchNorm parameters still refuse it */
    ck_faithful_result_free(&res);
    for (int i = 0; i < ref.n; i++)
        if (strcmp(ref.t[i].name, "count.batchnorm") == 0)
            ref.t[i].name = "count.unused";
    ck_assert_int_eq(ck_faithful_check(b, &bc.g, &origins, &ref, ref_path, n_bn, n_drop, &res,
                                       &err), CK_OK);
    ck_assert_msg(!res.pass && strstr(res.why, "gradients of parameters the imported model does "
                                               "not have"), "%s: '%s'", r->stem, res.why);
    ck_assert_msg(res.items[0].rel_l2 > 1e-2, "%s: the folded model's output differs too",
                  r->stem);
    ck_faithful_result_free(&res);
    b->destroy(b);
    ck_tensorset_free(&ref);
    ck_onnx_origins_free(&origins);
    tu_free_built(&bc);
    unlink(wpath);
}

/* Not importable yet: the import is refused naming the module and node, or (the
 * exporter renamed the parameters) the check refuses it. Never a pass. */
static void check_not_yet(const corpus_row *r)
{
    tu_built_case bc;
    ck_onnx_origins origins;
    int n_bn, n_drop;
    char wpath[256], rel[256], ref_path[1100];
    ck_error err;
    ck_status st = import_row(r, true, true, &bc, &origins, &n_bn, &n_drop, wpath, sizeof wpath,
                              &err);
    ck_assert_msg(r->want != LOST || st == CK_OK, "%s: the import itself fails: %s", r->stem,
                  err.msg);
    if (st != CK_OK) {
        ck_assert_msg(st == CK_ERR_INPUT, "%s: status %d", r->stem, (int)st);
        ck_assert_msg(strstr(err.msg, r->why) && !strchr(err.msg, '\n'), "%s: '%s' lacks '%s'",
                      r->stem, err.msg, r->why);
        return;
    }
    snprintf(rel, sizeof rel, "onnx/corpus/%s.ref.npz", r->model);
    tu_fixture_path(ref_path, sizeof ref_path, rel);
    ck_tensorset ref;
    ck_assert_int_eq(ck_tensorset_load(ref_path, &ref, &err), CK_OK);
    ck_backend *b = tu_cpu_backend();
    ck_faithful_result res;
    ck_assert_int_eq(ck_faithful_check(b, &bc.g, &origins, &ref, ref_path, n_bn, n_drop, &res,
                                       &err), CK_OK);
    ck_assert_msg(!res.pass, "%s: passes now: move it to FAITHFUL", r->stem);
    ck_assert_msg(strstr(res.why, r->why), "%s: '%s' lacks '%s'", r->stem, res.why, r->why);
    ck_faithful_result_free(&res);
    b->destroy(b);
    ck_tensorset_free(&ref);
    ck_onnx_origins_free(&origins);
    tu_free_built(&bc);
    unlink(wpath);
}

START_TEST(corpus_row_is_faithful_or_refused)
{
    const corpus_row *r = &rows[_i];
    if (r->want == FAITHFUL)
        check_faithful(r);
    else if (r->want == FOLDED)
        check_folded(r);
    else
        check_not_yet(r);
}
END_TEST

/* ln_block_dynamo with the folded_from records of fc1's and fc2's weights swapped (both
 * 8 x 8): the import names them after the wrong parameters */
static void swap_folded_sources(ck_onnx_model *m)
{
    ck_onnx_fold *a = NULL, *b = NULL;
    for (int i = 0; i < m->n_folds; i++) {
        if (m->folds[i].n_src == 1 && strcmp(m->folds[i].src[0], "fc1.weight") == 0)
            a = &m->folds[i];
        if (m->folds[i].n_src == 1 && strcmp(m->folds[i].src[0], "fc2.weight") == 0)
            b = &m->folds[i];
    }
    ck_assert(a && b);
    char *t = a->src[0];
    a->src[0] = b->src[0];
    b->src[0] = t;
}

/* fc1's record names two parameters (both in the graph signature): fc1's weight keeps val_0 */
static void ambiguous_folded_source(ck_onnx_model *m)
{
    const ck_onnx_fold *f = ck_onnx_fold_find(m, "val_0");
    ck_assert(f && f->n_src == 1);
    ck_assert_int_eq(ck_onnx_add_signature(m, "p: PARAMETER target='fc2.weight'\n", 32), CK_OK);
    char *two[2] = {strdup("fc1.weight"), strdup("fc2.weight")};
    ck_assert(two[0] && two[1]);
    for (int i = 0; i < m->n_folds; i++)
        if (strcmp(m->folds[i].value, "val_0") == 0) {
            free(m->folds[i].src[0]);
            m->folds[i].src[0] = two[0];
            m->folds[i].src[1] = two[1]; /* src has room for CK_ONNX_MAX_FOLD_SOURCES */
            m->folds[i].n_src = 2;
        }
}

/* A folded_from record that lies (names the other layer's weight) or is ambiguous imports,
 * and the faithfulness check refuses it: never a PASS. */
START_TEST(a_lying_or_ambiguous_folded_from_is_refused_by_the_check)
{
    static const corpus_row row = {"ln_block_dynamo", "ln_block", "mean", FAITHFUL, NULL};
    void (*edits[2])(ck_onnx_model *) = {swap_folded_sources, ambiguous_folded_source};
    static const char *const why[2] = {"grad.fc", "the reference has 1 gradients of parameters "
                                                  "the imported model does not have (first: "
                                                  "fc1.weight)"};
    for (int k = 0; k < 2; k++) {
        tu_built_case bc;
        ck_onnx_origins origins;
        int n_bn, n_drop;
        char wpath[256], ref_path[1100];
        ck_error err;
        edit_model = edits[k];
        ck_status st = import_row(&row, true, true, &bc, &origins, &n_bn, &n_drop, wpath,
                                  sizeof wpath, &err);
        edit_model = NULL;
        ck_assert_msg(st == CK_OK, "%s", err.msg);
        tu_fixture_path(ref_path, sizeof ref_path, "onnx/corpus/ln_block.ref.npz");
        ck_tensorset ref;
        ck_assert_int_eq(ck_tensorset_load(ref_path, &ref, &err), CK_OK);
        ck_backend *b = tu_cpu_backend();
        ck_faithful_result res;
        ck_assert_int_eq(ck_faithful_check(b, &bc.g, &origins, &ref, ref_path, n_bn, n_drop,
                                           &res, &err), CK_OK);
        ck_assert_msg(!res.pass && strstr(res.why, why[k]), "edit %d: '%s'", k, res.why);
        ck_faithful_result_free(&res);
        b->destroy(b);
        ck_tensorset_free(&ref);
        ck_onnx_origins_free(&origins);
        tu_free_built(&bc);
        unlink(wpath);
    }
}
END_TEST

Suite *suite_onnx_corpus(void)
{
    Suite *s = suite_create("onnx_corpus");
    TCase *tc = tcase_create("corpus");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, corpus_row_is_faithful_or_refused, 0, N_ROWS);
    tcase_add_test(tc, a_lying_or_ambiguous_folded_from_is_refused_by_the_check);
    suite_add_tcase(s, tc);
    return s;
}
