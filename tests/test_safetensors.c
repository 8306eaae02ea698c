/*
 * safetensors reader and writer, the named tensor set, dumps and their manifest:
 * round trips of every dtype bit for bit, the reference writer's files (fixtures made by
 * tests/fixtures/make_fixtures.py), every malformed-file class refused with one line,
 * and the shared helpers (directory loading, copy_into, UTF-8, one-line errors).
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/test_util.h"
#include "harness/io/tensorload.h"
#include "harness/core/text.h"
#include "harness/engine/dump.h"
#include "harness/io/safetensors.h"
#include "harness/io/tensorset.h"

/* ---- helpers shared with test_npy.c through copies: each file stands alone ---- */



static char *make_tmpdir(void)
{
    char tmpl[] = "/tmp/ck_st_XXXXXX";
    char *d = mkdtemp(tmpl);
    ck_assert_ptr_nonnull(d);
    return strdup(d);
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* The fixtures' values (see make_fixtures.py): element i of six. */
static void expected_bytes(ck_file_dtype dt, unsigned char *out)
{
    for (int i = 0; i < 6; i++) {
        double f = (i - 2.5) * 0.5;
        int64_t s = i == 5 ? 0 : i * 7 - 20;
        uint64_t u = (uint64_t)i * 40;
        switch (dt) {
        case CK_FT_F64: memcpy(out + i * 8, &f, 8); break;
        case CK_FT_F32: { float v = (float)f; memcpy(out + i * 4, &v, 4); break; }
        case CK_FT_BF16: {
            float v = (float)f;
            uint32_t b;
            memcpy(&b, &v, 4);
            uint16_t h = (uint16_t)(b >> 16);
            memcpy(out + i * 2, &h, 2);
            break;
        }
        case CK_FT_F16: {
            /* (i - 2.5) / 2: -1.25, -0.75, -0.25, 0.25, 0.75, 1.25 in binary16 */
            static const uint16_t h[6] = {0xbd00, 0xba00, 0xb400, 0x3400, 0x3a00, 0x3d00};
            memcpy(out + i * 2, &h[i], 2);
            break;
        }
        case CK_FT_I64: { int64_t v = i == 5 ? INT64_MIN : s; memcpy(out + i * 8, &v, 8); break; }
        case CK_FT_I32: { int32_t v = i == 5 ? INT32_MIN : (int32_t)s; memcpy(out + i * 4, &v, 4); break; }
        case CK_FT_I16: { int16_t v = i == 5 ? INT16_MIN : (int16_t)s; memcpy(out + i * 2, &v, 2); break; }
        case CK_FT_I8: { int8_t v = i == 5 ? INT8_MIN : (int8_t)s; memcpy(out + i, &v, 1); break; }
        case CK_FT_U64: { uint64_t v = i == 5 ? UINT64_MAX : u; memcpy(out + i * 8, &v, 8); break; }
        case CK_FT_U32: { uint32_t v = i == 5 ? UINT32_MAX : (uint32_t)u; memcpy(out + i * 4, &v, 4); break; }
        case CK_FT_U16: { uint16_t v = i == 5 ? UINT16_MAX : (uint16_t)u; memcpy(out + i * 2, &v, 2); break; }
        case CK_FT_U8: out[i] = i == 5 ? UINT8_MAX : (uint8_t)u; break;
        case CK_FT_BOOL: out[i] = i % 2 == 0; break;
        default: break;
        }
    }
}

static void assert_fixture_values(const ck_named_tensor *t, const char *what)
{
    unsigned char want[48];
    ck_assert_msg(t->shape.ndim == 2 && t->shape.dim[0] == 2 && t->shape.dim[1] == 3,
                  "%s: shape", what);
    expected_bytes(t->dtype, want);
    ck_assert_msg(memcmp(t->data, want, 6 * ck_file_dtype_size(t->dtype)) == 0,
                  "%s (%s): values differ from make_fixtures.py's", what,
                  ck_file_dtype_name(t->dtype));
}


/* ---- round trips ---- */

START_TEST(every_dtype_round_trips_bit_for_bit)
{
    char *dir = make_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/all.safetensors", dir);
    unsigned char data[CK_FT_COUNT][48];
    char names[CK_FT_COUNT][16];
    ck_named_tensor t[CK_FT_COUNT + 2];
    int64_t dims[2] = {2, 3};
    for (int i = 0; i < CK_FT_COUNT; i++) {
        expected_bytes((ck_file_dtype)i, data[i]);
        snprintf(names[i], sizeof names[i], "t.%s", ck_file_dtype_name((ck_file_dtype)i));
        t[i].name = names[i];
        t[i].dtype = (ck_file_dtype)i;
        t[i].shape = ck_shape_make(2, dims);
        t[i].data = data[i];
    }
    /* A scalar and a zero-size tensor as well. */
    double scalar = -0.0;
    t[CK_FT_COUNT].name = "scalar";
    t[CK_FT_COUNT].dtype = CK_FT_F64;
    t[CK_FT_COUNT].shape = ck_shape_make(0, dims);
    t[CK_FT_COUNT].data = &scalar;
    int64_t zdims[2] = {0, 5};
    t[CK_FT_COUNT + 1].name = "empty";
    t[CK_FT_COUNT + 1].dtype = CK_FT_F32;
    t[CK_FT_COUNT + 1].shape = ck_shape_make(2, zdims);
    t[CK_FT_COUNT + 1].data = NULL;

    ck_error err;
    ck_assert_int_eq(ck_dump_tensors(path, CK_FT_COUNT + 2, t, &err), CK_OK);
    ck_tensorset s;
    ck_assert_msg(ck_tensorset_load(path, &s, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(s.n, CK_FT_COUNT + 2);
    for (int i = 0; i < CK_FT_COUNT + 2; i++) {
        const ck_named_tensor *g = &s.t[i]; /* the file keeps the given order */
        ck_assert_str_eq(g->name, t[i].name);
        ck_assert_int_eq(g->dtype, t[i].dtype);
        ck_assert(ck_shape_equal(&g->shape, &t[i].shape));
        size_t nb = ck_named_tensor_bytes(&t[i]);
        ck_assert_uint_eq(ck_named_tensor_bytes(g), nb);
        if (nb)
            ck_assert_msg(memcmp(g->data, t[i].data, nb) == 0, "%s differs", t[i].name);
    }
    ck_tensorset_free(&s);
    remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(writer_pads_header_to_eight_bytes_and_leaves_no_temp_file)
{
    char *dir = make_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    float v[3] = {1, 2, 3};
    int64_t d = 3;
    ck_named_tensor t = {"a \"quoted\"\nname", CK_FT_F32, ck_shape_make(1, &d), v};
    ck_error err;
    ck_assert_int_eq(ck_safetensors_write(path, 1, &t, &err), CK_OK);
    FILE *f = fopen(path, "rb");
    unsigned char len[8];
    ck_assert_uint_eq(fread(len, 1, 8, f), 8);
    fclose(f);
    ck_assert_uint_eq(len[0] % 8, 0);
    DIR *dd = opendir(dir);
    int files = 0;
    struct dirent *de;
    while ((de = readdir(dd)) != NULL)
        files += de->d_name[0] != '.';
    closedir(dd);
    ck_assert_int_eq(files, 1);
    ck_tensorset s;
    ck_assert_int_eq(ck_tensorset_load(path, &s, &err), CK_OK);
    ck_assert_str_eq(s.t[0].name, t.name);
    ck_tensorset_free(&s);
    remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(writer_refuses_duplicate_names_and_missing_directories)
{
    float v = 1;
    ck_named_tensor t[2] = {{"x", CK_FT_F32, {0, {0}}, &v}, {"x", CK_FT_F32, {0, {0}}, &v}};
    ck_error err;
    ck_assert_int_eq(ck_safetensors_write("/tmp/ck_never.safetensors", 2, t, &err), CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "given twice"));
    ck_assert_int_eq(access("/tmp/ck_never.safetensors", F_OK), -1);
    ck_assert_int_eq(ck_safetensors_write("/nonexistent-dir/x.safetensors", 1, t, &err), CK_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-dir/x.safetensors"));
}
END_TEST

/* ---- the reference writer's files ---- */

START_TEST(reference_writer_files_read_with_every_dtype)
{
    char path[512];
    tu_fixture_path(path, sizeof path, "good/st_all_dtypes.safetensors");
    ck_tensorset s;
    ck_error err;
    ck_assert_msg(ck_tensorset_load(path, &s, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(s.n, CK_FT_COUNT);
    for (int i = 0; i < CK_FT_COUNT; i++) {
        const char *nm = ck_file_dtype_name((ck_file_dtype)i);
        /* The fixture names tensors f64, f32, ..., bool: our names without the "fp". */
        char want[16];
        snprintf(want, sizeof want, "%s%s", strncmp(nm, "fp", 2) == 0 ? "f" : "",
                 strncmp(nm, "fp", 2) == 0 ? nm + 2 : nm);
        const ck_named_tensor *t = ck_tensorset_find(&s, want);
        ck_assert_msg(t != NULL, "tensor %s missing", want);
        ck_assert_int_eq(t->dtype, i);
        assert_fixture_values(t, want);
    }
    ck_tensorset_free(&s);
}
END_TEST

START_TEST(reference_writer_metadata_zero_size_and_empty_files)
{
    char path[512];
    ck_tensorset s;
    ck_error err;
    tu_fixture_path(path, sizeof path, "good/st_metadata.safetensors");
    ck_assert_msg(ck_tensorset_load(path, &s, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(s.n, 1);
    assert_fixture_values(&s.t[0], "w");
    ck_tensorset_free(&s);

    tu_fixture_path(path, sizeof path, "good/st_zero_size.safetensors");
    ck_assert_msg(ck_tensorset_load(path, &s, &err) == CK_OK, "%s", err.msg);
    const ck_named_tensor *e = ck_tensorset_find(&s, "empty");
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(ck_named_tensor_bytes(e), 0);
    ck_tensorset_free(&s);

    tu_fixture_path(path, sizeof path, "good/st_no_tensors.safetensors");
    ck_assert_msg(ck_tensorset_load(path, &s, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(s.n, 0);
    ck_tensorset_free(&s);
}
END_TEST

/* ---- malformed files ---- */

START_TEST(every_malformed_safetensors_class_is_refused_with_one_line)
{
    tu_check_bad_fixtures("st_");
}
END_TEST

/* In-memory cases the fixtures do not cover. */
static ck_status parse_text(const char *header, size_t data_len, ck_error *err)
{
    size_t hl = strlen(header);
    unsigned char *buf = calloc(1, 8 + hl + data_len + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    ck_tensorset s;
    ck_status st = ck_safetensors_parse(buf, 8 + hl + data_len, "mem.safetensors", &s, err);
    ck_tensorset_free(&s);
    free(buf);
    return st;
}

START_TEST(parser_refuses_subtle_headers)
{
    static const struct {
        const char *desc, *header;
        size_t data;
        const char *frag;
    } rows[] = {
        {"offsets beyond 2^53", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,9007199254740993]}}", 1, "data_offsets"},
        {"one offset", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, "data_offsets"},
        {"string shape", "{\"w\":{\"dtype\":\"U8\",\"shape\":\"1\",\"data_offsets\":[0,1]}}", 1, "shape must be a list"},
        {"numeric dtype", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "dtype must be a string"},
        {"metadata not an object", "{\"__metadata__\":[],\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "__metadata__"},
        {"overlong UTF-8", "{\"\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "UTF-8"},
        {"surrogate", "{\"\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "UTF-8"},
        {"nested duplicate", "{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "duplicate key"},
        {"two zero-size tensors then a gap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, "gap"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ck_error err = {{0}};
        ck_status st = parse_text(rows[i].header, rows[i].data, &err);
        ck_assert_msg(st == CK_ERR_INPUT, "%s: accepted", rows[i].desc);
        ck_assert_msg(strstr(err.msg, rows[i].frag) != NULL, "%s: \"%s\" lacks \"%s\"",
                      rows[i].desc, err.msg, rows[i].frag);
    }
    ck_error err;
    ck_assert_int_eq(parse_text("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}   ", 1, &err), CK_OK);
}
END_TEST

START_TEST(offsets_one_byte_past_the_data_are_refused_as_such)
{
    /* at the boundary: [0, 4] over 4 bytes is the whole file; over 3 bytes its end runs one
     * byte past the data and must be called that (not a count of trailing bytes) */
    static const char *h = "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    ck_error err = {{0}};
    ck_assert_msg(parse_text(h, 4, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(parse_text(h, 3, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "data_offsets [0, 4] run past the end of the data (3 bytes)"),
                  "one byte short: %s", err.msg);
    /* a header length one byte past the end of the file (the buffer holds more, so a
     * reader that looked past the length it was given would find valid JSON) */
    size_t hl = strlen(h), flen = 8 + hl + 4;
    unsigned char *buf = calloc(1, flen + 16);
    ck_assert_ptr_nonnull(buf);
    uint64_t claimed = (uint64_t)(flen - 8 + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(claimed >> (8 * i));
    memcpy(buf + 8, h, hl);
    memset(buf + 8 + hl, ' ', 16);
    ck_tensorset s;
    ck_assert_int_eq(ck_safetensors_parse(buf, flen, "mem.safetensors", &s, &err), CK_ERR_INPUT);
    ck_tensorset_free(&s);
    ck_assert_msg(strstr(err.msg, "runs past the end of the file"), "header one byte long: %s",
                  err.msg);
    free(buf);
    /* two tensors, the second one byte short */
    static const char *h2 = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                            "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}";
    ck_assert_int_eq(parse_text(h2, 3, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "tensor \"b\": data_offsets [2, 4] run past the end"),
                  "second tensor one byte short: %s", err.msg);
}
END_TEST

/* ---- the set, directories, copy_into, manifest ---- */

START_TEST(directory_loads_every_tensor_file_and_refuses_clashes)
{
    char path[512];
    ck_tensorset s;
    ck_error err;
    tu_fixture_path(path, sizeof path, "dir");
    ck_assert_msg(ck_tensorset_load(path, &s, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(s.n, 4);
    /* a.npy, then b.safetensors (offset order: d before c), then e.npz */
    ck_assert_str_eq(s.t[0].name, "a");
    ck_assert_int_eq(ck_tensorset_index(&s, "c") >= 0, 1);
    ck_assert_str_eq(s.t[3].name, "f");
    ck_assert_ptr_nonnull(strstr(s.file[3], "e.npz[f.npy]"));
    for (int i = 0; i < s.n; i++)
        assert_fixture_values(&s.t[i], s.t[i].name);
    ck_tensorset_free(&s);

    tu_fixture_path(path, sizeof path, "clash");
    ck_assert_int_eq(ck_tensorset_load(path, &s, &err), CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "x.npy"));
    ck_assert_ptr_nonnull(strstr(err.msg, "y.safetensors"));
    ck_assert_int_eq(s.n, 0);

    char *dir = make_tmpdir();
    ck_assert_int_eq(ck_tensorset_load(dir, &s, &err), CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "no *.safetensors"));
    ck_assert_int_eq(ck_tensorset_load("/nonexistent/x.npy", &s, &err), CK_ERR_IO);
    ck_assert_int_eq(ck_tensorset_load(dir, &s, &err), CK_ERR_INPUT);
    remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(copy_into_checks_name_dtype_and_shape)
{
    char path[512];
    ck_tensorset s;
    ck_error err;
    tu_fixture_path(path, sizeof path, "good/st_all_dtypes.safetensors");
    ck_assert_int_eq(ck_tensorset_load(path, &s, &err), CK_OK);
    int64_t d23[2] = {2, 3}, d32[2] = {3, 2};
    ck_shape ok = ck_shape_make(2, d23), bad = ck_shape_make(2, d32);
    float got[6];
    ck_assert_int_eq(ck_tensorset_copy_into(&s, "f32", CK_FT_F32, &ok, got, &err), CK_OK);
    ck_assert(got[0] == -1.25f && got[5] == 1.25f);
    ck_assert_int_eq(ck_tensorset_copy_into(&s, "f32", CK_FT_F32, &bad, got, &err), CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "shape [2, 3], expected [3, 2]"));
    ck_assert_int_eq(ck_tensorset_copy_into(&s, "f32", CK_FT_F64, &ok, got, &err), CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "dtype fp32, expected fp64"));
    ck_assert_int_eq(ck_tensorset_copy_into(&s, "enc1.weight", CK_FT_F32, &ok, got, &err),
                     CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"enc1.weight\" not found"));
    ck_tensorset_free(&s);
}
END_TEST

START_TEST(manifest_lists_files_runs_steps_and_tensors)
{
    char *dir = make_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    float v[4] = {0};
    int64_t d[2] = {2, 2};
    ck_named_tensor t[2] = {{"fc1.weight", CK_FT_F32, ck_shape_make(2, d), v},
                            {"fc1.bias", CK_FT_F32, ck_shape_make(1, d), v}};
    ck_manifest m;
    ck_error err;
    ck_assert_int_eq(ck_manifest_init(&m, "tiny", &err), CK_OK);
    ck_assert_int_eq(ck_manifest_add(&m, "init/params.safetensors", "plain", -1, "param", 2, t, &err), CK_OK);
    ck_assert_int_eq(ck_manifest_add(&m, "plain/step_0000/grads.safetensors", "plain", 0, "grad", 1, t, &err), CK_OK);
    ck_assert_int_eq(ck_manifest_write(&m, path, &err), CK_OK);
    ck_manifest_free(&m);

    FILE *f = fopen(path, "rb");
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    ck_assert_ptr_nonnull(root);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "schema")->valuestring, CK_MANIFEST_SCHEMA);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "case")->valuestring, "tiny");
    cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    ck_assert_int_eq(cJSON_GetArraySize(files), 2);
    cJSON *f0 = cJSON_GetArrayItem(files, 0), *f1 = cJSON_GetArrayItem(files, 1);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(f0, "step")));
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(f1, "step")->valueint, 0);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(f1, "kind")->valuestring, "grad");
    cJSON *tl = cJSON_GetObjectItemCaseSensitive(f0, "tensors");
    ck_assert_int_eq(cJSON_GetArraySize(tl), 2);
    cJSON *t1 = cJSON_GetArrayItem(tl, 1);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(t1, "name")->valuestring, "fc1.bias");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(t1, "dtype")->valuestring, "fp32");
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t1, "shape")), 1);
    cJSON_Delete(root);
    remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(utf8_and_one_line_errors)
{
    ck_assert(ck_utf8_valid("abc \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 15));
    ck_assert(!ck_utf8_valid("\xc0\x80", 2));       /* overlong NUL */
    ck_assert(!ck_utf8_valid("\xe0\x80\xaf", 3));   /* overlong */
    ck_assert(!ck_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    ck_assert(!ck_utf8_valid("\xe2\x82", 2));       /* truncated */
    ck_assert(!ck_utf8_valid("\x80", 1));
    ck_error err;
    ck_fail(&err, CK_ERR_INPUT, "a\nb\tc\x01");
    ck_assert_int_eq(ck_error_one_line(&err, CK_ERR_INPUT), CK_ERR_INPUT);
    ck_assert_str_eq(err.msg, "a\\nb\\tc\\x01");
}
END_TEST

START_TEST(file_dtype_names_and_mapping)
{
    ck_file_dtype dt;
    ck_assert(ck_file_dtype_parse("BF16", &dt) && dt == CK_FT_BF16);
    ck_assert(ck_file_dtype_parse("fp16", &dt) && dt == CK_FT_F16);
    ck_assert(ck_file_dtype_parse("float64", &dt) && dt == CK_FT_F64);
    ck_assert(ck_file_dtype_parse("u16", &dt) && dt == CK_FT_U16);
    ck_assert(!ck_file_dtype_parse("F8_E4M3", &dt));
    for (int i = 0; i < CK_DTYPE_COUNT; i++) {
        ck_dtype back;
        ck_assert(ck_file_dtype_to_ck(ck_file_dtype_from_ck((ck_dtype)i), &back) && back == (ck_dtype)i);
        ck_assert_uint_eq(ck_file_dtype_size(ck_file_dtype_from_ck((ck_dtype)i)), ck_dtype_size((ck_dtype)i));
        ck_assert_str_eq(ck_file_dtype_st_name(ck_file_dtype_from_ck((ck_dtype)i)), ck_dtype_st_name((ck_dtype)i));
    }
    ck_dtype cd;
    ck_assert(!ck_file_dtype_to_ck(CK_FT_U8, &cd));
    int64_t big[3] = {INT64_C(4294967296), INT64_C(4294967296), 4};
    ck_shape s = ck_shape_make(3, big);
    ck_assert(!ck_file_shape_size(&s, CK_FT_F32, NULL, NULL));
    int64_t zero[2] = {0, INT64_MAX};
    s = ck_shape_make(2, zero);
    size_t nb = 1;
    ck_assert(ck_file_shape_size(&s, CK_FT_F64, NULL, &nb) && nb == 0);
}
END_TEST

Suite *suite_safetensors(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, every_dtype_round_trips_bit_for_bit);
    tcase_add_test(tc, writer_pads_header_to_eight_bytes_and_leaves_no_temp_file);
    tcase_add_test(tc, writer_refuses_duplicate_names_and_missing_directories);
    tcase_add_test(tc, reference_writer_files_read_with_every_dtype);
    tcase_add_test(tc, reference_writer_metadata_zero_size_and_empty_files);
    tcase_add_test(tc, every_malformed_safetensors_class_is_refused_with_one_line);
    tcase_add_test(tc, parser_refuses_subtle_headers);
    tcase_add_test(tc, offsets_one_byte_past_the_data_are_refused_as_such);
    tcase_add_test(tc, directory_loads_every_tensor_file_and_refuses_clashes);
    tcase_add_test(tc, copy_into_checks_name_dtype_and_shape);
    tcase_add_test(tc, manifest_lists_files_runs_steps_and_tensors);
    tcase_add_test(tc, utf8_and_one_line_errors);
    tcase_add_test(tc, file_dtype_names_and_mapping);
    suite_add_tcase(s, tc);
    return s;
}
