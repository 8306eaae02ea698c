/*
 * ONNX import (harness/io/onnx.c, harness/model/onnx_import.c):
 *  - faithfulness: models exported from PyTorch (tests/fixtures/onnx/export_models.py)
 *    are imported, and the harness's forward pass on the exported weights and PyTorch's
 *    input equals PyTorch's train-mode (dropout off) and eval-mode outputs within fp32
 *    tolerance;
 *  - the imported cases run plain vs checkpointed bitwise identical;
 *  - malformed files are refused with one line; unsupported nodes are named.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/registry.h"
#include "harness/engine/executor.h"
#include "harness/engine/train.h"
#include "harness/io/files.h"
#include "harness/io/onnx.h"
#include "harness/io/safetensors.h"
#include "harness/io/tensorload.h"
#include "harness/model/onnx_import.h"
#include "harness/model/params.h"
#include "harness/verify/run_case.h"
#include "tests/test_util.h"

/* Imports fixture <stem>.onnx, writes its weights to a temporary file named by the case,
 * applies the mode (dropout rates 0; eval: batchnorm eval) and builds the case. */
static void import_fixture(const char *stem, bool eval, bool keep_dropout, tu_built_case *bc,
                           char *wpath, size_t wn)
{
    char path[1024];
    snprintf(path, sizeof path, "onnx/%s.onnx", stem);
    char full[1100];
    tu_fixture_path(full, sizeof full, path);
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    snprintf(wpath, wn, "/tmp/ck_test_onnx_XXXXXX.safetensors");
    int fd = mkstemps(wpath, 12);
    ck_assert(fd >= 0);
    close(fd);
    ck_onnx_import_opts o = {.name = stem, .weights_path = wpath};
    cJSON *root = NULL;
    ck_tensorset w;
    ck_assert_msg(ck_onnx_import(&m, full, &o, &root, &w, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_gt(w.n, 0);
    ck_assert_int_eq(ck_safetensors_write(wpath, w.n, w.t, &err), CK_OK);
    cJSON *layers = cJSON_GetObjectItem(root, "layers");
    cJSON *L;
    int n_dropout = 0, n_bn = 0, n_attn = 0;
    cJSON_ArrayForEach(L, layers)
    {
        const char *op = cJSON_GetObjectItem(L, "op")->valuestring;
        if (strcmp(op, "dropout") == 0 && !keep_dropout) {
            cJSON_ReplaceItemInObject(L, "rate", cJSON_CreateNumber(0.0));
            n_dropout++;
        }
        if (strcmp(op, "attention") == 0) {
            n_attn++;
            ck_assert(cJSON_GetObjectItem(L, "dropout")->valuedouble > 0.0);
            if (!keep_dropout)
                cJSON_ReplaceItemInObject(L, "dropout", cJSON_CreateNumber(0.0));
        }
        if (strcmp(op, "batchnorm") == 0) {
            n_bn++;
            if (eval)
                cJSON_ReplaceItemInObject(L, "eval", cJSON_CreateTrue());
        }
    }
    /* tf2onnx exports inference graphs (BatchNorm folded, Dropout dropped): the Keras
     * fixtures exercise nearest upsampling instead */
    bool keras = strncmp(stem, "keras_", 6) == 0;
    /* generic_ops exercises the generic path: neither batchnorm nor dropout */
    keras = keras || strcmp(stem, "generic_ops") == 0 || strcmp(stem, "cast_ops") == 0;
    ck_assert_msg(keras || ((n_bn > 0 || n_attn > 0) && (keep_dropout || n_dropout > 0)),
                  "%s: the fixture exercises batchnorm (%d) or attention (%d), and dropout (%d)",
                  stem, n_bn, n_attn, n_dropout);
    char *text = cJSON_Print(root);
    ck_assert_ptr_nonnull(text);
    tu_build_named(bc, text, full);
    free(text);
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    ck_onnx_free(&m);
}

typedef struct {
    int last;
    float *out;
    int64_t numel;
    ck_backend *b;
} last_output;

static ck_status keep_last(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    last_output *lo = user;
    if (ev->ev != CK_EVENT_FORWARD || ev->recompute || ev->layer != lo->last)
        return CK_OK;
    lo->numel = ck_shape_numel(&ev->tensor->shape);
    lo->out = malloc((size_t)lo->numel * sizeof *lo->out);
    ck_assert_ptr_nonnull(lo->out);
    ck_assert_int_eq(ev->tensor->dtype, CK_F32);
    return lo->b->download(lo->b, ev->tensor, lo->out, err);
}

/* The harness's forward output on `input` (fp32, plain run, step 0). */
static float *forward(tu_built_case *bc, const ck_named_tensor *input, int64_t *numel)
{
    ck_backend *b = tu_cpu_backend();
    ck_error err;
    ck_model model;
    ck_assert_msg(ck_model_create(&model, b, &bc->g, CK_F32, &err) == CK_OK, "%s", err.msg);
    ck_assert_msg(ck_model_init(&model, bc->cs.seed, &err) == CK_OK, "%s", err.msg);
    last_output lo = {.last = bc->g.n - 1, .b = b};
    ck_exec ex;
    memset(&ex, 0, sizeof ex);
    ck_exec_config cfg = {.b = b, .g = &bc->g, .model = &model, .plan = NULL,
                          .seed = bc->cs.seed, .rng = bc->cs.rng, .bn = bc->cs.bn,
                          .autocast = bc->cs.autocast, .observer = keep_last,
                          .observer_user = &lo};
    ck_assert_msg(ck_exec_create(&ex, &cfg, &err) == CK_OK, "%s", err.msg);
    ck_tensor x;
    memset(&x, 0, sizeof x);
    x.name = "input";
    x.shape = bc->cs.input_shape;
    ck_assert_msg(ck_shape_equal(&x.shape, &input->shape), "fixture input shape");
    int64_t nx = ck_shape_numel(&x.shape);
    ck_assert_int_eq(b->alloc(b, nx * 4, &x.data, &err), CK_OK);
    void *host = malloc((size_t)nx * 4);
    if (bc->cs.input_dist == CK_DIST_TOKENS) {
        /* PyTorch's int64 token ids, as the harness holds token ids: i32 */
        ck_assert_int_eq(input->dtype, CK_FT_I64);
        x.dtype = CK_I32;
        for (int64_t i = 0; i < nx; i++) {
            int64_t id;
            memcpy(&id, (const char *)input->data + 8 * i, 8);
            ck_assert(id >= 0 && id < bc->cs.input_vocab);
            ((int32_t *)host)[i] = (int32_t)id;
        }
    } else {
        ck_assert_int_eq(input->dtype, CK_FT_F32);
        x.dtype = CK_F32;
        memcpy(host, input->data, (size_t)nx * 4);
    }
    ck_assert_int_eq(b->upload(b, &x, host, &err), CK_OK);
    double loss = 0;
    ck_assert_msg(ck_exec_step(&ex, 0, &x, NULL, bc->cs.loss, 1.0, false, &loss, &err) == CK_OK,
                  "%s", err.msg);
    ck_assert_msg(lo.out != NULL, "the last layer's output was observed");
    *numel = lo.numel;
    free(host);
    b->free(b, x.data);
    ck_exec_free(&ex);
    ck_model_free(&model);
    b->destroy(b);
    return lo.out;
}

static void check_against_pytorch(const char *stem, bool eval)
{
    tu_built_case bc;
    char wpath[256];
    import_fixture(stem, eval, false, &bc, wpath, sizeof wpath);
    char rel[256], io_path[1100];
    snprintf(rel, sizeof rel, "onnx/%s.io.npz", stem);
    tu_fixture_path(io_path, sizeof io_path, rel);
    ck_tensorset io;
    ck_error err;
    ck_assert_msg(ck_tensorset_load(io_path, &io, &err) == CK_OK, "%s", err.msg);
    const ck_named_tensor *in = ck_tensorset_find(&io, "input");
    const ck_named_tensor *want = ck_tensorset_find(&io, eval ? "out_eval" : "out_train");
    ck_assert(in && want && want->dtype == CK_FT_F32);
    int64_t n = 0;
    float *got = forward(&bc, in, &n);
    ck_assert_int_eq(n, ck_shape_numel(&want->shape));
    /* fp32 tolerance: PyTorch sums in fp32 in its own order, the reference backend in
     * float64 rounded once; |got - want| <= 1e-5 + 1e-4 |want|, and a relative L2 error of
     * the whole output below 1e-5 */
    double num = 0, den = 0, worst = 0;
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; i++) {
        float w;
        memcpy(&w, (const char *)want->data + 4 * i, 4);
        double d = fabs((double)got[i] - w);
        num += d * d;
        den += (double)w * w;
        nonzero += w != 0.0f;
        ck_assert_msg(d <= 1e-5 + 1e-4 * fabs(w), "%s %s: element %lld: harness %.9g, PyTorch "
                      "%.9g", stem, eval ? "eval" : "train", (long long)i, got[i], w);
        if (d > worst)
            worst = d;
    }
    ck_assert_msg(nonzero > n / 2, "%s: the output is not trivially zero", stem);
    ck_assert_msg(sqrt(num / den) < 1e-5, "%s %s: relative L2 %g", stem, eval ? "eval" : "train",
                  sqrt(num / den));
    free(got);
    ck_tensorset_free(&io);
    tu_free_built(&bc);
    unlink(wpath);
}

START_TEST(small_cnn_matches_pytorch_in_train_mode)
{
    check_against_pytorch("small_cnn", false);
}
END_TEST

START_TEST(small_cnn_matches_pytorch_in_eval_mode)
{
    check_against_pytorch("small_cnn", true);
}
END_TEST

START_TEST(unet3d_matches_pytorch_in_train_mode)
{
    check_against_pytorch("unet3d", false);
}
END_TEST

START_TEST(unet3d_matches_pytorch_in_eval_mode)
{
    check_against_pytorch("unet3d", true);
}
END_TEST

START_TEST(gpt_block_matches_pytorch_in_train_mode)
{
    check_against_pytorch("gpt_block", false);
}
END_TEST

START_TEST(gpt_block_matches_pytorch_in_eval_mode)
{
    check_against_pytorch("gpt_block", true);
}
END_TEST

/* GPT-2's tied head (nanoGPT): one initializer read by the Gather and the head's MatMul
 * imports as one parameter, tok.weight, that the head names with "share"; the forward
 * matches PyTorch's */
START_TEST(gpt_tied_head_imports_as_a_share_and_matches_pytorch)
{
    check_against_pytorch("gpt_tied", false);
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/gpt_tied.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    cJSON *root = NULL;
    ck_tensorset w;
    ck_assert_msg(ck_onnx_import(&m, full, NULL, &root, &w, &err) == CK_OK, "%s", err.msg);
    const cJSON *layers = cJSON_GetObjectItem(root, "layers");
    const cJSON *head = cJSON_GetArrayItem(layers, cJSON_GetArraySize(layers) - 1);
    const cJSON *share = cJSON_GetObjectItem(head, "share");
    ck_assert_msg(cJSON_IsString(share) && strcmp(share->valuestring, "tok.weight") == 0,
                  "the head does not share tok.weight");
    int n_vocab_sized = 0;
    for (int i = 0; i < w.n; i++)
        n_vocab_sized += w.t[i].shape.ndim == 2 && w.t[i].shape.dim[0] == 32 &&
                         w.t[i].shape.dim[1] == 16;
    ck_assert_int_eq(n_vocab_sized, 1); /* the [32, 16] weight is written once */
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    ck_onnx_free(&m);
}
END_TEST

START_TEST(upmix_matches_pytorch_in_train_mode)
{
    check_against_pytorch("upmix", false);
}
END_TEST

START_TEST(upmix_matches_pytorch_in_eval_mode)
{
    check_against_pytorch("upmix", true);
}
END_TEST

/* the generic path: broadcast ops, scalars, a computed mask, reductions, expand, concat */
START_TEST(generic_ops_match_pytorch)
{
    check_against_pytorch("generic_ops", false);
    check_against_pytorch("generic_ops", true);
}
END_TEST

/* Imports fixture stem and checks its layers' ops, in order. */
static cJSON *import_ops(const char *stem, const char *const *want, int n_want)
{
    char rel[256], full[1100];
    snprintf(rel, sizeof rel, "onnx/%s.onnx", stem);
    tu_fixture_path(full, sizeof full, rel);
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    cJSON *root = NULL;
    ck_tensorset w;
    ck_assert_msg(ck_onnx_import(&m, full, NULL, &root, &w, &err) == CK_OK, "%s", err.msg);
    const cJSON *layers = cJSON_GetObjectItem(root, "layers");
    ck_assert_int_eq(cJSON_GetArraySize(layers), n_want);
    for (int i = 0; i < n_want; i++)
        ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(layers, i), "op")->valuestring,
                         want[i]);
    ck_tensorset_free(&w);
    ck_onnx_free(&m);
    return root;
}

