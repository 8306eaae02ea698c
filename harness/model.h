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

#include "../backends/backend.h"
#include "graph.h"

typedef struct {
    ck_tensor param[2], grad[2], state0[2], state1[2]; /* per params[] slot of the node */
    ck_tensor buffer[3];                               /* per buffers[] slot */
} ck_layer_state;

typedef struct {
    ck_backend *b;
    const ck_graph *g;
    ck_dtype dtype; /* compute dtype of parameters, grads, float buffers */
    ck_layer_state *layers;
} ck_model;

ck_status ck_model_create(ck_model *m, ck_backend *b, const ck_graph *g, ck_dtype dtype,
                          ck_error *err);
/* Draws parameters from the seed stream, sets buffers to their initial values and zeroes
 * optimizer state. */
ck_status ck_model_init(ck_model *m, uint64_t seed, ck_error *err);
ck_status ck_model_zero_grads(ck_model *m, ck_error *err);
/* One optimizer update of every parameter (step is 1-based). */
ck_status ck_model_update(ck_model *m, const ck_optimizer *opt, int64_t step, double grad_scale,
                          ck_error *err);
void ck_model_free(ck_model *m);

/* Fills io's weight/bias/buffers and g's dweight/dbias (g may be NULL) for layer i. */
void ck_model_bind(ck_model *m, int i, ck_op_io *io, ck_op_grads *g);

/* Converts n doubles to dtype dt (f32/f64/i32/i64) into dst. */
void ck_convert_from_f64(ck_dtype dt, void *dst, const double *src, int64_t n);
/* Allocates host memory, converts, uploads into t (already allocated). */
ck_status ck_upload_f64(ck_backend *b, ck_tensor *t, const double *src, ck_error *err);

#endif
