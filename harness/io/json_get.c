/*
 * Typed JSON getters with JSON paths in their messages (json_get.h): every check happens
 * before a conversion, and every message is one line "<file>: <jpath>: <what>".
 */
#include "harness/io/json_get.h"
#include "harness/io/json_syntax.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ck_find_name(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

/* ------------------------------------------------------------------------------------ */
/* Messages                                                                              */
/* ------------------------------------------------------------------------------------ */

ck_status ck_jfail(const ck_jctx *cx, const char *jpath, const char *fmt, ...)
{
    char what[CK_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ck_fail(cx->err, CK_ERR_INPUT, "%s: %s: %s", cx->path, jpath, what);
}

/* Copies user text into buf for a message: printable ASCII only (so the message stays
 * one line), quotes and backslashes replaced, long text cut with "...". */
const char *ck_jprintable(const char *s, char *buf, size_t n)
{
    const size_t shown = 40;
    size_t j = 0;
    for (size_t i = 0; s[i] && j + 4 < n; i++) {
        if (i == shown) {
            memcpy(buf + j, "...", 3);
            j += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        buf[j++] = (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') ? (char)ch : '?';
    }
    buf[j] = '\0';
    return buf;
}

const char *ck_json_type_name(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsArray(v))
        return "a list";
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v) ? "true" : "false";
    if (cJSON_IsNull(v))
        return "null";
    return "an invalid value";
}

const char *ck_jnumber_text(double x, char *buf, size_t n)
{
    if (!isfinite(x))
        snprintf(buf, n, "a number too large for a double");
    else
        snprintf(buf, n, "%.15g", x);
    return buf;
}

void ck_jpath_printf(char *dst, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, n, fmt, ap);
    va_end(ap);
}

/* jpath of a key under base: "base.key", or "key" at the top level. */
void ck_jpath_key(char *dst, size_t n, const char *base, const char *key)
{
    char k[64];
    ck_jprintable(key, k, sizeof k);
    if (base[0])
        ck_jpath_printf(dst, n, "%s.%s", base, k);
    else
        ck_jpath_printf(dst, n, "%s", k);
}

void ck_jpath_index(char *dst, size_t n, const char *base, int index)
{
    ck_jpath_printf(dst, n, "%s[%d]", base, index);
}

void ck_join_names(const char *const *names, int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", names[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Typed getters: every check happens before a conversion                                */
/* ------------------------------------------------------------------------------------ */

ck_status ck_jget_int(const ck_jctx *cx, const cJSON *v, const char *jpath, int64_t lo,
                         int64_t hi, int64_t *out)
{
    char want[64], got[64];
    if (lo == 1)
        snprintf(want, sizeof want, "a positive integer");
    else if (lo == 0)
        snprintf(want, sizeof want, "a non-negative integer");
    else
        snprintf(want, sizeof want, "an integer >= %lld", (long long)lo);
    if (!cJSON_IsNumber(v))
        return ck_jfail(cx, jpath, "must be %s, got %s", want, ck_json_type_name(v));
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x) || x < (double)lo) {
        if (isfinite(x) && x == floor(x) && x > (double)hi)
            return ck_jfail(cx, jpath, "must be at most %lld, got %s", (long long)hi,
                           ck_jnumber_text(x, got, sizeof got));
        return ck_jfail(cx, jpath, "must be %s, got %s", want, ck_jnumber_text(x, got, sizeof got));
    }
    if (x > (double)hi)
        return ck_jfail(cx, jpath, "must be at most %lld, got %s", (long long)hi,
                       ck_jnumber_text(x, got, sizeof got));
    *out = (int64_t)x;
    return CK_OK;
}

static void describe_range(const ck_real_range *r, char *buf, size_t n)
{
    if (isinf(r->lo) && isinf(r->hi))
        snprintf(buf, n, "a finite number");
    else if (isinf(r->hi))
        snprintf(buf, n, "a number %s %g", r->lo_open ? ">" : ">=", r->lo);
    else
        snprintf(buf, n, "a number in %c%g, %g%c", r->lo_open ? '(' : '[', r->lo, r->hi,
                 r->hi_open ? ')' : ']');
}

ck_status ck_jget_real(const ck_jctx *cx, const cJSON *v, const char *jpath,
                          const ck_real_range *r, double *out)
{
    char want[64], got[64];
    describe_range(r, want, sizeof want);
    if (!cJSON_IsNumber(v))
        return ck_jfail(cx, jpath, "must be %s, got %s", want, ck_json_type_name(v));
    double x = v->valuedouble;
    bool ok = isfinite(x) && (r->lo_open ? x > r->lo : x >= r->lo) &&
              (r->hi_open ? x < r->hi : x <= r->hi);
    if (!ok)
        return ck_jfail(cx, jpath, "must be %s, got %s", want, ck_jnumber_text(x, got, sizeof got));
    *out = x;
    return CK_OK;
}

