/*
 * What `ckpt-harness compare` is built from: tolerance resolution and files, name maps,
 * and the comparison of two tensor sets with its JSON report (crafted in memory).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reports/compare_report.h"
#include "harness/compare/namemap.h"
#include "harness/compare/selection.h"
#include "harness/compare/sets.h"
#include "harness/compare/tolerances.h"

static ck_status parse_tol(ck_tolerances *t, const char *text, ck_error *err)
{
    return ck_tolerances_parse(t, text, strlen(text), "tol.json", err);
}

static ck_status parse_map(ck_name_map *m, const char *text, ck_error *err)
{
    return ck_name_map_parse(m, text, strlen(text), "map.json", err);
}

/* ---- tolerances ---- */

START_TEST(builtin_tolerances_are_torch_testings)
{
    double r, a;
    ck_tolerances t;
    ck_tolerances_init(&t);
    ck_tolerances_resolve(&t, "x", CK_FT_F32, &r, &a);
    ck_assert(r == 1.3e-6 && a == 1e-5);
    ck_tolerances_resolve(&t, "x", CK_FT_F16, &r, &a);
    ck_assert(r == 1e-3 && a == 1e-5);
    ck_tolerances_resolve(&t, "x", CK_FT_BF16, &r, &a);
    ck_assert(r == 1.6e-2 && a == 1e-5);
    ck_tolerances_resolve(&t, "x", CK_FT_F64, &r, &a);
    ck_assert(r == 1e-7 && a == 1e-7);
    ck_tolerances_resolve(&t, "x", CK_FT_I64, &r, &a);
    ck_assert(r == 0 && a == 0);
}
END_TEST

START_TEST(most_specific_tolerance_wins_per_field)
{
    ck_tolerances t;
    ck_error err;
    ck_tolerances_init(&t);
    t.cli.has_atol = true;
    t.cli.atol = 0.5;
    ck_assert_msg(parse_tol(&t, "{\"default\": {\"rtol\": 0.1, \"atol\": 0.2},"
                                " \"dtypes\": {\"fp16\": {\"rtol\": 0.3}},"
                                " \"tensors\": {\"dec*.weight\": {\"atol\": 0.4},"
                                "               \"dec1.*\": {\"rtol\": 0.6}}}", &err) == CK_OK,
                  "%s", err.msg);
    double r, a;
    /* first matching pattern sets atol only; rtol falls to the dtype entry */
    ck_tolerances_resolve(&t, "dec1.weight", CK_FT_F16, &r, &a);
    ck_assert(r == 0.3 && a == 0.4);
    /* no pattern, no dtype entry: --atol beats the file default; rtol from default */
    ck_tolerances_resolve(&t, "enc.weight", CK_FT_F32, &r, &a);
    ck_assert(r == 0.1 && a == 0.5);
    /* the second pattern is never consulted for a name the first matched */
    ck_tolerances_resolve(&t, "dec1.bias", CK_FT_F32, &r, &a);
    ck_assert(r == 0.6 && a == 0.5);
    /* integers stay exact whatever --atol, default and dtypes say... */
    ck_tolerances_resolve(&t, "enc.weight", CK_FT_I32, &r, &a);
    ck_assert(r == 0 && a == 0);
    /* ...unless the first tensors row naming them excuses a difference (only what it sets) */
    ck_tolerances_resolve(&t, "dec1.weight", CK_FT_I32, &r, &a);
    ck_assert(r == 0 && a == 0.4);
    ck_tolerances_free(&t);
}
END_TEST

