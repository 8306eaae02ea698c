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

/* The one way an input file is opened: read-only and non-blocking (a FIFO never blocks
 * the open), then fstat'd; anything but a regular file is refused with one line
 * ("<path>: not a regular file (a FIFO)"). On success *fd is open (blocking again) and
 * *size holds the file's size. While input tracking is on (ck_inputs_track), the file is
 * remembered as an input of this run, which the atomic writer then refuses to replace. */
ck_status ck_open_input(const char *path, int *fd, size_t *size, ck_error *err);

/* Input tracking: the commands turn it on before reading anything, so that every file
 * opened with ck_open_input is recorded (device and inode) and no output replaces it.
 * ck_inputs_reset forgets every recorded input and turns tracking off. */
void ck_inputs_track(bool on);
void ck_inputs_reset(void);
/* Records path (when it exists) as an input even when tracking is off. */
ck_status ck_input_register(const char *path, ck_error *err);

/* Whether a file may be written at path by the atomic writer, checked before any work
 * starts and again by ck_atomic_open: the path is not empty, its directory exists and is
 * writable, and path is missing or a regular file that is no input of this run.
 * what names the option in the message ("--report"); NULL leaves it out. */
ck_status ck_output_file_check(const char *path, const char *what, ck_error *err);

/* Whether dir can receive a dump: not empty as a path, and missing or an empty folder
 * (a non-empty one would mix old files with the new ones; it is refused, never cleaned). */
ck_status ck_output_dir_check(const char *dir, const char *what, ck_error *err);

/* Maps path read-only (opened with ck_open_input). An empty file gives *p NULL and *len 0.
 * Not a regular file, or not readable: CK_ERR_IO naming path. Release with ck_unmap_file. */
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
    int slot; /* the signal-cleanup slot holding tmp, or -1 */
} ck_atomic_file;

/* Refuses (CK_ERR_IO, nothing written) when ck_output_file_check refuses path: the writer
 * never replaces a device, FIFO, folder or any input of the run. */
ck_status ck_atomic_open(ck_atomic_file *af, const char *path, ck_error *err);
/* Writes len bytes; failures are remembered and reported by commit. */
void ck_atomic_write(ck_atomic_file *af, const void *data, size_t len);
ck_status ck_atomic_commit(ck_atomic_file *af, ck_error *err);
void ck_atomic_abort(ck_atomic_file *af);

/* Removes every temporary file an atomic write has open; async-signal-safe (only
 * unlink(2) on paths stored in static buffers), for the CLI's SIGINT/SIGTERM handler. */
void ck_atomic_cleanup_on_signal(void);

/* A temporary file that lives longer than one write (run MODEL.onnx's weights): removed by
 * ck_atomic_cleanup_on_signal too until released. Returns the slot, or -1 when none is
 * free or the path is too long (the caller then refuses to go on). */
int ck_temp_file_register(const char *path);
void ck_temp_file_release(int slot);

/* Whether the output paths a and b name the same file, whatever their spelling: the same
 * existing file (device and inode), or the same name in the same existing directory. */
bool ck_same_output_file(const char *a, const char *b);

/* Test hook: called right after the temporary file is created (NULL: none). */
extern void (*ck_atomic_after_open_hook)(const char *tmp_path);

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
