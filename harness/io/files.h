/*
 * Files: directories, read-only mappings and atomic writes, shared by every reader and
 * writer (tensor files, JSON, reports, dumps).
 */
#ifndef CK_FILES_H
#define CK_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "harness/core/status.h"

/* Creates path and its missing parents (like mkdir -p); an existing directory is fine. */
ck_status ck_mkdir_p(const char *path, ck_error *err);

/* Maps path read-only. An empty file gives *p NULL and *len 0. Not a regular file, or
 * not readable: CK_ERR_IO naming path. Release with ck_unmap_file. */
ck_status ck_map_file(const char *path, void **p, size_t *len, ck_error *err);
void ck_unmap_file(void *p, size_t len);

/* An atomic file write: data goes to `<path>.tmp.<pid>` in the same directory, which is
 * flushed, fsync'd and renamed over path on commit, so a reader sees the old file or the
 * new one, never half of one. abort (or a failed commit) removes the temporary file. */
typedef struct {
    const char *path;
    char *tmp;
    void *f; /* FILE * */
    bool failed;
} ck_atomic_file;

ck_status ck_atomic_open(ck_atomic_file *af, const char *path, ck_error *err);
/* Writes len bytes; failures are remembered and reported by commit. */
void ck_atomic_write(ck_atomic_file *af, const void *data, size_t len);
ck_status ck_atomic_commit(ck_atomic_file *af, ck_error *err);
void ck_atomic_abort(ck_atomic_file *af);

/* Writes text and a newline to path with the atomic writer above: the one way a whole
 * text file (a report, a manifest) is written. */
ck_status ck_write_text_atomic(const char *path, const char *text, ck_error *err);

/* Reads a whole file into a malloc'd, NUL-terminated buffer (*len excludes the NUL).
 * More than max_bytes: CK_ERR_INPUT "<path>: file is larger than N bytes". */
ck_status ck_read_file(const char *path, size_t max_bytes, char **text, size_t *len,
                       ck_error *err);

/* A parser of a whole text file's bytes into obj (tolerance files, name maps). */
typedef ck_status (*ck_text_parse_fn)(void *obj, const char *text, size_t len, const char *path,
                                      ck_error *err);
/* Maps path read-only, hands its bytes to parse and unmaps it: the one way a small text
 * file is read and parsed. An empty file is parsed as "". */
ck_status ck_parse_file(const char *path, ck_text_parse_fn parse, void *obj, ck_error *err);

#endif