ck_status ck_jget_bool(const ck_jctx *cx, const cJSON *v, const char *jpath, bool *out)
{
    if (!cJSON_IsBool(v))
        return ck_jfail(cx, jpath, "must be true or false, got %s", ck_json_type_name(v));
    *out = cJSON_IsTrue(v);
    return CK_OK;
}

ck_status ck_jget_string(const ck_jctx *cx, const cJSON *v, const char *jpath,
                            const char **out)
{
    if (!cJSON_IsString(v) || !v->valuestring)
        return ck_jfail(cx, jpath, "must be a string, got %s", ck_json_type_name(v));
    *out = v->valuestring;
    return CK_OK;
}

/* A string that must be one of names[]; *out is its index. */
ck_status ck_jget_choice(const ck_jctx *cx, const cJSON *v, const char *jpath,
                            const char *const *names, int n, int *out)
{
    char list[256], shown[64];
    const char *s;
    ck_join_names(names, n, list, sizeof list);
    if (!cJSON_IsString(v) || !v->valuestring)
        return ck_jfail(cx, jpath, "must be one of %s, got %s", list, ck_json_type_name(v));
    s = v->valuestring;
    int i = ck_find_name(names, n, s);
    if (i < 0)
        return ck_jfail(cx, jpath, "must be one of %s, got \"%s\"", list,
                       ck_jprintable(s, shown, sizeof shown));
    *out = i;
    return CK_OK;
}

ck_status ck_jget_object(const ck_jctx *cx, const cJSON *v, const char *jpath)
{
    if (!cJSON_IsObject(v))
        return ck_jfail(cx, jpath, "must be an object, got %s", ck_json_type_name(v));
    return CK_OK;
}

/* Rejects keys of obj not in allowed[]; `for_what` names the op in the message. */
ck_status ck_jcheck_keys(const ck_jctx *cx, const cJSON *obj, const char *jpath,
                            const char *const *allowed, int n_allowed, const char *for_what)
{
    for (const cJSON *child = obj->child; child; child = child->next) {
        if (ck_find_name(allowed, n_allowed, child->string) >= 0)
            continue;
        char list[512], kpath[CK_JPATH_MAX];
        ck_join_names(allowed, n_allowed, list, sizeof list);
        ck_jpath_key(kpath, sizeof kpath, jpath, child->string);
        return ck_jfail(cx, kpath, "unknown key%s%s (allowed: %s)", for_what ? " for " : "",
                       for_what ? for_what : "", list);
    }
    return CK_OK;
}

/* A name usable as a tensor and file name: 1..63 of [A-Za-z0-9_-]. */
bool ck_valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > CK_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        if (!ok)
            return false;
    }
    return true;
}

ck_status ck_jget_name(const ck_jctx *cx, const cJSON *v, const char *jpath,
                          const char **out)
{
    char shown[64];
    ck_status st = ck_jget_string(cx, v, jpath, out);
    if (st != CK_OK)
        return st;
    if (!ck_valid_name(*out))
        return ck_jfail(cx, jpath,
                       "must be 1 to %d characters from A-Z a-z 0-9 _ -, got \"%s\"",
                       CK_NAME_MAX, ck_jprintable(*out, shown, sizeof shown));
    return CK_OK;
}

/* ------------------------------------------------------------------------------------ */
/* The document: syntax, trailing text, duplicate keys                                   */
/* ------------------------------------------------------------------------------------ */

static bool is_json_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static bool only_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_json_space(s[i]))
            return false;
    return true;
}

static ck_status jfail_at_offset(const ck_jctx *cx, const char *text, size_t len,
                                size_t offset, const char *what)
{
    size_t line = 1, column = 1;
    if (offset > len)
        offset = len;
    for (size_t i = 0; i < offset; i++) {
        if (text[i] == '\n') {
            line++;
            column = 1;
        } else {
            column++;
        }
    }
    /* A short excerpt of what the parser stopped at, up to the end of that line. */
    char near[24], shown[64];
    size_t k = 0;
    for (size_t i = offset; i < len && k + 1 < sizeof near && text[i] != '\n'; i++)
        near[k++] = text[i] ? text[i] : '?';
    near[k] = '\0';
    return ck_fail(cx->err, CK_ERR_INPUT, "%s: line %zu, column %zu: %s%s%s%s", cx->path, line,
                   column, what, k ? " near \"" : " at the end of the text",
                   k ? ck_jprintable(near, shown, sizeof shown) : "", k ? "\"" : "");
}

