/*
 * The backend registry (registry.h): a table of names and factories. The CUDA backend is a
 * module loaded with dlopen the first time it is asked for; a machine without the CUDA
 * libraries gets one line saying so and never loads them otherwise.
 */
#include "backends/registry.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/backend.h"
#include "backends/cuda/op_support.h"
#include "backends/ref/ref_ops.h"


/* ---------------------------------------------------------------------------------- */
/* The CUDA module                                                                      */
/* ---------------------------------------------------------------------------------- */

#define CK_CUDA_MODULE_FILE "ckpt-harness-cuda.so"

typedef ck_status (*cuda_create_fn)(const ck_backend_options *o, ck_backend **out,
                                    ck_error *err);
typedef bool (*cuda_available_fn)(char *why, size_t n);

static void *cuda_handle;
static char cuda_load_error[CK_ERROR_MAX - 64];

#ifdef CK_CUDA_MODULE_BUILT
/* Where the module is: $CK_CUDA_MODULE, else beside the running program, else the
 * installed library folder. (Unused in builds without the module: CUDA=0, sanitizers.) */
__attribute__((unused)) static void cuda_module_path(char *buf, size_t n)
{
    const char *env = getenv("CK_CUDA_MODULE");
    if (env && env[0]) {
        snprintf(buf, n, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(buf, n, "%s/%s", exe, CK_CUDA_MODULE_FILE);
            if (access(buf, F_OK) == 0)
                return;
        }
    }
#ifdef CK_LIBDIR
    snprintf(buf, n, "%s/%s", CK_LIBDIR, CK_CUDA_MODULE_FILE);
#else
    snprintf(buf, n, "%s", CK_CUDA_MODULE_FILE);
#endif
}
#endif

/* Loads the module once; NULL with cuda_load_error set when it cannot be loaded. */
static void *cuda_module(void)
{
    if (cuda_handle || cuda_load_error[0])
        return cuda_handle;
#ifndef CK_CUDA_MODULE_BUILT
    snprintf(cuda_load_error, sizeof cuda_load_error,
             "this ckpt-harness was built without CUDA (nvcc not found at build time; rebuild "
             "with CUDA_HOME=... or CUDA=1)");
    return NULL;
#else
    char path[PATH_MAX + 64];
    cuda_module_path(path, sizeof path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(cuda_load_error, sizeof cuda_load_error,
                 "the CUDA backend module cannot be loaded: %.600s (install the CUDA runtime, "
                 "cuBLAS and cuDNN 9, or set CK_CUDA_MODULE)", e ? e : path);
        return NULL;
    }
    cuda_handle = h;
    return h;
#endif
}

static void *cuda_symbol(const char *name, ck_error *err)
{
    void *h = cuda_module();
    if (!h) {
        ck_fail(err, CK_ERR_UNSUPPORTED, "--backend cuda: %s", cuda_load_error);
        return NULL;
    }
    void *sym = dlsym(h, name);
    if (!sym)
        ck_fail(err, CK_ERR_UNSUPPORTED, "--backend cuda: the CUDA backend module lacks %s", name);
    return sym;
}

static ck_status cuda_create(const ck_backend_options *o, ck_backend **out, ck_error *err)
{
    union {
        void *p;
        cuda_create_fn f;
    } u = {cuda_symbol("ck_cuda_module_create", err)};
    if (!u.p)
        return CK_ERR_UNSUPPORTED;
    return u.f(o, out, err);
}

static bool cuda_available(char *why, size_t n)
{
    ck_error err;
    union {
        void *p;
        cuda_available_fn f;
    } u = {cuda_symbol("ck_cuda_module_available", &err)};
    if (!u.p) {
        if (why && n)
            snprintf(why, n, "%s", err.msg);
        return false;
    }
    return u.f(why, n);
}

/* ---------------------------------------------------------------------------------- */
/* The table                                                                           */
/* ---------------------------------------------------------------------------------- */

static ck_status ref_create(const ck_backend_options *o, ck_backend **out, ck_error *err)
{
    (void)o;
    return ck_backend_ref_create(out, err);
}

static ck_status cpu_create(const ck_backend_options *o, ck_backend **out, ck_error *err)
{
    return ck_backend_cpu_create_with(out, o->threads, NULL, err);
}

/* cpu-as-cuda: the fast CPU backend answering `supports` with the CUDA backend's rule
 * (ck_cuda_supports_op), to rehearse a GPU run on a machine without one
 * (tests/gpu/run.sh CK_BACKEND=cpu): what CUDA refuses is refused alike; the numbers are
 * the cpu backend's. */
static bool (*cpu_supports_fn)(ck_backend *b, const ck_op_params *op, ck_dtype dtype);

static bool cpu_as_cuda_supports(ck_backend *b, const ck_op_params *op, ck_dtype dtype)
{
    return ck_cuda_supports_op(op, dtype) && cpu_supports_fn(b, op, dtype);
}

