/*
 * `ckpt-harness import MODEL.onnx -o CASE.json [--weights FILE]`, and the import behind
 * `run MODEL.onnx` (cmd_import.h): the ONNX model becomes a case file and a safetensors file
 * of its weights, which the case names as init.from.
 */
#include "harness/cli/help_text.h"
#include "harness/cli/cmd_import.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/cli/cli_options.h"
#include "harness/cli/import_check.h"
#include "harness/cli/messages.h"
#include "harness/core/text.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/io/safetensors.h"
#include "harness/model/graph.h"
#include "harness/model/onnx_import.h"
#include "harness/model/params.h"

static const char *usage_import =
    "usage: ckpt-harness import MODEL.onnx -o CASE.json [options]\n"
    "\n"
    "Imports an ONNX model (torch.onnx.export, tf2onnx) as a case: every node becomes a case\n"
    "layer named after its module (\"features.3.weight\" -> layer features_3), the\n"
    "initializers become the layers' weights, written to a safetensors file that the case\n"
    "loads with init.from. A node that cannot be mapped exactly is one line naming it, and\n"
    "exit 2: the imported case is never silently a different model (docs/onnx.md).\n"
    "\n"
    "options:\n"
    "  -o, --output FILE      the case file to write (required)\n"
    "  --weights FILE         the weights file (default: the case file with .safetensors)\n"
    "  --name NAME            the case's name (default: the model file's stem)\n"
    "  --loss L               mean (default), sum, mse, cross_entropy\n"
    "  --class-dim D          cross_entropy: the dim of the classes (default: -1 for token\n"
    "                         inputs and (N, L, V) outputs, else 1)\n"
    "  --ignore-index I       cross_entropy: targets equal to I count for nothing\n"
    "  --optimizer O          sgd (default), momentum, adam, adamw\n"
    "  --lr X                 learning rate (default 0.01)\n"
    "  --steps N              training steps (default 1)\n"
    "  --checkpoint SPEC      sqrt (default), every:K, or segments:FIRST..LAST,... (layer\n"
    "                         names as imported)\n"
    "  --precision P          fp32 (default), fp16, bf16\n"
    "  --check-against REF    REF.npz (or .safetensors) from the framework: its input, its\n"
    "                         train-mode output and optionally loss and grad.<param>; the\n"
    "                         import is refused unless the case reproduces them (relative\n"
    "                         L2 <= 1e-4, fp32; docs/onnx.md)\n"
    "\n"
    "`ckpt-harness run MODEL.onnx` imports in memory with the same defaults (--checkpoint,\n"
    "--loss and --optimizer apply there too).\n";

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* "dir/model.onnx" -> "model", cut to a valid case name. */
static void stem_name(const char *path, char *out, size_t n)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t k = 0;
    for (const char *p = b; *p && k + 1 < n && k < 63; p++) {
        if (strcmp(p, ".onnx") == 0)
            break;
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        out[k++] = ok ? c : '_';
    }
    out[k] = '\0';
    if (!k)
        snprintf(out, n, "onnx_model");
}

/* Writes the set's tensors to path as one safetensors file. */
static ck_status write_weights(const ck_tensorset *w, const char *path, ck_error *err)
{
    return ck_safetensors_write(path, w->n, w->t, err);
}

/* The imported case as text, parsed and built with its weights' shapes: a case is written
 * (or run) only when its graph builds and every weight fits it. Messages name the model
 * (label), never a file not yet written. */
static ck_status check_imported(const cJSON *root, const ck_tensorset *w, const char *label,
                                ck_case *cs, char **text_out, ck_error *err)
{
    char *text = ck_json_print_clean(root, NULL); /* a path may not be UTF-8 */
    if (!text)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    ck_graph g;
    memset(&g, 0, sizeof g);
    ck_status st = ck_case_parse(text, strlen(text), label, cs, err);
    if (st == CK_OK && (st = ck_graph_build(cs, &g, err)) == CK_OK) {
        st = ck_graph_check_weight_set(&g, w, label, err);
        ck_graph_free(&g);
    }
    if (st != CK_OK) {
        ck_error_prefix(err, "%s: the imported case does not build", label);
        free(text);
        return st;
    }
    *text_out = text;
    return CK_OK;
}