/* x * sigmoid(x) is one silu, the erf spelling of GELU one exact gelu, ConvTranspose a
 * conv_transpose2d with its output padding, a product of activations a mul. */
START_TEST(upmix_maps_onto_ops)
{
    static const char *const want[] = {"conv2d", "batchnorm", "silu", "conv_transpose2d",
                                       "gelu", "conv_transpose2d", "tanh", "mul", "dropout",
                                       "softmax", "flatten", "linear"};
    cJSON *root = import_ops("upmix", want, (int)(sizeof want / sizeof want[0]));
    const cJSON *layers = cJSON_GetObjectItem(root, "layers");
    ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetArrayItem(layers, 4), "approximate"));
    const cJSON *gate = cJSON_GetArrayItem(layers, 5);
    ck_assert_int_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(gate, "output_padding"), 0)->valueint, 1);
    ck_assert_int_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(gate, "padding"), 0)->valueint, 1);
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(layers, 9), "dim")->valueint, 1);
    cJSON_Delete(root);
}
END_TEST

/* Keras UpSampling3D / UpSampling2D as tf2onnx writes them (Unsqueeze -> Tile ->
 * [Transpose] -> Reshape per spatial axis, tests/fixtures/onnx/export_keras_models.py):
 * imported as one nearest upsample layer, forward equal to Keras's output. */
