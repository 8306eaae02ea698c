/*
 * A compact, strict binary encoding for passing typed results between the processes of
 * one program (run --jobs): little-endian fixed-width integers, doubles as their IEEE-754
 * bits, strings as a u32 length and their bytes. The reader never trusts the bytes: every
 * read is bounds-checked, a count is checked against what is left before anything is
 * allocated, booleans must be 0 or 1, and the first failure sticks (later reads return
 * zeros) with a message naming what was being read.
 */
#ifndef CK_WIRE_H
#define CK_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    unsigned char *buf; /* malloc'd; the caller frees it */
    size_t len, cap;
    bool failed;        /* out of memory */
} ck_wire_out;

void ck_wire_put_bytes(ck_wire_out *w, const void *p, size_t n);
void ck_wire_put_u8(ck_wire_out *w, uint8_t v);
void ck_wire_put_u32(ck_wire_out *w, uint32_t v);
void ck_wire_put_i64(ck_wire_out *w, int64_t v);
void ck_wire_put_f64(ck_wire_out *w, double v);
/* NULL is written apart from "" (a presence byte first). */
void ck_wire_put_str(ck_wire_out *w, const char *s);

typedef struct {
    const unsigned char *p;
    size_t n, off;
    bool failed;
    char why[160]; /* the first failure */
} ck_wire_in;

void ck_wire_in_init(ck_wire_in *r, const void *p, size_t n);
/* Marks the reader failed (the first call wins): "<what>: <why>". */
void ck_wire_fail(ck_wire_in *r, const char *what, const char *why);
bool ck_wire_get_bytes(ck_wire_in *r, void *out, size_t n, const char *what);
uint8_t ck_wire_get_u8(ck_wire_in *r, const char *what);
uint32_t ck_wire_get_u32(ck_wire_in *r, const char *what);
int64_t ck_wire_get_i64(ck_wire_in *r, const char *what);
double ck_wire_get_f64(ck_wire_in *r, const char *what);
bool ck_wire_get_bool(ck_wire_in *r, const char *what);
/* An integer in [lo, hi]. */
int64_t ck_wire_get_range(ck_wire_in *r, int64_t lo, int64_t hi, const char *what);
/* An element count of at most max whose elements take at least min_bytes each: refused
 * when more than the bytes left could hold. */
int64_t ck_wire_get_count(ck_wire_in *r, int64_t max, size_t min_bytes, const char *what);
/* A string of at most max bytes without NUL bytes, malloc'd (NULL when absent or on
 * failure; *present tells them apart and may be NULL). */
char *ck_wire_get_str(ck_wire_in *r, size_t max, bool *present, const char *what);
/* The same into a fixed buffer of cap bytes; an absent string is refused. */
void ck_wire_get_str_to(ck_wire_in *r, char *dst, size_t cap, const char *what);
/* Whether every byte has been read (no trailing bytes), without failure. */
bool ck_wire_done(ck_wire_in *r);

#endif
