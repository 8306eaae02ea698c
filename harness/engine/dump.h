/*
 * Tensor dumps: what `run --dump DIR` writes so that every tensor the harness compares can
 * be loaded in Python (safetensors.torch.load_file, safetensors.numpy.load_file) and
 * compared again with `ckpt-harness compare`.
 *
 * One safetensors file per (run, step, kind), since a parameter and its gradient share a
 * name (the report's tensor names are used unchanged), and a manifest.json beside them
 * that says which file holds what:
 *
 *   {"schema": "ckpt-harness/dump-manifest", "schema_version": 1, "case": "unet3d_bn",
 *    "files": [{"file": "plain/step_0000/grads.safetensors", "run": "plain", "step": 0,
 *               "kind": "grad", "tensors": [{"name": "enc1.weight", "dtype": "fp32",
 *                                            "shape": [4, 1, 3, 3, 3]}, ...]}, ...]}
 *
 * "file" is relative to the manifest's directory; entries keep the order they were added.
 * Beside the manifest, case.json is a copy of the case file (ck_dump_case_file).
 */
#ifndef CK_DUMP_H
#define CK_DUMP_H

#include "harness/engine/executor.h"
#include "harness/model/params.h"
#include "harness/model/plan.h"
#include "harness/engine/records.h"
#include "harness/io/tensorset.h"

#define CK_MANIFEST_SCHEMA "ckpt-harness/dump-manifest"
#define CK_MANIFEST_SCHEMA_VERSION 1

/* Writes n tensors (host data, names unique) as one safetensors file at path, atomically.
 * Tensors keep the given order in the file. Creates no directories. */
ck_status ck_dump_tensors(const char *path, int n, const ck_named_tensor *t, ck_error *err);

typedef struct {
    void *root;  /* cJSON *, built as entries are added */
    void *files; /* cJSON *, the "files" array inside root */
} ck_manifest;

ck_status ck_manifest_init(ck_manifest *m, const char *case_name, ck_error *err);
/* Records that file (relative to the manifest) holds these n tensors of one run, step
 * (0-based; -1 for "before the first step", e.g. initial weights, written as null) and
 * kind ("param", "grad", "buffer", "activation", "data"). */
ck_status ck_manifest_add(ck_manifest *m, const char *file, const char *run, int step,
                          const char *kind, int n, const ck_named_tensor *t, ck_error *err);
/* Adds "config" to the manifest: what a reproduction needs besides the tensors: seed,
 * dtype, steps, RNG/batchnorm/autocast policies, optimizer and its hyper-parameters, loss
 * (with class_dim and ignore_index), the input's distribution, the resolved checkpoint
 * segments (plan may be NULL) and every layer's op with its resolved padding. */
ck_status ck_manifest_describe(ck_manifest *m, const ck_graph *g, const ck_plan *plan,
                               ck_dtype dtype, ck_error *err);
/* Writes the manifest (formatted JSON and a newline) to path atomically. */
ck_status ck_manifest_write(const ck_manifest *m, const char *path, ck_error *err);
void ck_manifest_free(ck_manifest *m);

/* ---- what one training run writes (run --dump) ---- */

/* One run's part of a dump: its subdirectory and the manifest its files are recorded in. */
typedef struct ck_dump_spec {
    const char *dir;        /* the (case, dtype) dump directory; created by the caller */
    const char *label;      /* "plain" or "checkpointed": the run's subdirectory */
    ck_manifest *manifest;  /* the files are recorded here */
    bool activations;       /* also every layer's output (original forwards) per step */
    bool activation_grads;  /* also every layer's output gradient per step */
    bool optimizer_state;   /* also the optimizer state after each step */
} ck_dump_spec;

/* Parameters and buffers right after initialisation (<label>/init/weights.safetensors):
 * what `--init` reads back. */
ck_status ck_dump_init(const ck_dump_spec *d, ck_model *m, ck_error *err);
/* The record entries [from, rec->n) of one step, one file per kind
 * (<label>/step_NNNN/{loss,grads,params,buffers}.safetensors). */
ck_status ck_dump_step(const ck_dump_spec *d, const ck_record *rec, int from, int step,
                       ck_error *err);

/* The model input and the loss target of a step, as the run drew them
 * (<label>/step_NNNN/data.safetensors: "input", and "target" when the loss has one). */
ck_status ck_dump_data(const ck_dump_spec *d, ck_backend *b, const ck_tensor *input,
                       const ck_tensor *target, int step, ck_error *err);
/* The optimizer state after a step (<label>/step_NNNN/optimizer.safetensors:
 * "<param>.state0" (momentum buffer / adam m), "<param>.state1" (adam v)). */
ck_status ck_dump_optimizer(const ck_dump_spec *d, ck_model *m, const ck_optimizer *opt,
                            int step, ck_error *err);

/* A copy of the case file beside the manifest (<dir>/case.json), so a dump says which model
 * it holds. */
ck_status ck_dump_case_file(const char *dir, const char *case_path, ck_error *err);

/* An executor observer installed whenever a run dumps: keeps, per step, each original
 * forward output (when activations), each layer's output gradient (when
 * activation_grads), and the random draws every dropout, attention-dropout and noise layer
 * used in its original forward (always): "<layer>.mask" (fp32, 0 or 1/(1 - rate), shaped
 * like the output for dropout and (N, heads, Lq, Lk) for attention) and "<layer>.noise"
 * (fp32 N(0, 1) draws, shaped like the output). It forwards every event to the inner
 * observer. */
typedef struct {
    ck_exec_observer inner;
    void *inner_user;
    ck_backend *b;
    const ck_graph *g;
    bool activations, activation_grads;
    ck_record acts;   /* this step's outputs */
    ck_record grads;  /* this step's output gradients */
    ck_record random; /* this step's masks and noise */
} ck_act_dumper;

ck_status ck_act_observe(void *user, const ck_exec_event_info *ev, ck_error *err);
/* Writes the step's kept tensors (<label>/step_NNNN/activations.safetensors,
 * activation_grads.safetensors, random.safetensors; a file only when it has tensors) and
 * forgets them. */
ck_status ck_dump_activations(const ck_dump_spec *d, ck_act_dumper *a, int step, ck_error *err);

#endif
