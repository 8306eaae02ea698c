/*
 * Fast CPU max pooling (CK_OP_MAXPOOL) in fp32, without padding: the reference's unpadded
 * kernel (backends/ref/pool.c) with its exact semantics - the first maximum in the
 * window's row-major scan wins, a NaN wins over any number (the first NaN) - split across
 * threads by planes (N * C; no plane depends on another). A window of 2 x 2 with stride 2
 * (the U-Nets' pooling) runs 8 windows at a time in AVX2 on the very comparisons of the
 * scalar scan (compare, then select), so the output and the gradient's winner are the
 * same bits on every path. The backward adds dy to its window's winner (one fp32 add, as
 * the reference does); it runs here only when windows do not overlap (stride >= kernel on
 * every axis), where every dx element receives at most one add and the order of the adds
 * cannot matter. Everything else (average pooling, padded windows, overlapping backward,
 * fp16/bf16/fp64, mixed dtypes, refused arguments) goes to the reference (delegate.c).
 */
#include "backends/cpu/cpu_common.h"

#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

#define POOL_OUT_PER_TASK 16384 /* output elements per task, at least one plane */

typedef struct {
    ck_pool_geom g;
    const float *x, *dy;
    float *y, *dx;
    int64_t planes_per_task;
    cpk_isa isa;
} pool_job;

/* offset (from the window origin xw) of the first maximum, or of the first NaN: the
 * reference's scan (backends/ref/pool.c, max_window) */
static int64_t max_window(const float *xw, const ck_pool_geom *g)
{
    int64_t best_off = 0;
    float best = xw[0];
    for (int64_t k0 = 0; k0 < g->kernel[0]; k0++)
        for (int64_t k1 = 0; k1 < g->kernel[1]; k1++)
            for (int64_t k2 = 0; k2 < g->kernel[2]; k2++) {
                const int64_t off = (k0 * g->in[1] + k1) * g->in[2] + k2;
                const float v = xw[off];
                if (!isnan(best) && (v > best || isnan(v))) {
                    best = v;
                    best_off = off;
                }
            }
    return best_off;
}

/* the 2 x 2, stride-2 windows in a row of AVX2 vectors */
static bool is_2x2(const ck_pool_geom *g)
{
    return g->kernel[0] == 1 && g->kernel[1] == 2 && g->kernel[2] == 2 && g->stride[1] == 2 &&
           g->stride[2] == 2;
}

#if CPK_X86
/* even and odd elements of the 16 floats lo, hi (in order) */
__attribute__((target("avx2"))) static inline __m256 even_of(__m256 lo, __m256 hi)
{
    return _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
}

__attribute__((target("avx2"))) static inline __m256 odd_of(__m256 lo, __m256 hi)
{
    return _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

/* the scan's step: where best is not NaN and (v > best or v is NaN), v takes over */
__attribute__((target("avx2"))) static inline __m256 takes_over(__m256 best, __m256 v)
{
    const __m256 best_nan = _mm256_cmp_ps(best, best, _CMP_UNORD_Q);
    const __m256 wins = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                                     _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_andnot_ps(best_nan, wins);
}

/* 8 windows: r0, r1 the two input rows at the first window, m[4] the winner's place
 * (a, b on r0; c, d on r1) as lane masks; returns the maxima */
__attribute__((target("avx2"))) static inline __m256 max8(const float *r0, const float *r1,
                                                         __m256 m[4])
{
    const __m256 l0 = _mm256_loadu_ps(r0), h0 = _mm256_loadu_ps(r0 + 8);
    const __m256 l1 = _mm256_loadu_ps(r1), h1 = _mm256_loadu_ps(r1 + 8);
    const __m256 v[4] = {even_of(l0, h0), odd_of(l0, h0), even_of(l1, h1), odd_of(l1, h1)};
    __m256 best = v[0];
    m[0] = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int k = 1; k < 4; k++) {
        const __m256 t = takes_over(best, v[k]);
        best = _mm256_blendv_ps(best, v[k], t);
        for (int q = 0; q < k; q++)
            m[q] = _mm256_andnot_ps(t, m[q]);
        m[k] = t;
    }
    return best;
}

/* one output row of 2 x 2 windows; returns how many outputs it did (a multiple of 8) */
__attribute__((target("avx2"))) static int64_t fwd_row_2x2_avx2(const float *r0, const float *r1,
                                                                float *y, int64_t n)
{
    int64_t o = 0;
    __m256 m[4];
    for (; o + 8 <= n; o += 8)
        _mm256_storeu_ps(y + o, max8(r0 + 2 * o, r1 + 2 * o, m));
    return o;
}

/* d0, d1 (the two rows of dx at the first window) += dy at each window's winner */
__attribute__((target("avx2"))) static inline void add_at(float *d, __m256 dy, __m256 me,
                                                          __m256 mo)
{
    const __m256 lo = _mm256_loadu_ps(d), hi = _mm256_loadu_ps(d + 8);
    const __m256 e = even_of(lo, hi), od = odd_of(lo, hi);
    const __m256 ne = _mm256_blendv_ps(e, _mm256_add_ps(e, dy), me);
    const __m256 no = _mm256_blendv_ps(od, _mm256_add_ps(od, dy), mo);
    const __m256 ul = _mm256_unpacklo_ps(ne, no), uh = _mm256_unpackhi_ps(ne, no);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(ul, uh, 0x20));
    _mm256_storeu_ps(d + 8, _mm256_permute2f128_ps(ul, uh, 0x31));
}

