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
#include <sys/stat.h>

#include "harness/cli/case_files.h"
#include "harness/cli/color.h"
#include "harness/cli/messages.h"
#include "harness/cli/run_outputs.h"
#include "harness/core/text.h"
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

/* What each folder's summary.json says of the matrix (run_set.h); size 0: not recorded. */
typedef struct {
    int size, shard, shards;
} shard_info;

static int int_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 1e9 &&
                   v->valuedouble == (double)(int)v->valuedouble
               ? (int)v->valuedouble
               : -1;
}

/* The verdict of a report is its own "status": the summary only points at it. A PASS or
 * FAIL item must have a report; an item whose summary status disagrees with its report
 * (two runs into one folder, an edited file) is refused naming both. */
static ck_status item_status_from_report(const char *summary, int k, const char *report_path,
                                         ck_run_item *item, ck_error *err)
{
    if (!item->report) {
        if (item->status == CK_ITEM_PASS || item->status == CK_ITEM_FAIL)
            return ck_fail(err, CK_ERR_INPUT, "%s: items[%d] (%s %s) says %s but names no "
                           "report: a verdict is read from its report", summary, k,
                           item->case_name, item->dtype, ck_item_status_name(item->status));
        return CK_OK;
    }
    const char *rs = jstr(item->report, "status");
    ck_item_status from;
    if (!rs)
        return ck_fail(err, CK_ERR_INPUT, "%s: no \"status\" (not a ckpt-harness run report?)",
                       report_path);
    if (strcmp(rs, "pass") == 0)
        from = CK_ITEM_PASS;
    else if (strcmp(rs, "fail") == 0 || strcmp(rs, "vacuous") == 0)
        from = CK_ITEM_FAIL;
    else
        return ck_fail(err, CK_ERR_INPUT, "%s: status \"%s\": expected pass, fail or vacuous",
                       report_path, rs);
    const char *dt = jstr(item->report, "dtype");
    if (dt && strcmp(dt, item->dtype) != 0)
        return ck_fail(err, CK_ERR_INPUT, "%s: items[%d] is dtype %s, its report %s is %s",
                       summary, k, item->dtype, report_path, dt);
    if (from != item->status)
        return ck_fail(err, CK_ERR_INPUT, "%s: items[%d] (%s %s) says %s, its report %s says %s: "
                       "the folder holds results of two runs (or was edited); rerun into an "
                       "empty folder", summary, k, item->case_name, item->dtype,
                       ck_item_status_name(item->status), report_path, rs);
    return CK_OK;
}

/* Reads one folder's summary.json and its reports into set; texts[i] keeps each report's
 * bytes for the merged folder; *si what the summary records of the matrix. */
static ck_status read_dir(const char *dir, ck_run_set *set, char ***texts, int *n_texts,
                          shard_info *si, ck_error *err)
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
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(root, "matrix");
    *si = (shard_info){0, 0, 0};
    if (mx) {
        si->size = int_of(mx, "size");
        si->shard = int_of(mx, "shard");
        si->shards = int_of(mx, "shards");
        if (si->size < 1 || si->shards < 1 || si->shard < 1 || si->shard > si->shards) {
            st = ck_fail(err, CK_ERR_INPUT, "%s: matrix: expected size >= 1 and 1 <= shard <= "
                         "shards", path);
            goto out;
        }
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
            st = item_status_from_report(path, k, rp, &item, err);
            free(rp);
            if (st != CK_OK) {
                cJSON_Delete(item.report);
                free(rtext);
                goto out;
            }
        } else if ((st = item_status_from_report(path, k, NULL, &item, err)) != CK_OK) {
            goto out;
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

/* Every shard of the matrix the summaries record must be there (unless allow_partial);
 * the merged set records the whole matrix when it is complete. */
static ck_status check_coverage(const ck_merge_opts *o, const shard_info *si, ck_run_set *set,
                                ck_error *err)
{
    int size = 0, shards = 0;
    for (int d = 0; d < o->n_dirs; d++) {
        if (si[d].size == 0) {
            if (o->allow_partial)
                return CK_OK;
            return ck_fail(err, CK_ERR_INPUT, "%s: summary.json records no matrix size or shard, "
                           "so coverage cannot be checked (--allow-partial merges anyway)",
                           o->dirs[d]);
        }
        if (d > 0 && (si[d].size != size || si[d].shards != shards))
            return ck_fail(err, CK_ERR_INPUT, "%s is shard %d/%d of a %d-item matrix, %s of a "
                           "%d-item matrix in %d shards: not parts of one run", o->dirs[d],
                           si[d].shard, si[d].shards, si[d].size, o->dirs[0], size, shards);
        size = si[d].size;
        shards = si[d].shards;
    }
    char missing[512] = "";
    size_t used = 0;
    int n_missing = 0;
    for (int s = 1; s <= shards; s++) {
        bool seen = false;
        for (int d = 0; d < o->n_dirs && !seen; d++)
            seen = si[d].shard == s;
        if (!seen && used + 32 < sizeof missing) {
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d/%d",
                                     n_missing ? ", " : "", s, shards);
            n_missing++;
        }
    }
    if (n_missing == 0 && set->n != size)
        return ck_fail(err, CK_ERR_INPUT, "the folders hold %d items of a %d-item matrix", set->n,
                       size);
    if (n_missing > 0 && !o->allow_partial)
        return ck_fail(err, CK_ERR_INPUT, "shard%s %s missing: %d of %d items of the matrix "
                       "(--allow-partial merges the parts given)", n_missing == 1 ? "" : "s",
                       missing, set->n, size);
    if (n_missing == 0) {
        set->matrix_size = size;
        set->shard = set->shards = 1;
    }
    return CK_OK;
}

