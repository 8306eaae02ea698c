/*
 * ONNX metadata texts the reader keeps (onnx.h): the dynamo exporter's optimiser records
 * which values a folded constant was computed from (value_info metadata
 * `pkg.onnxscript.optimizer.folded_from`, "['fc1.weight']"), and torch.export's graph
 * signature names the module's parameters ("p_fc1_weight: PARAMETER target='fc1.weight'").
 * Metadata only names things: a text that is not of the expected form is ignored, never an
 * error, and nothing here trusts a length or count the text claims (every name is bounded,
 * every list capped).
 */
#include "harness/io/onnx.h"

#include <stdlib.h>
#include <string.h>

#define MAX_META_NAME 4096

/* A quoted name at text[*i] ('...', no quote, backslash or NUL inside, at most
 * MAX_META_NAME bytes): its start and length; false when there is none. */
static bool quoted_name(const char *t, size_t n, size_t *i, size_t *start, size_t *len)
{
    if (*i >= n || t[*i] != '\'')
        return false;
    size_t j = *i + 1;
    while (j < n && t[j] != '\'' && t[j] != '\\' && t[j] != '\0' && j - *i <= MAX_META_NAME)
        j++;
    if (j >= n || t[j] != '\'' || j - *i - 1 > MAX_META_NAME)
        return false;
    *start = *i + 1;
    *len = j - *i - 1;
    *i = j + 1;
    return true;
}

static char *copy_name(const char *t, size_t len)
{
    char *c = malloc(len + 1);
    if (c) {
        memcpy(c, t, len);
        c[len] = '\0';
    }
    return c;
}

static void skip_spaces(const char *t, size_t n, size_t *i)
{
    while (*i < n && (t[*i] == ' ' || t[*i] == '\t' || t[*i] == '\n'))
        (*i)++;
}

/* The names of a Python list literal of plain quoted names, "['a', 'b']", into src (at most
 * CK_ONNX_MAX_FOLD_SOURCES); -1 when the text is not one, -2 when out of memory. */
static int list_names(const char *t, size_t n, char **src)
{
    size_t i = 0, s, len;
    int k = 0;
    skip_spaces(t, n, &i);
    if (i >= n || t[i++] != '[')
        return -1;
    skip_spaces(t, n, &i);
    if (i < n && t[i] == ']') {
        i++;
    } else {
        for (;;) {
            if (k == CK_ONNX_MAX_FOLD_SOURCES || !quoted_name(t, n, &i, &s, &len))
                goto not_a_list;
            if (!(src[k] = copy_name(t + s, len)))
                goto oom;
            k++;
            skip_spaces(t, n, &i);
            if (i < n && t[i] == ']') {
                i++;
                break;
            }
            if (i >= n || t[i++] != ',')
                goto not_a_list;
            skip_spaces(t, n, &i);
        }
    }
    skip_spaces(t, n, &i);
    if (i != n)
        goto not_a_list;
    return k;
not_a_list:
    while (k > 0)
        free(src[--k]);
    return -1;
oom:
    while (k > 0)
        free(src[--k]);
    return -2;
}

ck_status ck_onnx_add_fold(ck_onnx_model *m, const char *value, const char *text, size_t n)
{
    if (m->n_folds >= CK_ONNX_MAX_NODES)
        return CK_OK; /* (a second record of one value: ck_onnx_fold_find finds the first) */
    char **src = calloc(CK_ONNX_MAX_FOLD_SOURCES, sizeof *src);
    if (!src)
        return CK_ERR_NOMEM;
    int k = list_names(text, n, src);
    if (k < 0) {
        free(src);
        return k == -2 ? CK_ERR_NOMEM : CK_OK;
    }
    ck_onnx_fold *g = realloc(m->folds, (size_t)(m->n_folds + 1) * sizeof *g);
    char *v = strdup(value);
    if (!g || !v) {
        if (g)
            m->folds = g;
        free(v);
        for (int i = 0; i < k; i++)
            free(src[i]);
        free(src);
        return CK_ERR_NOMEM;
    }
    m->folds = g;
    g[m->n_folds++] = (ck_onnx_fold){.value = v, .n_src = k, .src = src};
    return CK_OK;
}

ck_status ck_onnx_add_signature(ck_onnx_model *m, const char *text, size_t n)
{
    static const char tag[] = ": PARAMETER target=";
    const size_t tn = sizeof tag - 1;
    size_t line = 0;
    while (line < n) {
        size_t end = line;
        while (end < n && text[end] != '\n')
            end++;
        const char *hit = NULL;
        for (size_t j = line; j + tn <= end && !hit; j++)
            if (memcmp(text + j, tag, tn) == 0)
                hit = text + j;
        size_t i = hit ? (size_t)(hit - text) + tn : end, s, len;
        if (hit && m->n_torch_params < CK_ONNX_MAX_NODES && quoted_name(text, end, &i, &s, &len) &&
            len > 0) {
            char *c = copy_name(text + s, len);
            char **g = c ? realloc(m->torch_params, (size_t)(m->n_torch_params + 1) * sizeof *g)
                         : NULL;
            if (!g) {
                free(c);
                return CK_ERR_NOMEM;
            }
            m->torch_params = g;
            g[m->n_torch_params++] = c;
        }
        line = end + 1;
    }
    return CK_OK;
}

const ck_onnx_fold *ck_onnx_fold_find(const ck_onnx_model *m, const char *name)
{
    for (int i = 0; i < m->n_folds; i++)
        if (strcmp(m->folds[i].value, name) == 0)
            return &m->folds[i];
    return NULL;
}

bool ck_onnx_is_torch_param(const ck_onnx_model *m, const char *name)
{
    for (int i = 0; i < m->n_torch_params; i++)
        if (strcmp(m->torch_params[i], name) == 0)
            return true;
    return false;
}
