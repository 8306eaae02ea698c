/*
 * ONNX external data (harness/io/onnx_external.c): tensors whose bytes live in
 * MODEL.onnx.data beside the model are attached from files inside the model's folder only,
 * with offset + size inside the file and the size equal to the dims'; every refusal is one
 * line naming the tensor. Also the module names refusals carry (ck_onnx_module_of).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/io/onnx.h"
#include "harness/model/onnx_import.h"
#include "tests/test_util.h"

/* ---- a tiny protobuf writer for hand-made models ---- */

typedef struct {
    unsigned char b[4096];
    size_t n;
} pbuf;

static void put_varint(pbuf *p, uint64_t v)
{
    do {
        unsigned char c = v & 0x7f;
        v >>= 7;
        p->b[p->n++] = c | (v ? 0x80 : 0);
    } while (v);
}

static void put_tag(pbuf *p, unsigned field, unsigned wt)
{
    put_varint(p, ((uint64_t)field << 3) | wt);
}

static void put_bytes(pbuf *p, unsigned field, const void *data, size_t len)
{
    put_tag(p, field, 2);
    put_varint(p, len);
    memcpy(p->b + p->n, data, len);
    p->n += len;
}

static void put_str(pbuf *p, unsigned field, const char *s)
{
    put_bytes(p, field, s, strlen(s));
}

static void put_entry(pbuf *p, const char *key, const char *value)
{
    pbuf e = {.n = 0};
    put_str(&e, 1, key);
    put_str(&e, 2, value);
    put_bytes(p, 13, e.b, e.n);
}

/* A model whose graph holds one float initializer `w` of dims {4} stored externally at
 * `location` (NULL: no location entry) with the given offset/length texts (NULL: none);
 * extra_raw adds raw_data too. */
static void external_model(pbuf *model, const char *location, const char *offset,
                           const char *length, bool extra_raw, int data_location)
{
    pbuf t = {.n = 0}, g = {.n = 0};
    put_tag(&t, 1, 0);
    put_varint(&t, 4); /* dims */
    put_tag(&t, 2, 0);
    put_varint(&t, 1); /* FLOAT */
    put_str(&t, 8, "w");
    if (location)
        put_entry(&t, "location", location);
    if (offset)
        put_entry(&t, "offset", offset);
    if (length)
        put_entry(&t, "length", length);
    if (extra_raw) {
        float z[4] = {0};
        put_bytes(&t, 9, z, sizeof z);
    }
    put_tag(&t, 14, 0);
    put_varint(&t, (uint64_t)data_location);
    put_bytes(&g, 5, t.b, t.n);
    model->n = 0;
    put_tag(model, 1, 0);
    put_varint(model, 8);
    put_bytes(model, 7, g.b, g.n);
}

static void refuse_parse(const char *desc, const pbuf *p, const char *fragment)
{
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_parse(p->b, p->n, "x.onnx", &m, &err) == CK_ERR_INPUT, "%s", desc);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "%s: one line", desc);
    ck_assert_msg(strstr(err.msg, fragment), "%s: '%s' lacks '%s'", desc, err.msg, fragment);
}

START_TEST(external_tensors_are_attached_from_a_buffer_with_bounds_checked)
{
    pbuf p;
    external_model(&p, "x.onnx.data", "8", "16", false, 1);
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_parse(p.b, p.n, "x.onnx", &m, &err) == CK_OK, "%s", err.msg);
    const ck_onnx_tensor *w = ck_onnx_external_pending(&m);
    ck_assert_ptr_nonnull(w);
    ck_assert_str_eq(w->ext_location, "x.onnx.data");
    ck_assert_int_eq((int)w->ext_offset, 8);
    ck_assert_int_eq((int)w->nbytes, 16);
    /* the importer refuses a model whose external data was never attached */
    cJSON *root = NULL;
    ck_tensorset ws;
    ck_assert_int_eq(ck_onnx_import(&m, "x.onnx", NULL, &root, &ws, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "tensor `w`: its external data (`x.onnx.data`) was not loaded"),
                  "'%s'", err.msg);
    float data[6] = {9, 9, 1.5f, -2, 3, 4};
    /* 23 bytes: offset 8 + 16 runs one byte past the end */
    ck_assert_int_eq(ck_onnx_attach_external(&m, "x.onnx.data", data, 23, "d", &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "d: onnx: tensor `w`: external data at offset 8 + 16 bytes runs "
                         "past the end of the file (23 bytes)"), "'%s'", err.msg);
    /* another file's data is not this tensor's */
    ck_assert_int_eq(ck_onnx_attach_external(&m, "other.data", data, sizeof data, "o", &err), CK_OK);
    ck_assert_ptr_nonnull(ck_onnx_external_pending(&m));
    ck_assert_int_eq(ck_onnx_attach_external(&m, "x.onnx.data", data, sizeof data, "d", &err), CK_OK);
    ck_assert_ptr_null(ck_onnx_external_pending(&m));
    ck_assert(((const float *)m.inits[0].data)[0] == 1.5f);
    ck_assert(((const float *)m.inits[0].data)[3] == 4.0f);
    ck_onnx_free(&m);
}
END_TEST

