/*
 * Tensor comparison: metrics for one pair of tensors, then a verdict.
 *
 * Every element is read into a double (exactly: fp16/bf16 are decoded from their bit
 * patterns, fp32/fp64/i32 convert without rounding) together with a monotonic integer
 * "ordinal" of its bit pattern, so that ULP distance is a plain integer difference.
 * Metrics are accumulated in one fixed element order, so the same inputs always give the
 * same bits in the result, whatever machine runs them.
 */
#include "harness/core/metrics.h"

#include "harness/core/half.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------------------------- */
/* Decoding elements                                                                   */
/* ---------------------------------------------------------------------------------- */

/* One element ready for comparison: its value and, for floats, its ordinal. */
typedef struct {
    double v;
    int64_t ord;
} elem;

/* Maps a sign-magnitude bit pattern onto the integers so that adjacent floats are
 * adjacent integers: negative x -> -(bits & magnitude mask). +0 and -0 both map to 0,
 * which is why they are 0 ULP apart and a distance across zero is the sum of both
 * magnitudes. */
static int64_t ordinal(uint64_t bits, uint64_t sign_bit)
{
    uint64_t mag = bits & (sign_bit - 1);
    return (bits & sign_bit) ? -(int64_t)mag : (int64_t)mag;
}

/* |ia - ib| without signed overflow: two fp64 ordinals may be 2^64 - 2 apart. */
static uint64_t ord_distance(int64_t ia, int64_t ib)
{
    return ia >= ib ? (uint64_t)ia - (uint64_t)ib : (uint64_t)ib - (uint64_t)ia;
}


static elem load_float(ck_dtype dt, const void *base, int64_t i)
{
    elem e;
    switch (dt) {
    case CK_F32: {
        uint32_t bits;
        float f;
        memcpy(&bits, (const unsigned char *)base + (size_t)i * 4, 4);
        memcpy(&f, &bits, 4);
        e.v = (double)f;
        e.ord = ordinal(bits, UINT64_C(1) << 31);
        break;
    }
    case CK_F64: {
        uint64_t bits;
        memcpy(&bits, (const unsigned char *)base + (size_t)i * 8, 8);
        memcpy(&e.v, &bits, 8);
        e.ord = ordinal(bits, UINT64_C(1) << 63);
        break;
    }
    case CK_F16:
    case CK_BF16: {
        uint16_t bits;
        memcpy(&bits, (const unsigned char *)base + (size_t)i * 2, 2);
        e.v = dt == CK_F16 ? (double)ck_f16_to_f32(bits) : (double)ck_bf16_to_f32(bits);
        e.ord = ordinal(bits, UINT64_C(1) << 15);
        break;
    }
    default:
        e.v = 0.0;
        e.ord = 0;
        break;
    }
    return e;
}

static int64_t load_int(ck_dtype dt, const void *base, int64_t i)
{
    if (dt == CK_I32) {
        int32_t x;
        memcpy(&x, (const unsigned char *)base + (size_t)i * 4, 4);
        return x;
    }
    int64_t x;
    memcpy(&x, (const unsigned char *)base + (size_t)i * 8, 8);
    return x;
}

/* ---------------------------------------------------------------------------------- */
/* Accumulators                                                                        */
/* ---------------------------------------------------------------------------------- */

/* A Euclidean norm accumulated with a running scale (as BLAS dnrm2 does), so that fp64
 * tensors with values near DBL_MAX neither overflow nor lose their small elements. */
typedef struct {
    double scale, ssq;
} norm_acc;

static void norm_add(norm_acc *n, double x)
{
    double ax = fabs(x);
    if (ax == 0.0 || isinf(n->scale))
        return;
    if (isinf(ax)) {
        /* A difference that overflowed (fp64 near DBL_MAX): the norm is infinite, and
         * stays so without the inf/inf = NaN the scaling below would produce. */
        n->scale = INFINITY;
        n->ssq = 1.0;
        return;
    }
    if (n->scale < ax) {
        double r = n->scale / ax;
        n->ssq = 1.0 + n->ssq * r * r;
        n->scale = ax;
    } else {
        double r = ax / n->scale;
        n->ssq += r * r;
    }
}

static void mark_outside(ck_metrics *m, int64_t i)
{
    if (m->first_bad < 0)
        m->first_bad = i;
    m->n_outside++;
}

