/*
 * `ckpt-harness judge DIR`: a framework's runs (python/ckpt_harness writes them) judged by
 * the harness's own rules, one item per checkpointed run (mode x dtype x rank), with the
 * JSON report, summary.json, JUnit and HTML of `run`.
 */
#include "harness/cli/help_text.h"
#include "harness/cli/cmd_judge.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/build_info.h"
#include "harness/cli/commands.h"
#include "harness/cli/messages.h"
#include "harness/cli/run_outputs.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/verify/framework_judge.h"
#include "reports/framework_report.h"
#include "reports/run_set.h"

static const char *usage_judge =
    "usage: ckpt-harness judge DIR [options]\n"
    "\n"
    "Judges the runs a framework driver wrote into DIR (DIR/judge.json and its run\n"
    "folders; python3 -m ckpt_harness.torch verify writes them) with the harness's rules:\n"
    "the control (the plain run twice) must be bitwise identical; every checkpointed run\n"
    "must be bitwise identical to the plain run of its dtype; every recomputed module\n"
    "output must equal its original; a low-precision run is judged against fp32 by the\n"
    "calibrated rule; under torch.distributed every rank's gradients must equal rank 0's.\n"
    "Where runs part it names the step, tensor, module and cause.\n"
    "\n"
    "options:\n"
    "  --report DIR       summary.json and one JSON report per item (schema\n"
    "                     ckpt-harness/report) into DIR (created if missing)\n"
    "  --junit FILE       JUnit XML, one testcase per item\n"
    "  --html FILE        the HTML page\n"
    "  --min-saving F     fail an item whose saved-tensor memory saving is below F (0..1);\n"
    "                     replaces judge.json's min_saving\n"
    "  --no-bisect        do not localise or explain a difference\n"
    "  --rows N           tensor rows per failing item (default 10, -1 all)\n"
    "  --quiet            one line per item\n"
    "  --reproducible     accepted as for run; judge never writes a host, clock or wall\n"
    "                     time (its reports are reproducible as they are)\n"
    "  --temporary-input  DIR is deleted after the judge (the drivers pass it for their\n"
    "                     own temporary folder): outputs name the model's source file,\n"
    "                     or no file, instead of DIR/judge.json\n"
    "\n"
    "exit codes: 0 every item passed, 1 a failure, 2 bad input or usage.\n"
    "The layout of DIR is documented in docs/interop.md, \"Judge input\".\n";

typedef struct {
    const char *dir, *report, *junit, *html;
    ck_fw_judge_opts jo;
    int rows;
    bool quiet, reproducible, temporary_input;
} judge_opts;

static int usage_fail(const char *fmt, const char *arg)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg);
    fprintf(stderr, "ckpt-harness judge: %s (see 'ckpt-harness judge --help')\n", msg);
    return CK_EXIT_USAGE;
}

static int parse(int argc, char **argv, judge_opts *o)
{
    enum { OPT_REPORT = 256, OPT_JUNIT, OPT_HTML, OPT_MIN, OPT_NOBISECT, OPT_ROWS, OPT_QUIET,
           OPT_REPRO, OPT_TEMP };
    static const struct option longopts[] = {
        {"report", required_argument, 0, OPT_REPORT}, {"junit", required_argument, 0, OPT_JUNIT},
        {"html", required_argument, 0, OPT_HTML}, {"min-saving", required_argument, 0, OPT_MIN},
        {"no-bisect", no_argument, 0, OPT_NOBISECT}, {"rows", required_argument, 0, OPT_ROWS},
        {"quiet", no_argument, 0, OPT_QUIET}, {"reproducible", no_argument, 0, OPT_REPRO},
        {"temporary-input", no_argument, 0, OPT_TEMP},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->jo.bisect = true;
    o->rows = 10;
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_REPORT: o->report = optarg; break;
        case OPT_JUNIT: o->junit = optarg; break;
        case OPT_HTML: o->html = optarg; break;
        case OPT_NOBISECT: o->jo.bisect = false; break;
        case OPT_QUIET: o->quiet = true; break;
        case OPT_REPRO: o->reproducible = true; break;
        case OPT_TEMP: o->temporary_input = true; break;
        case OPT_MIN:
            errno = 0;
            o->jo.min_saving = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o->jo.min_saving >= 0.0) ||
                !(o->jo.min_saving < 1.0))
                return usage_fail("--min-saving %s: expected a number in [0, 1)", optarg);
            o->jo.has_min_saving = true;
            break;
        case OPT_ROWS: {
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || v < -1 || v > 1000000)
                return usage_fail("--rows %s: expected an integer >= -1", optarg);
            o->rows = (int)v;
            break;
        }
        case 'h': ck_cli_write_help(stdout, usage_judge); return -1;
        case ':': return usage_fail("%s needs a value", argv[optind - 1]);
        default: return usage_fail("unknown option %s", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_fail("%s", "no dump folder given");
    if (optind + 1 < argc)
        return usage_fail("expected one dump folder, got also %s", argv[optind + 1]);
    o->dir = argv[optind];
    for (const char **p = (const char *[]){o->report, o->junit, o->html, NULL}; *p; p++)
        if (!**p)
            return usage_fail("%s", "an output path is empty");
    return CK_EXIT_PASS;
}

