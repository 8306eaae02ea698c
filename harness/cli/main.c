/*
 * ckpt-harness: the command line. Parses arguments and dispatches to commands.c; nothing
 * else happens here. Exit codes: 0 passed, 1 failed (mismatch, unmet expectation, unmet
 * memory saving, failed gradient check), 2 bad input or usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/help_text.h"
#include "harness/cli/cmd_compare.h"
#include "harness/cli/cmd_judge.h"
#include "harness/cli/cmd_import.h"
#include "harness/cli/cmd_plan.h"
#include "harness/cli/color.h"
#include "harness/cli/commands.h"
#include "harness/cli/messages.h"
#include "harness/io/files.h"

static const char *usage_main =
    "usage: ckpt-harness <command> [options]\n"
    "\n"
    "Proves that gradient checkpointing changes memory and nothing else: each case is\n"
    "trained twice from identical weights and data, plain and checkpointed, and the\n"
    "losses, gradients, parameters and buffers are compared step by step.\n"
    "\n"
    "commands:\n"
    "  run CASE|DIR...        run cases plain and checkpointed, compare, report\n"
    "  bisect CASE|DIR...     run, then find the segment, layer and cause where they part\n"
    "  gradcheck CASE|DIR...  check every backward against float64 finite differences\n"
    "  list [DIR]             list ops, their options, and the cases in DIR (cases/)\n"
    "  plan CASE              predicted peak activation bytes of each run, per segment\n"
    "  compare A REF          compare tensor files (safetensors, .npy, .npz, directories)\n"
    "  merge DIR...           one summary of the report folders of several shards\n"
    "  judge DIR              judge a framework driver's runs (python/ckpt_harness)\n"
    "  import MODEL.onnx      import an ONNX model as a case file and its weights\n"
    "\n"
    "  ckpt-harness <command> --help   options of one command\n"
    "  ckpt-harness --version\n"
    "\n"
    "exit codes: 0 passed, 1 failed (mismatch, unmet expectation or memory saving,\n"
    "failed gradient check), 2 bad input or usage.\n";

static const char *usage_run =
    "usage: ckpt-harness run CASE|DIR... [options]\n"
    "\n"
    "Runs each case (a .json file, or every *.json in a directory) plain and with\n"
    "checkpointing from identical seeds, compares every step's loss, gradients,\n"
    "parameters and buffers, prints a summary and optionally writes JSON reports.\n"
    "\n"
    "options:\n"
    "  --rng P            RNG policy for dropout/noise: counter, stateful, stash\n"
    "  --bn-recompute P   batchnorm running stats on recompute: skip, update\n"
    "  --steps N          training steps (overrides the case)\n"
    "  --seed S           seed (overrides the case)\n"
    "  --report PATH      write JSON reports: FILE.json for one case (FILE.<dtype>.json\n"
    "                     when it runs in several dtypes), or a directory (created if\n"
    "                     missing) holding <case>.json / <case>.<dtype>.json\n"
    "  --dtype LIST       dtypes to run, e.g. fp32,fp16,bf16 (default: the case's precision)\n"
    "  --backend B        cpu (default: the fast CPU backend, docs/cpu-backend.md), ref\n"
    "                     (the CPU reference), cuda (docs/cuda.md) or cpu-as-cuda (cpu\n"
    "                     refusing what cuda refuses: rehearses a GPU run without one)\n"
    "  --threads N        cpu: worker threads (default: every core); results are\n"
    "                     bitwise identical for any N\n"
    "  --device N         the CUDA device (default 0)\n"
    "  --algo P           cuda: deterministic (default: only algorithms cuDNN marks\n"
    "                     deterministic) or fastest (nondeterministic allowed; implies\n"
    "                     --noise-floor, so its run-to-run noise is not blamed on\n"
    "                     checkpointing); the report lists what ran per layer and pass\n"
    "  --against B        also run the plain configuration on backend B (e.g. ref) and\n"
    "                     compare (relative L2 per tensor: fp32 1e-5, fp16 1e-2, bf16 5e-2;\n"
    "                     a tensor the case gives its own tolerance.tensors entry is\n"
    "                     judged by that entry)\n"
    "  --rows N           tensor rows in the summary, worst first (default 10, -1 all)\n"
    "  --bisect           when a case mismatches, find the segment, layer and cause\n"
    "  --noise-floor      run plain twice; differences no larger than plain-vs-plain are\n"
    "                     reported as within the noise floor, not blamed on checkpointing\n"
    "  --verify-recompute keep the originals of recomputed activations and compare them\n"
    "                     value by value with the recomputed ones (a difference fails)\n"
    "  --dump DIR         write every run's parameters, gradients, buffers and losses per\n"
    "                     step as safetensors under DIR/<case>[.<dtype>]/, with a\n"
    "                     manifest.json (docs/interop.md)\n"
    "  --dump-activations with --dump: every layer's output per step too\n"
    "  --dump-activation-grads with --dump: every layer's output gradient per step too\n"
    "  --dump-optimizer with --dump: the optimizer state after every step too\n"
    "  --init FILE        start from parameters and buffers in FILE (safetensors, .npy,\n"
    "                     .npz or a directory; names as in the report, e.g. enc1.weight)\n"
    "  --precision-check M  fail (default), warn or off: whether a low-precision run's\n"
    "                     judgement against fp32 (bounds calibrated per tensor from the\n"
    "                     model, cases/README.md) fails the case, is only reported, or\n"
    "                     is not run\n"
    "  --rtol R, --atol A, --rel-l2 L\n"
    "                     judge every tensor against fp32 with these instead (elementwise\n"
    "                     |a - ref| <= A + R |ref|, or ||a - ref|| / ||ref|| <= L)\n"
    "  --quiet            one line per case\n"
    "  --checkpoint SPEC  for an ONNX model given as a case (run MODEL.onnx): sqrt\n"
    "                     (default), every:K or segments:FIRST..LAST,...\n"
    "  --loss L           for an ONNX model: mean (default), sum, mse, cross_entropy\n"
    "  --optimizer O      for an ONNX model: sgd (default), momentum, adam, adamw\n"
    "  --class-dim D, --ignore-index I\n"
    "                     for an ONNX model with --loss cross_entropy (default class dim:\n"
    "                     -1 for token inputs and (N, L, V) outputs, else 1)\n"
    "\n"
    "CI (docs/ci.md):\n"
    "  --junit FILE       JUnit XML: one testcase per case and dtype\n"
    "  --html FILE        one self-contained page with charts per case\n"
    "  --filter PATTERN   only cases whose name matches (shell pattern, e.g. 'unet*')\n"
    "  --shard I/N        run part I of N of the case x dtype matrix (a stable split;\n"
    "                     the N parts together are the whole run; see merge)\n"
    "  --jobs N           run N cases at once in separate processes (same output)\n"
    "  --memory-limit BYTES|auto\n"
    "                     refuse, before anything runs, a case whose plain or checkpointed\n"
    "                     run is predicted (`plan`) to need more activation bytes (auto:\n"
    "                     the machine's available memory, cpu and ref backends); a case\n"
    "                     whose plain run alone does not fit is verified segment by\n"
    "                     segment (--plain) when its checkpointed runs fit\n"
    "  --plain MODE       run (default): train the plain configuration; segment-by-\n"
    "                     segment: never hold the whole plain run, per segment a run\n"
    "                     keeping only that segment's activations against the\n"
    "                     checkpointed run (docs/memory.md)\n"
    "  --keep-going       a case file that does not load is counted (error) and the\n"
    "                     other cases still run (a case/dtype the backend does not run\n"
    "                     is always skipped, with the reason)\n"
    "  --reproducible     leave host, start time and wall times out of every file\n"
    "  --color WHEN       auto (default), always, never; NO_COLOR turns it off\n"
    "  Under GitHub Actions (GITHUB_ACTIONS=true) failures are annotated on the case file\n"
    "  and a Markdown table is appended to $GITHUB_STEP_SUMMARY.\n"
    "\n"
    "  passing cases print one line; --rows N prints their tensor rows too\n"
    "  -h, --help         this help\n"
    "\n"
    "exit codes: 0 every case met its expectation, 1 a case did not (mismatch, unmet\n"
    "expect, unmet min_memory_saving, a failed precision judgement, vacuous gradients),\n"
    "2 bad input or usage.\n";

static const char *usage_bisect =
    "usage: ckpt-harness bisect CASE|DIR... [options]\n"
    "\n"
    "Runs each case like `run`, then explains where and why the plain and checkpointed\n"
    "runs part: the noise floor (plain run twice), the smallest set of segments whose\n"
    "checkpointing alone causes the divergence, the first layer whose recomputed output\n"
    "differs from its original, the first output gradient that differs (backward order),\n"
    "buffers changed by recomputation, RNG draws, and a readable cause with the evidence.\n"
    "The JSON report gains a `bisect` section (reports/SCHEMA.md).\n"
    "\n"
    "options: as `run` (--rng, --bn-recompute, --steps, --seed, --report, --rows, --quiet,\n"
    "--verify-recompute, --junit, --html, --filter, --shard, --jobs, --keep-going,\n"
    "--reproducible)\n"
    "\n"
    "exit codes: as `run`.\n";

static const char *usage_gradcheck =
    "usage: ckpt-harness gradcheck CASE|DIR... [options]\n"
    "\n"
    "Checks every backward against float64 central differences: the whole case (step 0's\n"
    "loss against every parameter) and each layer on its own (a random projection of its\n"
    "output against its inputs and parameters). An element passes when\n"
    "|analytic - numeric| <= atol + rtol |numeric|. Prints the worst errors per tensor.\n"
    "\n"
    "options:\n"
    "  --eps E        central-difference step (default 1e-6)\n"
    "  --atol A       absolute tolerance (default 1e-5)\n"
    "  --rtol R       relative tolerance (default 1e-3)\n"
    "  --samples N    elements checked per tensor (default 64; all when smaller)\n"
    "  --backend B    cpu (default), ref or cuda; --threads N, --device N, --algo P as\n"
    "                 for run\n"
    "  --whole-only   only the whole-case check\n"
    "  --ops-only     only the per-layer checks\n"
    "  --report FILE  write the results as JSON (schema ckpt-harness/gradcheck)\n"
    "  --junit FILE   JUnit XML: one testcase per case\n"
    "  --quiet        one line per case\n"
    "  -h, --help     this help\n"
    "\n"
    "exit codes: 0 all within tolerance, 1 some element outside, 2 bad input or usage.\n";

static const char *usage_compare =
    "usage: ckpt-harness compare A REF [options]\n"
    "\n"
    "Compares the tensors in A (under test) against REF (the reference), with the\n"
    "metrics, verdicts and exit codes of `run`. A and REF are each a .safetensors, .npy\n"
    "or .npz file, or a directory of them. Tensors are matched by name (a .npy file's\n"
    "name is its stem, an .npz member's its name without .npy); names on one side\n"
    "only, shape and dtype differences are reported. An element is close when\n"
    "|a - ref| <= atol + rtol |ref|; integer and bool tensors must be equal.\n"
    "\n"
    "options:\n"
    "  --rtol R           relative tolerance for every float dtype\n"
    "  --atol A           absolute tolerance for every float dtype\n"
    "                     (defaults per dtype as torch.testing: fp32 1.3e-6/1e-5,\n"
    "                     fp16 1e-3/1e-5, bf16 1.6e-2/1e-5, fp64 1e-7/1e-7)\n"
    "  --rel-l2 L         a float tensor that is not bitwise equal is close iff\n"
    "                     ||a - ref|| / ||ref|| <= L (every non-finite value matched)\n"
    "  --cross-dtype      judge an fp16/bf16 tensor against an fp32/fp64 reference (e.g.\n"
    "                     autocast vs fp32) in double, with the coarser dtype's tolerance,\n"
    "                     instead of reporting the dtype difference\n"
    "  --tolerances FILE  JSON: {\"default\": {\"rtol\", \"atol\", \"rel_l2\"}, \"dtypes\": {\"F16\": {...}},\n"
    "                     \"tensors\": {\"dec*.weight\": {...}}}; first matching pattern wins\n"
    "  --map FILE         JSON: {\"rename\": {\"a\": \"b\"}, \"patterns\": [[\"^model\\\\.(.*)$\", \"\\\\1\"]]}\n"
    "                     translates A's names into REF's (POSIX extended regex)\n"
    "  --include PAT      compare only tensors whose name matches the shell pattern PAT\n"
    "                     (fnmatch, e.g. 'grad.*'); repeatable\n"
    "  --exclude PAT      leave out tensors whose name matches PAT; repeatable\n"
    "  --expect-mismatch PAT\n"
    "                     a known difference: mismatching tensors matching PAT do not\n"
    "                     fail, and PAT must match at least one mismatching tensor (else\n"
    "                     exit 1); repeatable\n"
    "  --report FILE      write the JSON report (schema ckpt-harness/compare)\n"
    "  --rows N           tensor rows in the summary, worst first (default 10, -1 all)\n"
    "  --quiet            only problems and the closing line\n"
    "  --junit FILE       JUnit XML: one testcase for the comparison\n"
    "  -h, --help         this help\n"
    "\n"
    "An operand may be FILE:NAME, the one tensor NAME of FILE. When A and REF hold one\n"
    "tensor each they are compared with each other whatever their names.\n"
    "Integer and bool tensors are compared exactly; a --tolerances \"tensors\" row naming\n"
    "one may excuse a difference (e.g. {\"buffer.*num_batches_tracked\": {\"atol\": 1}}).\n"
    "See docs/interop.md for the file formats, recipes and the control-first rule.\n"
    "\n"
    "exit codes: 0 every tensor identical or close (or an expected mismatch), 1 an\n"
    "unexpected mismatch, missing or extra name, shape or dtype difference, or an\n"
    "--expect-mismatch pattern that matched no mismatch, 2 bad input or usage.\n";

static const char *usage_merge =
    "usage: ckpt-harness merge DIR... [options]\n"
    "\n"
    "Reads the report folders written by `run --report DIR` on several shards or runners\n"
    "(each holds summary.json and the reports it names) and writes one summary: every\n"
    "case in the order of a serial run, the totals, and the exit code of the whole.\n"
    "\n"
    "options:\n"
    "  --report DIR   the merged folder: summary.json and every report\n"
    "  --junit FILE   JUnit XML of the whole\n"
    "  --html FILE    the HTML page of the whole\n"
    "  --allow-partial  merge folders that do not cover the whole matrix (each summary.json\n"
    "                 records the matrix size and its shard; a missing shard is refused)\n"
    "  --quiet        only the totals\n"
    "  -h, --help     this help\n"
    "\n"
    "Every verdict is read from the reports themselves; a summary.json that disagrees with\n"
    "its report is an error naming both. Every output is checked before anything is written.\n"
    "\n"
    "exit codes: 0 every case passed (or was skipped), 1 a case failed, 2 a case had an\n"
    "error, or bad input.\n";

static const char *usage_list =
    "usage: ckpt-harness list [DIR]\n"
    "       ckpt-harness list --markdown\n"
    "\n"
    "Lists the ops a case may use with their options, the losses, optimizers and\n"
    "policies, and the cases found in DIR (default: cases). --markdown prints every op's\n"
    "option table as cases/README.md embeds it (scripts/update_op_docs.py rewrites them).\n";

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    char what[1024], msg[1200];
    snprintf(what, sizeof what, fmt, arg);
    snprintf(msg, sizeof msg, "%s%s%s (see 'ckpt-harness %s%s--help')", cmd ? cmd : "",
             cmd ? ": " : "", what, cmd ? cmd : "", cmd ? " " : "");
    ck_cli_error(msg);
    return CK_EXIT_USAGE;
}

/* Numbers are written as digits (an optional '-' where negatives are allowed): strtoll and
 * strtoull would also take leading spaces and signs, and read " -1" as 2^64 - 1. */