START_TEST(bad_tolerance_files_are_named_errors)
{
    static const struct {
        const char *text, *frag;
    } rows[] = {
        {"{\"default\": {\"rtol\": -1}}", "default.rtol"},
        {"{\"default\": {\"rtol\": \"1\"}}", "default.rtol"},
        {"{\"default\": {\"rtl\": 1}}", "default.rtl: unknown key"},
        {"{\"dtypes\": {\"F17\": {\"rtol\": 1}}}", "dtypes.F17: unknown dtype"},
        {"{\"tensors\": {\"a\": 1}}", "tensors.a"},
        {"{\"tensors\": {\"a\": {}}, \"tensors\": {}}", "duplicate key"},
        {"[1]", "JSON object"},
        {"{", "malformed JSON"},
        {"", "empty"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ck_tolerances t;
        ck_error err;
        ck_tolerances_init(&t);
        ck_assert_msg(parse_tol(&t, rows[i].text, &err) == CK_ERR_INPUT, "%s accepted", rows[i].text);
        ck_assert_msg(strstr(err.msg, "tol.json") && strstr(err.msg, rows[i].frag), "%s: %s",
                      rows[i].text, err.msg);
        ck_tolerances_free(&t);
    }
}
END_TEST

/* ---- name maps ---- */

static void assert_maps(const ck_name_map *m, const char *in, const char *want)
{
    char *out;
    ck_error err;
    ck_assert_msg(ck_name_map_apply(m, in, &out, &err) == CK_OK, "%s: %s", in, err.msg);
    ck_assert_msg(strcmp(out, want) == 0, "%s -> %s, want %s", in, out, want);
    free(out);
}

START_TEST(map_renames_then_rewrites_with_groups)
{
    ck_name_map m;
    ck_error err;
    ck_name_map_init(&m);
    ck_assert_msg(parse_map(&m, "{\"rename\": {\"model.odd\": \"fc9.bias\"},"
                                " \"patterns\": [[\"^model\\\\.(.*)$\", \"\\\\1\"],"
                                "                [\"^(.*)/kernel:0$\", \"\\\\1.weight\"],"
                                "                [\"x\", \"[\\\\0\\\\\\\\]\"]]}", &err) == CK_OK,
                  "%s", err.msg);
    assert_maps(&m, "model.enc1.weight", "enc1.weight");
    assert_maps(&m, "model.odd", "fc9.bias");           /* rename first */
    assert_maps(&m, "dense_1/kernel:0", "dense_1.weight");
    assert_maps(&m, "axb", "a[x\\]b");                  /* \0 and \\, rest of the name kept */
    assert_maps(&m, "plain", "plain");                  /* untouched */
    ck_name_map_free(&m);

    ck_name_map_init(&m);
    ck_assert_int_eq(parse_map(&m, "{\"patterns\": [[\"^.*$\", \"\"]]}", &err), CK_OK);
    char *out;
    ck_assert_int_eq(ck_name_map_apply(&m, "w", &out, &err), CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty name"));
    ck_name_map_free(&m);
}
END_TEST

START_TEST(bad_maps_are_named_errors)
{
    static const struct {
        const char *text, *frag;
    } rows[] = {
        {"{\"patterns\": [[\"(a\", \"b\"]]}", "patterns[0]: bad regex"},
        {"{\"patterns\": [[\"(a)\", \"\\\\2\"]]}", "patterns[0]: replacement"},
        {"{\"patterns\": [[\"a\", \"\\\\q\"]]}", "patterns[0]: replacement"},
        {"{\"patterns\": [\"a\"]}", "patterns[0]: must be a pair"},
        {"{\"rename\": {\"a\": 1}}", "rename.a"},
        {"{\"rename\": {\"a\": \"\"}}", "rename.a"},
        {"{\"renames\": {}}", "renames: unknown key"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ck_name_map m;
        ck_error err;
        ck_name_map_init(&m);
        ck_assert_msg(parse_map(&m, rows[i].text, &err) == CK_ERR_INPUT, "%s accepted", rows[i].text);
        ck_assert_msg(strstr(err.msg, "map.json") && strstr(err.msg, rows[i].frag), "%s: %s",
                      rows[i].text, err.msg);
        ck_name_map_free(&m);
    }
}
END_TEST

/* ---- set comparison ---- */

typedef struct {
    float w[6], b[3];
    uint16_t h[2];
    int64_t n[2];
    uint8_t q[3];
    uint64_t big[2];
} tensors;

static void fill(ck_tensorset *s, tensors *d, const char *prefix, bool skip_b, bool w_3x2)
{
    int64_t d23[2] = {2, 3}, d32[2] = {3, 2}, d3 = 3, d2 = 2;
    char nm[64];
    ck_error err;
    ck_tensorset_init(s);
#define ADD(name, dt, shape, data)                                                              \
    do {                                                                                        \
        snprintf(nm, sizeof nm, "%s%s", prefix, name);                                          \
        ck_shape sh_ = shape;                                                                   \
        ck_assert_int_eq(ck_tensorset_add(s, nm, dt, &sh_, data, "mem", &err), CK_OK);          \
    } while (0)
    ADD("w", CK_FT_F32, ck_shape_make(2, w_3x2 ? d32 : d23), d->w);
    if (!skip_b)
        ADD("b", CK_FT_F32, ck_shape_make(1, &d3), d->b);
    ADD("h", CK_FT_F16, ck_shape_make(1, &d2), d->h);
    ADD("n", CK_FT_I64, ck_shape_make(1, &d2), d->n);
    ADD("q", CK_FT_U8, ck_shape_make(1, &d3), d->q);
    ADD("big", CK_FT_U64, ck_shape_make(1, &d2), d->big);
#undef ADD
}

static void base(tensors *d)
{
    for (int i = 0; i < 6; i++)
        d->w[i] = (float)i - 2.5f;
    d->b[0] = 1, d->b[1] = 2, d->b[2] = 3;
    d->h[0] = 0x3c00, d->h[1] = 0x4000; /* 1.0, 2.0 */
    d->n[0] = 5, d->n[1] = -7;
    d->q[0] = 1, d->q[1] = 2, d->q[2] = 255;
    d->big[0] = UINT64_MAX, d->big[1] = 3;
}

static const ck_pair *pair(const ck_set_comparison *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->p[i].name, name) == 0)
            return &c->p[i];
    ck_abort_msg("no pair %s", name);
    return NULL;
}

START_TEST(identical_sets_pass_and_every_dtype_is_compared)
{
    tensors da, dr;
    base(&da);
    base(&dr);
    ck_tensorset a, r;
    fill(&a, &da, "", false, false);
    fill(&r, &dr, "", false, false);
    ck_tolerances tol;
    ck_tolerances_init(&tol);
    ck_set_comparison c;
    ck_error err;
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    ck_assert(c.pass);
    ck_assert_int_eq(c.verdict, CK_VERDICT_IDENTICAL);
    ck_assert_int_eq(c.counts[CK_VERDICT_IDENTICAL], 6);
    ck_set_comparison_free(&c);

    /* One ULP in fp32 is close; one in u8 or u64 is a mismatch whatever the tolerance. */
    da.w[4] = nextafterf(da.w[4], 10.0f);
    da.q[2] = 254;
    da.big[0] = UINT64_MAX - 1;
    tol.cli.has_atol = tol.cli.has_rtol = true;
    tol.cli.atol = tol.cli.rtol = 100.0;
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    ck_assert_int_eq(pair(&c, "w")->verdict, CK_VERDICT_CLOSE);
    ck_assert_int_eq(pair(&c, "q")->verdict, CK_VERDICT_MISMATCH);
    ck_assert_int_eq(pair(&c, "q")->m.first_bad, 2);
    ck_assert_int_eq(pair(&c, "q")->m.max_ulp, 1);
    ck_assert_int_eq(pair(&c, "big")->verdict, CK_VERDICT_MISMATCH);
    ck_assert_int_eq(pair(&c, "big")->m.max_ulp, 1);
    ck_assert(!c.pass);
    ck_set_comparison_free(&c);
    ck_tensorset_free(&a);
    ck_tensorset_free(&r);
}
END_TEST

START_TEST(problems_are_listed_not_crashed_on)
{
    tensors da, dr;
    base(&da);
    base(&dr);
    ck_tensorset a, r;
    fill(&a, &da, "", true, true); /* no b, w is 3x2 */
    fill(&r, &dr, "", false, false);
    int64_t d1 = 1;
    ck_shape s1 = ck_shape_make(1, &d1);
    ck_error err;
    float zz = 0;
    ck_assert_int_eq(ck_tensorset_add(&a, "zz", CK_FT_F32, &s1, &zz, "mem", &err), CK_OK);
    a.t[1].dtype = CK_FT_BF16; /* "h" is now bf16 in a (same byte size) */
    ck_tolerances tol;
    ck_tolerances_init(&tol);
    ck_set_comparison c;
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    ck_assert_int_eq(pair(&c, "w")->kind, CK_PAIR_SHAPE);
    ck_assert_int_eq(pair(&c, "b")->kind, CK_PAIR_MISSING);
    ck_assert_int_eq(pair(&c, "h")->kind, CK_PAIR_DTYPE);
    ck_assert_int_eq(pair(&c, "zz")->kind, CK_PAIR_EXTRA);
    ck_assert_int_eq(c.n_problems[CK_PAIR_MISSING] + c.n_problems[CK_PAIR_EXTRA] +
                         c.n_problems[CK_PAIR_SHAPE] + c.n_problems[CK_PAIR_DTYPE], 4);
    ck_assert_int_eq(c.verdict, CK_VERDICT_MISMATCH);
    ck_assert(!c.pass);
    /* extras come last, in a's order */
    ck_assert_str_eq(c.p[c.n - 1].name, "zz");

    char line[512];
    ck_pair_describe(pair(&c, "w"), &a, &r, line, sizeof line);
    ck_assert_str_eq(line, "shape: w is [3, 2] in a, [2, 3] in ref");
    ck_pair_describe(pair(&c, "h"), &a, &r, line, sizeof line);
    ck_assert_str_eq(line, "dtype: h is bf16 in a, fp16 in ref");
    ck_set_comparison_free(&c);
    ck_tensorset_free(&a);
    ck_tensorset_free(&r);
}
END_TEST

START_TEST(map_translates_a_names_and_collisions_are_errors)
{
    tensors da, dr;
    base(&da);
    base(&dr);
    ck_tensorset a, r;
    fill(&a, &da, "model.", false, false);
    fill(&r, &dr, "", false, false);
    ck_tolerances tol;
    ck_tolerances_init(&tol);
    ck_name_map m;
    ck_error err;
    ck_name_map_init(&m);
    ck_assert_int_eq(parse_map(&m, "{\"patterns\": [[\"^model\\\\.\", \"\"]]}", &err), CK_OK);
    ck_set_comparison c;
    ck_assert_int_eq(ck_compare_sets(&a, &r, &m, &tol, &c, &err), CK_OK);
    ck_assert(c.pass);
    ck_assert_str_eq(pair(&c, "w")->name_a, "model.w");
    ck_set_comparison_free(&c);
    ck_name_map_free(&m);

    ck_name_map_init(&m);
    ck_assert_int_eq(parse_map(&m, "{\"rename\": {\"model.w\": \"model.b\"}}", &err), CK_OK);
    ck_assert_int_eq(ck_compare_sets(&a, &r, &m, &tol, &c, &err), CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "sends both"));
    ck_name_map_free(&m);
    ck_tensorset_free(&a);
    ck_tensorset_free(&r);
}
END_TEST

