/* Philox4x32-10 known answers (Random123) and the seed-stream derivations built on it. */
#include <check.h>
#include <string.h>

#include "harness/core/philox.h"
#include "harness/core/rng.h"

static const struct {
    const char *desc;
    uint32_t ctr[4], key[2], out[4];
} known[] = {
    {"zeros", {0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {"all ones",
     {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {"pi digits",
     {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

START_TEST(philox_matches_random123_known_answers)
{
    ck_philox_ctr c;
    ck_philox_key k;
    for (int i = 0; i < 4; i++)
        c.v[i] = known[_i].ctr[i];
    k.v[0] = known[_i].key[0];
    k.v[1] = known[_i].key[1];
    ck_philox_ctr r = ck_philox4x32_10(c, k);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(r.v[i] == known[_i].out[i], "%s: word %d is %08x, want %08x",
                      known[_i].desc, i, r.v[i], known[_i].out[i]);
}
END_TEST

START_TEST(keyed_stream_depends_on_every_key_part)
{
    ck_rng_stream base = ck_rng_keyed(1234, 3, CK_PURPOSE_DROPOUT, 0);
    uint32_t w = ck_rng_u32(&base, 0);
    ck_rng_stream s;
    s = ck_rng_keyed(1235, 3, CK_PURPOSE_DROPOUT, 0);
    ck_assert_uint_ne(ck_rng_u32(&s, 0), w);
    s = ck_rng_keyed(1234, 4, CK_PURPOSE_DROPOUT, 0);
    ck_assert_uint_ne(ck_rng_u32(&s, 0), w);
    s = ck_rng_keyed(1234, 3, CK_PURPOSE_NOISE, 0);
    ck_assert_uint_ne(ck_rng_u32(&s, 0), w);
    s = ck_rng_keyed(1234, 3, CK_PURPOSE_DROPOUT, 1);
    ck_assert_uint_ne(ck_rng_u32(&s, 0), w);
    /* the same key replays the same word: what recomputation relies on */
    s = ck_rng_keyed(1234, 3, CK_PURPOSE_DROPOUT, 0);
    ck_assert_uint_eq(ck_rng_u32(&s, 0), w);
}
END_TEST

START_TEST(stream_words_follow_blocks_and_offsets)
{
    ck_rng_stream s = ck_rng_keyed(7, 1, CK_PURPOSE_GLOBAL, 0);
    ck_philox_ctr b1 = ck_rng_block(&s, 1);
    /* word 5 is lane 1 of block 1 */
    ck_assert_uint_eq(ck_rng_u32(&s, 5), b1.v[1]);
    /* an offset shifts the stream: offset 4, word 1 == word 5 */
    ck_rng_stream t = s;
    t.offset = 4;
    ck_assert_uint_eq(ck_rng_u32(&t, 1), ck_rng_u32(&s, 5));
}
END_TEST

START_TEST(uniform_and_normal_draws_have_sane_moments)
{
    ck_rng_stream s = ck_rng_keyed(42, CK_RNG_NO_LAYER, CK_PURPOSE_INPUT, 0);
    const int n = 100000;
    double su = 0, sn = 0, sn2 = 0;
    for (int i = 0; i < n; i++) {
        double u = ck_rng_uniform_f64(&s, (uint64_t)i);
        ck_assert(u >= 0.0 && u < 1.0);
        su += u;
        double z = ck_rng_normal_f64(&s, (uint64_t)i);
        sn += z;
        sn2 += z * z;
    }
    ck_assert_double_eq_tol(su / n, 0.5, 0.01);
    ck_assert_double_eq_tol(sn / n, 0.0, 0.02);
    ck_assert_double_eq_tol(sn2 / n, 1.0, 0.02);
}
END_TEST

START_TEST(dropout_threshold_is_rate_times_2_pow_32)
{
    ck_assert_uint_eq(ck_dropout_threshold(0.0), 0u);
    ck_assert_uint_eq(ck_dropout_threshold(0.5), 0x80000000u);
    ck_assert_uint_eq(ck_dropout_threshold(0.25), 0x40000000u);
    ck_assert_uint_eq(ck_rng_uniform_words(5), 8u);
    ck_assert_uint_eq(ck_rng_normal_words(5), 20u);
}
END_TEST

/* ck_rng_uniform_f64_span (many blocks at a time): ck_rng_uniform_f64's values, bit for
 * bit, from any start, for lengths that are and are not whole groups of lanes, and from a
 * stream with an offset and a block index above 2^32 */
START_TEST(uniform_span_matches_one_block_at_a_time)
{
    ck_rng_stream s = ck_rng_keyed(0x123456789abcdefull, 3, CK_PURPOSE_INIT, 1);
    static double out[1000];
    const uint64_t starts[] = {0, 5, (1ull << 32) - 7};
    const int64_t lens[] = {0, 1, 15, 16, 17, 1000};
    for (int o = 0; o < 2; o++) {
        s.offset = o ? 40 : 0;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 6; b++) {
                ck_rng_uniform_f64_span(&s, starts[a], lens[b], out);
                for (int64_t k = 0; k < lens[b]; k++) {
                    double want = ck_rng_uniform_f64(&s, starts[a] + (uint64_t)k);
                    ck_assert_msg(memcmp(&out[k], &want, sizeof want) == 0,
                                  "start %llu + %lld: %a, one block at a time %a",
                                  (unsigned long long)starts[a], (long long)k, out[k], want);
                }
            }
    }
}
END_TEST

/* ck_rng_normal_f64_span: ck_rng_normal_f64's values, bit for bit, the same way */
START_TEST(normal_span_matches_one_block_at_a_time)
{
    ck_rng_stream s = ck_rng_keyed(0x123456789abcdefull, CK_RNG_NO_LAYER, CK_PURPOSE_INPUT, 2);
    static double out[1000];
    const uint64_t starts[] = {0, 5, (1ull << 32) - 7};
    const int64_t lens[] = {0, 1, 15, 16, 17, 1000};
    for (int o = 0; o < 2; o++) {
        s.offset = o ? 40 : 0;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 6; b++) {
                ck_rng_normal_f64_span(&s, starts[a], lens[b], out);
                for (int64_t k = 0; k < lens[b]; k++) {
                    double want = ck_rng_normal_f64(&s, starts[a] + (uint64_t)k);
                    ck_assert_msg(memcmp(&out[k], &want, sizeof want) == 0,
                                  "start %llu + %lld: %a, one block at a time %a",
                                  (unsigned long long)starts[a], (long long)k, out[k], want);
                }
            }
    }
}
END_TEST

Suite *suite_philox(void)
{
    Suite *s = suite_create("philox");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, philox_matches_random123_known_answers, 0,
                        (int)(sizeof known / sizeof known[0]));
    tcase_add_test(tc, keyed_stream_depends_on_every_key_part);
    tcase_add_test(tc, stream_words_follow_blocks_and_offsets);
    tcase_add_test(tc, uniform_and_normal_draws_have_sane_moments);
    tcase_add_test(tc, uniform_span_matches_one_block_at_a_time);
    tcase_add_test(tc, normal_span_matches_one_block_at_a_time);
    tcase_add_test(tc, dropout_threshold_is_rate_times_2_pow_32);
    suite_add_tcase(s, tc);
    return s;
}
