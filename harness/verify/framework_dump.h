/*
 * The judge input: what a framework driver (python/ckpt_harness: PyTorch, Keras) writes
 * for `ckpt-harness judge DIR` — DIR/judge.json (schema ckpt-harness/judge-input, layout in
 * docs/interop.md, "Judge input") naming the runs (plain, the control, one checkpointed run
 * per mode, calibration runs) and, per run and step, safetensors files of the loss,
 * gradients, parameters, buffers and module outputs.
 *
 * Loading is strict: every key is checked, every file named in the manifest must exist
 * and hold what the layout says, and each failure is one line naming the file and the
 * JSON path or tensor (CK_ERR_INPUT).
 */
#ifndef CK_FRAMEWORK_DUMP_H
#define CK_FRAMEWORK_DUMP_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "harness/engine/records.h"
#include "harness/io/tensorset.h"

#define CK_JUDGE_INPUT_SCHEMA "ckpt-harness/judge-input"
#define CK_JUDGE_INPUT_VERSION 1
/* The variant of the plain fp32 run that skipped the optimizer update at every step the
 * <dtype> plain run's loss scaler skipped: "skip_like:fp16", that run's fp32 reference. */
#define CK_FW_SKIP_LIKE_PREFIX "skip_like:"

typedef enum {
    CK_FW_PLAIN = 0,     /* the reference: the configuration without checkpointing */
    CK_FW_CONTROL,       /* the plain configuration again: must be bitwise identical */
    CK_FW_CHECKPOINTED,  /* the checkpointed configuration in one mode */
    CK_FW_CALIBRATION    /* fp32 with the low dtype's rounding at every module (precision) */
} ck_fw_role;

const char *ck_fw_role_name(ck_fw_role r);

/* Per-step module record files (the record files, loss/grads/params/buffers, always exist). */
typedef enum {
    CK_FW_OUTPUTS = 0,   /* module outputs of the original forward */
    CK_FW_OUTPUT_GRADS,  /* their gradients */
    CK_FW_RECOMPUTED,    /* module outputs computed again during backward */
    CK_FW_MODULE_KINDS
} ck_fw_module_kind;

typedef struct {
    char *name;    /* "blocks.0.bn" */
    char *type;    /* the framework's class name: "BatchNorm2d", "Dropout" */
    bool wrapped;  /* inside a checkpointed part of the checkpointed configuration */
    bool random;   /* its forward draws random numbers (dropout and the like) */
} ck_fw_module;

typedef struct {
    double loss;
    int64_t saved_bytes_peak;   /* bytes autograd kept for backward, peak over the step; -1 */
    int64_t device_peak_bytes;  /* the device allocator's peak (CUDA); -1 when none */
    int64_t recomputed_calls;   /* module forwards run during backward */
    int n_grads_none;
    char **grads_none;          /* parameters the framework gave no gradient at all */
    double loss_scale;
    bool skipped;
    bool has[CK_FW_MODULE_KINDS];
    int n_created_in_backward;
    char **created_in_backward; /* variables the framework created while recomputing
                                   (Keras: layers built inside the checkpointed function) */
} ck_fw_step;

/* A part the driver checkpointed itself (Keras --wrap): how often it ran and recomputed. */
typedef struct {
    char *name;
    int64_t forward_calls;      /* calls in the forward, over every step */
    int64_t recomputed;         /* recomputations during backward, over every step */
} ck_fw_part;

typedef struct {
    char *id, *mode, *dir;      /* mode: the checkpointing mode (checkpointed runs), or the
                                   variant of a plain/control run ("compile"); else NULL */
    char *reference;            /* checkpointed runs: the variant of the plain run they are
                                   judged against (NULL: the plain run without variant) */
    ck_fw_role role;
    ck_dtype dtype;             /* the autocast dtype the run trained in */
    int rank;                   /* the process (torch.distributed), 0 otherwise */
    int calibration;            /* calibration runs: 0 (no dither), 1, 2; else -1 */
    int n_steps;
    ck_fw_step *steps;
    /* module output dtypes in the original forward and in the recomputation */
    int n_fwd, n_rec;
    char **fwd_names, **rec_names;
    ck_dtype *fwd_dtypes, *rec_dtypes;
    int n_parts;                /* checkpointed runs: the wrapped parts (optional) */
    ck_fw_part *parts;
} ck_fw_run;

typedef struct {
    char *dir;                  /* DIR as given */
    char *path;                 /* DIR/judge.json */
    char *framework, *framework_version, *device;
    bool deterministic;
    char *model_name, *source;  /* source may be NULL */
    bool input_temporary;       /* DIR is deleted after the judge (a driver's temporary
                                   folder): outputs name source, or nothing, not path */
    cJSON *config;              /* the driver's configuration, carried into the reports */
    bool has_min_saving;
    double min_saving;
    int n_modules;
    ck_fw_module *modules;
    int n_notes;
    char **notes;
    int n_runs;
    ck_fw_run *runs;
} ck_fw_input;

/* The file outputs name for the input: model.source, else DIR/judge.json unless the input
 * is temporary (then NULL: nothing that will have been deleted is named). */
const char *ck_fw_input_shown_path(const ck_fw_input *in);

/* Reads and checks DIR/judge.json (not the tensor files: those load per run). */
ck_status ck_fw_input_load(const char *dir, ck_fw_input *in, ck_error *err);
/* The same for judge.json's bytes (len of them, need not be NUL-terminated); dir is where
 * the run folders are. */
ck_status ck_fw_input_parse(const char *text, size_t len, const char *dir, ck_fw_input *in,
                            ck_error *err);
void ck_fw_input_free(ck_fw_input *in);

/* The run with role, dtype, mode (NULL matches runs without one) and rank; calibration
 * index for calibration runs (else ignored); -1 when there is none. */
int ck_fw_find_run(const ck_fw_input *in, ck_fw_role role, ck_dtype dtype, const char *mode,
                   int rank, int calibration);

/* Every step's loss, buffers, gradients and parameters of run r, in that order per step and
 * in file order within a kind, into rec (rec->steps, losses and scales filled). Float
 * tensors become fp32 or stay fp64, integers i64 or i32: the dtypes ck_compare judges;
 * anything else is refused with a line naming the file and tensor. */
ck_status ck_fw_load_record(const ck_fw_input *in, const ck_fw_run *r, ck_record *rec,
                            ck_error *err);

/* One step's module record file of run r, kind k (empty set when the run has none). */
ck_status ck_fw_load_modules(const ck_fw_input *in, const ck_fw_run *r, int step,
                             ck_fw_module_kind k, ck_tensorset *out, ck_error *err);

/* The module whose name is the longest prefix of tensor name t followed by "." or "/"
 * ("blocks.0.bn" for "blocks.0.bn.running_mean", Keras's "enc/bn" for "enc/bn/moving_mean"),
 * or -1. */
int ck_fw_module_of(const ck_fw_input *in, const char *t);
/* The module index of a module record tensor name ("blocks.0.drop" or "blocks.0.drop#2" for
 * its third call), or -1. */
int ck_fw_module_index(const ck_fw_input *in, const char *record_name);

#endif
