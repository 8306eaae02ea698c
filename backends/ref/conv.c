/*
 * CPU convolution (CK_OP_CONV): conv1d/2d/3d as PyTorch computes it (cross-correlation,
 * groups 1).
 *
 *   y[n,f,o...] = b[f] + sum_{c,k...} W[f,c,k...] * x[n,c, o*stride - pad_lo + k*dilation]
 *
 * Every call is brought to three spatial dims (missing leading dims have size 1) and the
 * kernel window becomes a list of taps: per kernel offset, the range of output positions
 * on each axis whose input position lies inside the input. Padding is never read and no
 * element is bounds-checked; the innermost loop runs along one output row, contiguous in
 * the output (and in the input when the last stride is 1). The kernels are written once
 * as a macro and instantiated for float and double; weight and bias gradients are reduced
 * in double.
 *
 * When every tensor of a call is fp32 (or every one fp64) the matching instantiation runs
 * on the tensors themselves: the fp32 path is the fast one the U-Net and benchmark cases
 * use. Otherwise (fp16/bf16 tensors, or dtypes mixed per tensor) input, weight, bias and
 * dout are widened to double scratch once per call, the fp64 kernel runs, and each output
 * element is rounded once into its tensor's dtype: products are never rounded to the low
 * dtype and the sums are accumulated in double. Gradients are computed from zero in
 * double and then added to the existing values with one rounding (ref_elem.h,
 * harness/precision.md). So a low-dtype y is exactly the fp64 result on the same inputs,
 * rounded once.
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

#include <stdlib.h>

// ----------------------------------------------------------------------------
// geometry: shapes brought to 3 spatial dims, and the taps of the kernel window

typedef struct {
    int64_t N, C, F;
    int64_t in[3], out[3]; /* spatial sizes (D, H, W) of x and y, leading dims 1 */
    int64_t stride[3];
    int64_t kvol;          /* kernel volume: W is (F, C, kvol) */
} conv_geom;

typedef struct {
    int64_t k;              /* offset of this tap in W[f, c, :] */
    int64_t lo[3], hi[3];   /* output positions [lo, hi) per axis that read inside x */
    int64_t base[3];        /* input position = o * stride + base (k * dilation - pad_lo) */
} conv_tap;

/* Output positions o in [0, n_out) with 0 <= o * stride + base < n_in, as [*lo, *hi). */
static void valid_range(int64_t base, int64_t stride, int64_t n_in, int64_t n_out,
                        int64_t *lo, int64_t *hi)
{
    int64_t l = base >= 0 ? 0 : (-base + stride - 1) / stride;
    int64_t h = n_in - 1 - base < 0 ? 0 : (n_in - 1 - base) / stride + 1;
    if (h > n_out)
        h = n_out;
    *lo = l < h ? l : h;
    *hi = h;
}

/* Offset in an input plane of the first element the tap reads for output row (o0, o1). */
static inline int64_t tap_in_row(const conv_geom *g, const conv_tap *t, int64_t o0, int64_t o1)
{
    return ((o0 * g->stride[0] + t->base[0]) * g->in[1] + o1 * g->stride[1] + t->base[1]) *
               g->in[2] + t->lo[2] * g->stride[2] + t->base[2];
}

/* Offset in an output plane of the first element the tap writes in row (o0, o1). */
static inline int64_t tap_out_row(const conv_geom *g, const conv_tap *t, int64_t o0, int64_t o1)
{
    return (o0 * g->out[1] + o1) * g->out[2] + t->lo[2];
}

// ----------------------------------------------------------------------------
// kernels, one instantiation per element type

/* The innermost row loops are unrolled by 4. Each element is still computed on its own
 * (same operations, same order: results are bit-identical), but a 1-element loop body is
 * so short that its speed depended on where the linker happened to place it (up to 1.7x
 * slower when it straddled a 64-byte fetch boundary); 4 elements per trip do not. */
#define CONV_UNROLL _Pragma("GCC unroll 4")

