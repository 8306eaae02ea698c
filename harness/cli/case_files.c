/*
 * Finding and loading case files for the subcommands (case_files.h): files and folders
 * expand into *.json in name order, and every case is parsed and built before any run so
 * bad input stops the command first.
 */
#include "harness/cli/case_files.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>

#include "harness/cli/messages.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness/cli/cmd_import.h"
#include "harness/core/text.h"
#include "harness/io/files.h"
#include "harness/model/params.h"

/* A JSON object with neither `layers` nor `input` is some other file that lives beside the
 * cases (tolerances, name maps); anything that does not parse is left to the case loader,
 * which names what is wrong. */
static bool is_other_json(const char *path)
{
    char *text = NULL;
    size_t len = 0;
    ck_error err;
    /* only peeked at: a file skipped here (an old report) is no input of the run, and a
     * report may replace it */
    ck_inputs_track(false);
    ck_status st = ck_read_file(path, (size_t)64 << 20, &text, &len, &err);
    ck_inputs_track(true);
    if (st != CK_OK)
        return false;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    bool other = cJSON_IsObject(j) && !cJSON_HasObjectItem(j, "layers") &&
                 !cJSON_HasObjectItem(j, "input");
    cJSON_Delete(j);
    return other;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

bool ck_cli_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static ck_status push_path(char ***list, int *n, int *cap, char *path, ck_error *err)
{
    if (!path)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory listing cases");
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        char **nl = realloc(*list, (size_t)nc * sizeof *nl);
        if (!nl) {
            free(path);
            return ck_fail(err, CK_ERR_NOMEM, "out of memory listing cases");
        }
        *list = nl;
        *cap = nc;
    }
    (*list)[(*n)++] = path;
    return CK_OK;
}

