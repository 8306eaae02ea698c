/*
 * Private to the ONNX importer (onnx_import.h), split by concern over harness/model/onnx_*.c:
 * the importer's state while it maps one model, and the functions its files share (each
 * documented where it is defined). Nothing outside those files includes this header.
 */
#ifndef CK_ONNX_IMPORT_INTERNAL_H
#define CK_ONNX_IMPORT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "harness/io/json_get.h"
#include "harness/io/onnx.h"
#include "harness/io/tensorset.h"
#include "harness/model/catalogue.h"
#include "harness/model/onnx_import.h"
#include "harness/model/onnx_shapes.h"

struct pend;

/* The importer's state while it maps one model (ck_onnx_import). */
typedef struct {
    const ck_onnx_model *m;
    const char *path;
    ck_error *err;
    cJSON *layers;
    ck_tensorset *w;
    const char *file; /* path kept by the set (tensor origins) */
    /* ONNX value name -> case layer name ("input" for the model input) */
    int n_vals, cap_vals;
    char **val_name, **val_layer;
    int n_names, cap_names;
    char **names; /* layer names in use */
    bool *folded; /* per node: handled by another node's mapping */
    int n_consts;
    ck_onnx_tensor *consts; /* outputs of nodes folded at import (Concat of constants, ...) */
    const ck_onnx_node *node; /* the node being mapped (messages) */
    /* values inside an attention pattern being matched (onnx_match_attention.c) */
    int n_pend;
    struct pend *pend;
    ck_onnx_origins *origins; /* NULL: not recorded */
    bool made_up;             /* the weight being added has no initializer behind it */
    const cJSON *input_json;  /* the case's input object (layer shapes) */
    ck_onnx_shape_cache shapes;
    /* folded constants that are a whole initializer in another form (a Gather of every row
     * in order: nn.Embedding(arange)): constant name -> initializer name */
    int n_alias;
    char **alias_of, **alias_src;
    /* weights added so far (imp_add_weight): the initializer behind each, its orientation
     * in the case, and the case tensor ("tok.weight"); a later use of the same initializer
     * in the same orientation is a share of it (imp_shared_weight) */
    int n_tied, cap_tied;
    char **tied_src, **tied_param;
    bool *tied_transposed;
    /* the attention pattern is not tried: every node takes the generic path (the second
     * attempt after the pattern refused a graph) */
    bool no_attention_pattern;
    bool pattern_started; /* an attention pattern was started (a retry may take the graph) */
    int n_low_float_casts; /* cast layers to float16 or bfloat16 made so far */
} imp;

/* The stages of the causal attention pattern (onnx_match_attention.c), and a value inside
 * it: its stage and what the pattern has learned up to it. */
enum { P_SPLIT, P_HEADS, P_HEADS_T, P_SCORES, P_PROBS, P_CTX, P_CTX_T };

struct pend {
    char *value;
    int kind;
    char q[CK_NAME_MAX + 1], k[CK_NAME_MAX + 1], v[CK_NAME_MAX + 1];
    int64_t b, l, heads, d;
    double scale;
    bool scaled, causal, masked, dropped;
    double dropout;
    int softmax_node;
};

/* onnx_import_settings.c */
ck_status imp_add_settings(imp *im, cJSON *root, const ck_onnx_import_opts *o,
                           const ck_onnx_value *in, bool tokens);

