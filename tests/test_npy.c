/*
 * .npy and .npz readers (and the .npy writer): files numpy wrote (every dtype, scalar,
 * empty, big-endian, Fortran order, versions 2.0 and 3.0, np.savez and
 * np.savez_compressed), round trips, and every malformed-file class refused with one line.
 * Fixtures: tests/fixtures/make_fixtures.py.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/test_util.h"
#include "harness/io/tensorload.h"
#include "harness/io/npy.h"
#include "harness/io/npz.h"
#include "harness/io/tensorset.h"


/* The fixture value of element i (make_fixtures.py), as a double. */
static double expected_value(ck_file_dtype dt, int i)
{
    if (ck_file_dtype_is_float(dt))
        return (i - 2.5) * 0.5;
    if (dt == CK_FT_BOOL)
        return i % 2 == 0;
    bool is_signed = dt == CK_FT_I64 || dt == CK_FT_I32 || dt == CK_FT_I16 || dt == CK_FT_I8;
    if (i < 5)
        return is_signed ? i * 7 - 20 : i * 40;
    switch (dt) {
    case CK_FT_I64: return (double)INT64_MIN;
    case CK_FT_I32: return INT32_MIN;
    case CK_FT_I16: return INT16_MIN;
    case CK_FT_I8: return INT8_MIN;
    case CK_FT_U64: return (double)UINT64_MAX;
    case CK_FT_U32: return UINT32_MAX;
    case CK_FT_U16: return UINT16_MAX;
    default: return UINT8_MAX;
    }
}

/* Element i of t as a double (exact for the fixture values). */
static double element(const ck_named_tensor *t, int64_t i)
{
    const unsigned char *p = (const unsigned char *)t->data + (size_t)i * ck_file_dtype_size(t->dtype);
    switch (t->dtype) {
    case CK_FT_F64: { double v; memcpy(&v, p, 8); return v; }
    case CK_FT_F32: { float v; memcpy(&v, p, 4); return v; }
    case CK_FT_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e ? (1.0 + m / 1024.0) * ((e - 15) >= 0 ? (double)(1 << (e - 15)) : 1.0 / (1 << (15 - e))) : m / 16777216.0;
        return (h & 0x8000) ? -v : v;
    }
    case CK_FT_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case CK_FT_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case CK_FT_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case CK_FT_I8: return (int8_t)p[0];
    case CK_FT_U64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    case CK_FT_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case CK_FT_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    default: return p[0];
    }
}

static void assert_fixture_values(const ck_named_tensor *t, const char *what)
{
    ck_assert_msg(t->shape.ndim == 2 && t->shape.dim[0] == 2 && t->shape.dim[1] == 3,
                  "%s: shape", what);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(element(t, i) == expected_value(t->dtype, i), "%s[%d] = %g, want %g", what,
                      i, element(t, i), expected_value(t->dtype, i));
}

static void load_ok(const char *rel, ck_tensorset *s)
{
    char path[512];
    ck_error err;
    tu_fixture_path(path, sizeof path, rel);
    ck_assert_msg(ck_tensorset_load(path, s, &err) == CK_OK, "%s: %s", rel, err.msg);
}


/* ---- .npy ---- */

START_TEST(numpy_files_of_every_dtype_read_exactly)
{
    static const char *names[] = {"f64", "f32", "f16", "i64", "i32", "i16", "i8",
                                  "u64", "u32", "u16", "u8", "bool"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char rel[64], stem[64];
        snprintf(rel, sizeof rel, "good/np_%s.npy", names[i]);
        snprintf(stem, sizeof stem, "np_%s", names[i]);
        ck_tensorset s;
        load_ok(rel, &s);
        ck_assert_int_eq(s.n, 1);
        ck_assert_str_eq(s.t[0].name, stem); /* named after the file's stem */
        assert_fixture_values(&s.t[0], rel);
        ck_tensorset_free(&s);
    }
}
END_TEST

START_TEST(byte_order_fortran_order_and_versions_are_honoured)
{
    ck_tensorset s;
    load_ok("good/np_big_endian.npy", &s);
    ck_assert_int_eq(s.t[0].dtype, CK_FT_F32);
    assert_fixture_values(&s.t[0], "big-endian f4");
    ck_tensorset_free(&s);
    load_ok("good/np_big_endian_i16.npy", &s);
    assert_fixture_values(&s.t[0], "big-endian i2");
    ck_tensorset_free(&s);

    /* np.asfortranarray(arange(24).reshape(2, 3, 4)): C order reads 0, 1, 2, ... */
    load_ok("good/np_fortran.npy", &s);
    ck_assert_int_eq(s.t[0].shape.ndim, 3);
    for (int i = 0; i < 24; i++)
        ck_assert_msg(element(&s.t[0], i) == i, "fortran element %d = %g", i, element(&s.t[0], i));
    ck_tensorset_free(&s);

    load_ok("good/np_v2.npy", &s);
    assert_fixture_values(&s.t[0], "version 2.0");
    ck_tensorset_free(&s);
    load_ok("good/np_v3.npy", &s);
    assert_fixture_values(&s.t[0], "version 3.0");
    ck_tensorset_free(&s);
}
END_TEST

