/*
 * The named tensor set and the file dtypes (see tensorset.h). The formats themselves are
 * in safetensors.c, npy.c and npz.c; loading by extension is in tensorload.c.
 */
#include "harness/io/tensorset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/io/files.h"

/* ---------------------------------------------------------------------------------- */
/* Dtypes                                                                              */
/* ---------------------------------------------------------------------------------- */

static const struct {
    const char *st, *name;
    size_t size;
    bool is_float;
} ft_table[CK_FT_COUNT] = {
    [CK_FT_F64] = {"F64", "fp64", 8, true},   [CK_FT_F32] = {"F32", "fp32", 4, true},
    [CK_FT_F16] = {"F16", "fp16", 2, true},   [CK_FT_BF16] = {"BF16", "bf16", 2, true},
    [CK_FT_I64] = {"I64", "i64", 8, false},   [CK_FT_I32] = {"I32", "i32", 4, false},
    [CK_FT_I16] = {"I16", "i16", 2, false},   [CK_FT_I8] = {"I8", "i8", 1, false},
    [CK_FT_U64] = {"U64", "u64", 8, false},   [CK_FT_U32] = {"U32", "u32", 4, false},
    [CK_FT_U16] = {"U16", "u16", 2, false},   [CK_FT_U8] = {"U8", "u8", 1, false},
    [CK_FT_BOOL] = {"BOOL", "bool", 1, false},
};

size_t ck_file_dtype_size(ck_file_dtype dt)
{
    return (unsigned)dt < CK_FT_COUNT ? ft_table[dt].size : 0;
}

bool ck_file_dtype_is_float(ck_file_dtype dt)
{
    return (unsigned)dt < CK_FT_COUNT && ft_table[dt].is_float;
}

const char *ck_file_dtype_st_name(ck_file_dtype dt)
{
    return (unsigned)dt < CK_FT_COUNT ? ft_table[dt].st : "?";
}

const char *ck_file_dtype_name(ck_file_dtype dt)
{
    return (unsigned)dt < CK_FT_COUNT ? ft_table[dt].name : "?";
}

bool ck_file_dtype_from_st(const char *s, ck_file_dtype *out)
{
    for (int i = 0; i < CK_FT_COUNT; i++) {
        if (strcmp(s, ft_table[i].st) == 0) {
            *out = (ck_file_dtype)i;
            return true;
        }
    }
    return false;
}

bool ck_file_dtype_parse(const char *s, ck_file_dtype *out)
{
    ck_dtype cd;
    if (ck_file_dtype_from_st(s, out))
        return true;
    for (int i = 0; i < CK_FT_COUNT; i++) {
        if (strcmp(s, ft_table[i].name) == 0) {
            *out = (ck_file_dtype)i;
            return true;
        }
    }
    if (ck_dtype_parse(s, &cd)) {
        *out = ck_file_dtype_from_ck(cd);
        return true;
    }
    return false;
}

bool ck_file_dtype_to_ck(ck_file_dtype dt, ck_dtype *out)
{
    switch (dt) {
    case CK_FT_F64: *out = CK_F64; return true;
    case CK_FT_F32: *out = CK_F32; return true;
    case CK_FT_F16: *out = CK_F16; return true;
    case CK_FT_BF16: *out = CK_BF16; return true;
    case CK_FT_I64: *out = CK_I64; return true;
    case CK_FT_I32: *out = CK_I32; return true;
    default: return false;
    }
}

ck_file_dtype ck_file_dtype_from_ck(ck_dtype dt)
{
    switch (dt) {
    case CK_F64: return CK_FT_F64;
    case CK_F16: return CK_FT_F16;
    case CK_BF16: return CK_FT_BF16;
    case CK_I64: return CK_FT_I64;
    case CK_I32: return CK_FT_I32;
    default: return CK_FT_F32;
    }
}

