/* embedding: y[m] = W[ids[m]]; dW[ids[m]] += dy[m] in position order (k18.h). */
#include "backends/ref/ref18.h"

void k18_embedding_fwd(double *y, const int32_t *ids, const double *w, int64_t M, int64_t E)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t e = 0; e < E; e++)
            y[m * E + e] = w[(int64_t)ids[m] * E + e];
}

void k18_embedding_bwd(double *dw, const double *dy, const int32_t *ids, int64_t M, int64_t E)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t e = 0; e < E; e++)
            dw[(int64_t)ids[m] * E + e] += dy[m * E + e];
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): ids are the i32 input, never differentiated

ck_status ref_embedding_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err)
{
    (void)op;
    (void)args;
    int64_t M, V, E;
    CK_TRY(ck_opc18_embedding(REF_BE, io->in[0], io->weight, io->out, &M, &V, &E, err));
    CK_TRY(ck_opc18_embedding_ids(io->in[0], io->in[0]->data, M, V, err));
    ref18_scope s;
    ref18_begin(&s, "embedding", err);
    const double *w = ref18_in(&s, io->weight);
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        k18_embedding_fwd(y, io->in[0]->data, w, M, E);
    return ref18_end(&s, true);
}

ck_status ref_embedding_backward(const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t M, V, E;
    CK_TRY(ck_opc18_embedding(REF_BE, io->in[0], io->weight, g->dout, &M, &V, &E, err));
    if (!g->dweight)
        return CK_OK;
    CK_TRY(ck_opc18_embedding_ids(io->in[0], io->in[0]->data, M, V, err));
    ref18_scope s;
    ref18_begin(&s, "embedding backward", err);
    const double *dy = ref18_in(&s, g->dout);
    double *dw = ref18_grad(&s, g->dweight);
    if (s.st == CK_OK)
        k18_embedding_bwd(dw, dy, io->in[0]->data, M, E);
    return ref18_end(&s, true);
}
