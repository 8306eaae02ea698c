/*
 * The upsample family: Resize and Upsample (nearest, integer scales), and the
 * Unsqueeze -> Tile -> [Transpose] -> Reshape chains tf2onnx writes for nearest upsampling.
 */
#include "harness/model/onnx_import_internal.h"

#include <math.h>
#include <string.h>

ck_status imp_map_resize(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_attr *mode = ck_onnx_attr_find(n, "mode");
    if (mode && mode->s && strcmp(mode->s, "nearest") != 0)
        return imp_fail_node(im, "mode %s is not supported (only nearest with integer scales)",
                             mode->s);
    const ck_onnx_attr *ctm = ck_onnx_attr_find(n, "coordinate_transformation_mode");
    if (strcmp(n->op_type, "Resize") == 0 && ctm && ctm->s && strcmp(ctm->s, "asymmetric") != 0)
        return imp_fail_node(im, "coordinate_transformation_mode %s is not supported", ctm->s);
    const ck_onnx_attr *nm = ck_onnx_attr_find(n, "nearest_mode");
    if (nm && nm->s && strcmp(nm->s, "floor") != 0)
        return imp_fail_node(im, "nearest_mode %s is not supported", nm->s);
    /* Upsample (opset 7-9): X, scales; Resize (opset 11+): X, roi, scales[, sizes] */
    int si = strcmp(n->op_type, "Upsample") == 0 ? 1 : 2;
    const ck_onnx_tensor *sc = n->n_in > si ? imp_const_of(im, n->in[si]) : NULL;
    if (!sc || sc->numel < 3 || sc->numel > 5)
        return imp_fail_node(im, "the scales must be a constant of 3 to 5 values (sizes are not "
                                 "supported)");
    int nsp = (int)sc->numel - 2;
    int64_t scale[3];
    if (imp_elem_f64(sc, 0) != 1.0 || imp_elem_f64(sc, 1) != 1.0)
        return imp_fail_node(im, "only spatial dims may be scaled");
    for (int i = 0; i < nsp; i++) {
        double s = imp_elem_f64(sc, 2 + i);
        if (!(s >= 1.0) || s != floor(s) || s > CK_SIZE_CAP)
            return imp_fail_node(im, "scale %g is not a positive integer", s);
        scale[i] = (int64_t)s;
    }
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = imp_new_layer(im, name, imp_nd_op("upsample", nsp, op, sizeof op));
    if (!L)
        return imp_oom(im);
    int in0 = 0;
    CK_TRY(imp_set_inputs(im, L, n, &in0, 1));
    if (!imp_add_ints(L, "scale", scale, nsp))
        return imp_oom(im);
    return imp_bind(im, n->out[0], name);
}

/* tf2onnx writes Keras's UpSampling1D/2D/3D (keras.ops.repeat along each spatial axis) as
 * one Unsqueeze → Tile → Reshape chain per axis, with layout Transposes in between. The
 * chain is followed symbolically: each axis of the current value is a row-major list of
 * factors, a source axis of the chain's input (its size unknown here) or a repeat count.
 * Unsqueeze inserts an empty axis, Tile may only repeat an empty one, Transpose permutes,
 * and Reshape may only merge each axis holding a source factor with the repeat-only axes
 * right after it (the target dims then give the sizes, checked for consistency). The chain
 * is an upsampling iff it ends with the input's axes in their order, N and C unrepeated and
 * each spatial axis a source factor followed by repeats: element s repeated r times. */
#define REP_AXES (CK_MAX_DIMS + 4)

#define REP_FACTORS 8

typedef struct { int n; int f[REP_FACTORS]; } rep_axis; /* f >= 0: source axis; < 0: -repeat */

