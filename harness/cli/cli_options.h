/*
 * What the CLI's commands take: the exit codes and the option structs main.c fills, for
 * the commands (commands.h) and the helpers they share (case_files.h, backend_choice.h,
 * run_outputs.h), so no helper depends on the commands.
 */
#ifndef CK_CLI_OPTIONS_H
#define CK_CLI_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "harness/model/case.h"

#define CK_VERSION "0.1.0"

enum { CK_EXIT_PASS = 0, CK_EXIT_FAIL = 1, CK_EXIT_USAGE = 2 };

typedef struct {
    const char **paths; /* case files or directories */
    int n_paths;
    bool has_rng, has_bn, has_steps, has_seed;
    ck_rng_policy rng;
    ck_bn_policy bn;
    int steps;
    uint64_t seed;
    const char *report; /* file or directory; NULL: no report file */
    const char *backend; /* "cpu" (default), "ref" or "cuda" */
    int device;          /* --device N (cuda) */
    int threads;         /* --threads N (cpu); 0: every core */
    const char *algo;    /* --algo deterministic|fastest (cuda) */
    const char *against; /* --against BACKEND: cross-backend check */
    const char *dtype;   /* "fp32" */
    bool quiet;
    int max_rows; /* summary rows per case */
    bool bisect;           /* bisect whenever a case mismatches */
    bool force_bisect;     /* the `bisect` command: always bisect */
    bool noise_floor;      /* run plain twice and judge against the floor */
    bool verify_recompute; /* compare every recomputed output with its original */
    const char *dump;      /* --dump DIR: safetensors of every run and step + manifest */
    bool dump_activations; /* --dump-activations: layer outputs too */
    bool dump_activation_grads; /* --dump-activation-grads: their gradients too */
    bool dump_optimizer;   /* --dump-optimizer: optimizer state after each step */
    const char *init;      /* --init FILE: parameters and buffers from a file */
    int precision_check;   /* --precision-check: 0 fail (default), 1 warn, 2 off
                              (ck_precision_check) */
    bool has_rtol, has_atol, has_rel_l2; /* --rtol/--atol/--rel-l2: the judgement against
                                            fp32 uses these for every tensor */
    double rtol, atol, rel_l2;
    /* CI (docs/ci.md) */
    const char *junit;     /* --junit FILE */
    const char *html;      /* --html FILE */
    const char *filter;    /* --filter PATTERN: case names (fnmatch) */
    int shard_i, shard_n;  /* --shard I/N (1-based); shard_n 0: no sharding */
    int jobs;              /* --jobs N: cases in N processes at once */
    bool has_memory_limit; /* --memory-limit BYTES|auto */
    bool memory_limit_auto; /* auto: MemAvailable of /proc/meminfo */
    int64_t memory_limit;   /* BYTES */
    bool plain_segmentwise; /* --plain segment-by-segment (default --plain run) */
    bool keep_going;       /* --keep-going: bad cases and unsupported combinations do not stop the rest */
    bool reproducible;     /* --reproducible: no host, clock or wall times in any output file */
    bool rows_given;       /* --rows was given: print rows for passing cases too */
    const char *command_line; /* argv joined, for the run metadata */
    /* an ONNX model given as a case (run MODEL.onnx): what the import adds */
    const char *onnx_checkpoint; /* --checkpoint sqrt|every:K|segments:A..B,... */
    const char *onnx_loss;       /* --loss */
    const char *onnx_optimizer;  /* --optimizer */
    bool onnx_has_class_dim, onnx_has_ignore_index; /* --class-dim, --ignore-index */
    int onnx_class_dim;
    long long onnx_ignore_index;
} ck_run_opts;

typedef struct {
    const char **paths;
    int n_paths;
    double eps, atol, rtol;
    int samples;
    bool whole_only, ops_only;
    bool quiet;
    const char *backend;
    int device;
    const char *algo;
    int threads; /* --threads N (cpu); 0: every core */
    const char *report;   /* --report FILE (JSON) */
    const char *junit;    /* --junit FILE */
} ck_gradcheck_cmd_opts;

typedef struct {
    const char **dirs;    /* report folders written by run --report DIR */
    int n_dirs;
    const char *report;   /* --report DIR: merged summary.json and reports */
    const char *junit;
    const char *html;
    bool quiet;
    bool allow_partial;   /* --allow-partial: merge shards that do not cover the matrix */
} ck_merge_opts;

#endif