/* onnx_import_refusals.c */
ck_status imp_fail_node(imp *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ck_status imp_oom(imp *im);
ck_status imp_validate_nodes(imp *im);

/* onnx_import_values.c */
const char *imp_layer_of(const imp *im, const char *value);
ck_status imp_bind(imp *im, const char *value, const char *layer);
ck_status imp_make_name(imp *im, const char *from, char out[CK_NAME_MAX + 1]);
ck_status imp_name_for(imp *im, const ck_onnx_node *n, const char *weight_value,
                       char out[CK_NAME_MAX + 1]);
const ck_onnx_tensor *imp_const_of(const imp *im, const char *value);
int imp_readers(const imp *im, const char *value);
double imp_elem_f64(const ck_onnx_tensor *t, int64_t i);
int64_t imp_elem_i64(const ck_onnx_tensor *t, int64_t i);
bool imp_is_float_type(int t);
int imp_sole_reader(const imp *im, const char *value);
bool imp_scalar_is(const imp *im, const char *value, double want);
bool imp_binary_with_scalar(const imp *im, int idx, const char *op_type, const char *a,
                            double want, bool commute);
bool imp_binary_of(const imp *im, int idx, const char *op_type, const char *a, const char *b);
ck_status imp_scoped_name(imp *im, const ck_onnx_node *n, const char *what,
                          char out[CK_NAME_MAX + 1]);
const char *imp_other_input(const imp *im, int idx, const char *op_type, const char *a);
ck_status imp_value_shape(imp *im, const char *value, ck_shape *out);

/* onnx_import_weights.c */
ck_status imp_add_weight(imp *im, const char *layer, const char *what, const ck_onnx_tensor *t,
                         bool transpose);
ck_status imp_add_nbt(imp *im, const char *layer);
/* The module parameter an initializer folded by torch's dynamo exporter stands for: the one
 * source of its folded_from record that is a parameter of the exported program (the one
 * source, in a file without a graph signature), when that name is no other value of the
 * graph (an initializer of that name is the other read of a tied weight, checked by value);
 * NULL otherwise (no record, several or no parameters, a name taken): the file's name
 * stands, and --check-against refuses what it cannot match. */
const char *imp_folded_param(const imp *im, const char *value);
/* The case tensor ("tok.weight") that already holds initializer t in the orientation a
 * layer would store it (transpose as imp_add_weight takes it), into owner; "" when none: the
 * same initializer used by two layers (a tied embedding and output head) is one parameter,
 * written once, and the second layer names it with "share". The two reads must hold equal
 * values element by element; the same parameter read in the other orientation (a weight and
 * its transpose) is refused: a share cannot transpose, two parameters would train apart. */
ck_status imp_shared_weight(imp *im, const ck_onnx_tensor *t, bool transpose, char *owner,
                            size_t n);

/* onnx_import_layers.c */
cJSON *imp_new_layer(imp *im, const char *name, const char *op);
bool imp_add_ints(cJSON *L, const char *key, const int64_t *v, int n);
ck_status imp_set_inputs(imp *im, cJSON *L, const ck_onnx_node *n, const int *idx, int k);
int64_t imp_attr_int(const ck_onnx_node *n, const char *name, int64_t dflt);
double imp_attr_float(const ck_onnx_node *n, const char *name, double dflt);
ck_status imp_attr_ints(imp *im, const ck_onnx_node *n, const char *name, int count,
                        int64_t dflt, int64_t *out);
const char *imp_nd_op(const char *base, int nsp, char *buf, size_t n);
bool imp_symmetric_pads(const int64_t *pads, int nsp, int64_t *out);
double imp_float_decimal(double f);
ck_status imp_one_input_layer(imp *im, const char *name, const char *op, const char *src_value,
                              const char *out_value, cJSON **Lout);

/* onnx_import_constants.c */
ck_status imp_const_ahead(imp *im, const char *value, int depth, const ck_onnx_tensor **out);
bool imp_const_all(const imp *im, const char *value, double want);
ck_status imp_fold_node(imp *im, int idx, bool *done);
const char *imp_alias_source(const imp *im, const char *value);
ck_status imp_fold_more(imp *im, int idx, bool *done);

/* onnx_map_linear.c */
ck_status imp_map_linear(imp *im, int idx, const ck_onnx_node *n);
ck_status imp_map_gather(imp *im, const ck_onnx_node *n);
ck_status imp_map_positional(imp *im, const ck_onnx_node *n, const char *act,
                             const ck_onnx_tensor *P);

/* onnx_map_conv.c */
ck_status imp_map_conv(imp *im, const ck_onnx_node *n);
ck_status imp_map_conv_transpose(imp *im, const ck_onnx_node *n);

/* onnx_map_pool.c */
ck_status imp_map_pool(imp *im, const ck_onnx_node *n, bool is_max);
ck_status imp_map_pad(imp *im, const ck_onnx_node *n);
ck_status imp_map_global_pool(imp *im, const ck_onnx_node *n, bool is_max);

/* onnx_map_upsample.c */
ck_status imp_map_resize(imp *im, const ck_onnx_node *n);
ck_status imp_map_repeat_chain(imp *im, int idx);

/* onnx_map_norm.c */
ck_status imp_map_batchnorm(imp *im, const ck_onnx_node *n);
ck_status imp_map_layernorm(imp *im, const ck_onnx_node *n);

/* onnx_map_pointwise.c */
ck_status imp_map_simple(imp *im, const ck_onnx_node *n, const char *op, int n_act);
const char *imp_unary_op(const char *op_type);

/* onnx_map_broadcast.c */
bool imp_is_binary(const char *op_type);
bool imp_add_feeds_softmax(const imp *im, const ck_onnx_node *n);
ck_status imp_map_binary(imp *im, int idx, const ck_onnx_node *n);
ck_status imp_map_reduce(imp *im, const ck_onnx_node *n);
ck_status imp_map_where(imp *im, const ck_onnx_node *n);
ck_status imp_map_expand(imp *im, const ck_onnx_node *n);
ck_status imp_map_cast(imp *im, const ck_onnx_node *n);
/* Refuses a node other than Cast (or Identity, Shape) reading a float16 or bfloat16 value
 * made by a Cast: the case's ops compute in the run's dtype, not the value's. */
ck_status imp_low_float_input(imp *im, const ck_onnx_node *n);
/* The generic path's ops (the binary ops, Reduce*, Where, Expand, Cast, Concat); *handled
 * false: n is none of them. */
ck_status imp_map_generic(imp *im, int idx, const ck_onnx_node *n, bool *handled);

/* onnx_map_dropout.c */
ck_status imp_dropout_params(imp *im, const ck_onnx_node *n, double *rate_out,
                             bool *training_out);
ck_status imp_map_dropout(imp *im, const ck_onnx_node *n);

/* onnx_map_slice.c */
ck_status imp_map_slicing(imp *im, const ck_onnx_node *n);

/* onnx_map_reshape.c */
ck_status imp_map_squeeze(imp *im, int idx, const ck_onnx_node *n);
ck_status imp_map_reshape(imp *im, const ck_onnx_node *n);

/* onnx_match_attention.c */
struct pend *imp_pend_of(const imp *im, const char *value);
ck_status imp_attn_reshape_in(imp *im, const ck_onnx_node *n, const ck_onnx_tensor *s,
                              bool *matched);
ck_status imp_attn_step(imp *im, int idx, const ck_onnx_node *n, struct pend *in0,
                        struct pend *in1);
ck_status imp_attn_where(imp *im, const ck_onnx_node *n, struct pend *p);

/* onnx_match_gelu.c */
ck_status imp_match_gelu(imp *im, int idx, bool *matched);

/* onnx_match_norm.c */
ck_status imp_match_norm(imp *im, int i, bool *matched);

#endif
