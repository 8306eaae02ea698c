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
#include "harness/cli/memory_limit.h"
#include "harness/cli/messages.h"
#include "harness/cli/progress.h"
#include "harness/cli/run_outputs.h"
#include "harness/core/text.h"
#include "harness/io/file_digest.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/io/wire.h"
#include "harness/verify/result_wire.h"
#include "harness/verify/run_plan.h"
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
/* Longer --dump folders are refused before any run (their files' paths must fit). */
#define CK_DUMP_DIR_MAX 3000

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
    cJSON *report;   /* the report tree, built from the typed result */
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

/* ---- one case x dtype --------------------------------------------------------------- */

/* What the options ask of the run plan for one case x dtype. */
static ck_run_request request_of(const ck_run_opts *o, ck_dtype dtype, ck_progress *prog)
{
    ck_run_request rq = {
        .run = {.dump_activations = o->dump_activations,
                .dump_activation_grads = o->dump_activation_grads,
                .dump_optimizer = o->dump_optimizer,
                .progress = prog && !prog->quiet ? ck_progress_update : NULL,
                .progress_user = prog,
                .precision_check = (ck_precision_check)o->precision_check},
        .verify_recompute = o->verify_recompute,
        /* a nondeterministic algorithm policy: measure the noise it brings before blaming
         * checkpointing */
        .noise_floor = o->noise_floor || (o->algo && strcmp(o->algo, "fastest") == 0),
        .bisect = o->bisect,
        .force_bisect = o->force_bisect,
        .plain = o->plain_segmentwise ? CK_PLAIN_SEGMENTWISE : CK_PLAIN_RUN};
    if (o->has_rtol || o->has_atol || o->has_rel_l2) {
        /* unset elementwise parts default to the dtype's torch.testing tolerance */
        rq.run.precision_override = (ck_precision_override){
            .set = true,
            .rtol = o->has_rtol ? o->rtol : dtype == CK_BF16 ? 1.6e-2 : 1e-3,
            .atol = o->has_atol ? o->atol : 1e-5,
            .rel_l2 = o->has_rel_l2 ? o->rel_l2 : -1.0};
    }
    return rq;
}

/* The CLI's words at stage boundaries: where the dump went, that bisect starts. */
typedef struct {
    const ck_run_opts *o;
    const ck_case *c;
    const char *dump_dir;
    FILE *out, *errf;
    ck_progress *prog; /* the live line on a terminal (NULL: none) */
} stage_words;

static void on_stage(void *user, ck_stage stage, bool done)
{
    stage_words *w = user;
    if (stage == CK_STAGE_PLAIN_VS_CHECKPOINTED && done && w->dump_dir && !w->o->quiet)
        fprintf(w->out, "dump: %s/manifest.json\n", w->dump_dir);
    /* on a terminal the live line says which stage runs; elsewhere bisect gets a line */
    static const char *const live[CK_STAGE_KINDS] = {
        [CK_STAGE_VERIFY_RECOMPUTE] = "verifying the recomputation",
        [CK_STAGE_VS_BACKEND] = "against the other backend", [CK_STAGE_BISECT] = "bisecting"};
    if (!done && w->prog && w->prog->tty && live[stage]) {
        ck_progress_stage(w->prog, live[stage]);
        return;
    }
    if (stage == CK_STAGE_BISECT && !done && !w->o->quiet && (w->o->force_bisect || w->o->bisect))
        fprintf(w->errf, "%s: bisecting\n", w->c->name);
}

/* Runs the plan of one item and prints its text (the summary, or the error). Returns
 * CK_OK with *oc holding the typed result, or the failure (already printed). */
