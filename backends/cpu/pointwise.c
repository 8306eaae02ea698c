/*
 * Fast CPU pointwise ops, split across threads by element ranges (elementwise: no
 * reduction, so the split cannot change a bit), bit-identical to the reference backend's
 * (backends/ref/pointwise.c):
 *  - relu, when x, y, dy and dx share fp32, fp16 or bf16: forward x > 0 ? x : +0, backward
 *    dx + dy * (x > 0 ? 1 : 0) rounded once (fp16/bf16: the same double expression and
 *    round-to-odd sum as the reference);
 *  - add of same-shape fp32 tensors: forward y = ((0 + a0) + a1) + ... in double, rounded
 *    once; backward din[k] = din[k] + dy in double, rounded once, for each input k in
 *    order (four elements per AVX2 register of doubles, each lane the scalar operations).
 * With din0_fresh (backend.h) din[0] starts as +0 and may be dy's own buffer. Every other
 * activation, relu in fp64 or mixed dtypes, and add in other dtypes or with broadcasting
 * are delegated to the reference backend (delegate.c).
 */
#include "backends/cpu/cpu_common.h"

#include "harness/core/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

#define ELEMS_PER_TASK 16384

typedef struct {
    const float *x, *dy;
    float *y, *dx;
    int64_t n;
    ck_dtype dt; /* CK_F32, or CK_F16 / CK_BF16 for the 16-bit views below */
    const uint16_t *hx, *hdy;
    uint16_t *hy, *hdx;
    bool fresh; /* ck_op_grads.din0_fresh: dx starts as +0 and may be dy's buffer */
    cpk_isa isa;
} relu_job;

#if CPK_X86
/* fp32 relu on 8 lanes: the scalar loops' very operations (a compare that is false for
 * NaN, then the select; backward one multiply by 0 or 1 and one add), branch-free, so
 * every element gets the scalar code's bits. Returns how many elements it did. */
__attribute__((target("avx2"))) static int64_t relu_fwd_avx2(const float *x, float *y, int64_t n)
{
    const __m256 zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(y + i, _mm256_andnot_ps(_mm256_cmp_ps(v, zero, _CMP_LE_OQ), v));
    }
    return i;
}

__attribute__((target("avx2"))) static int64_t relu_bwd_avx2(const float *y, const float *dy,
                                                             float *dx, int64_t n, bool fresh)
{
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 m = _mm256_andnot_ps(_mm256_cmp_ps(_mm256_loadu_ps(y + i), zero, _CMP_LE_OQ), one);
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(dy + i), m);
        _mm256_storeu_ps(dx + i, _mm256_add_ps(fresh ? zero : _mm256_loadu_ps(dx + i), v));
    }
    return i;
}
#endif

static inline double ld16(ck_dtype dt, uint16_t h)
{
    return dt == CK_F16 ? (double)ck_f16_to_f32(h) : (double)ck_bf16_to_f32(h);
}

static inline uint16_t st16(ck_dtype dt, double v)
{
    return dt == CK_F16 ? ck_f64_to_f16(v) : ck_f64_to_bf16(v);
}

static void relu_fwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const relu_job *j = vctx;
    const int64_t i0 = task * ELEMS_PER_TASK;
    const int64_t i1 = i0 + ELEMS_PER_TASK < j->n ? i0 + ELEMS_PER_TASK : j->n;
    if (j->dt != CK_F32) {
        for (int64_t i = i0; i < i1; i++) {
            const double x = ld16(j->dt, j->hx[i]);
            j->hy[i] = st16(j->dt, x <= 0.0 ? 0.0 : x); /* NaN stays NaN */
        }
        return;
    }
    int64_t i = i0;
#if CPK_X86
    if (j->isa != CPK_ISA_PORTABLE)
        i += relu_fwd_avx2(j->x + i0, j->y + i0, i1 - i0);
#endif
    for (; i < i1; i++)
        j->y[i] = j->x[i] <= 0.0f ? 0.0f : j->x[i];
}

