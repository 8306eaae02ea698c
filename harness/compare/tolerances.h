/*
 * Tolerances for `ckpt-harness compare`: built-in defaults per dtype (torch.testing's),
 * --rtol/--atol from the command line, and a tolerance file:
 *
 *   {"default": {"rtol": 1e-6, "atol": 1e-6},
 *    "dtypes":  {"F16": {"rtol": 1e-3}, "bf16": {"rtol": 2e-2, "atol": 1e-4}},
 *    "tensors": {"dec*.weight": {"atol": 1e-4}, "enc1.bias": {"rtol": 0, "atol": 0}}}
 *
 * Every member is optional; each entry may give rtol, atol or both (numbers >= 0). Dtype
 * keys use either spelling ("F16" or "fp16"). Tensor keys are fnmatch(3) patterns, tried
 * in file order; the first that matches the tensor's name wins. rtol and atol are each
 * resolved, most specific first: the first matching "tensors" entry that sets it, the
 * tensor's "dtypes" entry, --rtol/--atol, the file's "default", the built-in default
 * for the dtype. Integer and bool tensors are compared exactly unless the first "tensors"
 * entry matching their name sets rtol/atol (an excuse by name; --rtol, --atol, "default"
 * and "dtypes" never apply to them).
 */
#ifndef CK_TOLERANCES_H
#define CK_TOLERANCES_H

#include "harness/io/tensorset.h"

typedef struct {
    bool has_rtol, has_atol;
    double rtol, atol;
} ck_tol_spec;

typedef struct {
    char *pattern;
    ck_tol_spec tol;
} ck_tol_rule;

typedef struct {
    ck_tol_spec cli;          /* --rtol / --atol */
    ck_tol_spec file_default; /* "default" */
    ck_tol_spec dtypes[CK_FT_COUNT];
    int n_rules;
    ck_tol_rule *rules; /* "tensors", in file order */
} ck_tolerances;

void ck_tolerances_init(ck_tolerances *t);
/* Parses a tolerance file's text into t (which keeps its cli settings). Errors name path
 * and the member: "tol.json: dtypes.F16.rtol: must be a number >= 0". */
ck_status ck_tolerances_parse(ck_tolerances *t, const char *text, size_t len, const char *path,
                              ck_error *err);
ck_status ck_tolerances_load(ck_tolerances *t, const char *path, ck_error *err);
void ck_tolerances_free(ck_tolerances *t);

/* torch.testing.assert_close's defaults: fp64 (1e-7, 1e-7), fp32 (1.3e-6, 1e-5),
 * fp16 (1e-3, 1e-5), bf16 (1.6e-2, 1e-5); integers and bool (0, 0). */
void ck_tolerances_builtin(ck_file_dtype dt, double *rtol, double *atol);
/* The rtol and atol for a tensor (see the order above). */
void ck_tolerances_resolve(const ck_tolerances *t, const char *name, ck_file_dtype dt,
                           double *rtol, double *atol);

#endif