/* ||diff|| / ||ref|| as a ratio of scales times a ratio of sums, so that norms which
 * would overflow on their own (fp64 near DBL_MAX) still divide to the right value. */
static void finish_rel_l2(ck_metrics *m, const norm_acc *diff, const norm_acc *ref)
{
    if (ref->scale == 0.0)
        m->rel_l2 = diff->scale == 0.0 ? 0.0 : INFINITY;
    else if (isinf(diff->scale))
        m->rel_l2 = INFINITY;
    else
        m->rel_l2 = (diff->scale / ref->scale) * sqrt(diff->ssq / ref->ssq);
}

/* ---------------------------------------------------------------------------------- */
/* Comparison                                                                          */
/* ---------------------------------------------------------------------------------- */

static void compare_floats(ck_dtype dt, int64_t numel, const void *a, const void *ref,
                           double rtol, double atol, ck_metrics *m)
{
    norm_acc diff = {0.0, 1.0}, refn = {0.0, 1.0};
    for (int64_t i = 0; i < numel; i++) {
        elem x = load_float(dt, a, i), y = load_float(dt, ref, i);
        bool nan_x = isnan(x.v), nan_y = isnan(y.v);
        bool inf_x = isinf(x.v), inf_y = isinf(y.v);
        m->nan_a += nan_x;
        m->nan_ref += nan_y;
        m->inf_a += inf_x;
        m->inf_ref += inf_y;
        if (nan_x || nan_y || inf_x || inf_y) {
            /* Only the same non-finite value at the same place is a match: NaN with NaN
             * (any payload), an infinity with the same infinity. */
            bool matched = (nan_x && nan_y) || (inf_x && inf_y && x.v == y.v);
            if (!matched) {
                m->max_ulp = UINT64_MAX;
                mark_outside(m, i);
            }
            continue;
        }
        double d = fabs(x.v - y.v); /* may overflow to +inf for fp64 extremes: outside */
        if (d > m->max_abs)
            m->max_abs = d;
        if (y.v != 0.0 && d / fabs(y.v) > m->max_rel)
            m->max_rel = d / fabs(y.v);
        norm_add(&diff, x.v - y.v);
        norm_add(&refn, y.v);
        uint64_t u = ord_distance(x.ord, y.ord);
        if (u > m->max_ulp)
            m->max_ulp = u;
        double bound = atol + rtol * fabs(y.v);
        double ratio = d == 0.0 ? 0.0 : bound > 0.0 ? d / bound : INFINITY;
        if (ratio > m->max_ratio || isnan(ratio))
            m->max_ratio = isnan(ratio) ? INFINITY : ratio;
        if (!(d <= bound))
            mark_outside(m, i);
    }
    finish_rel_l2(m, &diff, &refn);
}

/* Integers are compared exactly: any difference is outside tolerance. max_ulp holds the
 * largest integer distance, which (unlike max_abs) stays exact above 2^53. */
static void compare_ints(ck_dtype dt, int64_t numel, const void *a, const void *ref,
                         ck_metrics *m)
{
    norm_acc diff = {0.0, 1.0}, refn = {0.0, 1.0};
    for (int64_t i = 0; i < numel; i++) {
        int64_t x = load_int(dt, a, i), y = load_int(dt, ref, i);
        uint64_t u = ord_distance(x, y);
        double d = (double)u;
        if (d > m->max_abs)
            m->max_abs = d;
        if (y != 0) {
            double r = d / fabs((double)y);
            if (r > m->max_rel)
                m->max_rel = r;
        }
        if (u > m->max_ulp)
            m->max_ulp = u;
        norm_add(&diff, x >= y ? d : -d);
        norm_add(&refn, (double)y);
        if (u != 0)
            mark_outside(m, i);
    }
    finish_rel_l2(m, &diff, &refn);
}

static inline void f32_classify(uint32_t bits, uint32_t *zero, uint32_t *subnormal,
                                uint32_t *inf, uint32_t *nan)
{
    const uint32_t mag = bits & UINT32_C(0x7fffffff);
    *zero += mag == 0;
    *subnormal += (mag - 1) < UINT32_C(0x007fffff); /* 1 .. 0x7fffff */
    *inf += mag == UINT32_C(0x7f800000);
    *nan += mag > UINT32_C(0x7f800000);
}