static void relu_bwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const relu_job *j = vctx;
    const int64_t i0 = task * ELEMS_PER_TASK;
    const int64_t i1 = i0 + ELEMS_PER_TASK < j->n ? i0 + ELEMS_PER_TASK : j->n;
    if (j->dt != CK_F32) {
        for (int64_t i = i0; i < i1; i++) {
            const double v = ld16(j->dt, j->hdy[i]) * (ld16(j->dt, j->hx[i]) <= 0.0 ? 0.0 : 1.0);
            const double old = j->fresh ? 0.0 : ld16(j->dt, j->hdx[i]);
            j->hdx[i] = st16(j->dt, ck_sum_round_odd(old, v));
        }
        return;
    }
    int64_t i = i0;
#if CPK_X86
    if (j->isa != CPK_ISA_PORTABLE)
        i += relu_bwd_avx2(j->x + i0, j->dy + i0, j->dx + i0, i1 - i0, j->fresh);
#endif
    if (j->fresh) { /* +0 + v: what a zeroed dx gives (-0 becomes +0), dx may be dy */
        for (; i < i1; i++)
            j->dx[i] = 0.0f + j->dy[i] * (j->x[i] <= 0.0f ? 0.0f : 1.0f);
        return;
    }
    for (; i < i1; i++)
        j->dx[i] = j->dx[i] + j->dy[i] * (j->x[i] <= 0.0f ? 0.0f : 1.0f);
}

// ----------------------------------------------------------------------------
// add of same-shape fp32 tensors

typedef struct {
    const float *in[CK_MAX_INPUTS], *dy; /* dy NULL: the forward */
    float *y, *din[CK_MAX_INPUTS];
    int n_in;
    int64_t n;
    bool fresh; /* ck_op_grads.din0_fresh: din[0] starts as +0 and may be dy's buffer */
    cpk_isa isa;
} add_job;

#if CPK_X86
/* elements [i0, i1) four at a time, each lane the scalar loop's double operations; returns
 * the first element it did not do */
__attribute__((target("avx2"))) static int64_t add_fwd_avx2(const add_job *j, int64_t i0,
                                                            int64_t i1)
{
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4) {
        __m256d s = _mm256_setzero_pd();
        for (int k = 0; k < j->n_in; k++)
            s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_loadu_ps(j->in[k] + i)));
        _mm_storeu_ps(j->y + i, _mm256_cvtpd_ps(s));
    }
    return i;
}

/* din[k] += dy, k in order, every load after the previous input's store (din[0] may be dy) */
__attribute__((target("avx2"))) static int64_t add_bwd_avx2(const add_job *j, int64_t i0,
                                                            int64_t i1)
{
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4)
        for (int k = 0; k < j->n_in; k++) {
            if (!j->din[k])
                continue;
            const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(j->dy + i));
            const __m256d old = j->fresh && k == 0 ? _mm256_setzero_pd()
                                                   : _mm256_cvtps_pd(_mm_loadu_ps(j->din[k] + i));
            _mm_storeu_ps(j->din[k] + i, _mm256_cvtpd_ps(_mm256_add_pd(old, v)));
        }
    return i;
}
#endif

/* forward (dy NULL) or backward, elements of one task */
static void add_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const add_job *j = vctx;
    const int64_t i0 = task * ELEMS_PER_TASK;
    const int64_t i1 = i0 + ELEMS_PER_TASK < j->n ? i0 + ELEMS_PER_TASK : j->n;
    int64_t i = i0;
#if CPK_X86
    if (j->isa != CPK_ISA_PORTABLE)
        i = j->dy ? add_bwd_avx2(j, i0, i1) : add_fwd_avx2(j, i0, i1);
#endif
    for (; i < i1 && !j->dy; i++) {
        double sum = 0.0;
        for (int k = 0; k < j->n_in; k++)
            sum += (double)j->in[k][i];
        j->y[i] = (float)sum;
    }
    for (; i < i1 && j->dy; i++)
        for (int k = 0; k < j->n_in; k++) {
            if (!j->din[k])
                continue;
            const double v = (double)j->dy[i];
            const double old = j->fresh && k == 0 ? 0.0 : (double)j->din[k][i];
            j->din[k][i] = (float)(old + v);
        }
}

/* every non-NULL t[i] fp32 */
static bool all_f32(const ck_tensor *const *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i] && t[i]->dtype != CK_F32)
            return false;
    return true;
}

