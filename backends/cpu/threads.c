/*
 * A small pthread pool. cpk_parallel hands out task indices from an atomic counter: which
 * thread runs a task never changes its result, because every task writes outputs no other
 * task writes and computes them in an order fixed by the task alone.
 */
#include "backends/cpu/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

struct cpk_pool {
    pid_t owner; /* the process that started the workers: a fork's child has none of them
                    (run --jobs forks after the backend exists), so it runs every task itself */
    int nthreads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    uint64_t generation; /* bumped per job, under mu */
    int running;         /* workers still inside the current job, under mu */
    int started;         /* workers waiting for jobs, under mu (cpk_pool_create waits for all:
                            a fork while one is still starting, freeing or allocating, would
                            leave the child's allocator locked) */
    bool quit;
    /* the current job (written under mu before generation is bumped) */
    cpk_task_fn fn;
    void *ctx;
    int64_t ntasks;
    atomic_llong next;
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

static void *worker(void *arg)
{
    worker_arg *wa = arg;
    cpk_pool *p = wa->p;
    const int tid = wa->tid;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    p->started++;
    pthread_cond_signal(&p->cv_done);
    for (;;) {
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
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            cpk_pool_destroy(p);
            return NULL;
        }
        for (int i = 0; i < nthreads - 1; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa || (wa->p = p, wa->tid = i + 1,
                        pthread_create(&p->threads[i], NULL, worker, wa) != 0)) {
                free(wa);
                p->nthreads = i + 1; /* threads 1..i exist */
                cpk_pool_destroy(p);
                return NULL;
            }
        }
        pthread_mutex_lock(&p->mu);
        while (p->started < nthreads - 1)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    return p;
}

void cpk_pool_destroy(cpk_pool *p)
{
    if (!p)
        return;
    if (p->threads && p->owner != getpid()) { /* a forked child: the workers are not here */
        free(p->threads);
        free(p);
        return;
    }
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        p->quit = true;
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->nthreads - 1; i++)
            pthread_join(p->threads[i], NULL);
        free(p->threads);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    free(p);
}

int cpk_pool_threads(const cpk_pool *p)
{
    return p ? p->nthreads : 1;
}

void cpk_parallel(cpk_pool *p, int64_t ntasks, cpk_task_fn fn, void *ctx)
{
    if (ntasks <= 0)
        return;
    if (!p || p->nthreads == 1 || ntasks == 1 || p->owner != getpid()) {
        for (int64_t t = 0; t < ntasks; t++)
            fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->running = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, fn, ctx, ntasks, 0);
    pthread_mutex_lock(&p->mu);
    while (p->running > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
