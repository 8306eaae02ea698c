/* The report builder (see json_build.h). */
#include "harness/io/json_build.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/text.h"
#include "harness/io/files.h"
#include "harness/io/json_strict.h"

cJSON *ck_json_attach(ck_json_builder *b, cJSON *parent, const char *key, cJSON *item)
{
    if (b->failed || !parent || !item ||
        !(key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item))) {
        cJSON_Delete(item);
        b->failed = true;
        return NULL;
    }
    return item;
}

cJSON *ck_json_add_object(ck_json_builder *b, cJSON *parent, const char *key)
{
    return b->failed ? NULL : ck_json_attach(b, parent, key, cJSON_CreateObject());
}

cJSON *ck_json_add_array(ck_json_builder *b, cJSON *parent, const char *key)
{
    return b->failed ? NULL : ck_json_attach(b, parent, key, cJSON_CreateArray());
}

void ck_json_add_string(ck_json_builder *b, cJSON *parent, const char *key, const char *s)
{
    if (!b->failed)
        ck_json_attach(b, parent, key, s ? cJSON_CreateString(s) : cJSON_CreateNull());
}

void ck_json_add_bool(ck_json_builder *b, cJSON *parent, const char *key, bool v)
{
    if (!b->failed)
        ck_json_attach(b, parent, key, cJSON_CreateBool(v));
}

void ck_json_add_null(ck_json_builder *b, cJSON *parent, const char *key)
{
    if (!b->failed)
        ck_json_attach(b, parent, key, cJSON_CreateNull());
}

void ck_json_add_raw(ck_json_builder *b, cJSON *parent, const char *key, const char *text)
{
    if (!b->failed)
        ck_json_attach(b, parent, key, cJSON_CreateRaw(text));
}

void ck_json_add_int(ck_json_builder *b, cJSON *parent, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    ck_json_add_raw(b, parent, key, buf);
}

void ck_json_add_uint(ck_json_builder *b, cJSON *parent, const char *key, uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    ck_json_add_raw(b, parent, key, buf);
}

void ck_json_add_real(ck_json_builder *b, cJSON *parent, const char *key, double v)
{
    if (isnan(v)) {
        ck_json_add_string(b, parent, key, "NaN");
        return;
    }
    if (isinf(v)) {
        ck_json_add_string(b, parent, key, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char buf[48];
    ck_json_real_text(v, buf, sizeof buf);
    ck_json_add_raw(b, parent, key, buf);
}

char *ck_json_print_clean(const cJSON *root, size_t *replaced)
{
    char *printed = cJSON_Print(root);
    if (!printed)
        return NULL;
    char *out = ck_text_utf8_clean(printed, strlen(printed), replaced);
    cJSON_free(printed);
    return out;
}

void ck_json_numbers_from_raw(cJSON *item)
{
    for (; item; item = item->next) {
        if (cJSON_IsRaw(item) && item->valuestring) {
            char *end = NULL;
            double d = strtod(item->valuestring, &end);
            if (end && *end == '\0' && end != item->valuestring) {
                cJSON_free(item->valuestring);
                item->valuestring = NULL;
                item->type = cJSON_Number | (item->type & cJSON_StringIsConst);
                item->valuedouble = d;
                item->valueint = d >= INT_MAX ? INT_MAX : d <= (double)INT_MIN ? INT_MIN : (int)d;
            }
        }
        if (item->child)
            ck_json_numbers_from_raw(item->child);
    }
}

ck_status ck_json_write_file(const cJSON *root, const char *path, const char *what,
                             ck_error *err)
{
    char *text = root ? ck_json_print_clean(root, NULL) : NULL;
    if (!text)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory building the %s", path, what);
    ck_status st = ck_write_text_atomic(path, text, err);
    free(text);
    return st;
}