ck_status ck_collect_case_files(const char **paths, int n_paths, char ***out, int *n_out,
                                ck_error *err)
{
    char **list = NULL;
    int n = 0, cap = 0;
    ck_status st = CK_OK;
    for (int i = 0; i < n_paths && st == CK_OK; i++) {
        struct stat sb;
        if (stat(paths[i], &sb) != 0) {
            st = ck_fail(err, CK_ERR_IO, "%s: %s", paths[i], strerror(errno));
            break;
        }
        if (!S_ISDIR(sb.st_mode)) {
            st = push_path(&list, &n, &cap, strdup(paths[i]), err);
            continue;
        }
        DIR *d = opendir(paths[i]);
        if (!d) {
            st = ck_fail(err, CK_ERR_IO, "%s: %s", paths[i], strerror(errno));
            break;
        }
        int first = n;
        struct dirent *de;
        while (st == CK_OK && (de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.' || !ck_cli_ends_with(de->d_name, ".json"))
                continue;
            size_t len = strlen(paths[i]) + strlen(de->d_name) + 2;
            char *p = malloc(len);
            if (p)
                snprintf(p, len, "%s%s%s", paths[i], ck_cli_ends_with(paths[i], "/") ? "" : "/",
                         de->d_name);
            if (p && is_other_json(p)) {
                char note[4200];
                snprintf(note, sizeof note, "%s is not a case file (no layers or input): skipped",
                         p);
                ck_cli_note(note);
                free(p);
                continue;
            }
            st = push_path(&list, &n, &cap, p, err);
        }
        closedir(d);
        if (st == CK_OK && n == first)
            st = ck_fail(err, CK_ERR_INPUT, "%s: no *.json case files in this directory",
                         paths[i]);
        if (st == CK_OK)
            qsort(list + first, (size_t)(n - first), sizeof *list, cmp_str);
    }
    if (st != CK_OK) {
        ck_free_case_files(list, n);
        return st;
    }
    *out = list;
    *n_out = n;
    return CK_OK;
}

void ck_free_case_files(char **files, int n)
{
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
}

void ck_cli_free_cases(ck_loaded_case *lc, int n)
{
    for (int i = 0; i < n; i++) {
        if (lc[i].built)
            ck_graph_free(&lc[i].g);
        if (lc[i].loaded)
            ck_case_free(&lc[i].cs);
        free(lc[i].file);
        free(lc[i].error);
        if (lc[i].tmp_weights) {
            unlink(lc[i].tmp_weights);
            ck_temp_file_release(lc[i].tmp_slot);
        }
        free(lc[i].tmp_weights);
    }
    free(lc);
}

/* Loads and builds every case first, so bad input stops the command before any run. */
int ck_cli_load_cases(const char **paths, int n_paths, const ck_run_opts *ov,
                      ck_loaded_case **out, int *n_out)
{
    return ck_cli_load_cases_ex(paths, n_paths, ov, false, out, n_out);
}

/* Keeps the first message of a case that did not load. */
static void keep_error(ck_loaded_case *c, const char *msg)
{
    if (!c->error)
        c->error = strdup(msg);
}

int ck_cli_load_cases_ex(const char **paths, int n_paths, const ck_run_opts *ov, bool keep_going,
                         ck_loaded_case **out, int *n_out)
{
    ck_error err;
    char **files = NULL;
    int n = 0;
    if (ck_collect_case_files(paths, n_paths, &files, &n, &err) != CK_OK) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    ck_loaded_case *lc = calloc((size_t)n + 1, sizeof *lc);
    if (!lc) {
        ck_free_case_files(files, n);
        ck_cli_error("out of memory");
        return CK_EXIT_USAGE;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        lc[i].file = files[i];
        files[i] = NULL;
        lc[i].tmp_slot = -1;
        if (ck_text_utf8_needs_clean(lc[i].file, strlen(lc[i].file))) {
            /* said once: every JSON, XML and HTML output shows U+FFFD in its place */
            char shown[1024], note[1200];
            snprintf(note, sizeof note, "%s: the path is not valid UTF-8 (or holds a "
                     "noncharacter); reports, JUnit and HTML show U+FFFD for those bytes",
                     ck_text_escape(lc[i].file, shown, sizeof shown));
            ck_cli_note(note);
        }
        ck_status ls;
        if (ck_cli_ends_with(lc[i].file, ".onnx")) {
            ck_onnx_import_opts io = {.checkpoint = ov ? ov->onnx_checkpoint : NULL,
                                      .loss = ov ? ov->onnx_loss : NULL,
                                      .optimizer = ov ? ov->onnx_optimizer : NULL};
            if (ov) {
                io.has_class_dim = ov->onnx_has_class_dim;
                io.class_dim = ov->onnx_class_dim;
                io.has_ignore_index = ov->onnx_has_ignore_index;
                io.ignore_index = ov->onnx_ignore_index;
            }
            ls = ck_cli_import_case(lc[i].file, &io, &lc[i].cs, &lc[i].tmp_weights,
                                    &lc[i].tmp_slot, &err);
            if (ls == CK_OK)
                lc[i].cs.init_shown = lc[i].file; /* its initializers, not the temporary copy */
        } else {
            ls = ck_case_load(lc[i].file, &lc[i].cs, &err);
        }
        if (ls != CK_OK) {
            ck_cli_error(err.msg);
            keep_error(&lc[i], err.msg);
            bad++;
            continue;
        }
        lc[i].loaded = true;
        if (ov) {
            if (ov->has_rng)
                lc[i].cs.rng = ov->rng;
            if (ov->has_bn)
                lc[i].cs.bn = ov->bn;
            if (ov->has_steps)
                lc[i].cs.steps = ov->steps;
            if (ov->has_seed)
                lc[i].cs.seed = ov->seed;
            if (ov->init) {
                free(lc[i].cs.init_from);
                lc[i].cs.init_shown = NULL;
                if (!(lc[i].cs.init_from = strdup(ov->init))) {
                    ck_cli_error("out of memory");
                    keep_error(&lc[i], "out of memory");
                    bad++;
                    continue;
                }
            }
        }
        if (ck_graph_build(&lc[i].cs, &lc[i].g, &err) != CK_OK) {
            ck_cli_error(err.msg);
            keep_error(&lc[i], err.msg);
            bad++;
            continue;
        }
        lc[i].built = true;
        if (lc[i].cs.init_from && ck_graph_check_weights(&lc[i].g, lc[i].cs.init_from, &err) != CK_OK) {
            ck_cli_errorf("%s: %s", lc[i].cs.path, err.msg);
            char msg[sizeof err.msg + 512];
            snprintf(msg, sizeof msg, "%s: %s", lc[i].cs.path, err.msg);
            keep_error(&lc[i], msg);
            ck_graph_free(&lc[i].g);
            lc[i].built = false;
            bad++;
        }
    }
    ck_free_case_files(files, n);
    if (bad && !keep_going) {
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }
    *out = lc;
    *n_out = n;
    return CK_EXIT_PASS;
}
