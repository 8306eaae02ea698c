/*
 * The cpu backend's NaN/Inf count of a tensor where it lives (capability
 * CK_PROC_COUNT_NONFINITE, backend.h): the executor scans every layer output and output
 * gradient once, and this spares it a host copy and a single-threaded scan. The tensor is
 * split into fixed chunks (by size alone); a chunk is first tested for any all-ones
 * exponent with a branch-free loop, and only a chunk that has one is scanned element by
 * element. Chunk counts are added in chunk order and the first index is the first
 * chunk's: integers, so the thread count and the ISA path cannot change them.
 */
#include "backends/cpu/cpu_common.h"

#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

#define NF_CHUNK 32768 /* elements per task */

typedef struct {
    const void *data;
    int64_t n;
    int width; /* bytes per element: 2, 4 or 8 */
    uint64_t expm, manm;
    cpk_isa isa;
    int64_t *nan, *inf, *first; /* per chunk */
    bool *first_nan;
} nf_job;

/* element k of the job's data, as an unsigned integer */
static inline uint64_t nf_bits(const nf_job *j, int64_t k)
{
    if (j->width == 2)
        return ((const uint16_t *)j->data)[k];
    if (j->width == 4)
        return ((const uint32_t *)j->data)[k];
    return ((const uint64_t *)j->data)[k];
}

#if CPK_X86
/* true when some fp32 element of u[0..n) has an all-ones exponent */
__attribute__((target("avx2"))) static bool any_special_f32_avx2(const uint32_t *u, int64_t n)
{
    const __m256i em = _mm256_set1_epi32(0x7f800000);
    __m256i hit = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        const __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(u + k)), em);
        hit = _mm256_or_si256(hit, _mm256_cmpeq_epi32(v, em));
    }
    bool any = !_mm256_testz_si256(hit, hit);
    for (; k < n; k++)
        any |= (u[k] & 0x7f800000u) == 0x7f800000u;
    return any;
}

/* the same for 16-bit floats with exponent mask em */
__attribute__((target("avx2"))) static bool any_special_16_avx2(const uint16_t *h, int64_t n,
                                                                uint16_t em16)
{
    const __m256i em = _mm256_set1_epi16((short)em16);
    __m256i hit = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        const __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(h + k)), em);
        hit = _mm256_or_si256(hit, _mm256_cmpeq_epi16(v, em));
    }
    bool any = !_mm256_testz_si256(hit, hit);
    for (; k < n; k++)
        any |= (h[k] & em16) == em16;
    return any;
}
#endif

static bool any_special(const nf_job *j, int64_t k0, int64_t k1)
{
#if CPK_X86
    if (j->isa != CPK_ISA_PORTABLE) {
        if (j->width == 4)
            return any_special_f32_avx2((const uint32_t *)j->data + k0, k1 - k0);
        if (j->width == 2)
            return any_special_16_avx2((const uint16_t *)j->data + k0, k1 - k0,
                                       (uint16_t)j->expm);
    }
#endif
    uint64_t any = 0;
    for (int64_t k = k0; k < k1; k++)
        any |= (nf_bits(j, k) & j->expm) == j->expm;
    return any != 0;
}

static void nf_task(void *vctx, int64_t chunk, int tid)
{
    (void)tid;
    const nf_job *j = vctx;
    const int64_t k0 = chunk * NF_CHUNK, k1 = k0 + NF_CHUNK < j->n ? k0 + NF_CHUNK : j->n;
    int64_t nan = 0, inf = 0, first = -1;
    bool first_nan = false;
    if (any_special(j, k0, k1))
        for (int64_t k = k0; k < k1; k++) {
            const uint64_t u = nf_bits(j, k);
            if ((u & j->expm) != j->expm)
                continue;
            const bool is_nan = (u & j->manm) != 0;
            *(is_nan ? &nan : &inf) += 1;
            if (first < 0) {
                first = k;
                first_nan = is_nan;
            }
        }
    j->nan[chunk] = nan;
    j->inf[chunk] = inf;
    j->first[chunk] = first;
    j->first_nan[chunk] = first_nan;
}

bool cpu_count_nonfinite_with(cpk_pool *pool, cpk_isa isa, ck_dtype dt, int64_t n,
                              const void *data, int64_t *nan, int64_t *inf, int64_t *first,
                              bool *first_nan)
{
    *nan = *inf = 0;
    *first = -1;
    *first_nan = false;
    nf_job j = {.data = data, .n = n, .isa = isa};
    switch (dt) {
    case CK_F32: j.width = 4, j.expm = 0x7f800000u, j.manm = 0x007fffffu; break;
    case CK_F64: j.width = 8, j.expm = 0x7ff0000000000000ull, j.manm = 0x000fffffffffffffull; break;
    case CK_F16: j.width = 2, j.expm = 0x7c00u, j.manm = 0x03ffu; break;
    case CK_BF16: j.width = 2, j.expm = 0x7f80u, j.manm = 0x007fu; break;
    default: return true; /* not a float: nothing counts as non-finite */
    }
    if (n <= 0 || !data)
        return true;
    const int64_t chunks = (n + NF_CHUNK - 1) / NF_CHUNK;
    void *mem = malloc((size_t)chunks * (3 * sizeof(int64_t) + sizeof(bool)));
    if (!mem)
        return false;
    j.nan = mem;
    j.inf = j.nan + chunks;
    j.first = j.inf + chunks;
    j.first_nan = (bool *)(j.first + chunks);
    cpk_parallel(pool, chunks, nf_task, &j);
    for (int64_t c = 0; c < chunks; c++) {
        *nan += j.nan[c];
        *inf += j.inf[c];
        if (*first < 0 && j.first[c] >= 0) {
            *first = j.first[c];
            *first_nan = j.first_nan[c];
        }
    }
    free(mem);
    return true;
}