__attribute__((target("avx2"))) static int64_t bwd_row_2x2_avx2(const float *r0, const float *r1,
                                                                const float *dy, float *d0,
                                                                float *d1, int64_t n)
{
    int64_t o = 0;
    __m256 m[4];
    for (; o + 8 <= n; o += 8) {
        (void)max8(r0 + 2 * o, r1 + 2 * o, m);
        const __m256 g = _mm256_loadu_ps(dy + o);
        add_at(d0 + 2 * o, g, m[0], m[1]);
        add_at(d1 + 2 * o, g, m[2], m[3]);
    }
    return o;
}
#endif

static void pool_fwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const pool_job *j = vctx;
    const ck_pool_geom *g = &j->g;
    const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];
    const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];
    const int64_t p0 = task * j->planes_per_task;
    const int64_t p1 = p0 + j->planes_per_task < g->planes ? p0 + j->planes_per_task : g->planes;
    const bool simd = CPK_X86 && j->isa != CPK_ISA_PORTABLE && is_2x2(g);
    for (int64_t p = p0; p < p1; p++)
        for (int64_t o0 = 0; o0 < g->out[0]; o0++)
            for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
                const float *xr =
                    j->x + p * in_plane + (o0 * g->stride[0] * g->in[1] + o1 * g->stride[1]) * g->in[2];
                float *yr = j->y + p * out_plane + (o0 * g->out[1] + o1) * g->out[2];
                int64_t o2 = 0;
#if CPK_X86
                if (simd)
                    o2 = fwd_row_2x2_avx2(xr, xr + g->in[2], yr, g->out[2]);
#endif
                for (; o2 < g->out[2]; o2++) {
                    const float *xw = xr + o2 * g->stride[2];
                    yr[o2] = xw[max_window(xw, g)];
                }
            }
    (void)simd;
}

static void pool_bwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const pool_job *j = vctx;
    const ck_pool_geom *g = &j->g;
    const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];
    const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];
    const int64_t p0 = task * j->planes_per_task;
    const int64_t p1 = p0 + j->planes_per_task < g->planes ? p0 + j->planes_per_task : g->planes;
    const bool simd = CPK_X86 && j->isa != CPK_ISA_PORTABLE && is_2x2(g);
    for (int64_t p = p0; p < p1; p++)
        for (int64_t o0 = 0; o0 < g->out[0]; o0++)
            for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
                const int64_t row =
                    p * in_plane + (o0 * g->stride[0] * g->in[1] + o1 * g->stride[1]) * g->in[2];
                const float *xr = j->x + row;
                float *dxr = j->dx + row;
                const float *dyr = j->dy + p * out_plane + (o0 * g->out[1] + o1) * g->out[2];
                int64_t o2 = 0;
#if CPK_X86
                if (simd)
                    o2 = bwd_row_2x2_avx2(xr, xr + g->in[2], dyr, dxr, dxr + g->in[2], g->out[2]);
#endif
                for (; o2 < g->out[2]; o2++) {
                    const int64_t w = o2 * g->stride[2];
                    float *d = dxr + w + max_window(xr + w, g);
                    *d += dyr[o2];
                }
            }
    (void)simd;
}

/* the fast path's geometry, or false: the call goes to the reference */
static bool fast_geom(const ck_op_params *op, const ck_tensor *const *t, int n,
                      const ck_tensor *x, const ck_tensor *y, ck_pool_geom *g)
{
    if (op->kind != CK_OP_MAXPOOL || ck_pool_is_padded(op))
        return false;
    for (int i = 0; i < n; i++)
        if (!t[i] || t[i]->dtype != CK_F32)
            return false;
    bool is_max;
    ck_error ignored = {{0}};
    return ck_opc_pool_setup(op, x, y, &is_max, g, &ignored) == CK_OK && g->planes > 0;
}

static int64_t planes_per_task(const ck_pool_geom *g)
{
    const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];
    const int64_t k = POOL_OUT_PER_TASK / (out_plane > 0 ? out_plane : 1);
    return k < 1 ? 1 : k;
}

ck_status cpu_pool_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                           ck_op_io *io, ck_error *err)
{
    const ck_tensor *all[] = {io->in[0], io->out};
    pool_job j = {.isa = c->isa};
    if (io->n_in != 1 || !fast_geom(op, all, 2, io->in[0], io->out, &j.g))
        return cpu_delegate_forward(c, op, args, io, err);
    j.x = io->in[0]->data;
    j.y = io->out->data;
    j.planes_per_task = planes_per_task(&j.g);
    cpk_parallel(c->pool, (j.g.planes + j.planes_per_task - 1) / j.planes_per_task,
                 pool_fwd_task, &j);
    return CK_OK;
}

ck_status cpu_pool_backward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                            const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    const ck_tensor *all[] = {io->in[0], g->dout, g->din[0]};
    pool_job j = {.isa = c->isa};
    if (io->n_in != 1 || !fast_geom(op, all, 3, io->in[0], g->dout, &j.g))
        return cpu_delegate_backward(c, op, args, io, g, err);
    for (int a = 0; a < 3; a++)
        if (j.g.stride[a] < j.g.kernel[a]) /* overlapping windows: the reference's order */
            return cpu_delegate_backward(c, op, args, io, g, err);
    j.x = io->in[0]->data;
    j.dy = g->dout->data;
    j.dx = g->din[0]->data;
    j.planes_per_task = planes_per_task(&j.g);
    cpk_parallel(c->pool, (j.g.planes + j.planes_per_task - 1) / j.planes_per_task,
                 pool_bwd_task, &j);
    return CK_OK;
}
