/*
 * libFuzzer target: the judge-input manifest reader (judge.json, framework_dump.h) on
 * arbitrary bytes. Errors must be one line; an accepted manifest must free cleanly.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verify/framework_dump.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_fw_input in;
    ck_error err;
    if (ck_fw_input_parse((const char *)data, size, "fuzz-dump", &in, &err) != CK_OK) {
        if (strchr(err.msg, '\n'))
            abort();
        return 0;
    }
    for (int i = 0; i < in.n_runs; i++)
        (void)ck_fw_find_run(&in, in.runs[i].role, in.runs[i].dtype, in.runs[i].mode,
                             in.runs[i].rank, in.runs[i].calibration);
    ck_fw_input_free(&in);
    return 0;
}