START_TEST(keras_upsampling_matches_keras)
{
    check_against_pytorch("keras_upsample", false);
    check_against_pytorch("keras_upsample2d", false);
}
END_TEST

START_TEST(keras_upsampling_maps_onto_one_upsample_layer)
{
    static const char *const want3[] = {"permute", "conv3d", "relu", "maxpool3d", "conv3d",
                                        "upsample3d", "add", "conv3d", "reshape"};
    cJSON *root = import_ops("keras_upsample", want3, (int)(sizeof want3 / sizeof want3[0]));
    const cJSON *sc = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "layers"),
                                                              5), "scale");
    ck_assert_int_eq(cJSON_GetArraySize(sc), 3);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(cJSON_GetArrayItem(sc, k)->valueint, 2);
    cJSON_Delete(root);
    static const char *const want2[] = {"permute", "conv2d", "upsample2d", "conv2d", "permute"};
    root = import_ops("keras_upsample2d", want2, (int)(sizeof want2 / sizeof want2[0]));
    sc = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "layers"), 2), "scale");
    ck_assert_int_eq(cJSON_GetArrayItem(sc, 0)->valueint, 2);
    ck_assert_int_eq(cJSON_GetArrayItem(sc, 1)->valueint, 3);
    cJSON_Delete(root);
}
END_TEST