START_TEST(scalar_and_empty_arrays)
{
    ck_tensorset s;
    load_ok("good/np_scalar.npy", &s);
    ck_assert_int_eq(s.t[0].shape.ndim, 0);
    ck_assert(element(&s.t[0], 0) == 1.5);
    ck_tensorset_free(&s);
    load_ok("good/np_empty.npy", &s);
    ck_assert_int_eq(s.t[0].shape.ndim, 2);
    ck_assert_int_eq(s.t[0].shape.dim[0], 0);
    ck_assert_uint_eq(ck_named_tensor_bytes(&s.t[0]), 0);
    ck_tensorset_free(&s);
}
END_TEST

START_TEST(npy_writer_round_trips_and_refuses_bf16)
{
    char tmpl[] = "/tmp/ck_npy_XXXXXX";
    char *dir = mkdtemp(tmpl);
    ck_assert_ptr_nonnull(dir);
    int64_t dims[3] = {2, 1, 3};
    static const ck_file_dtype dts[] = {CK_FT_F64, CK_FT_F32, CK_FT_F16, CK_FT_I64, CK_FT_I32,
                                        CK_FT_I16, CK_FT_I8,  CK_FT_U64, CK_FT_U32, CK_FT_U16,
                                        CK_FT_U8,  CK_FT_BOOL};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        unsigned char data[48];
        for (int i = 0; i < 48; i++)
            data[i] = (unsigned char)(i * 37 + (int)k);
        if (dts[k] == CK_FT_BOOL)
            for (int i = 0; i < 6; i++)
                data[i] &= 1;
        char path[256];
        snprintf(path, sizeof path, "%s/t%zu.npy", dir, k);
        ck_named_tensor t = {"t", dts[k], ck_shape_make(k % 2 ? 3 : 1, k % 2 ? dims : dims + 2), data};
        ck_error err;
        ck_assert_msg(ck_npy_write(path, &t, &err) == CK_OK, "%s", err.msg);
        FILE *f = fopen(path, "rb");
        unsigned char pre[10];
        ck_assert_uint_eq(fread(pre, 1, 10, f), 10);
        fclose(f);
        ck_assert_uint_eq((10u + pre[8] + 256u * pre[9]) % 64, 0); /* numpy's alignment */
        ck_tensorset s;
        ck_assert_msg(ck_tensorset_load(path, &s, &err) == CK_OK, "%s", err.msg);
        ck_assert_int_eq(s.t[0].dtype, dts[k]);
        ck_assert(ck_shape_equal(&s.t[0].shape, &t.shape));
        ck_assert(memcmp(s.t[0].data, data, ck_named_tensor_bytes(&t)) == 0);
        ck_tensorset_free(&s);
        unlink(path);
    }
    uint16_t h = 0;
    ck_named_tensor bf = {"b", CK_FT_BF16, ck_shape_make(0, dims), &h};
    char path[256];
    snprintf(path, sizeof path, "%s/bf.npy", dir);
    ck_error err;
    ck_assert_int_eq(ck_npy_write(path, &bf, &err), CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "bf16"));
    ck_assert_int_eq(access(path, F_OK), -1);
    rmdir(dir);
}
END_TEST

START_TEST(every_malformed_npy_class_is_refused_with_one_line)
{
    tu_check_bad_fixtures("np_");
}
END_TEST

START_TEST(header_parser_accepts_what_numpy_and_python2_wrote)
{
    static const char *headers[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",
        "{'shape': (2L, 3L), 'fortran_order': False, 'descr': '<f4'}",
        "{'descr':'<f4','fortran_order':False,'shape':(2,3,)}   \n",
    };
    float data[6] = {0};
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        size_t hl = strlen(headers[i]);
        unsigned char *buf = malloc(10 + hl + sizeof data);
        memcpy(buf, "\x93NUMPY\x01\x00", 8);
        buf[8] = (unsigned char)hl;
        buf[9] = 0;
        memcpy(buf + 10, headers[i], hl);
        memcpy(buf + 10 + hl, data, sizeof data);
        ck_tensorset s;
        ck_error err;
        ck_tensorset_init(&s);
        ck_assert_msg(ck_npy_parse_into(buf, 10 + hl + sizeof data, "mem.npy", "m", &s, &err) == CK_OK,
                      "%s: %s", headers[i], err.msg);
        ck_assert_int_eq(s.t[0].shape.dim[1], 3);
        ck_tensorset_free(&s);
        free(buf);
    }
}
END_TEST

/* A version-2.0 file of a (2, 3) '<f4' array whose header, padded with spaces as numpy
 * pads it, is hl bytes long; only the first `keep` bytes of it are built (the rest is cut
 * off, as a truncated file would be), or all of them when keep is 0. */
