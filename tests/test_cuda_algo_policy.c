/*
 * The CUDA backend's CPU-side rules (backends/cuda/cuda_api.h, algo_policy.c, algo_pin.c,
 * mem_account.h): the algorithm policy's filtering table, ranking, names and parsing, the
 * math rule, the workspace cap, pinning per (pass, dtype, shape), layer names and the
 * one-line failures, and the workspace/scratch accounting. Plain C: no GPU needed.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "backends/cuda/algo_pin.h"
#include "backends/cuda/cuda_api.h"
#include "backends/cuda/mem_account.h"
#include "backends/registry.h"

// ----------------------------------------------------------------------------
// the policy's filtering table

typedef struct {
    const char *desc;
    ck_cuda_pass pass;
    int algo;
    ck_cuda_determinism det;
    bool deterministic_allows, fastest_allows;
} policy_row;

static const policy_row policy_table[] = {
    {"bwd-filter ALGO_0 (documented nondeterministic)", CK_CUDA_PASS_BACKWARD_FILTER, 0,
     CK_CUDA_NONDETERMINISTIC, false, true},
    {"bwd-filter ALGO_0 even if flagged deterministic", CK_CUDA_PASS_BACKWARD_FILTER, 0,
     CK_CUDA_DETERMINISTIC, false, true},
    {"bwd-filter ALGO_1, deterministic", CK_CUDA_PASS_BACKWARD_FILTER, 1, CK_CUDA_DETERMINISTIC,
     true, true},
    {"bwd-filter ALGO_1 flagged nondeterministic", CK_CUDA_PASS_BACKWARD_FILTER, 1,
     CK_CUDA_NONDETERMINISTIC, false, true},
    {"bwd-filter FFT, deterministic", CK_CUDA_PASS_BACKWARD_FILTER, 2, CK_CUDA_DETERMINISTIC,
     true, true},
    {"bwd-filter ALGO_3 (documented nondeterministic)", CK_CUDA_PASS_BACKWARD_FILTER, 3,
     CK_CUDA_NONDETERMINISTIC, false, true},
    {"bwd-filter ALGO_3 even if flagged deterministic", CK_CUDA_PASS_BACKWARD_FILTER, 3,
     CK_CUDA_DETERMINISTIC, false, true},
    {"bwd-filter FFT_TILING, deterministic", CK_CUDA_PASS_BACKWARD_FILTER, 6,
     CK_CUDA_DETERMINISTIC, true, true},
    {"bwd-filter 7 is out of range", CK_CUDA_PASS_BACKWARD_FILTER, 7, CK_CUDA_DETERMINISTIC,
     false, false},
    {"bwd-data ALGO_0 (documented nondeterministic)", CK_CUDA_PASS_BACKWARD_DATA, 0,
     CK_CUDA_NONDETERMINISTIC, false, true},
    {"bwd-data ALGO_0 even if flagged deterministic", CK_CUDA_PASS_BACKWARD_DATA, 0,
     CK_CUDA_DETERMINISTIC, false, true},
    {"bwd-data ALGO_1, deterministic", CK_CUDA_PASS_BACKWARD_DATA, 1, CK_CUDA_DETERMINISTIC,
     true, true},
    {"bwd-data WINOGRAD_NONFUSED flagged nondeterministic", CK_CUDA_PASS_BACKWARD_DATA, 5,
     CK_CUDA_NONDETERMINISTIC, false, true},
    {"bwd-data 6 is out of range", CK_CUDA_PASS_BACKWARD_DATA, 6, CK_CUDA_DETERMINISTIC, false,
     false},
    {"forward IMPLICIT_GEMM, deterministic", CK_CUDA_PASS_FORWARD, 0, CK_CUDA_DETERMINISTIC,
     true, true},
    {"forward ALGO number 0 is fine for forward", CK_CUDA_PASS_FORWARD, 0,
     CK_CUDA_DETERMINISTIC, true, true},
    {"forward ALGO number 3 (DIRECT) is fine for forward", CK_CUDA_PASS_FORWARD, 3,
     CK_CUDA_DETERMINISTIC, true, true},
    {"forward flagged nondeterministic", CK_CUDA_PASS_FORWARD, 1, CK_CUDA_NONDETERMINISTIC,
     false, true},
    {"forward WINOGRAD_NONFUSED, deterministic", CK_CUDA_PASS_FORWARD, 7, CK_CUDA_DETERMINISTIC,
     true, true},
    {"forward 8 is out of range", CK_CUDA_PASS_FORWARD, 8, CK_CUDA_DETERMINISTIC, false, false},
    {"negative algorithm", CK_CUDA_PASS_FORWARD, -1, CK_CUDA_DETERMINISTIC, false, false},
};

START_TEST(algo_allowed_follows_the_policy_table)
{
    const policy_row *r = &policy_table[_i];
    ck_assert_msg(ck_cuda_algo_allowed(r->pass, r->algo, r->det, CK_CUDA_ALGO_DETERMINISTIC) ==
                      r->deterministic_allows,
                  "%s: deterministic policy", r->desc);
    ck_assert_msg(ck_cuda_algo_allowed(r->pass, r->algo, r->det, CK_CUDA_ALGO_FASTEST) ==
                      r->fastest_allows,
                  "%s: fastest policy", r->desc);
}
END_TEST

START_TEST(algo_allowed_refuses_unknown_passes_and_policies)
{
    ck_assert(!ck_cuda_algo_allowed(CK_CUDA_PASS_COUNT, 1, CK_CUDA_DETERMINISTIC,
                                    CK_CUDA_ALGO_FASTEST));
    ck_assert(!ck_cuda_algo_allowed(CK_CUDA_PASS_FORWARD, 1, CK_CUDA_DETERMINISTIC,
                                    CK_CUDA_ALGO_POLICY_COUNT));
}
END_TEST

START_TEST(deterministic_never_allows_the_documented_nondeterministic_algorithms)
{
    /* whatever determinism flag cuDNN reports */
    for (int det = 0; det <= 1; det++) {
        ck_assert(!ck_cuda_algo_allowed(CK_CUDA_PASS_BACKWARD_FILTER, 0, det,
                                        CK_CUDA_ALGO_DETERMINISTIC));
        ck_assert(!ck_cuda_algo_allowed(CK_CUDA_PASS_BACKWARD_FILTER, 3, det,
                                        CK_CUDA_ALGO_DETERMINISTIC));
        ck_assert(!ck_cuda_algo_allowed(CK_CUDA_PASS_BACKWARD_DATA, 0, det,
                                        CK_CUDA_ALGO_DETERMINISTIC));
    }
    /* and nothing flagged nondeterministic, in any pass */
    for (int pass = 0; pass < CK_CUDA_PASS_COUNT; pass++)
        for (int algo = 0; algo < 8; algo++)
            ck_assert_msg(!ck_cuda_algo_allowed(pass, algo, CK_CUDA_NONDETERMINISTIC,
                                                CK_CUDA_ALGO_DETERMINISTIC),
                          "pass %d algo %d", pass, algo);
}
END_TEST