/* A chain that repeats something else than each spatial element is named and refused. */
START_TEST(keras_repeat_chain_that_is_no_upsampling_is_refused)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/keras_upsample2d.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_int_eq(ck_onnx_load(full, &m, &err), CK_OK);
    int tr = -1; /* the first layout Transpose inside the chain: swap two axes */
    for (int i = 0; i < m.n_nodes && tr < 0; i++)
        if (strcmp(m.nodes[i].op_type, "Tile") == 0)
            for (int j = i + 1; j < m.n_nodes && tr < 0; j++)
                if (strcmp(m.nodes[j].op_type, "Transpose") == 0)
                    tr = j;
    ck_assert(tr >= 0);
    ck_onnx_attr *perm = NULL;
    for (int k = 0; k < m.nodes[tr].n_attr; k++)
        if (strcmp(m.nodes[tr].attr[k].name, "perm") == 0)
            perm = &m.nodes[tr].attr[k];
    ck_assert(perm && perm->n_ints >= 3);
    int64_t t = perm->ints[1];
    perm->ints[1] = perm->ints[2];
    perm->ints[2] = t;
    cJSON *root = NULL;
    ck_tensorset w;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_ptr_null(root);
    ck_assert_msg(strstr(err.msg, "m.onnx: node `") == err.msg && strchr(err.msg, '\n') == NULL,
                  "'%s'", err.msg);
    ck_onnx_free(&m);
}
END_TEST

/* The GPT block's export maps onto the transformer ops one for one: the attention pattern
 * (reshape/transpose heads, q kᵀ / √d, causal mask, softmax, dropout, · v, merge) is one
 * causal attention layer, the spelled-out GELU-tanh one gelu layer. */
START_TEST(gpt_block_maps_onto_transformer_ops)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/gpt_block.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    cJSON *root = NULL;
    ck_tensorset w;
    ck_assert_msg(ck_onnx_import(&m, full, NULL, &root, &w, &err) == CK_OK, "%s", err.msg);
    const cJSON *in = cJSON_GetObjectItem(root, "input");
    ck_assert_str_eq(cJSON_GetObjectItem(in, "dist")->valuestring, "tokens");
    ck_assert_int_eq(cJSON_GetObjectItem(in, "vocab")->valueint, 32);
    static const char *const want[] = {"embedding", "positional", "layernorm", "linear",
                                       "linear", "linear", "attention", "linear", "add",
                                       "layernorm", "linear", "gelu", "linear", "dropout",
                                       "add", "layernorm", "linear"};
    const cJSON *layers = cJSON_GetObjectItem(root, "layers");
    ck_assert_int_eq(cJSON_GetArraySize(layers), (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++) {
        const cJSON *L = cJSON_GetArrayItem(layers, i);
        ck_assert_str_eq(cJSON_GetObjectItem(L, "op")->valuestring, want[i]);
        if (strcmp(want[i], "attention") == 0) {
            ck_assert_int_eq(cJSON_GetObjectItem(L, "heads")->valueint, 2);
            ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(L, "causal")));
            ck_assert(fabs(cJSON_GetObjectItem(L, "scale")->valuedouble - 1 / sqrt(8.0)) < 1e-7);
            ck_assert(fabs(cJSON_GetObjectItem(L, "dropout")->valuedouble - 0.1) < 1e-7);
        }
        if (strcmp(want[i], "gelu") == 0)
            ck_assert_str_eq(cJSON_GetObjectItem(L, "approximate")->valuestring, "tanh");
    }
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    /* a mask that is not causal (one future position let through) is no attention pattern:
     * the generic path imports it as matmuls and a softmax with that mask */
    ck_onnx_tensor *mask = NULL;
    for (int i = 0; i < m.n_inits; i++)
        if (strcmp(m.inits[i].name, "attn.mask") == 0)
            mask = &m.inits[i];
    ck_assert_ptr_nonnull(mask);
    ((float *)mask->data)[1] = 0.0f; /* row 0 sees key 1 */
    ck_assert_msg(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err) == CK_OK, "%s", err.msg);
    bool attention = false, masked = false;
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(root, "layers"))
    {
        const char *op = cJSON_GetObjectItem(L, "op")->valuestring;
        attention |= strcmp(op, "attention") == 0;
        masked |= strcmp(op, "softmax") == 0 && cJSON_GetObjectItem(L, "mask_shape") != NULL;
    }
    ck_assert(!attention && masked);
    const ck_named_tensor *mt = NULL;
    for (int i = 0; i < w.n && !mt; i++)
        mt = strstr(w.t[i].name, ".mask") ? &w.t[i] : NULL;
    ck_assert_ptr_nonnull(mt); /* the mask as written: 0 where row 0 sees key 1 */
    float m01;
    memcpy(&m01, (const char *)mt->data + 4, 4);
    ck_assert(m01 == 0.0f);
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    ((float *)mask->data)[1] = -INFINITY;
    /* a Softmax over another axis is no attention pattern either: a softmax over that dim */
    for (int i = 0; i < m.n_nodes; i++)
        if (strcmp(m.nodes[i].op_type, "Softmax") == 0)
            for (int k = 0; k < m.nodes[i].n_attr; k++)
                if (strcmp(m.nodes[i].attr[k].name, "axis") == 0)
                    m.nodes[i].attr[k].i = 2;
    ck_assert_msg(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err) == CK_OK, "%s", err.msg);
    bool dim2 = false;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(root, "layers"))
        dim2 |= strcmp(cJSON_GetObjectItem(L, "op")->valuestring, "softmax") == 0 &&
                cJSON_GetObjectItem(L, "dim")->valueint == 2;
    ck_assert(dim2);
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    /* token ids read by anything but an embedding: refused before any node is mapped */
    for (int i = 0; i < m.n_nodes; i++)
        if (strcmp(m.nodes[i].op_type, "Gather") == 0) {
            free(m.nodes[i].op_type);
            m.nodes[i].op_type = strdup("GatherElements");
        }
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "m.onnx: input `x` is int64 and no embedding"), "'%s'",
                  err.msg);
    ck_onnx_free(&m);
}
END_TEST

