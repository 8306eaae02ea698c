/* The strict binary encoding (wire.h). */
#include "harness/io/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ck_wire_put_bytes(ck_wire_out *w, const void *p, size_t n)
{
    if (w->failed || n == 0)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 1024;
        while (cap < w->len + n)
            cap *= 2;
        unsigned char *nb = realloc(w->buf, cap);
        if (!nb) {
            w->failed = true;
            return;
        }
        w->buf = nb;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

void ck_wire_put_u8(ck_wire_out *w, uint8_t v)
{
    ck_wire_put_bytes(w, &v, 1);
}

void ck_wire_put_u32(ck_wire_out *w, uint32_t v)
{
    unsigned char b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    ck_wire_put_bytes(w, b, 4);
}

void ck_wire_put_i64(ck_wire_out *w, int64_t v)
{
    uint64_t u = (uint64_t)v;
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(u >> (8 * i));
    ck_wire_put_bytes(w, b, 8);
}

void ck_wire_put_f64(ck_wire_out *w, double v)
{
    int64_t bits;
    memcpy(&bits, &v, sizeof bits);
    ck_wire_put_i64(w, bits);
}

void ck_wire_put_str(ck_wire_out *w, const char *s)
{
    ck_wire_put_u8(w, s != NULL);
    if (!s)
        return;
    size_t n = strlen(s);
    if (n > UINT32_MAX) {
        w->failed = true;
        return;
    }
    ck_wire_put_u32(w, (uint32_t)n);
    ck_wire_put_bytes(w, s, n);
}

void ck_wire_in_init(ck_wire_in *r, const void *p, size_t n)
{
    memset(r, 0, sizeof *r);
    r->p = p;
    r->n = n;
}

void ck_wire_fail(ck_wire_in *r, const char *what, const char *why)
{
    if (r->failed)
        return;
    r->failed = true;
    snprintf(r->why, sizeof r->why, "%s: %s (byte %zu)", what, why, r->off);
}

bool ck_wire_get_bytes(ck_wire_in *r, void *out, size_t n, const char *what)
{
    if (r->failed || n > r->n - r->off) {
        ck_wire_fail(r, what, "the data ends early");
        memset(out, 0, n);
        return false;
    }
    memcpy(out, r->p + r->off, n);
    r->off += n;
    return true;
}

uint8_t ck_wire_get_u8(ck_wire_in *r, const char *what)
{
    uint8_t v;
    ck_wire_get_bytes(r, &v, 1, what);
    return v;
}

uint32_t ck_wire_get_u32(ck_wire_in *r, const char *what)
{
    unsigned char b[4];
    ck_wire_get_bytes(r, b, 4, what);
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)b[i] << (8 * i);
    return v;
}

int64_t ck_wire_get_i64(ck_wire_in *r, const char *what)
{
    unsigned char b[8];
    ck_wire_get_bytes(r, b, 8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return (int64_t)v;
}

double ck_wire_get_f64(ck_wire_in *r, const char *what)
{
    int64_t bits = ck_wire_get_i64(r, what);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

bool ck_wire_get_bool(ck_wire_in *r, const char *what)
{
    uint8_t v = ck_wire_get_u8(r, what);
    if (v > 1) {
        ck_wire_fail(r, what, "not a boolean");
        return false;
    }
    return v == 1;
}

int64_t ck_wire_get_range(ck_wire_in *r, int64_t lo, int64_t hi, const char *what)
{
    int64_t v = ck_wire_get_i64(r, what);
    if (r->failed)
        return lo < 0 && hi >= 0 ? 0 : lo;
    if (v < lo || v > hi) {
        ck_wire_fail(r, what, "out of range");
        return lo < 0 && hi >= 0 ? 0 : lo;
    }
    return v;
}

int64_t ck_wire_get_count(ck_wire_in *r, int64_t max, size_t min_bytes, const char *what)
{
    int64_t n = ck_wire_get_range(r, 0, max, what);
    if (!r->failed && min_bytes > 0 && (uint64_t)n > (r->n - r->off) / min_bytes) {
        ck_wire_fail(r, what, "more elements than the data holds");
        return 0;
    }
    return r->failed ? 0 : n;
}

char *ck_wire_get_str(ck_wire_in *r, size_t max, bool *present, const char *what)
{
    bool here = ck_wire_get_bool(r, what);
    if (present)
        *present = here && !r->failed;
    if (!here || r->failed)
        return NULL;
    uint32_t n = ck_wire_get_u32(r, what);
    if (r->failed)
        return NULL;
    if (n > max || n > r->n - r->off) {
        ck_wire_fail(r, what, n > max ? "string too long" : "the data ends early");
        return NULL;
    }
    if (memchr(r->p + r->off, '\0', n)) {
        ck_wire_fail(r, what, "a NUL byte inside a string");
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        ck_wire_fail(r, what, "out of memory");
        return NULL;
    }
    memcpy(s, r->p + r->off, n);
    s[n] = '\0';
    r->off += n;
    return s;
}

void ck_wire_get_str_to(ck_wire_in *r, char *dst, size_t cap, const char *what)
{
    bool present = false;
    char *s = ck_wire_get_str(r, cap - 1, &present, what);
    if (!present && !r->failed)
        ck_wire_fail(r, what, "missing");
    snprintf(dst, cap, "%s", s ? s : "");
    free(s);
}

bool ck_wire_done(ck_wire_in *r)
{
    if (!r->failed && r->off != r->n)
        ck_wire_fail(r, "the end", "trailing bytes");
    return !r->failed;
}
