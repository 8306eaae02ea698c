/*
 * `ckpt-harness merge DIR...`: the report folders of several shards or runners (each
 * written by `run --report DIR`, holding summary.json and the reports it names) become one
 * summary: the items in the serial run's order, the totals, and the exit code of the whole;
 * optionally a merged report folder, JUnit and HTML (commands.h, docs/ci.md).
 */
#include "harness/cli/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/case_files.h"
#include "harness/cli/color.h"
#include "harness/cli/run_outputs.h"
#include "harness/io/files.h"
#include "reports/run_set.h"

#define MAX_SUMMARY_BYTES ((size_t)64 << 20)
#define MAX_REPORT_BYTES ((size_t)1 << 30)

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s%s", dir, ck_cli_ends_with(dir, "/") ? "" : "/", name);
    return p;
}

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A report file name from summary.json must stay inside its folder. */
static bool plain_name(const char *s)
{
    return s && *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Reads one folder's summary.json and its reports into set; texts[i] keeps each report's
 * bytes for the merged folder. */
static ck_status read_dir(const char *dir, ck_run_set *set, char ***texts, int *n_texts,
                          ck_error *err)
{
    char *path = join(dir, "summary.json");
    char *text = NULL;
    size_t len = 0;
    if (!path)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    ck_status st = ck_read_file(path, MAX_SUMMARY_BYTES, &text, &len, err);
    if (st != CK_OK) {
        ck_error_prefix(err, "%s: no summary (was this folder written by run --report DIR?)", dir);
        free(path);
        return st;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const char *schema = jstr(root, "schema");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(root, "items");
    if (!root || !schema || strcmp(schema, CK_SUMMARY_SCHEMA) != 0 || !cJSON_IsArray(items)) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: not a ckpt-harness summary (schema %s)", path,
                     CK_SUMMARY_SCHEMA);
        goto out;
    }
    const char *cmd = jstr(root, "command");
    if (!set->command && cmd && !(set->command = strdup(cmd))) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, items) {
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive(it, "index");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(it, "time_s");
        ck_run_item item = {0};
        if (!cJSON_IsNumber(idx) || idx->valuedouble < 0 || idx->valuedouble > 1e9 ||
            !jstr(it, "case") || !jstr(it, "dtype") ||
            !ck_item_status_parse(jstr(it, "status"), &item.status)) {
            st = ck_fail(err, CK_ERR_INPUT, "%s: items[%d]: expected index, case, dtype and status",
                         path, k);
            goto out;
        }
        item.index = (int)idx->valuedouble;
        item.case_name = (char *)jstr(it, "case");
        item.case_file = (char *)jstr(it, "file");
        item.dtype = (char *)jstr(it, "dtype");
        item.backend = (char *)jstr(it, "backend");
        item.message = (char *)jstr(it, "message");
        item.report_file = (char *)jstr(it, "report");
        item.time_s = cJSON_IsNumber(ts) ? ts->valuedouble : 0.0;
        char *rtext = NULL;
        if (item.report_file) {
            if (!plain_name(item.report_file)) {
                st = ck_fail(err, CK_ERR_INPUT, "%s: items[%d].report: %s is not a file name in "
                             "this folder", path, k, item.report_file);
                goto out;
            }
            char *rp = join(dir, item.report_file);
            size_t rlen = 0;
            if (!rp || (st = ck_read_file(rp, MAX_REPORT_BYTES, &rtext, &rlen, err)) != CK_OK) {
                free(rp);
                if (!rp)
                    st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
                goto out;
            }
            item.report = cJSON_ParseWithLength(rtext, rlen);
            if (!item.report) {
                st = ck_fail(err, CK_ERR_INPUT, "%s: not valid JSON", rp);
                free(rp);
                free(rtext);
                goto out;
            }
            free(rp);
        }
        if (!ck_run_set_add(set, &item, err)) {
            free(rtext);
            st = CK_ERR_NOMEM;
            goto out;
        }
        char **nt = realloc(*texts, (size_t)(*n_texts + 1) * sizeof *nt);
        if (!nt) {
            free(rtext);
            st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
            goto out;
        }
        *texts = nt;
        (*texts)[(*n_texts)++] = rtext;
        k++;
    }
