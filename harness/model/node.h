/*
 * One layer of the model graph (ck_node) and the parameter and buffer specs its op
 * definition fills (harness/model/op_def.h); the graph itself is graph.h.
 */
#ifndef CK_NODE_H
#define CK_NODE_H

#include "harness/model/case.h"

typedef enum { CK_INIT_UNIFORM = 0, CK_INIT_CONST, CK_INIT_NORMAL } ck_init_kind;

typedef struct {
    const char *suffix; /* "weight", "bias", "running_mean", "running_var", "num_batches_tracked" */
    ck_shape shape;
    ck_dtype dtype;     /* CK_F32 means "the run's compute dtype"; CK_I64 stays i64 */
    ck_init_kind init;
    double a;           /* UNIFORM: values in [-a, a); CONST: the value; NORMAL: N(0, a^2) */
} ck_param_spec;

/* A parameter of the node that is another node's (a case's "share"): the node binds the
 * owner's tensor, so gradients of every use accumulate into one tensor that is initialised,
 * updated, recorded and named once, as its owner's. */
typedef struct {
    const char *suffix; /* this node's slot: "weight" or "bias" */
    int layer, slot;    /* the owner: nodes[layer].params[slot] (never itself a share) */
} ck_param_share;

typedef struct ck_node {
    const ck_layer_spec *spec; /* name, op_name as written */
    ck_op_params op;           /* with pad_lo/pad_hi resolved */
    int n_in;
    int in[CK_MAX_INPUTS];     /* producer layer index, -1 = model input */
    ck_shape out_shape;
    int n_params;
    ck_param_spec params[2];   /* weight, bias (in that order when present): the node's own,
                                  without the shared ones */
    unsigned char init_slot_skip[2]; /* shared slots before params[p]: its init stream is
                                        that of its slot as the op defines it (p + skip) */
    int n_shares;
    ck_param_share shares[2];
    int n_buffers;
    ck_param_spec buffers[3];
    bool has_saved;
    ck_shape saved_shape;      /* accumulation-dtype scratch saved for backward */
    int64_t draw_elems;        /* elements drawn from the seed stream per forward: dropout,
                                  gaussian_noise (the output's), attention with dropout
                                  (N heads Lq Lk probabilities); 0: draws nothing */
    bool draw_uniform;         /* uniform words (dropout masks) rather than normal draws */
    int n_consumers;           /* layers reading this output (+1 for the loss on the last) */
    int last_consumer;         /* highest consumer index; n (the loss) for the output layer */
} ck_node;

#endif
