/* Status strings and error formatting. */
#include "harness/core/status.h"
#include "harness/core/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ck_status_str(ck_status s)
{
    switch (s) {
    case CK_OK: return "ok";
    case CK_ERR_INPUT: return "bad input";
    case CK_ERR_IO: return "i/o error";
    case CK_ERR_NOMEM: return "out of memory";
    case CK_ERR_BACKEND: return "backend error";
    case CK_ERR_UNSUPPORTED: return "unsupported";
    case CK_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

ck_status ck_fail(ck_error *err, ck_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

void ck_error_prefix(ck_error *err, const char *fmt, ...)
{
    if (!err)
        return;
    char prefix[CK_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t plen = strlen(prefix);
    if (plen + 2 >= sizeof err->msg)
        plen = sizeof err->msg - 3;
    size_t olen = strnlen(err->msg, sizeof err->msg - 1);
    size_t keep = sizeof err->msg - 1 - plen - 2;
    if (olen > keep)
        olen = keep;
    memmove(err->msg + plen + 2, err->msg, olen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen] = ':';
    err->msg[plen + 1] = ' ';
    err->msg[plen + 2 + olen] = '\0';
}

ck_status ck_error_one_line(ck_error *err, ck_status status)
{
    if (!err || status == CK_OK)
        return status;
    char out[CK_ERROR_MAX];
    ck_text_escape(err->msg, out, sizeof out);
    memcpy(err->msg, out, strlen(out) + 1);
    return status;
}
