/*
 * ONNX model files: a strict reader of the protobuf wire format for the parts of
 * onnx.proto an importer needs — the graph's nodes with their attributes, initializers,
 * inputs and outputs with their static shapes, the opset — and nothing else.
 *
 * Strict like the other readers: every varint is at most 10 bytes and fits 64 bits, every
 * length-delimited field lies inside its parent, a known field with the wrong wire type is
 * an error, names are valid UTF-8 without NUL, counts are capped, a tensor's data size must
 * equal the product of its dims times its element size (overflow-checked), and sparse
 * initializers, subgraphs (If, Loop, Scan attributes) and strings as tensor data are
 * refused. External data (torch 2.x writes MODEL.onnx.data beside MODEL.onnx) is read from
 * files inside the model's folder only: the location must be a relative path without `..`,
 * the file (symbolic links resolved) must lie inside that folder, and offset + length must
 * lie inside the file and equal the tensor's size (onnx_external.c). Unknown fields are skipped as protobuf allows, after checking that they
 * are well formed. Every failure is CK_ERR_INPUT with one line "<file>: onnx: <what>".
 *
 * Field numbers follow onnx.proto (ModelProto.graph = 7, GraphProto.node = 1, ...); the
 * reader keeps them in one table per message in onnx.c. Of the metadata (onnx_metadata.c) it
 * keeps only what names things: torch's node scopes, the dynamo optimiser's folded_from
 * records and the exported program's parameter names; a malformed entry is skipped.
 */
#ifndef CK_ONNX_H
#define CK_ONNX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness/core/status.h"
#include "harness/core/tensor.h"

/* TensorProto.DataType values the reader accepts. */
enum {
    CK_ONNX_FLOAT = 1,
    CK_ONNX_UINT8 = 2,
    CK_ONNX_INT8 = 3,
    CK_ONNX_INT32 = 6,
    CK_ONNX_INT64 = 7,
    CK_ONNX_BOOL = 9,
    CK_ONNX_FLOAT16 = 10,
    CK_ONNX_DOUBLE = 11,
    CK_ONNX_BFLOAT16 = 16
};

/* AttributeProto.AttributeType values. */
enum {
    CK_ONNX_ATTR_FLOAT = 1,
    CK_ONNX_ATTR_INT = 2,
    CK_ONNX_ATTR_STRING = 3,
    CK_ONNX_ATTR_TENSOR = 4,
    CK_ONNX_ATTR_GRAPH = 5,
    CK_ONNX_ATTR_FLOATS = 6,
    CK_ONNX_ATTR_INTS = 7,
    CK_ONNX_ATTR_STRINGS = 8
};

#define CK_ONNX_MAX_NODES 100000
#define CK_ONNX_MAX_ATTR_INTS 4096
#define CK_ONNX_MAX_IO 64

/* A tensor: its data as little-endian elements of data_type, owned. */
typedef struct {
    char *name;
    int data_type;
    int ndim;
    int64_t dims[CK_MAX_DIMS];
    int64_t numel;
    void *data;     /* numel * element size bytes; NULL when numel is 0 or the data is
                     * external and not attached yet */
    size_t nbytes;
    /* External data (data_location EXTERNAL): the file named by `location`, relative to the
     * model's folder, holds the nbytes bytes at `offset`. NULL location: the data is inside
     * the model file. */
    char *ext_location;
    uint64_t ext_offset;
} ck_onnx_tensor;

typedef struct {
    char *name;
    int type;          /* CK_ONNX_ATTR_* */
    double f;
    int64_t i;
    char *s;           /* NUL-terminated copy (strings with NUL are refused) */
    int n_ints;
    int64_t *ints;
    int n_floats;
    double *floats;
    ck_onnx_tensor *t; /* CK_ONNX_ATTR_TENSOR */
} ck_onnx_attr;

typedef struct {
    char *name;        /* may be "" in a file; never NULL here */
    char *op_type;
    char *domain;      /* "" for the default domain */
    /* metadata_props `pkg.torch.onnx.name_scopes` as written (torch 2.x's dynamo exporter:
     * the module scopes of the node, a Python list such as "['', 'h.0', 'h.0.attn',
     * 'view_1']"); "" when absent. Every other metadata entry is skipped. */
    char *torch_scopes;
    int n_in, n_out, n_attr;
    char **in;         /* "" marks an omitted optional input */
    char **out;
    ck_onnx_attr *attr;
} ck_onnx_node;

