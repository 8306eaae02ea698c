/*
 * Weights as torch's dynamo exporter writes them (tests/fixtures/onnx/make_folded_models.py):
 * a Transpose(fc.weight) folded into a new initializer val_N, with its value_info metadata
 * folded_from naming the parameter, is imported as fc.weight in the module's orientation;
 * a record that names several parameters or a name the graph already uses keeps val_N; a
 * tied weight read through its folded transpose is one parameter, shared, only when the two
 * reads are equal element by element; one parameter read in two orientations is refused.
 * Also the reader's metadata texts (harness/io/onnx_metadata.c).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/onnx.h"
#include "harness/model/onnx_import.h"
#include "tests/test_util.h"

/* Imports fixture onnx/<stem>.onnx; returns the status, the case and weights on success. */
static ck_status import_fixture(const char *stem, cJSON **root, ck_tensorset *w,
                                ck_onnx_origins *origins, ck_error *err)
{
    char rel[256], full[1100];
    snprintf(rel, sizeof rel, "onnx/%s.onnx", stem);
    tu_fixture_path(full, sizeof full, rel);
    ck_onnx_model m;
    ck_assert_msg(ck_onnx_load(full, &m, err) == CK_OK, "%s", err->msg);
    ck_onnx_import_opts o = {.name = stem, .weights_path = "w.safetensors", .origins = origins};
    ck_status st = ck_onnx_import(&m, full, &o, root, w, err);
    ck_onnx_free(&m);
    return st;
}

static const cJSON *layer_named(const cJSON *root, const char *name)
{
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(root, "layers"))
    if (strcmp(cJSON_GetObjectItem(L, "name")->valuestring, name) == 0)
        return L;
    return NULL;
}

static const ck_onnx_origin *origin_of(const ck_onnx_origins *os, const char *param)
{
    for (int i = 0; i < os->n; i++)
        if (strcmp(os->o[i].param, param) == 0)
            return &os->o[i];
    return NULL;
}

