/*
 * safetensors reader and writer (format and the reader's refusals: safetensors.h).
 *
 * The header is parsed with cJSON after strict checks (json_strict.h); every number is
 * checked for integrality and range before it becomes a size, and every size product is
 * overflow-checked. Tensors are added to the set in data-offset order, which is also the
 * order the offsets are verified in: contiguous from 0 to the end of the file.
 */
#include "harness/io/safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/text.h"
#include "harness/io/files.h"
#include "harness/io/json_strict.h"

#define MAX_EXACT (UINT64_C(1) << 53)

typedef struct {
    const char *name;
    int index;
    ck_file_dtype dtype;
    ck_shape shape;
    uint64_t begin, end;
} st_entry;

static uint64_t read_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int cmp_entry(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static ck_status parse_metadata(const cJSON *meta, const char *path, ck_error *err)
{
    if (!cJSON_IsObject(meta))
        return ck_fail(err, CK_ERR_INPUT, "%s: header: __metadata__ must be an object of strings",
                       path);
    for (const cJSON *c = meta->child; c; c = c->next)
        if (!cJSON_IsString(c))
            return ck_fail(err, CK_ERR_INPUT, "%s: header: __metadata__.%.200s must be a string",
                           path, c->string);
    return CK_OK;
}

static ck_status parse_entry(const cJSON *item, const char *path, st_entry *e, ck_error *err)
{
    const char *nm = e->name;
    if (!cJSON_IsObject(item))
        return ck_fail(err, CK_ERR_INPUT, "%s: tensor \"%.200s\": expected an object", path, nm);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *c = item->child; c; c = c->next) {
        if (strcmp(c->string, "dtype") == 0)
            dtype = c;
        else if (strcmp(c->string, "shape") == 0)
            shape = c;
        else if (strcmp(c->string, "data_offsets") == 0)
            offs = c;
        else
            return ck_fail(err, CK_ERR_INPUT, "%s: tensor \"%.200s\": unknown field \"%.100s\"",
                           path, nm, c->string);
    }
    if (!dtype || !shape || !offs)
        return ck_fail(err, CK_ERR_INPUT, "%s: tensor \"%.200s\": missing \"%s\"", path, nm,
                       !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

    if (!cJSON_IsString(dtype))
        return ck_fail(err, CK_ERR_INPUT, "%s: tensor \"%.200s\": dtype must be a string", path,
                       nm);
    if (!ck_file_dtype_from_st(dtype->valuestring, &e->dtype)) {
        bool known = strncmp(dtype->valuestring, "F8_", 3) == 0 ||
                     strncmp(dtype->valuestring, "F4", 2) == 0 ||
                     strncmp(dtype->valuestring, "F6", 2) == 0 ||
                     strcmp(dtype->valuestring, "C64") == 0;
        return ck_fail(
            err, CK_ERR_INPUT,
            "%s: tensor \"%.200s\": dtype \"%.40s\" is %s (expected F64, F32, F16, BF16, "
            "I64, I32, I16, I8, U64, U32, U16, U8 or BOOL)",
            path, nm, dtype->valuestring, known ? "not supported" : "unknown");
    }

    if (!cJSON_IsArray(shape))
        return ck_fail(err, CK_ERR_INPUT, "%s: tensor \"%.200s\": shape must be a list", path, nm);
    int nd = cJSON_GetArraySize(shape);
    if (nd > CK_MAX_DIMS)
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: tensor \"%.200s\": %d dimensions; at most %d are supported", path, nm,
                       nd, CK_MAX_DIMS);
    memset(&e->shape, 0, sizeof e->shape);
    e->shape.ndim = nd;
    int d = 0;
    for (const cJSON *c = shape->child; c; c = c->next, d++) {
        uint64_t v;
        if (!ck_json_uint(c, MAX_EXACT, &v))
            return ck_fail(err, CK_ERR_INPUT,
                           "%s: tensor \"%.200s\": shape[%d] must be an integer from 0 to 2^53",
                           path, nm, d);
        e->shape.dim[d] = (int64_t)v;
    }

    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !ck_json_uint(offs->child, MAX_EXACT, &e->begin) ||
        !ck_json_uint(offs->child->next, MAX_EXACT, &e->end))
        return ck_fail(
            err, CK_ERR_INPUT,
            "%s: tensor \"%.200s\": data_offsets must be [begin, end], integers from 0 to 2^53",
            path, nm);
    if (e->end < e->begin)
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: tensor \"%.200s\": data_offsets [%" PRIu64 ", %" PRIu64
                       "] end before they begin",
                       path, nm, e->begin, e->end);

    size_t nbytes;
    char sh[200];
    if (!ck_file_shape_size(&e->shape, e->dtype, NULL, &nbytes))
        return ck_fail(err, CK_ERR_INPUT, "%s: tensor \"%.200s\": shape %s of %s overflows", path,
                       nm, ck_shape_str(&e->shape, sh, sizeof sh), dtype->valuestring);
    if (e->end - e->begin != (uint64_t)nbytes)
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: tensor \"%.200s\": data_offsets [%" PRIu64 ", %" PRIu64
                       "] hold %" PRIu64 " bytes but shape %s of %s needs %zu",
                       path, nm, e->begin, e->end, e->end - e->begin,
                       ck_shape_str(&e->shape, sh, sizeof sh), dtype->valuestring, nbytes);
    return CK_OK;
}