static ck_status execute_item(const ck_run_opts *o, ck_backend *b, ck_backend *ref,
                              const ck_graph *g, const work_item *w, FILE *out, FILE *errf,
                              ck_progress *prog, ck_run_outcome *oc, char **message)
{
    const ck_case *c = g->cs;
    ck_error err;
    ck_run_request rq = request_of(o, w->dtype, prog);
    char dump_dir[4096];
    if (o->dump) {
        dump_dir_of(o->dump, c->name, w->several ? ck_dtype_name(w->dtype) : NULL, dump_dir,
                    sizeof dump_dir);
        rq.run.dump_dir = dump_dir;
    }
    ck_run_plan plan;
    ck_run_plan_make(c, w->dtype, &rq, ref != NULL, &plan);
    const char *limit_what;
    rq.memory_limit = ck_cli_memory_limit(o, &limit_what); /* checked by the preflight */
    if (ck_run_plan_fit(&plan, g, &rq, limit_what, &err) != CK_OK) {
        ck_cli_error_to(errf, err.msg);
        *message = strdup(err.msg);
        return CK_ERR_INPUT;
    }
    if (!o->quiet)
        ck_cli_note_segmentwise(errf, c, &plan, &rq, limit_what);
    stage_words words = {.o = o, .c = c, .dump_dir = rq.run.dump_dir, .out = out, .errf = errf,
                         .prog = prog};
    ck_cli_clear_algo_records(b);
    ck_status st = ck_run_plan_execute(&plan, &rq, b, ref, g, on_stage, &words, oc, &err);
    if (st == CK_OK)
        ck_cli_take_algo_records(b, o->algo, &oc->res);
    if (prog)
        ck_progress_done(prog);
    if (st != CK_OK) {
        /* with --quiet no progress line names the case: the message does */
        if (strncmp(err.msg, c->path, strlen(c->path)) != 0)
            ck_error_prefix(&err, "%s (%s)", c->path, ck_dtype_name(w->dtype));
        ck_cli_error_to(errf, err.msg);
        ck_result_free(&oc->res);
        *message = strdup(err.msg);
        return st;
    }
    if (o->quiet || (oc->res.pass && !o->rows_given && !o->force_bisect)) {
        ck_report_print_oneline(out, &oc->res);
    } else {
        ck_report_print_summary(out, &oc->res, o->max_rows);
        ck_bisect_print_story(out, &oc->res);
    }
    return CK_OK;
}

/* The report tree of a finished item: its run metadata and the typed result. */
static cJSON *report_tree(const ck_run_opts *o, const run_context *ctx, const ck_result *res)
{
    const ck_case *c = res->cs;
    ck_error err;
    char case_sha[65] = "", init_sha[65] = "";
    if (ck_sha256_file(c->path, case_sha, &err) != CK_OK)
        case_sha[0] = '\0';
    if (c->init_from && ck_sha256_file(c->init_from, init_sha, &err) != CK_OK)
        init_sha[0] = '\0';
    ck_run_metadata md = {
        .git_commit = ck_build_git_commit(), .cuda = ck_build_cuda(),
        .compiler = ck_build_compiler(), .cflags = ck_build_cflags(), .host = ctx->host,
        .started_utc = ctx->started, .command_line = o->command_line,
        .case_sha256 = case_sha[0] ? case_sha : NULL,
        .init_path = c->init_shown ? c->init_shown : c->init_from,
        .init_sha256 = init_sha[0] ? init_sha : NULL, .reproducible = o->reproducible};
    ck_report_meta meta = {.tool_version = CK_VERSION, .case_path = c->path,
                           .include_wall_time = !o->reproducible, .run = &md};
    return ck_report_to_json(res, &meta);
}

/* rc and the first failure line of a finished item. */
static void item_verdict(const ck_result *res, work_result *wr)
{
    wr->rc = res->pass ? CK_EXIT_PASS : CK_EXIT_FAIL;
    if (!res->pass) {
        char lines[1][CK_REPORT_LINE_MAX];
        if (ck_report_failures(res, lines, 1) == 1)
            wr->message = strdup(lines[0]);
    }
}

/* Writes the item's JSON report where --report says and tells where; keep: the tree (its
 * numbers made cJSON numbers, as the summary writers read them) goes into wr->report. */