START_TEST(report_json_has_schema_metrics_and_renders_identically_twice)
{
    tensors da, dr;
    base(&da);
    base(&dr);
    da.w[5] += 0.25f;
    ck_tensorset a, r;
    fill(&a, &da, "", false, false);
    fill(&r, &dr, "", true, false);
    ck_tolerances tol;
    ck_tolerances_init(&tol);
    ck_set_comparison c;
    ck_error err;
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    ck_compare_meta meta = {.tool_version = "0.1.0", .path_a = "a.safetensors",
                            .path_ref = "ref.safetensors", .map_path = NULL,
                            .tol_path = "tol.json"};
    cJSON *j = ck_compare_to_json(&c, &a, &r, &meta);
    ck_assert_ptr_nonnull(j);
    char *t1 = cJSON_Print(j);
    cJSON *j2 = ck_compare_to_json(&c, &a, &r, &meta);
    char *t2 = cJSON_Print(j2);
    ck_assert_str_eq(t1, t2);
    cJSON_Delete(j); /* numbers are raw text in the tree: read the printed report back */
    j = cJSON_Parse(t1);
    ck_assert_ptr_nonnull(j);

    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "schema")->valuestring, CK_COMPARE_SCHEMA);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(j, "schema_version")->valueint,
                     CK_COMPARE_SCHEMA_VERSION);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "status")->valuestring, "fail");
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "map")));
    cJSON *tensors_j = cJSON_GetObjectItemCaseSensitive(j, "tensors");
    cJSON *w = cJSON_GetArrayItem(tensors_j, 0);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(w, "name")->valuestring, "w");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(w, "verdict")->valuestring, "mismatch");
    ck_assert(cJSON_GetObjectItemCaseSensitive(w, "rtol")->valuedouble == 1.3e-6);
    cJSON *m = cJSON_GetObjectItemCaseSensitive(w, "metrics");
    cJSON *fb = cJSON_GetObjectItemCaseSensitive(m, "first_bad_index");
    ck_assert_int_eq(cJSON_GetArraySize(fb), 2);
    ck_assert_int_eq(cJSON_GetArrayItem(fb, 0)->valueint, 1);
    ck_assert_int_eq(cJSON_GetArrayItem(fb, 1)->valueint, 2);
    ck_assert(cJSON_GetObjectItemCaseSensitive(m, "max_abs")->valuedouble == 0.25);
    cJSON *probs = cJSON_GetObjectItemCaseSensitive(j, "problems");
    ck_assert_int_eq(cJSON_GetArraySize(probs), 1);
    cJSON *p0 = cJSON_GetArrayItem(probs, 0);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(p0, "kind")->valuestring, "extra");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(p0, "name")->valuestring, "b");
    cJSON *sum = cJSON_GetObjectItemCaseSensitive(j, "summary");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(sum, "mismatch")->valueint, 1);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(sum, "extra")->valueint, 1);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "failures")), 2);
    /* u64 max stays exact: a matched pair's metrics never go through a double here */
    ck_assert_ptr_nonnull(strstr(t1, "\"max_ulp\":\t0"));
    cJSON_free(t1);
    cJSON_free(t2);
    cJSON_Delete(j);
    cJSON_Delete(j2);
    ck_set_comparison_free(&c);
    ck_tensorset_free(&a);
    ck_tensorset_free(&r);
}
END_TEST