START_TEST(imported_models_checkpoint_bitwise_identically)
{
    static const char *const stems[] = {"small_cnn", "unet3d", "upmix", "gpt_block",
                                        "generic_ops"};
    for (int k = 0; k < 5; k++) {
        tu_built_case bc;
        char wpath[256];
        import_fixture(stems[k], false, true, &bc, wpath, sizeof wpath);
        ck_backend *b = tu_cpu_backend();
        ck_result res;
        ck_error err;
        ck_assert_msg(ck_run_case(b, &bc.g, CK_F32, &res, &err) == CK_OK, "%s", err.msg);
        ck_assert_msg(res.verdict == CK_VERDICT_IDENTICAL, "%s: %s", stems[k],
                      ck_verdict_name(res.verdict));
        ck_assert_int_gt(res.n_segments, 1);
        ck_assert_int_gt(res.ckpt.recomputed_layers, 0);
        ck_assert_msg(res.ckpt.peak_activation_bytes < res.plain.peak_activation_bytes,
                      "%s: checkpointed peak %lld, plain %lld", stems[k],
                      (long long)res.ckpt.peak_activation_bytes,
                      (long long)res.plain.peak_activation_bytes);
        ck_result_free(&res);
        /* the identity compares real numbers: every gradient tensor of the plain run holds a
         * non-zero value */
        ck_record rec;
        ck_assert_msg(ck_train(b, &bc.g, NULL, CK_F32, NULL, &rec, &err) == CK_OK, "%s", err.msg);
        int grads = 0;
        for (int i = 0; i < rec.n; i++) {
            if (rec.e[i].kind != CK_KIND_GRAD)
                continue;
            grads++;
            bool nz = false;
            for (int64_t j = 0; j < ck_shape_numel(&rec.e[i].shape) && !nz; j++)
                nz = ((const float *)rec.e[i].data)[j] != 0.0f;
            ck_assert_msg(nz, "%s: gradient %s is all zero", stems[k], rec.e[i].name);
        }
        /* generic_ops has two linear layers: 4 gradients; the others more */
        ck_assert_int_gt(grads, strcmp(stems[k], "generic_ops") == 0 ? 3 : 4);
        ck_record_free(&rec);
        b->destroy(b);
        tu_free_built(&bc);
        unlink(wpath);
    }
}
END_TEST

/* Casts between float types (export_models.py, CastOps): each value-changing Cast is a
 * `cast` layer with the ONNX types as `to` and `from` (the source's type known from the Cast
 * that made it); the model matches PyTorch's forward, and runs plain vs checkpointed bitwise
 * identically in fp32, fp16 and bf16. */
START_TEST(cast_ops_import_as_casts_and_match_pytorch)
{
    static const char *const want[] = {"cast", "cast", "cast", "cast", "cast", "cast",
                                       "concat", "linear"};
    static const char *const to_from[][2] = {{"float16", "float32"},  {"float32", "float16"},
                                             {"bfloat16", "float32"}, {"float32", "bfloat16"},
                                             {"bfloat16", "float16"}, {"float32", "bfloat16"}};
    cJSON *root = import_ops("cast_ops", want, (int)(sizeof want / sizeof want[0]));
    const cJSON *layers = cJSON_GetObjectItem(root, "layers");
    for (int i = 0; i < 6; i++) {
        const cJSON *L = cJSON_GetArrayItem(layers, i);
        ck_assert_str_eq(cJSON_GetObjectItem(L, "to")->valuestring, to_from[i][0]);
        ck_assert_str_eq(cJSON_GetObjectItem(L, "from")->valuestring, to_from[i][1]);
    }
    cJSON_Delete(root);
    check_against_pytorch("cast_ops", false);
    tu_built_case bc;
    char wpath[256];
    import_fixture("cast_ops", false, true, &bc, wpath, sizeof wpath);
    ck_backend *b = tu_cpu_backend();
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    for (int k = 0; k < 3; k++) {
        ck_result res;
        ck_error err;
        ck_assert_msg(ck_run_case(b, &bc.g, dts[k], &res, &err) == CK_OK, "%s", err.msg);
        ck_assert_msg(res.verdict == CK_VERDICT_IDENTICAL, "cast_ops %s: %s",
                      ck_dtype_name(dts[k]), ck_verdict_name(res.verdict));
        ck_result_free(&res);
    }
    b->destroy(b);
    tu_free_built(&bc);
    unlink(wpath);
}
END_TEST