#define CONV_KERNELS(T, SFX)                                                                   \
    /* acc[j] += a[j] * b[j * incb] in double for j < n: element-wise, so it vectorises */     \
    static void conv_row_mac_##SFX(double *acc, const T *a, const T *b, int64_t incb,          \
                                   int64_t n)                                                  \
    {                                                                                          \
        if (incb == 1)                                                                         \
            CONV_UNROLL                                                                        \
            for (int64_t j = 0; j < n; j++)                                                    \
                acc[j] += (double)a[j] * (double)b[j];                                         \
        else                                                                                   \
            CONV_UNROLL                                                                        \
            for (int64_t j = 0; j < n; j++)                                                    \
                acc[j] += (double)a[j] * (double)b[j * incb];                                  \
    }                                                                                          \
                                                                                               \
    static void conv_forward_##SFX(T *out, const T *inp, const T *weight, const T *bias,       \
                                   const conv_geom *g, const conv_tap *taps, int64_t ntaps)    \
    {                                                                                          \
        /* out (N, F, O0, O1, O2), inp (N, C, I0, I1, I2), weight (F, C, kvol),                \
         * bias (F) or NULL */                                                                 \
        const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];                               \
        const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];                           \
        const int64_t s2 = g->stride[2];                                                       \
        for (int64_t n = 0; n < g->N; n++) {                                                   \
            for (int64_t f = 0; f < g->F; f++) {                                               \
                T *y = out + (n * g->F + f) * out_plane;                                       \
                const T b0 = bias ? bias[f] : (T)0;                                            \
                for (int64_t j = 0; j < out_plane; j++)                                        \
                    y[j] = b0;                                                                 \
                for (int64_t c = 0; c < g->C; c++) {                                           \
                    const T *x = inp + (n * g->C + c) * in_plane;                              \
                    const T *w = weight + (f * g->C + c) * g->kvol;                            \
                    for (int64_t t = 0; t < ntaps; t++) {                                      \
                        const conv_tap *tp = &taps[t];                                         \
                        const T wv = w[tp->k];                                                 \
                        const int64_t len = tp->hi[2] - tp->lo[2];                             \
                        for (int64_t o0 = tp->lo[0]; o0 < tp->hi[0]; o0++) {                   \
                            for (int64_t o1 = tp->lo[1]; o1 < tp->hi[1]; o1++) {               \
                                T *yr = y + tap_out_row(g, tp, o0, o1);                        \
                                const T *xr = x + tap_in_row(g, tp, o0, o1);                   \
                                if (s2 == 1)                                                   \
                                    CONV_UNROLL                                                \
                                    for (int64_t j = 0; j < len; j++)                          \
                                        yr[j] += wv * xr[j];                                   \
                                else                                                           \
                                    CONV_UNROLL                                                \
                                    for (int64_t j = 0; j < len; j++)                          \
                                        yr[j] += wv * xr[j * s2];                              \
                            }                                                                  \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    static void conv_backward_##SFX(T *dinp, T *dweight, T *dbias, double *row_acc,            \
                                    const T *dout, const T *inp, const T *weight,              \
                                    const conv_geom *g, const conv_tap *taps, int64_t ntaps)   \
    {                                                                                          \
        /* dinp like inp, dweight like weight, dbias (F): each accumulated, NULL when not      \
         * wanted; row_acc: O2 doubles of scratch when dweight is wanted;                      \
         * dout (N, F, O0, O1, O2) */                                                          \
        const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];                               \
        const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];                           \
        const int64_t s2 = g->stride[2];                                                       \
        if (dinp) {                                                                            \
            for (int64_t n = 0; n < g->N; n++) {                                               \
                for (int64_t c = 0; c < g->C; c++) {                                           \
                    T *dx = dinp + (n * g->C + c) * in_plane;                                  \
                    for (int64_t f = 0; f < g->F; f++) {                                       \
                        const T *dy = dout + (n * g->F + f) * out_plane;                       \
                        const T *w = weight + (f * g->C + c) * g->kvol;                        \
                        for (int64_t t = 0; t < ntaps; t++) {                                  \
                            const conv_tap *tp = &taps[t];                                     \
                            const T wv = w[tp->k];                                             \
                            const int64_t len = tp->hi[2] - tp->lo[2];                         \
                            for (int64_t o0 = tp->lo[0]; o0 < tp->hi[0]; o0++) {               \
                                for (int64_t o1 = tp->lo[1]; o1 < tp->hi[1]; o1++) {           \
                                    const T *dyr = dy + tap_out_row(g, tp, o0, o1);            \
                                    T *dxr = dx + tap_in_row(g, tp, o0, o1);                   \
                                    if (s2 == 1)                                               \
                                        CONV_UNROLL                                            \
                                        for (int64_t j = 0; j < len; j++)                      \
                                            dxr[j] += wv * dyr[j];                             \
                                    else                                                       \
                                        CONV_UNROLL                                            \
                                        for (int64_t j = 0; j < len; j++)                      \
                                            dxr[j * s2] += wv * dyr[j];                        \
                                }                                                              \
                            }                                                                  \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        if (dweight) {                                                                         \
            for (int64_t f = 0; f < g->F; f++) {                                               \
                for (int64_t c = 0; c < g->C; c++) {                                           \
                    for (int64_t t = 0; t < ntaps; t++) {                                      \
                        const conv_tap *tp = &taps[t];                                         \
                        const int64_t len = tp->hi[2] - tp->lo[2];                             \
                        for (int64_t j = 0; j < len; j++)                                      \
                            row_acc[j] = 0.0;                                                  \
                        for (int64_t n = 0; n < g->N; n++) {                                   \
                            const T *x = inp + (n * g->C + c) * in_plane;                      \
                            const T *dy = dout + (n * g->F + f) * out_plane;                   \
                            for (int64_t o0 = tp->lo[0]; o0 < tp->hi[0]; o0++) {               \
                                for (int64_t o1 = tp->lo[1]; o1 < tp->hi[1]; o1++) {           \
                                    const T *dyr = dy + tap_out_row(g, tp, o0, o1);            \
                                    const T *xr = x + tap_in_row(g, tp, o0, o1);               \
                                    conv_row_mac_##SFX(row_acc, dyr, xr, s2, len);             \
                                }                                                              \
                            }                                                                  \
                        }                                                                      \
                        double acc = 0.0;                                                      \
                        for (int64_t j = 0; j < len; j++)                                      \
                            acc += row_acc[j];                                                 \
                        dweight[(f * g->C + c) * g->kvol + tp->k] += (T)acc;                   \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        if (dbias) {                                                                           \
            for (int64_t f = 0; f < g->F; f++) {                                               \
                double acc = 0.0;                                                              \
                for (int64_t n = 0; n < g->N; n++) {                                           \
                    const T *dy = dout + (n * g->F + f) * out_plane;                           \
                    for (int64_t j = 0; j < out_plane; j++)                                    \
                        acc += (double)dy[j];                                                  \
                }                                                                              \
                dbias[f] += (T)acc;                                                            \
            }                                                                                  \
        }                                                                                      \
    }

CONV_KERNELS(float, f32)
CONV_KERNELS(double, f64)

#undef CONV_KERNELS
#undef CONV_UNROLL

// ----------------------------------------------------------------------------
// checks and setup shared by forward and backward

/* Checks x (N, C, s...), W (F, C, k...), b (F), y (N, F, o...) against op and fills the
 * geometry and the taps (*taps is malloc'd; free it). */
static ck_status conv_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *w,
                            const ck_tensor *b, const ck_tensor *y, conv_geom *g,
                            conv_tap **taps, int64_t *ntaps, ck_error *err)
{
    ck_status st = ck_opc_conv_fit(op, x, w, b, y, err);
    if (st != CK_OK)
        return st;
    const int nsp = op->nsp;
    g->N = x->shape.dim[0];
    g->C = x->shape.dim[1];
    g->F = w->shape.dim[0];
    g->kvol = 1;
    int64_t kernel[3], dilation[3], pad_lo[3];
    for (int a = 0; a < 3; a++) {
        int s = a - (3 - nsp); /* the op's axis, < 0 for an added leading axis */
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->stride[a] = s < 0 ? 1 : op->stride[s];
        kernel[a] = s < 0 ? 1 : op->kernel[s];
        dilation[a] = s < 0 ? 1 : op->dilation[s];
        pad_lo[a] = s < 0 ? 0 : op->pad_lo[s];
        if (g->stride[a] < 1 || dilation[a] < 1 || pad_lo[a] < 0)
            return ck_fail(err, CK_ERR_INTERNAL,
                           "conv%dd: stride %lld, dilation %lld, pad_lo %lld on axis %d",
                           nsp, (long long)g->stride[a], (long long)dilation[a],
                           (long long)pad_lo[a], s);
        g->kvol *= kernel[a];
    }

    *taps = malloc((size_t)g->kvol * sizeof **taps);
    if (!*taps)
        return ck_fail(err, CK_ERR_NOMEM, "conv%dd: no memory for %lld kernel taps", nsp,
                       (long long)g->kvol);
    int64_t n = 0, k = 0;
    for (int64_t k0 = 0; k0 < kernel[0]; k0++) {
        for (int64_t k1 = 0; k1 < kernel[1]; k1++) {
            for (int64_t k2 = 0; k2 < kernel[2]; k2++, k++) {
                conv_tap *t = &(*taps)[n];
                const int64_t ki[3] = {k0, k1, k2};
                bool empty = false;
                for (int a = 0; a < 3; a++) {
                    t->base[a] = ki[a] * dilation[a] - pad_lo[a];
                    valid_range(t->base[a], g->stride[a], g->in[a], g->out[a], &t->lo[a],
                                &t->hi[a]);
                    empty = empty || t->lo[a] == t->hi[a];
                }
                t->k = k;
                if (!empty)
                    n++;
            }
        }
    }
    *ntaps = n;
    return CK_OK;
}

// ----------------------------------------------------------------------------
// fp16/bf16 and mixed dtypes: the fp64 kernels on wide views (kept out of the entry points
// so that their fp32 path compiles as tightly as it always did)

static ck_status conv_forward_wide(ck_op_io *io, const ck_tensor *b, const conv_geom *g,
                                   const conv_tap *taps, int64_t ntaps, ck_error *err)
{
    ref_wide wx = {NULL, NULL}, ww = {NULL, NULL}, wb = {NULL, NULL}, wy = {NULL, NULL};
    ck_status st;
    if ((st = ref_wide_in("conv", io->in[0], &wx, err)) == CK_OK &&
        (st = ref_wide_in("conv", io->weight, &ww, err)) == CK_OK &&
        (st = ref_wide_in("conv", b, &wb, err)) == CK_OK &&
        (st = ref_wide_out("conv", io->out, false, &wy, err)) == CK_OK) {
        conv_forward_f64(wy.data, wx.data, ww.data, wb.data, g, taps, ntaps);
        ref_wide_store(io->out, &wy);
    }
    ref_wide_free(&wx);
    ref_wide_free(&ww);
    ref_wide_free(&wb);
    ref_wide_free(&wy);
    return st;
}

/* gradients computed from zero in double, then added with one rounding each */
static ck_status conv_backward_wide(const ck_op_io *io, ck_op_grads *g, ck_tensor *db,
                                    double *row_acc, const conv_geom *geom,
                                    const conv_tap *taps, int64_t ntaps, ck_error *err)
{
    ref_wide wx = {NULL, NULL}, ww = {NULL, NULL}, wdy = {NULL, NULL};
    ref_wide wdx = {NULL, NULL}, wdw = {NULL, NULL}, wdb = {NULL, NULL};
    ck_status st;
    if ((st = ref_wide_in("conv", io->in[0], &wx, err)) == CK_OK &&
        (st = ref_wide_in("conv", io->weight, &ww, err)) == CK_OK &&
        (st = ref_wide_in("conv", g->dout, &wdy, err)) == CK_OK &&
        (st = ref_wide_out("conv", g->din[0], true, &wdx, err)) == CK_OK &&
        (st = ref_wide_out("conv", g->dweight, true, &wdw, err)) == CK_OK &&
        (st = ref_wide_out("conv", db, true, &wdb, err)) == CK_OK) {
        conv_backward_f64(wdx.data, wdw.data, wdb.data, row_acc, wdy.data, wx.data, ww.data,
                          geom, taps, ntaps);
        ref_wide_accumulate(g->din[0], &wdx);
        ref_wide_accumulate(g->dweight, &wdw);
        ref_wide_accumulate(db, &wdb);
    }
    ref_wide *wide[] = {&wx, &ww, &wdy, &wdx, &wdw, &wdb};
    for (int i = 0; i < 6; i++)
        ref_wide_free(wide[i]);
    return st;
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h)

static ck_status conv_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                           ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *b = op->bias ? io->bias : NULL;
    const ck_tensor *all[] = {x, io->weight, b, io->out};
    ck_status st = ref_check_float_dtypes("conv", all, 4, err);
    if (st != CK_OK)
        return st;
    const ck_dtype dt = ref_common_dtype(all, 4);
    conv_geom g;
    conv_tap *taps = NULL;
    int64_t ntaps = 0;
    if ((st = conv_setup(op, x, io->weight, b, io->out, &g, &taps, &ntaps, err)) != CK_OK)
        goto done;
    if (dt == CK_F32)
        conv_forward_f32(io->out->data, x->data, io->weight->data, b ? b->data : NULL, &g,
                         taps, ntaps);
    else if (dt == CK_F64)
        conv_forward_f64(io->out->data, x->data, io->weight->data, b ? b->data : NULL, &g,
                         taps, ntaps);
    else
        st = conv_forward_wide(io, b, &g, taps, ntaps, err);
done:
    free(taps);
    return st;
}

static ck_status conv_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                            const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    ck_tensor *db = op->bias ? g->dbias : NULL;
    const ck_tensor *all[] = {x, io->weight, g->dout, g->din[0], g->dweight, db};
    ck_status st = ref_check_float_dtypes("conv", all, 6, err);
    if (st != CK_OK)
        return st;
    const ck_dtype dt = ref_common_dtype(all, 6);
    conv_geom geom;
    conv_tap *taps = NULL;
    int64_t ntaps = 0;
    double *row_acc = NULL; /* dweight scratch: one output row */
    if ((st = conv_setup(op, x, io->weight, db, g->dout, &geom, &taps, &ntaps, err)) != CK_OK)
        goto done;
    if (g->dweight && !(row_acc = malloc((size_t)geom.out[2] * sizeof *row_acc))) {
        st = ck_fail(err, CK_ERR_NOMEM, "conv%dd: no memory for a row of %lld doubles",
                     op->nsp, (long long)geom.out[2]);
        goto done;
    }
    void *dx = g->din[0] ? g->din[0]->data : NULL;
    void *dw = g->dweight ? g->dweight->data : NULL;
    void *dbias = db ? db->data : NULL;
    if (dt == CK_F32)
        conv_backward_f32(dx, dw, dbias, row_acc, g->dout->data, x->data, io->weight->data,
                          &geom, taps, ntaps);
    else if (dt == CK_F64)
        conv_backward_f64(dx, dw, dbias, row_acc, g->dout->data, x->data, io->weight->data,
                          &geom, taps, ntaps);
    else
        st = conv_backward_wide(io, g, db, row_acc, &geom, taps, ntaps, err);
done:
    free(row_acc);
    free(taps);
    return st;
}

/*
 * Transposed convolution (PyTorch ConvTranspose{1,2,3}d, groups 1), in double (wide_kernels.h).
 * Input position i and tap t feed output o = i stride - pad + t dil. Forward gathers:
 * each output element is one sum (bias first, then ci, then taps in row-major order);
 * dx gathers over (co, taps); dW over (n, input positions); db over (n, outputs).
 */
#include "backends/ref/wide_scope.h"

/* input index along one dim feeding output o through tap t, or -1 */
static inline int64_t src_pos(const ck_convt_geom *g, int a, int64_t o, int64_t t)
{
    int64_t num = o + g->pad[a] - t * g->dil[a];
    if (num < 0 || num % g->stride[a] != 0)
        return -1;
    int64_t i = num / g->stride[a];
    return i < g->in[a] ? i : -1;
}

/* output index along one dim that input i reaches through tap t, or -1 */
static inline int64_t dst_pos(const ck_convt_geom *g, int a, int64_t i, int64_t t)
{
    int64_t o = i * g->stride[a] - g->pad[a] + t * g->dil[a];
    return o >= 0 && o < g->out[a] ? o : -1;
}

#define VOL(v) ((v)[0] * (v)[1] * (v)[2])

void f64_convt_fwd(double *y, const double *x, const double *w, const double *b,
                   const ck_convt_geom *g)
{
    const int64_t ivol = VOL(g->in), ovol = VOL(g->out), kvol = VOL(g->k);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t co = 0; co < g->Co; co++)
            for (int64_t o0 = 0; o0 < g->out[0]; o0++)
                for (int64_t o1 = 0; o1 < g->out[1]; o1++)
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
                        double acc = b ? b[co] : 0.0;
                        for (int64_t ci = 0; ci < g->Ci; ci++) {
                            const double *xp = x + (n * g->Ci + ci) * ivol;
                            const double *wp = w + (ci * g->Co + co) * kvol;
                            for (int64_t t0 = 0; t0 < g->k[0]; t0++) {
                                int64_t i0 = src_pos(g, 0, o0, t0);
                                if (i0 < 0)
                                    continue;
                                for (int64_t t1 = 0; t1 < g->k[1]; t1++) {
                                    int64_t i1 = src_pos(g, 1, o1, t1);
                                    if (i1 < 0)
                                        continue;
                                    for (int64_t t2 = 0; t2 < g->k[2]; t2++) {
                                        int64_t i2 = src_pos(g, 2, o2, t2);
                                        if (i2 < 0)
                                            continue;
                                        acc += xp[(i0 * g->in[1] + i1) * g->in[2] + i2] *
                                               wp[(t0 * g->k[1] + t1) * g->k[2] + t2];
                                    }
                                }
                            }
                        }
                        y[(n * g->Co + co) * ovol + (o0 * g->out[1] + o1) * g->out[2] + o2] = acc;
                    }
}

void f64_convt_bwd(double *dx, double *dw, double *db, const double *dy, const double *x,
                   const double *w, const ck_convt_geom *g)
{
    const int64_t ivol = VOL(g->in), ovol = VOL(g->out), kvol = VOL(g->k);
    if (db)
        for (int64_t co = 0; co < g->Co; co++) {
            double acc = 0.0;
            for (int64_t n = 0; n < g->N; n++)
                for (int64_t o = 0; o < ovol; o++)
                    acc += dy[(n * g->Co + co) * ovol + o];
            db[co] += acc;
        }
    if (dx)
        for (int64_t n = 0; n < g->N; n++)
            for (int64_t ci = 0; ci < g->Ci; ci++)
                for (int64_t i0 = 0; i0 < g->in[0]; i0++)
                    for (int64_t i1 = 0; i1 < g->in[1]; i1++)
                        for (int64_t i2 = 0; i2 < g->in[2]; i2++) {
                            double acc = 0.0;
                            for (int64_t co = 0; co < g->Co; co++) {
                                const double *gp = dy + (n * g->Co + co) * ovol;
                                const double *wp = w + (ci * g->Co + co) * kvol;
                                for (int64_t t0 = 0; t0 < g->k[0]; t0++) {
                                    int64_t o0 = dst_pos(g, 0, i0, t0);
                                    if (o0 < 0)
                                        continue;
                                    for (int64_t t1 = 0; t1 < g->k[1]; t1++) {
                                        int64_t o1 = dst_pos(g, 1, i1, t1);
                                        if (o1 < 0)
                                            continue;
                                        for (int64_t t2 = 0; t2 < g->k[2]; t2++) {
                                            int64_t o2 = dst_pos(g, 2, i2, t2);
                                            if (o2 < 0)
                                                continue;
                                            acc += gp[(o0 * g->out[1] + o1) * g->out[2] + o2] *
                                                   wp[(t0 * g->k[1] + t1) * g->k[2] + t2];
                                        }
                                    }
                                }
                            }
                            dx[(n * g->Ci + ci) * ivol + (i0 * g->in[1] + i1) * g->in[2] + i2] +=
                                acc;
                        }
    if (dw)
        for (int64_t ci = 0; ci < g->Ci; ci++)
            for (int64_t co = 0; co < g->Co; co++)
                for (int64_t t0 = 0; t0 < g->k[0]; t0++)
                    for (int64_t t1 = 0; t1 < g->k[1]; t1++)
                        for (int64_t t2 = 0; t2 < g->k[2]; t2++) {
                            double acc = 0.0;
                            for (int64_t n = 0; n < g->N; n++) {
                                const double *xp = x + (n * g->Ci + ci) * ivol;
                                const double *gp = dy + (n * g->Co + co) * ovol;
                                for (int64_t i0 = 0; i0 < g->in[0]; i0++) {
                                    int64_t o0 = dst_pos(g, 0, i0, t0);
                                    if (o0 < 0)
                                        continue;
                                    for (int64_t i1 = 0; i1 < g->in[1]; i1++) {
                                        int64_t o1 = dst_pos(g, 1, i1, t1);
                                        if (o1 < 0)
                                            continue;
                                        for (int64_t i2 = 0; i2 < g->in[2]; i2++) {
                                            int64_t o2 = dst_pos(g, 2, i2, t2);
                                            if (o2 < 0)
                                                continue;
                                            acc += xp[(i0 * g->in[1] + i1) * g->in[2] + i2] *
                                                   gp[(o0 * g->out[1] + o1) * g->out[2] + o2];
                                        }
                                    }
                                }
                            }
                            dw[(ci * g->Co + co) * kvol + (t0 * g->k[1] + t1) * g->k[2] + t2] +=
                                acc;
                        }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h)

static ck_status conv_transpose_op_forward(const ck_op_params *op, const ck_fwd_args *args,
                                     ck_op_io *io, ck_error *err)
{
    (void)args;
    const ck_tensor *b = op->bias ? io->bias : NULL;
    ck_convt_geom g;
    CK_TRY(ck_opc_conv_transpose(REF_BE, op, io->in[0], io->weight, b, io->out, &g, err));
    ref_scope s;
    ref_scope_begin(&s, "conv_transpose", err);
    const double *x = ref_scope_in(&s, io->in[0]), *w = ref_scope_in(&s, io->weight),
                 *bv = ref_scope_in(&s, b);
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        f64_convt_fwd(y, x, w, bv, &g);
    return ref_scope_end(&s, true);
}

static ck_status conv_transpose_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                      const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_tensor *db = op->bias ? g->dbias : NULL;
    ck_convt_geom geo;
    CK_TRY(ck_opc_conv_transpose(REF_BE, op, io->in[0], io->weight, db, g->dout, &geo, err));
    ref_scope s;
    ref_scope_begin(&s, "conv_transpose backward", err);
    const double *x = ref_scope_in(&s, io->in[0]), *w = ref_scope_in(&s, io->weight),
                 *dy = ref_scope_in(&s, g->dout);
    double *dx = ref_scope_grad(&s, g->din[0]), *dw = ref_scope_grad(&s, g->dweight),
           *dbv = ref_scope_grad(&s, db);
    if (s.st == CK_OK)
        f64_convt_bwd(dx, dw, dbv, dy, x, w, &geo);
    return ref_scope_end(&s, true);
}

/* ---- the family's entry points (ref_ops.h) ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_CONV: return (ref_op_fns){conv_op_forward, conv_op_backward};
    case CK_OP_CONV_TRANSPOSE:
        return (ref_op_fns){conv_transpose_op_forward, conv_transpose_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(conv, pick)