static ck_status rep_ints(imp *im, const ck_onnx_node *n, int k, const char *attr,
                          int64_t *out, int *count)
{
    const ck_onnx_tensor *c = n->n_in > k ? imp_const_of(im, n->in[k]) : NULL;
    const ck_onnx_attr *a = attr ? ck_onnx_attr_find(n, attr) : NULL;
    int64_t cnt = c ? c->numel : a ? a->n_ints : -1;
    if (cnt < 1 || cnt > REP_AXES || (c && c->data_type != CK_ONNX_INT64))
        return imp_fail_node(im, "expected a constant list of 1 to %d int64 values", REP_AXES);
    for (int64_t i = 0; i < cnt; i++)
        out[i] = c ? (int64_t)imp_elem_f64(c, i) : a->ints[i];
    *count = (int)cnt;
    return CK_OK;
}

static ck_status rep_step(imp *im, const ck_onnx_node *n, rep_axis *ax, int *rank,
                          int64_t *size, int nsrc)
{
    int64_t v[REP_AXES];
    int nv;
    const char *op = n->op_type;
    if (strcmp(op, "Unsqueeze") == 0) {
        CK_TRY(rep_ints(im, n, 1, "axes", v, &nv));
        int a = (int)(v[0] < 0 ? v[0] + *rank + 1 : v[0]);
        if (nv != 1 || a < 0 || a > *rank || *rank + 1 > REP_AXES)
            return imp_fail_node(im, "only one axis inside the rank may be inserted");
        memmove(&ax[a + 1], &ax[a], (size_t)(*rank - a) * sizeof *ax);
        ax[a].n = 0;
        (*rank)++;
    } else if (strcmp(op, "Tile") == 0) {
        CK_TRY(rep_ints(im, n, 1, NULL, v, &nv));
        if (nv != *rank)
            return imp_fail_node(im, "%d repeats for a rank-%d value", nv, *rank);
        for (int i = 0; i < nv; i++) {
            if (v[i] == 1)
                continue;
            if (ax[i].n != 0 || v[i] < 1 || v[i] > CK_SIZE_CAP)
                return imp_fail_node(im, "tiles a non-inserted axis (only repeats of an inserted "
                                         "axis, i.e. nearest upsampling, are supported)");
            ax[i].n = 1;
            ax[i].f[0] = (int)-v[i];
        }
    } else if (strcmp(op, "Transpose") == 0) {
        const ck_onnx_attr *pa = ck_onnx_attr_find(n, "perm");
        rep_axis old[REP_AXES];
        bool used[REP_AXES] = {false};
        if (!pa || pa->n_ints != *rank)
            return imp_fail_node(im, "perm must list the value's %d axes", *rank);
        memcpy(old, ax, sizeof old);
        for (int i = 0; i < *rank; i++) {
            int64_t q = pa->ints[i];
            if (q < 0 || q >= *rank || used[q])
                return imp_fail_node(im, "perm is not a permutation");
            used[q] = true;
            ax[i] = old[q];
        }
    } else { /* Reshape: merge each source axis with the repeat-only axes after it */
        CK_TRY(rep_ints(im, n, 1, NULL, v, &nv));
        rep_axis out[REP_AXES];
        int g = -1;
        for (int i = 0; i < *rank; i++) {
            bool src = ax[i].n > 0 && ax[i].f[0] >= 0;
            for (int k = 1; k < ax[i].n; k++)
                src = src || ax[i].f[k] >= 0;
            if (src) {
                if (++g >= nv)
                    return imp_fail_node(im, "the target shape has fewer dims than the value");
                out[g] = ax[i];
            } else if (g < 0 || out[g].n + ax[i].n > REP_FACTORS) {
                return imp_fail_node(im, "repeats before any source axis (a tiling, not an "
                                         "upsampling)");
            } else {
                memcpy(&out[g].f[out[g].n], ax[i].f, (size_t)ax[i].n * sizeof(int));
                out[g].n += ax[i].n;
            }
        }
        if (g + 1 != nv)
            return imp_fail_node(im, "the target shape splits an axis (only merges are supported)");
        for (int j = 0; j < nv; j++) { /* size of the one source factor of each group */
            int64_t rep = 1;
            int sym = -1;
            for (int k = 0; k < out[j].n; k++) {
                if (out[j].f[k] < 0)
                    rep *= -out[j].f[k];
                else if (sym >= 0)
                    return imp_fail_node(im, "merges two axes of the input");
                else
                    sym = out[j].f[k];
            }
            if (v[j] < 1 || v[j] % rep != 0 || sym >= nsrc ||
                (size[sym] >= 0 && size[sym] != v[j] / rep))
                return imp_fail_node(im, "target dim %lld does not match the value's axis",
                                     (long long)v[j]);
            size[sym] = v[j] / rep;
        }
        memcpy(ax, out, (size_t)nv * sizeof *ax);
        *rank = nv;
    }
    return CK_OK;
}

