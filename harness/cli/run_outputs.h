/*
 * The outputs of a whole command that CI reads (docs/ci.md): summary.json in the report
 * folder, --junit, --html, and under GitHub Actions the annotations and the step summary.
 */
#ifndef CK_RUN_OUTPUTS_H
#define CK_RUN_OUTPUTS_H

#include <stdbool.h>

#include "reports/run_set.h"

/* Checks, before any work, every file ck_cli_write_run_outputs would write: summary.json in
 * report_dir, junit, html, and the step summary under GitHub Actions (each may be NULL or
 * unset) — each must be writable and no input of the command. One line and CK_EXIT_USAGE
 * for the first that is not, else CK_EXIT_PASS. */
int ck_cli_check_run_outputs(const char *report_dir, const char *junit, const char *html);

/* report_dir, junit, html may each be NULL. Annotations and the step summary are written
 * when the environment has GITHUB_ACTIONS=true (and GITHUB_STEP_SUMMARY). Prints one line
 * per file that cannot be written and returns CK_EXIT_USAGE then, else CK_EXIT_PASS. */
int ck_cli_write_run_outputs(const ck_run_set *set, const char *report_dir, const char *junit,
                             const char *html, bool quiet);

#endif
