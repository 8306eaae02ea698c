/*
 * SHA-256 (FIPS 180-4): the digest the run metadata gives for case and --init files, so a
 * report names exactly the inputs it came from.
 */
#ifndef CK_SHA256_H
#define CK_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[64];
    size_t n_buf;
} ck_sha256_ctx;

void ck_sha256_init(ck_sha256_ctx *c);
void ck_sha256_update(ck_sha256_ctx *c, const void *data, size_t n);
/* The digest as 64 lowercase hex digits and a NUL. */
void ck_sha256_final_hex(ck_sha256_ctx *c, char hex[65]);
/* One buffer at once. */
void ck_sha256_hex(const void *data, size_t n, char hex[65]);

#endif