static ck_status safetensors_parse_impl(const void *buf, size_t len, const char *path,
                                        ck_tensorset *out, ck_error *err)
{
    const unsigned char *b = buf;
    ck_status st = CK_OK;
    cJSON *root = NULL;
    st_entry *ents = NULL;
    ck_tensorset_init(out);

    if (len < 8)
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: %zu bytes, too short for a safetensors file (8-byte header length)",
                       path, len);
    uint64_t hlen = read_le64(b);
    if (hlen > CK_ST_MAX_HEADER)
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: header length %" PRIu64 " exceeds the limit of %u bytes", path, hlen,
                       CK_ST_MAX_HEADER);
    if (hlen > len - 8)
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: header length %" PRIu64 " runs past the end of the file (%zu bytes)",
                       path, hlen, len);
    const char *text = (const char *)b + 8;
    if (hlen == 0 || text[0] != '{')
        return ck_fail(err, CK_ERR_INPUT, "%s: header: does not start with '{'", path);
    if ((st = ck_json_parse_strict(text, (size_t)hlen, path, "header", &root, err)) != CK_OK)
        return st;
    if (!cJSON_IsObject(root)) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: header: not a JSON object", path);
        goto cleanup;
    }
    const char *file = ck_tensorset_keep_string(out, path);
    if (!file) {
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }

    int n = 0;
    for (const cJSON *c = root->child; c; c = c->next)
        n++;
    ents = calloc((size_t)n + 1, sizeof *ents);
    if (!ents) {
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }
    int ne = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if ((st = parse_metadata(c, path, err)) != CK_OK)
                goto cleanup;
            continue;
        }
        if (c->string[0] == '\0') {
            st = ck_fail(err, CK_ERR_INPUT, "%s: header: a tensor has an empty name", path);
            goto cleanup;
        }
        ents[ne].name = c->string;
        ents[ne].index = ne;
        if ((st = parse_entry(c, path, &ents[ne], err)) != CK_OK)
            goto cleanup;
        ne++;
    }

    /* Offsets: sorted, each tensor must start where the previous one ended, the first at
     * 0 and the last must end at the end of the file. */
    qsort(ents, (size_t)ne, sizeof *ents, cmp_entry);
    uint64_t data_len = (uint64_t)(len - 8 - (size_t)hlen), expect = 0;
    for (int i = 0; i < ne; i++) {
        const st_entry *e = &ents[i];
        if (e->begin > expect) {
            st = ck_fail(err, CK_ERR_INPUT,
                         "%s: tensor \"%.200s\": data_offsets [%" PRIu64 ", %" PRIu64
                         "] leave a gap of %" PRIu64 " bytes before it",
                         path, e->name, e->begin, e->end, e->begin - expect);
            goto cleanup;
        }
        if (e->begin < expect) {
            st = ck_fail(err, CK_ERR_INPUT,
                         "%s: tensor \"%.200s\": data_offsets [%" PRIu64 ", %" PRIu64
                         "] overlap \"%.200s\", which ends at %" PRIu64,
                         path, e->name, e->begin, e->end, ents[i - 1].name, expect);
            goto cleanup;
        }
        if (e->end > data_len) {
            st = ck_fail(err, CK_ERR_INPUT,
                         "%s: tensor \"%.200s\": data_offsets [%" PRIu64 ", %" PRIu64
                         "] run past the end of the data (%" PRIu64 " bytes)",
                         path, e->name, e->begin, e->end, data_len);
            goto cleanup;
        }
        expect = e->end;
    }
    if (expect != data_len) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: %" PRIu64 " trailing bytes after the last tensor",
                     path, data_len - expect);
        goto cleanup;
    }

    const unsigned char *data = b + 8 + hlen;
    for (int i = 0; i < ne && st == CK_OK; i++)
        st = ck_tensorset_add(out, ents[i].name, ents[i].dtype, &ents[i].shape,
                              data + ents[i].begin, file, err);

cleanup:
    free(ents);
    cJSON_Delete(root);
    if (st != CK_OK)
        ck_tensorset_free(out);
    return st;
}

