/*
 * libFuzzer target: the .npy reader, and the .npz reader for inputs that start like a zip
 * archive ("PK"). Every accepted tensor's bytes are read, so a data pointer or size that
 * strays outside the input is caught by AddressSanitizer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/npy.h"
#include "harness/io/npz.h"

static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_tensorset s;
    ck_error err;
    ck_status st;
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
        st = ck_npz_parse(data, size, "fuzz.npz", &s, &err);
    } else {
        ck_tensorset_init(&s);
        st = ck_npy_parse_into(data, size, "fuzz.npy", "t", &s, &err);
    }
    if (st == CK_OK) {
        for (int i = 0; i < s.n; i++) {
            const unsigned char *p = s.t[i].data;
            size_t nb = ck_named_tensor_bytes(&s.t[i]);
            unsigned acc = 0;
            for (size_t k = 0; k < nb; k++)
                acc += p[k];
            sink = acc;
        }
    } else if (strchr(err.msg, '\n')) {
        abort(); /* every error is one line */
    }
    ck_tensorset_free(&s);
    return 0;
}