/* Every output, before anything is written: the merged folder is no input folder (by
 * device and inode, whatever its spelling), and each file in it, --junit and --html can be
 * written and is no input (files.h tracks every file read). */
static ck_status check_outputs(const ck_merge_opts *o, const ck_run_set *set, ck_error *err)
{
    if (o->report) {
        struct stat rs;
        if (stat(o->report, &rs) == 0) {
            for (int d = 0; d < o->n_dirs; d++) {
                struct stat ds;
                if (stat(o->dirs[d], &ds) == 0 && ds.st_dev == rs.st_dev && ds.st_ino == rs.st_ino)
                    return ck_fail(err, CK_ERR_INPUT, "--report %s is the input folder %s: "
                                   "merge into a new folder", o->report, o->dirs[d]);
            }
            for (int i = 0; i < set->n; i++) {
                if (!set->items[i].report_file)
                    continue;
                char *p = join(o->report, set->items[i].report_file);
                ck_status st = p ? ck_output_file_check(p, "--report", err)
                                 : ck_fail(err, CK_ERR_NOMEM, "out of memory");
                free(p);
                if (st != CK_OK)
                    return st;
            }
        } else {
            /* made by the merge: its parent must take it */
            size_t n = strlen(o->report);
            char *bare = strdup(o->report);
            if (!bare)
                return ck_fail(err, CK_ERR_NOMEM, "out of memory");
            while (n > 1 && bare[n - 1] == '/')
                bare[--n] = '\0';
            ck_status st = ck_output_file_check(bare, "--report", err);
            free(bare);
            if (st != CK_OK)
                return st;
        }
    }
    return CK_OK;
}

int ck_cmd_merge(const ck_merge_opts *o)
{
    ck_error err;
    ck_run_set set = {.reproducible = true};
    char **texts = NULL;
    int n_texts = 0, rc = CK_EXIT_USAGE;
    shard_info *si = calloc((size_t)o->n_dirs + 1, sizeof *si);
    if (!si) {
        ck_cli_error("out of memory");
        return CK_EXIT_USAGE;
    }
    for (int d = 0; d < o->n_dirs; d++) {
        if (read_dir(o->dirs[d], &set, &texts, &n_texts, &si[d], &err) != CK_OK) {
            ck_cli_errorf("merge: %s", err.msg);
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
        ck_cli_errorf("merge: %s", err.msg);
        goto out;
    }
    if (check_coverage(o, si, &set, &err) != CK_OK || check_outputs(o, &set, &err) != CK_OK) {
        ck_cli_errorf("merge: %s", err.msg);
        goto out;
    }
    if (ck_cli_check_run_outputs(NULL, o->junit, o->html) != CK_EXIT_PASS)
        goto out;
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
            if (ck_text_utf8_needs_clean(texts[i], strlen(texts[i]))) {
                /* a report that is not valid UTF-8 (edited, or from an old writer) */
                char *clean = ck_text_utf8_clean(texts[i], strlen(texts[i]), NULL);
                if (clean) {
                    free(texts[i]);
                    texts[i] = clean;
                }
            }
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
        char line[1024], sl[1024], sc[256], sd[64];
        ck_item_summary_line(it, line, sizeof line);
        /* read from files: escaped, one line each; at 80 columns, the status word coloured
         * on a terminal, as run's lines */
        char full[1536];
        int w = snprintf(full, sizeof full, "%s %s %s  %s\n", names[it->status],
                         ck_text_escape(it->case_name, sc, sizeof sc),
                         ck_text_escape(it->dtype, sd, sizeof sd),
                         ck_text_escape(line, sl, sizeof sl));
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
    free(si);
    for (int i = 0; i < n_texts; i++)
        free(texts[i]);
    free(texts);
    ck_run_set_free(&set);
    return rc;
}
