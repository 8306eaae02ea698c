/*
 * Private to the fast CPU backend (backends/cpu): its state, the op entry points, and
 * the dtype handling its op files share.
 *
 * Compute dtypes: the fast kernels run on fp32 buffers. An fp16/bf16 tensor is widened
 * to fp32 once per call (exact), the kernel accumulates in fp32, and every output element
 * is rounded ONCE into its tensor's dtype (harness/precision.md): a forward output from
 * its fp32 result; a gradient by adding the fp32 contribution to the existing low-dtype
 * value exactly and rounding that sum once (round-to-odd in double, then to the dtype).
 * fp64 calls (gradient checks only) and ops without a fast kernel are delegated to the
 * reference backend's entry points (backends/ref/ref_ops.h): single-threaded and
 * fixed-order, so the delegated ops keep the ref backend's bits.
 */
#ifndef CK_CPU_COMMON_H
#define CK_CPU_COMMON_H

#include "backends/backend.h"
#include "backends/cpu/kernels.h"
#include "backends/check/check.h"
#include "backends/ref/ref_ops.h"

/* the backend's name in the shared checks' messages (backends/check/check.h) */
#define CPU_BE "cpu"

/* doubles per vector register on the ISA path: 8 (AVX-512), 4 (AVX2), 1 on the portable
 * path (the widths of the *_lanes.h kernels) */
static inline int cpu_f64_lanes(cpk_isa isa)
{
    return isa == CPK_ISA_AVX512 ? 8 : isa == CPK_ISA_AVX2 ? 4 : 1;
}

/* freed tensor blocks kept for reuse (memory.c) */
typedef struct cpu_block_cache cpu_block_cache;

typedef struct {
    cpk_pool *pool;
    cpk_isa isa;
    int threads;
    cpu_block_cache *blocks;
} cpu_ctx;

#define CPU_OP_DECL(fam)                                                                   \
    ck_status cpu_##fam##_forward(const cpu_ctx *c, const ck_op_params *op,                \
                                  const ck_fwd_args *args, ck_op_io *io, ck_error *err);   \
    ck_status cpu_##fam##_backward(const cpu_ctx *c, const ck_op_params *op,               \
                                   const ck_fwd_args *args, const ck_op_io *io,            \
                                   ck_op_grads *g, ck_error *err);

CPU_OP_DECL(linear)     /* CK_OP_LINEAR: packed SGEMM */
CPU_OP_DECL(conv)       /* CK_OP_CONV: direct or implicit-GEMM convolution */
CPU_OP_DECL(pointwise)  /* relu, add: fp32 multi-threaded; the rest delegated to ref */
CPU_OP_DECL(pool)       /* CK_OP_MAXPOOL fp32 unpadded; the rest delegated */
CPU_OP_DECL(shape)      /* CK_OP_CONCAT fp32; the rest delegated */
CPU_OP_DECL(upsample)   /* CK_OP_UPSAMPLE nearest fp32; the rest delegated */
CPU_OP_DECL(attention)  /* CK_OP_ATTENTION fp32 without dropout; the rest delegated */
CPU_OP_DECL(norm)       /* CK_OP_LAYERNORM fp32; the rest delegated */
CPU_OP_DECL(gelu)       /* CK_OP_GELU tanh form fp32 (not ref's bits); the rest delegated */

#undef CPU_OP_DECL

/* the ops without a fast kernel: the reference's entry points, split into element ranges or
 * samples across threads where that keeps every bit (delegate.c) */
ck_status cpu_delegate_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err);
ck_status cpu_delegate_backward(const cpu_ctx *c, const ck_op_params *op,
                                const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                ck_error *err);

/* backend.h's optimizer_step: fp32 split into element ranges across c's threads with the
 * reference's arithmetic; anything else is the reference's own call (optim.c) */
ck_status cpu_optimizer_step(const cpu_ctx *c, const ck_optimizer *opt, int64_t step,
                             double grad_scale, ck_tensor *param, const ck_tensor *grad,
                             ck_tensor *state0, ck_tensor *state1, ck_error *err);

/* NaN/Inf counts of n values of dtype dt (nonfinite.c; the CK_PROC_COUNT_NONFINITE
 * capability): chunks split across the pool's threads; false on out-of-memory */
bool cpu_count_nonfinite_with(cpk_pool *pool, cpk_isa isa, ck_dtype dt, int64_t n,
                              const void *data, int64_t *nan, int64_t *inf, int64_t *first,
                              bool *first_nan);

/* backend.h's fused relu backward (din0_relu_over_input) around fn, the op's ordinary
 * backward: fp32 with the mask split across c's threads, other dtypes the reference's
 * (relu_over.c) */
ck_status cpu_backward_relu_over_input(const cpu_ctx *c, ref_host_bwd_fn fn,
                                       const ck_op_params *op, const ck_fwd_args *args,
                                       const ck_op_io *io, ck_op_grads *g, ck_error *err);
/* backend.h's convert: fp32 to fp32 split across c's threads with the reference's double
 * arithmetic (convert.c); other dtypes the reference's own */
ck_status cpu_convert(const cpu_ctx *c, ck_tensor *dst, const ck_tensor *src, double scale,
                      bool accumulate, ck_error *err);
/* ---- tensor memory (memory.c): host memory whose freed blocks of 256 KiB to 64 MiB are
 * kept, up to 64 MiB in all, for the next request of the same size ---- */
cpu_block_cache *cpu_block_cache_create(void); /* NULL on out-of-memory */
void cpu_block_cache_destroy(cpu_block_cache *c);
ck_status cpu_mem_alloc(cpu_block_cache *c, size_t bytes, void **ptr, ck_error *err);
void cpu_mem_free(cpu_block_cache *c, void *ptr);
/* memset(p, 0, bytes) split across the pool's threads */
void cpu_mem_zero(cpk_pool *pool, void *p, size_t bytes);
/* memcpy(dst, src, bytes) split across the pool's threads (no overlap) */
void cpu_mem_copy(cpk_pool *pool, void *dst, const void *src, size_t bytes);

/* ---- fp32 views of float tensors ---- */

/* true when any non-NULL t[i] is fp64: the call is delegated to the reference kernels */
bool cpu_any_f64(const ck_tensor *const *t, int n);

/* *out = t's values as fp32: t's own memory when t is fp32 (*owned = NULL), else a
 * widened copy in *owned (free it). NULL t gives NULL. */
ck_status cpu_view_f32(const char *op, const ck_tensor *t, const cpu_ctx *c, const float **out,
                       float **owned, ck_error *err);
/* an uninitialised fp32 scratch buffer of n elements (zeroed when `zero`) */
ck_status cpu_scratch(const char *op, int64_t n, bool zero, float **out, ck_error *err);

/* t = v rounded once to t's dtype (fp32/fp16/bf16; a no-op when v is t's own memory) */
void cpu_store(const cpu_ctx *c, ck_tensor *t, const float *v);
/* t += v, the exact sum rounded once to t's dtype (fp32, fp16, bf16); element ranges
 * split across c's threads */
void cpu_accumulate_f32(const cpu_ctx *c, ck_tensor *t, const float *v);
void cpu_accumulate_f64(const cpu_ctx *c, ck_tensor *t, const double *v);

/* backend.h's calibration_round, split across c's threads (backends/cpu/calibration.c) */
ck_status cpu_calibration_round(const cpu_ctx *c, ck_tensor *t, int bits, double rel,
                                const ck_rng_stream *rng, ck_error *err);

#endif
