/*
 * Importing ONNX models: the `import` subcommand, and the import `run MODEL.onnx` does
 * before it runs (harness/model/onnx_import.h maps the graph).
 */
#ifndef CK_CMD_IMPORT_H
#define CK_CMD_IMPORT_H

#include "harness/model/case.h"
#include "harness/model/onnx_import.h"

/* `ckpt-harness import ...` (argv[0] is "import"); returns the exit code. */
int ck_main_import(int argc, char **argv);

/* --class-dim D (-CK_MAX_DIMS <= D < CK_MAX_DIMS) and --ignore-index I (32-bit), for
 * `import` and `run MODEL.onnx`: false on a bad value. */
bool ck_cli_parse_class_dim(const char *arg, int *out);
bool ck_cli_parse_ignore_index(const char *arg, long long *out);

/* Imports onnx_path into a parsed case whose init.from is a temporary safetensors file of
 * the model's weights in $TMPDIR (or /tmp): *tmp_weights, which the caller unlinks, frees
 * and releases (ck_temp_file_release(*tmp_slot)) after the run; until then a signal's
 * cleanup removes it. The case's graph is built with the weights' shapes first. */
ck_status ck_cli_import_case(const char *onnx_path, const ck_onnx_import_opts *io, ck_case *cs,
                             char **tmp_weights, int *tmp_slot, ck_error *err);

#endif
