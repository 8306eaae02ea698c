/*
 * safetensors: an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * then the data, each tensor's bytes at [begin, end) of the data area.
 *
 * The reader refuses, with one line naming the file and the tensor or header field:
 * a file shorter than 8 bytes; N above CK_ST_MAX_HEADER (as the reference reader) or past
 * the end of the file; a header that is not UTF-8, holds a NUL, is not one JSON object,
 * or repeats a key; an entry with unknown or missing fields, an unknown dtype, a shape
 * that is not a list of at most CK_MAX_DIMS non-negative integers; offsets that are not
 * contiguous from 0 (gaps or overlaps), a size that is not shape x dtype size (computed
 * with overflow checks), and bytes after the last tensor. "__metadata__" must map strings
 * to strings.
 */
#ifndef CK_SAFETENSORS_H
#define CK_SAFETENSORS_H

#include "harness/io/tensorset.h"

#define CK_ST_MAX_HEADER 100000000u

/* Parses len bytes at buf (path names it in messages) into out (initialised here, left
 * empty on failure). Tensor data points into buf, in data-offset order; the caller keeps
 * buf alive as long as out. */
ck_status ck_safetensors_parse(const void *buf, size_t len, const char *path, ck_tensorset *out,
                               ck_error *err);

/* Maps path and parses it; the mapping belongs to out. */
ck_status ck_safetensors_load(const char *path, ck_tensorset *out, ck_error *err);

/* The header for n tensors laid out in the given order (8-byte length included, JSON
 * padded with spaces to a multiple of 8 bytes as the reference writer does), malloc'd.
 * Names must be unique, non-empty, valid UTF-8 and not "__metadata__"; shapes valid. */
ck_status ck_safetensors_header(int n, const ck_named_tensor *t, char **hdr, size_t *hdr_len,
                                ck_error *err);

/* Writes n tensors (host data) to path atomically (temporary file, fsync, rename). */
ck_status ck_safetensors_write(const char *path, int n, const ck_named_tensor *t, ck_error *err);

#endif
