/* Strict JSON parsing and exact number helpers (see json_strict.h). */
#include "harness/io/json_strict.h"
#include "harness/core/text.h"
#include "harness/io/json_get.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* "\u0000" would end a key or string early in cJSON's C strings, so two different names
 * could collide. Scans string literals only, honouring escapes. */
static bool has_nul_escape(const char *s, size_t n)
{
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        if (!in_string) {
            if (s[i] == '"')
                in_string = true;
            continue;
        }
        if (s[i] == '"') {
            in_string = false;
        } else if (s[i] == '\\' && i + 1 < n) {
            if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0)
                return true;
            i++; /* skip the escaped character */
        }
    }
    return false;
}

ck_status ck_json_parse_strict(const char *text, size_t len, const char *path, const char *what,
                               cJSON **root, ck_error *err)
{
    const char *sep = what ? ": " : "";
    what = what ? what : "";
    *root = NULL;
    if (len == 0)
        return ck_fail(err, CK_ERR_INPUT, "%s%s%s: empty", path, sep, what);
    if (memchr(text, '\0', len))
        return ck_fail(err, CK_ERR_INPUT, "%s%s%s: contains a NUL byte", path, sep, what);
    if (!ck_utf8_valid(text, len))
        return ck_fail(err, CK_ERR_INPUT, "%s%s%s: not valid UTF-8", path, sep, what);
    if (has_nul_escape(text, len))
        return ck_fail(err, CK_ERR_INPUT, "%s%s%s: a string holds \\u0000", path, sep, what);

    /* A NUL-terminated copy: cJSON's number parser reads up to a terminator, so it is
     * never handed bytes that merely happen to follow the header in a mapping. */
    char *copy = malloc(len + 1);
    if (!copy)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
    memcpy(copy, text, len);
    copy[len] = '\0';
    text = copy;
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!doc) {
        size_t off = (end && end >= text && end <= text + len) ? (size_t)(end - text) : 0;
        free(copy);
        return ck_fail(err, CK_ERR_INPUT, "%s%s%s: malformed JSON near byte %zu", path, sep, what,
                       off);
    }
    size_t used = (end && end >= text && end <= text + len) ? (size_t)(end - text) : len;
    for (size_t i = used; i < len; i++) {
        if (!is_space(text[i])) {
            free(copy);
            cJSON_Delete(doc);
            return ck_fail(err, CK_ERR_INPUT,
                           "%s%s%s: unexpected text after the JSON value at byte %zu", path, sep,
                           what, i);
        }
    }
    free(copy);
    bool oom = false;
    const char *dup = NULL;
    if (ck_json_has_duplicate(doc, &dup, &oom) || oom) {
        ck_status st = oom ? ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path)
                           : ck_fail(err, CK_ERR_INPUT, "%s%s%s: duplicate key \"%.200s\"", path,
                                     sep, what, dup);
        cJSON_Delete(doc);
        return st;
    }
    *root = doc;
    return CK_OK;
}

bool ck_json_uint(const cJSON *v, uint64_t max, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    const double limit = 9007199254740992.0; /* 2^53 */
    if (!(d >= 0.0) || d > limit || d != floor(d) || d > (double)max)
        return false;
    *out = (uint64_t)d;
    return true;
}

char *ck_json_quote(const char *s)
{
    size_t n = strlen(s), cap = n * 6 + 3;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    size_t k = 0;
    out[k++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            out[k++] = '\\';
            out[k++] = (char)*p;
        } else if (*p < 0x20) {
            k += (size_t)snprintf(out + k, cap - k, "\\u%04x", *p);
        } else {
            out[k++] = (char)*p;
        }
    }
    out[k++] = '"';
    out[k] = '\0';
    return out;
}

void ck_json_real_text(double v, char *buf, size_t n)
{
    if (isnan(v)) {
        snprintf(buf, n, "\"NaN\"");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
}
