/* The SHA-256 of a file's bytes, for the run metadata (reports/SCHEMA.md). */
#ifndef CK_FILE_DIGEST_H
#define CK_FILE_DIGEST_H

#include "harness/core/status.h"

/* hex: 64 lowercase hex digits and a NUL. A directory or unreadable file is CK_ERR_IO. */
ck_status ck_sha256_file(const char *path, char hex[65], ck_error *err);

#endif
