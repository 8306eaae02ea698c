/*
 * The case-file parser: JSON text -> a validated ck_case (format in cases/README.md).
 *
 * Everything a user can get wrong is checked here before any value is used: syntax
 * (with line and column), duplicate and unknown keys, types, integrality and ranges of
 * every number (cJSON numbers are doubles: 2.5, -1 or 1e300 must not reach an integer
 * conversion), names and references between layers, checkpoint segments. Shapes are
 * checked later by ck_graph_build. Also here: the op catalogue and the policy names.
 */
#include "harness/model/case.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sizes (filters, units, kernel, stride, dilation, pool, scale, padding) stop here. */
#define SIZE_CAP (1 << 20)
/* Seeds and dims must be exact in a double. */
#define EXACT_INT_MAX 9007199254740992LL /* 2^53 */
#define MAX_LAYERS 4096
#define MAX_NAME_LEN 63
#define MAX_STEPS 1000000
/* A case file is a few kilobytes; this bound keeps a stray device or huge file out. */
#define MAX_FILE_BYTES (16u << 20)

#define JPATH_MAX 256

/* ------------------------------------------------------------------------------------ */
/* The op catalogue                                                                      */
/* ------------------------------------------------------------------------------------ */

#define WINDOW_OPTS_CONV                                                                     \
    "filters (int, required), kernel (int or [ints], required), stride (int or [ints], "    \
    "default 1), padding (\"same\", \"valid\", int or [ints]; default \"valid\"), dilation " \
    "(int or [ints], default 1), bias (bool, default true)"
#define WINDOW_OPTS_POOL "pool (int or [ints], required), stride (int or [ints], default pool)"

static const ck_op_info op_catalogue[] = {
    {"linear", CK_OP_LINEAR, 0, "y = x W^T + b over the last dimension",
     "units (int, required), bias (bool, default true)"},
    {"conv1d", CK_OP_CONV, 1, "1-D convolution (cross-correlation) over (N, C, L)",
     WINDOW_OPTS_CONV},
    {"conv2d", CK_OP_CONV, 2, "2-D convolution (cross-correlation) over (N, C, H, W)",
     WINDOW_OPTS_CONV},
    {"conv3d", CK_OP_CONV, 3, "3-D convolution (cross-correlation) over (N, C, D, H, W)",
     WINDOW_OPTS_CONV},
    {"relu", CK_OP_RELU, 0, "max(x, 0)", "none"},
    {"leaky_relu", CK_OP_LEAKY_RELU, 0, "x if x > 0 else slope * x",
     "slope (number, default 0.01)"},
    {"gelu", CK_OP_GELU, 0, "exact GELU: 0.5 x (1 + erf(x / sqrt 2))", "none"},
    {"tanh", CK_OP_TANH, 0, "tanh(x)", "none"},
    {"sigmoid", CK_OP_SIGMOID, 0, "1 / (1 + exp(-x))", "none"},
    {"batchnorm", CK_OP_BATCHNORM, 0,
     "per-channel normalisation over N and spatial dims, running statistics",
     "momentum (number in [0, 1], default 0.1), eps (number > 0, default 1e-5), eval (bool, "
     "default false)"},
    {"layernorm", CK_OP_LAYERNORM, 0, "per-sample normalisation over all non-batch dims, affine",
     "eps (number > 0, default 1e-5)"},
    {"dropout", CK_OP_DROPOUT, 0, "inverted dropout: zero with probability rate, scale 1/(1-rate)",
     "rate (number in [0, 1), default 0.5)"},
    {"gaussian_noise", CK_OP_GAUSSIAN_NOISE, 0, "x + stddev * N(0, 1)",
     "stddev (number >= 0, required)"},
    {"maxpool1d", CK_OP_MAXPOOL, 1, "1-D max pooling, no padding", WINDOW_OPTS_POOL},
    {"maxpool2d", CK_OP_MAXPOOL, 2, "2-D max pooling, no padding", WINDOW_OPTS_POOL},
    {"maxpool3d", CK_OP_MAXPOOL, 3, "3-D max pooling, no padding", WINDOW_OPTS_POOL},
    {"avgpool1d", CK_OP_AVGPOOL, 1, "1-D average pooling, no padding", WINDOW_OPTS_POOL},
    {"avgpool2d", CK_OP_AVGPOOL, 2, "2-D average pooling, no padding", WINDOW_OPTS_POOL},
    {"avgpool3d", CK_OP_AVGPOOL, 3, "3-D average pooling, no padding", WINDOW_OPTS_POOL},
    {"upsample1d", CK_OP_UPSAMPLE, 1, "1-D nearest-neighbour upsampling by an integer scale",
     "scale (int or [ints], required)"},
    {"upsample2d", CK_OP_UPSAMPLE, 2, "2-D nearest-neighbour upsampling by an integer scale",
     "scale (int or [ints], required)"},
    {"upsample3d", CK_OP_UPSAMPLE, 3, "3-D nearest-neighbour upsampling by an integer scale",
     "scale (int or [ints], required)"},
    {"add", CK_OP_ADD, 0, "element-wise sum of 2 to 8 inputs of one shape",
     "inputs (list of 2 to 8 layer names, required)"},
    {"concat", CK_OP_CONCAT, 0, "join 2 to 8 inputs along dim 1 (channels)",
     "inputs (list of 2 to 8 layer names, required)"},
    {"flatten", CK_OP_FLATTEN, 0, "(N, ...) -> (N, product of the rest)", "none"},
};

#define OP_CATALOGUE_COUNT ((int)(sizeof op_catalogue / sizeof op_catalogue[0]))

const ck_op_info *ck_op_catalogue(int *count)
{
    if (count)
        *count = OP_CATALOGUE_COUNT;
    return op_catalogue;
}

const ck_op_info *ck_op_find(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < OP_CATALOGUE_COUNT; i++)
        if (strcmp(op_catalogue[i].name, name) == 0)
            return &op_catalogue[i];
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Per-op options: which keys a layer of each kind accepts and where they go             */
/* ------------------------------------------------------------------------------------ */

typedef enum {
    OPT_SIZE,    /* int64_t field, 1..SIZE_CAP */
    OPT_WINDOW,  /* int[CK_MAX_SPATIAL] field, int or list of nsp ints, 1..SIZE_CAP */
    OPT_PADDING, /* "same" | "valid" | int or list of nsp ints, 0..SIZE_CAP */
    OPT_BOOL,
    OPT_REAL     /* double field within `range` */
} option_type;

typedef struct {
    double lo, hi;
    bool lo_open, hi_open;
} real_range;

typedef struct {
    const char *key;
    option_type type;
    size_t offset; /* of the field in ck_op_params */
    bool required;
    real_range range;
} option_def;

#define FIELD(f) offsetof(ck_op_params, f)
#define ANY_FINITE {-INFINITY, INFINITY, false, false}
#define NON_NEGATIVE {0.0, INFINITY, false, false}
#define POSITIVE {0.0, INFINITY, true, false}
#define UNIT_CLOSED {0.0, 1.0, false, false}
#define UNIT_HALF_OPEN {0.0, 1.0, false, true}

/* Ends every option list. */
#define OPTIONS_END {NULL, OPT_BOOL, 0, false, ANY_FINITE}

static const option_def no_options[] = {OPTIONS_END};
static const option_def linear_options[] = {
    {"units", OPT_SIZE, FIELD(units), true, ANY_FINITE},
    {"bias", OPT_BOOL, FIELD(bias), false, ANY_FINITE},
    OPTIONS_END,
};
static const option_def conv_options[] = {
    {"filters", OPT_SIZE, FIELD(filters), true, ANY_FINITE},
    {"kernel", OPT_WINDOW, FIELD(kernel), true, ANY_FINITE},
    {"stride", OPT_WINDOW, FIELD(stride), false, ANY_FINITE},
    {"padding", OPT_PADDING, FIELD(pad), false, ANY_FINITE},
    {"dilation", OPT_WINDOW, FIELD(dilation), false, ANY_FINITE},
    {"bias", OPT_BOOL, FIELD(bias), false, ANY_FINITE},
    OPTIONS_END,
};
static const option_def leaky_relu_options[] = {
    {"slope", OPT_REAL, FIELD(slope), false, ANY_FINITE},
    OPTIONS_END,
};
static const option_def batchnorm_options[] = {
    {"momentum", OPT_REAL, FIELD(momentum), false, UNIT_CLOSED},
    {"eps", OPT_REAL, FIELD(eps), false, POSITIVE},
    {"eval", OPT_BOOL, FIELD(eval), false, ANY_FINITE},
    OPTIONS_END,
};
static const option_def layernorm_options[] = {
    {"eps", OPT_REAL, FIELD(eps), false, POSITIVE},
    OPTIONS_END,
};
static const option_def dropout_options[] = {
    {"rate", OPT_REAL, FIELD(rate), false, UNIT_HALF_OPEN},
    OPTIONS_END,
};
static const option_def noise_options[] = {
    {"stddev", OPT_REAL, FIELD(stddev), true, NON_NEGATIVE},
    OPTIONS_END,
};
static const option_def pool_options[] = {
    {"pool", OPT_WINDOW, FIELD(kernel), true, ANY_FINITE},
    {"stride", OPT_WINDOW, FIELD(stride), false, ANY_FINITE},
    OPTIONS_END,
};
static const option_def upsample_options[] = {
    {"scale", OPT_WINDOW, FIELD(scale), true, ANY_FINITE},
    OPTIONS_END,
};