ck_status ck_cli_import_case(const char *onnx_path, const ck_onnx_import_opts *io, ck_case *cs,
                             char **tmp_weights, int *tmp_slot, ck_error *err)
{
    ck_onnx_model m;
    ck_tensorset w;
    cJSON *root = NULL;
    char *text = NULL, *tmpl = NULL;
    ck_case check;
    memset(&check, 0, sizeof check);
    *tmp_weights = NULL;
    *tmp_slot = -1;
    memset(cs, 0, sizeof *cs);
    ck_tensorset_init(&w);
    ck_status st = ck_onnx_load(onnx_path, &m, err);
    if (st != CK_OK)
        return st;
    const char *td = ck_cli_temp_dir();
    size_t tn = strlen(td) + 64;
    if (!(tmpl = malloc(tn))) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    snprintf(tmpl, tn, "%s/ckpt-harness-onnx-XXXXXX.safetensors", td);
    /* no signal between creating the file and registering it for the signal cleanup */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, &old);
    int fd = mkstemps(tmpl, 12);
    if (fd >= 0 && (*tmp_slot = ck_temp_file_register(tmpl)) < 0)
        unlink(tmpl);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (fd < 0) {
        st = ck_fail(err, CK_ERR_IO, "%s: cannot create a temporary weights file in %s "
                     "(TMPDIR): %s", onnx_path, td, strerror(errno));
        goto out;
    }
    close(fd);
    /* removed on SIGINT/SIGTERM/SIGHUP as well as at the end */
    if (*tmp_slot < 0) {
        st = ck_fail(err, CK_ERR_IO, "%s: the temporary weights file's path is too long "
                     "(TMPDIR %s)", onnx_path, td);
        goto out;
    }
    *tmp_weights = tmpl;
    tmpl = NULL;
    char name[64];
    stem_name(onnx_path, name, sizeof name);
    ck_onnx_import_opts o = *io;
    o.name = o.name ? o.name : name;
    o.weights_path = *tmp_weights;
    if ((st = ck_onnx_import(&m, onnx_path, &o, &root, &w, err)) != CK_OK ||
        (st = check_imported(root, &w, onnx_path, &check, &text, err)) != CK_OK ||
        (st = write_weights(&w, *tmp_weights, err)) != CK_OK)
        goto out;
    st = ck_case_parse(text, strlen(text), onnx_path, cs, err);
out:
    free(tmpl);
    free(text);
    ck_case_free(&check);
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    ck_onnx_free(&m);
    if (st != CK_OK && *tmp_weights) {
        unlink(*tmp_weights);
        ck_temp_file_release(*tmp_slot);
        *tmp_slot = -1;
        free(*tmp_weights);
        *tmp_weights = NULL;
    }
    return st;
}

enum { OPT_WEIGHTS = 300, OPT_NAME, OPT_LOSS, OPT_OPTIMIZER, OPT_LR, OPT_STEPS, OPT_CHECKPOINT,
       OPT_PRECISION, OPT_CLASS_DIM, OPT_IGNORE_INDEX, OPT_CHECK_AGAINST };

bool ck_cli_parse_class_dim(const char *arg, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end || v < -CK_MAX_DIMS || v >= CK_MAX_DIMS)
        return false;
    *out = (int)v;
    return true;
}

bool ck_cli_parse_ignore_index(const char *arg, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (errno || end == arg || *end || v < INT32_MIN || v > INT32_MAX)
        return false;
    *out = v;
    return true;
}

/* --lr X (lr true) or --steps N into io; false (the message printed) on a bad value. */
static bool parse_lr_steps(ck_onnx_import_opts *io, bool lr, const char *arg)
{
    char *end;
    errno = 0;
    if (lr) {
        io->lr = strtod(arg, &end);
        if (errno || end == arg || *end || !(io->lr > 0) || io->lr > 1e300) {
            fprintf(stderr, "ckpt-harness import: --lr %s: expected a positive number\n", arg);
            return false;
        }
        return true;
    }
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end || v < 1 || v > 1000000) {
        fprintf(stderr, "ckpt-harness import: --steps %s: expected an integer from 1 to "
                        "1000000\n", arg);
        return false;
    }
    io->steps = (int)v;
    return true;
}