START_TEST(fastest_allows_every_algorithm_in_range)
{
    const int counts[CK_CUDA_PASS_COUNT] = {CK_CUDA_FWD_ALGO_COUNT, CK_CUDA_BWD_DATA_ALGO_COUNT,
                                            CK_CUDA_BWD_FILTER_ALGO_COUNT};
    for (int pass = 0; pass < CK_CUDA_PASS_COUNT; pass++)
        for (int algo = 0; algo < counts[pass]; algo++)
            for (int det = 0; det <= 1; det++)
                ck_assert_msg(ck_cuda_algo_allowed(pass, algo, det, CK_CUDA_ALGO_FASTEST),
                              "pass %d algo %d det %d", pass, algo, det);
}
END_TEST

// ----------------------------------------------------------------------------
// math types: no TF32 for fp32

START_TEST(fp32_runs_only_with_fma_math)
{
    ck_assert(ck_cuda_math_allowed(CK_F32, CK_CUDA_MATH_FMA));
    ck_assert(!ck_cuda_math_allowed(CK_F32, CK_CUDA_MATH_DEFAULT));
    ck_assert(!ck_cuda_math_allowed(CK_F32, CK_CUDA_MATH_TENSOR_OP));
    ck_assert(!ck_cuda_math_allowed(CK_F32, CK_CUDA_MATH_TENSOR_OP_ALLOW_CONVERSION));
}
END_TEST

START_TEST(low_precision_allows_tensor_cores_and_fp64_refuses_conversion)
{
    for (int m = 0; m < CK_CUDA_MATH_COUNT; m++) {
        ck_assert_msg(ck_cuda_math_allowed(CK_F16, m), "fp16 math %d", m);
        ck_assert_msg(ck_cuda_math_allowed(CK_BF16, m), "bf16 math %d", m);
    }
    ck_assert(ck_cuda_math_allowed(CK_F64, CK_CUDA_MATH_DEFAULT));
    ck_assert(ck_cuda_math_allowed(CK_F64, CK_CUDA_MATH_FMA));
    ck_assert(!ck_cuda_math_allowed(CK_F64, CK_CUDA_MATH_TENSOR_OP_ALLOW_CONVERSION));
    ck_assert(!ck_cuda_math_allowed(CK_I32, CK_CUDA_MATH_FMA));
    ck_assert(!ck_cuda_math_allowed(CK_F32, -1));
    ck_assert(!ck_cuda_math_allowed(CK_F16, CK_CUDA_MATH_COUNT));
}
END_TEST

// ----------------------------------------------------------------------------
// ranking cuDNN's answers