bool ck_file_shape_size(const ck_shape *s, ck_file_dtype dt, int64_t *numel, size_t *nbytes)
{
    size_t es = ck_file_dtype_size(dt);
    if (es == 0 || s->ndim < 0 || s->ndim > CK_MAX_DIMS)
        return false;
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) {
        if (s->dim[i] < 0 || __builtin_mul_overflow(n, s->dim[i], &n))
            return false;
    }
    size_t bytes;
    if ((uint64_t)n > SIZE_MAX || __builtin_mul_overflow((size_t)n, es, &bytes))
        return false;
    if (numel)
        *numel = n;
    if (nbytes)
        *nbytes = bytes;
    return true;
}

size_t ck_named_tensor_bytes(const ck_named_tensor *t)
{
    size_t n = 0;
    return ck_file_shape_size(&t->shape, t->dtype, NULL, &n) ? n : 0;
}

ck_named_tensor ck_named_tensor_of(const ck_tensor *t)
{
    ck_named_tensor nt;
    nt.name = t->name;
    nt.dtype = ck_file_dtype_from_ck(t->dtype);
    nt.shape = t->shape;
    nt.data = t->data;
    return nt;
}

/* ---------------------------------------------------------------------------------- */
/* The set                                                                             */
/* ---------------------------------------------------------------------------------- */

void ck_tensorset_init(ck_tensorset *s)
{
    memset(s, 0, sizeof *s);
}

void ck_tensorset_free(ck_tensorset *s)
{
    for (int i = 0; i < s->n_mem; i++) {
        if (s->mem[i].mapped)
            ck_unmap_file(s->mem[i].p, s->mem[i].len);
        else
            free(s->mem[i].p);
    }
    free(s->mem);
    free(s->t);
    free(s->file);
    memset(s, 0, sizeof *s);
}

int ck_tensorset_index(const ck_tensorset *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return i;
    return -1;
}

const ck_named_tensor *ck_tensorset_find(const ck_tensorset *s, const char *name)
{
    int i = ck_tensorset_index(s, name);
    return i < 0 ? NULL : &s->t[i];
}

ck_status ck_tensorset_keep(ck_tensorset *s, void *p, size_t len, bool mapped, ck_error *err)
{
    if (!p)
        return CK_OK;
    if (s->n_mem == s->cap_mem) {
        int nc = s->cap_mem ? s->cap_mem * 2 : 8;
        ck_tensorset_mem *nm = realloc(s->mem, (size_t)nc * sizeof *nm);
        if (!nm) {
            if (mapped)
                ck_unmap_file(p, len);
            else
                free(p);
            return ck_fail(err, CK_ERR_NOMEM, "out of memory");
        }
        s->mem = nm;
        s->cap_mem = nc;
    }
    s->mem[s->n_mem].p = p;
    s->mem[s->n_mem].len = len;
    s->mem[s->n_mem].mapped = mapped;
    s->n_mem++;
    return CK_OK;
}

const char *ck_tensorset_keep_string(ck_tensorset *s, const char *str)
{
    char *c = strdup(str);
    if (!c || ck_tensorset_keep(s, c, 0, false, NULL) != CK_OK)
        return NULL;
    return c;
}

static ck_status grow(ck_tensorset *s, int need, ck_error *err)
{
    if (need <= s->cap)
        return CK_OK;
    int nc = s->cap ? s->cap : 16;
    while (nc < need) {
        if (nc > (1 << 29))
            return ck_fail(err, CK_ERR_NOMEM, "out of memory: too many tensors");
        nc *= 2;
    }
    ck_named_tensor *nt = realloc(s->t, (size_t)nc * sizeof *nt);
    if (!nt)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    s->t = nt;
    const char **nf = realloc(s->file, (size_t)nc * sizeof *nf);
    if (!nf)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    s->file = nf;
    s->cap = nc;
    return CK_OK;
}