ck_status ck_jparse_document(const ck_jctx *cx, const char *text, size_t len,
                                cJSON **root)
{
    const char *end = NULL;
    *root = NULL;
    if (!text || only_space(text, len))
        return ck_fail(cx->err, CK_ERR_INPUT, "%s: empty file", cx->path);
    /* the one syntax gate (json_strict.c): strict UTF-8, no NUL, no raw control character
     * in a string, no leading garbage, numbers as JSON writes them */
    size_t bad_at = 0;
    const char *why = NULL;
    if (!ck_json_syntax_ok(text, len, &bad_at, &why))
        return jfail_at_offset(cx, text, len, bad_at, why);
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!doc) {
        size_t offset = (end && end >= text) ? (size_t)(end - text) : 0;
        return jfail_at_offset(cx, text, len, offset, "malformed JSON");
    }
    size_t consumed = (end && end >= text) ? (size_t)(end - text) : len;
    if (consumed < len && !only_space(text + consumed, len - consumed)) {
        cJSON_Delete(doc);
        size_t offset = consumed;
        while (offset < len && is_json_space(text[offset]))
            offset++;
        return jfail_at_offset(cx, text, len, offset, "unexpected text after the JSON value");
    }
    *root = doc;
    return CK_OK;
}

typedef struct {
    const char *key;
    int index;
} keyed_child;

static int compare_keyed_child(const void *a, const void *b)
{
    const keyed_child *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    return (x->index > y->index) - (x->index < y->index);
}

/* The one duplicate-key walker (case files here, strict JSON in json_strict.c): objects
 * depth first, each object's own keys before its children. Sorting keeps huge objects
 * from costing n^2. On a duplicate, where (when not NULL) receives its JSON path under
 * jpath and *dup the key; *oom is set when memory ran out. */
static bool find_duplicate(const cJSON *node, const char *jpath, char *where, size_t n_where,
                           const char **dup, bool *oom)
{
    char child_path[CK_JPATH_MAX] = "";
    if (cJSON_IsObject(node)) {
        int n = 0;
        for (const cJSON *c = node->child; c; c = c->next)
            n++;
        if (n > 1) {
            keyed_child *keys = malloc((size_t)n * sizeof *keys);
            if (!keys) {
                *oom = true;
                return false;
            }
            int i = 0;
            for (const cJSON *c = node->child; c; c = c->next, i++) {
                keys[i].key = c->string ? c->string : "";
                keys[i].index = i;
            }
            qsort(keys, (size_t)n, sizeof *keys, compare_keyed_child);
            for (i = 1; i < n; i++) {
                if (strcmp(keys[i - 1].key, keys[i].key) == 0) {
                    *dup = keys[i].key;
                    if (where)
                        ck_jpath_key(where, n_where, jpath, keys[i].key);
                    free(keys);
                    return true;
                }
            }
            free(keys);
        }
        for (const cJSON *c = node->child; c; c = c->next) {
            if (where)
                ck_jpath_key(child_path, sizeof child_path, jpath, c->string ? c->string : "");
            if (find_duplicate(c, child_path, where, n_where, dup, oom) || *oom)
                return !*oom;
        }
    } else if (cJSON_IsArray(node)) {
        int i = 0;
        for (const cJSON *c = node->child; c; c = c->next, i++) {
            if (!cJSON_IsObject(c) && !cJSON_IsArray(c))
                continue;
            if (where)
                ck_jpath_index(child_path, sizeof child_path, jpath, i);
            if (find_duplicate(c, child_path, where, n_where, dup, oom) || *oom)
                return !*oom;
        }
    }
    return false;
}

ck_status ck_jcheck_duplicate_keys(const ck_jctx *cx, const cJSON *node, const char *jpath)
{
    char where[CK_JPATH_MAX];
    const char *dup = NULL;
    bool oom = false;
    if (find_duplicate(node, jpath, where, sizeof where, &dup, &oom))
        return ck_jfail(cx, where, "duplicate key");
    if (oom)
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    return CK_OK;
}

bool ck_json_has_duplicate(const cJSON *node, const char **dup, bool *oom)
{
    *dup = NULL;
    *oom = false;
    return find_duplicate(node, "", NULL, 0, dup, oom);
}
