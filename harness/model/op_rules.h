/*
 * Rules several op families share, for their definition rows (harness/model/ops/): rank
 * checks, dims, joined inputs, and parameter specs.
 */
#ifndef CK_OP_RULES_H
#define CK_OP_RULES_H

#include "harness/model/node.h"
#include "harness/model/op_def.h"

/* rank >= min_rank, else an error naming the layout ("(N, C, ...)") */
ck_status ck_op_need_min_rank(const ck_op_params *op, const ck_shape *in, int min_rank,
                              const char *layout, ck_error *err);
/* rank 2 + op->nsp: (N, C, spatial...) */
ck_status ck_op_need_spatial_rank(const ck_op_params *op, const ck_shape *in, ck_error *err);
/* dim as written (negative from the end) -> [0, ndim) */
ck_status ck_op_resolve_dim(const char *op, const char *what, int dim, int ndim, int *out,
                            ck_error *err);
/* add: one shape for all; concat: rank >= 2 and equal dims except dim 1. names may be
 * NULL (inputs are then named by position). */
ck_status ck_op_check_join_shapes(const ck_op_params *op, int n_in, const ck_shape *in,
                                  const char *const *names, ck_error *err);
/* The numpy broadcast of a and b (dims aligned from the right, sizes equal or 1); false
 * when they do not broadcast. */
bool ck_op_broadcast_shapes(const ck_shape *a, const ck_shape *b, ck_shape *y);
/* add, mul and the broadcast family's binary ops (ops/broadcast.c): two inputs that
 * broadcast, or one and a constant operand (`scalar` or `constant_shape`, options
 * ck_op_binary_options); sets op->broadcast. Its state: the buffer of a constant tensor. */
ck_status ck_op_binary_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                             ck_error *err);
void ck_op_binary_state(ck_node *node, const ck_shape *in0);
extern const ck_option_def ck_op_binary_options[];
/* A parameter or buffer spec. */
ck_param_spec ck_op_spec(const char *suffix, ck_shape shape, ck_dtype dtype, ck_init_kind init,
                         double a);
/* A linear/conv weight w and (op.bias) bias (out) under the node's init scheme. */
void ck_op_weight_bias_specs(ck_node *node, ck_shape w, int64_t out, double fan_in,
                             double fan_out);
/* A shape of rank ndim with its first two dims set. */
ck_shape ck_op_shape2(int ndim, int64_t d0, int64_t d1);

#endif