/* The one-line guarantee for every message of safetensors_parse. */
ck_status ck_safetensors_parse(const void *buf, size_t len, const char *path, ck_tensorset *out,
                               ck_error *err)
{
    return ck_error_one_line(err, safetensors_parse_impl(buf, len, path, out, err));
}

ck_status ck_safetensors_load(const char *path, ck_tensorset *out, ck_error *err)
{
    return ck_tensorset_load_mapped(path, ck_safetensors_parse, out, err);
}

/* ---------------------------------------------------------------------------------- */
/* Writer                                                                              */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} strbuf;

static void sb_add(strbuf *sb, const char *text, size_t len)
{
    if (sb->oom)
        return;
    if (sb->n + len + 1 > sb->cap) {
        size_t nc = sb->cap ? sb->cap : 256;
        while (nc < sb->n + len + 1)
            nc *= 2;
        char *ns = realloc(sb->s, nc);
        if (!ns) {
            sb->oom = true;
            return;
        }
        sb->s = ns;
        sb->cap = nc;
    }
    memcpy(sb->s + sb->n, text, len);
    sb->n += len;
    sb->s[sb->n] = '\0';
}

static void sb_str(strbuf *sb, const char *text)
{
    sb_add(sb, text, strlen(text));
}

ck_status ck_safetensors_header(int n, const ck_named_tensor *t, char **hdr, size_t *hdr_len,
                                ck_error *err)
{
    strbuf sb = {0};
    char num[64];
    uint64_t offset = 0;
    *hdr = NULL;
    *hdr_len = 0;
    sb_add(&sb, "\0\0\0\0\0\0\0\0", 8);
    sb_str(&sb, "{");
    for (int i = 0; i < n; i++) {
        size_t nbytes;
        if (!t[i].name || !t[i].name[0] || strcmp(t[i].name, "__metadata__") == 0 ||
            !ck_utf8_valid(t[i].name, strlen(t[i].name))) {
            free(sb.s);
            return ck_fail(err, CK_ERR_INPUT, "tensor %d: name \"%.200s\" cannot be written", i,
                           t[i].name ? t[i].name : "(null)");
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(t[i].name, t[j].name) == 0) {
                free(sb.s);
                return ck_fail(err, CK_ERR_INPUT, "tensor \"%.200s\" given twice", t[i].name);
            }
        }
        if (!ck_file_shape_size(&t[i].shape, t[i].dtype, NULL, &nbytes) ||
            __builtin_add_overflow(offset, (uint64_t)nbytes, &offset) || offset > MAX_EXACT) {
            free(sb.s);
            return ck_fail(err, CK_ERR_INPUT, "tensor \"%.200s\": invalid shape or dtype",
                           t[i].name);
        }
        char *q = ck_json_quote(t[i].name);
        if (!q) {
            free(sb.s);
            return ck_fail(err, CK_ERR_NOMEM, "out of memory");
        }
        sb_str(&sb, i ? "," : "");
        sb_str(&sb, q);
        free(q);
        sb_str(&sb, ":{\"dtype\":\"");
        sb_str(&sb, ck_file_dtype_st_name(t[i].dtype));
        sb_str(&sb, "\",\"shape\":[");
        for (int d = 0; d < t[i].shape.ndim; d++) {
            snprintf(num, sizeof num, "%s%" PRId64, d ? "," : "", t[i].shape.dim[d]);
            sb_str(&sb, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                 offset - (uint64_t)nbytes, offset);
        sb_str(&sb, num);
    }
    sb_str(&sb, "}");
    while (!sb.oom && sb.n % 8 != 0)
        sb_str(&sb, " ");
    if (sb.oom || sb.n - 8 > CK_ST_MAX_HEADER) {
        free(sb.s);
        return ck_fail(err, sb.oom ? CK_ERR_NOMEM : CK_ERR_INPUT,
                       sb.oom ? "out of memory" : "header too large");
    }
    uint64_t hl = sb.n - 8;
    for (int i = 0; i < 8; i++)
        sb.s[i] = (char)((hl >> (8 * i)) & 0xff);
    *hdr = sb.s;
    *hdr_len = sb.n;
    return CK_OK;
}

ck_status ck_safetensors_write(const char *path, int n, const ck_named_tensor *t, ck_error *err)
{
    char *hdr;
    size_t hlen;
    ck_status st = ck_safetensors_header(n, t, &hdr, &hlen, err);
    if (st != CK_OK) {
        ck_error_prefix(err, "%s", path);
        return st;
    }
    ck_atomic_file af;
    if ((st = ck_atomic_open(&af, path, err)) != CK_OK) {
        free(hdr);
        return st;
    }
    ck_atomic_write(&af, hdr, hlen);
    free(hdr);
    for (int i = 0; i < n; i++)
        ck_atomic_write(&af, t[i].data, ck_named_tensor_bytes(&t[i]));
    return ck_atomic_commit(&af, err);
}
