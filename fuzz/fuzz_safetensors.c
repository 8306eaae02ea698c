/*
 * libFuzzer target: the safetensors reader on arbitrary bytes. Whatever it accepts must
 * survive a round trip: the header our writer produces for the parsed set, followed by
 * the same data, must parse again to the same names, dtypes, shapes and bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_tensorset s, again;
    ck_error err;
    if (ck_safetensors_parse(data, size, "fuzz.safetensors", &s, &err) != CK_OK)
        return 0;
    char *hdr = NULL;
    size_t hlen = 0, total = 0;
    if (ck_safetensors_header(s.n, s.t, &hdr, &hlen, &err) != CK_OK)
        abort(); /* a set we accepted must be writable */
    total = hlen;
    for (int i = 0; i < s.n; i++)
        total += ck_named_tensor_bytes(&s.t[i]);
    unsigned char *img = malloc(total ? total : 1);
    if (!img)
        abort();
    memcpy(img, hdr, hlen);
    size_t off = hlen;
    for (int i = 0; i < s.n; i++) {
        size_t nb = ck_named_tensor_bytes(&s.t[i]);
        if (nb)
            memcpy(img + off, s.t[i].data, nb);
        off += nb;
    }
    if (ck_safetensors_parse(img, total, "again.safetensors", &again, &err) != CK_OK)
        abort();
    if (again.n != s.n)
        abort();
    for (int i = 0; i < s.n; i++) {
        const ck_named_tensor *a = &s.t[i], *b = &again.t[i];
        size_t nb = ck_named_tensor_bytes(a);
        if (strcmp(a->name, b->name) != 0 || a->dtype != b->dtype ||
            !ck_shape_equal(&a->shape, &b->shape) || (nb && memcmp(a->data, b->data, nb) != 0))
            abort();
    }
    ck_tensorset_free(&again);
    free(img);
    free(hdr);
    ck_tensorset_free(&s);
    return 0;
}
