/*
 * The backend a command asked for (--backend, --device, --algo), created through the
 * registry, and what the report takes from it (backend_choice.h).
 */
#include "harness/cli/backend_choice.h"

#include <stdio.h>

#include "harness/cli/messages.h"
#include <stdlib.h>

#include "backends/registry.h"

/* Creates the backend a command asked for; on failure prints one line and returns false. */
bool ck_cli_create_backend(const char *name, int device, const char *algo, int threads,
                           ck_backend **out)
{
    ck_error err;
    *out = NULL;
    name = name ? name : "cpu";
    if (algo && !ck_backend_has_algorithms(name)) {
        fprintf(stderr, "ckpt-harness: --algo applies to --backend cuda (the %s backend has "
                        "one fixed algorithm per op)\n", name);
        return false;
    }
    if (threads && !ck_backend_has_threads(name)) {
        fprintf(stderr, "ckpt-harness: --threads applies to --backend cpu (the %s backend "
                        "does not take a thread count)\n", name);
        return false;
    }
    ck_backend_options bo = {.device = device, .algo = algo, .threads = threads};
    if (ck_backend_create(name, &bo, out, &err) != CK_OK) {
        ck_cli_error(err.msg);
        return false;
    }
    return true;
}

/* The backend's algorithm records (a capability only the CUDA backend has), for the report. */
void ck_cli_take_algo_records(ck_backend *b, const char *algo, ck_result *res)
{
    union {
        void *p;
        ck_algo_records_fn f;
    } u = {ck_backend_proc(b, CK_PROC_ALGO_RECORDS)};
    if (!u.p)
        return;
    snprintf(res->algo_policy, sizeof res->algo_policy, "%s", algo ? algo : "deterministic");
    int n = u.f(b, NULL, 0);
    res->algos = calloc((size_t)n + 1, sizeof *res->algos);
    if (!res->algos)
        return;
    res->n_algos = u.f(b, res->algos, n);
    if (res->n_algos > n)
        res->n_algos = n;
    union {
        void *p;
        ck_device_memory_fn f;
    } mem = {ck_backend_proc(b, CK_PROC_DEVICE_MEMORY)};
    if (mem.p)
        res->has_device_memory = mem.f(b, &res->device_memory, false);
}

void ck_cli_clear_algo_records(ck_backend *b)
{
    union {
        void *p;
        ck_algo_records_clear_fn f;
    } clear = {ck_backend_proc(b, CK_PROC_ALGO_RECORDS_CLEAR)};
    if (clear.p)
        clear.f(b);
    union {
        void *p;
        ck_device_memory_fn f;
    } mem = {ck_backend_proc(b, CK_PROC_DEVICE_MEMORY)};
    ck_device_memory ignored;
    if (mem.p)
        (void)mem.f(b, &ignored, true); /* new peaks for the next case */
}

int ck_cli_check_supported(ck_backend *b, const ck_graph *g, ck_dtype dtype)
{
    ck_error err;
    if (!ck_cli_supported(b, g, dtype, &err)) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    return CK_EXIT_PASS;
}

bool ck_cli_supported(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_error *err)
{
    const ck_op_params *ops[4096];
    const char *names[4096], *op_names[4096];
    int n = g->n < 4096 ? g->n : 4096;
    for (int i = 0; i < n; i++) {
        ops[i] = &g->nodes[i].op;
        names[i] = g->nodes[i].spec->name;
        op_names[i] = g->nodes[i].spec->op_name;
    }
    return ck_backend_check_ops(b, n, ops, names, op_names, dtype, g->cs->path, err) == CK_OK &&
           ck_backend_check_training(b, &g->loss_spec, &g->cs->optimizer, dtype, g->cs->path,
                                     err) == CK_OK;
}