/* A Cast to an integer type of a float activation is refused naming the node; a float16
 * value read by anything but a Cast (here: the identity Cast to float16 of a float16 value
 * is folded, so the Concat reads float16) is refused, as the case's ops compute in the
 * run's dtype, not in float16. */
START_TEST(cast_to_an_integer_or_compute_in_float16_is_refused)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/cast_ops.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    ck_onnx_attr *to1 = NULL;
    int casts = 0;
    for (int i = 0; i < m.n_nodes; i++)
        if (strcmp(m.nodes[i].op_type, "Cast") == 0 && casts++ == 1)
            for (int k = 0; k < m.nodes[i].n_attr; k++)
                if (strcmp(m.nodes[i].attr[k].name, "to") == 0)
                    to1 = &m.nodes[i].attr[k];
    ck_assert_msg(to1 && to1->i == CK_ONNX_FLOAT, "the second Cast of cast_ops goes back to float");
    cJSON *root = NULL;
    ck_tensorset w;
    to1->i = CK_ONNX_INT64;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "(Cast): a Cast of an activation to int64 is not supported"),
                  "'%s'", err.msg);
    to1->i = CK_ONNX_FLOAT16;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "(Concat): reads `") &&
                      strstr(err.msg, "a float16 value (a Cast made it): an op computed in "
                                      "float16 is not supported"),
                  "'%s'", err.msg);
    ck_onnx_free(&m);
}
END_TEST

/* ---- malformed and unsupported ---- */

static void refuse(const char *desc, const void *buf, size_t len, const char *fragment)
{
    ck_onnx_model m;
    ck_error err;
    ck_status st = ck_onnx_parse(buf, len, "bad.onnx", &m, &err);
    ck_assert_msg(st == CK_ERR_INPUT, "%s: status %d", desc, (int)st);
    ck_assert_msg(strncmp(err.msg, "bad.onnx: onnx: ", 16) == 0, "%s: '%s'", desc, err.msg);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "%s: one line", desc);
    ck_assert_msg(strstr(err.msg, fragment) != NULL, "%s: '%s' lacks '%s'", desc, err.msg, fragment);
    ck_assert_int_eq(m.n_nodes, 0);
}

START_TEST(malformed_files_are_refused_with_one_line)
{
    static const unsigned char long_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                                0xff, 0xff, 0xff, 0xff, 0x7f};
    static const unsigned char truncated_varint[] = {0x08, 0xff};
    static const unsigned char past_end[] = {0x3a, 0x10, 0x0a};    /* graph of 16 bytes, 1 left */
    static const unsigned char group_wire[] = {0x0b};             /* field 1, wire type 3 */
    static const unsigned char wrong_wire[] = {0x3d, 0, 0, 0, 0}; /* graph as fixed32 */
    static const unsigned char no_graph[] = {0x08, 0x07};          /* ir_version 7 only */
    static const unsigned char field_zero[] = {0x00};
    /* graph { initializer { dims: 2, data_type FLOAT, raw_data 4 bytes (needs 8) } } */
    static const unsigned char short_raw[] = {0x3a, 0x0c, 0x2a, 0x0a, 0x08, 0x02, 0x10, 0x01,
                                              0x4a, 0x04, 0, 0, 0, 0};
    /* graph { initializer { dims: -1 } } */
    static const unsigned char negative_dim[] = {0x3a, 0x0f, 0x2a, 0x0d, 0x08, 0xff, 0xff, 0xff,
                                                 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x10, 0x01};
    /* graph { node { name: "a\0" } } */
    static const unsigned char nul_name[] = {0x3a, 0x06, 0x0a, 0x04, 0x1a, 0x02, 'a', 0};
    /* graph { initializer { data_type FLOAT, data_location EXTERNAL, no location } } */
    static const unsigned char external[] = {0x3a, 0x06, 0x2a, 0x04, 0x10, 0x01, 0x70, 0x01};
    refuse("empty", "", 0, "empty file");
    refuse("long varint", long_varint, sizeof long_varint, "varint");
    refuse("truncated varint", truncated_varint, sizeof truncated_varint, "truncated varint");
    refuse("past end", past_end, sizeof past_end, "runs past the end");
    refuse("group", group_wire, sizeof group_wire, "wire type 3");
    refuse("wrong wire type", wrong_wire, sizeof wrong_wire, "wire type 5, expected 2");
    refuse("no graph", no_graph, sizeof no_graph, "no graph");
    refuse("field 0", field_zero, sizeof field_zero, "field number 0");
    refuse("short raw_data", short_raw, sizeof short_raw, "raw_data holds 4 bytes");
    refuse("negative dim", negative_dim, sizeof negative_dim, "negative");
    refuse("NUL in a name", nul_name, sizeof nul_name, "NUL");
    refuse("external data", external, sizeof external, "external data without a location");
}
END_TEST