void ck_f32_count_classes(const void *data, int64_t n, ck_f32_classes *c)
{
    const unsigned char *p = data;
    memset(c, 0, sizeof *c);
    for (int64_t i = 0; i < n; i += 64) {
        /* blocks of a fixed 64 elements, which the compiler turns into vector code */
        const int len = n - i < 64 ? (int)(n - i) : 64;
        uint32_t z = 0, s = 0, f = 0, q = 0, bits;
        if (len == 64)
            for (int k = 0; k < 64; k++) {
                memcpy(&bits, p + (size_t)(i + k) * 4, 4);
                f32_classify(bits, &z, &s, &f, &q);
            }
        else
            for (int k = 0; k < len; k++) {
                memcpy(&bits, p + (size_t)(i + k) * 4, 4);
                f32_classify(bits, &z, &s, &f, &q);
            }
        c->zero += z;
        c->subnormal += s;
        c->inf += f;
        c->nan += q;
    }
}

/* The metrics of two bitwise-equal tensors, without the element loop of compare_floats:
 * every finite pair is 0 apart (max_abs, max_rel, max_ulp, max_ratio and rel_l2 stay 0,
 * nothing is outside) and every non-finite value meets itself, so only the NaN and
 * infinity counts are left to take. The plain and checkpointed runs on the CPU are
 * bitwise equal by design, so this is the judgement's usual path. */
static void count_nonfinite_equal(ck_dtype dt, int64_t numel, const void *a, ck_metrics *m)
{
    int64_t nan = 0, inf = 0;
    if (dt == CK_F32) {
        ck_f32_classes c;
        ck_f32_count_classes(a, numel, &c);
        nan = c.nan;
        inf = c.inf;
    } else if (ck_dtype_is_float(dt)) {
        for (int64_t i = 0; i < numel; i++) {
            const double v = load_float(dt, a, i).v;
            nan += isnan(v) != 0; /* isinf may answer -1 for -inf */
            inf += isinf(v) != 0;
        }
    }
    m->nan_a = m->nan_ref = nan;
    m->inf_a = m->inf_ref = inf;
}

ck_verdict ck_compare(ck_dtype dt, int64_t numel, const void *a, const void *ref, double rtol,
                      double atol, ck_metrics *m)
{
    memset(m, 0, sizeof *m);
    m->first_bad = -1;
    if (numel <= 0) {
        m->bitwise = true;
        return CK_VERDICT_IDENTICAL;
    }
    m->numel = numel;
    size_t esize = ck_dtype_size(dt);
    if (esize == 0) {
        /* An unknown dtype is a caller bug; call it a total mismatch rather than guess. */
        m->max_ulp = UINT64_MAX;
        m->n_outside = numel;
        m->first_bad = 0;
        return CK_VERDICT_MISMATCH;
    }
    m->bitwise = memcmp(a, ref, (size_t)numel * esize) == 0;
    if (m->bitwise) {
        count_nonfinite_equal(dt, numel, a, m);
        return CK_VERDICT_IDENTICAL;
    }
    if (ck_dtype_is_float(dt))
        compare_floats(dt, numel, a, ref, rtol, atol, m);
    else
        compare_ints(dt, numel, a, ref, m);
    return m->n_outside == 0 ? CK_VERDICT_CLOSE : CK_VERDICT_MISMATCH;
}

const char *ck_verdict_name(ck_verdict v)
{
    switch (v) {
    case CK_VERDICT_IDENTICAL: return "identical";
    case CK_VERDICT_CLOSE: return "close";
    case CK_VERDICT_MISMATCH: return "mismatch";
    }
    return "?";
}

/* NaN has no place on the number line: it is infinitely far from everything. Infinities
 * sit one ULP beyond the largest finite value, as their bit patterns do. */
uint64_t ck_ulp_distance_f32(float a, float b)
{
    if (isnan(a) || isnan(b))
        return UINT64_MAX;
    uint32_t ba, bb;
    memcpy(&ba, &a, sizeof ba);
    memcpy(&bb, &b, sizeof bb);
    return ord_distance(ordinal(ba, UINT64_C(1) << 31), ordinal(bb, UINT64_C(1) << 31));
}

uint64_t ck_ulp_distance_f64(double a, double b)
{
    if (isnan(a) || isnan(b))
        return UINT64_MAX;
    uint64_t ba, bb;
    memcpy(&ba, &a, sizeof ba);
    memcpy(&bb, &b, sizeof bb);
    return ord_distance(ordinal(ba, UINT64_C(1) << 63), ordinal(bb, UINT64_C(1) << 63));
}
