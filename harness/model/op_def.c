/*
 * The op definition table (op_def.h): the families' rows found by kind, the catalogue of
 * spellings and the option texts generated from the rows, and the shape rules several
 * families share.
 */
#include "harness/model/op_def.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* Rows by kind                                                                          */
/* ------------------------------------------------------------------------------------ */

typedef struct {
    const ck_op_def *rows;
    const int *count;
} family_rows;

static const family_rows families[CK_FAMILY_COUNT] = {
    [CK_FAMILY_LINEAR] = {ck_op_defs_linear, &ck_op_defs_linear_count},
    [CK_FAMILY_CONV] = {ck_op_defs_conv, &ck_op_defs_conv_count},
    [CK_FAMILY_POOL] = {ck_op_defs_pool, &ck_op_defs_pool_count},
    [CK_FAMILY_UPSAMPLE] = {ck_op_defs_upsample, &ck_op_defs_upsample_count},
    [CK_FAMILY_POINTWISE] = {ck_op_defs_pointwise, &ck_op_defs_pointwise_count},
    [CK_FAMILY_NORM] = {ck_op_defs_norm, &ck_op_defs_norm_count},
    [CK_FAMILY_RANDOM] = {ck_op_defs_random, &ck_op_defs_random_count},
    [CK_FAMILY_ATTENTION] = {ck_op_defs_attention, &ck_op_defs_attention_count},
    [CK_FAMILY_SHAPE] = {ck_op_defs_shape, &ck_op_defs_shape_count},
    [CK_FAMILY_BROADCAST] = {ck_op_defs_broadcast, &ck_op_defs_broadcast_count},
};

const ck_op_def *ck_op_family_defs(ck_op_family family, int *n)
{
    if ((unsigned)family >= CK_FAMILY_COUNT) {
        *n = 0;
        return NULL;
    }
    *n = *families[family].count;
    return families[family].rows;
}

const ck_op_def *ck_op_def_of(ck_op_kind kind)
{
    int n = 0;
    const ck_op_def *rows = ck_op_family_defs(ck_op_family_of(kind), &n);
    for (int i = 0; i < n; i++)
        if (rows[i].kind == kind)
            return &rows[i];
    return NULL;
}

static const ck_option_def no_options[] = {CK_OPTIONS_END};

const ck_option_def *ck_op_options(ck_op_kind kind)
{
    const ck_op_def *d = ck_op_def_of(kind);
    return d && d->options ? d->options : no_options;
}

bool ck_op_takes_many_inputs(ck_op_kind kind)
{
    const ck_op_def *d = ck_op_def_of(kind);
    return d && d->max_inputs == CK_MAX_INPUTS;
}

void ck_op_input_range(ck_op_kind kind, int *lo, int *hi)
{
    const ck_op_def *d = ck_op_def_of(kind);
    *lo = d ? d->min_inputs : 1;
    *hi = d ? d->max_inputs : 1;
}

bool ck_op_inputs_ok(ck_op_kind kind, int n)
{
    const ck_op_def *d = ck_op_def_of(kind);
    if (!d || n < d->min_inputs || n > d->max_inputs)
        return false;
    return d->inputs_mask == 0 || (d->inputs_mask & (1u << n)) != 0;
}

ck_input_domain ck_op_input_domain(ck_op_kind kind)
{
    const ck_op_def *d = ck_op_def_of(kind);
    return d ? d->input_domain : CK_DOMAIN_REAL;
}

bool ck_op_casts_params(ck_op_kind kind)
{
    const ck_op_def *d = ck_op_def_of(kind);
    return d && d->casts_params;
}

/* ------------------------------------------------------------------------------------ */
/* Option texts, generated from the rows                                                 */
/* ------------------------------------------------------------------------------------ */

/* The type column: the row's words, else the type's own. */
static const char *option_type_text(const ck_option_def *o)
{
    if (o->type_text)
        return o->type_text;
    switch (o->type) {
    case CK_OPTION_SIZE: return "size";
    case CK_OPTION_WINDOW: return "window";
    case CK_OPTION_PADDING: return "`\"same\"`, `\"valid\"`, or window ≥ 0";
    case CK_OPTION_BOOL: return "bool";
    case CK_OPTION_REAL:
        if (o->range.lo == 0.0 && o->range.hi == 1.0)
            return o->range.hi_open ? "number in [0, 1)" : "number in [0, 1]";
        if (o->range.lo == 0.0)
            return o->range.lo_open ? "number > 0" : "number ≥ 0";
        return "number";
    case CK_OPTION_DIM: return "int (negative from the end)";
    case CK_OPTION_DIMLIST: return "list of dims (negative from the end)";
    case CK_OPTION_SHAPE: return "list of sizes (one −1 is inferred)";
    case CK_OPTION_NORMSHAPE: return "int or list of sizes";
    case CK_OPTION_PAD: return "window ≥ 0";
    case CK_OPTION_WINDOW0: return "window ≥ 0";
    case CK_OPTION_UPMODE: return "`\"nearest\"`, or the linear mode of the dims";
    case CK_OPTION_APPROX: return "`\"none\"` or `\"tanh\"`";
    case CK_OPTION_FLOAT_DTYPE: return "`\"float32\"`, `\"float16\"` or `\"bfloat16\"`";
    case CK_OPTION_INIT: return "an init scheme ([Parameter initialisation](#parameter-initialisation))";
    }
    return "?";
}