static void write_item_report(const ck_run_opts *o, const run_context *ctx, const ck_result *res,
                              const work_item *w, bool as_dir, bool keep, FILE *out, FILE *errf,
                              work_result *wr)
{
    ck_error err;
    cJSON *tree = report_tree(o, ctx, res);
    /* valid UTF-8 whatever the case's path or names held (json_build.h) */
    char *text = tree ? ck_json_print_clean(tree, NULL) : NULL;
    if (!text) {
        ck_cli_error_to(errf, "out of memory building the report");
        wr->rc = CK_EXIT_USAGE;
    }
    if (text && o->report) {
        char *path = report_path(o->report, as_dir, res->cs->name,
                                 w->several ? ck_dtype_name(w->dtype) : NULL);
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
    if (keep && tree && text) {
        ck_json_numbers_from_raw(tree);
        wr->report = tree;
    } else {
        cJSON_Delete(tree);
    }
}

/* One item in this process: run, print, report. */
static void run_one(const ck_run_opts *o, ck_backend *b, ck_backend *ref, const ck_graph *g,
                    const work_item *w, const run_context *ctx, bool as_dir, FILE *out,
                    FILE *errf, ck_progress *prog, work_result *wr)
{
    double t0 = now_s();
    ck_run_outcome oc;
    memset(wr, 0, sizeof *wr);
    if (execute_item(o, b, ref, g, w, out, errf, prog, &oc, &wr->message) != CK_OK) {
        wr->rc = CK_EXIT_USAGE;
        wr->time_s = o->reproducible ? 0.0 : now_s() - t0;
        return;
    }
    item_verdict(&oc.res, wr);
    write_item_report(o, ctx, &oc.res, w, as_dir, true, out, errf, wr);
    ck_result_free(&oc.res);
    wr->time_s = o->reproducible ? 0.0 : now_s() - t0;
}

/* ---- process-parallel runs (--jobs) ---------------------------------------------------- */

/* A worker's result travels as one file in the wire encoding (harness/io/wire.h):
 * "CKWORKER", u32 version, rc, message, report_file, time_s, whether a result follows,
 * and the typed result (harness/verify/result_wire.h). The parent builds the report tree
 * from the typed result, as for its own runs. */
#define WORKER_MAGIC "CKWORKER"
#define WORKER_VERSION 1

static void worker_write(const char *path, const work_result *wr, const ck_result *res)
{
    ck_wire_out w = {0};
    ck_wire_put_bytes(&w, WORKER_MAGIC, 8);
    ck_wire_put_u32(&w, WORKER_VERSION);
    ck_wire_put_i64(&w, wr->rc);
    ck_wire_put_str(&w, wr->message);
    ck_wire_put_str(&w, wr->report_file);
    ck_wire_put_f64(&w, wr->time_s);
    ck_wire_put_u8(&w, res != NULL);
    if (res)
        ck_result_encode(res, &w);
    FILE *f = w.failed ? NULL : fopen(path, "wb");
    if (f) {
        bool ok = fwrite(w.buf, 1, w.len, f) == w.len;
        if (fclose(f) != 0 || !ok)
            unlink(path); /* the parent reports a dead worker */
    }
    free(w.buf);
}

/* Reads a worker's file back; the result, when one came, is decoded against the item's
 * graph and turned into the report tree. False when the file is missing or malformed. */
static bool worker_read(const char *path, const ck_run_opts *o, const run_context *ctx,
                        const ck_graph *g, work_result *wr, char *why, size_t why_n)
{
    char *data = NULL;
    size_t len = 0;
    ck_error err;
    memset(wr, 0, sizeof *wr);
    if (ck_read_file(path, (size_t)1 << 30, &data, &len, &err) != CK_OK) {
        snprintf(why, why_n, "%s", err.msg);
        return false;
    }
    ck_wire_in r;
    ck_wire_in_init(&r, data, len);
    char magic[8];
    ck_wire_get_bytes(&r, magic, sizeof magic, "magic");
    if (memcmp(magic, WORKER_MAGIC, 8) != 0 || ck_wire_get_u32(&r, "version") != WORKER_VERSION)
        ck_wire_fail(&r, "header", "not a worker result");
    wr->rc = (int)ck_wire_get_range(&r, -1, CK_EXIT_USAGE, "rc");
    wr->message = ck_wire_get_str(&r, (size_t)1 << 20, NULL, "message");
    wr->report_file = ck_wire_get_str(&r, 4096, NULL, "report_file");
    wr->time_s = ck_wire_get_f64(&r, "time_s");
    bool has_result = ck_wire_get_bool(&r, "result");
    ck_result res;
    memset(&res, 0, sizeof res);
    if (has_result && !r.failed && ck_result_decode(&r, g, &res, &err) == CK_OK && ck_wire_done(&r)) {
        wr->report = report_tree(o, ctx, &res);
        if (wr->report)
            ck_json_numbers_from_raw(wr->report);
    } else if (!has_result) {
        ck_wire_done(&r);
    }
    ck_result_free(&res);
    free(data);
    if (r.failed || (has_result && !wr->report)) {
        snprintf(why, why_n, "%s", r.failed ? r.why : "out of memory building the report");
        free(wr->message);
        free(wr->report_file);
        cJSON_Delete(wr->report);
        memset(wr, 0, sizeof *wr);
        return false;
    }
    return true;
}

/* A worker: runs item k with its output captured in the job folder, then exits. */
static void worker_main(const ck_run_opts *o, ck_backend *b, ck_backend *ref, const ck_graph *g,
                        const work_item *w, const run_context *ctx, bool as_dir,
                        const char *tmpdir, int k)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%d.out", tmpdir, k);
    FILE *out = fopen(p, "w");
    snprintf(p, sizeof p, "%s/%d.err", tmpdir, k);
    FILE *errf = fopen(p, "w");
    if (!out || !errf)
        _exit(3);
    double t0 = now_s();
    work_result wr;
    memset(&wr, 0, sizeof wr);
    ck_run_outcome oc;
    bool ran = execute_item(o, b, ref, g, w, out, errf, NULL, &oc, &wr.message) == CK_OK;
    if (ran) {
        item_verdict(&oc.res, &wr);
        write_item_report(o, ctx, &oc.res, w, as_dir, false, out, errf, &wr);
    } else {
        wr.rc = CK_EXIT_USAGE;
    }
    wr.time_s = o->reproducible ? 0.0 : now_s() - t0;
    snprintf(p, sizeof p, "%s/%d.wire", tmpdir, k);
    worker_write(p, &wr, ran ? &oc.res : NULL);
    fclose(out);
    fclose(errf);
    _exit(0);
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

/* The main judgement keeps memory bounded however long a run is (judge.h); bisection,
 * the noise floor and --verify-recompute still hold every step's tensors, so they are
 * refused beyond CK_FULL_RECORD_STEPS steps before anything runs; so is a case x dtype
 * predicted not to fit --memory-limit (memory_limit.h). */
static int preflight_long_runs(const ck_run_opts *o, const ck_loaded_case *lc,
                               const work_item *work, int total)
{
    for (int k = 0; k < total; k++) {
        const ck_loaded_case *c = &lc[work[k].li];
        if (!c->built)
            continue;
        ck_run_request rq = request_of(o, work[k].dtype, NULL);
        rq.run.dump_dir = o->dump; /* only whether there is one */
        ck_run_plan p;
        ck_run_plan_make(&c->cs, work[k].dtype, &rq, o->against != NULL, &p);
        int mrc = ck_cli_fit_run_plan(o, c, &rq, &p);
        if (mrc != CK_EXIT_PASS)
            return mrc;
        if (!p.too_long)
            continue;
        const char *what = p.keeps == CK_KEEPS_BISECT ? "bisect"
                           : p.keeps == CK_KEEPS_BISECT_ON_MISMATCH ? "--bisect"
                           : p.keeps == CK_KEEPS_NOISE_FLOOR
                               ? (o->noise_floor ? "--noise-floor" : "--algo fastest (a noise floor)")
                               : "--verify-recompute";
        ck_cli_errorf("%s: %s keeps every step's tensors: at most %d steps (the case trains "
                      "%d; lower it with --steps)", c->cs.path, what, CK_FULL_RECORD_STEPS,
                      c->cs.steps);
        return CK_EXIT_USAGE;
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
    /* the dump's files are <dump>/<case>[.<dtype>]/<run>/step_NNNN/<name>.safetensors in
     * fixed buffers of 4096 bytes: a longer folder is refused here, never cut */
    if (o->dump && strlen(o->dump) > CK_DUMP_DIR_MAX) {
        ck_cli_errorf("--dump: the folder's path is %zu bytes; at most %d are supported",
                      strlen(o->dump), CK_DUMP_DIR_MAX);
        return CK_EXIT_USAGE;
    }
    if (o->report && as_dir && ck_mkdir_p(o->report, &err) != CK_OK) {
        ck_cli_errorf("--report: %s", err.msg);
        return CK_EXIT_USAGE;
    }
    /* summary.json, --junit, --html and the step summary: found unwritable now, not after
     * every run */
    if (ck_cli_check_run_outputs(o->report && as_dir ? o->report : NULL, o->junit, o->html) !=
        CK_EXIT_PASS)
        return CK_EXIT_USAGE;
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

/* Everything one `run` command holds, freed in one place. */
typedef struct {
    const ck_run_opts *o;
    run_context ctx;
    ck_dtype dtypes[CK_MAX_PRECISIONS]; /* --dtype, or none: each case's own */
    int n_dtypes;
    ck_loaded_case *lc;
    int n;
    work_item *work;
    int total;
    int matrix_size; /* items of the whole (filtered) matrix, every shard's */
    bool as_dir;         /* --report names a folder */
    ck_backend *b, *ref; /* ref: --against */
    work_result *res;
    bool *done;
    pid_t *pids;
    char tmpdir[2048];
    int jobs;
} run_state;

static void run_state_free(run_state *s)
{
    if (s->b)
        s->b->destroy(s->b);
    if (s->ref)
        s->ref->destroy(s->ref);
    for (int k = 0; s->res && k < s->total; k++) {
        free(s->res[k].message);
        free(s->res[k].report_file);
        cJSON_Delete(s->res[k].report);
    }
    free(s->res);
    free(s->done);
    free(s->pids);
    free(s->work);
    if (s->lc)
        ck_cli_free_cases(s->lc, s->n);
    memset(s, 0, sizeof *s);
}

static void start_context(run_context *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    if (gethostname(ctx->host, sizeof ctx->host - 1) != 0)
        snprintf(ctx->host, sizeof ctx->host, "unknown");
    time_t now = time(NULL);
    struct tm tmv;
    if (gmtime_r(&now, &tmv))
        strftime(ctx->started, sizeof ctx->started, "%Y-%m-%dT%H:%M:%SZ", &tmv);
}

/* The matrix: filtered, indexed, then this shard's part. */
static int build_matrix(run_state *s)
{
    const ck_run_opts *o = s->o;
    int cap = 0;
    for (int i = 0; i < s->n; i++)
        cap += s->lc[i].built ? (s->n_dtypes ? s->n_dtypes : s->lc[i].cs.n_precisions) : 1;
    s->work = calloc((size_t)cap + 1, sizeof *s->work);
    if (!s->work) {
        fprintf(stderr, "ckpt-harness: out of memory\n");
        return CK_EXIT_USAGE;
    }
    int index = 0;
    for (int i = 0; i < s->n; i++) {
        const ck_loaded_case *c = &s->lc[i];
        if (o->filter && fnmatch(o->filter, case_label(c), 0) != 0)
            continue;
        const ck_dtype *dts = s->n_dtypes ? s->dtypes : c->cs.precisions;
        int nd = c->built ? (s->n_dtypes ? s->n_dtypes : c->cs.n_precisions) : 1;
        for (int d = 0; d < nd; d++) {
            work_item w = {.li = i, .dtype = c->built ? dts[d] : CK_F32, .index = index++,
                           .several = nd > 1};
            if (o->shard_n > 0 &&
                fnv1a(case_label(c), c->built ? ck_dtype_name(w.dtype) : "-") %
                        (uint32_t)o->shard_n != (uint32_t)(o->shard_i - 1))
                continue;
            s->work[s->total++] = w;
        }
    }
    if (index == 0) {
        fprintf(stderr, "ckpt-harness: --filter %s matches no case\n", o->filter ? o->filter : "");
        return CK_EXIT_USAGE;
    }
    s->matrix_size = index;
    return CK_EXIT_PASS;
}

/* --report FILE.json (any case of the suffix) is a file; anything else a directory. */
static int choose_report_mode(run_state *s)
{
    const ck_run_opts *o = s->o;
    if (!o->report)
        return CK_EXIT_PASS;
    struct stat sb;
    size_t rl = strlen(o->report);
    bool json_suffix = rl > 5 && strcasecmp(o->report + rl - 5, ".json") == 0;
    s->as_dir = ck_cli_ends_with(o->report, "/") || !json_suffix ||
                (stat(o->report, &sb) == 0 && S_ISDIR(sb.st_mode));
    if (!s->as_dir && s->total > 1 && s->work[0].li != s->work[s->total - 1].li) {
        ck_cli_errorf("--report %s: a .json file takes one case; give a directory for %d "
                      "cases", o->report, s->n);
        return CK_EXIT_USAGE;
    }
    return CK_EXIT_PASS;
}

/* One note per unused setting, naming every case that sets it (a run over a folder of
 * canaries in fp32 would otherwise repeat the same note for each). */
static void note_unused_settings(const run_state *s)
{
    enum { MAX_KINDS = 8, MAX_NOTE = 1024 };
    char what[MAX_KINDS][CK_CASE_NOTE_MAX], who[MAX_KINDS][MAX_NOTE];
    int n_kinds = 0, n_who[MAX_KINDS] = {0};
    for (int i = 0; i < s->n; i++) {
        const ck_loaded_case *c = &s->lc[i];
        if (!c->built)
            continue;
        char notes[4][CK_CASE_NOTE_MAX];
        int nn = ck_case_unused_settings(&c->cs, s->n_dtypes ? s->dtypes : c->cs.precisions,
                                         s->n_dtypes ? s->n_dtypes : c->cs.n_precisions, notes, 4);
        size_t pl = strlen(c->cs.path);
        for (int k = 0; k < nn; k++) {
            bool prefixed = strncmp(notes[k], c->cs.path, pl) == 0 &&
                            strncmp(notes[k] + pl, ": ", 2) == 0;
            const char *setting = prefixed ? notes[k] + pl + 2 : notes[k];
            int j = 0;
            while (j < n_kinds && strcmp(what[j], setting) != 0)
                j++;
            if (j == n_kinds && (!prefixed || n_kinds == MAX_KINDS)) {
                ck_cli_note(notes[k]);
                continue;
            }
            if (j == n_kinds) {
                snprintf(what[j], sizeof what[j], "%s", setting);
                who[j][0] = '\0';
                n_kinds++;
            }
            size_t used = strlen(who[j]);
            snprintf(who[j] + used, sizeof who[j] - used, "%s%s", n_who[j] ? ", " : "",
                     c->cs.path);
            n_who[j]++;
        }
    }
    for (int j = 0; j < n_kinds; j++) {
        char msg[CK_CASE_NOTE_MAX + MAX_NOTE + 16];
        int w = n_who[j] == 1
                    ? snprintf(msg, sizeof msg, "%s: %s", who[j], what[j])
                    : snprintf(msg, sizeof msg, "%s (%d cases: %s)", what[j], n_who[j], who[j]);
        if (w < 0 || (size_t)w >= sizeof msg) /* a very long list of cases: say it was cut */
            memcpy(msg + sizeof msg - 4, "...", 4);
        ck_cli_note(msg);
    }
}

/* The backends, and every layer supported in every dtype before anything runs: the
 * combinations that are not are skipped (skip_unsupported). */
static int open_backends(run_state *s)
{
    const ck_run_opts *o = s->o;
    if (!ck_cli_create_backend(o->backend, o->device, o->algo, o->threads, &s->b) ||
        (o->against &&
         !ck_cli_create_backend(o->against, o->device, NULL,
                                ck_backend_has_threads(o->against) ? o->threads : 0, &s->ref)))
        return CK_EXIT_USAGE;
    return skip_unsupported(s->b, s->ref, s->lc, s->work, s->total);
}

/* Result slots, the job folder, and the items that need no run: load errors and skips. */
static int prepare_results(run_state *s)
{
    s->res = calloc((size_t)s->total + 1, sizeof *s->res);
    s->done = calloc((size_t)s->total + 1, sizeof *s->done);
    s->pids = calloc((size_t)s->total + 1, sizeof *s->pids);
    int tl = snprintf(s->tmpdir, sizeof s->tmpdir, "%s/ckpt-harness-jobs.XXXXXX",
                      ck_cli_temp_dir());
    s->jobs = s->o->jobs > 1 ? s->o->jobs : 1;
    if (s->jobs > 1 && (tl < 0 || (size_t)tl >= sizeof s->tmpdir || !mkdtemp(s->tmpdir))) {
        fprintf(stderr, "ckpt-harness: --jobs: cannot make a temporary folder: %s\n", strerror(errno));
        s->jobs = 1;
    }
    if (!s->res || !s->done || !s->pids) {
        fprintf(stderr, "ckpt-harness: out of memory\n");
        return CK_EXIT_USAGE;
    }
    for (int k = 0; k < s->total; k++) {
        ck_loaded_case *c = &s->lc[s->work[k].li];
        if (!c->built) {
            s->res[k].rc = CK_EXIT_USAGE;
            s->res[k].message = strdup(c->error ? c->error : "the case did not load");
            s->done[k] = true;
        } else if (s->work[k].skip) {
            s->res[k].rc = -1;
            s->res[k].message = strdup(s->work[k].skip_msg);
            s->done[k] = true;
        }
    }
    return CK_EXIT_PASS;
}

/* Item k's output, in case order: run here (one job), or a finished item's lines. */
static void emit_item(run_state *s, ck_progress *prog, int k)
{
    const ck_run_opts *o = s->o;
    ck_loaded_case *c = &s->lc[s->work[k].li];
    if (!o->quiet && k > 0)
        printf("\n");
    const char *dname = c->built ? ck_dtype_name(s->work[k].dtype) : "-";
    if (s->jobs == 1 && !s->done[k]) {
        ck_progress_case(prog, k + 1, case_label(c), c->file, dname);
        fflush(stdout);
        /* through a buffer: colour on a terminal, long lines wrapped at 80 columns */
        char *buf = NULL;
        size_t blen = 0;
        FILE *mem = open_memstream(&buf, &blen);
        run_one(o, s->b, s->ref, &c->g, &s->work[k], &s->ctx, s->as_dir, mem ? mem : stdout,
                stderr, prog, &s->res[k]);
        if (mem) {
            fclose(mem);
            ck_cli_color_write(stdout, buf, blen);
            free(buf);
        }
        s->done[k] = true;
        return;
    }
    bool tty = prog->tty;
    prog->tty = false; /* finished already: the plain line */
    ck_progress_case(prog, k + 1, case_label(c), c->file, dname);
    prog->tty = tty;
    if (s->jobs > 1 && c->built && !s->work[k].skip) {
        char p[sizeof s->tmpdir + 64];
        fflush(stdout);
        snprintf(p, sizeof p, "%s/%d.err", s->tmpdir, k);
        replay(p, stderr);
        snprintf(p, sizeof p, "%s/%d.out", s->tmpdir, k);
        replay(p, stdout);
    }
    /* file names and messages are user text: escaped, on one line */
    char sl[512], sm[1024];
    ck_text_escape(case_label(c), sl, sizeof sl);
    if (!c->built && o->quiet)
        printf("ERROR %s: %s\n", sl,
               ck_text_escape(s->res[k].message ? s->res[k].message : "", sm, sizeof sm));
    else if (!c->built)
        printf("ERROR %s: did not load (see above)\n", sl);
    else if (s->work[k].skip)
        printf("SKIP %s %s: %s\n", sl, ck_dtype_name(s->work[k].dtype),
               ck_text_escape(s->work[k].skip_msg, sm, sizeof sm));
}

/* Starts workers up to --jobs. */
static void start_workers(run_state *s, int *running, int *next)
{
    while (*running < s->jobs && *next < s->total) {
        int k = (*next)++;
        if (s->done[k])
            continue;
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0)
            worker_main(s->o, s->b, s->ref, &s->lc[s->work[k].li].g, &s->work[k], &s->ctx,
                        s->as_dir, s->tmpdir, k);
        if (pid < 0) {
            s->res[k].rc = CK_EXIT_USAGE;
            s->res[k].message = strdup("fork failed");
            fprintf(stderr, "ckpt-harness: fork: %s\n", strerror(errno));
            s->done[k] = true;
            continue;
        }
        s->pids[k] = pid;
        (*running)++;
    }
}

/* Waits for one worker and takes its result. False when there is none to wait for. */
static bool reap_worker(run_state *s, int *running)
{
    int status;
    pid_t pid = wait(&status);
    if (pid < 0)
        return false;
    for (int k = 0; k < s->total; k++) {
        if (s->pids[k] != pid)
            continue;
        char p[sizeof s->tmpdir + 64];
        snprintf(p, sizeof p, "%s/%d.wire", s->tmpdir, k);
        const ck_loaded_case *c = &s->lc[s->work[k].li];
        char why[CK_ERROR_MAX + 64] = "";
        bool exited = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!exited || !worker_read(p, s->o, &s->ctx, &c->g, &s->res[k], why, sizeof why)) {
            /* say how it died: a signal (killed, out of memory, a crash) or its code */
            char msg[sizeof why + 96];
            if (exited)
                snprintf(msg, sizeof msg, "the worker's result is unreadable: %s", why);
            else if (WIFSIGNALED(status))
                snprintf(msg, sizeof msg, "the worker process was killed by signal %d (%s)",
                         WTERMSIG(status), strsignal(WTERMSIG(status)));
            else
                snprintf(msg, sizeof msg, "the worker process exited with status %d",
                         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            s->res[k].rc = CK_EXIT_USAGE;
            s->res[k].message = strdup(msg);
            ck_cli_errorf("%s (%s): %s", case_label(c), ck_dtype_name(s->work[k].dtype), msg);
        }
        s->done[k] = true;
        s->pids[k] = 0;
        (*running)--;
    }
    return true;
}

static void remove_job_files(const run_state *s)
{
    if (s->jobs <= 1)
        return;
    for (int k = 0; k < s->total; k++) {
        static const char *const ext[] = {"out", "err", "wire"};
        for (int e = 0; e < 3; e++) {
            char p[sizeof s->tmpdir + 64];
            snprintf(p, sizeof p, "%s/%d.%s", s->tmpdir, k, ext[e]);
            unlink(p);
        }
    }
    rmdir(s->tmpdir);
}

/* The job pool: items emitted in case order as they finish. */
static void run_pool(run_state *s)
{
    ck_progress prog;
    ck_progress_init(&prog, s->o->quiet, s->total);
    int emitted = 0, running = 0, next = 0;
    for (;;) {
        while (emitted < s->total && (s->done[emitted] || s->jobs == 1)) {
            emit_item(s, &prog, emitted);
            fflush(stdout);
            emitted++;
        }
        if (emitted == s->total)
            break;
        start_workers(s, &running, &next);
        if (running > 0 && !reap_worker(s, &running))
            break;
    }
    remove_job_files(s);
}

/* The set every summary writer reads, the totals line and the CI outputs. */
static int finish_run(run_state *s)
{
    const ck_run_opts *o = s->o;
    ck_error err;
    ck_run_set set = {.reproducible = o->reproducible, .matrix_size = s->matrix_size,
                      .shard = o->shard_n > 0 ? o->shard_i : 1,
                      .shards = o->shard_n > 0 ? o->shard_n : 1};
    set.command = strdup(o->force_bisect ? "bisect" : "run");
    int passed = 0, failed = 0, errors = 0, skipped = 0;
    for (int k = 0; k < s->total; k++) {
        ck_loaded_case *c = &s->lc[s->work[k].li];
        work_result *r = &s->res[k];
        ck_item_status stt = r->rc == -1 ? CK_ITEM_SKIPPED
                             : r->rc == CK_EXIT_PASS ? CK_ITEM_PASS
                             : r->rc == CK_EXIT_FAIL ? CK_ITEM_FAIL : CK_ITEM_ERROR;
        passed += stt == CK_ITEM_PASS;
        failed += stt == CK_ITEM_FAIL;
        errors += stt == CK_ITEM_ERROR;
        skipped += stt == CK_ITEM_SKIPPED;
        char bname[32];
        snprintf(bname, sizeof bname, "%s", o->backend ? o->backend : "cpu");
        ck_run_item it = {.index = s->work[k].index, .case_name = (char *)case_label(c),
                          .case_file = c->file,
                          .dtype = (char *)(c->built ? ck_dtype_name(s->work[k].dtype) : "-"),
                          .backend = bname, .status = stt, .message = r->message,
                          .report_file = r->report_file, .report = r->report,
                          .time_s = r->time_s};
        r->report = NULL; /* the set owns it now */
        if (!ck_run_set_add(&set, &it, &err))
            errors++;
    }
    if (s->total > 1 || !o->quiet) {
        char skip_text[32] = "";
        if (skipped)
            snprintf(skip_text, sizeof skip_text, ", %d skipped", skipped);
        printf("%d passed, %d failed%s%s\n", passed, failed, skip_text,
               errors ? " (and errors above)" : "");
    }
    int out_rc = ck_cli_write_run_outputs(&set, s->as_dir ? o->report : NULL, o->junit, o->html,
                                          o->quiet);
    ck_run_set_free(&set);
    if (errors || out_rc != CK_EXIT_PASS)
        return CK_EXIT_USAGE;
    return failed ? CK_EXIT_FAIL : CK_EXIT_PASS;
}

int ck_cmd_run(const ck_run_opts *o)
{
    run_state s;
    memset(&s, 0, sizeof s);
    s.o = o;
    if (o->dtype && !parse_dtype_list(o->dtype, s.dtypes, &s.n_dtypes)) {
        ck_cli_errorf("--dtype %s: expected a comma-separated list of fp32, fp16, bf16 (each "
                      "once)", o->dtype);
        return CK_EXIT_USAGE;
    }
    start_context(&s.ctx);
    int rc = ck_cli_load_cases_ex(o->paths, o->n_paths, o, o->keep_going, &s.lc, &s.n);
    if (rc != CK_EXIT_PASS)
        return rc;
    /* every output checked (and the report folder made) before anything runs */
    if ((rc = build_matrix(&s)) != CK_EXIT_PASS || (rc = choose_report_mode(&s)) != CK_EXIT_PASS ||
        preflight_long_runs(o, s.lc, s.work, s.total) != CK_EXIT_PASS ||
        preflight_outputs(o, s.lc, s.work, s.total, s.as_dir) != CK_EXIT_PASS) {
        run_state_free(&s);
        return CK_EXIT_USAGE;
    }
    note_unused_settings(&s);
    if ((rc = open_backends(&s)) != CK_EXIT_PASS || (rc = prepare_results(&s)) != CK_EXIT_PASS) {
        run_state_free(&s);
        return rc;
    }
    run_pool(&s);
    rc = finish_run(&s);
    run_state_free(&s);
    return rc;
}

int ck_cmd_bisect(const ck_run_opts *o)
{
    ck_run_opts bo = *o;
    bo.force_bisect = true;
    return ck_cmd_run(&bo);
}
