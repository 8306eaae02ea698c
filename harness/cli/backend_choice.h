/*
 * Creating the backend a command asked for, and what the report takes from it.
 */
#ifndef CK_BACKEND_CHOICE_H
#define CK_BACKEND_CHOICE_H

#include <stdbool.h>

#include "backends/backend.h"
#include "harness/cli/cli_options.h"
#include "harness/model/graph.h"
#include "harness/verify/result.h"

/* Creates the named backend (NULL: cpu) through the registry; on failure prints one line
 * and returns false. */
bool ck_cli_create_backend(const char *name, int device, const char *algo, int threads,
                           ck_backend **out);
/* Copies the backend's algorithm records (a capability only the CUDA backend has) into
 * the result, with the policy the command asked for. */
void ck_cli_take_algo_records(ck_backend *b, const char *algo, ck_result *res);
/* Forgets the records between cases (no-op for backends without them). */
void ck_cli_clear_algo_records(ck_backend *b);
/* Asks the backend whether it has every layer of g in dtype before anything runs; prints
 * one line naming the first missing layer and returns CK_EXIT_USAGE, else CK_EXIT_PASS. */
int ck_cli_check_supported(ck_backend *b, const ck_graph *g, ck_dtype dtype);
/* The same question, quietly: false with the reason in err. */
bool ck_cli_supported(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_error *err);

#endif
