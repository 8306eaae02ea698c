/*
 * `ckpt-harness run` and `bisect`: every case in every dtype asked for, plain and
 * checkpointed, judged, printed and reported (commands.h). The case x dtype matrix can be
 * filtered (--filter), split across machines (--shard) and run in several processes
 * (--jobs); output and reports are the same as a serial run's, in case order.
 */
#include "harness/cli/commands.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/cli/backend_choice.h"
#include "harness/cli/build_info.h"
#include "harness/cli/case_files.h"
#include "backends/registry.h"
#include "harness/cli/color.h"
#include "harness/cli/messages.h"
#include "harness/cli/progress.h"
#include "harness/cli/run_outputs.h"
#include "harness/core/text.h"
#include "harness/io/file_digest.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/verify/bisect.h"
#include "harness/verify/judge.h"
#include "harness/verify/run_case.h"
#include "reports/report.h"
#include "reports/run_set.h"

/* Where a run's report goes: the file itself, or <dir>/<case name>[.<dtype>].json (the
 * dtype is added when the case runs in more than one). */
static char *report_path(const char *report, bool as_dir, const char *case_name,
                         const char *dtype_suffix)
{
    if (!as_dir && !dtype_suffix)
        return strdup(report);
    if (!as_dir) { /* FILE.json for a case run in several dtypes: FILE.<dtype>.json */
        size_t stem = strlen(report) - 5, n = strlen(report) + strlen(dtype_suffix) + 2;
        char *p = malloc(n);
        if (p)
            snprintf(p, n, "%.*s.%s.json", (int)stem, report, dtype_suffix);
        return p;
    }
    size_t n = strlen(report) + strlen(case_name) + (dtype_suffix ? strlen(dtype_suffix) : 0) + 9;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s%s%s%s.json", report, ck_cli_ends_with(report, "/") ? "" : "/", case_name,
                 dtype_suffix ? "." : "", dtype_suffix ? dtype_suffix : "");
    return p;
}

/* "--dtype fp32,fp16,bf16": each dtype once, no empty item */
static bool parse_dtype_list(const char *s, ck_dtype *out, int *n)
{
    *n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char tok[16];
        if (len == 0 || len >= sizeof tok)
            return false;
        memcpy(tok, p, len);
        tok[len] = '\0';
        ck_dtype dt;
        if (!ck_dtype_parse(tok, &dt) || (dt != CK_F32 && dt != CK_F16 && dt != CK_BF16) ||
            *n == CK_MAX_PRECISIONS)
            return false;
        for (int k = 0; k < *n; k++)
            if (out[k] == dt)
                return false;
        out[(*n)++] = dt;
        if (!comma)
            break;
        p = comma + 1;
    }
    return *n > 0;
}

/* <dump>/<case>[.<dtype>] */
static void dump_dir_of(const char *dump, const char *case_name, const char *dtype_suffix,
                        char *out, size_t n)
{
    snprintf(out, n, "%s%s%s%s%s", dump, ck_cli_ends_with(dump, "/") ? "" : "/", case_name,
             dtype_suffix ? "." : "", dtype_suffix ? dtype_suffix : "");
}

/* One entry of the case x dtype matrix. */
typedef struct {
    int li;          /* index into the loaded cases */
    ck_dtype dtype;
    int index;       /* position in the whole (filtered) matrix */
    bool several;    /* the case runs in several dtypes */
    bool skip;       /* a case/dtype the backend does not run (skip_unsupported) */
    char skip_msg[CK_ERROR_MAX];
} work_item;

/* What one work item gives back (in-process or from a worker). */
typedef struct {
    int rc;
    char *message;
    char *report_file;
    cJSON *report;
    double time_s;
} work_result;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* The whole command's metadata, shared by every case (sha256 filled per case). */
typedef struct {
    char host[256];
    char started[32];
} run_context;