static const option_def *const options_by_kind[CK_OP_KIND_COUNT] = {
    [CK_OP_LINEAR] = linear_options,     [CK_OP_CONV] = conv_options,
    [CK_OP_RELU] = no_options,           [CK_OP_LEAKY_RELU] = leaky_relu_options,
    [CK_OP_GELU] = no_options,           [CK_OP_TANH] = no_options,
    [CK_OP_SIGMOID] = no_options,        [CK_OP_BATCHNORM] = batchnorm_options,
    [CK_OP_LAYERNORM] = layernorm_options, [CK_OP_DROPOUT] = dropout_options,
    [CK_OP_GAUSSIAN_NOISE] = noise_options, [CK_OP_MAXPOOL] = pool_options,
    [CK_OP_AVGPOOL] = pool_options,      [CK_OP_UPSAMPLE] = upsample_options,
    [CK_OP_ADD] = no_options,            [CK_OP_CONCAT] = no_options,
    [CK_OP_FLATTEN] = no_options,
};

static bool op_takes_many_inputs(ck_op_kind kind)
{
    return kind == CK_OP_ADD || kind == CK_OP_CONCAT;
}

/* ------------------------------------------------------------------------------------ */
/* Policy and expectation names                                                          */
/* ------------------------------------------------------------------------------------ */

static const char *const rng_policy_names[] = {"counter", "stateful", "stash"};
static const char *const bn_policy_names[] = {"skip", "update"};
static const char *const expect_names[] = {"identical", "close", "mismatch"};
static const char *const expect_memory_names[] = {"met", "unmet"};
static const char *const dist_names[] = {"uniform", "normal"};
static const char *const loss_names[] = {"mean", "sum", "mse", "cross_entropy"};
static const char *const optimizer_names[] = {"sgd", "momentum", "adam"};
static const char *const loss_scale_names[] = {"none", "static", "dynamic"};
static const char *const autocast_names[] = {"restore", "drop"};
static const char *const precision_names[] = {"fp32", "fp16", "bf16"};
static const ck_dtype precision_dtypes[] = {CK_F32, CK_F16, CK_BF16};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int find_name(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

const char *ck_rng_policy_name(ck_rng_policy p)
{
    return (unsigned)p < (unsigned)COUNT(rng_policy_names) ? rng_policy_names[p] : "?";
}

bool ck_rng_policy_parse(const char *s, ck_rng_policy *out)
{
    int i = s ? find_name(rng_policy_names, COUNT(rng_policy_names), s) : -1;
    if (i < 0)
        return false;
    *out = (ck_rng_policy)i;
    return true;
}

const char *ck_bn_policy_name(ck_bn_policy p)
{
    return (unsigned)p < (unsigned)COUNT(bn_policy_names) ? bn_policy_names[p] : "?";
}

bool ck_bn_policy_parse(const char *s, ck_bn_policy *out)
{
    int i = s ? find_name(bn_policy_names, COUNT(bn_policy_names), s) : -1;
    if (i < 0)
        return false;
    *out = (ck_bn_policy)i;
    return true;
}

const char *ck_expect_name(ck_expect e)
{
    return (unsigned)e < (unsigned)COUNT(expect_names) ? expect_names[e] : "?";
}

/* ------------------------------------------------------------------------------------ */
/* Messages                                                                              */
/* ------------------------------------------------------------------------------------ */

typedef struct {
    const char *path; /* the file, first in every message */
    ck_error *err;
} parse_ctx;

/* "<file>: <jpath>: <what>" as one line. */
static ck_status fail_at(const parse_ctx *cx, const char *jpath, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ck_status fail_at(const parse_ctx *cx, const char *jpath, const char *fmt, ...)
{
    char what[CK_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ck_fail(cx->err, CK_ERR_INPUT, "%s: %s: %s", cx->path, jpath, what);
}

/* Copies user text into buf for a message: printable ASCII only (so the message stays
 * one line), quotes and backslashes replaced, long text cut with "...". */
static const char *printable(const char *s, char *buf, size_t n)
{
    const size_t shown = 40;
    size_t j = 0;
    for (size_t i = 0; s[i] && j + 4 < n; i++) {
        if (i == shown) {
            memcpy(buf + j, "...", 3);
            j += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        buf[j++] = (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') ? (char)ch : '?';
    }
    buf[j] = '\0';
    return buf;
}

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsArray(v))
        return "a list";
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v) ? "true" : "false";
    if (cJSON_IsNull(v))
        return "null";
    return "an invalid value";
}

static const char *number_text(double x, char *buf, size_t n)
{
    if (!isfinite(x))
        snprintf(buf, n, "a number too large for a double");
    else
        snprintf(buf, n, "%.15g", x);
    return buf;
}

/* Formats a JSON path; a path too long for dst is cut (it only ever feeds a message). */
static void path_printf(char *dst, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void path_printf(char *dst, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, n, fmt, ap);
    va_end(ap);
}

/* jpath of a key under base: "base.key", or "key" at the top level. */
static void key_path(char *dst, size_t n, const char *base, const char *key)
{
    char k[64];
    printable(key, k, sizeof k);
    if (base[0])
        path_printf(dst, n, "%s.%s", base, k);
    else
        path_printf(dst, n, "%s", k);
}

static void index_path(char *dst, size_t n, const char *base, int index)
{
    path_printf(dst, n, "%s[%d]", base, index);
}

static void join_names(const char *const *names, int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", names[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Typed getters: every check happens before a conversion                                */
/* ------------------------------------------------------------------------------------ */

static ck_status get_int(const parse_ctx *cx, const cJSON *v, const char *jpath, int64_t lo,
                         int64_t hi, int64_t *out)
{
    char want[64], got[64];
    if (lo == 1)
        snprintf(want, sizeof want, "a positive integer");
    else if (lo == 0)
        snprintf(want, sizeof want, "a non-negative integer");
    else
        snprintf(want, sizeof want, "an integer >= %lld", (long long)lo);
    if (!cJSON_IsNumber(v))
        return fail_at(cx, jpath, "must be %s, got %s", want, json_type_name(v));
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x) || x < (double)lo) {
        if (isfinite(x) && x == floor(x) && x > (double)hi)
            return fail_at(cx, jpath, "must be at most %lld, got %s", (long long)hi,
                           number_text(x, got, sizeof got));
        return fail_at(cx, jpath, "must be %s, got %s", want, number_text(x, got, sizeof got));
    }
    if (x > (double)hi)
        return fail_at(cx, jpath, "must be at most %lld, got %s", (long long)hi,
                       number_text(x, got, sizeof got));
    *out = (int64_t)x;
    return CK_OK;
}

static void describe_range(const real_range *r, char *buf, size_t n)
{
    if (isinf(r->lo) && isinf(r->hi))
        snprintf(buf, n, "a finite number");
    else if (isinf(r->hi))
        snprintf(buf, n, "a number %s %g", r->lo_open ? ">" : ">=", r->lo);
    else
        snprintf(buf, n, "a number in %c%g, %g%c", r->lo_open ? '(' : '[', r->lo, r->hi,
                 r->hi_open ? ')' : ']');
}

static ck_status get_real(const parse_ctx *cx, const cJSON *v, const char *jpath,
                          const real_range *r, double *out)
{
    char want[64], got[64];
    describe_range(r, want, sizeof want);
    if (!cJSON_IsNumber(v))
        return fail_at(cx, jpath, "must be %s, got %s", want, json_type_name(v));
    double x = v->valuedouble;
    bool ok = isfinite(x) && (r->lo_open ? x > r->lo : x >= r->lo) &&
              (r->hi_open ? x < r->hi : x <= r->hi);
    if (!ok)
        return fail_at(cx, jpath, "must be %s, got %s", want, number_text(x, got, sizeof got));
    *out = x;
    return CK_OK;
}

static ck_status get_bool(const parse_ctx *cx, const cJSON *v, const char *jpath, bool *out)
{
    if (!cJSON_IsBool(v))
        return fail_at(cx, jpath, "must be true or false, got %s", json_type_name(v));
    *out = cJSON_IsTrue(v);
    return CK_OK;
}

static ck_status get_string(const parse_ctx *cx, const cJSON *v, const char *jpath,
                            const char **out)
{
    if (!cJSON_IsString(v) || !v->valuestring)
        return fail_at(cx, jpath, "must be a string, got %s", json_type_name(v));
    *out = v->valuestring;
    return CK_OK;
}

/* A string that must be one of names[]; *out is its index. */
static ck_status get_choice(const parse_ctx *cx, const cJSON *v, const char *jpath,
                            const char *const *names, int n, int *out)
{
    char list[256], shown[64];
    const char *s;
    join_names(names, n, list, sizeof list);
    if (!cJSON_IsString(v) || !v->valuestring)
        return fail_at(cx, jpath, "must be one of %s, got %s", list, json_type_name(v));
    s = v->valuestring;
    int i = find_name(names, n, s);
    if (i < 0)
        return fail_at(cx, jpath, "must be one of %s, got \"%s\"", list,
                       printable(s, shown, sizeof shown));
    *out = i;
    return CK_OK;
}

static ck_status get_object(const parse_ctx *cx, const cJSON *v, const char *jpath)
{
    if (!cJSON_IsObject(v))
        return fail_at(cx, jpath, "must be an object, got %s", json_type_name(v));
    return CK_OK;
}

/* Rejects keys of obj not in allowed[]; `for_what` names the op in the message. */
static ck_status check_keys(const parse_ctx *cx, const cJSON *obj, const char *jpath,
                            const char *const *allowed, int n_allowed, const char *for_what)
{
    for (const cJSON *child = obj->child; child; child = child->next) {
        if (find_name(allowed, n_allowed, child->string) >= 0)
            continue;
        char list[512], kpath[JPATH_MAX];
        join_names(allowed, n_allowed, list, sizeof list);
        key_path(kpath, sizeof kpath, jpath, child->string);
        return fail_at(cx, kpath, "unknown key%s%s (allowed: %s)", for_what ? " for " : "",
                       for_what ? for_what : "", list);
    }
    return CK_OK;
}

/* A name usable as a tensor and file name: 1..63 of [A-Za-z0-9_-]. */
static bool is_valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MAX_NAME_LEN)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        if (!ok)
            return false;
    }
    return true;
}