out:
    cJSON_Delete(root);
    free(path);
    return st;
}

static int cmp_index(const void *a, const void *b)
{
    const ck_run_item *x = *(ck_run_item *const *)a, *y = *(ck_run_item *const *)b;
    return (x->index > y->index) - (x->index < y->index);
}

int ck_cmd_merge(const ck_merge_opts *o)
{
    ck_error err;
    ck_run_set set = {.reproducible = true};
    char **texts = NULL;
    int n_texts = 0, rc = CK_EXIT_USAGE;
    for (int d = 0; d < o->n_dirs; d++) {
        if (read_dir(o->dirs[d], &set, &texts, &n_texts, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: merge: %s\n", err.msg);
            goto out;
        }
    }
    /* times present in any shard: keep them */
    for (int i = 0; i < set.n; i++)
        if (set.items[i].time_s != 0.0)
            set.reproducible = false;
    /* the report texts follow their items through the sort */
    ck_run_item **order = malloc(((size_t)set.n + 1) * sizeof *order);
    char **sorted_texts = malloc(((size_t)set.n + 1) * sizeof *sorted_texts);
    if (!order || !sorted_texts) {
        free(order);
        free(sorted_texts);
        fprintf(stderr, "ckpt-harness: out of memory\n");
        goto out;
    }
    for (int i = 0; i < set.n; i++)
        order[i] = &set.items[i];
    qsort(order, (size_t)set.n, sizeof *order, cmp_index);
    for (int i = 0; i < set.n; i++)
        sorted_texts[i] = texts[order[i] - set.items];
    free(order);
    free(texts);
    texts = sorted_texts;
    if (ck_run_set_sort(&set, &err) != CK_OK) {
        fprintf(stderr, "ckpt-harness: merge: %s\n", err.msg);
        goto out;
    }
    if (o->report) {
        if (ck_mkdir_p(o->report, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: --report: %s\n", err.msg);
            goto out;
        }
        for (int i = 0; i < set.n; i++) {
            if (!set.items[i].report_file || !texts[i])
                continue;
            char *p = join(o->report, set.items[i].report_file);
            /* the bytes as the shard wrote them, without the newline the writer adds back */
            size_t tl = strlen(texts[i]);
            if (tl && texts[i][tl - 1] == '\n')
                texts[i][tl - 1] = '\0';
            if (!p || ck_write_text_atomic(p, texts[i], &err) != CK_OK) {
                fprintf(stderr, "ckpt-harness: %s\n", p ? err.msg : "out of memory");
                free(p);
                goto out;
            }
            free(p);
        }
    }
    for (int i = 0; i < set.n && !o->quiet; i++) {
        const ck_run_item *it = &set.items[i];
        static const char *const names[] = {"PASS", "FAIL", "ERROR", "SKIP"};
        char line[1024];
        ck_item_summary_line(it, line, sizeof line);
        char full[1280];
        int w = snprintf(full, sizeof full, "%s %s %s  %s\n", names[it->status], it->case_name,
                         it->dtype, line);
        /* at 80 columns, the status word coloured on a terminal, as run's lines */
        ck_cli_color_write(stdout, full, w < 0 ? 0 : (size_t)w < sizeof full ? (size_t)w
                                                                                : sizeof full - 1);
    }
    char totals[128];
    ck_run_set_totals_line(&set, totals, sizeof totals);
    printf("merge of %d folder%s: %s\n", o->n_dirs, o->n_dirs == 1 ? "" : "s", totals);
    rc = ck_cli_write_run_outputs(&set, o->report, o->junit, o->html, o->quiet);
    if (rc == CK_EXIT_PASS)
        rc = ck_run_set_exit_code(&set);
out:
    for (int i = 0; i < n_texts; i++)
        free(texts[i]);
    free(texts);
    ck_run_set_free(&set);
    return rc;
}