static bool starts_numeric(const char *s, bool negative_ok)
{
    return (*s >= '0' && *s <= '9') || (negative_ok && *s == '-' && s[1] >= '0' && s[1] <= '9');
}

static bool parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    if (!starts_numeric(s, lo < 0))
        return false;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!starts_numeric(s, false))
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    if (!(starts_numeric(s, false) || (*s == '.' && s[1] >= '0' && s[1] <= '9')))
        return false;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0.0) || v > 1e300)
        return false;
    *out = v;
    return true;
}

/* A path option's value: not empty (an empty path would mean the current directory, or
 * "/<name>" once a name is appended). */
static bool path_ok(const char *s)
{
    return s && *s;
}

enum { OPT_DEVICE = 200, OPT_ALGO, OPT_AGAINST, OPT_THREADS = 240, OPT_RNG = 256, OPT_BN, OPT_STEPS, OPT_SEED, OPT_REPORT, OPT_DTYPE, OPT_BACKEND,
       OPT_ROWS, OPT_QUIET, OPT_BISECT, OPT_NOISE, OPT_VERIFY, OPT_DUMP, OPT_DUMP_ACT, OPT_DUMP_AGRAD, OPT_DUMP_OPT, OPT_INIT, OPT_EPS, OPT_ATOL, OPT_RTOL, OPT_SAMPLES, OPT_WHOLE, OPT_OPS,
       OPT_JUNIT = 300, OPT_HTML, OPT_FILTER, OPT_SHARD, OPT_JOBS, OPT_KEEP_GOING, OPT_REPRODUCIBLE, OPT_COLOR };
