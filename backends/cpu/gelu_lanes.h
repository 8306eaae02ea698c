/*
 * The fp32 GELU (tanh form) kernels' body, included by gelu.c once per vector width: GV_W
 * doubles per vector, names suffixed GV_SUF, functions given the attributes GV_ATTR. Every
 * width runs the same IEEE double operations in the same order on every lane (no fma,
 * no reassociation; lanes hold different elements), so every width gives the same bits.
 */
#define GV_CAT2(a, b) a##b
#define GV_CAT(a, b) GV_CAT2(a, b)
#define GV_VD GV_CAT(gv_vd_, GV_SUF)
#define GV_VF GV_CAT(gv_vf_, GV_SUF)
#define GV_VL GV_CAT(gv_vl_, GV_SUF)

typedef float GV_VF GV_VECTOR_BYTES(4 * GV_W);

#include "backends/cpu/exp_lanes.h" /* the GV_VD and GV_VL types, gv_select_, gv_exp_ */

/* s = 1 / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + tanh(u)) without the
 * cancellation of 1 + tanh(u) for negative u. e^(-2u) is +Inf where -2u > GELU_EXP_MAX
 * (s = 0) and e^(-GELU_EXP_MAX) where -2u < -GELU_EXP_MAX (s = 1 in double). */
GV_ATTR static inline GV_VD GV_CAT(gv_half_one_plus_tanh_, GV_SUF)(GV_VD x)
{
    const GV_VD u = GELU_C * (x + GELU_K * x * x * x);
    const GV_VD m2u = -2.0 * u, zero = {0};
    const GV_VD big = zero + GELU_EXP_MAX, inf = zero + (double)INFINITY;
    GV_VD a = GV_CAT(gv_select_, GV_SUF)(m2u > big, big, m2u); /* NaN stays */
    a = GV_CAT(gv_select_, GV_SUF)(a < -big, -big, a);
    GV_VD e = GV_CAT(gv_exp_, GV_SUF)(a);
    e = GV_CAT(gv_select_, GV_SUF)(m2u > big, inf, e);
    return 1.0 / (1.0 + e);
}

/* y = x s (the forward); n a multiple of GV_W */
GV_ATTR static void GV_CAT(gelu_tanh_fwd_, GV_SUF)(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += GV_W) {
        GV_VF xf;
        memcpy(&xf, x + i, sizeof xf);
        const GV_VD xd = __builtin_convertvector(xf, GV_VD);
        const GV_VD s = GV_CAT(gv_half_one_plus_tanh_, GV_SUF)(xd);
        const GV_VF yf = __builtin_convertvector(xd * s, GV_VF);
        memcpy(y + i, &yf, sizeof yf);
    }
}

/* dx = (fresh ? +0 : dx) + dy gelu'(x), in double, rounded once; gelu'(x) =
 * s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 0.044715 x^2). n a multiple of GV_W; dx may be dy. */
GV_ATTR static void GV_CAT(gelu_tanh_bwd_, GV_SUF)(const float *x, const float *dy, float *dx,
                                                   int64_t n, bool fresh)
{
    for (int64_t i = 0; i < n; i += GV_W) {
        GV_VF xf, dyf, dxf;
        memcpy(&xf, x + i, sizeof xf);
        memcpy(&dyf, dy + i, sizeof dyf);
        const GV_VD xd = __builtin_convertvector(xf, GV_VD);
        const GV_VD s = GV_CAT(gv_half_one_plus_tanh_, GV_SUF)(xd);
        const GV_VD d = s + 2.0 * xd * s * (1.0 - s) * GELU_C * (1.0 + 3.0 * GELU_K * xd * xd);
        GV_VD old = {0}; /* +0 when fresh */
        if (!fresh) {
            memcpy(&dxf, dx + i, sizeof dxf);
            old = __builtin_convertvector(dxf, GV_VD);
        }
        dxf = __builtin_convertvector(old + __builtin_convertvector(dyf, GV_VD) * d, GV_VF);
        memcpy(dx + i, &dxf, sizeof dxf);
    }
}

#undef GV_VD
#undef GV_VF
#undef GV_VL
#undef GV_CAT
#undef GV_CAT2