static char *report_file_name(const ck_fw_item *it, int k)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf, "%02d-%s.json", k, it->label);
    if (n < 0)
        return NULL;
    for (char *p = buf; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-' || *p == '_'))
            *p = '_';
    return strdup(buf);
}

/* One item: printed, its report built (and written into the report folder), added to set. */
static int emit_item(const judge_opts *o, const ck_fw_input *in, const ck_fw_item *it, int k,
                     ck_run_set *set)
{
    ck_error err;
    ck_fw_print_item(stdout, in, it, o->rows, o->quiet);
    ck_run_metadata md = {
        .git_commit = ck_build_git_commit(), .cuda = ck_build_cuda(),
        .compiler = ck_build_compiler(), .cflags = ck_build_cflags(),
        .command_line = NULL, .case_sha256 = NULL, .reproducible = true};
    ck_report_meta meta = {.tool_version = CK_VERSION, .case_path = ck_fw_input_shown_path(in),
                           .include_wall_time = false, .run = &md};
    cJSON *rep = ck_fw_report_to_json(in, it, &meta);
    if (!rep) {
        ck_cli_error("out of memory building the report");
        return CK_EXIT_USAGE;
    }
    /* valid UTF-8 whatever the dump's names held (json_build.h) */
    char *file = report_file_name(it, k), *text = ck_json_print_clean(rep, NULL);
    int rc = CK_EXIT_PASS;
    if (o->report && file && text) {
        size_t n = strlen(o->report) + strlen(file) + 2;
        char *path = malloc(n);
        if (path)
            snprintf(path, n, "%s/%s", o->report, file);
        if (!path || ck_write_text_atomic(path, text, &err) != CK_OK) {
            ck_cli_error(path ? err.msg : "out of memory");
            rc = CK_EXIT_USAGE;
        } else if (!o->quiet) {
            printf("report: %s\n", path);
        }
        free(path);
    }
    /* parsed back, as run does: the builder writes numbers as raw text, which the JUnit,
     * HTML and summary writers read as numbers only after a parse */
    cJSON *parsed = text ? cJSON_Parse(text) : NULL;
    cJSON_Delete(rep);
    if (!parsed) {
        ck_cli_error("out of memory building the report");
        free(text);
        free(file);
        return CK_EXIT_USAGE;
    }
    char why[CK_REPORT_LINE_MAX];
    ck_fw_first_failure(it, why, sizeof why);
    ck_run_item item = {.index = k, .case_name = (char *)it->label,
                        .case_file = (char *)ck_fw_input_shown_path(in),
                        .dtype = (char *)ck_dtype_name(it->res.dtype), .backend = in->framework,
                        .status = it->pass ? CK_ITEM_PASS : CK_ITEM_FAIL,
                        .message = why[0] ? why : NULL,
                        .report_file = o->report ? file : NULL, .report = parsed, .time_s = 0.0};
    if (!ck_run_set_add(set, &item, &err)) {
        ck_cli_error(err.msg);
        rc = CK_EXIT_USAGE;
    }
    free(text);
    free(file);
    return rc;
}

int ck_main_judge(int argc, char **argv)
{
    judge_opts o;
    int rc = parse(argc, argv, &o);
    if (rc != CK_EXIT_PASS)
        return rc < 0 ? CK_EXIT_PASS : rc;
    ck_error err;
    ck_fw_input in;
    if (ck_fw_input_load(o.dir, &in, &err) != CK_OK) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    in.input_temporary = o.temporary_input;
    ck_fw_model model;
    ck_fw_item *items = NULL;
    int n = 0;
    ck_run_set set = {0};
    set.command = strdup("judge");
    set.reproducible = true;
    if (ck_fw_model_build(&in, &o.jo, &model, &err) != CK_OK) {
        ck_cli_error(err.msg);
        ck_fw_input_free(&in);
        return CK_EXIT_USAGE;
    }
    if (o.report && ck_mkdir_p(o.report, &err) != CK_OK) {
        ck_cli_error(err.msg);
        rc = CK_EXIT_USAGE;
        goto out;
    }
    if (ck_fw_judge(&in, &model, &o.jo, &items, &n, &err) != CK_OK) {
        ck_cli_error(err.msg);
        rc = CK_EXIT_USAGE;
        goto out;
    }
    for (int i = 0; i < in.n_notes && !o.quiet; i++)
        printf("note: %s\n", in.notes[i]);
    for (int k = 0; k < n && rc == CK_EXIT_PASS; k++)
        rc = emit_item(&o, &in, &items[k], k, &set);
    if (rc == CK_EXIT_PASS) {
        rc = ck_cli_write_run_outputs(&set, o.report, o.junit, o.html, o.quiet);
        if (rc == CK_EXIT_PASS)
            rc = ck_run_set_exit_code(&set);
        char totals[256];
        ck_run_set_totals_line(&set, totals, sizeof totals);
        printf("judge %s: %s\n", in.model_name, totals);
    }
out:
    ck_run_set_free(&set);
    ck_fw_items_free(items, n);
    ck_fw_model_free(&model);
    ck_fw_input_free(&in);
    return rc;
}
