/*
 * The subcommands behind the CLI. main.c parses arguments into the option structs of
 * cli_options.h and calls one function; everything else (loading cases, running, printing, writing reports)
 * happens here. Each returns the process exit code: 0 passed, 1 a mismatch / unmet
 * expectation / unmet memory saving / failed gradient check, 2 bad input or usage.
 */
#ifndef CK_COMMANDS_H
#define CK_COMMANDS_H

#include "harness/cli/cli_options.h"

/* `merge`: one summary of several report folders (shards, runners). */
int ck_cmd_merge(const ck_merge_opts *o);

int ck_cmd_run(const ck_run_opts *o);
/* `bisect`: run, then noise floor, segment search, layer localisation and causes. */
int ck_cmd_bisect(const ck_run_opts *o);
int ck_cmd_gradcheck(const ck_gradcheck_cmd_opts *o);
/* Lists ops and their options, and the cases found under cases_dir. */
int ck_cmd_list(const char *cases_dir);
/* `list --markdown`: every op's option table (op_def.h, ck_op_options_markdown). */
int ck_cmd_list_markdown(void);

#endif