static ck_cuda_algo_candidate cand(int algo, bool ok, float ms, size_t mem, int det, int math)
{
    ck_cuda_algo_candidate c = {algo, ok, ms, mem, (ck_cuda_determinism)det, math};
    return c;
}

START_TEST(rank_by_time_filters_and_sorts_stably)
{
    /* a backward-filter Find answer for an fp32 layer, as cuDNN answers on an H200 */
    const ck_cuda_algo_candidate c[] = {
        cand(3, true, 1.0f, 0, 0, CK_CUDA_MATH_FMA),         /* fastest, nondeterministic */
        cand(0, true, 2.0f, 0, 0, CK_CUDA_MATH_FMA),         /* nondeterministic */
        cand(1, true, 24.0f, 1024, 1, CK_CUDA_MATH_FMA),     /* the deterministic one */
        cand(6, true, 24.0f, 4096, 1, CK_CUDA_MATH_FMA),     /* ties with ALGO_1: after it */
        cand(2, false, -1.0f, 0, 1, CK_CUDA_MATH_FMA),       /* not supported */
        cand(5, true, 5.0f, 0, 1, CK_CUDA_MATH_TENSOR_OP),   /* TF32: not for fp32 */
        cand(4, true, 3.0f, 1u << 30, 1, CK_CUDA_MATH_FMA),  /* over the workspace limit */
    };
    int order[8];
    int n = ck_cuda_algo_rank(CK_CUDA_PASS_BACKWARD_FILTER, CK_F32, CK_CUDA_ALGO_DETERMINISTIC,
                              1u << 20, true, c, 7, order);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(c[order[0]].algo, 1);
    ck_assert_int_eq(c[order[1]].algo, 6);

    n = ck_cuda_algo_rank(CK_CUDA_PASS_BACKWARD_FILTER, CK_F32, CK_CUDA_ALGO_FASTEST, 1u << 20,
                          true, c, 7, order);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(c[order[0]].algo, 3);
    ck_assert_int_eq(c[order[1]].algo, 0);
    ck_assert_int_eq(c[order[2]].algo, 1);
    ck_assert_int_eq(c[order[3]].algo, 6);

    /* fp16: the tensor-core entry counts too */
    n = ck_cuda_algo_rank(CK_CUDA_PASS_BACKWARD_FILTER, CK_F16, CK_CUDA_ALGO_DETERMINISTIC,
                          SIZE_MAX, true, c, 7, order);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(c[order[0]].algo, 4);
    ck_assert_int_eq(c[order[1]].algo, 5);
}
END_TEST

START_TEST(rank_by_heuristic_keeps_cudnns_order)
{
    const ck_cuda_algo_candidate c[] = {
        cand(0, true, -1.0f, 0, 0, CK_CUDA_MATH_FMA),
        cand(6, true, -1.0f, 0, 1, CK_CUDA_MATH_FMA),
        cand(1, true, -1.0f, 0, 1, CK_CUDA_MATH_FMA),
    };
    int order[3];
    int n = ck_cuda_algo_rank(CK_CUDA_PASS_BACKWARD_FILTER, CK_F32, CK_CUDA_ALGO_DETERMINISTIC,
                              SIZE_MAX, false, c, 3, order);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(c[order[0]].algo, 6);
    ck_assert_int_eq(c[order[1]].algo, 1);
    ck_assert_int_eq(ck_cuda_algo_rank(CK_CUDA_PASS_BACKWARD_FILTER, CK_F32,
                                       CK_CUDA_ALGO_DETERMINISTIC, SIZE_MAX, false, c, 0, order),
                     0);
}
END_TEST

// ----------------------------------------------------------------------------
// engines, math for queries, workspace cap (algo_pin.h)

START_TEST(fp64_and_mixed_convolutions_never_reach_cudnn)
{
    ck_assert_int_eq(ck_cuda_conv_engine_for(CK_F32), CK_CUDA_CONV_CUDNN);
    ck_assert_int_eq(ck_cuda_conv_engine_for(CK_F16), CK_CUDA_CONV_CUDNN);
    ck_assert_int_eq(ck_cuda_conv_engine_for(CK_BF16), CK_CUDA_CONV_CUDNN);
    ck_assert_int_eq(ck_cuda_conv_engine_for(CK_F64), CK_CUDA_CONV_DIRECT);
    ck_assert_int_eq(ck_cuda_conv_engine_for(CK_DTYPE_COUNT), CK_CUDA_CONV_WIDE);
}
END_TEST

