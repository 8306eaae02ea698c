/*
 * The fp32 layernorm's per-row output loops (forward y, backward dx) over NV_W columns at a
 * time, included by norm.c once per vector width: NV_W doubles per vector, names suffixed
 * NV_SUF, functions given the attributes NV_ATTR. A lane holds one column; every lane runs
 * the operations of norm.c's scalar loop (ln_fwd_out, ln_dx_out) in their order, in IEEE
 * double without fma (norm.c keeps contraction off), and rounds once to fp32 as the
 * scalar cast does: every width gives the scalar loop's bits.
 */
#define NV_CAT2(a, b) a##b
#define NV_CAT(a, b) NV_CAT2(a, b)
#define NV_VD NV_CAT(nv_vd_, NV_SUF)
#define NV_VF NV_CAT(nv_vf_, NV_SUF)

typedef double NV_VD NV_VECTOR_BYTES(8 * NV_W);
typedef float NV_VF NV_VECTOR_BYTES(4 * NV_W);

/* NV_W floats at p widened to doubles (p NULL: every lane `none`) */
NV_ATTR static inline NV_VD NV_CAT(nv_load_, NV_SUF)(const float *p, double none)
{
    if (!p) {
        const NV_VD zero = {0};
        return zero + none;
    }
    NV_VF f;
    memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, NV_VD);
}

/* columns [0, n), n a multiple of NV_W: y = (float)(((double)x - mean) * invstd * w + b),
 * w 1 and b 0 where absent */
NV_ATTR static void NV_CAT(ln_out_, NV_SUF)(const float *x, const float *w, const float *b,
                                            float *y, int64_t n, double mean, double invstd)
{
    for (int64_t c = 0; c < n; c += NV_W) {
        const NV_VD xhat = (NV_CAT(nv_load_, NV_SUF)(x + c, 0.0) - mean) * invstd;
        const NV_VD wv = NV_CAT(nv_load_, NV_SUF)(w ? w + c : NULL, 1.0);
        const NV_VD bv = NV_CAT(nv_load_, NV_SUF)(b ? b + c : NULL, 0.0);
        const NV_VF yf = __builtin_convertvector(xhat * wv + bv, NV_VF);
        memcpy(y + c, &yf, sizeof yf);
    }
}

/* columns [0, n), n a multiple of NV_W: dx = (float)((double)dx + k * (D g - sum_g - xhat
 * sum_g_xhat)) with g = dy w (w 1 where absent), xhat = (x - mean) invstd, k = invstd / D */
NV_ATTR static void NV_CAT(ln_dx_, NV_SUF)(const float *x, const float *dy, const float *w,
                                           float *dx, int64_t n, double mean, double invstd,
                                           double D, double k, double sum_g, double sum_g_xhat)
{
    for (int64_t c = 0; c < n; c += NV_W) {
        const NV_VD xhat = (NV_CAT(nv_load_, NV_SUF)(x + c, 0.0) - mean) * invstd;
        const NV_VD g = NV_CAT(nv_load_, NV_SUF)(dy + c, 0.0) *
                        NV_CAT(nv_load_, NV_SUF)(w ? w + c : NULL, 1.0);
        const NV_VD t = D * g - sum_g - xhat * sum_g_xhat;
        const NV_VF o = __builtin_convertvector(NV_CAT(nv_load_, NV_SUF)(dx + c, 0.0) + k * t,
                                                NV_VF);
        memcpy(dx + c, &o, sizeof o);
    }
}

#undef NV_VD
#undef NV_VF
#undef NV_CAT
#undef NV_CAT2
