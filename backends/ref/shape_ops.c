/*
 * CPU shape ops: add (n inputs of one shape), concat (along dim 1, the channels) and
 * flatten ((N, ...) -> (N, prod ...)), forward and backward.
 *
 * add sums its inputs in input order in double and rounds once; concat and flatten copy
 * values (exactly within one dtype, rounded once into another). Backward passes
 * accumulate (+=) into every gradient that is not NULL, with one rounding each. Each
 * tensor is loaded in its own dtype: fp32, fp64, fp16 or bf16 (ref_elem.h,
 * harness/precision.md).
 */
#include "backends/ref/ref_elem.h"

/* ================================== add ================================== */

/* out = in[0] + in[1] + ... in input order; all (numel) */
static void add_forward(ck_tensor *out, const ck_tensor *const *in, int n_in, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++) {
        double sum = 0.0;
        for (int k = 0; k < n_in; k++)
            sum += ref_ld(in[k], i);
        ref_st(out, i, sum);
    }
}

/* din[k] += dout for every non-NULL din[k]; all (numel) */
static void add_backward(ck_tensor *const *din, const ck_tensor *dout, int n_in, int64_t numel)
{
    for (int k = 0; k < n_in; k++) {
        if (!din[k])
            continue;
        for (int64_t i = 0; i < numel; i++)
            ref_acc(din[k], i, ref_ld(dout, i));
    }
}

ck_status ref_add_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                          ck_error *err)
{
    CK_TRY(ck_opc_add_fwd(REF_BE, io, err));
    add_forward(io->out, io->in, io->n_in, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

ck_status ref_add_backward(const ck_op_params *op, const ck_fwd_args *args, const ck_op_io *io,
                           ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_add_bwd(REF_BE, io, g, err));
    add_backward(g->din, g->dout, io->n_in, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

/* ================================= concat ================================= */

/* out[n, off_k + c, s] = in[k][n, c, s]; out (N, sum C_k, S), in[k] (N, C_k, S) */
static void concat_forward(ck_tensor *out, const ck_tensor *const *in, int n_in, int64_t N,
                           const int64_t *block, int64_t out_block)
{
    for (int64_t n = 0; n < N; n++) {
        int64_t off = n * out_block;
        for (int k = 0; k < n_in; k++) {
            for (int64_t j = 0; j < block[k]; j++)
                ref_st(out, off + j, ref_ld(in[k], n * block[k] + j));
            off += block[k];
        }
    }
}

/* din[k][n, c, s] += dout[n, off_k + c, s] for every non-NULL din[k] */
static void concat_backward(ck_tensor *const *din, const ck_tensor *dout, int n_in, int64_t N,
                            const int64_t *block, int64_t out_block)
{
    for (int64_t n = 0; n < N; n++) {
        int64_t off = n * out_block;
        for (int k = 0; k < n_in; k++) {
            if (din[k])
                for (int64_t j = 0; j < block[k]; j++)
                    ref_acc(din[k], n * block[k] + j, ref_ld(dout, off + j));
            off += block[k];
        }
    }
}

ck_status ref_concat_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                             ck_error *err)
{
    int64_t N, block[CK_MAX_INPUTS], out_block;
    CK_TRY(ck_opc_concat_fwd(REF_BE, io, &N, block, &out_block, err));
    concat_forward(io->out, io->in, io->n_in, N, block, out_block);
    return CK_OK;
}

ck_status ref_concat_backward(const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    int64_t N, block[CK_MAX_INPUTS], out_block;
    CK_TRY(ck_opc_concat_bwd(REF_BE, io, g, &N, block, &out_block, err));
    concat_backward(g->din, g->dout, io->n_in, N, block, out_block);
    return CK_OK;
}

/* ================================= flatten ================================= */

/* out = x viewed as (N, prod ...); a row-major copy; all (numel) */
static void flatten_forward(ck_tensor *out, const ck_tensor *x, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        ref_st(out, i, ref_ld(x, i));
}

/* dx += dout; all (numel) */
static void flatten_backward(ck_tensor *dx, const ck_tensor *dout, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        ref_acc(dx, i, ref_ld(dout, i));
}

ck_status ref_flatten_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    CK_TRY(ck_opc_flatten_fwd(REF_BE, io, err));
    flatten_forward(io->out, io->in[0], ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

ck_status ref_flatten_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_flatten_bwd(REF_BE, io, g, err));
    if (g->din[0])
        flatten_backward(g->din[0], g->dout, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}