static ck_status get_name(const parse_ctx *cx, const cJSON *v, const char *jpath,
                          const char **out)
{
    char shown[64];
    ck_status st = get_string(cx, v, jpath, out);
    if (st != CK_OK)
        return st;
    if (!is_valid_name(*out))
        return fail_at(cx, jpath,
                       "must be 1 to %d characters from A-Z a-z 0-9 _ -, got \"%s\"",
                       MAX_NAME_LEN, printable(*out, shown, sizeof shown));
    return CK_OK;
}

/* ------------------------------------------------------------------------------------ */
/* The document: syntax, trailing text, duplicate keys                                   */
/* ------------------------------------------------------------------------------------ */

static bool is_json_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static bool only_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_json_space(s[i]))
            return false;
    return true;
}

static ck_status fail_at_offset(const parse_ctx *cx, const char *text, size_t len,
                                size_t offset, const char *what)
{
    size_t line = 1, column = 1;
    if (offset > len)
        offset = len;
    for (size_t i = 0; i < offset; i++) {
        if (text[i] == '\n') {
            line++;
            column = 1;
        } else {
            column++;
        }
    }
    /* A short excerpt of what the parser stopped at, up to the end of that line. */
    char near[24], shown[64];
    size_t k = 0;
    for (size_t i = offset; i < len && k + 1 < sizeof near && text[i] != '\n'; i++)
        near[k++] = text[i] ? text[i] : '?';
    near[k] = '\0';
    return ck_fail(cx->err, CK_ERR_INPUT, "%s: line %zu, column %zu: %s%s%s%s", cx->path, line,
                   column, what, k ? " near \"" : " at the end of the text",
                   k ? printable(near, shown, sizeof shown) : "", k ? "\"" : "");
}

static ck_status parse_document(const parse_ctx *cx, const char *text, size_t len,
                                cJSON **root)
{
    const char *end = NULL;
    *root = NULL;
    if (!text || only_space(text, len))
        return ck_fail(cx->err, CK_ERR_INPUT, "%s: empty file", cx->path);
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!doc) {
        size_t offset = (end && end >= text) ? (size_t)(end - text) : 0;
        return fail_at_offset(cx, text, len, offset, "malformed JSON");
    }
    size_t consumed = (end && end >= text) ? (size_t)(end - text) : len;
    if (consumed < len && !only_space(text + consumed, len - consumed)) {
        cJSON_Delete(doc);
        size_t offset = consumed;
        while (offset < len && is_json_space(text[offset]))
            offset++;
        return fail_at_offset(cx, text, len, offset, "unexpected text after the JSON value");
    }
    *root = doc;
    return CK_OK;
}

typedef struct {
    const char *key;
    int index;
} keyed_child;

static int compare_keyed_child(const void *a, const void *b)
{
    const keyed_child *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    return (x->index > y->index) - (x->index < y->index);
}

/* cJSON keeps every duplicate; a second "kernel" would silently lose to the first, so
 * the whole document is walked. Sorting keeps huge objects from costing n^2. */
static ck_status check_duplicate_keys(const parse_ctx *cx, const cJSON *node, const char *jpath)
{
    ck_status st = CK_OK;
    keyed_child *keys = NULL;
    char child_path[JPATH_MAX];

    if (cJSON_IsObject(node)) {
        int n = 0;
        for (const cJSON *c = node->child; c; c = c->next)
            n++;
        if (n > 1) {
            keys = malloc((size_t)n * sizeof *keys);
            if (!keys) {
                st = ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
                goto cleanup;
            }
            int i = 0;
            for (const cJSON *c = node->child; c; c = c->next, i++) {
                keys[i].key = c->string ? c->string : "";
                keys[i].index = i;
            }
            qsort(keys, (size_t)n, sizeof *keys, compare_keyed_child);
            for (i = 1; i < n; i++) {
                if (strcmp(keys[i - 1].key, keys[i].key) == 0) {
                    key_path(child_path, sizeof child_path, jpath, keys[i].key);
                    st = fail_at(cx, child_path, "duplicate key");
                    goto cleanup;
                }
            }
        }
        for (const cJSON *c = node->child; c; c = c->next) {
            key_path(child_path, sizeof child_path, jpath, c->string ? c->string : "");
            if ((st = check_duplicate_keys(cx, c, child_path)) != CK_OK)
                goto cleanup;
        }
    } else if (cJSON_IsArray(node)) {
        int i = 0;
        for (const cJSON *c = node->child; c; c = c->next, i++) {
            if (!cJSON_IsObject(c) && !cJSON_IsArray(c))
                continue;
            index_path(child_path, sizeof child_path, jpath, i);
            if ((st = check_duplicate_keys(cx, c, child_path)) != CK_OK)
                goto cleanup;
        }
    }
cleanup:
    free(keys);
    return st;
}

/* ------------------------------------------------------------------------------------ */
/* Layers                                                                                */
/* ------------------------------------------------------------------------------------ */

