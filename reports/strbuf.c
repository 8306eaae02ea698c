/* The growing text buffer (strbuf.h). */
#include "reports/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/text.h"

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
    const char *s = text ? text : "";
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned cp = 0;
        size_t sl = ck_utf8_next(s + i, n - i, &cp);
        /* XML 1.0 refuses invalid UTF-8, C0 controls but tab and newline, and U+FFFE/FFFF:
         * each becomes U+FFFD, visibly replaced (HTML shares this escaper) */
        if (sl == 0 || ck_text_is_noncharacter(cp) ||
            (cp < 0x20 && cp != '\n' && cp != '\t')) {
            ck_sb_add(b, "\xef\xbf\xbd");
            i += sl ? sl : 1;
            continue;
        }
        switch (cp) {
        case '&': ck_sb_add(b, "&amp;"); break;
        case '<': ck_sb_add(b, "&lt;"); break;
        case '>': ck_sb_add(b, "&gt;"); break;
        case '"': ck_sb_add(b, "&quot;"); break;
        case '\'': ck_sb_add(b, "&#39;"); break;
        default: {
            char piece[5] = {0};
            memcpy(piece, s + i, sl);
            ck_sb_add(b, piece);
        }
        }
        i += sl;
    }
}

void ck_sb_free(ck_strbuf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}