/* the activation-memory limit (run) */
enum { OPT_MEMORY_LIMIT = 370, OPT_PLAIN };
/* the precision judgement (run) and compare's cross-dtype mode */
enum { OPT_PRECISION_CHECK = 350, OPT_REL_L2, OPT_CROSS_DTYPE };

/* argv joined with spaces, for the run metadata */
static char command_line[4096];

static void keep_command_line(int argc, char **argv)
{
    size_t used = 0;
    for (int i = 0; i < argc && used + 1 < sizeof command_line; i++) {
        int k = snprintf(command_line + used, sizeof command_line - used, "%s%s", i ? " " : "",
                         argv[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
}

/* "--shard 2/4" */
static bool parse_shard(const char *s, int *i, int *n)
{
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10);
    if (errno || end == s || *end != '/')
        return false;
    const char *p = end + 1;
    long b = strtol(p, &end, 10);
    if (errno || end == p || *end || b < 1 || b > 100000 || a < 1 || a > b)
        return false;
    *i = (int)a;
    *n = (int)b;
    return true;
}

/* run MODEL.onnx: the import's settings */
enum { OPT_ONNX_CHECKPOINT = 400, OPT_ONNX_LOSS, OPT_ONNX_OPTIMIZER, OPT_ONNX_CLASS_DIM,
       OPT_ONNX_IGNORE_INDEX };

/* Whether --device means something for backend name (NULL: the default, cpu). */
static bool backend_has_devices(const char *name)
{
    return name && strcmp(name, "cuda") == 0;
}

/* One `run`/`bisect` option with its value (optarg) into o: -1 when taken, an exit code
 * for a bad value, -2 for an option it does not know. */
static int parse_run_option(const char *cmd, int c, ck_run_opts *o, bool *has_device)
{
    long long v;
    switch (c) {
    case OPT_RNG:
        if (!ck_rng_policy_parse(optarg, &o->rng))
            return usage_error(cmd, "--rng %s: expected counter, stateful or stash", optarg);
        o->has_rng = true;
        return -1;
    case OPT_BN:
        if (!ck_bn_policy_parse(optarg, &o->bn))
            return usage_error(cmd, "--bn-recompute %s: expected skip or update", optarg);
        o->has_bn = true;
        return -1;
    case OPT_PLAIN:
        if (strcmp(optarg, "segment-by-segment") == 0)
            o->plain_segmentwise = true;
        else if (strcmp(optarg, "run") == 0)
            o->plain_segmentwise = false;
        else
            return usage_error(cmd, "--plain %s: expected run or segment-by-segment", optarg);
        return -1;
    case OPT_MEMORY_LIMIT:
        if (strcmp(optarg, "auto") == 0) {
            o->memory_limit_auto = true;
        } else if (!parse_int(optarg, 1, INT64_MAX, &v)) {
            return usage_error(cmd, "--memory-limit %s: expected a number of bytes or auto",
                               optarg);
        } else {
            o->memory_limit = (int64_t)v;
        }
        o->has_memory_limit = true;
        return -1;
    case OPT_STEPS:
        if (!parse_int(optarg, 1, 1000000, &v))
            return usage_error(cmd, "--steps %s: expected an integer from 1 to 1000000",
                               optarg);
        o->steps = (int)v;
        o->has_steps = true;
        return -1;
    case OPT_SEED:
        if (!parse_u64(optarg, &o->seed))
            return usage_error(cmd, "--seed %s: expected an unsigned 64-bit integer", optarg);
        o->has_seed = true;
        return -1;
    case OPT_REPORT:
        if (!path_ok(optarg))
            return usage_error(cmd, "%s", "--report: empty path");
        o->report = optarg;
        return -1;
    case OPT_DTYPE: o->dtype = optarg; return -1;
    case OPT_BACKEND: o->backend = optarg; return -1;
    case OPT_ROWS:
        if (!parse_int(optarg, -1, 1000000, &v))
            return usage_error(cmd, "--rows %s: expected an integer >= -1", optarg);
        o->max_rows = (int)v;
        o->rows_given = true;
        return -1;
    case OPT_JUNIT: o->junit = optarg; return -1;
    case OPT_HTML: o->html = optarg; return -1;
    case OPT_FILTER: o->filter = optarg; return -1;
    case OPT_SHARD:
        if (!parse_shard(optarg, &o->shard_i, &o->shard_n))
            return usage_error(cmd, "--shard %s: expected I/N with 1 <= I <= N", optarg);
        return -1;
    case OPT_JOBS:
        if (!parse_int(optarg, 1, 1024, &v))
            return usage_error(cmd, "--jobs %s: expected an integer from 1 to 1024", optarg);
        o->jobs = (int)v;
        return -1;
    case OPT_KEEP_GOING: o->keep_going = true; return -1;
    case OPT_REPRODUCIBLE: o->reproducible = true; return -1;
    case OPT_COLOR:
        if (!ck_cli_color_parse(optarg))
            return usage_error(cmd, "--color %s: expected auto, always or never", optarg);
        return -1;
    case OPT_QUIET: o->quiet = true; return -1;
    case OPT_BISECT: o->bisect = true; return -1;
    case OPT_NOISE: o->noise_floor = true; return -1;
    case OPT_VERIFY: o->verify_recompute = true; return -1;
    case OPT_DUMP:
        if (!path_ok(optarg))
            return usage_error(cmd, "%s", "--dump: empty path");
        o->dump = optarg;
        return -1;
    case OPT_DUMP_ACT: o->dump_activations = true; return -1;
    case OPT_DUMP_AGRAD: o->dump_activation_grads = true; return -1;
    case OPT_DUMP_OPT: o->dump_optimizer = true; return -1;
    case OPT_INIT:
        if (!path_ok(optarg))
            return usage_error(cmd, "%s", "--init: empty path");
        o->init = optarg;
        return -1;
    case OPT_DEVICE:
        if (!parse_int(optarg, 0, 1024, &v))
            return usage_error(cmd, "--device %s: expected a device number from 0", optarg);
        o->device = (int)v;
        *has_device = true;
        return -1;
    case OPT_ALGO: o->algo = optarg; return -1;
    case OPT_AGAINST: o->against = optarg; return -1;
    case OPT_PRECISION_CHECK:
        if (strcmp(optarg, "fail") == 0)
            o->precision_check = 0;
        else if (strcmp(optarg, "warn") == 0)
            o->precision_check = 1;
        else if (strcmp(optarg, "off") == 0)
            o->precision_check = 2;
        else
            return usage_error(cmd, "--precision-check %s: expected fail, warn or off", optarg);
        return -1;
    case OPT_RTOL:
        if (!parse_double(optarg, &o->rtol))
            return usage_error(cmd, "--rtol %s: expected a number >= 0", optarg);
        o->has_rtol = true;
        return -1;
    case OPT_ATOL:
        if (!parse_double(optarg, &o->atol))
            return usage_error(cmd, "--atol %s: expected a number >= 0", optarg);
        o->has_atol = true;
        return -1;
    case OPT_REL_L2:
        if (!parse_double(optarg, &o->rel_l2))
            return usage_error(cmd, "--rel-l2 %s: expected a number >= 0", optarg);
        o->has_rel_l2 = true;
        return -1;
    case OPT_THREADS:
        if (!parse_int(optarg, 1, 256, &v))
            return usage_error(cmd, "--threads %s: expected an integer from 1 to 256", optarg);
        o->threads = (int)v;
        return -1;
    case OPT_ONNX_CHECKPOINT: o->onnx_checkpoint = optarg; return -1;
    case OPT_ONNX_LOSS: o->onnx_loss = optarg; return -1;
    case OPT_ONNX_OPTIMIZER: o->onnx_optimizer = optarg; return -1;
    case OPT_ONNX_CLASS_DIM:
        if (!(o->onnx_has_class_dim = ck_cli_parse_class_dim(optarg, &o->onnx_class_dim)))
            return usage_error(cmd, "--class-dim %s: expected an integer from -8 to 7", optarg);
        return -1;
    case OPT_ONNX_IGNORE_INDEX:
        if (!(o->onnx_has_ignore_index = ck_cli_parse_ignore_index(optarg, &o->onnx_ignore_index)))
            return usage_error(cmd, "--ignore-index %s: expected a 32-bit integer", optarg);
        return -1;
    default: return -2;
    }
}

static int main_run(int argc, char **argv, bool bisect_cmd)
{
    const char *cmd = bisect_cmd ? "bisect" : "run";
    static const struct option longopts[] = {
        {"rng", required_argument, 0, OPT_RNG},       {"bn-recompute", required_argument, 0, OPT_BN},
        {"steps", required_argument, 0, OPT_STEPS},   {"seed", required_argument, 0, OPT_SEED},
        {"report", required_argument, 0, OPT_REPORT}, {"dtype", required_argument, 0, OPT_DTYPE},
        {"backend", required_argument, 0, OPT_BACKEND}, {"rows", required_argument, 0, OPT_ROWS},
        {"quiet", no_argument, 0, OPT_QUIET},         {"help", no_argument, 0, 'h'},
        {"bisect", no_argument, 0, OPT_BISECT},       {"noise-floor", no_argument, 0, OPT_NOISE},
        {"verify-recompute", no_argument, 0, OPT_VERIFY}, {"dump", required_argument, 0, OPT_DUMP},
        {"dump-activations", no_argument, 0, OPT_DUMP_ACT},
        {"dump-activation-grads", no_argument, 0, OPT_DUMP_AGRAD},
        {"dump-optimizer", no_argument, 0, OPT_DUMP_OPT}, {"init", required_argument, 0, OPT_INIT},
        {"device", required_argument, 0, OPT_DEVICE}, {"algo", required_argument, 0, OPT_ALGO},
        {"against", required_argument, 0, OPT_AGAINST},
        {"precision-check", required_argument, 0, OPT_PRECISION_CHECK},
        {"rtol", required_argument, 0, OPT_RTOL},     {"atol", required_argument, 0, OPT_ATOL},
        {"rel-l2", required_argument, 0, OPT_REL_L2},
        {"threads", required_argument, 0, OPT_THREADS},
        {"junit", required_argument, 0, OPT_JUNIT}, {"html", required_argument, 0, OPT_HTML},
        {"filter", required_argument, 0, OPT_FILTER}, {"shard", required_argument, 0, OPT_SHARD},
        {"jobs", required_argument, 0, OPT_JOBS}, {"keep-going", no_argument, 0, OPT_KEEP_GOING},
        {"memory-limit", required_argument, 0, OPT_MEMORY_LIMIT},
        {"plain", required_argument, 0, OPT_PLAIN},
        {"reproducible", no_argument, 0, OPT_REPRODUCIBLE},
        {"color", required_argument, 0, OPT_COLOR},
        {"checkpoint", required_argument, 0, OPT_ONNX_CHECKPOINT},
        {"loss", required_argument, 0, OPT_ONNX_LOSS},
        {"optimizer", required_argument, 0, OPT_ONNX_OPTIMIZER},
        {"class-dim", required_argument, 0, OPT_ONNX_CLASS_DIM},
        {"ignore-index", required_argument, 0, OPT_ONNX_IGNORE_INDEX}, {0, 0, 0, 0}};
    ck_run_opts o;
    memset(&o, 0, sizeof o);
    o.max_rows = 10;
    bool has_device = false;
    o.command_line = command_line;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int taken = parse_run_option(cmd, c, &o, &has_device);
        if (taken != -2) {
            if (taken != -1)
                return taken;
            continue;
        }
        switch (c) {
        case 'h': ck_cli_write_help(stdout, bisect_cmd ? usage_bisect : usage_run); return CK_EXIT_PASS;
        case ':': return usage_error(cmd, "%s needs a value", argv[optind - 1]);
        default: return usage_error(cmd, "unknown option %s", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error(cmd, "%s", "no case given");
    o.paths = (const char **)argv + optind;
    o.n_paths = argc - optind;
    if (o.dump_activations && !o.dump)
        return usage_error(cmd, "%s", "--dump-activations needs --dump DIR");
    if (has_device && !backend_has_devices(o.backend))
        return usage_error(cmd, "%s", "--device applies to --backend cuda (the CPU has no devices to choose)");
    if ((o.dump_activation_grads || o.dump_optimizer) && !o.dump)
        return usage_error(cmd, "%s", o.dump_optimizer ? "--dump-optimizer needs --dump DIR"
                                                       : "--dump-activation-grads needs --dump DIR");
    if (o.jobs > 1 && o.backend && strcmp(o.backend, "cpu") != 0)
        return usage_error(cmd, "--jobs %s: runs cases in forked processes, which only the cpu "
                                "backend supports", o.backend);
    return bisect_cmd ? ck_cmd_bisect(&o) : ck_cmd_run(&o);
}

static int main_gradcheck(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"eps", required_argument, 0, OPT_EPS},   {"atol", required_argument, 0, OPT_ATOL},
        {"rtol", required_argument, 0, OPT_RTOL}, {"samples", required_argument, 0, OPT_SAMPLES},
        {"whole-only", no_argument, 0, OPT_WHOLE}, {"ops-only", no_argument, 0, OPT_OPS},
        {"backend", required_argument, 0, OPT_BACKEND}, {"device", required_argument, 0, OPT_DEVICE},
        {"algo", required_argument, 0, OPT_ALGO}, {"report", required_argument, 0, OPT_REPORT},
        {"junit", required_argument, 0, OPT_JUNIT}, {"quiet", no_argument, 0, OPT_QUIET},
        {"help", no_argument, 0, 'h'},
        {"threads", required_argument, 0, OPT_THREADS}, {0, 0, 0, 0}};
    ck_gradcheck_cmd_opts o;
    memset(&o, 0, sizeof o);
    o.atol = o.rtol = -1.0;
    bool has_device = false;
    long long v;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_EPS:
            if (!parse_double(optarg, &o.eps) || o.eps == 0.0)
                return usage_error("gradcheck", "--eps %s: expected a positive number", optarg);
            break;
        case OPT_ATOL:
            if (!parse_double(optarg, &o.atol))
                return usage_error("gradcheck", "--atol %s: expected a number >= 0", optarg);
            break;
        case OPT_RTOL:
            if (!parse_double(optarg, &o.rtol))
                return usage_error("gradcheck", "--rtol %s: expected a number >= 0", optarg);
            break;
        case OPT_SAMPLES:
            if (!parse_int(optarg, 1, 1 << 30, &v))
                return usage_error("gradcheck", "--samples %s: expected a positive integer",
                                   optarg);
            o.samples = (int)v;
            break;
        case OPT_WHOLE: o.whole_only = true; break;
        case OPT_BACKEND: o.backend = optarg; break;
        case OPT_DEVICE:
            if (!parse_int(optarg, 0, 1024, &v))
                return usage_error("gradcheck", "--device %s: expected a device number from 0",
                                   optarg);
            o.device = (int)v;
            has_device = true;
            break;
        case OPT_ALGO: o.algo = optarg; break;
        case OPT_THREADS:
            if (!parse_int(optarg, 1, 256, &v))
                return usage_error("gradcheck", "--threads %s: expected an integer from 1 to 256",
                                   optarg);
            o.threads = (int)v;
            break;
        case OPT_OPS: o.ops_only = true; break;
        case OPT_REPORT: o.report = optarg; break;
        case OPT_JUNIT: o.junit = optarg; break;
        case OPT_QUIET: o.quiet = true; break;
        case 'h': ck_cli_write_help(stdout, usage_gradcheck); return CK_EXIT_PASS;
        case ':': return usage_error("gradcheck", "%s needs a value", argv[optind - 1]);
        default: return usage_error("gradcheck", "unknown option %s", argv[optind - 1]);
        }
    }
    if (has_device && !backend_has_devices(o.backend))
        return usage_error("gradcheck", "%s", "--device applies to --backend cuda (the CPU has no devices to choose)");
    if (o.whole_only && o.ops_only)
        return usage_error("gradcheck", "%s", "--whole-only and --ops-only exclude each other");
    if (optind >= argc)
        return usage_error("gradcheck", "%s", "no case given");
    o.paths = (const char **)argv + optind;
    o.n_paths = argc - optind;
    return ck_cmd_gradcheck(&o);
}