static ck_status parse_window(const parse_ctx *cx, const cJSON *v, const char *jpath, int nsp,
                              int64_t lo, int out[CK_MAX_SPATIAL])
{
    ck_status st;
    int64_t x;
    char item_path[JPATH_MAX];
    if (cJSON_IsNumber(v)) {
        if ((st = get_int(cx, v, jpath, lo, SIZE_CAP, &x)) != CK_OK)
            return st;
        for (int d = 0; d < nsp; d++)
            out[d] = (int)x;
        return CK_OK;
    }
    if (!cJSON_IsArray(v))
        return fail_at(cx, jpath, "must be an integer or a list of %d integers, got %s", nsp,
                       json_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n != nsp)
        return fail_at(cx, jpath,
                       "must be an integer or a list of %d integers (one per spatial dim), "
                       "got a list of %d",
                       nsp, n);
    int d = 0;
    for (const cJSON *c = v->child; c; c = c->next, d++) {
        index_path(item_path, sizeof item_path, jpath, d);
        if ((st = get_int(cx, c, item_path, lo, SIZE_CAP, &x)) != CK_OK)
            return st;
        out[d] = (int)x;
    }
    return CK_OK;
}

static ck_status parse_padding(const parse_ctx *cx, const cJSON *v, const char *jpath,
                               ck_op_params *op)
{
    if (cJSON_IsString(v)) {
        char shown[64];
        if (strcmp(v->valuestring, "same") == 0) {
            op->pad_mode = CK_PAD_SAME;
            return CK_OK;
        }
        if (strcmp(v->valuestring, "valid") == 0) {
            op->pad_mode = CK_PAD_VALID;
            return CK_OK;
        }
        return fail_at(cx, jpath,
                       "must be \"same\", \"valid\", an integer or a list of %d integers, "
                       "got \"%s\"",
                       op->nsp, printable(v->valuestring, shown, sizeof shown));
    }
    if (!cJSON_IsNumber(v) && !cJSON_IsArray(v))
        return fail_at(cx, jpath,
                       "must be \"same\", \"valid\", an integer or a list of %d integers, got %s",
                       op->nsp, json_type_name(v));
    op->pad_mode = CK_PAD_EXPLICIT;
    return parse_window(cx, v, jpath, op->nsp, 0, op->pad);
}

static ck_status parse_option(const parse_ctx *cx, const option_def *def, const cJSON *v,
                              const char *jpath, ck_op_params *op)
{
    void *field = (char *)op + def->offset;
    switch (def->type) {
    case OPT_SIZE:
        return get_int(cx, v, jpath, 1, SIZE_CAP, (int64_t *)field);
    case OPT_WINDOW:
        return parse_window(cx, v, jpath, op->nsp, 1, (int *)field);
    case OPT_PADDING:
        return parse_padding(cx, v, jpath, op);
    case OPT_BOOL:
        return get_bool(cx, v, jpath, (bool *)field);
    case OPT_REAL:
        return get_real(cx, v, jpath, &def->range, (double *)field);
    }
    return ck_fail(cx->err, CK_ERR_INTERNAL, "%s: %s: unknown option type", cx->path, jpath);
}

/* Where a name that is not an earlier layer actually is, for the message. */
static void describe_missing_layer(const cJSON *layers_json, int this_index, const char *name,
                                   char *buf, size_t n)
{
    int i = 0;
    for (const cJSON *item = layers_json->child; item; item = item->next, i++) {
        if (i < this_index)
            continue;
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(item, "name");
        if (cJSON_IsString(nm) && nm->valuestring && strcmp(nm->valuestring, name) == 0) {
            if (i == this_index)
                snprintf(buf, n, "it is this layer");
            else
                snprintf(buf, n, "it is layers[%d], a later layer", i);
            return;
        }
    }
    snprintf(buf, n, "no layer has that name");
}

/* An `inputs` entry: "input" (-1) or the name of an earlier layer. */
static ck_status resolve_input(const parse_ctx *cx, const ck_case *c, const cJSON *layers_json,
                               int this_index, const cJSON *v, const char *jpath, int *out)
{
    const char *name = NULL;
    ck_status st = get_string(cx, v, jpath, &name);
    if (st != CK_OK)
        return st;
    if (strcmp(name, "input") == 0) {
        *out = -1;
        return CK_OK;
    }
    for (int i = 0; i < this_index; i++) {
        if (strcmp(c->layers[i].name, name) == 0) {
            *out = i;
            return CK_OK;
        }
    }
    char where[64], shown[64];
    describe_missing_layer(layers_json, this_index, name, where, sizeof where);
    return fail_at(cx, jpath, "\"%s\" is not an earlier layer (%s)",
                   printable(name, shown, sizeof shown), where);
}

static ck_status parse_inputs(const parse_ctx *cx, const ck_case *c, const cJSON *layers_json,
                              int index, const cJSON *v, const char *lpath, ck_layer_spec *L)
{
    char ipath[JPATH_MAX], item_path[JPATH_MAX];
    bool many = op_takes_many_inputs(L->op.kind);
    ck_status st;
    key_path(ipath, sizeof ipath, lpath, "inputs");

    if (!v) {
        if (many)
            return fail_at(cx, ipath, "required for %s: a list of 2 to %d earlier layer names",
                           L->op_name, CK_MAX_INPUTS);
        L->n_in = 1;
        L->in[0] = index - 1; /* the previous layer; -1 (the model input) for the first */
        return CK_OK;
    }
    if (cJSON_IsString(v) && !many) {
        L->n_in = 1;
        return resolve_input(cx, c, layers_json, index, v, ipath, &L->in[0]);
    }
    if (!cJSON_IsArray(v)) {
        if (many)
            return fail_at(cx, ipath, "must be a list of 2 to %d layer names, got %s",
                           CK_MAX_INPUTS, json_type_name(v));
        return fail_at(cx, ipath, "must be a layer name or a list of one, got %s",
                       json_type_name(v));
    }
    int n = cJSON_GetArraySize(v);
    if (many && (n < 2 || n > CK_MAX_INPUTS))
        return fail_at(cx, ipath, "%s needs 2 to %d inputs, got %d", L->op_name, CK_MAX_INPUTS,
                       n);
    if (!many && n != 1)
        return fail_at(cx, ipath, "%s takes exactly one input, got %d", L->op_name, n);
    int j = 0;
    for (const cJSON *item = v->child; item; item = item->next, j++) {
        index_path(item_path, sizeof item_path, ipath, j);
        if ((st = resolve_input(cx, c, layers_json, index, item, item_path, &L->in[j])) != CK_OK)
            return st;
    }
    L->n_in = n;
    return CK_OK;
}

static ck_status parse_layer(const parse_ctx *cx, ck_case *c, const cJSON *layers_json,
                             int index, const cJSON *item)
{
    ck_layer_spec *L = &c->layers[index];
    char jpath[JPATH_MAX], lpath[JPATH_MAX], kpath[JPATH_MAX], shown[64];
    const char *name = NULL, *op_name = NULL;
    ck_status st;

    index_path(jpath, sizeof jpath, "layers", index);
    if ((st = get_object(cx, item, jpath)) != CK_OK)
        return st;

    key_path(kpath, sizeof kpath, jpath, "name");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(item, "name");
    if (!v)
        return fail_at(cx, kpath, "required: every layer needs a name");
    if ((st = get_name(cx, v, kpath, &name)) != CK_OK)
        return st;
    if (strcmp(name, "input") == 0)
        return fail_at(cx, kpath, "\"input\" is reserved for the model input");
    for (int i = 0; i < index; i++)
        if (strcmp(c->layers[i].name, name) == 0)
            return fail_at(cx, kpath, "duplicate layer name \"%s\" (also layers[%d])", name, i);
    if (!(L->name = strdup(name)))
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    path_printf(lpath, sizeof lpath, "%s (%s)", jpath, name);

    key_path(kpath, sizeof kpath, lpath, "op");
    v = cJSON_GetObjectItemCaseSensitive(item, "op");
    if (!v)
        return fail_at(cx, kpath, "required: the layer's op (see 'ckpt-harness list')");
    if ((st = get_string(cx, v, kpath, &op_name)) != CK_OK)
        return st;
    const ck_op_info *info = ck_op_find(op_name);
    if (!info) {
        const char *known[COUNT(op_catalogue)];
        char list[512];
        for (int i = 0; i < OP_CATALOGUE_COUNT; i++)
            known[i] = op_catalogue[i].name;
        join_names(known, OP_CATALOGUE_COUNT, list, sizeof list);
        return fail_at(cx, kpath, "unknown op \"%s\" (known: %s)",
                       printable(op_name, shown, sizeof shown), list);
    }
    if (!(L->op_name = strdup(info->name)))
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);

    /* Allowed keys: the common three, then the op's own, straight from the table. */
    const option_def *opts = options_by_kind[info->kind];
    const char *allowed[3 + 8];
    int n_allowed = 0;
    allowed[n_allowed++] = "name";
    allowed[n_allowed++] = "op";
    allowed[n_allowed++] = "inputs";
    for (const option_def *d = opts; d->key && n_allowed < COUNT(allowed); d++)
        allowed[n_allowed++] = d->key;
    if ((st = check_keys(cx, item, lpath, allowed, n_allowed, info->name)) != CK_OK)
        return st;

    ck_op_params_default(&L->op, info->kind, info->nsp);
    bool stride_given = false;
    for (const option_def *d = opts; d->key; d++) {
        key_path(kpath, sizeof kpath, lpath, d->key);
        v = cJSON_GetObjectItemCaseSensitive(item, d->key);
        if (!v) {
            if (d->required)
                return fail_at(cx, kpath, "required for %s", info->name);
            continue;
        }
        if (strcmp(d->key, "stride") == 0)
            stride_given = true;
        if ((st = parse_option(cx, d, v, kpath, &L->op)) != CK_OK)
            return st;
    }
    /* Pools step by their window unless told otherwise (PyTorch's default). */
    if ((info->kind == CK_OP_MAXPOOL || info->kind == CK_OP_AVGPOOL) && !stride_given)
        memcpy(L->op.stride, L->op.kernel, sizeof L->op.stride);

    return parse_inputs(cx, c, layers_json, index,
                        cJSON_GetObjectItemCaseSensitive(item, "inputs"), lpath, L);
}