static int import_model(const char *model, const char *output, const char *weights,
                        const char *check_against, ck_onnx_import_opts *opts);

int ck_main_import(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, 0, 'o'},          {"weights", required_argument, 0, OPT_WEIGHTS},
        {"name", required_argument, 0, OPT_NAME},       {"loss", required_argument, 0, OPT_LOSS},
        {"optimizer", required_argument, 0, OPT_OPTIMIZER}, {"lr", required_argument, 0, OPT_LR},
        {"steps", required_argument, 0, OPT_STEPS},     {"checkpoint", required_argument, 0, OPT_CHECKPOINT},
        {"precision", required_argument, 0, OPT_PRECISION}, {"help", no_argument, 0, 'h'},
        {"class-dim", required_argument, 0, OPT_CLASS_DIM},
        {"ignore-index", required_argument, 0, OPT_IGNORE_INDEX},
        {"check-against", required_argument, 0, OPT_CHECK_AGAINST},
        {0, 0, 0, 0}};
    const char *output = NULL, *weights = NULL, *check_against = NULL;
    ck_onnx_import_opts io;
    memset(&io, 0, sizeof io);
    int c;
    while ((c = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': output = optarg; break;
        case OPT_WEIGHTS: weights = optarg; break;
        case OPT_NAME: io.name = optarg; break;
        case OPT_LOSS: io.loss = optarg; break;
        case OPT_OPTIMIZER: io.optimizer = optarg; break;
        case OPT_CHECKPOINT: io.checkpoint = optarg; break;
        case OPT_PRECISION: io.precision = optarg; break;
        case OPT_CHECK_AGAINST: check_against = optarg; break;
        case OPT_CLASS_DIM:
            if (!(io.has_class_dim = ck_cli_parse_class_dim(optarg, &io.class_dim))) {
                fprintf(stderr, "ckpt-harness import: --class-dim %s: expected an integer from "
                                "%d to %d\n", optarg, -CK_MAX_DIMS, CK_MAX_DIMS - 1);
                return CK_EXIT_USAGE;
            }
            break;
        case OPT_IGNORE_INDEX:
            if (!(io.has_ignore_index = ck_cli_parse_ignore_index(optarg, &io.ignore_index))) {
                fprintf(stderr, "ckpt-harness import: --ignore-index %s: expected a 32-bit "
                                "integer\n", optarg);
                return CK_EXIT_USAGE;
            }
            break;
        case OPT_LR:
        case OPT_STEPS:
            if (!parse_lr_steps(&io, c == OPT_LR, optarg))
                return CK_EXIT_USAGE;
            break;
        case 'h': ck_cli_write_help(stdout, usage_import); return CK_EXIT_PASS;
        case ':':
            fprintf(stderr, "ckpt-harness import: %s needs a value (see 'ckpt-harness import "
                            "--help')\n", argv[optind - 1]);
            return CK_EXIT_USAGE;
        default:
            fprintf(stderr, "ckpt-harness import: unknown option %s (see 'ckpt-harness import "
                            "--help')\n", argv[optind - 1]);
            return CK_EXIT_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "ckpt-harness import: expected one MODEL.onnx (see 'ckpt-harness import "
                        "--help')\n");
        return CK_EXIT_USAGE;
    }
    if (!output || !ends_with(output, ".json")) {
        fprintf(stderr, "ckpt-harness import: -o CASE.json is required (a .json file)\n");
        return CK_EXIT_USAGE;
    }
    return import_model(argv[optind], output, weights, check_against, &io);
}

/* Imports MODEL into OUTPUT and its weights (WEIGHTS, or OUTPUT's stem + .safetensors):
 * everything is checked (the outputs, the graph with the weights' shapes, the reference
 * of --check-against) before the first byte is written. */