enum { OPT_TOLERANCES = 512, OPT_MAP, OPT_INCLUDE, OPT_EXCLUDE, OPT_EXPECT_MISMATCH };
enum { OPT_ALLOW_PARTIAL = 600 };

static int main_compare(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"rtol", required_argument, 0, OPT_RTOL},     {"atol", required_argument, 0, OPT_ATOL},
        {"tolerances", required_argument, 0, OPT_TOLERANCES},
        {"map", required_argument, 0, OPT_MAP},       {"report", required_argument, 0, OPT_REPORT},
        {"rows", required_argument, 0, OPT_ROWS},     {"quiet", no_argument, 0, OPT_QUIET},
        {"rel-l2", required_argument, 0, OPT_REL_L2}, {"cross-dtype", no_argument, 0, OPT_CROSS_DTYPE},
        {"include", required_argument, 0, OPT_INCLUDE},
        {"exclude", required_argument, 0, OPT_EXCLUDE},
        {"expect-mismatch", required_argument, 0, OPT_EXPECT_MISMATCH},
        {"junit", required_argument, 0, OPT_JUNIT},
        {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
    ck_compare_cmd_opts o;
    memset(&o, 0, sizeof o);
    o.max_rows = 10;
    /* each pattern list holds at most one entry per argument */
    static const char *pattern_lists[3][256];
    const char **lists[3] = {pattern_lists[0], pattern_lists[1], pattern_lists[2]};
    if (argc > 256)
        return usage_error("compare", "%s", "too many arguments");
    o.include = lists[0];
    o.exclude = lists[1];
    o.expect = lists[2];
    long long v;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_RTOL:
            if (!parse_double(optarg, &o.rtol))
                return usage_error("compare", "--rtol %s: expected a number >= 0", optarg);
            o.has_rtol = true;
            break;
        case OPT_ATOL:
            if (!parse_double(optarg, &o.atol))
                return usage_error("compare", "--atol %s: expected a number >= 0", optarg);
            o.has_atol = true;
            break;
        case OPT_REL_L2:
            if (!parse_double(optarg, &o.rel_l2))
                return usage_error("compare", "--rel-l2 %s: expected a number >= 0", optarg);
            o.has_rel_l2 = true;
            break;
        case OPT_CROSS_DTYPE: o.cross_dtype = true; break;
        case OPT_TOLERANCES:
            if (!path_ok(optarg))
                return usage_error("compare", "%s", "--tolerances: empty path");
            o.tolerances = optarg;
            break;
        case OPT_MAP:
            if (!path_ok(optarg))
                return usage_error("compare", "%s", "--map: empty path");
            o.map = optarg;
            break;
        case OPT_REPORT:
            if (!path_ok(optarg))
                return usage_error("compare", "%s", "--report: empty path");
            o.report = optarg;
            break;
        case OPT_INCLUDE: o.include[o.n_include++] = optarg; break;
        case OPT_EXCLUDE: o.exclude[o.n_exclude++] = optarg; break;
        case OPT_EXPECT_MISMATCH: o.expect[o.n_expect++] = optarg; break;
        case OPT_JUNIT: o.junit = optarg; break;
        case OPT_ROWS:
            if (!parse_int(optarg, -1, 1000000, &v))
                return usage_error("compare", "--rows %s: expected an integer >= -1", optarg);
            o.max_rows = (int)v;
            break;
        case OPT_QUIET: o.quiet = true; break;
        case 'h': ck_cli_write_help(stdout, usage_compare); return CK_EXIT_PASS;
        case ':': return usage_error("compare", "%s needs a value", argv[optind - 1]);
        default: return usage_error("compare", "unknown option %s", argv[optind - 1]);
        }
    }
    if (argc - optind != 2)
        return usage_error("compare", "%s", "expected two tensor files or directories: A REF");
    o.a = argv[optind];
    o.ref = argv[optind + 1];
    return ck_cmd_compare(&o);
}

