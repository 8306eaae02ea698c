/*
 * Typed JSON getters with JSON paths: what every reader of a user-written JSON file (case
 * files, and through them tolerance and init settings) uses to check a value before it
 * converts it. cJSON numbers are doubles, so 2.5, -1 or 1e300 must be refused before they
 * reach an integer; keys must be known; names must be usable as file and tensor names.
 *
 * Every failure is CK_ERR_INPUT with one line "<file>: <jpath>: <what>", where jpath is
 * the JSON path the user can find in the file, e.g. "layers[3].kernel".
 */
#ifndef CK_JSON_GET_H
#define CK_JSON_GET_H

#include <stdbool.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "harness/core/status.h"

/* Room for a JSON path in a message; longer paths are cut. */
#define CK_JPATH_MAX 256
/* Names (layers, tensors, cases) are 1..CK_NAME_MAX of [A-Za-z0-9_-]. */
#define CK_NAME_MAX 63

/* The file being read: its path starts every message, and failures go to err. */
typedef struct {
    const char *path;
    ck_error *err;
} ck_jctx;

/* An interval for ck_jget_real; infinite ends are unbounded. */
typedef struct {
    double lo, hi;
    bool lo_open, hi_open;
} ck_real_range;

/* Common intervals. */
#define CK_RANGE_ANY_FINITE {-INFINITY, INFINITY, false, false}
#define CK_RANGE_NON_NEGATIVE {0.0, INFINITY, false, false}
#define CK_RANGE_POSITIVE {0.0, INFINITY, true, false}
#define CK_RANGE_UNIT_CLOSED {0.0, 1.0, false, false}
#define CK_RANGE_UNIT_HALF_OPEN {0.0, 1.0, false, true}

/* "<file>: <jpath>: <what>" as one line; returns CK_ERR_INPUT. */
ck_status ck_jfail(const ck_jctx *cx, const char *jpath, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- text for messages ---- */
/* User text for a message: printable ASCII only (quotes, backslashes and control bytes
 * become '?'), cut after 40 characters with "..."; returns buf. */
const char *ck_jprintable(const char *s, char *buf, size_t n);
/* "a string", "a number", "a list", "an object", "true", "false", "null". */
const char *ck_json_type_name(const cJSON *v);
/* A number as a message shows it (%.15g), or "a number too large for a double". */
const char *ck_jnumber_text(double x, char *buf, size_t n);
/* "base.key" ("key" at the top level) and "base[index]". */
void ck_jpath_key(char *dst, size_t n, const char *base, const char *key);
void ck_jpath_index(char *dst, size_t n, const char *base, int index);
/* printf into a JSON-path buffer; cut when it does not fit (it only feeds messages). */
void ck_jpath_printf(char *dst, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "a, b, c" into buf (cut when it does not fit). */
void ck_join_names(const char *const *names, int n, char *buf, size_t size);
/* Index of s in names[0..n), or -1. */
int ck_find_name(const char *const *names, int n, const char *s);

/* ---- typed getters: each checks type, integrality and range before converting ---- */
ck_status ck_jget_int(const ck_jctx *cx, const cJSON *v, const char *jpath, int64_t lo,
                      int64_t hi, int64_t *out);
ck_status ck_jget_real(const ck_jctx *cx, const cJSON *v, const char *jpath,
                       const ck_real_range *r, double *out);
ck_status ck_jget_bool(const ck_jctx *cx, const cJSON *v, const char *jpath, bool *out);
ck_status ck_jget_string(const ck_jctx *cx, const cJSON *v, const char *jpath,
                         const char **out);
/* A string that must be one of names[0..n); *out is its index. */
ck_status ck_jget_choice(const ck_jctx *cx, const cJSON *v, const char *jpath,
                         const char *const *names, int n, int *out);
ck_status ck_jget_object(const ck_jctx *cx, const cJSON *v, const char *jpath);
/* Refuses keys of obj not in allowed[]; for_what (may be NULL) names the op. */
ck_status ck_jcheck_keys(const ck_jctx *cx, const cJSON *obj, const char *jpath,
                         const char *const *allowed, int n_allowed, const char *for_what);
/* 1..CK_NAME_MAX characters of [A-Za-z0-9_-]. */
bool ck_valid_name(const char *s);
ck_status ck_jget_name(const ck_jctx *cx, const cJSON *v, const char *jpath, const char **out);

/* ---- the document ---- */
/* Parses len bytes as one JSON value; malformed text and trailing text are reported with
 * line and column ("<file>: line 3, column 7: malformed JSON near \"...\""). */
ck_status ck_jparse_document(const ck_jctx *cx, const char *text, size_t len, cJSON **root);
/* cJSON keeps every duplicate key, and a lookup silently takes the first: walks the whole
 * tree and fails with "<file>: <jpath of the second>: duplicate key". */
ck_status ck_jcheck_duplicate_keys(const ck_jctx *cx, const cJSON *node, const char *jpath);
/* The same walk without a context: true when some object holds a key twice; *dup is that
 * key. *oom is set when memory ran out (then the answer is false). */
bool ck_json_has_duplicate(const cJSON *node, const char **dup, bool *oom);

#endif
