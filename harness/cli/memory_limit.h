/*
 * run --memory-limit BYTES|auto: a case x dtype whose trainings are predicted (the `plan`
 * prediction, harness/engine/memory_plan.h) to need more activation bytes than the limit is
 * refused before anything runs, with one line giving the predicted and the available bytes.
 */
#ifndef CK_MEMORY_LIMIT_H
#define CK_MEMORY_LIMIT_H

#include "harness/cli/case_files.h"
#include "harness/cli/cli_options.h"

/* Checks every training of one case x dtype (plain and checkpointed in `dtype`, and in fp32
 * too when with_fp32: the low-precision judgement's reference runs); returns CK_EXIT_PASS
 * when it fits or no limit is set, else prints one line and returns CK_EXIT_USAGE. */
int ck_cli_check_memory_limit(const ck_run_opts *o, const ck_loaded_case *c, ck_dtype dtype,
                              bool with_fp32);

#endif
