/*
 * The cpu backend's tensor memory: host memory (64-byte aligned), with two differences
 * from backends/host_memory.c that change no value:
 *  - freed blocks of 256 KiB to 64 MiB are kept, up to 256 MiB in all, for the next
 *    request of the same size. A training step frees and asks again for the same activation and
 *    gradient sizes every step, and a fresh multi-megabyte block from the system costs a
 *    page fault and a page clear per 4 KiB (about 9 % of a 2-D U-Net step on one thread);
 *    larger blocks (a full-size 3-D model's tensors) go back to the system at once;
 *  - zeroing is split across the pool's threads by fixed byte ranges.
 * Each block carries its size in a 64-byte header in front of the tensor's data.
 */
#include "backends/cpu/cpu_common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define HEADER 64                               /* bytes in front of the data: the size */
#define KEEP_MIN_BYTES ((size_t)256 << 10)      /* smaller blocks go back to malloc */
#define KEEP_MAX_BYTES ((size_t)64 << 20)       /* larger blocks go back to the system */
#define KEEP_TOTAL_BYTES ((size_t)256 << 20)    /* most bytes kept at once */
#define KEEP_SLOTS 32
#define ZERO_CHUNK ((size_t)1 << 20)            /* bytes per zeroing task */

struct cpu_block_cache {
    pthread_mutex_t mu;
    void *base[KEEP_SLOTS]; /* kept blocks, oldest first */
    size_t bytes[KEEP_SLOTS];
    int n;
    size_t held;
};

cpu_block_cache *cpu_block_cache_create(void)
{
    cpu_block_cache *c = calloc(1, sizeof *c);
    if (c && pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

void cpu_block_cache_destroy(cpu_block_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        free(c->base[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* a kept block of exactly `total` bytes, removed from the cache, or NULL */
static void *take_kept(cpu_block_cache *c, size_t total)
{
    void *v = NULL;
    pthread_mutex_lock(&c->mu);
    for (int i = c->n - 1; i >= 0 && !v; i--)
        if (c->bytes[i] == total) {
            v = c->base[i];
            c->held -= total;
            memmove(&c->base[i], &c->base[i + 1], (size_t)(c->n - 1 - i) * sizeof c->base[0]);
            memmove(&c->bytes[i], &c->bytes[i + 1], (size_t)(c->n - 1 - i) * sizeof c->bytes[0]);
            c->n--;
        }
    pthread_mutex_unlock(&c->mu);
    return v;
}

ck_status cpu_mem_alloc(cpu_block_cache *c, size_t bytes, void **ptr, ck_error *err)
{
    const size_t rounded = (bytes + 63) & ~(size_t)63;
    const size_t total = rounded + HEADER;
    if (rounded < bytes || total < rounded)
        return ck_fail(err, CK_ERR_NOMEM, "allocation of %zu bytes overflows", bytes);
    char *base = total >= KEEP_MIN_BYTES && c ? take_kept(c, total) : NULL;
    if (!base && !(base = aligned_alloc(64, total)))
        return ck_fail(err, CK_ERR_NOMEM, "out of host memory allocating %zu bytes", bytes);
    memcpy(base, &total, sizeof total);
    *ptr = base + HEADER;
    return CK_OK;
}

void cpu_mem_free(cpu_block_cache *c, void *ptr)
{
    if (!ptr)
        return;
    char *base = (char *)ptr - HEADER;
    size_t total;
    memcpy(&total, base, sizeof total);
    if (!c || total < KEEP_MIN_BYTES || total > KEEP_MAX_BYTES) {
        free(base);
        return;
    }
    pthread_mutex_lock(&c->mu);
    /* make room: the oldest kept blocks go first */
    int drop = 0;
    size_t held = c->held;
    while (drop < c->n && (held + total > KEEP_TOTAL_BYTES || c->n - drop >= KEEP_SLOTS))
        held -= c->bytes[drop++];
    void *gone[KEEP_SLOTS];
    for (int i = 0; i < drop; i++)
        gone[i] = c->base[i];
    memmove(&c->base[0], &c->base[drop], (size_t)(c->n - drop) * sizeof c->base[0]);
    memmove(&c->bytes[0], &c->bytes[drop], (size_t)(c->n - drop) * sizeof c->bytes[0]);
    c->n -= drop;
    c->base[c->n] = base;
    c->bytes[c->n] = total;
    c->n++;
    c->held = held + total;
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < drop; i++)
        free(gone[i]);
}

typedef struct {
    char *p;
    const char *src; /* NULL: zero */
    size_t bytes;
} zero_job;

static void zero_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const zero_job *j = vctx;
    const size_t lo = (size_t)task * ZERO_CHUNK;
    const size_t n = j->bytes - lo < ZERO_CHUNK ? j->bytes - lo : ZERO_CHUNK;
    if (j->src)
        memcpy(j->p + lo, j->src + lo, n);
    else
        memset(j->p + lo, 0, n);
}

void cpu_mem_zero(cpk_pool *pool, void *p, size_t bytes)
{
    zero_job j = {p, NULL, bytes};
    if (bytes > 0)
        cpk_parallel(pool, (int64_t)((bytes + ZERO_CHUNK - 1) / ZERO_CHUNK), zero_task, &j);
}

void cpu_mem_copy(cpk_pool *pool, void *dst, const void *src, size_t bytes)
{
    zero_job j = {dst, src, bytes};
    if (bytes > 0)
        cpk_parallel(pool, (int64_t)((bytes + ZERO_CHUNK - 1) / ZERO_CHUNK), zero_task, &j);
}
