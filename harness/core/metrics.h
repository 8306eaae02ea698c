/*
 * Tensor comparison: a pure function of two tensors and a tolerance.
 *
 * Metrics first, verdict second. `ref` is the reference (the plain run); the closeness
 * test is numpy's |a - ref| <= atol + rtol * |ref|. NaN never passes unless both sides
 * hold NaN at the same place; an infinity passes only against the same infinity.
 */
#ifndef CK_COMPARE_H
#define CK_COMPARE_H

#include "harness/core/tensor.h"

typedef enum { CK_VERDICT_IDENTICAL = 0, CK_VERDICT_CLOSE, CK_VERDICT_MISMATCH } ck_verdict;

typedef struct {
    int64_t numel;
    bool bitwise;        /* every byte equal */
    double max_abs;      /* max |a - ref| over elements where both are finite */
    double max_rel;      /* max |a - ref| / |ref| over finite pairs with ref != 0 */
    double rel_l2;       /* ||a - ref||_2 / ||ref||_2 over finite pairs (0 if both 0, inf if only ref is) */
    uint64_t max_ulp;    /* max ULP distance (floats; across zero; +0 and -0 are 0 apart);
                            UINT64_MAX when a non-finite value is unmatched */
    double max_ratio;    /* max |a - ref| / (atol + rtol |ref|) over finite pairs: the error
                            against its bound, <= 1 when inside (0/0 counts 0, x/0 inf) */
    int64_t n_outside;   /* elements failing the closeness test (incl. unmatched non-finite) */
    int64_t first_bad;   /* flat index of the first such element, -1 if none */
    int64_t nan_a, nan_ref, inf_a, inf_ref;
} ck_metrics;

/* Compares numel elements of dtype dt. Integer dtypes are compared exactly (any
 * difference is outside tolerance). Returns the verdict: IDENTICAL when bitwise equal,
 * CLOSE when nothing is outside tolerance, MISMATCH otherwise. */
ck_verdict ck_compare(ck_dtype dt, int64_t numel, const void *a, const void *ref, double rtol,
                      double atol, ck_metrics *m);

const char *ck_verdict_name(ck_verdict v);

/* How many of n fp32 values (read as bits, any alignment) are zeros (either sign),
 * subnormals, infinities and NaNs. */
typedef struct {
    int64_t zero, subnormal, inf, nan;
} ck_f32_classes;
void ck_f32_count_classes(const void *data, int64_t n, ck_f32_classes *c);
/* ULP distance between two finite floats of the same dtype (fp32/fp64/fp16/bf16 bits). */
uint64_t ck_ulp_distance_f32(float a, float b);
uint64_t ck_ulp_distance_f64(double a, double b);

#endif