START_TEST(query_math_depends_on_the_dtype_only)
{
    /* set before every query, so the math type an earlier pass ran with (any of them) never
     * reaches the next query; fp32 asks for FMA and nothing else is accepted for it */
    ck_assert_int_eq(ck_cuda_query_math(CK_F32), CK_CUDA_MATH_FMA);
    ck_assert(ck_cuda_math_allowed(CK_F32, ck_cuda_query_math(CK_F32)));
    ck_assert_int_eq(ck_cuda_query_math(CK_F16), CK_CUDA_MATH_TENSOR_OP);
    ck_assert_int_eq(ck_cuda_query_math(CK_BF16), CK_CUDA_MATH_TENSOR_OP);
    ck_assert_int_eq(ck_cuda_query_math(CK_F64), CK_CUDA_MATH_DEFAULT);
    for (int m = 0; m < CK_CUDA_MATH_COUNT; m++)
        if (m != CK_CUDA_MATH_FMA)
            ck_assert_msg(!ck_cuda_math_allowed(CK_F32, m), "fp32 with math %d", m);
}
END_TEST

START_TEST(workspace_cap_defaults_and_overrides)
{
    size_t cap = 7;
    ck_error err;
    ck_assert_int_eq(ck_cuda_workspace_cap((size_t)141 << 30, NULL, &cap, &err), CK_OK);
    ck_assert_uint_eq(cap, (size_t)1 << 30);
    ck_assert_int_eq(ck_cuda_workspace_cap((size_t)4 << 30, "", &cap, &err), CK_OK);
    ck_assert_uint_eq(cap, (size_t)512 << 20); /* 1/8 of a small device */
    ck_assert_int_eq(ck_cuda_workspace_cap((size_t)4 << 30, "256", &cap, &err), CK_OK);
    ck_assert_uint_eq(cap, (size_t)256 << 20);
    ck_assert_int_eq(ck_cuda_workspace_cap((size_t)4 << 30, "0", &cap, &err), CK_OK);
    ck_assert_uint_eq(cap, 0);
    const char *bad[] = {"-1", "abc", "12x", " 5", "1048577", "99999999999999999999999"};
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        ck_assert_int_eq(ck_cuda_workspace_cap((size_t)4 << 30, bad[i], &cap, &err),
                         CK_ERR_INPUT);
        ck_assert_msg(strstr(err.msg, "CK_CUDA_WORKSPACE_MIB=") == err.msg, "'%s'", err.msg);
        ck_assert_msg(strchr(err.msg, '\n') == NULL, "'%s'", err.msg);
    }
}
END_TEST

START_TEST(rank_drops_candidates_over_the_workspace_cap)
{
    const ck_cuda_algo_candidate c[] = {
        cand(1, true, -1.0f, (size_t)3 << 30, 1, CK_CUDA_MATH_FMA), /* cuDNN's first pick */
        cand(0, true, -1.0f, (size_t)1 << 20, 1, CK_CUDA_MATH_FMA),
        cand(2, true, -1.0f, 0, 1, CK_CUDA_MATH_FMA),
    };
    int order[3];
    int n = ck_cuda_algo_rank(CK_CUDA_PASS_FORWARD, CK_F32, CK_CUDA_ALGO_DETERMINISTIC,
                              (size_t)1 << 30, false, c, 3, order);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(c[order[0]].algo, 0);
    ck_assert_int_eq(c[order[1]].algo, 2);
    n = ck_cuda_algo_rank(CK_CUDA_PASS_FORWARD, CK_F32, CK_CUDA_ALGO_DETERMINISTIC, 0, false, c,
                          3, order);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(c[order[0]].algo, 2);
}
END_TEST

// ----------------------------------------------------------------------------
// pinning and the failure rules

static ck_cuda_conv_key key_for(ck_cuda_pass pass, ck_dtype dt, int d)
{
    const int xd[5] = {1, 4, d, 368, 224}, wd[5] = {4, 4, 3, 3, 3}, yd[5] = {1, 4, d, 368, 224};
    const int pad[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1};
    return ck_cuda_conv_key_make(pass, dt, 3, xd, wd, yd, pad, stride, dil);
}

START_TEST(keys_tell_pass_dtype_and_shape_apart)
{
    const ck_cuda_conv_key a = key_for(CK_CUDA_PASS_FORWARD, CK_F32, 368);
    ck_cuda_conv_key b = key_for(CK_CUDA_PASS_FORWARD, CK_F32, 368);
    ck_assert(ck_cuda_conv_key_equal(&a, &b));
    b = key_for(CK_CUDA_PASS_BACKWARD_DATA, CK_F32, 368);
    ck_assert(!ck_cuda_conv_key_equal(&a, &b));
    b = key_for(CK_CUDA_PASS_FORWARD, CK_F16, 368);
    ck_assert(!ck_cuda_conv_key_equal(&a, &b));
    b = key_for(CK_CUDA_PASS_FORWARD, CK_F32, 184);
    ck_assert(!ck_cuda_conv_key_equal(&a, &b));
    /* a 2-D key ignores the unused third entries */
    const int xd[5] = {1, 2, 8, 8, 99}, wd[5] = {3, 2, 3, 3, 99}, yd[5] = {1, 3, 8, 8, 99};
    const int p1[3] = {1, 1, 7}, p2[3] = {1, 1, 0}, one[3] = {1, 1, 1};
    const ck_cuda_conv_key k1 = ck_cuda_conv_key_make(CK_CUDA_PASS_FORWARD, CK_F32, 2, xd, wd, yd,
                                                      p1, one, one);
    const ck_cuda_conv_key k2 = ck_cuda_conv_key_make(CK_CUDA_PASS_FORWARD, CK_F32, 2, xd, wd, yd,
                                                      p2, one, one);
    ck_assert(ck_cuda_conv_key_equal(&k1, &k2));
}
END_TEST

