/*
 * `ckpt-harness import MODEL.onnx -o CASE.json [--weights FILE]`, and the import behind
 * `run MODEL.onnx` (cmd_import.h): the ONNX model becomes a case file and a safetensors file
 * of its weights, which the case names as init.from.
 */
#include "harness/cli/help_text.h"
#include "harness/cli/cmd_import.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/cli/cli_options.h"
#include "harness/cli/messages.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/io/safetensors.h"
#include "harness/model/onnx_import.h"

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
    "  --optimizer O          sgd (default), momentum, adam, adamw\n"
    "  --lr X                 learning rate (default 0.01)\n"
    "  --steps N              training steps (default 1)\n"
    "  --checkpoint SPEC      sqrt (default), every:K, or segments:FIRST..LAST,... (layer\n"
    "                         names as imported)\n"
    "  --precision P          fp32 (default), fp16, bf16\n"
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

ck_status ck_cli_import_case(const char *onnx_path, const ck_onnx_import_opts *io, ck_case *cs,
                             char **tmp_weights, ck_error *err)
{
    ck_onnx_model m;
    ck_tensorset w;
    cJSON *root = NULL;
    char *text = NULL;
    char tmpl[] = "/tmp/ckpt-harness-onnx-XXXXXX.safetensors";
    *tmp_weights = NULL;
    memset(cs, 0, sizeof *cs);
    ck_tensorset_init(&w);
    ck_status st = ck_onnx_load(onnx_path, &m, err);
    if (st != CK_OK)
        return st;
    int fd = mkstemps(tmpl, 12);
    if (fd < 0) {
        st = ck_fail(err, CK_ERR_IO, "%s: cannot create a temporary weights file: %s", onnx_path,
                     strerror(errno));
        goto out;
    }
    close(fd);
    if (!(*tmp_weights = strdup(tmpl))) {
        unlink(tmpl);
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    char name[64];
    stem_name(onnx_path, name, sizeof name);
    ck_onnx_import_opts o = *io;
    o.name = o.name ? o.name : name;
    o.weights_path = *tmp_weights;
    if ((st = ck_onnx_import(&m, onnx_path, &o, &root, &w, err)) != CK_OK ||
        (st = write_weights(&w, *tmp_weights, err)) != CK_OK)
        goto out;
    if (!(text = cJSON_Print(root))) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    st = ck_case_parse(text, strlen(text), onnx_path, cs, err);
out:
    free(text);
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    ck_onnx_free(&m);
    if (st != CK_OK && *tmp_weights) {
        unlink(*tmp_weights);
        free(*tmp_weights);
        *tmp_weights = NULL;
    }
    return st;
}

enum { OPT_WEIGHTS = 300, OPT_NAME, OPT_LOSS, OPT_OPTIMIZER, OPT_LR, OPT_STEPS, OPT_CHECKPOINT,
       OPT_PRECISION };

int ck_main_import(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, 0, 'o'},          {"weights", required_argument, 0, OPT_WEIGHTS},
        {"name", required_argument, 0, OPT_NAME},       {"loss", required_argument, 0, OPT_LOSS},
        {"optimizer", required_argument, 0, OPT_OPTIMIZER}, {"lr", required_argument, 0, OPT_LR},
        {"steps", required_argument, 0, OPT_STEPS},     {"checkpoint", required_argument, 0, OPT_CHECKPOINT},
        {"precision", required_argument, 0, OPT_PRECISION}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *output = NULL, *weights = NULL;
    ck_onnx_import_opts io;
    memset(&io, 0, sizeof io);
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': output = optarg; break;
        case OPT_WEIGHTS: weights = optarg; break;
        case OPT_NAME: io.name = optarg; break;
        case OPT_LOSS: io.loss = optarg; break;
        case OPT_OPTIMIZER: io.optimizer = optarg; break;
        case OPT_CHECKPOINT: io.checkpoint = optarg; break;
        case OPT_PRECISION: io.precision = optarg; break;
        case OPT_LR:
            errno = 0;
            io.lr = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(io.lr > 0) || io.lr > 1e300) {
                fprintf(stderr, "ckpt-harness import: --lr %s: expected a positive number\n", optarg);
                return CK_EXIT_USAGE;
            }
            break;
        case OPT_STEPS: {
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || v < 1 || v > 1000000) {
                fprintf(stderr, "ckpt-harness import: --steps %s: expected an integer from 1 to "
                                "1000000\n", optarg);
                return CK_EXIT_USAGE;
            }
            io.steps = (int)v;
            break;
        }
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
    const char *model = argv[optind];
    char wpath[2048], wrel[4200], name[64];
    if (weights) {
        snprintf(wpath, sizeof wpath, "%.2000s", weights);
    } else {
        snprintf(wpath, sizeof wpath, "%.*s.safetensors", (int)(strlen(output) - 5 > 2000 ? 2000 : strlen(output) - 5), output);
    }
    /* init.from is read relative to the case file's folder: name the weights from there when
     * they sit beside it, else by the path as given */
    const char *slash = strrchr(output, '/');
    size_t dir_len = slash ? (size_t)(slash - output + 1) : 0;
    if (strncmp(wpath, output, dir_len) == 0 && !strchr(wpath + dir_len, '/'))
        snprintf(wrel, sizeof wrel, "%s", wpath + dir_len);
    else if (wpath[0] == '/')
        snprintf(wrel, sizeof wrel, "%s", wpath);
    else {
        char cwd[2048];
        if (!getcwd(cwd, sizeof cwd)) {
            fprintf(stderr, "ckpt-harness import: cannot read the working directory\n");
            return CK_EXIT_USAGE;
        }
        snprintf(wrel, sizeof wrel, "%s/%s", cwd, wpath);
    }
    stem_name(model, name, sizeof name);
    io.name = io.name ? io.name : name;
    io.weights_path = wrel;

    ck_error err;
    ck_onnx_model m;
    ck_tensorset w;
    cJSON *root = NULL;
    ck_tensorset_init(&w);
    if (ck_onnx_load(model, &m, &err) != CK_OK) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    int rc = CK_EXIT_USAGE;
    char *text = NULL;
    ck_case check;
    memset(&check, 0, sizeof check);
    if (ck_onnx_import(&m, model, &io, &root, &w, &err) != CK_OK)
        goto out;
    /* the case must parse before anything is written */
    if (!(text = cJSON_Print(root))) {
        ck_fail(&err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (ck_case_parse(text, strlen(text), output, &check, &err) != CK_OK)
        goto out;
    if (write_weights(&w, wpath, &err) != CK_OK || ck_json_write_file(root, output, "case", &err) != CK_OK)
        goto out;
    printf("import %s: %d nodes -> %d layers, %d weight tensors\ncase: %s\nweights: %s\n", model,
           m.n_nodes, cJSON_GetArraySize(cJSON_GetObjectItem(root, "layers")), w.n, output, wpath);
    rc = CK_EXIT_PASS;
out:
    if (rc != CK_EXIT_PASS)
        ck_cli_error(err.msg);
    ck_case_free(&check);
    free(text);
    cJSON_Delete(root);
    ck_tensorset_free(&w);
    ck_onnx_free(&m);
    return rc;
}
