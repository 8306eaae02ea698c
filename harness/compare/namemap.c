/* Name maps: exact renames, then regex rewrite rules (see namemap.h). */
#include "harness/compare/namemap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/files.h"
#include "harness/io/json_strict.h"
#include "harness/io/tensorset.h"

void ck_name_map_init(ck_name_map *m)
{
    memset(m, 0, sizeof *m);
}

void ck_name_map_free(ck_name_map *m)
{
    for (int i = 0; i < m->n_rename; i++) {
        free(m->rename[i].from);
        free(m->rename[i].to);
    }
    for (int i = 0; i < m->n_patterns; i++) {
        regfree(&m->patterns[i].re);
        free(m->patterns[i].pattern);
        free(m->patterns[i].replacement);
    }
    free(m->rename);
    free(m->patterns);
    ck_name_map_init(m);
}

ck_status ck_name_map_single(ck_name_map *m, const char *from, const char *to, ck_error *err)
{
    ck_name_map_free(m);
    m->rename = calloc(1, sizeof *m->rename);
    if (m->rename) {
        m->rename[0].from = strdup(from);
        m->rename[0].to = strdup(to);
        m->n_rename = 1;
    }
    if (!m->rename || !m->rename[0].from || !m->rename[0].to) {
        ck_name_map_free(m);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    }
    return CK_OK;
}

/* A replacement may use \0..\N (N the pattern's group count) and \\, nothing else. */
static bool replacement_ok(const char *r, size_t groups)
{
    for (const char *p = r; *p; p++) {
        if (*p != '\\')
            continue;
        p++;
        if (*p == '\\')
            continue;
        if (*p < '0' || *p > '9' || (size_t)(*p - '0') > groups)
            return false;
    }
    return true;
}

static ck_status parse_patterns(ck_name_map *m, const cJSON *arr, const char *path, ck_error *err)
{
    if (!cJSON_IsArray(arr))
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: patterns: must be a list of [regex, replacement] pairs", path);
    int n = cJSON_GetArraySize(arr);
    m->patterns = calloc((size_t)n + 1, sizeof *m->patterns);
    if (!m->patterns)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
    int i = 0;
    for (const cJSON *c = arr->child; c; c = c->next, i++) {
        if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) != 2 || !cJSON_IsString(c->child) ||
            !cJSON_IsString(c->child->next))
            return ck_fail(err, CK_ERR_INPUT,
                           "%s: patterns[%d]: must be a pair of strings [regex, replacement]", path,
                           i);
        ck_pattern_rule *r = &m->patterns[i];
        int rc = regcomp(&r->re, c->child->valuestring, REG_EXTENDED);
        if (rc != 0) {
            char msg[200];
            regerror(rc, &r->re, msg, sizeof msg);
            return ck_fail(err, CK_ERR_INPUT, "%s: patterns[%d]: bad regex \"%.100s\": %s", path, i,
                           c->child->valuestring, msg);
        }
        m->n_patterns++;
        if (!(r->pattern = strdup(c->child->valuestring)) ||
            !(r->replacement = strdup(c->child->next->valuestring)))
            return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
        if (!replacement_ok(r->replacement, r->re.re_nsub))
            return ck_fail(err, CK_ERR_INPUT,
                           "%s: patterns[%d]: replacement \"%.100s\": use \\0 to \\%zu (groups of "
                           "the regex) or \\\\",
                           path, i, r->replacement, r->re.re_nsub > 9 ? (size_t)9 : r->re.re_nsub);
    }
    return CK_OK;
}

