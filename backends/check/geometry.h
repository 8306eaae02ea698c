/*
 * Geometry of the double-kernel ops (matmul, attention, conv_transpose, linear upsampling,
 * padded pooling), shared by the reference (backends/ref/wide_kernels.h) and CUDA
 * (backends/cuda/cuda_common.cuh) kernels and filled by the shared checks (op_checwide_kernels.h).
 */
#ifndef CK_CHECK_GEOMETRY_H
#define CK_CHECK_GEOMETRY_H

#include <stdbool.h>
#include <stdint.h>

#include "harness/core/rng.h"

/* A convolution's shapes brought to three spatial dims (missing leading dims have size 1):
 * the fast CPU kernels and the CUDA direct convolution run on it. */
typedef struct {
    int64_t N, C, F;
    int64_t in[3], out[3], k[3];
    int64_t stride[3], dil[3], pad_lo[3];
} ck_conv_geom3;

typedef struct {
    int64_t batch, M, K, N;
    bool trans_a; /* A stored (B, K, M) */
    bool trans_b; /* Bm stored (Bb, N, K) */
    bool b_shared; /* Bm has batch 1 (a parameter, or a 2-D activation) */
} ck_matmul_geom;

typedef struct {
    int64_t N, Lq, Lk, H, Dk, Dv;
    double scale;
    bool causal;
    double rate;                /* 0: no dropout (rng unused) */
    const ck_rng_stream *rng;
} ck_attn_geom;

typedef struct {
    int64_t N, Ci, Co;
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad[3];
} ck_convt_geom;

typedef struct {
    int64_t planes, in[3], out[3];
    bool align_corners;
} ck_lerp_geom;

typedef struct {
    int64_t planes, in[3], out[3], k[3], stride[3], pad[3];
    bool is_max, count_include_pad;
} ck_pool_pad_geom;

#endif