START_TEST(a_folded_weight_is_named_and_oriented_as_its_parameter)
{
    cJSON *root;
    ck_tensorset w;
    ck_onnx_origins os;
    ck_error err;
    ck_assert_msg(import_fixture("folded_linear", &root, &w, &os, &err) == CK_OK, "%s", err.msg);
    ck_assert_ptr_nonnull(layer_named(root, "fc"));
    const ck_named_tensor *t = ck_tensorset_find(&w, "fc.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->shape.ndim, 2); /* nn.Linear's (out, in), not val_0's (in, out) */
    ck_assert_int_eq((int)t->shape.dim[0], 4);
    ck_assert_int_eq((int)t->shape.dim[1], 3);
    for (int i = 0; i < 12; i++) /* fc.weight = (arange(12).reshape(4, 3) - 5.5) / 8 */
        ck_assert_msg(((const float *)t->data)[i] == ((float)i - 5.5f) / 8, "element %d", i);
    const ck_onnx_origin *o = origin_of(&os, "fc.weight");
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(o->source, "fc.weight");
    ck_assert(!o->transposed);
    ck_assert_ptr_null(ck_tensorset_find(&w, "val_0.weight"));
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    ck_onnx_origins_free(&os);
}
END_TEST

/* several sources, or a source whose name the graph already uses (the input x): the
 * file's own name stands, so --check-against cannot match it and refuses */
START_TEST(an_ambiguous_or_taken_fold_keeps_the_files_name)
{
    static const char *const stems[] = {"folded_ambiguous", "folded_taken"};
    for (int k = 0; k < 2; k++) {
        cJSON *root;
        ck_tensorset w;
        ck_onnx_origins os;
        ck_error err;
        ck_assert_msg(import_fixture(stems[k], &root, &w, &os, &err) == CK_OK, "%s", err.msg);
        ck_assert_msg(layer_named(root, "val_0") && !layer_named(root, "fc"), "%s", stems[k]);
        const ck_onnx_origin *o = origin_of(&os, "val_0.weight");
        ck_assert_ptr_nonnull(o);
        ck_assert_str_eq(o->source, "val_0");
        ck_assert(o->transposed);
        cJSON_Delete(root);
        ck_tensorset_free(&w);
        ck_onnx_origins_free(&os);
    }
}
END_TEST

START_TEST(a_tied_head_through_its_folded_transpose_is_one_shared_parameter)
{
    cJSON *root;
    ck_tensorset w;
    ck_onnx_origins os;
    ck_error err;
    ck_assert_msg(import_fixture("folded_tied", &root, &w, &os, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(w.n, 1);
    ck_assert_ptr_nonnull(ck_tensorset_find(&w, "tok.weight"));
    const cJSON *head = layer_named(root, "node_linear");
    ck_assert_ptr_nonnull(head);
    const cJSON *share = cJSON_GetObjectItem(head, "share");
    ck_assert_msg(cJSON_IsString(share) && strcmp(share->valuestring, "tok.weight") == 0,
                  "the head does not share tok.weight");
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    ck_onnx_origins_free(&os);
}
END_TEST

static void refused(const char *stem, const char *fragment)
{
    cJSON *root = NULL;
    ck_tensorset w;
    ck_onnx_origins os;
    ck_error err;
    ck_assert_int_eq(import_fixture(stem, &root, &w, &os, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, fragment) && !strchr(err.msg, '\n'), "%s: '%s' lacks '%s'",
                  stem, err.msg, fragment);
    ck_onnx_origins_free(&os);
}

START_TEST(unequal_tied_reads_and_two_orientations_are_refused)
{
    /* one element of the folded transpose differs by 2^-10 */
    refused("folded_tied_unequal", "`val_1` (from `tok.weight`) is not equal element by element "
                                   "to tok.weight, which holds the same parameter: not tied");
    refused("two_orientations", "module head: node `/head/MatMul` (MatMul): parameter `t.weight` "
                                "would be held here transposed and by t.weight as stored: a case "
                                "cannot tie a parameter to its transpose");
}
END_TEST

START_TEST(the_reader_keeps_folded_from_records_and_parameter_names)
{
    char full[1100];
    tu_fixture_path(full, sizeof full, "onnx/folded_tied.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(full, &m, &err) == CK_OK, "%s", err.msg);
    const ck_onnx_fold *f = ck_onnx_fold_find(&m, "val_1");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(f->n_src, 1);
    ck_assert_str_eq(f->src[0], "tok.weight");
    ck_assert_int_eq(m.n_torch_params, 2);
    ck_assert(ck_onnx_is_torch_param(&m, "tok.weight") && ck_onnx_is_torch_param(&m, "head.weight"));
    ck_assert(!ck_onnx_is_torch_param(&m, "ids"));
    /* texts that are not a list of plain quoted names are skipped, never trusted */
    static const char *const skipped[] = {"[a]", "['a'] x", "['a\\'b']", "['a', ]", "['a'",
                                          "", "x['a']", "['a' 'b']"};
    for (int i = 0; i < (int)(sizeof skipped / sizeof skipped[0]); i++) {
        ck_assert_int_eq(ck_onnx_add_fold(&m, "v", skipped[i], strlen(skipped[i])), CK_OK);
        ck_assert_msg(!ck_onnx_fold_find(&m, "v"), "'%s' was kept", skipped[i]);
    }
    const char two[] = " [ 'a.weight' , 'val_3' ] ";
    ck_assert_int_eq(ck_onnx_add_fold(&m, "v", two, sizeof two - 1), CK_OK);
    f = ck_onnx_fold_find(&m, "v");
    ck_assert(f && f->n_src == 2 && strcmp(f->src[1], "val_3") == 0);
    /* a length that stops inside the text: what lies beyond is not read */
    const char cut[] = "['b.weight']";
    ck_assert_int_eq(ck_onnx_add_fold(&m, "w", cut, 5), CK_OK);
    ck_assert_ptr_null(ck_onnx_fold_find(&m, "w"));
    const char sig[] = "p_q: PARAMETER target='q.weight'\nb: BUFFER target='mask'\n"
                       "p_r: PARAMETER target=''\np_s: PARAMETER target='s.bias";
    ck_assert_int_eq(ck_onnx_add_signature(&m, sig, sizeof sig - 1), CK_OK);
    ck_assert(ck_onnx_is_torch_param(&m, "q.weight") && !ck_onnx_is_torch_param(&m, "mask"));
    ck_assert_int_eq(m.n_torch_params, 3); /* the empty and the unterminated ones skipped */
    ck_onnx_free(&m);
}
END_TEST

Suite *suite_onnx_folded(void)
{
    Suite *s = suite_create("onnx_folded");
    TCase *tc = tcase_create("folded");
    tcase_add_test(tc, a_folded_weight_is_named_and_oriented_as_its_parameter);
    tcase_add_test(tc, an_ambiguous_or_taken_fold_keeps_the_files_name);
    tcase_add_test(tc, a_tied_head_through_its_folded_transpose_is_one_shared_parameter);
    tcase_add_test(tc, unequal_tied_reads_and_two_orientations_are_refused);
    tcase_add_test(tc, the_reader_keeps_folded_from_records_and_parameter_names);
    suite_add_tcase(s, tc);
    return s;
}