static unsigned char *npy_v2(uint32_t hl, size_t keep, size_t *len)
{
    static const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    size_t full = 12 + (size_t)hl + 24;
    *len = keep ? keep : full;
    unsigned char *buf = calloc(1, full);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, "\x93NUMPY\x02\x00", 8);
    for (int i = 0; i < 4; i++)
        buf[8 + i] = (unsigned char)(hl >> (8 * i));
    if ((size_t)hl >= sizeof dict) {
        memcpy(buf + 12, dict, sizeof dict - 1);
        memset(buf + 12 + sizeof dict - 1, ' ', hl - (sizeof dict - 1) - 1);
        buf[12 + hl - 1] = '\n';
    }
    return buf;
}

START_TEST(v2_header_lengths_are_read_as_32_bits)
{
    /* 65588 = 0x10034: a header of 64 KiB and more (12 + 65588 + 24 is a multiple of 64,
     * as numpy aligns); read as 16 bits it would be 52 bytes of dict */
    size_t len;
    unsigned char *buf = npy_v2(65588, 0, &len);
    ck_tensorset s;
    ck_error err = {{0}};
    ck_tensorset_init(&s);
    ck_assert_int_eq(ck_npy_parse_into(buf, len, "mem.npy", "m", &s, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "header length 65588 exceeds the limit of 10000 bytes"),
                  "64 KiB header: %s", err.msg);
    ck_tensorset_free(&s);
    free(buf);
    /* the top byte counts too: 0x01000034, claimed by a file of 100 bytes */
    buf = npy_v2(0x01000034u, 100, &len);
    ck_tensorset_init(&s);
    ck_assert_int_eq(ck_npy_parse_into(buf, len, "mem.npy", "m", &s, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "header length 16777268 exceeds the limit"), "%s", err.msg);
    ck_tensorset_free(&s);
    free(buf);
    /* and a header at the limit reads: 12 + 9988 + 24 bytes */
    buf = npy_v2(9988, 0, &len);
    ck_tensorset_init(&s);
    ck_assert_msg(ck_npy_parse_into(buf, len, "mem.npy", "m", &s, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(s.t[0].shape.dim[1], 3);
    ck_tensorset_free(&s);
    free(buf);
}
END_TEST

/* ---- .npz ---- */

START_TEST(savez_and_savez_compressed_read_exactly)
{
    static const char *files[] = {"good/np_stored.npz", "good/np_deflated.npz"};
    for (int f = 0; f < 2; f++) {
        ck_tensorset s;
        load_ok(files[f], &s);
        ck_assert_int_eq(s.n, 12);
        for (int i = 0; i < s.n; i++) {
            char what[128];
            snprintf(what, sizeof what, "%s: %s", files[f], s.t[i].name);
            const char *nm = ck_file_dtype_name(s.t[i].dtype);
            char want[16]; /* the fixture names f64, f32, f16, i64, ..., bool */
            snprintf(want, sizeof want, "%s%s", strncmp(nm, "fp", 2) == 0 ? "f" : "",
                     strncmp(nm, "fp", 2) == 0 ? nm + 2 : nm);
            ck_assert_str_eq(s.t[i].name, want);
            assert_fixture_values(&s.t[i], what);
        }
        ck_tensorset_free(&s);
    }
}
END_TEST

START_TEST(every_malformed_npz_class_is_refused_with_one_line)
{
    tu_check_bad_fixtures("nz_");
}
END_TEST

START_TEST(npz_parser_survives_truncation_at_every_length)
{
    char path[512];
    tu_fixture_path(path, sizeof path, "good/np_deflated.npz");
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ck_assert_uint_gt(n, 100);
    for (size_t len = 0; len < n; len++) {
        unsigned char *copy = malloc(len ? len : 1); /* exact size: ASan sees any overread */
        memcpy(copy, buf, len);
        ck_tensorset s;
        ck_error err;
        ck_assert_int_eq(ck_npz_parse(copy, len, "cut.npz", &s, &err), CK_ERR_INPUT);
        free(copy);
    }
}
END_TEST

Suite *suite_npy(void)
{
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, numpy_files_of_every_dtype_read_exactly);
    tcase_add_test(tc, byte_order_fortran_order_and_versions_are_honoured);
    tcase_add_test(tc, scalar_and_empty_arrays);
    tcase_add_test(tc, npy_writer_round_trips_and_refuses_bf16);
    tcase_add_test(tc, every_malformed_npy_class_is_refused_with_one_line);
    tcase_add_test(tc, header_parser_accepts_what_numpy_and_python2_wrote);
    tcase_add_test(tc, v2_header_lengths_are_read_as_32_bits);
    suite_add_tcase(s, tc);
    return s;
}

Suite *suite_npz(void)
{
    Suite *s = suite_create("npz");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, savez_and_savez_compressed_read_exactly);
    tcase_add_test(tc, every_malformed_npz_class_is_refused_with_one_line);
    tcase_add_test(tc, npz_parser_survives_truncation_at_every_length);
    suite_add_tcase(s, tc);
    return s;
}