/* A double as a person writes it: 0.1, 1e-5, 0.01. */
static void real_text(double v, char *buf, size_t n)
{
    char tmp[48];
    snprintf(tmp, sizeof tmp, "%g", v);
    char *e = strchr(tmp, 'e');
    if (e) { /* 1e-05 -> 1e-5 */
        char *digits = e + 2;
        while (*digits == '0' && digits[1])
            memmove(digits, digits + 1, strlen(digits));
    }
    snprintf(buf, n, "%s", tmp);
}

/* The default column: "required", the row's words, or the value ck_op_params_default
 * sets. backticks: quote names and bools as the docs do. */
static void option_default_text(const ck_option_def *o, const ck_op_params *p, bool backticks,
                                char *buf, size_t n)
{
    const char *q = backticks ? "`" : "";
    const void *field = (const char *)p + o->offset;
    if (o->required) {
        snprintf(buf, n, "required");
        return;
    }
    if (o->default_text) {
        snprintf(buf, n, "%s", o->default_text);
        return;
    }
    switch (o->type) {
    case CK_OPTION_SIZE: snprintf(buf, n, "%lld", (long long)*(const int64_t *)field); return;
    case CK_OPTION_WINDOW:
    case CK_OPTION_WINDOW0: snprintf(buf, n, "%d", ((const int *)field)[0]); return;
    case CK_OPTION_PAD: snprintf(buf, n, "%d", p->pad_mode == CK_PAD_EXPLICIT ? p->pad[0] : 0); return;
    case CK_OPTION_PADDING:
        snprintf(buf, n, "%s\"%s\"%s", q, p->pad_mode == CK_PAD_SAME ? "same" : "valid", q);
        return;
    case CK_OPTION_BOOL: snprintf(buf, n, "%s%s%s", q, *(const bool *)field ? "true" : "false", q); return;
    case CK_OPTION_REAL: real_text(*(const double *)field, buf, n); return;
    case CK_OPTION_DIM: snprintf(buf, n, "%d", *(const int *)field); return;
    case CK_OPTION_UPMODE:
        snprintf(buf, n, "%s\"%s\"%s", q, p->mode == CK_UPSAMPLE_NEAREST ? "nearest" : "linear", q);
        return;
    case CK_OPTION_APPROX: snprintf(buf, n, "%s\"%s\"%s", q, p->gelu_tanh ? "tanh" : "none", q); return;
    case CK_OPTION_INIT:
        snprintf(buf, n, "%s\"%s\"%s", q, ck_init_names.names[*(const int *)field], q);
        return;
    case CK_OPTION_FLOAT_DTYPE:
        snprintf(buf, n, "%s\"%s\"%s", q, ck_cast_dtype_name(*(const int *)field), q);
        return;
    case CK_OPTION_DIMLIST:
    case CK_OPTION_SHAPE:
    case CK_OPTION_NORMSHAPE: snprintf(buf, n, "none"); return;
    }
    snprintf(buf, n, "?");
}

/* Appends to buf[*used..n); false once it no longer fits. */
static bool add_text(char *buf, size_t n, size_t *used, const char *fmt, ...)
{
    if (*used >= n)
        return false;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *used, n - *used, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n - *used) {
        *used = n;
        return false;
    }
    *used += (size_t)w;
    return true;
}

/* The docs' type column for `inputs` when a layer takes a list of them. */
static void inputs_type_text(const ck_op_def *d, char *buf, size_t n)
{
    if (d->inputs_rule)
        snprintf(buf, n, "%s layer names", d->inputs_rule);
    else if (d->min_inputs == d->max_inputs)
        snprintf(buf, n, "list of %d layer names", d->min_inputs);
    else
        snprintf(buf, n, "list of %d to %d layer names", d->min_inputs, d->max_inputs);
}

static const ck_op_params *defaults_of(const ck_op_def *d, ck_op_params *p)
{
    ck_op_params_default(p, d->kind, d->spellings[0].nsp);
    return p;
}

/* Markdown as plain text: `x` -> x, [words](#anchor) -> words. */
static const char *plain(const char *md, char *buf, size_t n)
{
    size_t o = 0;
    for (const char *s = md; *s && o + 1 < n; s++) {
        if (*s == '`')
            continue;
        if (*s == '(' && s > md && s[-1] == ']' && s[1] == '#') { /* a link's target */
            while (*s && *s != ')')
                s++;
            if (!*s)
                break;
            continue;
        }
        if (*s == '[' || *s == ']')
            continue;
        buf[o++] = *s;
    }
    buf[o] = '\0';
    return buf;
}