static int import_model(const char *model, const char *output, const char *weights,
                        const char *check_against, ck_onnx_import_opts *opts)
{
    ck_onnx_import_opts io = *opts;
    char name[64];
    /* the weights' path as given (never cut), and as the case names it: relative to the
     * case file's folder when they sit beside it, else absolute */
    char *wpath = NULL, *wrel = NULL, *cwd = NULL;
    size_t ol = strlen(output);
    if (weights)
        wpath = strdup(weights);
    else if ((wpath = malloc(ol - 5 + sizeof ".safetensors")))
        snprintf(wpath, ol - 5 + sizeof ".safetensors", "%.*s.safetensors", (int)(ol - 5), output);
    const char *slash = strrchr(output, '/');
    size_t dir_len = slash ? (size_t)(slash - output + 1) : 0;
    if (wpath && strncmp(wpath, output, dir_len) == 0 && !strchr(wpath + dir_len, '/'))
        wrel = strdup(wpath + dir_len);
    else if (wpath && wpath[0] == '/')
        wrel = strdup(wpath);
    else if (wpath && (cwd = getcwd(NULL, 0)) &&
             (wrel = malloc(strlen(cwd) + strlen(wpath) + 2)))
        sprintf(wrel, "%s/%s", cwd, wpath);
    free(cwd);
    if (!wpath || !wrel) {
        fprintf(stderr, "ckpt-harness import: %s\n",
                wpath ? "cannot read the working directory" : "out of memory");
        free(wpath);
        free(wrel);
        return CK_EXIT_USAGE;
    }
    stem_name(model, name, sizeof name);
    io.name = io.name ? io.name : name;
    io.weights_path = wrel;

    ck_error err;
    ck_onnx_model m;
    ck_tensorset w;
    cJSON *root = NULL;
    ck_tensorset_init(&w);
    int rc = CK_EXIT_USAGE;
    char *text = NULL;
    ck_case check;
    memset(&check, 0, sizeof check);
    ck_onnx_origins origins = {0};
    char *summary = NULL;
    io.origins = check_against ? &origins : NULL;
    bool loaded = false;
    /* the model is read first (an input no output may replace), then both outputs are
     * checked: writable, no input, not one file under two names */
    if (ck_onnx_load(model, &m, &err) != CK_OK)
        goto out;
    loaded = true;
    if (ck_output_file_check(output, "-o", &err) != CK_OK ||
        ck_output_file_check(wpath, "--weights", &err) != CK_OK)
        goto out;
    if (ck_same_output_file(output, wpath)) {
        ck_fail(&err, CK_ERR_INPUT, "-o %s and --weights %s name the same file: the case would "
                "overwrite its own weights", output, wpath);
        goto out;
    }
    if (ck_onnx_import(&m, model, &io, &root, &w, &err) != CK_OK ||
        check_imported(root, &w, model, &check, &text, &err) != CK_OK)
        goto out;
    if (check_against &&
        ck_cli_import_check(root, &w, &origins, model, check_against, &summary, &err) != CK_OK)
        goto out;
    if (write_weights(&w, wpath, &err) != CK_OK)
        goto out;
    if (ck_json_write_file(root, output, "case", &err) != CK_OK) {
        unlink(wpath); /* no weights without their case */
        goto out;
    }
    char sm[1024], so[1024], sw[1024];
    printf("import %s: %d nodes -> %d layers, %d weight tensors\ncase: %s\nweights: %s\n",
           ck_text_escape(model, sm, sizeof sm), m.n_nodes,
           cJSON_GetArraySize(cJSON_GetObjectItem(root, "layers")), w.n,
           ck_text_escape(output, so, sizeof so), ck_text_escape(wpath, sw, sizeof sw));
    if (summary)
        printf("%s\n", summary);
    rc = CK_EXIT_PASS;
out:
    free(summary);
    ck_onnx_origins_free(&origins);
    if (rc != CK_EXIT_PASS)
        ck_cli_error(err.msg);
    ck_case_free(&check);
    free(text);
    free(wpath);
    free(wrel);
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    if (loaded)
        ck_onnx_free(&m);
    return rc;
}