static int main_merge(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"report", required_argument, 0, OPT_REPORT}, {"junit", required_argument, 0, OPT_JUNIT},
        {"html", required_argument, 0, OPT_HTML},     {"quiet", no_argument, 0, OPT_QUIET},
        {"allow-partial", no_argument, 0, OPT_ALLOW_PARTIAL},
        {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
    ck_merge_opts o;
    memset(&o, 0, sizeof o);
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_REPORT: o.report = optarg; break;
        case OPT_JUNIT: o.junit = optarg; break;
        case OPT_HTML: o.html = optarg; break;
        case OPT_QUIET: o.quiet = true; break;
        case OPT_ALLOW_PARTIAL: o.allow_partial = true; break;
        case 'h': ck_cli_write_help(stdout, usage_merge); return CK_EXIT_PASS;
        case ':': return usage_error("merge", "%s needs a value", argv[optind - 1]);
        default: return usage_error("merge", "unknown option %s", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("merge", "%s", "no report folder given");
    o.dirs = (const char **)argv + optind;
    o.n_dirs = argc - optind;
    return ck_cmd_merge(&o);
}

static int main_list(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        ck_cli_write_help(stdout, usage_list);
        return CK_EXIT_PASS;
    }
    if (argc == 2 && strcmp(argv[1], "--markdown") == 0)
        return ck_cmd_list_markdown();
    if (argc > 2 || (argc == 2 && argv[1][0] == '-'))
        return usage_error("list", "%s", "expected at most one directory");
    return ck_cmd_list(argc == 2 ? argv[1] : NULL);
}