static void run_one(const ck_run_opts *o, ck_backend *b, ck_backend *ref, const ck_graph *g,
                    const work_item *w, const run_context *ctx, bool as_dir, FILE *out,
                    FILE *errf, ck_progress *prog, work_result *wr)
{
    const ck_case *c = g->cs;
    ck_dtype dtype = w->dtype;
    ck_error err;
    ck_result res;
    double t0 = now_s();
    memset(wr, 0, sizeof *wr);
    ck_case_run_opts ro = {.dump_dir = NULL, .dump_activations = o->dump_activations,
                           .dump_activation_grads = o->dump_activation_grads,
                           .dump_optimizer = o->dump_optimizer,
                           .progress = prog && prog->tty ? ck_progress_update : NULL,
                           .progress_user = prog,
                           .precision_check = (ck_precision_check)o->precision_check};
    if (o->has_rtol || o->has_atol || o->has_rel_l2) {
        /* unset elementwise parts default to the dtype's torch.testing tolerance */
        ro.precision_override = (ck_precision_override){
            .set = true,
            .rtol = o->has_rtol ? o->rtol : dtype == CK_BF16 ? 1.6e-2 : 1e-3,
            .atol = o->has_atol ? o->atol : 1e-5,
            .rel_l2 = o->has_rel_l2 ? o->rel_l2 : -1.0};
    }
    char dump_dir[4096];
    if (o->dump) {
        dump_dir_of(o->dump, c->name, w->several ? ck_dtype_name(dtype) : NULL, dump_dir,
                    sizeof dump_dir);
        ro.dump_dir = dump_dir;
    }
    ck_cli_clear_algo_records(b);
    ck_status st = ck_run_case_ex(b, g, dtype, &ro, &res, &err);
    if (st == CK_OK && o->dump && !o->quiet)
        fprintf(out, "dump: %s/manifest.json\n", dump_dir);
    if (st == CK_OK && o->verify_recompute)
        st = ck_verify_recompute(b, g, dtype, &res, &err);
    if (st == CK_OK && ref)
        st = ck_compare_backends(b, ref, g, dtype, &res, &err);
    /* a nondeterministic algorithm policy: measure the noise it brings before blaming
     * checkpointing */
    bool noise = o->noise_floor || (o->algo && strcmp(o->algo, "fastest") == 0);
    bool mismatching = res.verdict == CK_VERDICT_MISMATCH ||
                       (ck_case_expect(c, dtype) == CK_EXPECT_IDENTICAL && res.verdict != CK_VERDICT_IDENTICAL);
    if (st == CK_OK && (o->force_bisect || noise || (o->bisect && mismatching))) {
        if (!o->quiet && (o->force_bisect || o->bisect))
            fprintf(errf, "%s: bisecting\n", c->name);
        ck_bisect_opts bo = {.noise_floor = true,
                             .localise = o->force_bisect || (o->bisect && mismatching)};
        st = ck_bisect(b, g, dtype, &bo, &res, &err);
    }
    if (st == CK_OK)
        ck_cli_take_algo_records(b, o->algo, &res);
    if (prog)
        ck_progress_done(prog);
    if (st != CK_OK) {
        /* with --quiet no progress line names the case: the message does */
        if (strncmp(err.msg, c->path, strlen(c->path)) != 0)
            ck_error_prefix(&err, "%s (%s)", c->path, ck_dtype_name(dtype));
        ck_cli_error_to(errf, err.msg);
        ck_result_free(&res);
        wr->rc = CK_EXIT_USAGE;
        wr->message = strdup(err.msg);
        wr->time_s = o->reproducible ? 0.0 : now_s() - t0;
        return;
    }
    if (o->quiet || (res.pass && !o->rows_given && !o->force_bisect)) {
        ck_report_print_oneline(out, &res);
    } else {
        ck_report_print_summary(out, &res, o->max_rows);
        ck_bisect_print_story(out, &res);
    }
    wr->rc = res.pass ? CK_EXIT_PASS : CK_EXIT_FAIL;
    if (!res.pass) {
        char lines[1][CK_REPORT_LINE_MAX];
        if (ck_report_failures(&res, lines, 1) == 1)
            wr->message = strdup(lines[0]);
    }

    /* the report: built once, written where asked, and kept for the summaries */
    char case_sha[65] = "", init_sha[65] = "";
    if (ck_sha256_file(c->path, case_sha, &err) != CK_OK)
        case_sha[0] = '\0';
    if (c->init_from && ck_sha256_file(c->init_from, init_sha, &err) != CK_OK)
        init_sha[0] = '\0';
    ck_run_metadata md = {
        .git_commit = ck_build_git_commit(), .cuda = ck_build_cuda(),
        .compiler = ck_build_compiler(), .cflags = ck_build_cflags(), .host = ctx->host,
        .started_utc = ctx->started, .command_line = o->command_line,
        .case_sha256 = case_sha[0] ? case_sha : NULL, .init_path = c->init_from,
        .init_sha256 = init_sha[0] ? init_sha : NULL, .reproducible = o->reproducible};
    ck_report_meta meta = {.tool_version = CK_VERSION, .case_path = c->path,
                           .include_wall_time = !o->reproducible, .run = &md};
    char *text = ck_report_json_string(&res, &meta);
    if (!text) {
        ck_cli_error_to(errf, "out of memory building the report");
        wr->rc = CK_EXIT_USAGE;
    } else {
        /* parsed back, so in-process and worker results are the same kind of tree */
        wr->report = cJSON_Parse(text);
    }
    if (text && o->report) {
        char *path = report_path(o->report, as_dir, c->name,
                                 w->several ? ck_dtype_name(dtype) : NULL);
        if (!path || ck_write_text_atomic(path, text, &err) != CK_OK) {
            ck_cli_error_to(errf, path ? err.msg : "out of memory writing the report path");
            wr->rc = CK_EXIT_USAGE;
        } else {
            if (!o->quiet)
                fprintf(out, "report: %s\n", path);
            if (as_dir)
                wr->report_file = strdup(base_name(path));
        }
        free(path);
    }
    free(text);
    ck_result_free(&res);
    wr->time_s = o->reproducible ? 0.0 : now_s() - t0;
}