static ck_status parse_layers(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    ck_status st;
    if (!v)
        return fail_at(cx, "layers", "required: a list of at least one layer");
    if (!cJSON_IsArray(v))
        return fail_at(cx, "layers", "must be a list of layers, got %s", json_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n < 1)
        return fail_at(cx, "layers", "must hold at least one layer");
    if (n > MAX_LAYERS)
        return fail_at(cx, "layers", "at most %d layers are supported, got %d", MAX_LAYERS, n);
    c->layers = calloc((size_t)n, sizeof *c->layers);
    if (!c->layers)
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    c->n_layers = n; /* names stay NULL until parsed, so ck_case_free works at any point */
    int i = 0;
    for (const cJSON *item = v->child; item; item = item->next, i++)
        if ((st = parse_layer(cx, c, v, i, item)) != CK_OK)
            return st;
    return CK_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Top-level sections                                                                    */
/* ------------------------------------------------------------------------------------ */

static ck_status parse_input(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"shape", "dist"};
    char item_path[JPATH_MAX], dims[128];
    ck_status st;
    int choice;

    if (!v)
        return fail_at(cx, "input", "required: {\"shape\": [N, ...]}");
    if ((st = get_object(cx, v, "input")) != CK_OK)
        return st;
    if ((st = check_keys(cx, v, "input", keys, COUNT(keys), NULL)) != CK_OK)
        return st;

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(v, "shape");
    if (!shape)
        return fail_at(cx, "input.shape", "required: a list of 2 to %d dimensions, N first",
                       CK_MAX_DIMS);
    if (!cJSON_IsArray(shape))
        return fail_at(cx, "input.shape", "must be a list of 2 to %d positive integers, got %s",
                       CK_MAX_DIMS, json_type_name(shape));
    int n = cJSON_GetArraySize(shape);
    if (n < 2 || n > CK_MAX_DIMS)
        return fail_at(cx, "input.shape", "must have 2 to %d dimensions (N first), got %d",
                       CK_MAX_DIMS, n);
    c->input_shape.ndim = n;
    int d = 0;
    for (const cJSON *item = shape->child; item; item = item->next, d++) {
        index_path(item_path, sizeof item_path, "input.shape", d);
        if ((st = get_int(cx, item, item_path, 1, EXACT_INT_MAX, &c->input_shape.dim[d])) !=
            CK_OK)
            return st;
    }
    if (!ck_shape_numel_checked(&c->input_shape, 8, NULL))
        return fail_at(cx, "input.shape", "%s has too many elements (the byte count overflows)",
                       ck_shape_str(&c->input_shape, dims, sizeof dims));

    const cJSON *dist = cJSON_GetObjectItemCaseSensitive(v, "dist");
    if (dist) {
        if ((st = get_choice(cx, dist, "input.dist", dist_names, COUNT(dist_names), &choice)) !=
            CK_OK)
            return st;
        c->input_dist = (ck_dist)choice;
    }
    return CK_OK;
}