START_TEST(every_truncation_of_a_real_model_is_refused_cleanly)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/small_cnn.onnx");
    void *p;
    size_t len;
    ck_error err;
    ck_assert_int_eq(ck_map_file(full, &p, &len, &err), CK_OK);
    int ok = 0;
    for (size_t cut = 0; cut < len; cut += 7) {
        ck_onnx_model m;
        ck_status st = ck_onnx_parse(p, cut, "cut.onnx", &m, &err);
        if (st == CK_OK) { /* a cut at a field boundary can still be a whole message */
            ok++;
            ck_onnx_free(&m);
        } else {
            ck_assert_msg(st == CK_ERR_INPUT, "cut %zu: status %d", cut, (int)st);
            ck_assert_msg(strchr(err.msg, '\n') == NULL, "cut %zu: one line", cut);
        }
    }
    ck_onnx_model m;
    ck_assert_int_eq(ck_onnx_parse(p, len, "whole.onnx", &m, &err), CK_OK);
    ck_assert_int_gt(m.n_nodes, 5);
    ck_assert_int_gt(m.n_inits, 5);
    ck_onnx_free(&m);
    ck_unmap_file(p, len);
    ck_assert_int_lt(ok, 5);
}
END_TEST

/* An unsupported node: its name, op type and the reason, one line. */
START_TEST(unsupported_nodes_are_named)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/small_cnn.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_int_eq(ck_onnx_load(full, &m, &err), CK_OK);
    /* turn the first Relu into an op the harness lacks, and the first conv into a grouped one */
    int relu = -1, conv = -1;
    for (int i = 0; i < m.n_nodes; i++) {
        if (relu < 0 && strcmp(m.nodes[i].op_type, "Relu") == 0)
            relu = i;
        if (conv < 0 && strcmp(m.nodes[i].op_type, "Conv") == 0)
            conv = i;
    }
    ck_assert(relu >= 0 && conv >= 0);
    char *saved = m.nodes[relu].op_type;
    m.nodes[relu].op_type = strdup("Softplus");
    cJSON *root = NULL;
    ck_tensorset w;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_ptr_null(root);
    ck_assert_msg(strstr(err.msg, "m.onnx: node `") == err.msg, "'%s'", err.msg);
    ck_assert_msg(strstr(err.msg, "(Softplus): op type Softplus is not supported"), "'%s'", err.msg);
    free(m.nodes[relu].op_type);
    m.nodes[relu].op_type = saved;
    for (int k = 0; k < m.nodes[conv].n_attr; k++)
        if (strcmp(m.nodes[conv].attr[k].name, "group") == 0)
            m.nodes[conv].attr[k].i = 2;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "(Conv): grouped convolution (group 2)"), "'%s'", err.msg);
    ck_onnx_free(&m);
}
END_TEST

/* Found by fuzz_onnx: a value name holding newlines reached a message unescaped. */
START_TEST(names_with_control_characters_stay_on_one_line)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/bad_newline_input.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    cJSON *root = NULL;
    ck_tensorset w;
    ck_assert_int_eq(ck_onnx_import(&m, full, NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_ptr_null(root);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "'%s' is one line", err.msg);
    ck_assert_msg(strstr(err.msg, "\\n") != NULL, "'%s' shows the newline escaped", err.msg);
    ck_onnx_free(&m);
}
END_TEST

/* Found by fuzz_onnx: dims claiming 12 GB with 432 bytes of raw_data made the reader
 * allocate the dims' size before checking the data; it must refuse first. */
START_TEST(dims_larger_than_the_data_are_refused_before_allocating)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/bad_huge_dims.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_int_eq(ck_onnx_load(full, &m, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "raw_data holds 432 bytes, its dims and type need 12481646544"),
                  "'%s'", err.msg);
}
END_TEST

/* Found by fuzz_onnx: a MatMul's bias Add without outputs, and an Erf without outputs in
 * the GELU pattern, were read at out[0] (a crash). Every node is validated before any
 * pattern is matched: one line naming the node. */
static void refuse_without_outputs(const char *op_after, const char *op)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/gpt_block.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    int victim = -1;
    for (int i = 1; i < m.n_nodes && victim < 0; i++)
        if (strcmp(m.nodes[i].op_type, op) == 0 &&
            (!op_after || strcmp(m.nodes[i - 1].op_type, op_after) == 0))
            victim = i;
    ck_assert_msg(victim >= 0, "gpt_block has a %s node", op);
    int saved = m.nodes[victim].n_out;
    m.nodes[victim].n_out = 0;
    cJSON *root = NULL;
    ck_tensorset w;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_ptr_null(root);
    /* "m.onnx: node `...`" or, where the node's name carries its module,
     * "m.onnx: module attn.q: node `/attn/q/Add` ..." */
    ck_assert_msg(strstr(err.msg, "m.onnx: ") == err.msg && strstr(err.msg, "node `") &&
                      strstr(err.msg, "has no output"),
                  "'%s'", err.msg);
    m.nodes[victim].n_out = saved;
    ck_onnx_free(&m);
}