START_TEST(bad_external_data_entries_are_refused_with_one_line)
{
    pbuf p;
    external_model(&p, "../secret.bin", NULL, NULL, false, 1);
    refuse_parse("dotdot", &p, "tensor `w`: external data location `../secret.bin` leaves the "
                               "model's folder");
    external_model(&p, "/etc/passwd", NULL, NULL, false, 1);
    refuse_parse("absolute", &p, "is an absolute path");
    external_model(&p, "a//b", NULL, NULL, false, 1);
    refuse_parse("empty component", &p, "holds an empty path component");
    external_model(&p, "a\\b", NULL, NULL, false, 1);
    refuse_parse("backslash", &p, "holds a backslash");
    external_model(&p, "", NULL, NULL, false, 1);
    refuse_parse("empty", &p, "is empty");
    external_model(&p, NULL, "0", NULL, false, 1);
    refuse_parse("no location", &p, "external data without a location");
    external_model(&p, "d", "0", "12", false, 1);
    refuse_parse("length", &p, "external data length 12, its dims and type need 16");
    external_model(&p, "d", "-4", NULL, false, 1);
    refuse_parse("negative offset", &p, "external data offset `-4` is not a decimal number");
    external_model(&p, "d", "99999999999999999999999", NULL, false, 1);
    refuse_parse("offset overflow", &p, "overflows 64 bits");
    external_model(&p, "d", "18446744073709551610", NULL, false, 1);
    refuse_parse("offset + size overflow", &p, "offset 18446744073709551610 + 16 bytes overflows");
    external_model(&p, "d", NULL, NULL, true, 1);
    refuse_parse("both", &p, "data_location is EXTERNAL but data is inside the file too");
    external_model(&p, "d", NULL, NULL, false, 0);
    refuse_parse("entries without EXTERNAL", &p, "external_data entries without data_location "
                                                 "EXTERNAL");
    external_model(&p, "d", NULL, NULL, false, 7);
    refuse_parse("data_location 7", &p, "data_location 7 is not DEFAULT (0) or EXTERNAL (1)");
    pbuf t = {.n = 0}, g = {.n = 0};
    put_tag(&t, 2, 0);
    put_varint(&t, 1);
    put_entry(&t, "basepath", "x");
    put_tag(&t, 14, 0);
    put_varint(&t, 1);
    put_bytes(&g, 5, t.b, t.n);
    p.n = 0;
    put_bytes(&p, 7, g.b, g.n);
    refuse_parse("unknown key", &p, "external data key `basepath` is not one of location, offset, "
                                    "length, checksum");
}
END_TEST

/* ---- files ---- */

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

START_TEST(external_files_are_read_only_inside_the_models_folder)
{
    char dir[] = "/tmp/ck_test_onnx_ext_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char sub[128], model[160], data[160], outside[160], link[160];
    snprintf(sub, sizeof sub, "%s/m", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    snprintf(model, sizeof model, "%s/model.onnx", sub);
    snprintf(data, sizeof data, "%s/model.onnx.data", sub);
    snprintf(outside, sizeof outside, "%s/outside.bin", dir);
    snprintf(link, sizeof link, "%s/link.data", sub);
    float w[4] = {1, 2, 3, 4};
    write_file(data, w, sizeof w);
    write_file(outside, w, sizeof w);
    ck_assert_int_eq(symlink(outside, link), 0);
    pbuf p;
    ck_onnx_model m;
    ck_error err;
    /* inside the folder: attached */
    external_model(&p, "model.onnx.data", NULL, "16", false, 1);
    write_file(model, p.b, p.n);
    ck_assert_msg(ck_onnx_load(model, &m, &err) == CK_OK, "%s", err.msg);
    ck_assert(((const float *)m.inits[0].data)[2] == 3.0f);
    ck_onnx_free(&m);
    /* a symbolic link out of the folder: refused */
    external_model(&p, "link.data", NULL, NULL, false, 1);
    write_file(model, p.b, p.n);
    ck_assert_int_eq(ck_onnx_load(model, &m, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "tensor `w`: external data file `link.data` resolves to") &&
                  strstr(err.msg, "outside the model's folder"), "'%s'", err.msg);
    ck_assert_int_eq(m.n_inits, 0);
    /* a missing file: named */
    external_model(&p, "gone.data", NULL, NULL, false, 1);
    write_file(model, p.b, p.n);
    ck_assert_int_eq(ck_onnx_load(model, &m, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "tensor `w`: external data file") && strstr(err.msg, "gone.data"),
                  "'%s'", err.msg);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "one line");
    /* a file too short for offset + size */
    external_model(&p, "model.onnx.data", "4", NULL, false, 1);
    write_file(model, p.b, p.n);
    ck_assert_int_eq(ck_onnx_load(model, &m, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "runs past the end of the file (16 bytes)"), "'%s'", err.msg);
    unlink(link);
    unlink(model);
    unlink(data);
    unlink(outside);
    rmdir(sub);
    rmdir(dir);
}
END_TEST

