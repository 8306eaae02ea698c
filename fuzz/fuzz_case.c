/*
 * libFuzzer target: the case-file parser and the graph builder (shape inference) on
 * arbitrary bytes. Errors must be one line; accepted cases must build or fail cleanly.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/model/case.h"
#include "harness/model/graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_case c;
    ck_graph g;
    ck_error err;
    if (ck_case_parse((const char *)data, size, "fuzz.json", &c, &err) != CK_OK) {
        if (strchr(err.msg, '\n'))
            abort();
        return 0;
    }
    if (ck_graph_build(&c, &g, &err) == CK_OK)
        ck_graph_free(&g);
    else if (strchr(err.msg, '\n'))
        abort();
    ck_case_free(&c);
    return 0;
}