START_TEST(integers_are_exact_unless_a_tensor_row_excuses_them)
{
    tensors da, dr;
    base(&da);
    base(&dr);
    da.n[1] = -6; /* one count off */
    da.q[0] = 3;  /* two off, in a widened dtype */
    ck_tensorset a, r;
    fill(&a, &da, "", false, false);
    fill(&r, &dr, "", false, false);
    ck_tolerances tol;
    ck_tolerances_init(&tol);
    ck_set_comparison c;
    ck_error err;
    /* --atol, "default" and "dtypes" never reach an integer */
    ck_assert_int_eq(parse_tol(&tol, "{\"default\": {\"atol\": 5}, \"dtypes\": {\"I64\": {\"atol\": 5}}}",
                               &err), CK_OK);
    tol.cli.has_atol = true, tol.cli.atol = 5;
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    ck_assert_int_eq(pair(&c, "n")->verdict, CK_VERDICT_MISMATCH);
    ck_assert_int_eq(pair(&c, "q")->verdict, CK_VERDICT_MISMATCH);
    ck_set_comparison_free(&c);
    ck_tolerances_free(&tol);
    /* a row naming the tensor does: n by 1 is excused, q needs 2 and gets 1 */
    ck_tolerances_init(&tol);
    ck_assert_int_eq(parse_tol(&tol, "{\"tensors\": {\"n\": {\"atol\": 1}, \"q\": {\"atol\": 1}}}",
                               &err), CK_OK);
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    ck_assert_int_eq(pair(&c, "n")->verdict, CK_VERDICT_CLOSE);
    ck_assert_int_eq(pair(&c, "n")->m.n_outside, 0);
    ck_assert_int_eq(pair(&c, "n")->m.max_ulp, 1); /* the distance stays exact */
    ck_assert_int_eq(pair(&c, "q")->verdict, CK_VERDICT_MISMATCH);
    ck_assert_int_eq(pair(&c, "q")->m.first_bad, 0);
    ck_set_comparison_free(&c);
    ck_tolerances_free(&tol);
    ck_tensorset_free(&a);
    ck_tensorset_free(&r);
}
END_TEST

