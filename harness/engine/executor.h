/*
 * The executor: one training step's forward, loss and backward over the graph, plain or
 * checkpointed, with every activation-side buffer going through the accounting allocator.
 *
 * Plain: every layer output stays live until that layer's backward.
 * Checkpointed (plan != NULL): after a segment's forward, outputs used only inside it are
 * freed; when backward reaches the segment's last layer, the whole segment is run forward
 * again (a recomputation, args.recompute = true) from its kept inputs, then backward
 * proceeds through it. Layers with side effects consult the policies on recomputation:
 * batchnorm updates running statistics again only under `update`; dropout and noise draw
 * keyed streams (`counter`), the advancing global stream (`stateful`), or the global
 * stream rewound to the segment's entry state (`stash`).
 */
#ifndef CK_EXECUTOR_H
#define CK_EXECUTOR_H

#include "harness/engine/act_finite.h"
#include "harness/engine/alloc.h"
#include "harness/engine/liveness.h"
#include "harness/model/case.h"
#include "harness/model/params.h"
#include "harness/model/plan.h"

typedef struct ck_exec ck_exec;

/* Observer for layer events (bisect, --verify-recompute, activation dumps); may be NULL.
 * Everything it is given lives in backend memory and is valid only during the call. */
typedef enum { CK_EVENT_FORWARD = 0, CK_EVENT_BACKWARD } ck_exec_event;

typedef struct {
    ck_exec_event ev;
    int layer;
    int step;
    bool recompute;           /* FORWARD: this forward recomputes a segment */
    const ck_tensor *tensor;  /* FORWARD: the layer's output; BACKWARD: its output gradient */
    const ck_op_io *io;       /* FORWARD: the op's tensors, buffers included; else NULL */
    const ck_fwd_args *args;  /* FORWARD: the args it ran with (RNG stream); else NULL */
} ck_exec_event_info;

/* Returns CK_OK to continue; anything else aborts the step with that status (err filled). */
typedef ck_status (*ck_exec_observer)(void *user, const ck_exec_event_info *ev, ck_error *err);

typedef struct {
    ck_backend *b;
    const ck_graph *g;
    ck_model *model;
    const ck_plan *plan; /* NULL: plain run */
    uint64_t seed;
    ck_rng_policy rng;
    ck_bn_policy bn;
    ck_autocast_policy autocast; /* low-precision runs: the dtype a recomputation runs in */
    bool freeze_buffers; /* never update batchnorm running statistics (gradcheck) */
    ck_exec_observer observer;
    void *observer_user;
    ck_alloc_trace *event_log; /* the allocator's exact event log (alloc.h); may be NULL */
    /* The memory prediction (`ckpt-harness plan`): the step runs its whole schedule of
     * allocations and frees through the accounting allocator without a backend (b may be
     * NULL; no kernel runs, no memory is allocated), so the peak it counts is the peak a
     * real run of the same graph and plan measures. */
    bool dry_run;
    /* The precision judgement's calibration run (fp32 only; round_bits 0: off): every layer
     * output and every output gradient is multiplied by (1 + perturb_rel * r), r uniform in
     * [-1, 1) from a stream keyed by (perturb_seed, layer, step), then rounded to round_bits
     * significant bits (11: fp16's significand, 8: bf16's) with fp32's exponent range: the
     * rounding a correct low-precision run does at every op, without its underflow,
     * overflow or any reduction carried out in the low dtype. */
    int round_bits;
    double perturb_rel;
    uint64_t perturb_seed;
    /* Every activation gradient in a buffer of its own: no gradient written over its
     * input's or its output gradient's buffer, shared between an add's inputs, or kept
     * inside a concat's, no relu's backward fused into another's, and no layer output
     * written inside a concat's output buffer (tests check that those change no bit
     * against this). */
    bool own_gradient_buffers;
    /* Every layer's output gradient is a tensor of its own when its backward runs, for an
     * observer that reads it (activation-gradient dumps, bisect): no relu's backward is
     * fused into the backward that produces its output gradient (executor.c,
     * relu_fuse_source), so such a run's peak can exceed the plan's. */
    bool keep_activation_grads;
} ck_exec_config;

/* The marks the executor writes into the allocator's event log (alloc.h), once per step: after
 * the forward of the last layer, after each segment's recomputation, and after the step's
 * activations were released. */