/* ---- process-parallel runs (--jobs) ---------------------------------------------------- */

/* A worker's result travels as one JSON file: {rc, message, report_file, time_s, report}. */
static void worker_write(const char *path, const work_result *wr)
{
    ck_json_builder jb = {false};
    cJSON *root = cJSON_CreateObject();
    ck_error err;
    if (!root)
        return;
    ck_json_add_int(&jb, root, "rc", wr->rc);
    ck_json_add_string(&jb, root, "message", wr->message);
    ck_json_add_string(&jb, root, "report_file", wr->report_file);
    ck_json_add_real(&jb, root, "time_s", wr->time_s);
    if (wr->report)
        ck_json_attach(&jb, root, "report", cJSON_Duplicate(wr->report, true));
    if (!jb.failed)
        ck_json_write_file(root, path, "worker result", &err);
    cJSON_Delete(root);
}

static bool worker_read(const char *path, work_result *wr)
{
    char *text = NULL;
    size_t len = 0;
    ck_error err;
    memset(wr, 0, sizeof *wr);
    if (ck_read_file(path, (size_t)1 << 30, &text, &len, &err) != CK_OK)
        return false;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root)
        return false;
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(root, "rc");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(root, "message");
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "report_file");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(root, "time_s");
    wr->rc = cJSON_IsNumber(rc) ? rc->valueint : CK_EXIT_USAGE;
    wr->message = cJSON_IsString(msg) ? strdup(msg->valuestring) : NULL;
    wr->report_file = cJSON_IsString(rf) ? strdup(rf->valuestring) : NULL;
    wr->time_s = cJSON_IsNumber(ts) ? ts->valuedouble : 0.0;
    wr->report = cJSON_DetachItemFromObjectCaseSensitive(root, "report");
    cJSON_Delete(root);
    return true;
}