START_TEST(selection_filters_and_expectations_must_be_met)
{
    tensors da, dr;
    base(&da);
    base(&dr);
    da.w[0] += 1.0f; /* w and n mismatch, the rest identical */
    da.n[0] = 6;
    ck_tensorset a, r;
    fill(&a, &da, "", false, false);
    fill(&r, &dr, "", false, false);
    ck_tolerances tol;
    ck_tolerances_init(&tol);
    ck_set_comparison c;
    ck_error err;
    int hits[2];

    const char *inc[] = {"[bh]"}, *exc[] = {"w"}, *expect_w[] = {"w", "n"}, *expect_b[] = {"b"};
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    ck_assert(!c.pass);
    ck_compare_selection sel = {1, 0, 0, inc, NULL, NULL};
    ck_compare_apply_selection(&c, &sel, hits);
    ck_assert_int_eq(c.n, 2); /* b and h */
    ck_assert(c.pass);
    ck_assert_int_eq(c.counts[CK_VERDICT_IDENTICAL], 2);
    ck_set_comparison_free(&c);

    /* --exclude w leaves n failing */
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    sel = (ck_compare_selection){0, 1, 0, NULL, exc, NULL};
    ck_compare_apply_selection(&c, &sel, hits);
    ck_assert_int_eq(c.n, 5);
    ck_assert(!c.pass);
    ck_set_comparison_free(&c);

    /* both mismatches expected: pass, the verdict stays mismatch */
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    sel = (ck_compare_selection){0, 0, 2, NULL, NULL, expect_w};
    ck_compare_apply_selection(&c, &sel, hits);
    ck_assert(c.pass);
    ck_assert_int_eq(c.verdict, CK_VERDICT_MISMATCH);
    ck_assert_int_eq(c.n_expected, 2);
    ck_assert_int_eq(hits[0], 1);
    ck_assert_int_eq(hits[1], 1);
    ck_assert(pair(&c, "w")->expected);
    ck_assert(!pair(&c, "b")->expected);
    ck_set_comparison_free(&c);

    /* an expectation that matches no mismatching tensor fails, and does not excuse w */
    ck_assert_int_eq(ck_compare_sets(&a, &r, NULL, &tol, &c, &err), CK_OK);
    sel = (ck_compare_selection){0, 0, 1, NULL, NULL, expect_b};
    ck_compare_apply_selection(&c, &sel, hits);
    ck_assert(!c.pass);
    ck_assert_int_eq(hits[0], 0);
    ck_assert_int_eq(c.n_expect_unmet, 1);
    ck_set_comparison_free(&c);

    /* a selection that keeps nothing compares nothing: no pass */
    const char *none[] = {"nothing*"};
    ck_assert_int_eq(ck_compare_sets(&r, &r, NULL, &tol, &c, &err), CK_OK);
    sel = (ck_compare_selection){1, 0, 0, none, NULL, NULL};
    ck_compare_apply_selection(&c, &sel, hits);
    ck_assert_int_eq(c.n, 0);
    ck_assert(!c.pass);
    ck_set_comparison_free(&c);
    ck_tensorset_free(&a);
    ck_tensorset_free(&r);
}
END_TEST

