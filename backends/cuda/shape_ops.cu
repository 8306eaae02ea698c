/*
 * CUDA shape ops: add (n inputs of one shape), concat (along dim 1, the channels) and
 * flatten ((N, ...) -> (N, prod ...)), forward and backward.
 *
 * As backends/cpu/shape_ops.c: add sums its inputs in input order in double and rounds
 * once; concat and flatten copy values (device-to-device copies within one dtype, one
 * rounding into another). Each tensor is loaded in its own dtype. Backward passes
 * accumulate (+=, ck_acc) into every gradient that is not NULL, one input at a time in
 * input order (one launch each), so a tensor feeding two inputs of the same layer gets
 * both contributions in the CPU's order.
 */
#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// kernels

typedef struct {
    ck_dv v[CK_MAX_INPUTS];
} input_list;

/* out = in[0] + in[1] + ... in input order; all (numel) */
__global__ void add_forward_kernel(ck_dv out, input_list in, int n_in, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    {
        double sum = 0.0;
        for (int k = 0; k < n_in; k++)
            sum = __dadd_rn(sum, ck_ld(in.v[k], i));
        ck_st(out, i, sum);
    }
}

/* dx[i] += dy[i]; all (numel) */
__global__ void accumulate_kernel(ck_dv dx, ck_dv dy, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_acc(dx, i, ck_ld(dy, i));
}

/* out[n, off + j] = in[n, j]; out (N, out_block), in (N, block) */
__global__ void concat_forward_kernel(ck_dv out, ck_dv in, int64_t N, int64_t block,
                                      int64_t out_block, int64_t off)
{
    CK_GRID_STRIDE(i, N * block)
    ck_st(out, (i / block) * out_block + off + i % block, ck_ld(in, i));
}

/* din[n, j] += dout[n, off + j]; din (N, block), dout (N, out_block) */
__global__ void concat_backward_kernel(ck_dv din, ck_dv dout, int64_t N, int64_t block,
                                       int64_t out_block, int64_t off)
{
    CK_GRID_STRIDE(i, N * block)
    ck_acc(din, i, ck_ld(dout, (i / block) * out_block + off + i % block));
}

/* out = x, one rounding when the dtypes differ */
__global__ void copy_kernel(ck_dv out, ck_dv x, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_st(out, i, ck_ld(x, i));
}

static ck_status accumulate(ck_cuda *cu, ck_tensor *dx, const ck_tensor *dy, int64_t numel,
                            ck_error *err)
{
    accumulate_kernel<<<ck_blocks(numel), CK_THREADS, 0, cu->stream>>>(ck_view(dx), ck_view(dy),
                                                                       numel);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// checks (as the CPU's)

/* ref and t (when not NULL) have float dtypes; with `shape` set, t has ref's shape. */
static ck_status check_like(const char *fn, const ck_tensor *ref, const ck_tensor *t, bool shape,
                            ck_error *err)
{
    const ck_tensor *ts[] = {ref, t};
    CK_TRY(ck_cuda_check_float_dtypes(fn, ts, 2, err));
    if (!t)
        return CK_OK;
    if (shape && !ck_shape_equal(&t->shape, &ref->shape)) {
        char a[128], b[128];
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, %s has %s", fn,
                       ck_cuda_tname(t), ck_shape_str(&t->shape, a, sizeof a),
                       ck_cuda_tname(ref), ck_shape_str(&ref->shape, b, sizeof b));
    }
    return CK_OK;
}

static ck_status check_inputs(const char *fn, const ck_op_io *io, int min_in, ck_error *err)
{
    if (io->n_in < min_in || io->n_in > CK_MAX_INPUTS)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: got %d inputs, needs %d to %d", fn, io->n_in,
                       min_in, CK_MAX_INPUTS);
    for (int i = 0; i < io->n_in; i++)
        if (!io->in[i])
            return ck_fail(err, CK_ERR_INTERNAL, "%s: input %d is missing", fn, i);
    return CK_OK;
}

// ----------------------------------------------------------------------------
// add