static ck_status name_map_parse_impl(ck_name_map *m, const char *text, size_t len, const char *path,
                            ck_error *err)
{
    cJSON *root = NULL;
    ck_status st = ck_json_parse_strict(text, len, path, NULL, &root, err);
    if (st != CK_OK)
        return st;
    if (!cJSON_IsObject(root)) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: must be a JSON object with rename, patterns", path);
        goto done;
    }
    for (const cJSON *c = root->child; c && st == CK_OK; c = c->next) {
        if (strcmp(c->string, "rename") == 0) {
            if (!cJSON_IsObject(c)) {
                st = ck_fail(err, CK_ERR_INPUT, "%s: rename: must be an object of strings", path);
                break;
            }
            int n = cJSON_GetArraySize(c);
            if (!(m->rename = calloc((size_t)n + 1, sizeof *m->rename))) {
                st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            for (const cJSON *r = c->child; r; r = r->next) {
                if (!cJSON_IsString(r) || !r->valuestring[0]) {
                    st = ck_fail(err, CK_ERR_INPUT, "%s: rename.%.100s: must be a non-empty string",
                                 path, r->string);
                    break;
                }
                ck_rename_rule *rr = &m->rename[m->n_rename];
                rr->from = strdup(r->string);
                rr->to = strdup(r->valuestring);
                m->n_rename++;
                if (!rr->from || !rr->to) {
                    st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
                    break;
                }
            }
        } else if (strcmp(c->string, "patterns") == 0) {
            st = parse_patterns(m, c, path, err);
        } else {
            st = ck_fail(err, CK_ERR_INPUT, "%s: %.100s: unknown key (expected rename, patterns)",
                         path, c->string);
        }
    }
done:
    cJSON_Delete(root);
    if (st != CK_OK)
        ck_name_map_free(m);
    return st;
}

/* The one-line guarantee for every message of name_map_parse. */
ck_status ck_name_map_parse(ck_name_map *m, const char *text, size_t len, const char *path,
                            ck_error *err)
{
    return ck_error_one_line(err, name_map_parse_impl(m, text, len, path, err));
}

static ck_status parse_into(void *obj, const char *text, size_t len, const char *path,
                            ck_error *err)
{
    return ck_name_map_parse(obj, text, len, path, err);
}

ck_status ck_name_map_load(ck_name_map *m, const char *path, ck_error *err)
{
    return ck_parse_file(path, parse_into, m, err);
}

/* Appends n bytes to a growing buffer. */
static bool append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap : 64);
        while (nc < *len + n + 1)
            nc *= 2;
        char *nb = realloc(*buf, nc);
        if (!nb)
            return false;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

ck_status ck_name_map_apply(const ck_name_map *m, const char *name, char **out, ck_error *err)
{
    *out = NULL;
    for (int i = 0; i < m->n_rename; i++) {
        if (strcmp(m->rename[i].from, name) == 0) {
            if (!(*out = strdup(m->rename[i].to)))
                return ck_fail(err, CK_ERR_NOMEM, "out of memory");
            return CK_OK;
        }
    }
    for (int i = 0; i < m->n_patterns; i++) {
        const ck_pattern_rule *r = &m->patterns[i];
        regmatch_t g[10];
        if (regexec(&r->re, name, 10, g, 0) != 0)
            continue;
        char *buf = NULL;
        size_t len = 0, cap = 0;
        bool ok = append(&buf, &len, &cap, name, (size_t)g[0].rm_so);
        for (const char *p = r->replacement; ok && *p; p++) {
            if (*p != '\\') {
                ok = append(&buf, &len, &cap, p, 1);
                continue;
            }
            p++;
            if (*p == '\\') {
                ok = append(&buf, &len, &cap, p, 1);
                continue;
            }
            int k = *p - '0';
            if (g[k].rm_so >= 0)
                ok = append(&buf, &len, &cap, name + g[k].rm_so, (size_t)(g[k].rm_eo - g[k].rm_so));
        }
        ok = ok && append(&buf, &len, &cap, name + g[0].rm_eo, strlen(name + g[0].rm_eo));
        if (!ok) {
            free(buf);
            return ck_fail(err, CK_ERR_NOMEM, "out of memory");
        }
        if (len == 0) {
            free(buf);
            return ck_fail(err, CK_ERR_INPUT, "pattern \"%.100s\" maps \"%.200s\" to an empty name",
                           r->pattern, name);
        }
        *out = buf;
        return CK_OK;
    }
    if (!(*out = strdup(name)))
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    return CK_OK;
}