void ck_op_options_text(ck_op_kind kind, char *buf, size_t n)
{
    const ck_op_def *d = ck_op_def_of(kind);
    size_t used = 0;
    ck_op_params p;
    char text[160], def[96];
    if (n)
        buf[0] = '\0';
    if (!d)
        return;
    defaults_of(d, &p);
    if (d->max_inputs > 1) {
        inputs_type_text(d, text, sizeof text);
        add_text(buf, n, &used, "inputs (%s, %s)", text,
                 d->min_inputs > 1 ? "required" : "default the previous layer");
    }
    for (const ck_option_def *o = ck_op_options(kind); o->key; o++) {
        option_default_text(o, &p, false, def, sizeof def);
        add_text(buf, n, &used, "%s%s (%s, %s%s)", used ? ", " : "", o->key,
                 plain(option_type_text(o), text, sizeof text), o->required ? "" : "default ",
                 def);
    }
    if (!used)
        add_text(buf, n, &used, "none");
}

bool ck_op_options_markdown(ck_op_kind kind, char *buf, size_t n)
{
    const ck_op_def *d = ck_op_def_of(kind);
    size_t used = 0;
    ck_op_params p;
    char text[160], def[96];
    if (!d || !n)
        return false;
    buf[0] = '\0';
    defaults_of(d, &p);
    bool ok = add_text(buf, n, &used, "<!-- options: %s -->\n", ck_op_kind_name(kind));
    char names[160];
    size_t nu = 0;
    for (int s = 0; d->spellings[s].name; s++)
        add_text(names, sizeof names, &nu, "%s`%s`", s ? ", " : "", d->spellings[s].name);
    const ck_option_def *opts = ck_op_options(kind);
    if (!opts->key && d->max_inputs == 1) {
        ok = ok && add_text(buf, n, &used, "%s: no options.\n", names);
    } else {
        ok = ok && add_text(buf, n, &used, "Options of %s:\n\n", names);
        ok = ok && add_text(buf, n, &used, "| option | type | default |\n|---|---|---|\n");
        if (d->max_inputs > 1) {
            inputs_type_text(d, text, sizeof text);
            ok = ok && add_text(buf, n, &used, "| `inputs` | %s | %s |\n", text,
                                d->min_inputs > 1 ? "required" : "the previous layer");
        }
        for (const ck_option_def *o = opts; o->key; o++) {
            option_default_text(o, &p, true, def, sizeof def);
            ok = ok && add_text(buf, n, &used, "| `%s` | %s | %s |\n", o->key,
                                option_type_text(o), def);
        }
    }
    return ok && add_text(buf, n, &used, "<!-- end options -->\n");
}

/* ------------------------------------------------------------------------------------ */
/* The catalogue of spellings                                                            */
/* ------------------------------------------------------------------------------------ */

#define CATALOGUE_MAX (CK_OP_KIND_COUNT * CK_OP_MAX_SPELLINGS)

static ck_op_info catalogue[CATALOGUE_MAX];
static int catalogue_count;
static char option_texts[CK_OP_KIND_COUNT][768];
static pthread_once_t catalogue_once = PTHREAD_ONCE_INIT;

static void build_catalogue(void)
{
    for (int k = 0; k < CK_OP_KIND_COUNT; k++) {
        const ck_op_def *d = ck_op_def_of((ck_op_kind)k);
        if (!d)
            continue;
        ck_op_options_text((ck_op_kind)k, option_texts[k], sizeof option_texts[k]);
        for (int s = 0; d->spellings[s].name && catalogue_count < CATALOGUE_MAX; s++) {
            ck_op_info *info = &catalogue[catalogue_count++];
            info->name = d->spellings[s].name;
            info->kind = d->kind;
            info->nsp = d->spellings[s].nsp;
            info->summary = d->spellings[s].summary;
            info->options = option_texts[k];
        }
    }
}

const ck_op_info *ck_op_catalogue(int *count)
{
    pthread_once(&catalogue_once, build_catalogue);
    if (count)
        *count = catalogue_count;
    return catalogue;
}

const ck_op_info *ck_op_find(const char *name)
{
    int n = 0;
    const ck_op_info *cat = ck_op_catalogue(&n);
    for (int i = 0; name && i < n; i++)
        if (strcmp(cat[i].name, name) == 0)
            return &cat[i];
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Names for messages                                                                    */
/* ------------------------------------------------------------------------------------ */

const char *ck_op_display_name(const ck_op_params *op)
{
    const ck_op_def *d = ck_op_def_of(op->kind);
    for (int s = 0; d && d->spellings[s].name; s++)
        if (d->spellings[s].nsp == op->nsp)
            return d->spellings[s].name;
    return ck_op_kind_name(op->kind);
}