static ck_status add_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                             ck_op_io *io, ck_error *err)
{
    if (ck_opc_is_broadcast(op) || !io->out || io->out->dtype != CK_F32 ||
        !all_f32(io->in, io->n_in))
        return cpu_delegate_forward(c, op, args, io, err);
    CK_TRY(ck_opc_add_fwd(CPU_BE, io, err));
    add_job j = {.y = io->out->data, .n_in = io->n_in,
                 .n = ck_shape_numel(&io->in[0]->shape), .isa = c->isa};
    for (int k = 0; k < io->n_in; k++)
        j.in[k] = io->in[k]->data;
    cpk_parallel(c->pool, (j.n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, add_task, &j);
    return CK_OK;
}

static ck_status add_backward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    const ck_tensor *dy[] = {g->dout};
    if (ck_opc_is_broadcast(op) || !g->dout || !all_f32(dy, 1) ||
        !all_f32((const ck_tensor *const *)g->din, io->n_in))
        return cpu_delegate_backward(c, op, args, io, g, err);
    CK_TRY(ck_opc_add_bwd(CPU_BE, io, g, err));
    add_job j = {.dy = g->dout->data, .n_in = io->n_in, .n = ck_shape_numel(&io->in[0]->shape),
                 .fresh = g->din0_fresh, .isa = c->isa};
    for (int k = 0; k < io->n_in; k++)
        j.din[k] = g->din[k] ? g->din[k]->data : NULL;
    cpk_parallel(c->pool, (j.n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, add_task, &j);
    return CK_OK;
}

// ----------------------------------------------------------------------------
// dispatch

/* the dtype every t[i] shares when it is fp32, fp16 or bf16, else CK_DTYPE_COUNT */
static ck_dtype shared_dtype(const ck_tensor *const *t, int n)
{
    const ck_dtype dt = t[0]->dtype;
    if (dt != CK_F32 && dt != CK_F16 && dt != CK_BF16)
        return CK_DTYPE_COUNT;
    for (int i = 1; i < n; i++)
        if (t[i]->dtype != dt)
            return CK_DTYPE_COUNT;
    return dt;
}

ck_status cpu_pointwise_forward(const cpu_ctx *c, const ck_op_params *op,
                                 const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    if (op->kind == CK_OP_ADD)
        return add_forward(c, op, args, io, err);
    CK_TRY(ck_opc_activation_fwd(CPU_BE, op, io, err));
    const ck_tensor *all[] = {io->in[0], io->out};
    const ck_dtype dt = shared_dtype(all, 2);
    if (op->kind != CK_OP_RELU || dt == CK_DTYPE_COUNT)
        return ref_op_forward(op, args, io, err);
    relu_job j = {.x = io->in[0]->data, .y = io->out->data,
                  .n = ck_shape_numel(&io->in[0]->shape), .dt = dt,
                  .hx = io->in[0]->data, .hy = io->out->data, .isa = c->isa};
    cpk_parallel(c->pool, (j.n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, relu_fwd_task, &j);
    return CK_OK;
}

ck_status cpu_pointwise_backward(const cpu_ctx *c, const ck_op_params *op,
                                  const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                  ck_error *err)
{
    if (op->kind == CK_OP_ADD)
        return add_backward(c, op, args, io, g, err);
    CK_TRY(ck_opc_activation_bwd(CPU_BE, op, io, g, err));
    if (!g->din[0])
        return CK_OK;
    if (op->kind != CK_OP_RELU)
        return ref_op_backward(op, args, io, g, err);
    /* relu's backward reads its output y (y > 0 exactly when x > 0: the same bits) */
    const ck_tensor *all[] = {io->out, g->dout, g->din[0]};
    const ck_dtype dt = shared_dtype(all, 3);
    if (dt == CK_DTYPE_COUNT)
        return ref_op_backward(op, args, io, g, err);
    relu_job j = {.x = io->out->data, .dy = g->dout->data, .dx = g->din[0]->data,
                  .n = ck_shape_numel(&io->in[0]->shape), .dt = dt, .hx = io->out->data,
                  .hdy = g->dout->data, .hdx = g->din[0]->data, .fresh = g->din0_fresh,
                  .isa = c->isa};
    cpk_parallel(c->pool, (j.n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, relu_bwd_task, &j);
    return CK_OK;
}