/* A graph input or output: name, element type and static shape (dims < 0 are symbolic). */
typedef struct {
    char *name;
    int elem_type;     /* 0 when absent */
    int ndim;          /* -1 when the file gives no shape */
    int64_t dims[CK_MAX_DIMS];
} ck_onnx_value;

/* A value the dynamo exporter's optimiser made by constant folding (value_info metadata
 * `pkg.onnxscript.optimizer.folded_from`, a Python list of the values it was computed from,
 * such as "['fc1.weight']"): the value's name and those sources. An entry that is not a
 * well-formed list of plain quoted names (too long, escapes, more than CK_ONNX_MAX_FOLD_SOURCES)
 * is skipped, so the value has no record and keeps the name the file gives it. */
typedef struct {
    char *value;
    int n_src;
    char **src;
} ck_onnx_fold;

#define CK_ONNX_MAX_FOLD_SOURCES 256

typedef struct {
    int64_t ir_version;
    int64_t opset;     /* the default domain's opset version; 0 when absent */
    char *producer;    /* producer_name and producer_version, "" when absent */
    int n_nodes, n_inits, n_inputs, n_outputs;
    ck_onnx_node *nodes;
    ck_onnx_tensor *inits;
    ck_onnx_value *inputs;
    ck_onnx_value *outputs;
    /* torch 2.x's dynamo exporter only (metadata; empty for other files): the folded
     * values (graph value_info), and the targets of the exported program's PARAMETER inputs
     * (graph metadata `pkg.torch.export.ExportedProgram.graph_signature`, lines such as
     * "p_fc1_weight: PARAMETER target='fc1.weight'"), every parameter of the module by
     * each of its names, in the module's order */
    int n_folds, n_torch_params;
    ck_onnx_fold *folds;
    char **torch_params;
} ck_onnx_model;

/* Parses a whole .onnx file's bytes; path names the file in messages. On failure *out is
 * left empty. */
ck_status ck_onnx_parse(const void *buf, size_t len, const char *path, ck_onnx_model *out,
                        ck_error *err);
/* Maps and parses path, then attaches every external data file the tensors name
 * (ck_onnx_attach_external), each confined to the model's folder. */
ck_status ck_onnx_load(const char *path, ck_onnx_model *out, ck_error *err);

/* External data (onnx_external.c). The first tensor (initializer or a node's tensor
 * attribute) whose external data is not attached yet, or NULL. */
const ck_onnx_tensor *ck_onnx_external_pending(const ck_onnx_model *m);
/* Copies the data of every pending tensor whose location is `location` out of buf (the
 * file's len bytes; data_path names it in messages): offset + nbytes must lie inside it. */
ck_status ck_onnx_attach_external(ck_onnx_model *m, const char *location, const void *buf,
                                  size_t len, const char *data_path, ck_error *err);
/* Attaches every pending tensor's data from the files its locations name, relative to
 * model_path's folder; a file outside that folder (through a symbolic link too), missing,
 * not regular or too short is one line naming the tensor and the file. */
ck_status ck_onnx_load_external(ck_onnx_model *m, const char *model_path, ck_error *err);
/* Whether a location is one the reader opens: not empty, relative, no `..` component, no
 * backslash, no empty component; *why says what is wrong otherwise. */
bool ck_onnx_location_ok(const char *location, const char **why);
void ck_onnx_free(ck_onnx_model *m);

/* Element size of an accepted data type, 0 for others; its name ("float", "int64", ...). */
size_t ck_onnx_elem_size(int data_type);
const char *ck_onnx_type_name(int data_type);

/* The attribute named name of node n, or NULL. */
const ck_onnx_attr *ck_onnx_attr_find(const ck_onnx_node *n, const char *name);
/* The fold record of value name, or NULL. */
const ck_onnx_fold *ck_onnx_fold_find(const ck_onnx_model *m, const char *name);
/* Whether name is a PARAMETER target of the exported program's signature. */
bool ck_onnx_is_torch_param(const ck_onnx_model *m, const char *name);
/* The metadata texts (onnx_metadata.c), parsed into m; malformed text is ignored (metadata
 * only names things), so these fail only when out of memory. A folded_from list of value
 * `value`; a graph signature. */
ck_status ck_onnx_add_fold(ck_onnx_model *m, const char *value, const char *text, size_t n);
ck_status ck_onnx_add_signature(ck_onnx_model *m, const char *text, size_t n);

/* The initializer named name, or NULL. */
const ck_onnx_tensor *ck_onnx_init_find(const ck_onnx_model *m, const char *name);

#endif
