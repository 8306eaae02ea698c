/*
 * `import --check-against REF` (harness/verify/faithful.h): before anything is written,
 * the imported case runs one plain fp32 step on the framework's input and is compared with
 * the framework's output, loss and gradients; an import that differs is refused.
 */
#ifndef CK_IMPORT_CHECK_H
#define CK_IMPORT_CHECK_H

#include <cjson/cJSON.h>

#include "harness/io/tensorset.h"
#include "harness/model/onnx_import.h"

/* Checks the imported case `root` with its weights w against the reference file ref_path.
 * On a match, *summary (malloc'd) says exactly what was compared; on a difference,
 * CK_ERR_INPUT with one line saying why and what was compared. */
ck_status ck_cli_import_check(const cJSON *root, const ck_tensorset *w,
                              const ck_onnx_origins *origins, const char *model_path,
                              const char *ref_path, char **summary, ck_error *err);

#endif