/* Copies a worker's captured stream to f (coloured where f is a terminal). */
static void replay(const char *path, FILE *f)
{
    char *text = NULL;
    size_t len = 0;
    ck_error err;
    if (ck_read_file(path, (size_t)1 << 30, &text, &len, &err) != CK_OK)
        return;
    ck_cli_color_write(f, text, len);
    free(text);
    fflush(f);
}

/* ---- the command -------------------------------------------------------------------- */

static uint32_t fnv1a(const char *a, const char *b)
{
    uint32_t h = 2166136261u;
    for (const char *p = a; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ '/') * 16777619u;
    for (const char *p = b; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h;
}

static const char *case_label(const ck_loaded_case *lc)
{
    if (lc->loaded && lc->cs.name)
        return lc->cs.name;
    return base_name(lc->file ? lc->file : "?");
}

/* The main judgement keeps memory bounded however long a run is (judge.h); bisection,
 * the noise floor and --verify-recompute still hold every step's tensors, so they are
 * refused beyond CK_FULL_RECORD_STEPS steps before anything runs. */
/* Asks the backends (b, and ref when given) before anything runs whether they run every
 * layer of each item's case in its dtype: an item they do not is skipped, with the reason
 * on stderr and in its result, and the rest run. When that leaves nothing to run (every
 * item that loaded is skipped) the request as a whole cannot run: CK_EXIT_USAGE. */
static int skip_unsupported(ck_backend *b, ck_backend *ref, ck_loaded_case *lc,
                            work_item *work, int total)
{
    int runnable = 0, skipped = 0;
    ck_error err;
    for (int k = 0; k < total; k++) {
        ck_loaded_case *c = &lc[work[k].li];
        if (!c->built)
            continue;
        if (!ck_cli_supported(b, &c->g, work[k].dtype, &err) ||
            (ref && !ck_cli_supported(ref, &c->g, work[k].dtype, &err))) {
            fprintf(stderr, "ckpt-harness: %s (skipped)\n", err.msg);
            work[k].skip = true;
            snprintf(work[k].skip_msg, sizeof work[k].skip_msg, "%s", err.msg);
            skipped++;
        } else {
            runnable++;
        }
    }
    if (skipped && !runnable) {
        fprintf(stderr, "ckpt-harness: nothing to run: the %s backend does not run any of "
                        "the requested case/dtype combinations (skipped above)\n",
                b->name);
        return CK_EXIT_USAGE;
    }
    return CK_EXIT_PASS;
}

static int preflight_long_runs(const ck_run_opts *o, const ck_loaded_case *lc,
                               const work_item *work, int total)
{
    bool noise = o->noise_floor || (o->algo && strcmp(o->algo, "fastest") == 0);
    const char *what = o->force_bisect ? "bisect" : o->bisect ? "--bisect"
                       : noise ? (o->noise_floor ? "--noise-floor" : "--algo fastest (a noise floor)")
                       : o->verify_recompute ? "--verify-recompute" : NULL;
    if (!what)
        return CK_EXIT_PASS;
    for (int k = 0; k < total; k++) {
        const ck_loaded_case *c = &lc[work[k].li];
        if (c->built && c->cs.steps > CK_FULL_RECORD_STEPS) {
            ck_cli_errorf("%s: %s keeps every step's tensors: at most %d steps (the case trains "
                          "%d; lower it with --steps)", c->cs.path, what, CK_FULL_RECORD_STEPS,
                          c->cs.steps);
            return CK_EXIT_USAGE;
        }
    }
    return CK_EXIT_PASS;
}

/* Everything a run will write, checked before any case runs, so a bad output path costs
 * nothing and no input is overwritten: report files (their directory created when --report
 * names one, as documented), dump folders (missing or empty), and case names unique per
 * output folder (two cases named alike would write the same report and dump paths). */
static int preflight_outputs(const ck_run_opts *o, const ck_loaded_case *lc,
                             const work_item *work, int total, bool as_dir)
{
    ck_error err;
    if ((o->report && as_dir) || o->dump) {
        for (int k = 0; k < total; k++)
            for (int m = 0; m < k; m++) {
                const ck_loaded_case *x = &lc[work[k].li], *y = &lc[work[m].li];
                if (x != y && x->built && y->built && strcmp(x->cs.name, y->cs.name) == 0) {
                    ck_cli_errorf("%s and %s: both cases are named \"%s\"; their reports and "
                                  "dumps would overwrite each other (names must be unique per "
                                  "output folder)", y->cs.path, x->cs.path, x->cs.name);
                    return CK_EXIT_USAGE;
                }
            }
    }
    if (o->report && as_dir && ck_mkdir_p(o->report, &err) != CK_OK) {
        ck_cli_errorf("--report: %s", err.msg);
        return CK_EXIT_USAGE;
    }
    for (int k = 0; k < total; k++) {
        const ck_loaded_case *c = &lc[work[k].li];
        if (!c->built)
            continue;
        const char *suffix = work[k].several ? ck_dtype_name(work[k].dtype) : NULL;
        if (o->report) {
            char *path = report_path(o->report, as_dir, c->cs.name, suffix);
            ck_status st = path ? ck_output_file_check(path, "--report", &err)
                                : ck_fail(&err, CK_ERR_NOMEM, "out of memory");
            free(path);
            if (st != CK_OK) {
                ck_cli_error(err.msg);
                return CK_EXIT_USAGE;
            }
        }
        if (o->dump) {
            char dir[4096];
            dump_dir_of(o->dump, c->cs.name, suffix, dir, sizeof dir);
            if (ck_output_dir_check(dir, "--dump", &err) != CK_OK) {
                ck_cli_error(err.msg);
                return CK_EXIT_USAGE;
            }
        }
    }
    return CK_EXIT_PASS;
}

int ck_cmd_run(const ck_run_opts *o)
{
    ck_error err;
    ck_dtype cli_dtypes[CK_MAX_PRECISIONS];
    int n_cli_dtypes = 0;
    if (o->dtype && !parse_dtype_list(o->dtype, cli_dtypes, &n_cli_dtypes)) {
        ck_cli_errorf("--dtype %s: expected a comma-separated list of fp32, fp16, bf16 (each "
                      "once)", o->dtype);
        return CK_EXIT_USAGE;
    }
    run_context ctx;
    memset(&ctx, 0, sizeof ctx);
    if (gethostname(ctx.host, sizeof ctx.host - 1) != 0)
        snprintf(ctx.host, sizeof ctx.host, "unknown");
    time_t now = time(NULL);
    struct tm tmv;
    if (gmtime_r(&now, &tmv))
        strftime(ctx.started, sizeof ctx.started, "%Y-%m-%dT%H:%M:%SZ", &tmv);

    ck_loaded_case *lc = NULL;
    int n = 0;
    int rc = ck_cli_load_cases_ex(o->paths, o->n_paths, o, o->keep_going, &lc, &n);
    if (rc != CK_EXIT_PASS)
        return rc;

    /* the matrix: filtered, indexed, then this shard's part */
    int cap = 0;
    for (int i = 0; i < n; i++)
        cap += lc[i].built ? (n_cli_dtypes ? n_cli_dtypes : lc[i].cs.n_precisions) : 1;
    work_item *work = calloc((size_t)cap + 1, sizeof *work);
    if (!work) {
        fprintf(stderr, "ckpt-harness: out of memory\n");
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }
    int total = 0, index = 0;
    for (int i = 0; i < n; i++) {
        if (o->filter && fnmatch(o->filter, case_label(&lc[i]), 0) != 0)
            continue;
        const ck_dtype *dts = n_cli_dtypes ? cli_dtypes : lc[i].cs.precisions;
        int nd = lc[i].built ? (n_cli_dtypes ? n_cli_dtypes : lc[i].cs.n_precisions) : 1;
        for (int d = 0; d < nd; d++) {
            work_item w = {.li = i, .dtype = lc[i].built ? dts[d] : CK_F32, .index = index++,
                           .several = nd > 1};
            if (o->shard_n > 0 &&
                fnv1a(case_label(&lc[i]), lc[i].built ? ck_dtype_name(w.dtype) : "-") %
                        (uint32_t)o->shard_n != (uint32_t)(o->shard_i - 1))
                continue;
            work[total++] = w;
        }
    }
    if (index == 0) {
        fprintf(stderr, "ckpt-harness: --filter %s matches no case\n", o->filter ? o->filter : "");
        free(work);
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }

    bool as_dir = false;
    if (o->report) {
        struct stat sb;
        /* FILE.json (any case of the suffix) is a file; anything else a directory */
        size_t rl = strlen(o->report);
        bool json_suffix = rl > 5 && strcasecmp(o->report + rl - 5, ".json") == 0;
        as_dir = ck_cli_ends_with(o->report, "/") || !json_suffix ||
                 (stat(o->report, &sb) == 0 && S_ISDIR(sb.st_mode));
        if (!as_dir && total > 1 && work[0].li != work[total - 1].li) {
            ck_cli_errorf("--report %s: a .json file takes one case; give a directory for %d "
                          "cases", o->report, n);
            free(work);
            ck_cli_free_cases(lc, n);
            return CK_EXIT_USAGE;
        }
    }
    /* every output checked (and the report folder made) before anything runs */
    if (preflight_long_runs(o, lc, work, total) != CK_EXIT_PASS ||
        preflight_outputs(o, lc, work, total, as_dir) != CK_EXIT_PASS) {
        free(work);
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }
    for (int i = 0; i < n; i++) {
        if (!lc[i].built)
            continue;
        char notes[4][CK_CASE_NOTE_MAX];
        int nn = ck_case_unused_settings(&lc[i].cs, n_cli_dtypes ? cli_dtypes : lc[i].cs.precisions,
                                         n_cli_dtypes ? n_cli_dtypes : lc[i].cs.n_precisions, notes, 4);
        for (int k = 0; k < nn; k++)
            ck_cli_note(notes[k]);
    }

    ck_backend *b = NULL, *ref = NULL;
    if (!ck_cli_create_backend(o->backend, o->device, o->algo, o->threads, &b) ||
        (o->against &&
         !ck_cli_create_backend(o->against, o->device, NULL,
                                ck_backend_has_threads(o->against) ? o->threads : 0, &ref))) {
        if (b)
            b->destroy(b);
        free(work);
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }

    if (skip_unsupported(b, ref, lc, work, total) != CK_EXIT_PASS) {
        b->destroy(b);
        if (ref)
            ref->destroy(ref);
        free(work);
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }

    work_result *res = calloc((size_t)total + 1, sizeof *res);
    bool *done = calloc((size_t)total + 1, sizeof *done);
    char tmpdir[] = "/tmp/ckpt-harness-jobs.XXXXXX";
    int jobs = o->jobs > 1 ? o->jobs : 1;
    if (jobs > 1 && !mkdtemp(tmpdir)) {
        fprintf(stderr, "ckpt-harness: --jobs: cannot make a temporary folder: %s\n", strerror(errno));
        jobs = 1;
    }
    if (!res || !done) {
        fprintf(stderr, "ckpt-harness: out of memory\n");
        free(res);
        free(done);
        free(work);
        b->destroy(b);
        if (ref)
            ref->destroy(ref);
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }

    /* items that need no run: load errors and skips */
    for (int k = 0; k < total; k++) {
        ck_loaded_case *c = &lc[work[k].li];
        if (!c->built) {
            res[k].rc = CK_EXIT_USAGE;
            res[k].message = strdup(c->error ? c->error : "the case did not load");
            done[k] = true;
        } else if (work[k].skip) {
            res[k].rc = -1;
            res[k].message = strdup(work[k].skip_msg);
            done[k] = true;
        }
    }

    ck_progress prog;
    ck_progress_init(&prog, o->quiet, total);
    int emitted = 0;
    pid_t *pids = calloc((size_t)total + 1, sizeof *pids);
    int running = 0, next = 0;
    for (;;) {
        /* emit, in case order, whatever has finished */
        while (emitted < total && (done[emitted] || jobs == 1)) {
            int k = emitted;
            ck_loaded_case *c = &lc[work[k].li];
            if (!o->quiet && k > 0)
                printf("\n");
            const char *dname = c->built ? ck_dtype_name(work[k].dtype) : "-";
            if (jobs == 1 && !done[k]) {
                ck_progress_case(&prog, k + 1, case_label(c), c->file, dname);
                fflush(stdout);
                /* through a buffer: colour on a terminal, long lines wrapped at 80 columns */
                char *buf = NULL;
                size_t blen = 0;
                FILE *mem = open_memstream(&buf, &blen);
                run_one(o, b, ref, &c->g, &work[k], &ctx, as_dir, mem ? mem : stdout, stderr, &prog,
                        &res[k]);
                if (mem) {
                    fclose(mem);
                    ck_cli_color_write(stdout, buf, blen);
                    free(buf);
                }
                done[k] = true;
            } else {
                bool tty = prog.tty;
                prog.tty = false; /* finished already: the plain line */
                ck_progress_case(&prog, k + 1, case_label(c), c->file, dname);
                prog.tty = tty;
                if (jobs > 1 && c->built && !work[k].skip) {
                    char p[sizeof tmpdir + 64];
                    fflush(stdout);
                    snprintf(p, sizeof p, "%s/%d.err", tmpdir, k);
                    replay(p, stderr);
                    snprintf(p, sizeof p, "%s/%d.out", tmpdir, k);
                    replay(p, stdout);
                }
                if (!c->built && o->quiet)
                    printf("ERROR %s: %s\n", case_label(c), res[k].message ? res[k].message : "");
                else if (!c->built)
                    printf("ERROR %s: did not load (see above)\n", case_label(c));
                else if (work[k].skip)
                    printf("SKIP %s %s: %s\n", case_label(c), ck_dtype_name(work[k].dtype),
                           work[k].skip_msg);
            }
            fflush(stdout);
            emitted++;
        }
        if (emitted == total)
            break;
        /* start workers up to --jobs */
        while (running < jobs && next < total) {
            int k = next++;
            if (done[k])
                continue;
            fflush(stdout);
            fflush(stderr);
            pid_t pid = fork();
            if (pid == 0) {
                char p[sizeof tmpdir + 64];
                snprintf(p, sizeof p, "%s/%d.out", tmpdir, k);
                FILE *out = fopen(p, "w");
                snprintf(p, sizeof p, "%s/%d.err", tmpdir, k);
                FILE *errf = fopen(p, "w");
                if (!out || !errf)
                    _exit(3);
                work_result wr;
                run_one(o, b, ref, &lc[work[k].li].g, &work[k], &ctx, as_dir, out, errf, NULL, &wr);
                snprintf(p, sizeof p, "%s/%d.json", tmpdir, k);
                worker_write(p, &wr);
                fclose(out);
                fclose(errf);
                _exit(0);
            }
            if (pid < 0) {
                res[k].rc = CK_EXIT_USAGE;
                res[k].message = strdup("fork failed");
                fprintf(stderr, "ckpt-harness: fork: %s\n", strerror(errno));
                done[k] = true;
                continue;
            }
            pids[k] = pid;
            running++;
        }
        if (running == 0)
            continue;
        int status;
        pid_t pid = wait(&status);
        if (pid < 0)
            break;
        for (int k = 0; k < total; k++) {
            if (pids[k] != pid)
                continue;
            char p[sizeof tmpdir + 64];
            snprintf(p, sizeof p, "%s/%d.json", tmpdir, k);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !worker_read(p, &res[k])) {
                res[k].rc = CK_EXIT_USAGE;
                res[k].message = strdup("the worker process died");
                fprintf(stderr, "ckpt-harness: %s (%s): the worker process died\n",
                        case_label(&lc[work[k].li]), ck_dtype_name(work[k].dtype));
            }
            done[k] = true;
            pids[k] = 0;
            running--;
        }
    }
    if (jobs > 1) {
        for (int k = 0; k < total; k++) {
            static const char *const ext[] = {"out", "err", "json"};
            for (int e = 0; e < 3; e++) {
                char p[sizeof tmpdir + 64];
                snprintf(p, sizeof p, "%s/%d.%s", tmpdir, k, ext[e]);
                unlink(p);
            }
        }
        rmdir(tmpdir);
    }

    /* the set every summary writer reads */
    ck_run_set set = {.reproducible = o->reproducible};
    set.command = strdup(o->force_bisect ? "bisect" : "run");
    int passed = 0, failed = 0, errors = 0, skipped = 0;
    for (int k = 0; k < total; k++) {
        ck_loaded_case *c = &lc[work[k].li];
        ck_item_status stt = res[k].rc == -1 ? CK_ITEM_SKIPPED
                             : res[k].rc == CK_EXIT_PASS ? CK_ITEM_PASS
                             : res[k].rc == CK_EXIT_FAIL ? CK_ITEM_FAIL : CK_ITEM_ERROR;
        passed += stt == CK_ITEM_PASS;
        failed += stt == CK_ITEM_FAIL;
        errors += stt == CK_ITEM_ERROR;
        skipped += stt == CK_ITEM_SKIPPED;
        char bname[32];
        snprintf(bname, sizeof bname, "%s", o->backend ? o->backend : "cpu");
        ck_run_item it = {.index = work[k].index, .case_name = (char *)case_label(c),
                          .case_file = c->file, .dtype = (char *)(c->built ? ck_dtype_name(work[k].dtype) : "-"),
                          .backend = bname, .status = stt, .message = res[k].message,
                          .report_file = res[k].report_file, .report = res[k].report,
                          .time_s = res[k].time_s};
        res[k].report = NULL;
        if (!ck_run_set_add(&set, &it, &err))
            errors++;
        free(res[k].message);
        free(res[k].report_file);
    }
    if (total > 1 || !o->quiet)
    {
        char skip_text[32] = "";
        if (skipped)
            snprintf(skip_text, sizeof skip_text, ", %d skipped", skipped);
        printf("%d passed, %d failed%s%s\n", passed, failed, skip_text,
               errors ? " (and errors above)" : "");
    }
    int out_rc = ck_cli_write_run_outputs(&set, as_dir ? o->report : NULL, o->junit, o->html,
                                          o->quiet);
    b->destroy(b);
    if (ref)
        ref->destroy(ref);
    ck_run_set_free(&set);
    free(pids);
    free(res);
    free(done);
    free(work);
    ck_cli_free_cases(lc, n);
    if (errors || out_rc != CK_EXIT_PASS)
        return CK_EXIT_USAGE;
    return failed ? CK_EXIT_FAIL : CK_EXIT_PASS;
}

int ck_cmd_bisect(const ck_run_opts *o)
{
    ck_run_opts bo = *o;
    bo.force_bisect = true;
    return ck_cmd_run(&bo);
}
