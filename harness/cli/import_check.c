/*
 * `import --check-against REF` (import_check.h): a copy of the imported case with every
 * dropout rate 0 and its weights in a temporary file is built and judged by
 * ck_faithful_check; the line it prints or refuses with names every tensor compared.
 */
#include "harness/cli/import_check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/registry.h"
#include "harness/io/safetensors.h"
#include "harness/io/tensorload.h"
#include "harness/model/case.h"
#include "harness/model/graph.h"
#include "harness/verify/faithful.h"
#include "harness/cli/messages.h"

/* Counts the layers that behave differently in training, then sets every dropout to 0 and
 * init.from to weights_path. */
static bool prepare_copy(cJSON *copy, const char *weights_path, int *n_bn, int *n_drop)
{
    cJSON *L;
    *n_bn = *n_drop = 0;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(copy, "layers"))
    {
        const char *op = cJSON_GetStringValue(cJSON_GetObjectItem(L, "op"));
        if (!op)
            continue;
        const cJSON *ev = cJSON_GetObjectItem(L, "eval");
        if (strcmp(op, "batchnorm") == 0 && !cJSON_IsTrue(ev))
            (*n_bn)++;
        const char *key = strcmp(op, "dropout") == 0 ? "rate"
                          : strcmp(op, "attention") == 0 ? "dropout" : NULL;
        const cJSON *r = key ? cJSON_GetObjectItem(L, key) : NULL;
        if (r && cJSON_IsNumber(r) && r->valuedouble > 0) {
            (*n_drop)++;
            if (!cJSON_ReplaceItemInObject(L, key, cJSON_CreateNumber(0.0)))
                return false;
        }
    }
    cJSON *init = cJSON_GetObjectItem(copy, "init");
    if (!init && !(init = cJSON_AddObjectToObject(copy, "init")))
        return false;
    cJSON_DeleteItemFromObject(init, "from");
    return cJSON_AddStringToObject(init, "from", weights_path) != NULL;
}

/* "output 3.1e-08, loss 2e-09, 6 gradients (worst grad.fc.weight 4.2e-06, 1 judged against
 * the step's gradient norm)" */
static void describe(const ck_faithful_result *r, char *out, size_t n)
{
    size_t k = 0;
    int grads = 0, vs_norm = 0;
    const ck_faithful_item *worst = NULL;
    for (int i = 0; i < r->n; i++) {
        const ck_faithful_item *it = &r->items[i];
        if (strncmp(it->name, "grad.", 5) != 0) {
            k += (size_t)snprintf(out + (k < n ? k : n - 1), k < n ? n - k : 1, "%s%s rel L2 %.2g", k ? ", " : "",
                                  it->name, it->rel_l2);
            continue;
        }
        grads++;
        vs_norm += it->vs_step_norm;
        if (!worst || it->rel_l2 > worst->rel_l2)
            worst = it;
    }
    if (grads)
        k += (size_t)snprintf(out + (k < n ? k : n - 1), k < n ? n - k : 1, ", %d gradients (worst %s %.2g%s)",
                              grads, worst->name, worst->rel_l2,
                              vs_norm ? ", zero ones vs the step's gradient norm" : "");
    else
        k += (size_t)snprintf(out + (k < n ? k : n - 1), k < n ? n - k : 1, ", no gradients (the reference has "
                              "none)");
    if (!r->has_loss)
        k += (size_t)snprintf(out + (k < n ? k : n - 1), k < n ? n - k : 1, ", no loss (the reference has none)");
    if (r->has_eval)
        k += (size_t)snprintf(out + (k < n ? k : n - 1), k < n ? n - k : 1, "; the reference's train vs eval "
                              "outputs differ by rel L2 %.2g", r->train_eval_rel_l2);
    else
        k += (size_t)snprintf(out + (k < n ? k : n - 1), k < n ? n - k : 1, "; train-mode behaviour not checked "
                              "beyond that (the reference has no output_eval)");
    char fw_bn[32] = "not given", fw_drop[32] = "not given";
    if (r->ref_batchnorm >= 0)
        snprintf(fw_bn, sizeof fw_bn, "%d", r->ref_batchnorm);
    if (r->ref_dropout >= 0)
        snprintf(fw_drop, sizeof fw_drop, "%d", r->ref_dropout);
    if (k < n)
        snprintf(out + k, n - k, "; batchnorm layers %d (framework: %s), dropout layers %d "
                 "(framework: %s; rates set to 0 for the comparison)", r->case_batchnorm, fw_bn,
                 r->case_dropout, fw_drop);
}

