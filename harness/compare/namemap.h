/*
 * Name maps for `ckpt-harness compare --map FILE`: how the names in A (the file under
 * test) translate into the names in B (the reference), e.g. for a framework that
 * prefixes every parameter:
 *
 *   {"rename":   {"bias_renamed": "fc1.bias"},
 *    "patterns": [["^model\\.(.*)$", "\\1"], ["^(.*)/kernel:0$", "\\1.weight"]]}
 *
 * An exact "rename" entry is used first; otherwise the first pattern (a POSIX extended
 * regular expression) that matches anywhere in the name replaces the matched part with
 * its replacement, in which \0 to \9 are the match and its groups and \\ is a backslash.
 * Names no rule touches stay as they are. Both members are optional.
 */
#ifndef CK_NAMEMAP_H
#define CK_NAMEMAP_H

#include <regex.h>

#include "harness/core/status.h"

typedef struct {
    char *from, *to;
} ck_rename_rule;

typedef struct {
    regex_t re;
    char *pattern, *replacement;
} ck_pattern_rule;

typedef struct {
    int n_rename;
    ck_rename_rule *rename;
    int n_patterns;
    ck_pattern_rule *patterns;
} ck_name_map;

void ck_name_map_init(ck_name_map *m);
/* Errors name path and the member: "map.json: patterns[1]: bad regex: ...". */
ck_status ck_name_map_parse(ck_name_map *m, const char *text, size_t len, const char *path,
                            ck_error *err);
ck_status ck_name_map_load(ck_name_map *m, const char *path, ck_error *err);
void ck_name_map_free(ck_name_map *m);
/* Replaces m by the one rename from -> to (compare pairs two single-tensor operands
 * this way, whatever their names). */
ck_status ck_name_map_single(ck_name_map *m, const char *from, const char *to, ck_error *err);

/* The mapped name, malloc'd, in *out. Fails (CK_ERR_INPUT) when the result is empty. */
ck_status ck_name_map_apply(const ck_name_map *m, const char *name, char **out, ck_error *err);

#endif