START_TEST(nodes_without_outputs_are_refused_before_matching)
{
    refuse_without_outputs("MatMul", "Add");
    refuse_without_outputs(NULL, "Tanh"); /* the tanh-form GELU reads its output */
}
END_TEST

/* A known op with the wrong number of inputs, or a value produced by two nodes. */
START_TEST(node_arity_and_values_bound_twice_are_refused)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/small_cnn.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    int conv = -1, relu = -1;
    for (int i = 0; i < m.n_nodes; i++) {
        if (conv < 0 && strcmp(m.nodes[i].op_type, "Conv") == 0)
            conv = i;
        if (relu < 0 && strcmp(m.nodes[i].op_type, "Relu") == 0)
            relu = i;
    }
    ck_assert(conv >= 0 && relu >= 0);
    cJSON *root = NULL;
    ck_tensorset w;
    int saved_in = m.nodes[conv].n_in;
    m.nodes[conv].n_in = 1;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "(Conv): has 1 inputs; Conv takes 2 to 3"), "'%s'", err.msg);
    m.nodes[conv].n_in = saved_in;
    char *saved_out = m.nodes[relu].out[0];
    m.nodes[relu].out[0] = m.nodes[conv].out[0];
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "is produced more than once"), "'%s'", err.msg);
    m.nodes[relu].out[0] = saved_out;
    ck_onnx_free(&m);
}
END_TEST

/* Values are judged as the user wrote them: ONNX momentum 2 (not the converted -1), a NaN
 * attribute (not "got null"), a 0 input dim (not "symbolic"). */
START_TEST(messages_show_the_values_the_file_holds)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/small_cnn.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    cJSON *root = NULL;
    ck_tensorset w;
    ck_onnx_attr *mom = NULL;
    for (int i = 0; i < m.n_nodes && !mom; i++)
        if (strcmp(m.nodes[i].op_type, "BatchNormalization") == 0)
            for (int k = 0; k < m.nodes[i].n_attr; k++)
                if (strcmp(m.nodes[i].attr[k].name, "momentum") == 0)
                    mom = &m.nodes[i].attr[k];
    ck_assert_msg(mom != NULL, "small_cnn has a BatchNormalization with a momentum");
    double saved = mom->f;
    mom->f = 2.0;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "momentum 2 is outside [0, 1]"), "'%s'", err.msg);
    mom->f = NAN;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "attribute `momentum` holds NaN"), "'%s'", err.msg);
    mom->f = saved;
    int64_t d0 = m.inputs[0].dims[0];
    m.inputs[0].dims[0] = 0;
    ck_assert_int_eq(ck_onnx_import(&m, "m.onnx", NULL, &root, &w, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "dim 0 is 0") && !strstr(err.msg, "symbolic"), "'%s'", err.msg);
    m.inputs[0].dims[0] = d0;
    ck_onnx_free(&m);
}
END_TEST

Suite *suite_onnx(void)
{
    Suite *s = suite_create("onnx");
    TCase *tc = tcase_create("faithful");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, small_cnn_matches_pytorch_in_train_mode);
    tcase_add_test(tc, small_cnn_matches_pytorch_in_eval_mode);
    tcase_add_test(tc, unet3d_matches_pytorch_in_train_mode);
    tcase_add_test(tc, unet3d_matches_pytorch_in_eval_mode);
    tcase_add_test(tc, upmix_matches_pytorch_in_train_mode);
    tcase_add_test(tc, upmix_matches_pytorch_in_eval_mode);
    tcase_add_test(tc, generic_ops_match_pytorch);
    tcase_add_test(tc, cast_ops_import_as_casts_and_match_pytorch);
    tcase_add_test(tc, cast_to_an_integer_or_compute_in_float16_is_refused);
    tcase_add_test(tc, upmix_maps_onto_ops);
    tcase_add_test(tc, gpt_block_matches_pytorch_in_train_mode);
    tcase_add_test(tc, gpt_block_matches_pytorch_in_eval_mode);
    tcase_add_test(tc, gpt_tied_head_imports_as_a_share_and_matches_pytorch);
    tcase_add_test(tc, gpt_block_maps_onto_transformer_ops);
    tcase_add_test(tc, imported_models_checkpoint_bitwise_identically);
    tcase_add_test(tc, keras_upsampling_matches_keras);
    tcase_add_test(tc, keras_upsampling_maps_onto_one_upsample_layer);
    tcase_add_test(tc, keras_repeat_chain_that_is_no_upsampling_is_refused);
    suite_add_tcase(s, tc);
    TCase *bad = tcase_create("refused");
    tcase_set_timeout(bad, 60);
    tcase_add_test(bad, malformed_files_are_refused_with_one_line);
    tcase_add_test(bad, every_truncation_of_a_real_model_is_refused_cleanly);
    tcase_add_test(bad, unsupported_nodes_are_named);
    tcase_add_test(bad, names_with_control_characters_stay_on_one_line);
    tcase_add_test(bad, dims_larger_than_the_data_are_refused_before_allocating);
    tcase_add_test(bad, nodes_without_outputs_are_refused_before_matching);
    tcase_add_test(bad, node_arity_and_values_bound_twice_are_refused);
    tcase_add_test(bad, messages_show_the_values_the_file_holds);
    suite_add_tcase(s, bad);
    return s;
}