int main(int argc, char **argv)
{
    opterr = 0; /* our own one-line messages */
    /* every file a command reads is an input no output may replace (files.h) */
    ck_inputs_track(true);
    ck_cli_install_signal_cleanup();
    /* line-buffered: progress on stderr never lands mid-line in a piped stdout */
    setvbuf(stdout, NULL, _IOLBF, 0);
    keep_command_line(argc, argv);
    if (argc < 2)
        return ck_cli_write_help(stderr, usage_main), CK_EXIT_USAGE;
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0)
        return ck_cli_write_help(stdout, usage_main), CK_EXIT_PASS;
    if (strcmp(cmd, "--version") == 0)
        return printf("ckpt-harness %s\n", CK_VERSION), CK_EXIT_PASS;
    if (strcmp(cmd, "run") == 0)
        return main_run(argc - 1, argv + 1, false);
    if (strcmp(cmd, "bisect") == 0)
        return main_run(argc - 1, argv + 1, true);
    if (strcmp(cmd, "gradcheck") == 0)
        return main_gradcheck(argc - 1, argv + 1);
    if (strcmp(cmd, "compare") == 0)
        return main_compare(argc - 1, argv + 1);
    if (strcmp(cmd, "import") == 0)
        return ck_main_import(argc - 1, argv + 1);
    if (strcmp(cmd, "plan") == 0)
        return ck_main_plan(argc - 1, argv + 1);
    if (strcmp(cmd, "list") == 0)
        return main_list(argc - 1, argv + 1);
    if (strcmp(cmd, "merge") == 0)
        return main_merge(argc - 1, argv + 1);
    if (strcmp(cmd, "judge") == 0)
        return ck_main_judge(argc - 1, argv + 1);
    return usage_error(NULL, "unknown command '%s'", cmd);
}