#define CK_MARK_FORWARD_END "forward end"
#define CK_MARK_RECOMPUTE_END "recompute end"
#define CK_MARK_STEP_END "step end"


struct ck_exec {
    ck_exec_config cfg;
    ck_dtype dtype;
    ck_act_alloc act;
    ck_liveness live;              /* which tensors are kept and for how long (liveness.h) */
    int64_t forward_end_bytes;     /* live bytes after the latest step's forward: what the
                                      run holds for backward (PyTorch's saved tensors) */
    int64_t *segment_peak;         /* per segment: highest live bytes from its recomputation
                                      to the end of its backward, over the steps so far */
    ck_tensor *out, *dout, *saved; /* per layer; data NULL when not live */
    int *grad_shared_with;         /* per layer: the layer whose gradient is the same
                                      buffer (a two-input add's inputs), or -1 */
    int *grad_inside;              /* per layer: the concat whose output gradient's buffer
                                      holds this layer's gradient (its first input's, at the
                                      buffer's end), or -1; freed with it */
    int *grad_holds;               /* per layer: the layer whose gradient lives inside this
                                      layer's gradient buffer (the inverse), or -1 */
    int *out_inside;               /* per layer: the concat whose output buffer holds this
                                      layer's output (its first input, written at the
                                      buffer's end and moved into place by the concat's
                                      forward: concat_inside_target), or -1 */
    bool *relu_done;               /* per layer: a relu whose backward its output's one
                                      consumer (or the loss) did this step, its input's
                                      gradient written over its output (relu_fuse_source) */
    ck_fwd_args *args;             /* per layer: the args of its latest forward */
    bool *master_params;           /* per layer: its latest forward ran on fp32 masters */
    uint64_t global_offset;        /* words drawn from the global stream (stateful/stash) */
    uint64_t *stash;               /* per segment: global_offset at segment entry */
    int64_t recomputed_layers;
    int64_t recomputed_other_dtype; /* recomputations that ran in another dtype than the forward */
    int first_other_dtype_layer;    /* the first such layer, or -1 */
    ck_act_finite finite;           /* NaN/Inf in every output and output gradient
                                       (act_finite.h); the trainer settles each step */
};

ck_status ck_exec_create(ck_exec *e, const ck_exec_config *cfg, ck_error *err);
void ck_exec_free(ck_exec *e);

/* One step: forward, loss, and (when backward is set) backward accumulating into the
 * model's gradients (the caller zeroes them). loss_scale multiplies dL/dy. All
 * activations are freed before it returns. */
ck_status ck_exec_step(ck_exec *e, int step, const ck_tensor *input, const ck_tensor *target,
                       ck_loss_kind loss_kind, double loss_scale, bool backward, double *loss,
                       ck_error *err);

/* A concat's first input's gradient, moved inside the concat's output gradient dy (outer
 * rows of s elements, the first a of each row the first input's part) to the end of dy's
 * buffer, in place: element (n, j) goes to outer x (s - a) + n x a + j. Part n moves up by
 * (outer - n) x (s - a) elements; parts are moved last first, each in chunks no longer than
 * its move, top chunk first, so no move reads what an earlier one wrote and no chunk
 * overlaps itself. A chunk is zeroed, then dy's values are added to it (b->convert,
 * accumulating): +0 + dy, the bits of a fresh zeroed gradient that a concat kernel adds
 * its part to (tested against the kernels, -0 and NaN included). The rest of dy is left
 * undefined. */
ck_status ck_exec_concat_grad_move(ck_backend *b, const ck_tensor *dy, int64_t outer,
                                   int64_t a, int64_t s, ck_error *err);

/* The forward counterpart: a concat's output y whose first input was written contiguously
 * at the buffer's end (element (n, j) at outer x (s - a) + n x a + j) gets that input's
 * parts moved down into place, element (n, j) to n x s + j: parts first to last, each in
 * chunks no longer than its move, lowest chunk first, so no move overwrites what is still
 * to be read. Each chunk is b->convert with scale 1 and no accumulation: the values a
 * concat kernel copies (-0 and NaN included). The other inputs' parts are the caller's. */
ck_status ck_exec_concat_forward_move(ck_backend *b, const ck_tensor *y, int64_t outer,
                                      int64_t a, int64_t s, ck_error *err);

#endif