static bool rep_chain_op(const char *op)
{
    return strcmp(op, "Unsqueeze") == 0 || strcmp(op, "Tile") == 0 ||
           strcmp(op, "Transpose") == 0 || strcmp(op, "Reshape") == 0;
}

/* Node idx is an Unsqueeze of an activation: the chain from it as one upsample layer, or
 * one line naming the node that makes it something else. */
ck_status imp_map_repeat_chain(imp *im, int idx)
{
    const ck_onnx_node *first = &im->m->nodes[idx];
    int t = imp_sole_reader(im, first->out[0]);
    const ck_onnx_node *tile = t >= 0 ? &im->m->nodes[t] : NULL;
    int64_t reps[REP_AXES];
    int nr;
    if (!imp_layer_of(im, first->in[0]) || !tile || strcmp(tile->op_type, "Tile") != 0)
        return imp_fail_node(im, "an Unsqueeze of an activation is supported only as the start of "
                                 "nearest upsampling (Unsqueeze -> Tile -> Reshape, as tf2onnx "
                                 "writes UpSampling1D/2D/3D)");
    im->node = tile;
    CK_TRY(rep_ints(im, tile, 1, NULL, reps, &nr));
    int rank = nr - 1, nsrc = rank;
    if (rank < 3 || rank > 5) {
        im->node = first;
        return imp_fail_node(im, "upsampling a rank-%d value (only N, C and 1 to 3 spatial dims)",
                             rank);
    }
    rep_axis ax[REP_AXES];
    int64_t size[REP_AXES];
    for (int i = 0; i < rank; i++) {
        ax[i].n = 1;
        ax[i].f[0] = i;
        size[i] = -1;
    }
    int chain[64], len = 0, cur = idx;
    const char *out = first->out[0];
    while (cur >= 0 && len < 64) {
        const ck_onnx_node *n = &im->m->nodes[cur];
        im->node = n;
        CK_TRY(rep_step(im, n, ax, &rank, size, nsrc));
        chain[len++] = cur;
        out = n->out[0];
        int nx = imp_sole_reader(im, out);
        cur = nx >= 0 && rep_chain_op(im->m->nodes[nx].op_type) ? nx : -1;
    }
    im->node = first;
    int64_t scale[3];
    bool ok = rank == nsrc;
    for (int i = 0; ok && i < rank; i++) {
        int64_t rep = 1;
        ok = ax[i].n >= 1 && ax[i].f[0] == i;
        for (int k = 1; ok && k < ax[i].n; k++)
            rep *= -ax[i].f[k], ok = ax[i].f[k] < 0;
        ok = ok && (i >= 2 || rep == 1);
        if (i >= 2)
            scale[i - 2] = rep;
    }
    if (!ok)
        return imp_fail_node(im,
                             "the Unsqueeze/Tile/Transpose/Reshape chain ending at `%s` is not "
                             "a nearest upsampling of its input (N, C, spatial order kept, "
                             "each spatial element repeated)",
                             out);
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(imp_scoped_name(im, first, "upsample", name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, imp_nd_op("upsample", nsrc - 2, op, sizeof op),
                               first->in[0], out, &L));
    if (!imp_add_ints(L, "scale", scale, nsrc - 2))
        return imp_oom(im);
    for (int i = 1; i < len; i++)
        im->folded[chain[i]] = true;
    return CK_OK;
}
