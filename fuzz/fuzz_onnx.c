/*
 * libFuzzer target: the ONNX reader on arbitrary bytes, then the importer on whatever the
 * reader accepts, then what `import` does before it writes a case: the case parsed, its graph
 * built and every weight checked against the graph's shapes. Every error must be one line;
 * an accepted model's tensors must hold exactly numel x element-size bytes, and an imported
 * case must come with its weights.
 * Tensors with external data get the input's own bytes as the file their location names
 * (offsets and sizes checked against it); the importer must refuse any left unattached.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/onnx.h"
#include "harness/model/graph.h"
#include "harness/model/onnx_import.h"
#include "harness/model/params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_onnx_model m;
    ck_error err;
    if (ck_onnx_parse(data, size, "fuzz.onnx", &m, &err) != CK_OK) {
        if (strchr(err.msg, '\n'))
            abort();
        return 0;
    }
    const ck_onnx_tensor *pending = ck_onnx_external_pending(&m);
    if (pending && pending->nbytes % 2 == 0) { /* odd sizes stay unattached: refused below */
        char *location = strdup(pending->ext_location);
        if (!location)
            abort();
        if (ck_onnx_attach_external(&m, location, data, size, "fuzz.onnx.data", &err) != CK_OK &&
            strchr(err.msg, '\n'))
            abort();
        free(location);
    }
    for (int i = 0; i < m.n_inits; i++) {
        const ck_onnx_tensor *t = &m.inits[i];
        if (!t->data && t->nbytes) {
            if (!t->ext_location)
                abort();
            continue;
        }
        if (t->nbytes != (size_t)t->numel * ck_onnx_elem_size(t->data_type))
            abort();
        volatile unsigned char sink = 0;
        for (size_t k = 0; k < t->nbytes; k++)
            sink ^= ((const unsigned char *)t->data)[k];
        (void)sink;
    }
    cJSON *root = NULL;
    ck_tensorset w;
    ck_status st = ck_onnx_import(&m, "fuzz.onnx", NULL, &root, &w, &err);
    if (st == CK_OK) {
        if (!root)
            abort();
        char *text = cJSON_Print(root);
        ck_case cs;
        ck_graph g;
        memset(&cs, 0, sizeof cs);
        if (text && ck_case_parse(text, strlen(text), "fuzz.onnx", &cs, &err) == CK_OK) {
            if (ck_graph_build(&cs, &g, &err) == CK_OK) {
                if (ck_graph_check_weight_set(&g, &w, "fuzz.onnx", &err) != CK_OK &&
                    strchr(err.msg, '\n'))
                    abort();
                ck_graph_free(&g);
            } else if (strchr(err.msg, '\n')) {
                abort();
            }
            ck_case_free(&cs);
        }
        free(text);
        cJSON_Delete(root);
        ck_tensorset_free(&w);
    } else if (strchr(err.msg, '\n') || root) {
        abort();
    }
    ck_onnx_free(&m);
    return 0;
}
