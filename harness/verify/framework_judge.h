/*
 * Judging a framework's runs (the judge input, framework_dump.h) with the harness's own
 * rules, into the same ck_result the harness's runs produce, so the report writers, JUnit,
 * HTML and the exit code are those of `run`:
 *
 *   - the control first: the plain run and the plain run again must be bitwise identical
 *     (a deterministic framework gives that); a control that differs fails every item, with
 *     the differing tensors named (the noise floor of `run --noise-floor`);
 *   - each checkpointed run (one per mode, dtype and rank) against the plain run of its
 *     dtype: bitwise identical expected (the same kernels ran on the same data);
 *   - each low-precision plain run against the fp32 plain run by the calibrated rule
 *     (precision_judge.h) with the driver's calibration runs;
 *   - every recomputed module output against its original (the recompute check), the
 *     saved-tensor memory of both runs against --min-saving, vacuity, non-finite values;
 *   - under torch.distributed, every rank's gradients against rank 0's (identical);
 *   - where the runs part: the first step and tensor, the first module (recomputed output,
 *     then output gradient in backward order, then buffers), and the cause in words.
 */
#ifndef CK_FRAMEWORK_JUDGE_H
#define CK_FRAMEWORK_JUDGE_H

#include "harness/verify/framework_dump.h"
#include "harness/verify/result.h"

#define CK_FW_LINE 512

/* The framework model as the harness's case and graph: one layer per module (name, type),
 * so findings and reports name modules. Built once per input. */
typedef struct {
    ck_case cs;
    ck_graph g;
} ck_fw_model;

typedef struct {
    bool bisect;           /* localise and explain (the default) */
    bool has_min_saving;   /* --min-saving replaces the input's min_saving */
    double min_saving;
} ck_fw_judge_opts;

ck_status ck_fw_model_build(const ck_fw_input *in, const ck_fw_judge_opts *o, ck_fw_model *m,
                            ck_error *err);
void ck_fw_model_free(ck_fw_model *m);

/* One judged item: a checkpointed run against its plain run. */
typedef struct {
    int ckpt_run, plain_run;     /* indexes into the input's runs */
    char label[160];             /* "<model> nonreentrant fp32" (+ " rank1") */
    ck_case cs;                  /* the model's case named by the label (res.cs) */
    ck_result res;
    /* the control pair */
    bool control_ran;
    ck_verdict control_verdict;
    int control_differing;       /* tensors that differ between the two plain runs */
    char control_first[CK_FW_LINE]; /* "grad fc.weight at step 0 (max_abs ...)" */
    /* memory (bytes; -1 where the framework gave none) */
    int64_t plain_saved_peak, ckpt_saved_peak;
    int64_t plain_device_peak, ckpt_device_peak;
    int64_t recomputed_calls;    /* module forwards during backward, over every step */
    int wrapped_modules;
    /* torch.distributed: this rank's checkpointed gradients against rank 0's */
    bool ranks_checked;
    ck_verdict ranks_verdict;
    char ranks_first[CK_FW_LINE];
    /* why the runs part, in words (the judge's own causes: framework modules, not layers
     * of a case; the reports carry them as bisect.causes) */
    int n_causes;
    char causes[CK_BISECT_MAX_CAUSES][CK_FW_LINE];
    /* failures the result's own writers do not know (control, ranks), one line each */
    int n_extra_failures;
    char extra_failures[3][CK_FW_LINE];
    bool pass;                   /* res.pass and no extra failure */
} ck_fw_item;

/* The checkpointed runs of in, in input order: *n items (caller frees with
 * ck_fw_items_free). Errors are bad input (a run whose tensors do not line up with its
 * plain run's, an unreadable file) or out of memory. */
ck_status ck_fw_judge(const ck_fw_input *in, const ck_fw_model *m, const ck_fw_judge_opts *o,
                      ck_fw_item **items, int *n, ck_error *err);
void ck_fw_items_free(ck_fw_item *items, int n);

#endif