START_TEST(single_rename_map_pairs_two_names)
{
    ck_name_map m;
    ck_error err;
    ck_name_map_init(&m);
    ck_assert_int_eq(parse_map(&m, "{\"rename\": {\"x\": \"y\"}}", &err), CK_OK);
    ck_assert_int_eq(ck_name_map_single(&m, "ckpt", "plain", &err), CK_OK);
    assert_maps(&m, "ckpt", "plain");
    assert_maps(&m, "x", "x"); /* the earlier map is gone */
    ck_name_map_free(&m);
}
END_TEST

Suite *suite_tolerances(void)
{
    Suite *s = suite_create("tolerances");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, builtin_tolerances_are_torch_testings);
    tcase_add_test(tc, most_specific_tolerance_wins_per_field);
    tcase_add_test(tc, bad_tolerance_files_are_named_errors);
    suite_add_tcase(s, tc);
    return s;
}

Suite *suite_namemap(void)
{
    Suite *s = suite_create("namemap");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, map_renames_then_rewrites_with_groups);
    tcase_add_test(tc, bad_maps_are_named_errors);
    suite_add_tcase(s, tc);
    return s;
}

Suite *suite_setcompare(void)
{
    Suite *s = suite_create("setcompare");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, identical_sets_pass_and_every_dtype_is_compared);
    tcase_add_test(tc, problems_are_listed_not_crashed_on);
    tcase_add_test(tc, map_translates_a_names_and_collisions_are_errors);
    tcase_add_test(tc, report_json_has_schema_metrics_and_renders_identically_twice);
    tcase_add_test(tc, integers_are_exact_unless_a_tensor_row_excuses_them);
    tcase_add_test(tc, selection_filters_and_expectations_must_be_met);
    tcase_add_test(tc, single_rename_map_pairs_two_names);
    suite_add_tcase(s, tc);
    return s;
}