static ck_status parse_loss(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"op"};
    ck_status st;
    int choice;
    if (!v)
        return CK_OK;
    if ((st = get_object(cx, v, "loss")) != CK_OK)
        return st;
    if ((st = check_keys(cx, v, "loss", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(v, "op");
    if (!op)
        return fail_at(cx, "loss.op", "required: one of mean, sum, mse, cross_entropy");
    if ((st = get_choice(cx, op, "loss.op", loss_names, COUNT(loss_names), &choice)) != CK_OK)
        return st;
    c->loss = (ck_loss_kind)choice;
    return CK_OK;
}

/* A segment end: the name of any layer. */
static ck_status resolve_layer(const parse_ctx *cx, const ck_case *c, const cJSON *v,
                               const char *jpath, int *out)
{
    const char *name = NULL;
    char shown[64];
    ck_status st = get_string(cx, v, jpath, &name);
    if (st != CK_OK)
        return st;
    for (int i = 0; i < c->n_layers; i++) {
        if (strcmp(c->layers[i].name, name) == 0) {
            *out = i;
            return CK_OK;
        }
    }
    return fail_at(cx, jpath, "\"%s\" is not a layer", printable(name, shown, sizeof shown));
}

static ck_status parse_segments(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    const char *base = "checkpoint.segments";
    char spath[JPATH_MAX], epath[JPATH_MAX];
    ck_status st;
    if (!cJSON_IsArray(v))
        return fail_at(cx, base, "must be a list of [first, last] layer-name pairs, got %s",
                       json_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n < 1)
        return fail_at(cx, base, "must hold at least one [first, last] pair");
    if (n > c->n_layers)
        return fail_at(cx, base, "%d segments cannot fit in %d layers without overlapping", n,
                       c->n_layers);
    c->segments = calloc((size_t)n, sizeof *c->segments);
    if (!c->segments)
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    c->n_segments = n;
    int s = 0;
    for (const cJSON *seg = v->child; seg; seg = seg->next, s++) {
        index_path(spath, sizeof spath, base, s);
        if (!cJSON_IsArray(seg) || cJSON_GetArraySize(seg) != 2)
            return fail_at(cx, spath, "must be a [first, last] pair of layer names, got %s",
                           cJSON_IsArray(seg) ? "a list of another length" : json_type_name(seg));
        int ends[2], e = 0;
        for (const cJSON *end = seg->child; end; end = end->next, e++) {
            index_path(epath, sizeof epath, spath, e);
            if ((st = resolve_layer(cx, c, end, epath, &ends[e])) != CK_OK)
                return st;
        }
        if (ends[0] > ends[1])
            return fail_at(cx, spath,
                           "first layer \"%s\" (layers[%d]) comes after last layer \"%s\" "
                           "(layers[%d])",
                           c->layers[ends[0]].name, ends[0], c->layers[ends[1]].name, ends[1]);
        if (s > 0) {
            const int *prev = c->segments[s - 1];
            if (ends[1] < prev[0])
                return fail_at(cx, spath, "out of order: comes before segments[%d]", s - 1);
            if (ends[0] <= prev[1])
                return fail_at(cx, spath, "overlaps segments[%d] (both hold \"%s\")", s - 1,
                               c->layers[ends[0]].name);
        }
        c->segments[s][0] = ends[0];
        c->segments[s][1] = ends[1];
    }
    return CK_OK;
}

static ck_status parse_checkpoint(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"segments", "every", "policy"};
    static const char *const policies[] = {"sqrt"};
    ck_status st;
    int choice;
    int64_t every;
    if (!v)
        return CK_OK;
    if ((st = get_object(cx, v, "checkpoint")) != CK_OK)
        return st;
    if ((st = check_keys(cx, v, "checkpoint", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    if (cJSON_GetArraySize(v) != 1)
        return fail_at(cx, "checkpoint", "must give exactly one of segments, every, policy");

    const cJSON *item = v->child;
    if (strcmp(item->string, "segments") == 0) {
        c->ckpt_kind = CK_CKPT_SEGMENTS;
        return parse_segments(cx, item, c);
    }
    if (strcmp(item->string, "every") == 0) {
        if ((st = get_int(cx, item, "checkpoint.every", 1, SIZE_CAP, &every)) != CK_OK)
            return st;
        c->ckpt_kind = CK_CKPT_EVERY;
        c->ckpt_every = (int)every;
        return CK_OK;
    }
    if ((st = get_choice(cx, item, "checkpoint.policy", policies, COUNT(policies), &choice)) !=
        CK_OK)
        return st;
    c->ckpt_kind = CK_CKPT_SQRT;
    return CK_OK;
}

static ck_status parse_train(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"steps",    "optimizer", "lr",         "weight_decay",
                                       "momentum", "beta1",     "beta2",      "eps",
                                       "loss_scale", "loss_scale_value", "growth_interval"};
    static const real_range positive = POSITIVE, non_negative = NON_NEGATIVE,
                            unit_closed = UNIT_CLOSED, unit_half_open = UNIT_HALF_OPEN;
    /* Optimizer-specific keys and the optimizer each belongs to. */
    static const struct {
        const char *key;
        ck_optimizer_kind only_for;
        const real_range *range;
        size_t offset;
    } specific[] = {
        {"momentum", CK_OPT_MOMENTUM, &unit_closed, offsetof(ck_optimizer, momentum)},
        {"beta1", CK_OPT_ADAM, &unit_half_open, offsetof(ck_optimizer, beta1)},
        {"beta2", CK_OPT_ADAM, &unit_half_open, offsetof(ck_optimizer, beta2)},
        {"eps", CK_OPT_ADAM, &positive, offsetof(ck_optimizer, eps)},
    };
    char kpath[JPATH_MAX];
    ck_status st;
    int choice;
    int64_t steps;
    const cJSON *item;

    if (!v)
        return CK_OK;
    if ((st = get_object(cx, v, "train")) != CK_OK)
        return st;
    if ((st = check_keys(cx, v, "train", keys, COUNT(keys), NULL)) != CK_OK)
        return st;

    if ((item = cJSON_GetObjectItemCaseSensitive(v, "optimizer"))) {
        if ((st = get_choice(cx, item, "train.optimizer", optimizer_names,
                             COUNT(optimizer_names), &choice)) != CK_OK)
            return st;
        c->optimizer.kind = (ck_optimizer_kind)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "steps"))) {
        if ((st = get_int(cx, item, "train.steps", 1, MAX_STEPS, &steps)) != CK_OK)
            return st;
        c->steps = (int)steps;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "lr")) &&
        (st = get_real(cx, item, "train.lr", &positive, &c->optimizer.lr)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "weight_decay")) &&
        (st = get_real(cx, item, "train.weight_decay", &non_negative,
                       &c->optimizer.weight_decay)) != CK_OK)
        return st;
    for (int i = 0; i < COUNT(specific); i++) {
        if (!(item = cJSON_GetObjectItemCaseSensitive(v, specific[i].key)))
            continue;
        key_path(kpath, sizeof kpath, "train", specific[i].key);
        /* Accepted only where it has an effect: a setting that silently does nothing
         * would let a wrong case pass. */
        if (c->optimizer.kind != specific[i].only_for)
            return fail_at(cx, kpath, "applies only to optimizer \"%s\" (this case uses \"%s\")",
                           ck_optimizer_kind_name(specific[i].only_for),
                           ck_optimizer_kind_name(c->optimizer.kind));
        if ((st = get_real(cx, item, kpath, specific[i].range,
                           (double *)((char *)&c->optimizer + specific[i].offset))) != CK_OK)
            return st;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "loss_scale"))) {
        if ((st = get_choice(cx, item, "train.loss_scale", loss_scale_names,
                             COUNT(loss_scale_names), &choice)) != CK_OK)
            return st;
        c->loss_scale = (ck_loss_scale_kind)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "loss_scale_value"))) {
        static const real_range scale_range = {0.0, 1e30, false, true};
        if (c->loss_scale == CK_SCALE_NONE)
            return fail_at(cx, "train.loss_scale_value",
                           "applies only with train.loss_scale \"static\" or \"dynamic\"");
        if ((st = get_real(cx, item, "train.loss_scale_value", &scale_range,
                           &c->loss_scale_value)) != CK_OK)
            return st;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "growth_interval"))) {
        int64_t gi;
        if (c->loss_scale != CK_SCALE_DYNAMIC)
            return fail_at(cx, "train.growth_interval",
                           "applies only with train.loss_scale \"dynamic\"");
        if ((st = get_int(cx, item, "train.growth_interval", 1, 1000000000, &gi)) != CK_OK)
            return st;
        c->growth_interval = (int)gi;
    }
    return CK_OK;
}

static ck_status parse_policies(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"rng", "batchnorm_recompute", "autocast_recompute"};
    ck_status st;
    int choice;
    const cJSON *item;
    if (!v)
        return CK_OK;
    if ((st = get_object(cx, v, "policies")) != CK_OK)
        return st;
    if ((st = check_keys(cx, v, "policies", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "rng"))) {
        if ((st = get_choice(cx, item, "policies.rng", rng_policy_names,
                             COUNT(rng_policy_names), &choice)) != CK_OK)
            return st;
        c->rng = (ck_rng_policy)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "batchnorm_recompute"))) {
        if ((st = get_choice(cx, item, "policies.batchnorm_recompute", bn_policy_names,
                             COUNT(bn_policy_names), &choice)) != CK_OK)
            return st;
        c->bn = (ck_bn_policy)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "autocast_recompute"))) {
        if ((st = get_choice(cx, item, "policies.autocast_recompute", autocast_names,
                             COUNT(autocast_names), &choice)) != CK_OK)
            return st;
        c->autocast = (ck_autocast_policy)choice;
    }
    return CK_OK;
}

/* {"rtol": r, "atol": a, "rel_l2": l} (all optional) at jpath. rel_l2 (NULL: not
 * accepted) is the norm criterion of low-precision judgements. */
static ck_status parse_rtol_atol(const parse_ctx *cx, const cJSON *v, const char *jpath,
                                 double *rtol, double *atol, double *rel_l2)
{
    static const char *const keys[] = {"rtol", "atol", "rel_l2"};
    static const real_range non_negative = NON_NEGATIVE;
    char kpath[JPATH_MAX];
    ck_status st;
    const cJSON *item;
    if ((st = get_object(cx, v, jpath)) != CK_OK)
        return st;
    if ((st = check_keys(cx, v, jpath, keys, COUNT(keys) - (rel_l2 ? 0 : 1), NULL)) != CK_OK)
        return st;
    key_path(kpath, sizeof kpath, jpath, "rel_l2");
    if (rel_l2 && (item = cJSON_GetObjectItemCaseSensitive(v, "rel_l2")) &&
        (st = get_real(cx, item, kpath, &non_negative, rel_l2)) != CK_OK)
        return st;
    key_path(kpath, sizeof kpath, jpath, "rtol");
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "rtol")) &&
        (st = get_real(cx, item, kpath, &non_negative, rtol)) != CK_OK)
        return st;
    key_path(kpath, sizeof kpath, jpath, "atol");
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "atol")) &&
        (st = get_real(cx, item, kpath, &non_negative, atol)) != CK_OK)
        return st;
    return CK_OK;
}

static ck_status parse_tolerance(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"rtol", "atol", "fp16", "bf16", "tensors"};
    static const real_range non_negative = NON_NEGATIVE;
    ck_status st;
    const cJSON *item;
    if (!v)
        return CK_OK;
    if ((st = get_object(cx, v, "tolerance")) != CK_OK)
        return st;
    if ((st = check_keys(cx, v, "tolerance", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "rtol")) &&
        (st = get_real(cx, item, "tolerance.rtol", &non_negative, &c->rtol)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "atol")) &&
        (st = get_real(cx, item, "tolerance.atol", &non_negative, &c->atol)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "fp16")) &&
        (st = parse_rtol_atol(cx, item, "tolerance.fp16", &c->fp16_rtol, &c->fp16_atol,
                               &c->fp16_rel_l2)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "bf16")) &&
        (st = parse_rtol_atol(cx, item, "tolerance.bf16", &c->bf16_rtol, &c->bf16_atol,
                               &c->bf16_rel_l2)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "tensors"))) {
        if ((st = get_object(cx, item, "tolerance.tensors")) != CK_OK)
            return st;
        int n = cJSON_GetArraySize(item);
        c->tol_patterns = calloc((size_t)n + 1, sizeof *c->tol_patterns);
        if (!c->tol_patterns)
            return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
        const cJSON *pat;
        cJSON_ArrayForEach(pat, item)
        {
            char kpath[JPATH_MAX];
            key_path(kpath, sizeof kpath, "tolerance.tensors", pat->string);
            ck_tol_pattern *tp = &c->tol_patterns[c->n_tol_patterns];
            if (!pat->string || !pat->string[0])
                return fail_at(cx, kpath, "a tensor name pattern must not be empty");
            tp->rtol = c->rtol;
            tp->atol = c->atol;
            tp->rel_l2 = -1.0;
            if (!(tp->pattern = strdup(pat->string)))
                return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
            c->n_tol_patterns++;
            if ((st = parse_rtol_atol(cx, pat, kpath, &tp->rtol, &tp->atol, &tp->rel_l2)) != CK_OK)
                return st;
        }
    }
    return CK_OK;
}

