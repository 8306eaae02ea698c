/* The growing text buffer (strbuf.h). */
#include "reports/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(ck_strbuf *b, size_t more)
{
    if (b->failed)
        return false;
    if (more > ((size_t)-1) / 2 - b->n) {
        b->failed = true;
        return false;
    }
    if (b->n + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->failed = true;
        return false;
    }
    b->s = s;
    b->cap = cap;
    return true;
}

void ck_sb_add(ck_strbuf *b, const char *text)
{
    size_t n = strlen(text ? text : "");
    if (!reserve(b, n))
        return;
    memcpy(b->s + b->n, text ? text : "", n);
    b->n += n;
    b->s[b->n] = '\0';
}

void ck_sb_addf(ck_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n)) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

void ck_sb_add_xml(ck_strbuf *b, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++) {
        char one[2] = {(char)*p, 0};
        switch (*p) {
        case '&': ck_sb_add(b, "&amp;"); break;
        case '<': ck_sb_add(b, "&lt;"); break;
        case '>': ck_sb_add(b, "&gt;"); break;
        case '"': ck_sb_add(b, "&quot;"); break;
        case '\'': ck_sb_add(b, "&#39;"); break;
        default:
            if (*p >= 0x20 || *p == '\n' || *p == '\t')
                ck_sb_add(b, one);
        }
    }
}

void ck_sb_free(ck_strbuf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}
