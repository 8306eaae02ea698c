/*
 * Private to the fast CPU backend: attention in fp32 GEMMs (attention_gemm.c), the path
 * attention.c takes for fp32 q, k, v without dropout whose values are in range.
 */
#ifndef CK_CPU_ATTENTION_GEMM_H
#define CK_CPU_ATTENTION_GEMM_H

#include "backends/cpu/cpu_common.h"

/* Whether the GEMM path takes this call: no dropout, non-empty sizes within its limits,
 * every value of q, k, v (and dy, when not NULL) finite and small enough that no fp32 sum
 * of the op can overflow. Other calls keep the reference's double arithmetic
 * (attention.c), which gives the reference's bits, NaN and Inf included. */
bool cpu_attention_gemm_fits(const cpu_ctx *c, const ck_attn_geom *g, const float *q,
                             const float *k, const float *v, const float *dy);

/* Forward (dy NULL): y = attention(q, k, v). Backward (dy set): dq, dk, dv (each may be
 * NULL; none the same tensor as another) += the gradients. Split by (sample, head) across
 * c's threads; what names the call in an error. */
ck_status cpu_attention_gemm(const cpu_ctx *c, const ck_attn_geom *g, const float *q,
                             const float *k, const float *v, float *y, const float *dy,
                             float *dq, float *dk, float *dv, const char *what, ck_error *err);

#endif
