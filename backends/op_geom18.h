/*
 * Geometry of the issue-18 ops, shared by the reference (backends/ref/k18.h) and CUDA
 * (backends/cuda/k18_cuda.cuh) kernels and filled by the shared checks (op_check18.h).
 */
#ifndef CK_OP_GEOM18_H
#define CK_OP_GEOM18_H

#include <stdbool.h>
#include <stdint.h>

#include "harness/core/rng.h"

typedef struct {
    int64_t batch, M, K, N;
    bool trans_a; /* A stored (B, K, M) */
    bool trans_b; /* Bm stored (Bb, N, K) */
    bool b_shared; /* Bm has batch 1 (a parameter, or a 2-D activation) */
} k18_matmul_geom;

typedef struct {
    int64_t N, Lq, Lk, H, Dk, Dv;
    double scale;
    bool causal;
    double rate;                /* 0: no dropout (rng unused) */
    const ck_rng_stream *rng;
} k18_attn_geom;

typedef struct {
    int64_t N, Ci, Co;
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad[3];
} k18_convt_geom;

typedef struct {
    int64_t planes, in[3], out[3];
    bool align_corners;
} k18_lerp_geom;

typedef struct {
    int64_t planes, in[3], out[3], k[3], stride[3], pad[3];
    bool is_max, count_include_pad;
} k18_pool_geom;

#endif
