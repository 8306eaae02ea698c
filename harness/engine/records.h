/*
 * Run records: what one training run keeps of every tensor the harness compares — the loss,
 * BatchNorm buffers and gradients after each backward, the parameters after each update —
 * as host copies in comparison order, plus the run's losses, loss scales, measured peak
 * activation memory and recomputation counts.
 */
#ifndef CK_RECORDS_H
#define CK_RECORDS_H

#include "backends/backend.h"
#include "harness/engine/act_finite.h"
#include "harness/engine/alloc.h"
#include "harness/model/params.h"

typedef enum {
    CK_KIND_LOSS = 0,
    CK_KIND_GRAD,
    CK_KIND_PARAM,
    CK_KIND_BUFFER
} ck_tensor_kind;

const char *ck_tensor_kind_name(ck_tensor_kind k); /* "loss", "grad", "param", "buffer" */

typedef struct {
    double scale; /* the loss scale this step's backward used */
    bool skipped; /* the optimizer step was skipped (non-finite gradients) */
} ck_scale_step;

typedef struct {
    char *name;
    ck_tensor_kind kind;
    int step;
    ck_dtype dtype;
    ck_shape shape;
    void *data;      /* host copy */
    size_t data_cap; /* bytes allocated at data */
} ck_record_entry;

typedef struct {
    int n, cap;
    int kept; /* slots [n, kept) hold a dropped step's buffers for the next step's entries */
    ck_record_entry *e;
    double *losses;
    ck_scale_step *scales; /* per step: loss scale and skip decision */
    int steps;
    int64_t peak_activation_bytes;
    int64_t recomputed_layers;
    int64_t recomputed_other_dtype;
    int first_other_dtype_layer;
    double wall_time_s;
    double *step_wall_s;   /* per step (steps entries), seconds */
    double *train_wall_s;  /* per step: the part of step_wall_s that trains (train.c) */
    ck_mem_trace mem;      /* live activation bytes over the run (alloc.h) */
    ck_act_nonfinite act_nonfinite; /* NaN/Inf in layer outputs and output gradients */
} ck_record;

/* Appends one entry named name: copied from host_src when it is not NULL, else downloaded
 * from the backend tensor dev_src. */
ck_status ck_record_add(ck_record *rec, const char *name, ck_tensor_kind kind, int step,
                        ck_dtype dt, const ck_shape *shape, const void *host_src,
                        ck_backend *b, const ck_tensor *dev_src, ck_error *err);
/* Appends t under its own name. */
ck_status ck_record_tensor(ck_record *rec, ck_backend *b, const ck_tensor *t,
                           ck_tensor_kind kind, int step, ck_error *err);
/* After backward: the loss, buffers (as the forward left them), grads in backward order. */
ck_status ck_record_after_backward(ck_record *rec, ck_model *m, int step, double loss,
                                   ck_error *err);
/* After the optimizer update: every parameter. */
ck_status ck_record_params(ck_record *rec, ck_model *m, int step, ck_error *err);
/* Drops every entry but keeps the per-step losses and scales (a lockstep run judges and
 * drops each step's tensors); the entries' buffers are kept for the next step's entries in
 * the same slots (the same sizes every step: no fresh pages to fault in), freed by
 * ck_record_free. */
void ck_record_drop_entries(ck_record *rec);
void ck_record_free(ck_record *rec);

#endif
