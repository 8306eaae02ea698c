/*
 * A small pthread pool. cpk_parallel hands out task indices from an atomic counter: which
 * thread runs a task never changes its result, because every task writes outputs no other
 * task writes and computes them in an order fixed by the task alone.
 *
 * Waiting spins for a short while (SPIN_NS) before sleeping on a condition variable: one
 * GEMM is a dozen parallel phases a fraction of a millisecond apart, and a worker that
 * went to sleep between them comes back only when the scheduler gets round to it - on a
 * machine with other busy processes that is often after the next phase is over, and the
 * caller does all the work alone. The spin never changes which tasks exist or their order.
 */
#include "backends/cpu/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_NS 300000 /* 0.3 ms */

struct cpk_pool {
    pid_t owner; /* the process that created the pool: a fork's child has none of its
                    workers (run --jobs forks after the backend exists), so it runs every
                    task itself */
    int nthreads;
    int started;       /* workers started so far (threads 1..started); 0 until the first job */
    bool start_failed; /* a pthread_create failed: run the remaining jobs with those started */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    atomic_ullong generation; /* bumped per job, under mu (read outside it while spinning) */
    atomic_int running;       /* workers still inside the current job, changed under mu */
    atomic_bool quit;
    /* the current job (written under mu before generation is bumped) */
    cpk_task_fn fn;
    void *ctx;
    int64_t ntasks;
    atomic_llong next;
    /* cpk_scratch_take / cpk_scratch_give: one buffer kept between calls */
    void *scratch;
    size_t scratch_bytes;
};

typedef struct {
    cpk_pool *p;
    int tid;
} worker_arg;

static void run_tasks(cpk_pool *p, cpk_task_fn fn, void *ctx, int64_t ntasks, int tid)
{
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= ntasks)
            break;
        fn(ctx, t, tid);
    }
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* spins until *v != old (or quit) or SPIN_NS pass; the caller then waits properly */
static void spin_while_equal_u64(cpk_pool *p, atomic_ullong *v, uint64_t old)
{
    const int64_t t0 = now_ns();
    for (int i = 1;; i++) {
        if (atomic_load_explicit(v, memory_order_acquire) != old ||
            atomic_load_explicit(&p->quit, memory_order_relaxed))
            return;
        CPU_RELAX();
        if (i % 64 == 0 && now_ns() - t0 > SPIN_NS)
            return;
    }
}

static void spin_while_running(cpk_pool *p)
{
    const int64_t t0 = now_ns();
    for (int i = 1; atomic_load_explicit(&p->running, memory_order_acquire) > 0; i++) {
        CPU_RELAX();
        if (i % 64 == 0 && now_ns() - t0 > SPIN_NS)
            return;
    }
}

static void *worker(void *arg)
{
    worker_arg *wa = arg;
    cpk_pool *p = wa->p;
    const int tid = wa->tid;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (!p->quit && p->generation == seen) {
            pthread_mutex_unlock(&p->mu);
            spin_while_equal_u64(p, &p->generation, seen);
            pthread_mutex_lock(&p->mu);
        }
        while (!p->quit && p->generation == seen)
            pthread_cond_wait(&p->cv_start, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        cpk_task_fn fn = p->fn;
        void *ctx = p->ctx;
        int64_t ntasks = p->ntasks;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, fn, ctx, ntasks, tid);
        pthread_mutex_lock(&p->mu);
        if (--p->running == 0)
            pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Workers start with the first job, not with the pool: a process that creates a backend
 * and then forks (run --jobs) has no thread that could hold a lock of the allocator at the
 * fork, which deadlocked a child under AddressSanitizer's allocator. */
static void start_workers(cpk_pool *p)
{
    while (p->started < p->nthreads - 1 && !p->start_failed) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            p->start_failed = true;
            break;
        }
        wa->p = p;
        wa->tid = p->started + 1;
        if (pthread_create(&p->threads[p->started], NULL, worker, wa) != 0) {
            free(wa);
            p->start_failed = true;
            break;
        }
        p->started++;
    }
}

cpk_pool *cpk_pool_create(int nthreads)
{
    if (nthreads < 1)
        nthreads = 1;
    cpk_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->nthreads = nthreads;
    p->owner = getpid();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->running, 0);
    atomic_init(&p->quit, false);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            cpk_pool_destroy(p);
            return NULL;
        }
    }
    return p;
}

void cpk_pool_destroy(cpk_pool *p)
{
    if (!p)
        return;
    if (p->threads && p->owner != getpid()) { /* a forked child: the workers are not here */
        free(p->threads);
        free(p->scratch);
        free(p);
        return;
    }
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        p->quit = true;
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->started; i++)
            pthread_join(p->threads[i], NULL);
        free(p->threads);
    }
    free(p->scratch);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    free(p);
}

/* Buffers up to this size are kept for the next call: a fresh multi-megabyte buffer per
 * convolution costs a page fault and a page clear per 4 KiB (6 % of a U-Net step);
 * larger ones (a full-size 3-D model's padded input) go back to the system at once. */
#define SCRATCH_KEEP_BYTES ((size_t)64 << 20)

void *cpk_scratch_take(cpk_pool *p, size_t bytes)
{
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes)
        return NULL;
    if (p && p->scratch && p->scratch_bytes >= rounded) {
        void *v = p->scratch;
        p->scratch = NULL;
        return v;
    }
    if (p && p->scratch) { /* too small: let it go before the larger one is made */
        free(p->scratch);
        p->scratch = NULL;
    }
    return aligned_alloc(64, rounded ? rounded : 64);
}

void cpk_scratch_give(cpk_pool *p, void *v, size_t bytes)
{
    if (!v)
        return;
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (!p || rounded > SCRATCH_KEEP_BYTES || (p->scratch && p->scratch_bytes >= rounded)) {
        free(v);
        return;
    }
    free(p->scratch);
    p->scratch = v;
    p->scratch_bytes = rounded;
}

int cpk_pool_threads(const cpk_pool *p)
{
    return p ? p->nthreads : 1;
}

void cpk_parallel(cpk_pool *p, int64_t ntasks, cpk_task_fn fn, void *ctx)
{
    if (ntasks <= 0)
        return;
    if (p && p->nthreads > 1 && p->owner == getpid())
        start_workers(p);
    if (!p || p->nthreads == 1 || ntasks == 1 || p->owner != getpid() || p->started == 0) {
        for (int64_t t = 0; t < ntasks; t++)
            fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->running = p->started;
    p->generation++;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, fn, ctx, ntasks, 0);
    spin_while_running(p);
    pthread_mutex_lock(&p->mu);
    while (p->running > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