START_TEST(the_first_algorithm_that_runs_stays_pinned)
{
    ck_cuda_pin_table t = {NULL, 0, 0};
    ck_error err;
    const ck_cuda_algo_candidate c[] = {
        cand(1, true, -1.0f, 1 << 20, 1, CK_CUDA_MATH_FMA),
        cand(0, true, -1.0f, 0, 1, CK_CUDA_MATH_FMA),
    };
    const ck_cuda_conv_key k = key_for(CK_CUDA_PASS_BACKWARD_FILTER, CK_F32, 368);
    ck_assert_ptr_null(ck_cuda_pin_find(&t, &k));
    ck_cuda_conv_choice *ch = NULL;
    ck_assert_int_eq(ck_cuda_pin_add(&t, &k, c, 2, false, &ch, &err), CK_OK);
    ck_assert_ptr_eq(ck_cuda_pin_find(&t, &k), ch);
    ck_assert(!ch->pinned);
    ck_assert_int_eq(ck_cuda_choice_current(ch)->algo, 1);
    ck_cuda_choice_ran(ch); /* the plain run's first call */
    ck_assert(ch->pinned);
    /* the checkpointed run, later, with less memory free: the pinned algorithm or nothing */
    ck_assert_int_eq(ck_cuda_after_failure(CK_CUDA_ALGO_DETERMINISTIC, ch->pinned,
                                           CK_CUDA_FAIL_NO_WORKSPACE),
                     CK_CUDA_FAIL);
    ck_assert_int_eq(ck_cuda_after_failure(CK_CUDA_ALGO_FASTEST, ch->pinned,
                                           CK_CUDA_FAIL_NO_WORKSPACE),
                     CK_CUDA_FAIL);
    ck_cuda_choice_skip(ch); /* a no-op once pinned */
    ck_assert_int_eq(ck_cuda_choice_current(ch)->algo, 1);
    /* adding the key again is a bug, not a re-pin */
    ck_cuda_conv_choice *again = NULL;
    ck_assert_int_eq(ck_cuda_pin_add(&t, &k, c, 2, false, &again, &err), CK_ERR_INTERNAL);
    ck_assert_ptr_null(again);
    /* many keys: the table grows and keeps finding each */
    for (int d = 1; d <= 40; d++) {
        const ck_cuda_conv_key kd = key_for(CK_CUDA_PASS_FORWARD, CK_F16, d);
        ck_assert_int_eq(ck_cuda_pin_add(&t, &kd, c, 2, true, &again, &err), CK_OK);
    }
    for (int d = 1; d <= 40; d++) {
        const ck_cuda_conv_key kd = key_for(CK_CUDA_PASS_FORWARD, CK_F16, d);
        ck_cuda_conv_choice *e = ck_cuda_pin_find(&t, &kd);
        ck_assert_ptr_nonnull(e);
        ck_assert(e->from_find);
    }
    ck_assert_ptr_eq(ck_cuda_pin_find(&t, &k), &t.e[0]);
    ck_assert_int_eq(ck_cuda_pin_add(&t, &k, c, 33, false, &again, &err), CK_ERR_INTERNAL);
    ck_cuda_pin_free(&t);
    ck_assert_int_eq(t.n, 0);
}
END_TEST