static ck_status run_check(cJSON *copy, const char *model_path, const char *ref_path,
                           const ck_onnx_origins *origins, int n_bn, int n_drop,
                           ck_faithful_result *res, ck_error *err)
{
    ck_tensorset ref;
    ck_case cs;
    ck_graph g;
    ck_backend *b = NULL;
    memset(&cs, 0, sizeof cs);
    memset(&g, 0, sizeof g);
    char *text = cJSON_Print(copy);
    if (!text)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    ck_status st = ck_tensorset_load(ref_path, &ref, err);
    if (st != CK_OK) {
        free(text);
        return st;
    }
    if ((st = ck_case_parse(text, strlen(text), model_path, &cs, err)) == CK_OK &&
        (st = ck_graph_build(&cs, &g, err)) == CK_OK &&
        (st = ck_backend_create("cpu", NULL, &b, err)) == CK_OK)
        st = ck_faithful_check(b, &g, origins, &ref, ref_path, n_bn, n_drop, res, err);
    if (b)
        b->destroy(b);
    if (g.nodes)
        ck_graph_free(&g);
    ck_case_free(&cs);
    ck_tensorset_free(&ref);
    free(text);
    return st;
}

ck_status ck_cli_import_check(const cJSON *root, const ck_tensorset *w,
                              const ck_onnx_origins *origins, const char *model_path,
                              const char *ref_path, char **summary, ck_error *err)
{
    char tmpl[4096];
    *summary = NULL;
    int tl = snprintf(tmpl, sizeof tmpl, "%s/ckpt-harness-check-XXXXXX.safetensors",
                      ck_cli_temp_dir());
    if (tl < 0 || (size_t)tl >= sizeof tmpl)
        return ck_fail(err, CK_ERR_IO, "TMPDIR %s is too long for a temporary file name",
                       ck_cli_temp_dir());
    int fd = mkstemps(tmpl, 12);
    if (fd < 0)
        return ck_fail(err, CK_ERR_IO, "cannot create a temporary weights file: %s",
                       strerror(errno));
    close(fd);
    cJSON *copy = cJSON_Duplicate(root, true);
    int n_bn = 0, n_drop = 0;
    ck_faithful_result res;
    memset(&res, 0, sizeof res);
    ck_status st = copy && prepare_copy(copy, tmpl, &n_bn, &n_drop)
                       ? ck_safetensors_write(tmpl, w->n, w->t, err)
                       : ck_fail(err, CK_ERR_NOMEM, "out of memory");
    if (st == CK_OK)
        st = run_check(copy, model_path, ref_path, origins, n_bn, n_drop, &res, err);
    unlink(tmpl);
    cJSON_Delete(copy);
    if (st != CK_OK)
        return st;
    char what[1500];
    describe(&res, what, sizeof what);
    if (!res.pass)
        st = ck_error_one_line(err, ck_fail(err, CK_ERR_INPUT, "%s: refused by --check-against "
                                            "%s: %s (compared: %s)", model_path, ref_path,
                                            res.why, what));
    else if (!(*summary = malloc(strlen(what) + 200)))
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
    else
        snprintf(*summary, strlen(what) + 200, "check-against %s: the import matches the "
                 "framework in training mode (relative L2 <= %g): %s", ref_path,
                 CK_FAITHFUL_REL_L2, what);
    ck_faithful_result_free(&res);
    return st;
}
