/*
 * e^u in double lanes, included by a kernel file once per vector width with the macros of
 * gelu_lanes.h defined: GV_W doubles per vector, names suffixed GV_SUF, attributes GV_ATTR,
 * GV_CAT, GV_VECTOR_BYTES, and the names GV_VD and GV_VL of the vector types it defines
 * here (GV_W doubles, GV_W 64-bit integers). Every width runs the same IEEE double
 * operations in the same order on every lane (no fma: the includer keeps contraction off),
 * so every width gives the same bits. Used by the tanh-form GELU (gelu_lanes.h) and by the
 * fp32 attention's softmax (attention_gemm.c).
 */
typedef double GV_VD GV_VECTOR_BYTES(8 * GV_W);
typedef long long GV_VL GV_VECTOR_BYTES(8 * GV_W);

/* a where m is set (all ones), else b */
GV_ATTR static inline GV_VD GV_CAT(gv_select_, GV_SUF)(GV_VL m, GV_VD a, GV_VD b)
{
    return (GV_VD)(((GV_VL)a & m) | ((GV_VL)b & ~m));
}

/* e^u for |u| <= 708 (NaN stays NaN; callers clamp or replace u outside it):
 * u = k ln 2 + r with k = rint(u / ln 2) and |r| <= ln 2 / 2 (ln 2 in two parts, the first
 * exact in a product with k), e^r by its Taylor series to r^11 (relative error below
 * 1e-14), times 2^k from the bits of k. */
GV_ATTR static inline GV_VD GV_CAT(gv_exp_, GV_SUF)(GV_VD u)
{
    const double magic = 0x1.8p52; /* adding it rounds to an integer held in the low bits */
    const GV_VD t = u * 0x1.71547652b82fep0 + magic; /* u log2(e) */
    const GV_VD kd = t - magic;
    GV_VD r = u - kd * 0x1.62e42fee00000p-1; /* ln 2, high part: 32 bits */
    r = r - kd * 0x1.a39ef35793c76p-33;     /* ln 2, the rest */
    GV_VD p = r * (1.0 / 39916800.0) + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    const long long magic_bits = 0x4338000000000000ll; /* the bits of magic */
    const GV_VL k = (GV_VL)t - magic_bits;
    const GV_VL scale = (k + 1023) << 52; /* 2^k: |k| <= 1022 */
    return p * (GV_VD)scale;
}

