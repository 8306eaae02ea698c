/*
 * The model's state: parameters, their gradients, optimizer state and buffers, one set per
 * layer, living in backend memory. Not activation memory (not counted by ck_act_alloc).
 *
 * Initialisation is a pure function of (seed, layer index, slot, element): see rng.h and
 * cases/README.md. Tensor names are "<layer>.<suffix>", e.g. "enc1.weight",
 * "enc1_bn.running_mean".
 */
#ifndef CK_MODEL_H
#define CK_MODEL_H

#include "backends/backend.h"
#include "harness/io/tensorset.h"
#include "harness/model/graph.h"

typedef struct {
    /* per params[] slot of the node: the master copy (fp32; fp64 in gradient checks), its
     * gradient and optimizer state */
    ck_tensor param[2], grad[2], state0[2], state1[2];
    /* low-precision runs, linear/conv only: the weights cast to the low dtype once per step
     * and the low-dtype gradient backward accumulates into (data NULL otherwise) */
    ck_tensor low_param[2], low_grad[2];
    ck_tensor buffer[3]; /* per buffers[] slot: master dtype (num_batches_tracked i64) */
    /* per shares[] entry of the node (another layer's parameter it uses), low-precision runs
     * of an op that casts: this use's low-dtype copy and gradient, whose unscaled value is
     * added into the owner's master gradient (data NULL otherwise) */
    ck_tensor share_low_param[2], share_low_grad[2];
    /* ck_model_zero_grads_lazy: the gradient (grad, low_grad, share_low_grad) reads as zero
     * but its memory was not written yet (ck_model_claim_grads, ck_model_settle_grads) */
    bool grad_pending[2], low_grad_pending[2], share_low_grad_pending[2];
} ck_layer_state;

typedef struct {
    ck_backend *b;
    const ck_graph *g;
    ck_dtype dtype;        /* the run's compute dtype: fp32, fp64, fp16 or bf16 */
    ck_dtype master_dtype; /* fp64 for fp64 runs, else fp32 */
    ck_layer_state *layers;
} ck_model;

ck_status ck_model_create(ck_model *m, ck_backend *b, const ck_graph *g, ck_dtype dtype,
                          ck_error *err);
/* Draws parameters from the seed stream, sets buffers to their initial values and zeroes
 * optimizer state; then, when the case says "init": {"from": FILE}, loads every parameter
 * and buffer by name from FILE (ck_model_load). */
ck_status ck_model_init(ck_model *m, uint64_t seed, ck_error *err);
/* Loads parameters and buffers by name ("enc1.weight", "bn.running_mean") from a
 * safetensors/.npy/.npz file or directory, converting float dtypes to the master dtype.
 * Every parameter and buffer must be there with its shape, and every tensor in the file
 * must belong to one: each mismatch is an error naming the file and tensor. */
ck_status ck_model_load(ck_model *m, const char *path, ck_error *err);
/* The checks of ck_model_load without a model: used to refuse a bad file before any run. */
ck_status ck_graph_check_weights(const ck_graph *g, const char *path, ck_error *err);
/* The same checks on tensors in memory (an import's weights before they are written); path
 * names them in messages. */
ck_status ck_graph_check_weight_set(const ck_graph *g, const ck_tensorset *set, const char *path,
                                    ck_error *err);
ck_status ck_model_zero_grads(ck_model *m, ck_error *err);
/* The training step's zeroing without a pass over memory: every gradient is marked as
 * zero-pending. Before a layer's backward, ck_model_claim_grads settles the gradients it
 * writes; after the backward pass, ck_model_settle_grads zeroes the ones no backward
 * claimed. In between, a pending gradient's memory is undefined: nothing but those two may
 * read it. */
void ck_model_zero_grads_lazy(ck_model *m);
/* For layer i's backward, its gradients bound in g (ck_model_bind): when every one bound
 * is zero-pending and `fresh` (the backend honours ck_op_grads.dparams_fresh for this op,
 * capability "params_fresh"), sets g->dparams_fresh and lets the kernel write them as if
 * zeroed; otherwise zeroes the pending ones now and clears the flag. Either way they are no
 * longer pending: a later backward (a shared parameter's other use) accumulates. */
ck_status ck_model_claim_grads(ck_model *m, int i, ck_op_grads *g, bool fresh, ck_error *err);
/* Zeroes every gradient still zero-pending (layers whose backward did not run). */
ck_status ck_model_settle_grads(ck_model *m, ck_error *err);
/* Low-precision runs: casts the master weights of linear/conv layers to the low dtype. */
ck_status ck_model_cast_params(ck_model *m, ck_error *err);
/* The precision judgement's calibration run (harness/verify/precision_judge.h): rounds the
 * master weights of linear/conv layers (the ones a low-precision run casts) to dtype `low`
 * in place, so an fp32 run's forward sees exactly what the low-precision forward sees. */
ck_status ck_model_round_cast_params(ck_model *m, ck_dtype low, ck_error *err);
/* After backward with loss scale S: master grad = (master grad + low grad) / S, rounded
 * once to the master dtype; then, layer by layer, each shared use's low grad / S is added
 * into its owner's master grad. Nothing to do for S == 1 without low copies. */
ck_status ck_model_unscale_grads(ck_model *m, double scale, ck_error *err);
/* One optimizer update of every parameter (step is 1-based). */
ck_status ck_model_update(ck_model *m, const ck_optimizer *opt, int64_t step, double grad_scale,
                          ck_error *err);
void ck_model_free(ck_model *m);

/* Fills io's weight/bias/buffers and g's dweight/dbias (g may be NULL) for layer i: the
 * low-precision copies when the layer has them, unless `master` asks for the fp32 masters
 * (a recomputation under autocast_recompute `drop`). A shared parameter binds its owner's
 * master tensor and gradient (or this layer's own low-dtype copy of it). */
void ck_model_bind(ck_model *m, int i, bool master, ck_op_io *io, ck_op_grads *g);

/* Converts n doubles to dtype dt (f32/f64/f16/bf16/i32/i64) into dst, rounding once. */
void ck_convert_from_f64(ck_dtype dt, void *dst, const double *src, int64_t n);
/* Allocates host memory, converts, uploads into t (already allocated). */
ck_status ck_upload_f64(ck_backend *b, ck_tensor *t, const double *src, ck_error *err);

#endif