ck_status ck_tensorset_add(ck_tensorset *s, const char *name, ck_file_dtype dtype,
                           const ck_shape *shape, const void *data, const char *file,
                           ck_error *err)
{
    ck_status st = grow(s, s->n + 1, err);
    if (st != CK_OK)
        return st;
    const char *nm = ck_tensorset_keep_string(s, name);
    if (!nm)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", file);
    ck_named_tensor *t = &s->t[s->n];
    t->name = nm;
    t->dtype = dtype;
    t->shape = *shape;
    t->data = ck_named_tensor_bytes(t) ? data : NULL;
    s->file[s->n] = file;
    s->n++;
    return CK_OK;
}

ck_status ck_tensorset_merge(ck_tensorset *dst, ck_tensorset *src, ck_error *err)
{
    for (int i = 0; i < src->n; i++) {
        int j = ck_tensorset_index(dst, src->t[i].name);
        if (j >= 0)
            return ck_fail(err, CK_ERR_INPUT, "tensor \"%s\" is in both %s and %s",
                           src->t[i].name, dst->file[j], src->file[i]);
    }
    ck_status st = grow(dst, dst->n + src->n, err);
    if (st != CK_OK)
        return st;
    /* The blocks first: once they belong to dst, the tensors pointing into them may. */
    for (int i = 0; i < src->n_mem; i++) {
        st = ck_tensorset_keep(dst, src->mem[i].p, src->mem[i].len, src->mem[i].mapped, err);
        src->mem[i].p = NULL; /* released by keep on failure, owned by dst otherwise */
        if (st != CK_OK) {
            src->n = 0;
            return st;
        }
    }
    memcpy(dst->t + dst->n, src->t, (size_t)src->n * sizeof *src->t);
    memcpy(dst->file + dst->n, src->file, (size_t)src->n * sizeof *src->file);
    dst->n += src->n;
    src->n = 0;
    src->n_mem = 0;
    ck_tensorset_free(src);
    return CK_OK;
}

static ck_status copy_into(const ck_tensorset *s, const char *name, ck_file_dtype dtype,
                           const ck_shape *shape, void *dst, ck_error *err)
{
    int i = ck_tensorset_index(s, name);
    if (i < 0)
        return ck_fail(err, CK_ERR_INPUT, "tensor \"%s\" not found in %s", name,
                       s->n ? s->file[0] : "an empty tensor set");
    const ck_named_tensor *t = &s->t[i];
    if (t->dtype != dtype)
        return ck_fail(err, CK_ERR_INPUT, "%s: tensor \"%s\": dtype %s, expected %s", s->file[i],
                       name, ck_file_dtype_name(t->dtype), ck_file_dtype_name(dtype));
    if (!ck_shape_equal(&t->shape, shape)) {
        char a[160], b[160];
        return ck_fail(err, CK_ERR_INPUT, "%s: tensor \"%s\": shape %s, expected %s", s->file[i],
                       name, ck_shape_str(&t->shape, a, sizeof a),
                       ck_shape_str(shape, b, sizeof b));
    }
    size_t nb = ck_named_tensor_bytes(t);
    if (nb)
        memcpy(dst, t->data, nb);
    return CK_OK;
}

ck_status ck_tensorset_copy_into(const ck_tensorset *s, const char *name, ck_file_dtype dtype,
                                 const ck_shape *shape, void *dst, ck_error *err)
{
    return ck_error_one_line(err, copy_into(s, name, dtype, shape, dst, err));
}

ck_status ck_tensorset_load_mapped(const char *path, ck_tensorset_parse_fn parse,
                                   ck_tensorset *out, ck_error *err)
{
    void *p;
    size_t len;
    ck_tensorset_init(out);
    ck_status st = ck_map_file(path, &p, &len, err);
    if (st != CK_OK)
        return st;
    if ((st = parse(p, len, path, out, err)) != CK_OK) {
        ck_unmap_file(p, len);
        return st;
    }
    if ((st = ck_tensorset_keep(out, p, len, true, err)) != CK_OK)
        ck_tensorset_free(out);
    return st;
}
