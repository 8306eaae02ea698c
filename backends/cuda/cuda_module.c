/*
 * The CUDA backend as a loadable module: the two entry points the registry
 * (backends/registry.c) looks up with dlsym in ckpt-harness-cuda.so, and the optional
 * capabilities it offers through get_proc (algorithm records in the backend-independent
 * form of backend.h). Linked into the module only, never into the program.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_api.h"
#include "backends/registry.h"

#define CK_MODULE_EXPORT __attribute__((visibility("default")))

static int algo_records(ck_backend *b, ck_algo_record *out, int max)
{
    const ck_cuda_algo_record *recs = NULL;
    int n = ck_cuda_algo_records(b, &recs);
    for (int i = 0; i < n && i < max && out; i++) {
        ck_algo_record *a = &out[i];
        const ck_cuda_algo_record *r = &recs[i];
        memset(a, 0, sizeof *a);
        snprintf(a->layer, sizeof a->layer, "%s", r->layer);
        snprintf(a->op, sizeof a->op, "%s", r->op);
        snprintf(a->pass, sizeof a->pass, "%s", ck_cuda_pass_name(r->pass));
        snprintf(a->dtype, sizeof a->dtype, "%s", ck_dtype_name(r->dtype));
        snprintf(a->engine, sizeof a->engine, "%s", r->engine);
        snprintf(a->math, sizeof a->math, "%s", r->math);
        snprintf(a->chosen_by, sizeof a->chosen_by, "%s", r->chosen_by);
        a->algo = r->algo;
        a->deterministic = r->deterministic;
        a->workspace_bytes = (int64_t)r->workspace_bytes;
        a->time_ms = r->time_ms;
        a->calls = r->calls;
        a->changed = r->changed;
    }
    return n;
}

static void algo_records_clear(ck_backend *b)
{
    ck_cuda_algo_records_clear(b);
}

static void *cuda_get_proc(ck_backend *b, const char *name)
{
    (void)b;
    union {
        void *p;
        int (*records)(ck_backend *, ck_algo_record *, int);
        void (*clear)(ck_backend *);
        bool (*memory)(ck_backend *, ck_device_memory *, bool);
    } u = {NULL};
    if (strcmp(name, CK_PROC_ALGO_RECORDS) == 0)
        u.records = algo_records;
    else if (strcmp(name, CK_PROC_ALGO_RECORDS_CLEAR) == 0)
        u.clear = algo_records_clear;
    else if (strcmp(name, CK_PROC_DEVICE_MEMORY) == 0)
        u.memory = ck_cuda_device_memory;
    return u.p;
}

CK_MODULE_EXPORT bool ck_cuda_module_available(char *why, size_t n)
{
    return ck_cuda_available(why, n);
}

CK_MODULE_EXPORT ck_status ck_cuda_module_create(const ck_backend_options *o, ck_backend **out,
                                                 ck_error *err)
{
    ck_cuda_algo_policy policy = CK_CUDA_ALGO_DETERMINISTIC;
    *out = NULL;
    if (o->algo && !ck_cuda_algo_policy_parse(o->algo, &policy))
        return ck_fail(err, CK_ERR_INPUT, "--algo %s: expected deterministic or fastest",
                       o->algo);
    ck_status st = ck_backend_cuda_create(out, o->device, policy, err);
    if (st == CK_OK)
        (*out)->get_proc = cuda_get_proc;
    return st;
}