/* "init": {"from": "weights.safetensors"}; a relative path is relative to the case file. */
static ck_status parse_init(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"from"};
    ck_status st;
    const char *from = NULL;
    if (!v)
        return CK_OK;
    if ((st = get_object(cx, v, "init")) != CK_OK)
        return st;
    if ((st = check_keys(cx, v, "init", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(v, "from");
    if (!item)
        return fail_at(cx, "init.from", "required: a .safetensors, .npy or .npz file or a directory");
    if ((st = get_string(cx, item, "init.from", &from)) != CK_OK)
        return st;
    if (!from[0])
        return fail_at(cx, "init.from", "must not be empty");
    const char *slash = strrchr(cx->path, '/');
    size_t dir = from[0] == '/' || !slash ? 0 : (size_t)(slash - cx->path) + 1;
    size_t n = dir + strlen(from) + 1;
    if (!(c->init_from = malloc(n)))
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    snprintf(c->init_from, n, "%.*s%s", (int)dir, cx->path, from);
    return CK_OK;
}

static ck_status parse_precision(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    ck_status st;
    int choice;
    if (!v)
        return CK_OK;
    if (cJSON_IsString(v)) {
        if ((st = get_choice(cx, v, "precision", precision_names, COUNT(precision_names),
                             &choice)) != CK_OK)
            return st;
        c->precisions[0] = precision_dtypes[choice];
        c->n_precisions = 1;
        return CK_OK;
    }
    if (!cJSON_IsArray(v))
        return fail_at(cx, "precision", "must be \"fp32\", \"fp16\", \"bf16\" or a list of them, got %s",
                       json_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > CK_MAX_PRECISIONS)
        return fail_at(cx, "precision", "must list 1 to %d precisions, got %d", CK_MAX_PRECISIONS, n);
    c->n_precisions = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, v)
    {
        char ipath[JPATH_MAX];
        index_path(ipath, sizeof ipath, "precision", c->n_precisions);
        if ((st = get_choice(cx, item, ipath, precision_names, COUNT(precision_names),
                             &choice)) != CK_OK)
            return st;
        for (int k = 0; k < c->n_precisions; k++)
            if (c->precisions[k] == precision_dtypes[choice])
                return fail_at(cx, ipath, "\"%s\" is listed twice", precision_names[choice]);
        c->precisions[c->n_precisions++] = precision_dtypes[choice];
    }
    return CK_OK;
}

static ck_status parse_description(const parse_ctx *cx, const cJSON *v, ck_case *c)
{
    if (!v)
        return CK_OK;
    /* Free text; any other JSON value is kept as its compact JSON text. */
    if (cJSON_IsString(v)) {
        c->description = strdup(v->valuestring);
    } else {
        char *printed = cJSON_PrintUnformatted(v);
        c->description = printed ? strdup(printed) : NULL;
        cJSON_free(printed);
    }
    if (!c->description)
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    return CK_OK;
}

static ck_status parse_case_object(const parse_ctx *cx, const cJSON *root, ck_case *c)
{
    static const char *const keys[] = {
        "name",   "description", "seed",     "input",     "layers",
        "loss",   "checkpoint",  "train",    "policies",  "tolerance",
        "min_memory_saving",     "expect",   "expect_memory", "precision",
        "expect_precision",      "init",
    };
    static const real_range saving_range = UNIT_HALF_OPEN;
    ck_status st;
    const char *name = NULL;
    const cJSON *item;
    int choice;
    int64_t seed;

    if (!cJSON_IsObject(root))
        return fail_at(cx, "top level", "must be an object, got %s", json_type_name(root));
    if ((st = check_keys(cx, root, "", keys, COUNT(keys), NULL)) != CK_OK)
        return st;

    if (!(item = cJSON_GetObjectItemCaseSensitive(root, "name")))
        return fail_at(cx, "name", "required: the case's name");
    if ((st = get_name(cx, item, "name", &name)) != CK_OK)
        return st;
    if (!(c->name = strdup(name)))
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);

    if ((st = parse_description(cx, cJSON_GetObjectItemCaseSensitive(root, "description"), c)) !=
        CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "seed"))) {
        if ((st = get_int(cx, item, "seed", 0, EXACT_INT_MAX, &seed)) != CK_OK)
            return st;
        c->seed = (uint64_t)seed;
    }
    if ((st = parse_input(cx, cJSON_GetObjectItemCaseSensitive(root, "input"), c)) != CK_OK)
        return st;
    if ((st = parse_layers(cx, cJSON_GetObjectItemCaseSensitive(root, "layers"), c)) != CK_OK)
        return st;
    if ((st = parse_loss(cx, cJSON_GetObjectItemCaseSensitive(root, "loss"), c)) != CK_OK)
        return st;
    if ((st = parse_checkpoint(cx, cJSON_GetObjectItemCaseSensitive(root, "checkpoint"), c)) !=
        CK_OK)
        return st;
    if ((st = parse_train(cx, cJSON_GetObjectItemCaseSensitive(root, "train"), c)) != CK_OK)
        return st;
    if ((st = parse_policies(cx, cJSON_GetObjectItemCaseSensitive(root, "policies"), c)) != CK_OK)
        return st;
    if ((st = parse_tolerance(cx, cJSON_GetObjectItemCaseSensitive(root, "tolerance"), c)) !=
        CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "min_memory_saving"))) {
        if ((st = get_real(cx, item, "min_memory_saving", &saving_range,
                           &c->min_memory_saving)) != CK_OK)
            return st;
        c->has_min_memory_saving = true;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "expect")) && cJSON_IsObject(item)) {
        /* per dtype: a canary of a low-precision bug is identical in fp32 */
        if ((st = check_keys(cx, item, "expect", precision_names, COUNT(precision_names), NULL)) !=
            CK_OK)
            return st;
        for (int k = 0; k < COUNT(precision_names); k++) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(item, precision_names[k]);
            char kpath[JPATH_MAX];
            key_path(kpath, sizeof kpath, "expect", precision_names[k]);
            if (!e)
                continue;
            if ((st = get_choice(cx, e, kpath, expect_names, COUNT(expect_names), &choice)) !=
                CK_OK)
                return st;
            c->has_expect_dtype[k] = true;
            c->expect_dtype[k] = (ck_expect)choice;
        }
    } else if (item) {
        if ((st = get_choice(cx, item, "expect", expect_names, COUNT(expect_names), &choice)) !=
            CK_OK)
            return st;
        c->expect = (ck_expect)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "expect_memory"))) {
        if ((st = get_choice(cx, item, "expect_memory", expect_memory_names,
                             COUNT(expect_memory_names), &choice)) != CK_OK)
            return st;
        c->expect_memory_met = choice == 0;
    }
    if ((st = parse_precision(cx, cJSON_GetObjectItemCaseSensitive(root, "precision"), c)) != CK_OK)
        return st;
    if ((st = parse_init(cx, cJSON_GetObjectItemCaseSensitive(root, "init"), c)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "expect_precision"))) {
        /* the low-precision run against fp32 is never expected to be bitwise identical:
         * "close" or "mismatch", for every low dtype or per dtype {"fp16": ..., "bf16": ...} */
        static const char *const names[] = {"close", "mismatch"};
        static const char *const dtype_keys[] = {"fp16", "bf16"};
        if (cJSON_IsObject(item)) {
            if ((st = check_keys(cx, item, "expect_precision", dtype_keys, COUNT(dtype_keys), NULL)) != CK_OK)
                return st;
            const cJSON *e16 = cJSON_GetObjectItemCaseSensitive(item, "fp16");
            const cJSON *eb16 = cJSON_GetObjectItemCaseSensitive(item, "bf16");
            if (e16) {
                if ((st = get_choice(cx, e16, "expect_precision.fp16", names, COUNT(names),
                                     &choice)) != CK_OK)
                    return st;
                c->expect_fp16 = choice == 0 ? CK_EXPECT_CLOSE : CK_EXPECT_MISMATCH;
            }
            if (eb16) {
                if ((st = get_choice(cx, eb16, "expect_precision.bf16", names, COUNT(names),
                                     &choice)) != CK_OK)
                    return st;
                c->expect_bf16 = choice == 0 ? CK_EXPECT_CLOSE : CK_EXPECT_MISMATCH;
            }
        } else {
            if ((st = get_choice(cx, item, "expect_precision", names, COUNT(names), &choice)) !=
                CK_OK)
                return st;
            c->expect_fp16 = c->expect_bf16 = choice == 0 ? CK_EXPECT_CLOSE : CK_EXPECT_MISMATCH;
        }
    }
    return CK_OK;
}