ck_status cuda_add_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                           ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    const char *fn = "add";
    CK_TRY(check_inputs(fn, io, 1, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    for (int k = 1; k < io->n_in; k++)
        CK_TRY(check_like(fn, io->in[0], io->in[k], true, err));
    CK_TRY(check_like(fn, io->in[0], io->out, true, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    input_list in;
    memset(&in, 0, sizeof in);
    for (int k = 0; k < io->n_in; k++)
        in.v[k] = ck_view(io->in[k]);
    add_forward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(io->out), in,
                                                                     io->n_in, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_add_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                            const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    const char *fn = "add backward";
    CK_TRY(check_inputs(fn, io, 1, err));
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    CK_TRY(check_like(fn, io->in[0], g->dout, true, err));
    for (int k = 0; k < io->n_in; k++)
        CK_TRY(check_like(fn, io->in[0], g->din[k], true, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    for (int k = 0; k < io->n_in; k++)
        if (g->din[k])
            CK_TRY(accumulate(cu, g->din[k], g->dout, n, err));
    return CK_OK;
}

// ----------------------------------------------------------------------------
// concat

/* Every input is (N, C_k, S...) with the same N and S; out is (N, sum C_k, S...).
 * Writes each input's C_k * S block size to `block`, the output's to *out_block, and
 * the batch size to *N. */
static ck_status concat_dims(const char *fn, const ck_op_io *io, const ck_tensor *out,
                             int64_t *N, int64_t *block, int64_t *out_block, ck_error *err)
{
    const ck_tensor *x0 = io->in[0];
    if (x0->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has rank %d, needs (N, C, ...)", fn,
                       ck_cuda_tname(x0), x0->shape.ndim);
    int64_t S = 1;
    for (int d = 2; d < x0->shape.ndim; d++)
        S *= x0->shape.dim[d];
    int64_t channels = 0;
    for (int k = 0; k < io->n_in; k++) {
        const ck_tensor *x = io->in[k];
        CK_TRY(check_like(fn, x0, x, false, err));
        bool same = x->shape.ndim == x0->shape.ndim;
        for (int d = 0; same && d < x0->shape.ndim; d++)
            same = d == 1 || x->shape.dim[d] == x0->shape.dim[d];
        if (!same) {
            char a[128], b[128];
            return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, %s has %s; only dim 1 "
                           "may differ", fn, ck_cuda_tname(x), ck_shape_str(&x->shape, a, sizeof a),
                           ck_cuda_tname(x0), ck_shape_str(&x0->shape, b, sizeof b));
        }
        block[k] = x->shape.dim[1] * S;
        channels += x->shape.dim[1];
    }
    CK_TRY(check_like(fn, x0, out, false, err));
    if (out->shape.ndim != x0->shape.ndim ||
        ck_shape_numel(&out->shape) != x0->shape.dim[0] * channels * S ||
        out->shape.dim[0] != x0->shape.dim[0] || out->shape.dim[1] != channels)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s is not (%lld, %lld, ...)", fn,
                       ck_cuda_tname(out), (long long)x0->shape.dim[0], (long long)channels);
    *N = x0->shape.dim[0];
    *out_block = channels * S;
    return CK_OK;
}

ck_status cuda_concat_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                              ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    const char *fn = "concat";
    CK_TRY(check_inputs(fn, io, 1, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    int64_t N, block[CK_MAX_INPUTS], out_block;
    CK_TRY(concat_dims(fn, io, io->out, &N, block, &out_block, err));
    /* out[n, off_k + j] = in[k][n, j]: a strided 2-D copy per input of the output's dtype */
    const size_t es = ck_dtype_size(io->out->dtype);
    int64_t off = 0;
    for (int k = 0; k < io->n_in; k++) {
        if (io->in[k]->dtype == io->out->dtype) {
            CK_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char *>(io->out->data) + (size_t)off * es,
                                            (size_t)out_block * es, io->in[k]->data,
                                            (size_t)block[k] * es, (size_t)block[k] * es,
                                            (size_t)N, cudaMemcpyDeviceToDevice, cu->stream));
        } else {
            concat_forward_kernel<<<ck_blocks(N * block[k]), CK_THREADS, 0, cu->stream>>>(
                ck_view(io->out), ck_view(io->in[k]), N, block[k], out_block, off);
            CK_LAUNCH_CHECK();
        }
        off += block[k];
    }
    return CK_OK;
}

ck_status cuda_concat_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    const char *fn = "concat backward";
    CK_TRY(check_inputs(fn, io, 1, err));
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    int64_t N, block[CK_MAX_INPUTS], out_block;
    CK_TRY(concat_dims(fn, io, g->dout, &N, block, &out_block, err));
    for (int k = 0; k < io->n_in; k++)
        CK_TRY(check_like(fn, io->in[k], g->din[k], true, err));
    int64_t off = 0;
    for (int k = 0; k < io->n_in; k++) {
        if (g->din[k]) {
            concat_backward_kernel<<<ck_blocks(N * block[k]), CK_THREADS, 0, cu->stream>>>(
                ck_view(g->din[k]), ck_view(g->dout), N, block[k], out_block, off);
            CK_LAUNCH_CHECK();
        }
        off += block[k];
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// flatten

static ck_status flatten_check(const char *fn, const ck_tensor *x, const ck_tensor *flat,
                               ck_error *err)
{
    CK_TRY(check_like(fn, x, flat, false, err));
    if (x->shape.ndim < 1 || flat->shape.ndim != 2 || flat->shape.dim[0] != x->shape.dim[0] ||
        ck_shape_numel(&flat->shape) != ck_shape_numel(&x->shape)) {
        char a[128], b[128];
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, not the flattening of %s %s",
                       fn, ck_cuda_tname(flat), ck_shape_str(&flat->shape, a, sizeof a),
                       ck_cuda_tname(x), ck_shape_str(&x->shape, b, sizeof b));
    }
    return CK_OK;
}

ck_status cuda_flatten_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    const char *fn = "flatten";
    if (io->n_in != 1 || !io->in[0] || !io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and an output", fn);
    CK_TRY(flatten_check(fn, io->in[0], io->out, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    if (io->out->dtype != io->in[0]->dtype) {
        copy_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(io->out),
                                                                 ck_view(io->in[0]), n);
        CK_LAUNCH_CHECK();
    } else if (io->out->data != io->in[0]->data) {
        CK_CUDA_CHECK(cudaMemcpyAsync(io->out->data, io->in[0]->data, ck_tensor_bytes(io->in[0]),
                                      cudaMemcpyDeviceToDevice, cu->stream));
    }
    return CK_OK;
}

ck_status cuda_flatten_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    const char *fn = "flatten backward";
    if (io->n_in != 1 || !io->in[0] || !g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and dout", fn);
    CK_TRY(flatten_check(fn, io->in[0], g->dout, err));
    CK_TRY(check_like(fn, io->in[0], g->din[0], true, err));
    if (g->din[0])
        CK_TRY(accumulate(cu, g->din[0], g->dout, ck_shape_numel(&io->in[0]->shape), err));
    return CK_OK;
}
