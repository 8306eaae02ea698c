/*
 * The model graph: layers in topological order with inferred shapes, parameter and
 * buffer specs, consumers, and resolved padding. Built from a ck_case; shape errors are
 * reported with the file and JSON path of the layer that cannot be built.
 */
#ifndef CK_GRAPH_H
#define CK_GRAPH_H

#include "harness/model/case.h"

typedef enum { CK_INIT_UNIFORM = 0, CK_INIT_CONST, CK_INIT_NORMAL } ck_init_kind;

typedef struct {
    const char *suffix; /* "weight", "bias", "running_mean", "running_var", "num_batches_tracked" */
    ck_shape shape;
    ck_dtype dtype;     /* CK_F32 means "the run's compute dtype"; CK_I64 stays i64 */
    ck_init_kind init;
    double a;           /* UNIFORM: values in [-a, a); CONST: the value; NORMAL: N(0, a^2) */
} ck_param_spec;

typedef struct {
    const ck_layer_spec *spec; /* name, op_name as written */
    ck_op_params op;           /* with pad_lo/pad_hi resolved */
    int n_in;
    int in[CK_MAX_INPUTS];     /* producer layer index, -1 = model input */
    ck_shape out_shape;
    int n_params;
    ck_param_spec params[2];   /* weight, bias (in that order when present) */
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

typedef struct {
    const ck_case *cs;
    int n;
    ck_node *nodes;
    ck_shape input_shape;
    ck_shape output_shape;  /* the last layer's output, fed to the loss */
    ck_shape target_shape;  /* mse: like output; cross_entropy: output without the class dim */
    ck_loss_spec loss_spec; /* the loss with its class dim resolved (cross_entropy) */
} ck_graph;

ck_status ck_graph_build(const ck_case *c, ck_graph *g, ck_error *err);
void ck_graph_free(ck_graph *g);

/* Infers one op's output shape from its input shapes (no file context in the message;
 * ck_graph_build adds it). Resolves op->pad_lo/pad_hi for conv. */
ck_status ck_op_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *out,
                      ck_error *err);
/* Fills params/buffers/saved for a node whose op and input shapes are known. */
void ck_op_state_specs(ck_node *node, const ck_shape *in0);
/* Fills draw_elems/draw_uniform for a node whose op, inputs and output shape are known
 * (in: its n_in input shapes). */
void ck_op_draw_specs(ck_node *node, const ck_shape *in);

#endif