static void set_case_defaults(ck_case *c)
{
    memset(c, 0, sizeof *c);
    c->seed = 0;
    c->input_dist = CK_DIST_UNIFORM;
    c->loss = CK_LOSS_MEAN;
    c->ckpt_kind = CK_CKPT_SQRT;
    c->steps = 1;
    c->optimizer.kind = CK_OPT_SGD;
    c->optimizer.lr = 0.01;
    c->optimizer.momentum = 0.9;
    c->optimizer.beta1 = 0.9;
    c->optimizer.beta2 = 0.999;
    c->optimizer.eps = 1e-8;
    c->optimizer.weight_decay = 0.0;
    c->rng = CK_RNG_COUNTER;
    c->bn = CK_BN_SKIP;
    c->rtol = 1.3e-6;
    c->atol = 1e-5;
    c->expect = CK_EXPECT_CLOSE;
    c->expect_memory_met = true;
    c->n_precisions = 1;
    c->precisions[0] = CK_F32;
    c->loss_scale = CK_SCALE_NONE;
    c->loss_scale_value = 65536.0;
    c->growth_interval = 2000;
    c->autocast = CK_AUTOCAST_RESTORE;
    c->fp16_rtol = 1e-3;
    c->fp16_atol = 1e-5;
    c->bf16_rtol = 1.6e-2;
    c->bf16_atol = 1e-5;
    c->fp16_rel_l2 = -1.0;
    c->bf16_rel_l2 = -1.0;
    c->expect_fp16 = CK_EXPECT_CLOSE;
    c->expect_bf16 = CK_EXPECT_CLOSE;
}

/* ------------------------------------------------------------------------------------ */
/* Public entry points                                                                   */
/* ------------------------------------------------------------------------------------ */

ck_status ck_case_parse(const char *text, size_t len, const char *path, ck_case *out,
                        ck_error *err)
{
    parse_ctx cx = {path ? path : "(case)", err};
    cJSON *root = NULL;
    ck_status st;

    set_case_defaults(out);
    if (!(out->path = strdup(cx.path))) {
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", cx.path);
        goto cleanup;
    }
    if ((st = parse_document(&cx, text, len, &root)) != CK_OK)
        goto cleanup;
    if ((st = check_duplicate_keys(&cx, root, "")) != CK_OK)
        goto cleanup;
    st = parse_case_object(&cx, root, out);
cleanup:
    cJSON_Delete(root);
    if (st != CK_OK)
        ck_case_free(out);
    return st;
}

/* Reads a whole file into a malloc'd buffer; `*len` excludes the NUL added at the end. */
static ck_status read_file(const char *path, char **text, size_t *len, ck_error *err)
{
    ck_status st = CK_OK;
    char *buf = NULL;
    size_t used = 0, cap = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        st = ck_fail(err, CK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto cleanup;
    }
    for (;;) {
        if (cap - used < 4096) {
            size_t new_cap = cap ? cap * 2 : 16384;
            char *grown = realloc(buf, new_cap + 1);
            if (!grown) {
                st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
                goto cleanup;
            }
            buf = grown;
            cap = new_cap;
        }
        size_t got = fread(buf + used, 1, cap - used, f);
        used += got;
        if (used > MAX_FILE_BYTES) {
            st = ck_fail(err, CK_ERR_INPUT, "%s: file is larger than %u bytes", path,
                         MAX_FILE_BYTES);
            goto cleanup;
        }
        if (got == 0) {
            if (ferror(f)) {
                st = ck_fail(err, CK_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
                goto cleanup;
            }
            break;
        }
    }
    buf[used] = '\0';
    *text = buf;
    *len = used;
    buf = NULL;
cleanup:
    if (f)
        fclose(f);
    free(buf);
    return st;
}

ck_status ck_case_load(const char *path, ck_case *out, ck_error *err)
{
    char *text = NULL;
    size_t len = 0;
    ck_status st;
    memset(out, 0, sizeof *out);
    if ((st = read_file(path, &text, &len, err)) != CK_OK)
        goto cleanup;
    if (len == 0) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: empty file", path);
        goto cleanup;
    }
    st = ck_case_parse(text, len, path, out, err);
cleanup:
    free(text);
    return st;
}

void ck_case_free(ck_case *c)
{
    if (!c)
        return;
    for (int i = 0; c->layers && i < c->n_layers; i++) {
        free(c->layers[i].name);
        free(c->layers[i].op_name);
    }
    free(c->layers);
    free(c->segments);
    for (int i = 0; c->tol_patterns && i < c->n_tol_patterns; i++)
        free(c->tol_patterns[i].pattern);
    free(c->tol_patterns);
    free(c->path);
    free(c->name);
    free(c->description);
    free(c->init_from);
    memset(c, 0, sizeof *c);
}

const char *ck_loss_scale_name(ck_loss_scale_kind k)
{
    return (unsigned)k < COUNT(loss_scale_names) ? loss_scale_names[k] : "?";
}

const char *ck_autocast_name(ck_autocast_policy p)
{
    return (unsigned)p < COUNT(autocast_names) ? autocast_names[p] : "?";
}

bool ck_autocast_parse(const char *s, ck_autocast_policy *out)
{
    int i = find_name(autocast_names, COUNT(autocast_names), s);
    if (i < 0)
        return false;
    *out = (ck_autocast_policy)i;
    return true;
}

bool ck_loss_scale_parse(const char *s, ck_loss_scale_kind *out)
{
    int i = find_name(loss_scale_names, COUNT(loss_scale_names), s);
    if (i < 0)
        return false;
    *out = (ck_loss_scale_kind)i;
    return true;
}

void ck_case_precision_tolerance(const ck_case *c, ck_dtype dt, const char *kind,
                                 const char *name, double *rtol, double *atol, double *rel_l2)
{
    char qualified[256];
    snprintf(qualified, sizeof qualified, "%s:%s", kind, name);
    for (int i = 0; i < c->n_tol_patterns; i++) {
        if (fnmatch(c->tol_patterns[i].pattern, qualified, 0) == 0 ||
            fnmatch(c->tol_patterns[i].pattern, name, 0) == 0) {
            *rtol = c->tol_patterns[i].rtol;
            *atol = c->tol_patterns[i].atol;
            *rel_l2 = c->tol_patterns[i].rel_l2;
            return;
        }
    }
    *rel_l2 = -1.0;
    if (dt == CK_BF16) {
        *rtol = c->bf16_rtol;
        *atol = c->bf16_atol;
        *rel_l2 = c->bf16_rel_l2;
    } else if (dt == CK_F16) {
        *rtol = c->fp16_rtol;
        *atol = c->fp16_atol;
        *rel_l2 = c->fp16_rel_l2;
    } else {
        *rtol = c->rtol;
        *atol = c->atol;
    }
}

ck_expect ck_case_expect_vs_fp32(const ck_case *c, ck_dtype dt)
{
    return dt == CK_BF16 ? c->expect_bf16 : c->expect_fp16;
}

ck_expect ck_case_expect(const ck_case *c, ck_dtype dt)
{
    for (int k = 0; k < COUNT(precision_dtypes); k++)
        if (precision_dtypes[k] == dt && c->has_expect_dtype[k])
            return c->expect_dtype[k];
    return c->expect;
}