START_TEST(before_pinning_only_shape_properties_move_on_under_deterministic)
{
    /* NOT_SUPPORTED is the same in every run: the next candidate, under both policies */
    ck_assert_int_eq(ck_cuda_after_failure(CK_CUDA_ALGO_DETERMINISTIC, false,
                                           CK_CUDA_FAIL_NOT_SUPPORTED),
                     CK_CUDA_TRY_NEXT);
    ck_assert_int_eq(ck_cuda_after_failure(CK_CUDA_ALGO_FASTEST, false,
                                           CK_CUDA_FAIL_NOT_SUPPORTED),
                     CK_CUDA_TRY_NEXT);
    /* free memory is not: deterministic fails, fastest moves on */
    ck_assert_int_eq(ck_cuda_after_failure(CK_CUDA_ALGO_DETERMINISTIC, false,
                                           CK_CUDA_FAIL_NO_WORKSPACE),
                     CK_CUDA_FAIL);
    ck_assert_int_eq(ck_cuda_after_failure(CK_CUDA_ALGO_FASTEST, false,
                                           CK_CUDA_FAIL_NO_WORKSPACE),
                     CK_CUDA_TRY_NEXT);
    ck_assert_int_eq(ck_cuda_after_failure(CK_CUDA_ALGO_DETERMINISTIC, true,
                                           CK_CUDA_FAIL_NOT_SUPPORTED),
                     CK_CUDA_FAIL);

    /* skipping walks the ranking, then runs out */
    ck_cuda_pin_table t = {NULL, 0, 0};
    ck_error err;
    const ck_cuda_algo_candidate c[] = {
        cand(1, true, -1.0f, 0, 1, CK_CUDA_MATH_TENSOR_OP),
        cand(6, true, -1.0f, 0, 1, CK_CUDA_MATH_TENSOR_OP),
    };
    const ck_cuda_conv_key k = key_for(CK_CUDA_PASS_BACKWARD_FILTER, CK_BF16, 368);
    ck_cuda_conv_choice *ch = NULL;
    ck_assert_int_eq(ck_cuda_pin_add(&t, &k, c, 2, false, &ch, &err), CK_OK);
    ck_cuda_choice_skip(ch);
    ck_assert_int_eq(ck_cuda_choice_current(ch)->algo, 6);
    ck_cuda_choice_skip(ch);
    ck_assert_ptr_null(ck_cuda_choice_current(ch));
    ck_cuda_choice_ran(ch); /* nothing to pin */
    ck_assert(!ch->pinned);
    ck_cuda_pin_free(&t);
}
END_TEST

// ----------------------------------------------------------------------------
// one-line failures naming the layer

static void assert_line_has(const ck_error *err, const char *const *parts, int n)
{
    ck_assert_msg(strchr(err->msg, '\n') == NULL, "'%s' spans lines", err->msg);
    for (int i = 0; i < n; i++)
        ck_assert_msg(strstr(err->msg, parts[i]) != NULL, "'%s' lacks '%s'", err->msg, parts[i]);
}

START_TEST(layer_names_come_from_the_weight)
{
    char buf[64];
    ck_cuda_layer_name("b3_conv7.weight", buf, sizeof buf);
    ck_assert_str_eq(buf, "b3_conv7");
    ck_cuda_layer_name("enc.block1.weight", buf, sizeof buf);
    ck_assert_str_eq(buf, "enc.block1");
    ck_cuda_layer_name("plain", buf, sizeof buf);
    ck_assert_str_eq(buf, "plain");
    ck_cuda_layer_name(".weight", buf, sizeof buf);
    ck_assert_str_eq(buf, ".weight");
    ck_cuda_layer_name(NULL, buf, sizeof buf);
    ck_assert_str_eq(buf, "(unnamed)");
}
END_TEST

START_TEST(a_workspace_that_cannot_be_allocated_fails_naming_layer_and_bytes)
{
    const ck_cuda_conv_site s = {"b3_conv7", 3, CK_CUDA_PASS_BACKWARD_FILTER, CK_F32,
                                 CK_CUDA_ALGO_DETERMINISTIC};
    ck_error err;
    ck_assert_int_eq(ck_cuda_fail_workspace(&s, 1, 123456789, false, &err), CK_ERR_NOMEM);
    const char *parts[] = {"layer `b3_conv7`", "conv3d backward_filter", "fp32",
                           "123456789-byte", "ALGO_1", "deterministic policy never switches"};
    assert_line_has(&err, parts, 6);
    ck_assert_int_eq(ck_cuda_fail_workspace(&s, 1, 123456789, true, &err), CK_ERR_NOMEM);
    const char *pinned[] = {"layer `b3_conv7`", "pinned", "never switched"};
    assert_line_has(&err, pinned, 3);
}
END_TEST