/* ---- module names ---- */

START_TEST(module_names_come_from_the_exporters_scopes)
{
    static const struct {
        const char *node, *module;
    } rows[] = {
        {"/blocks.0/attn/Split", "blocks.0.attn"},
        {"/layer1/layer1.0/conv1/Conv", "layer1.0.conv1"},
        {"/features/features.0/Conv", "features.0"},
        {"/attn/Add", "attn"},
        {"/Split", ""},
        {"Conv_0", ""},
        {"node_conv2d", ""},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char out[128];
        ck_onnx_module_of(rows[i].node, out, sizeof out);
        ck_assert_msg(strcmp(out, rows[i].module) == 0, "%s: `%s`, want `%s`", rows[i].node, out,
                      rows[i].module);
    }
    char tiny[6];
    ck_onnx_module_of("/blocks.0/attn/Split", tiny, sizeof tiny);
    ck_assert_str_eq(tiny, "block");
}
END_TEST

START_TEST(dynamo_module_names_come_from_the_node_metadata)
{
    static const struct {
        const char *scopes, *module;
    } rows[] = {
        {"['', 'h.0', 'h.0.attn', 'view_1']", "h.0.attn"},
        {"['', 'layer1', 'layer1.0', 'layer1.0.bn1', '_native_batch_norm_legit_functional_1']",
         "layer1.0.bn1"},
        {"['', 'add_2']", ""},       /* the root module */
        {"['x']", ""},
        {"[\"a'b\", 'mean']", "a'b"}, /* Python's repr of a name holding a quote */
        {"['a\\'b', 'mean']", "a'b"},
        {"[]", ""},
        {"", ""},
        {"['h.0', 'view'", ""},       /* malformed: no closing bracket */
        {"['h.0' 'view']", ""},
        {"['h.0', view]", ""},
        {"['h.0, 'view']", ""},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char out[128];
        ck_onnx_scopes_module(rows[i].scopes, out, sizeof out);
        ck_assert_msg(strcmp(out, rows[i].module) == 0, "%s: `%s`, want `%s`", rows[i].scopes,
                      out, rows[i].module);
    }
    char out[64];
    ck_onnx_scopes_module(NULL, out, sizeof out);
    ck_assert_str_eq(out, "");
    /* the committed dynamo export: modules from the metadata, a node the exporter's
     * optimiser made has none; a TorchScript export's name scopes come first */
    char path[1100];
    tu_fixture_path(path, sizeof path, "onnx/corpus/nanogpt_dynamo.onnx");
    ck_onnx_model m;
    ck_error err;
    ck_assert_msg(ck_onnx_load(path, &m, &err) == CK_OK, "%s", err.msg);
    static const char *const want[][2] = {{"node_view_1", "h.0.attn"},
                                          {"node_layer_norm", "h.0.ln_1"},
                                          {"node_softmax_1", "h.1.attn"},
                                          {"node_Split_79", ""}};
    int found = 0;
    for (int i = 0; i < m.n_nodes; i++)
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
            if (strcmp(m.nodes[i].name, want[k][0]) == 0) {
                ck_onnx_node_module(&m.nodes[i], out, sizeof out);
                ck_assert_msg(strcmp(out, want[k][1]) == 0, "%s: `%s`", want[k][0], out);
                found++;
            }
    ck_assert_int_eq(found, 4);
    ck_onnx_node scoped = m.nodes[0];
    scoped.name = "/blocks.0/attn/Split";
    ck_onnx_node_module(&scoped, out, sizeof out);
    ck_assert_str_eq(out, "blocks.0.attn");
    ck_onnx_free(&m);
}
END_TEST

Suite *suite_onnx_external(void)
{
    Suite *s = suite_create("onnx_external");
    TCase *tc = tcase_create("external");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, external_tensors_are_attached_from_a_buffer_with_bounds_checked);
    tcase_add_test(tc, dynamo_module_names_come_from_the_node_metadata);
    tcase_add_test(tc, bad_external_data_entries_are_refused_with_one_line);
    tcase_add_test(tc, external_files_are_read_only_inside_the_models_folder);
    tcase_add_test(tc, module_names_come_from_the_exporters_scopes);
    suite_add_tcase(s, tc);
    return s;
}
