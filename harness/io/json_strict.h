/*
 * Strict JSON for files the harness did not write: safetensors headers, tolerance and
 * name-map files. cJSON alone accepts duplicate keys, stops at an embedded NUL and holds
 * numbers as doubles; these helpers close those gaps.
 */
#ifndef CK_JSON_STRICT_H
#define CK_JSON_STRICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "harness/core/status.h"

/* Parses len bytes as one JSON value: valid UTF-8, no NUL byte, no "\u0000" escape,
 * nothing but whitespace after the value, no duplicate key in any object. Messages read
 * "<path>: <what>: malformed JSON near byte 12" (": <what>" left out when what is NULL).
 * The caller frees *root with cJSON_Delete. */
ck_status ck_json_parse_strict(const char *text, size_t len, const char *path, const char *what,
                               cJSON **root, ck_error *err);

/* A JSON number that is an integer in [0, max] (max at most 2^53, where doubles stop
 * being exact). */
bool ck_json_uint(const cJSON *v, uint64_t max, uint64_t *out);

/* Writes s as a JSON string literal (quotes included, control characters and quotes
 * escaped) into a malloc'd buffer; NULL when out of memory. */
char *ck_json_quote(const char *s);

/* The shortest of %.15g/%.16g/%.17g that reads back to v (as the run report writes
 * reals); non-finite values as "NaN", "Infinity", "-Infinity" (JSON strings, quoted). */
void ck_json_real_text(double v, char *buf, size_t n);

#endif
