/*
 * Building the JSON reports (the run report, reports/report_json.c, and the compare
 * report, reports/compare_report.c) as cJSON trees.
 *
 * The builder remembers the first failed allocation so that the code that lays out a
 * report reads as a list of fields instead of a ladder of checks: every helper does
 * nothing once it has failed, and the caller checks b.failed once at the end.
 *
 * Numbers are written as raw text, never through cJSON's own number printer: integers
 * (bytes, counts, seeds, ULP distances) stay exact above 2^53, where a double cannot hold
 * them, and doubles round-trip and are spelled the same way on every run.
 */
#ifndef CK_JSON_BUILD_H
#define CK_JSON_BUILD_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "harness/core/status.h"

typedef struct {
    bool failed;
} ck_json_builder;

/* Attaches item under key (object parent) or at the end (array parent, key NULL) and
 * returns it. On failure, or when b has already failed, item is deleted, b fails and NULL
 * is returned; a NULL parent or item fails too. */
cJSON *ck_json_attach(ck_json_builder *b, cJSON *parent, const char *key, cJSON *item);

/* A new empty object or array under key (NULL when b has failed). */
cJSON *ck_json_add_object(ck_json_builder *b, cJSON *parent, const char *key);
cJSON *ck_json_add_array(ck_json_builder *b, cJSON *parent, const char *key);

/* A NULL string is written as null (e.g. a case without a description). */
void ck_json_add_string(ck_json_builder *b, cJSON *parent, const char *key, const char *s);
void ck_json_add_bool(ck_json_builder *b, cJSON *parent, const char *key, bool v);
void ck_json_add_null(ck_json_builder *b, cJSON *parent, const char *key);
/* text is written as it is (it must be valid JSON). */
void ck_json_add_raw(ck_json_builder *b, cJSON *parent, const char *key, const char *text);

/* Integers as decimal text: still a JSON number, and exact at any magnitude. */
void ck_json_add_int(ck_json_builder *b, cJSON *parent, const char *key, int64_t v);
void ck_json_add_uint(ck_json_builder *b, cJSON *parent, const char *key, uint64_t v);

/* The one way a double enters a report. Finite: the shortest of %.15g/%.16g/%.17g that
 * reads back to the same double (ck_json_real_text), so 0.1 stays "0.1" and every value
 * round-trips; -0.0 is written "-0". Non-finite: the strings "NaN", "Infinity",
 * "-Infinity". */
void ck_json_add_real(ck_json_builder *b, cJSON *parent, const char *key, double v);

/* root as formatted JSON (cJSON_Print) in a malloc'ed string, every string's invalid UTF-8
 * and noncharacters replaced by U+FFFD (ck_text_utf8_clean): cJSON copies bytes >= 0x80
 * as they are, and a report must be valid JSON whatever a file name held. *replaced
 * (when not NULL) says how many were replaced. NULL when out of memory. */
char *ck_json_print_clean(const cJSON *root, size_t *replaced);

/* Writes root as formatted JSON (ck_json_print_clean) and a newline to path atomically
 * (ck_write_text_atomic); `what` names the document in the out-of-memory message. */
/* Turns every raw number the builder wrote (ck_json_add_int/uint/real) into a cJSON number
 * holding what parsing the printed text would give (valuedouble by strtod, valueint
 * saturated as cJSON does), so readers that ask cJSON_IsNumber see a built tree as they
 * see a parsed one. Print the tree first where its exact text matters. */
void ck_json_numbers_from_raw(cJSON *item);

ck_status ck_json_write_file(const cJSON *root, const char *path, const char *what,
                             ck_error *err);

#endif
