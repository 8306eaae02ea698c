/*
 * Status codes and error context shared by every module.
 *
 * Library code never prints and never exits: it returns a ck_status and, on failure,
 * fills a ck_error with one line that names the thing the user wrote (file, JSON path,
 * layer, tensor). Only main.c turns that into output and an exit code.
 */
#ifndef CK_STATUS_H
#define CK_STATUS_H

#include <stddef.h>

typedef enum {
    CK_OK = 0,
    CK_ERR_INPUT,       /* bad case file, bad argument, bad tensor file: exit code 2 */
    CK_ERR_IO,          /* could not read or write a file: exit code 2 */
    CK_ERR_NOMEM,       /* allocation failed */
    CK_ERR_BACKEND,     /* a backend call failed (e.g. CUDA error) */
    CK_ERR_UNSUPPORTED, /* op/dtype combination a backend does not implement */
    CK_ERR_INTERNAL     /* a bug: an invariant did not hold */
} ck_status;

#define CK_ERROR_MAX 1024

typedef struct {
    char msg[CK_ERROR_MAX];
} ck_error;

const char *ck_status_str(ck_status s);

/* Evaluates a ck_status expression and returns it from the calling function when it is not
 * CK_OK: the one early-return macro (for functions that own nothing yet; code that holds
 * resources keeps its single cleanup label). */
#define CK_TRY(expr)                                                                       \
    do {                                                                                   \
        ck_status ck_try_status_ = (expr);                                                 \
        if (ck_try_status_ != CK_OK)                                                       \
            return ck_try_status_;                                                         \
    } while (0)

/* Formats a message into err (if err is not NULL) and returns status. */
ck_status ck_fail(ck_error *err, ck_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message (used to add file or layer context). */
void ck_error_prefix(ck_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Keeps err's message on one line: control characters a file smuggled in (a tensor or
 * member name with a newline) are written as \n, \t or \xNN; the message is cut if it
 * no longer fits. Every reader calls it on failure. Returns status. */
ck_status ck_error_one_line(ck_error *err, ck_status status);

#endif
