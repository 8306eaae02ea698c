/*
 * Case files for the subcommands: expanding paths, and loading and building every case
 * (with the command line's overrides) before any run.
 */
#ifndef CK_CASE_FILES_H
#define CK_CASE_FILES_H

#include <stdbool.h>

#include "harness/cli/cli_options.h"
#include "harness/model/graph.h"

typedef struct {
    ck_case cs;
    ck_graph g;
    bool loaded, built;
    char *file;  /* the case file as found */
    char *error; /* --keep-going: why it did not load (then !built) */
    char *tmp_weights; /* an imported ONNX model's weights (removed when freed) */
    int tmp_slot;      /* its signal-cleanup slot (files.h), -1 when none */
} ck_loaded_case;

/* Expands files and directories (their *.json, sorted) into a list of case files. A .json
 * file in a directory that holds a JSON object with neither `layers` nor `input` (a
 * tolerance file, a name map) is not a case: it is left out with a notice on stderr. */
ck_status ck_collect_case_files(const char **paths, int n_paths, char ***out, int *n_out,
                                ck_error *err);
void ck_free_case_files(char **files, int n);

/* Loads and builds every case (ov: the command line's overrides, may be NULL); prints one
 * line per bad case on stderr and returns CK_EXIT_USAGE when any is bad, else CK_EXIT_PASS
 * with *out (free with ck_cli_free_cases). */
int ck_cli_load_cases(const char **paths, int n_paths, const ck_run_opts *ov,
                      ck_loaded_case **out, int *n_out);
void ck_cli_free_cases(ck_loaded_case *lc, int n);
/* The same; with keep_going a case that does not load or build is kept with its message in
 * .error (printed on stderr too) instead of stopping the command. */
int ck_cli_load_cases_ex(const char **paths, int n_paths, const ck_run_opts *ov, bool keep_going,
                         ck_loaded_case **out, int *n_out);

/* Whether s ends with suffix. */
bool ck_cli_ends_with(const char *s, const char *suffix);

#endif
