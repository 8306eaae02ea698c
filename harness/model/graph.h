/*
 * The model graph: layers in topological order with inferred shapes, parameter and
 * buffer specs, consumers, and resolved padding. Built from a ck_case; shape errors are
 * reported with the file and JSON path of the layer that cannot be built.
 */
#ifndef CK_GRAPH_H
#define CK_GRAPH_H

#include "harness/model/node.h"


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