START_TEST(unsupported_low_precision_convolutions_fail_cleanly)
{
    /* what cuDNN's legacy API may answer for bf16/fp16 NCDHW: nothing usable, a refusal at
     * run time, or NOT_SUPPORTED from the query itself: each CK_ERR_UNSUPPORTED, one line,
     * naming the layer */
    const ck_cuda_conv_site s = {"b0_conv0", 3, CK_CUDA_PASS_BACKWARD_DATA, CK_BF16,
                                 CK_CUDA_ALGO_DETERMINISTIC};
    const ck_cuda_algo_candidate c[] = {
        cand(1, false, -1.0f, 0, 1, CK_CUDA_MATH_TENSOR_OP),
        cand(0, true, -1.0f, 0, 0, CK_CUDA_MATH_TENSOR_OP),
    };
    ck_error err;
    ck_assert_int_eq(ck_cuda_fail_no_algorithm(&s, (size_t)1 << 30, c, 2, &err),
                     CK_ERR_UNSUPPORTED);
    const char *parts[] = {"layer `b0_conv0`", "conv3d backward_data, bf16", "ALGO_1 (not supported)",
                           "ALGO_0 (nondeterministic", "1073741824-byte workspace cap"};
    assert_line_has(&err, parts, 5);
    ck_assert_int_eq(ck_cuda_fail_no_algorithm(&s, 0, NULL, 0, &err), CK_ERR_UNSUPPORTED);
    const char *nothing[] = {"layer `b0_conv0`", "offered: nothing"};
    assert_line_has(&err, nothing, 2);

    ck_assert_int_eq(ck_cuda_fail_refused(&s, 1, false, &err), CK_ERR_UNSUPPORTED);
    const char *refused[] = {"layer `b0_conv0`", "CUDNN_STATUS_NOT_SUPPORTED", "ALGO_1"};
    assert_line_has(&err, refused, 3);

    ck_assert_int_eq(ck_cuda_fail_unsupported_call(
                         &s, "cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y)", &err),
                     CK_ERR_UNSUPPORTED);
    const char *call[] = {"layer `b0_conv0`", "cudnnGetConvolutionBackwardDataAlgorithm_v7:",
                          "in fp32, or on --backend cpu"};
    assert_line_has(&err, call, 3);
    ck_assert_msg(strstr(err.msg, "d->w") == NULL, "'%s' keeps only the function", err.msg);

    /* fp32 that cuDNN would run with other than FMA math */
    const ck_cuda_conv_site f = {"enc1", 2, CK_CUDA_PASS_FORWARD, CK_F32,
                                 CK_CUDA_ALGO_DETERMINISTIC};
    ck_assert_int_eq(ck_cuda_fail_math(&f, CK_CUDA_MATH_FMA, CK_CUDA_MATH_DEFAULT, &err),
                     CK_ERR_UNSUPPORTED);
    const char *math[] = {"layer `enc1`", "conv2d forward, fp32", "DEFAULT", "only with FMA"};
    assert_line_has(&err, math, 4);
}
END_TEST

START_TEST(workspace_and_scratch_are_counted_apart_with_peaks)
{
    ck_cuda_mem_account m;
    memset(&m, 0, sizeof m);
    ck_cuda_mem_on_alloc(&m, 1000, true);
    ck_cuda_mem_on_alloc(&m, 300, false);
    ck_cuda_mem_on_alloc(&m, 500, true);
    ck_assert_int_eq(m.workspace_live, 1500);
    ck_assert_int_eq(m.workspace_peak, 1500);
    ck_cuda_mem_on_free(&m, 1000, true);
    ck_cuda_mem_on_alloc(&m, 200, true);
    ck_assert_int_eq(m.workspace_live, 700);
    ck_assert_int_eq(m.workspace_peak, 1500);
    ck_assert_int_eq(m.scratch_peak, 300);
    ck_cuda_mem_reset_peaks(&m);
    ck_assert_int_eq(m.workspace_peak, 700);
    ck_assert_int_eq(m.scratch_peak, 300);
    ck_cuda_mem_on_free(&m, 300, false);
    ck_cuda_mem_on_free(&m, 300, false); /* never below zero */
    ck_assert_int_eq(m.scratch_live, 0);
}
END_TEST

// ----------------------------------------------------------------------------
// names and parsing

START_TEST(policy_names_parse_back)
{
    ck_cuda_algo_policy p = CK_CUDA_ALGO_FASTEST;
    ck_assert(ck_cuda_algo_policy_parse("deterministic", &p));
    ck_assert_int_eq(p, CK_CUDA_ALGO_DETERMINISTIC);
    ck_assert(ck_cuda_algo_policy_parse("fastest", &p));
    ck_assert_int_eq(p, CK_CUDA_ALGO_FASTEST);
    ck_assert(!ck_cuda_algo_policy_parse("Fastest", &p));
    ck_assert(!ck_cuda_algo_policy_parse("", &p));
    ck_assert(!ck_cuda_algo_policy_parse(NULL, &p));
    ck_assert_str_eq(ck_cuda_algo_policy_name(CK_CUDA_ALGO_DETERMINISTIC), "deterministic");
    ck_assert_str_eq(ck_cuda_algo_policy_name(CK_CUDA_ALGO_FASTEST), "fastest");
    ck_assert_str_eq(ck_cuda_algo_policy_name(CK_CUDA_ALGO_POLICY_COUNT), "unknown");
}
END_TEST

