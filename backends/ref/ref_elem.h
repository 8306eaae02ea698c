/*
 * Private to the CPU backend: element access by dtype, the dtype checks every op file
 * shares (backends/check/check.h, one implementation with the CUDA backend), and "wide
 * views" that let a kernel written for double run on tensors of any float dtype. The
 * mixed-precision rules implemented here are in harness/precision.md.
 *
 * Every tensor is loaded in its own dtype (fp32, fp64, fp16 or bf16) into a double and
 * stored by rounding a double once into its dtype. Accumulation (backward's +=):
 *  - fp32/fp64: (T)(old + v) with the sum formed in double, as the kernels always did;
 *  - fp16/bf16: the exact sum old + v rounded once. The double sum alone could round
 *    twice (old + v -> double -> low dtype; e.g. fp16 1 + (2^-11 + 2^-60) would become the
 *    tie 1 + 2^-11 and then 1.0 instead of 1 + 2^-10), so the sum is formed in double
 *    rounded to odd (TwoSum; Boldo & Melquiond), which then rounds to the low dtype
 *    exactly as the exact sum would: 53 >= 11 + 2 and 8 + 2 bits.
 */
#ifndef CK_CPU_ELEM_H
#define CK_CPU_ELEM_H

#include "backends/check/check.h"

/* the backend's name in the shared checks' messages (backends/check/check.h) */
#define REF_BE "ref"

static inline bool ref_is_float(ck_dtype dt)
{
    return ck_opc_is_float(dt);
}

static inline const char *ref_tname(const ck_tensor *t)
{
    return ck_opc_tname(t);
}

/* fp16/bf16 element access, out of line (ref_elem.c) so that the fp32/fp64 paths below
 * stay as small as the kernels' hot loops need them */
double ref_ld_low(const ck_tensor *t, int64_t i);
void ref_st_low(ck_tensor *t, int64_t i, double v);
void ref_acc_low(ck_tensor *t, int64_t i, double v);

/* a + b rounded to odd in double: ck_sum_round_odd (backends/check/numerics.h) */

/* t[i] as a double (exact for every float dtype) */
static inline double ref_ld(const ck_tensor *t, int64_t i)
{
    if (t->dtype == CK_F32)
        return (double)((const float *)t->data)[i];
    if (t->dtype == CK_F64)
        return ((const double *)t->data)[i];
    return ref_ld_low(t, i);
}

/* t[i] = v rounded once to t's dtype */
static inline void ref_st(ck_tensor *t, int64_t i, double v)
{
    if (t->dtype == CK_F32)
        ((float *)t->data)[i] = (float)v;
    else if (t->dtype == CK_F64)
        ((double *)t->data)[i] = v;
    else
        ref_st_low(t, i, v);
}

/* t[i] += v, rounded once into t's dtype (see the file comment) */
static inline void ref_acc(ck_tensor *t, int64_t i, double v)
{
    if (t->dtype == CK_F32)
        ((float *)t->data)[i] = (float)((double)((const float *)t->data)[i] + v);
    else if (t->dtype == CK_F64)
        ((double *)t->data)[i] += v;
    else
        ref_acc_low(t, i, v);
}

/* Every non-NULL t[0..n) must have a float dtype (fp32, fp64, fp16, bf16); otherwise
 * CK_ERR_UNSUPPORTED naming op, the tensor and its dtype (ck_opc_float_dtypes). */
static inline ck_status ref_check_float_dtypes(const char *op, const ck_tensor *const *t, int n,
                                               ck_error *err)
{
    return ck_opc_float_dtypes(REF_BE, op, t, n, err);
}

/* The dtype every non-NULL t[0..n) shares, or CK_DTYPE_COUNT when they differ. Kernels
 * run their fp32 / fp64 instantiation when all share fp32 / fp64, and otherwise the
 * fp64 one on wide views. */
static inline ck_dtype ref_common_dtype(const ck_tensor *const *t, int n)
{
    return ck_opc_common_dtype(t, n);
}

/* ---- wide views: a tensor's values as doubles ---- */

typedef struct {
    double *data;  /* NULL for a NULL tensor */
    double *owned; /* the converted copy, NULL when data is the fp64 tensor's own memory */
} ref_wide;

/* An input: t's own memory when t is fp64, else a converted copy. */
ck_status ref_wide_in(const char *op, const ck_tensor *t, ref_wide *w, ck_error *err);
/* An output or gradient: t's own memory when t is fp64, else a scratch buffer, zeroed
 * when `zero` (for gradients, which the fp64 kernels accumulate into). */
ck_status ref_wide_out(const char *op, const ck_tensor *t, bool zero, ref_wide *w,
                       ck_error *err);
/* Forward output: t[i] = w[i] rounded once (nothing to do when w is t's own memory). */
void ref_wide_store(ck_tensor *t, const ref_wide *w);
/* Gradient: t[i] += w[i] with ref_acc (nothing to do when w is t's own memory). */
void ref_wide_accumulate(ck_tensor *t, const ref_wide *w);
void ref_wide_free(ref_wide *w);

#endif
