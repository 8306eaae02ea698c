/*
 * run --memory-limit BYTES|auto and --plain: the run plan of a case x dtype is fitted to the
 * limit (ck_run_plan_fit, run_plan.h) from the `plan` prediction (harness/engine/memory_plan.h):
 * a plain run that does not fit is replaced by segment-by-segment equivalence when the
 * checkpointed runs fit, and what fits neither way is refused before anything runs, with
 * one line giving the predicted and the available bytes.
 */
#ifndef CK_MEMORY_LIMIT_H
#define CK_MEMORY_LIMIT_H

#include <stdio.h>

#include "harness/cli/case_files.h"
#include "harness/cli/cli_options.h"
#include "harness/verify/run_plan.h"

/* The limit the options give in bytes (0: none), read once per process for auto (the
 * available memory when first asked); -1 after printing why it cannot be told. *what names
 * it in a refusal ("the --memory-limit is"). */
int64_t ck_cli_memory_limit(const ck_run_opts *o, const char **what);

/* Fits p (made from rq, whose memory_limit this sets) for one case x dtype; returns
 * CK_EXIT_PASS when it may run, else prints one line and returns CK_EXIT_USAGE. */
int ck_cli_fit_run_plan(const ck_run_opts *o, const ck_loaded_case *c, ck_run_request *rq,
                        ck_run_plan *p);

/* When the plan replaced a plain run that does not fit the limit: one note on f, before
 * anything runs, saying so (a case of that size runs for minutes). */
void ck_cli_note_segmentwise(FILE *f, const ck_case *c, const ck_run_plan *p,
                             const ck_run_request *rq, const char *limit_what);

#endif
