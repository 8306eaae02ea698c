/*
 * Tensor files: the in-memory "named tensor set" that every tensor-file reader fills and
 * every writer takes, and the dtypes those files may hold.
 *
 * The formats live in their own modules: safetensors.h, npy.h, npz.h; loading a file or a
 * directory by extension is tensorload.h; mapping and atomic writes are files.h. Every reader is
 * strict (see each header) and reports a bad file with one line that names the file and
 * the tensor or header field, returning CK_ERR_INPUT (CK_ERR_IO when the file cannot be
 * read at all, CK_ERR_NOMEM when memory runs out).
 *
 * Data in a set is always row-major (C order) and little-endian, whatever the file held:
 * a big-endian or Fortran-order .npy is converted into an owned buffer when loaded. Data
 * that needs no conversion points straight into the file's read-only mapping, so large
 * files are never copied whole. Data pointers may be unaligned: read them with memcpy.
 */
#ifndef CK_TENSORSET_H
#define CK_TENSORSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness/core/status.h"
#include "harness/core/tensor.h"

/* Every dtype a tensor file may hold. The first six map onto ck_dtype (and are the only
 * ones the harness computes in); the other integer widths and bool are compared
 * exactly. */
typedef enum {
    CK_FT_F64 = 0,
    CK_FT_F32,
    CK_FT_F16,
    CK_FT_BF16,
    CK_FT_I64,
    CK_FT_I32,
    CK_FT_I16,
    CK_FT_I8,
    CK_FT_U64,
    CK_FT_U32,
    CK_FT_U16,
    CK_FT_U8,
    CK_FT_BOOL,
    CK_FT_COUNT
} ck_file_dtype;

size_t ck_file_dtype_size(ck_file_dtype dt);         /* 0 for an invalid value */
bool ck_file_dtype_is_float(ck_file_dtype dt);
/* safetensors spelling: "F64", "F32", "F16", "BF16", "I64", ..., "U8", "BOOL". */
const char *ck_file_dtype_st_name(ck_file_dtype dt);
/* The report's spelling: "fp64", "fp32", "fp16", "bf16", "i64", ..., "u8", "bool". */
const char *ck_file_dtype_name(ck_file_dtype dt);
/* Parses the safetensors spelling; false if unknown. */
bool ck_file_dtype_from_st(const char *s, ck_file_dtype *out);
/* Parses either spelling ("F16", "fp16", "float16", "bool", "u8", ...); false if unknown. */
bool ck_file_dtype_parse(const char *s, ck_file_dtype *out);
/* The ck_dtype of a file dtype; false for the widths ck_dtype lacks. */
bool ck_file_dtype_to_ck(ck_file_dtype dt, ck_dtype *out);
ck_file_dtype ck_file_dtype_from_ck(ck_dtype dt);

/* Element count of a file shape, overflow-checked: like ck_shape_numel_checked but zero
 * dimensions are allowed (numel 0) and the byte size is returned too. False on a negative
 * dimension, ndim outside [0, CK_MAX_DIMS], or a product that overflows. */
bool ck_file_shape_size(const ck_shape *s, ck_file_dtype dt, int64_t *numel, size_t *nbytes);

/* A tensor with a name: host data, row-major, little-endian. What the readers produce and
 * the writers take. In a set, name and data belong to the set. */
typedef struct {
    const char *name;
    ck_file_dtype dtype;
    ck_shape shape; /* ndim 0 is a scalar; dimensions may be 0 */
    const void *data; /* ck_named_tensor_bytes(t) bytes; may be unaligned; NULL when 0 bytes */
} ck_named_tensor;

/* Byte size of t's data (its shape must have been checked, as every set's are). */
size_t ck_named_tensor_bytes(const ck_named_tensor *t);
/* A view of a ck_tensor (host data) as a named tensor. */
ck_named_tensor ck_named_tensor_of(const ck_tensor *t);

/* Memory a set releases when freed: a mapping or a malloc'd block. */
typedef struct {
    void *p;
    size_t len;
    bool mapped;
} ck_tensorset_mem;

typedef struct {
    int n, cap;
    ck_named_tensor *t;
    const char **file;  /* per tensor: the file it came from (messages) */
    int n_mem, cap_mem;
    ck_tensorset_mem *mem;
} ck_tensorset;

void ck_tensorset_init(ck_tensorset *s);
void ck_tensorset_free(ck_tensorset *s);
/* The tensor named name, or NULL. Linear in the set's size. */
const ck_named_tensor *ck_tensorset_find(const ck_tensorset *s, const char *name);
/* Index of the tensor named name, or -1. */
int ck_tensorset_index(const ck_tensorset *s, const char *name);

/* Copies the tensor named name into dst (for loading weights): an error naming the file
 * and tensor when it is missing or its dtype or shape differ from what is asked. */
ck_status ck_tensorset_copy_into(const ck_tensorset *s, const char *name, ck_file_dtype dtype,
                                 const ck_shape *shape, void *dst, ck_error *err);

/* ---- used by the format modules ---- */

/* Appends a tensor (name is copied; data is not, it must live in memory the set owns or
 * outlives). file is the path for messages and must outlive the set (use
 * ck_tensorset_keep_string). */
ck_status ck_tensorset_add(ck_tensorset *s, const char *name, ck_file_dtype dtype,
                           const ck_shape *shape, const void *data, const char *file,
                           ck_error *err);
/* Hands memory to the set (freed or unmapped with it). On failure the memory is released
 * here. */
ck_status ck_tensorset_keep(ck_tensorset *s, void *p, size_t len, bool mapped, ck_error *err);
/* A copy of str owned by the set; NULL when out of memory. */
const char *ck_tensorset_keep_string(ck_tensorset *s, const char *str);
/* Moves every tensor and block of src into dst (src is left empty), failing on a name
 * already in dst: "<name>: in both <file a> and <file b>". */
ck_status ck_tensorset_merge(ck_tensorset *dst, ck_tensorset *src, ck_error *err);

/* A parser of a whole file of one format into out (ck_safetensors_parse, ck_npz_parse). */
typedef ck_status (*ck_tensorset_parse_fn)(const void *buf, size_t len, const char *path,
                                           ck_tensorset *out, ck_error *err);
/* Maps path, parses it with parse and hands the mapping to out, whose tensors may point
 * into it. On failure the mapping is released and out holds nothing. */
ck_status ck_tensorset_load_mapped(const char *path, ck_tensorset_parse_fn parse,
                                   ck_tensorset *out, ck_error *err);

#endif