static ck_status cpu_as_cuda_create(const ck_backend_options *o, ck_backend **out,
                                    ck_error *err)
{
    ck_status st = ck_backend_cpu_create_with(out, o->threads, NULL, err);
    if (st == CK_OK) {
        cpu_supports_fn = (*out)->supports;
        (*out)->supports = cpu_as_cuda_supports;
        (*out)->name = "cpu-as-cuda";
    }
    return st;
}

static bool always_available(char *why, size_t n)
{
    if (why && n)
        snprintf(why, n, "available");
    return true;
}

typedef struct {
    const char *name;
    const char *summary;
    bool algorithms; /* takes --algo and --device */
    bool threads;    /* takes --threads */
    ck_status (*create)(const ck_backend_options *o, ck_backend **out, ck_error *err);
    bool (*available)(char *why, size_t n);
} backend_entry;

static const backend_entry registry[] = {
    {"cpu", "the fast CPU backend: SIMD (" "AVX-512/AVX2+FMA/portable) and threads, "
            "deterministic for any thread count",
     false, true, cpu_create, always_available},
    {"ref", "the CPU reference: plain loops, float64 accumulation, fixed summation order",
     false, false, ref_create, always_available},
    {"cuda", "NVIDIA GPUs: cuBLAS, cuDNN and CUDA kernels (module " CK_CUDA_MODULE_FILE ")",
     true, false, cuda_create, cuda_available},
    {"cpu-as-cuda", "the fast CPU backend refusing what the CUDA backend refuses: a stand-in "
                    "that rehearses a GPU run without a GPU",
     false, true, cpu_as_cuda_create, always_available},
};

#define REGISTRY_COUNT ((int)(sizeof registry / sizeof registry[0]))

static const backend_entry *find(const char *name)
{
    for (int i = 0; name && i < REGISTRY_COUNT; i++)
        if (strcmp(registry[i].name, name) == 0)
            return &registry[i];
    return NULL;
}

int ck_backend_count(void)
{
    return REGISTRY_COUNT;
}

const char *ck_backend_name_at(int i)
{
    return i >= 0 && i < REGISTRY_COUNT ? registry[i].name : NULL;
}

const char *ck_backend_summary_at(int i)
{
    return i >= 0 && i < REGISTRY_COUNT ? registry[i].summary : NULL;
}

const char *ck_backend_names(void)
{
    static char names[256];
    if (!names[0]) {
        size_t used = 0;
        for (int i = 0; i < REGISTRY_COUNT && used < sizeof names; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                                     registry[i].name);
    }
    return names;
}

bool ck_backend_has_algorithms(const char *name)
{
    const backend_entry *e = find(name);
    return e && e->algorithms;
}

bool ck_backend_has_threads(const char *name)
{
    const backend_entry *e = find(name);
    return e && e->threads;
}

bool ck_backend_available(const char *name, char *why, size_t n)
{
    const backend_entry *e = find(name);
    if (!e) {
        if (why && n)
            snprintf(why, n, "unknown backend \"%s\" (available: %s)", name ? name : "",
                     ck_backend_names());
        return false;
    }
    return e->available(why, n);
}

ck_status ck_backend_create(const char *name, const ck_backend_options *o, ck_backend **out,
                            ck_error *err)
{
    static const ck_backend_options defaults = {0, NULL, 0};
    *out = NULL;
    const backend_entry *e = find(name);
    if (!e)
        return ck_fail(err, CK_ERR_INPUT, "--backend %s: unknown backend (available: %s)",
                       name ? name : "", ck_backend_names());
    return e->create(o ? o : &defaults, out, err);
}

void *ck_backend_proc(ck_backend *b, const char *proc)
{
    return b && b->get_proc && proc ? b->get_proc(b, proc) : NULL;
}

ck_status ck_backend_check_ops(ck_backend *b, int n, const ck_op_params *const *ops,
                               const char *const *names, const char *const *op_names,
                               ck_dtype dtype, const char *what, ck_error *err)
{
    for (int i = 0; i < n; i++) {
        if (b->supports(b, ops[i], dtype))
            continue;
        return ck_fail(err, CK_ERR_UNSUPPORTED,
                       "%s: layer `%s` (%s): the %s backend has no %s in %s%s", what, names[i],
                       op_names[i], b->name, op_names[i], ck_dtype_name(dtype),
                       ops[i]->low_precision_reduction
                           ? " with low-precision reductions (policies.reduction_dtype \"low\")"
                           : "");
    }
    return CK_OK;
}

ck_status ck_backend_check_training(ck_backend *b, const ck_loss_spec *loss,
                                    const ck_optimizer *opt, ck_dtype dtype, const char *what,
                                    ck_error *err)
{
    if (loss && !b->supports_loss(b, loss, dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: the %s backend has no %s loss in %s", what,
                       b->name, ck_loss_kind_name(loss->kind), ck_dtype_name(dtype));
    if (opt && !b->supports_optimizer(b, opt, dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: the %s backend has no %s optimizer in %s",
                       what, b->name, ck_optimizer_kind_name(opt->kind), ck_dtype_name(dtype));
    return CK_OK;
}
