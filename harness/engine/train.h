/*
 * The runner: trains a case twice from identical weights and data — plain, then
 * checkpointed — records every step's loss, gradients, buffers and parameters, and
 * compares the two runs into a ck_result.
 *
 * Step order (both runs): data ← seed stream; zero grads; forward; loss; backward
 * (recomputing segments in the checkpointed run); record loss, buffers, grads; optimizer
 * update; record params.
 */
#ifndef CK_RUNNER_H
#define CK_RUNNER_H

#include "harness/engine/executor.h"
#include "harness/verify/result.h"

typedef struct {
    char *name;
    ck_tensor_kind kind;
    int step;
    ck_dtype dtype;
    ck_shape shape;
    void *data; /* host copy */
} ck_record_entry;

typedef struct {
    int n, cap;
    ck_record_entry *e;
    double *losses;
    ck_scale_step *scales; /* per step: loss scale and skip decision */
    int steps;
    int64_t peak_activation_bytes;
    int64_t recomputed_layers;
    int64_t recomputed_other_dtype;
    int first_other_dtype_layer;
    double wall_time_s;
} ck_record;

struct ck_manifest_s;

/* `run --dump DIR`: what one run writes (see dump.h for the files and the manifest). */
typedef struct {
    const char *dir;   /* the (case, dtype) dump directory; created by the caller */
    const char *label; /* "plain" or "checkpointed": the run's subdirectory */
    void *manifest;    /* ck_manifest * the files are recorded in */
    bool activations;  /* also every layer's output (original forwards) per step */
} ck_dump_spec;

typedef struct {
    ck_exec_observer observer; /* passed to the executor of every run; may be NULL */
    void *observer_user;
    const ck_dump_spec *dump;  /* NULL: no dump */
} ck_run_hooks;

typedef struct {
    const char *dump_dir;  /* write the plain and checkpointed runs' tensors here; NULL: no */
    bool dump_activations;
} ck_case_run_opts;

/* Trains g's case once on b in dtype; plan NULL = plain. Fills rec (free with
 * ck_record_free). */
ck_status ck_train(ck_backend *b, const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                   const ck_run_hooks *hooks, ck_record *rec, ck_error *err);
void ck_record_free(ck_record *rec);

/* Plain and checkpointed runs of the case, compared into res (free with ck_result_free). */
ck_status ck_run_case(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_result *res,
                      ck_error *err);
/* The same, with dumps (opts may be NULL). */
ck_status ck_run_case_ex(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                         const ck_case_run_opts *opts, ck_result *res, ck_error *err);

/* Compares two records entry by entry (ckpt against the plain reference) into res's
 * tensors, first_divergence and verdict, with the case's tolerance. */
ck_status ck_compare_records(const ck_graph *g, const ck_record *plain, const ck_record *ckpt,
                             ck_result *res, ck_error *err);

/* Compares a low-precision plain record (dtype `low`) with the fp32 plain record: the
 * case's per-dtype and per-pattern tolerances, and per tensor how many values overflowed,
 * flushed to zero or were subnormal in the low dtype. Fills res->vs_fp32*. */
ck_status ck_compare_vs_fp32(const ck_graph *g, ck_dtype low, const ck_record *fp32,
                             const ck_record *lowrec, ck_result *res, ck_error *err);

/* No inf or NaN among n values (fp32/fp64; other dtypes count as finite). */
bool ck_all_finite(ck_dtype dt, int64_t n, const void *data);

/* The cross-backend check (--against): trains the plain configuration on `ref` too and
 * compares b's plain run with it, tensor by tensor, by relative L2 error: at most 1e-5 in
 * fp32 (reduction orders differ), 1e-2 in fp16, 5e-2 in bf16 (the precision.md rounding
 * points are shared, the accumulation order is not). `ours` is b's plain record. Fills
 * res->vs_backend*; a mismatch fails the case. */
ck_status ck_compare_backends(ck_backend *b, ck_backend *ref, const ck_graph *g, ck_dtype dtype,
                              ck_result *res, ck_error *err);

/* Whether a verdict meets a case's expectation (identical: bitwise; close: nothing outside
 * tolerance; mismatch: something outside). */
bool ck_expectation_met(ck_expect e, ck_verdict v);
/* Sets expect_met, memory_expectation_met and pass from the verdict, memory_met and any
 * recompute mismatches (which make the verdict a mismatch). */
void ck_result_judge(ck_result *res);

/* Draws a step's model input and loss target on the host and uploads them into tensors
 * allocated here (free with ck_free_data). */
ck_status ck_make_data(ck_backend *b, const ck_graph *g, ck_dtype dtype, int step,
                       ck_tensor *input, ck_tensor *target, ck_error *err);
void ck_free_data(ck_backend *b, ck_tensor *input, ck_tensor *target);

#endif