START_TEST(algorithm_and_math_names_follow_cudnn)
{
    ck_assert_str_eq(ck_cuda_conv_algo_name(CK_CUDA_PASS_FORWARD, 1), "IMPLICIT_PRECOMP_GEMM");
    ck_assert_str_eq(ck_cuda_conv_algo_name(CK_CUDA_PASS_FORWARD, 7), "WINOGRAD_NONFUSED");
    ck_assert_str_eq(ck_cuda_conv_algo_name(CK_CUDA_PASS_BACKWARD_DATA, 0), "ALGO_0");
    ck_assert_str_eq(ck_cuda_conv_algo_name(CK_CUDA_PASS_BACKWARD_DATA, 3), "FFT_TILING");
    ck_assert_str_eq(ck_cuda_conv_algo_name(CK_CUDA_PASS_BACKWARD_FILTER, 3), "ALGO_3");
    ck_assert_str_eq(ck_cuda_conv_algo_name(CK_CUDA_PASS_BACKWARD_FILTER, 6), "FFT_TILING");
    ck_assert_str_eq(ck_cuda_conv_algo_name(CK_CUDA_PASS_BACKWARD_FILTER, 7), "unknown");
    ck_assert_str_eq(ck_cuda_conv_algo_name(CK_CUDA_PASS_FORWARD, -1), "unknown");
    ck_assert_str_eq(ck_cuda_pass_name(CK_CUDA_PASS_BACKWARD_FILTER), "backward_filter");
    ck_assert_str_eq(ck_cuda_math_name(CK_CUDA_MATH_FMA), "FMA");
    ck_assert_str_eq(ck_cuda_math_name(9), "unknown");
}
END_TEST

/* A pass cuDNN refuses on its first call moves onto the direct kernels, for good; a pinned
 * algorithm that fails later, or a failure of another kind, is an error. */
START_TEST(a_refused_pass_falls_back_once_and_for_good)
{
    ck_assert(ck_cuda_falls_back(CK_ERR_UNSUPPORTED, false));
    ck_assert(!ck_cuda_falls_back(CK_ERR_UNSUPPORTED, true));
    ck_assert(!ck_cuda_falls_back(CK_ERR_NOMEM, false));
    ck_assert(!ck_cuda_falls_back(CK_ERR_BACKEND, false));
    ck_assert(!ck_cuda_falls_back(CK_OK, false));
    ck_cuda_pin_table t = {0};
    ck_error err;
    const ck_cuda_conv_key a = key_for(CK_CUDA_PASS_BACKWARD_FILTER, CK_BF16, 7),
                           b = key_for(CK_CUDA_PASS_BACKWARD_DATA, CK_BF16, 7);
    ck_assert(!ck_cuda_fallback_find(&t, &a));
    ck_assert_int_eq(ck_cuda_fallback_add(&t, &a, &err), CK_OK);
    ck_assert_int_eq(ck_cuda_fallback_add(&t, &a, &err), CK_OK); /* once is enough */
    ck_assert_int_eq(t.n, 1);
    ck_assert(ck_cuda_fallback_find(&t, &a));
    ck_assert(!ck_cuda_fallback_find(&t, &b));
    ck_cuda_pin_free(&t);
}
END_TEST

Suite *suite_cuda_algo_policy(void)
{
    Suite *s = suite_create("cuda_algo_policy");
    TCase *tc = tcase_create("policy");
    tcase_add_loop_test(tc, algo_allowed_follows_the_policy_table, 0,
                        (int)(sizeof policy_table / sizeof policy_table[0]));
    tcase_add_test(tc, algo_allowed_refuses_unknown_passes_and_policies);
    tcase_add_test(tc, deterministic_never_allows_the_documented_nondeterministic_algorithms);
    tcase_add_test(tc, fastest_allows_every_algorithm_in_range);
    tcase_add_test(tc, fp32_runs_only_with_fma_math);
    tcase_add_test(tc, low_precision_allows_tensor_cores_and_fp64_refuses_conversion);
    tcase_add_test(tc, rank_by_time_filters_and_sorts_stably);
    tcase_add_test(tc, rank_by_heuristic_keeps_cudnns_order);
    tcase_add_test(tc, policy_names_parse_back);
    tcase_add_test(tc, algorithm_and_math_names_follow_cudnn);
    tcase_add_test(tc, fp64_and_mixed_convolutions_never_reach_cudnn);
    tcase_add_test(tc, query_math_depends_on_the_dtype_only);
    tcase_add_test(tc, workspace_cap_defaults_and_overrides);
    tcase_add_test(tc, rank_drops_candidates_over_the_workspace_cap);
    tcase_add_test(tc, keys_tell_pass_dtype_and_shape_apart);
    tcase_add_test(tc, the_first_algorithm_that_runs_stays_pinned);
    tcase_add_test(tc, before_pinning_only_shape_properties_move_on_under_deterministic);
    tcase_add_test(tc, layer_names_come_from_the_weight);
    tcase_add_test(tc, a_workspace_that_cannot_be_allocated_fails_naming_layer_and_bytes);
    tcase_add_test(tc, unsupported_low_precision_convolutions_fail_cleanly);
    tcase_add_test(tc, workspace_and_scratch_are_counted_apart_with_peaks);
    tcase_add_test(tc, a_refused_pass_falls_back_once_and_for_good);
    suite_add_tcase(s, tc);

    return s;
}
