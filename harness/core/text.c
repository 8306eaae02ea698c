/*
 * Text checks shared by every reader of user files (text.h).
 */
#include "harness/core/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ck_utf8_valid(const char *str, size_t n)
{
    return ck_utf8_invalid_at(str, n) == n;
}

/* The length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n, unsigned *cp_out)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp_out = c;
        return 1;
    }
    size_t len;
    unsigned cp, min;
    if ((c & 0xe0) == 0xc0)
        len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
        len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0)
        len = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    *cp_out = cp;
    return len;
}

bool ck_text_is_noncharacter(unsigned cp)
{
    return (cp >= 0xfdd0 && cp <= 0xfdef) || (cp & 0xfffe) == 0xfffe;
}

size_t ck_utf8_next(const char *str, size_t n, unsigned *cp)
{
    return n ? utf8_seq((const unsigned char *)str, n, cp) : 0;
}

char *ck_text_utf8_clean(const char *str, size_t n, size_t *replaced)
{
    /* each replaced byte becomes 3 bytes (U+FFFD) at most */
    if (n > ((size_t)-1) / 3 - 1)
        return NULL;
    char *out = malloc(n * 3 + 1);
    if (!out)
        return NULL;
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, k = 0, rep = 0;
    while (i < n) {
        unsigned cp = 0;
        size_t sl = utf8_seq(s + i, n - i, &cp);
        if (sl == 0 || ck_text_is_noncharacter(cp)) {
            memcpy(out + k, "\xef\xbf\xbd", 3); /* U+FFFD REPLACEMENT CHARACTER */
            k += 3;
            i += sl ? sl : 1;
            rep++;
            continue;
        }
        memcpy(out + k, s + i, sl);
        k += sl;
        i += sl;
    }
    out[k] = '\0';
    if (replaced)
        *replaced = rep;
    return out;
}

bool ck_text_utf8_needs_clean(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        unsigned cp = 0;
        size_t sl = utf8_seq(s + i, n - i, &cp);
        if (sl == 0 || ck_text_is_noncharacter(cp))
            return true;
        i += sl;
    }
    return false;
}

const char *ck_text_escape(const char *str, char *out, size_t n)
{
    if (!out || n == 0)
        return "";
    out[0] = '\0';
    if (!str)
        return out;
    const unsigned char *s = (const unsigned char *)str;
    size_t len = strlen(str), k = 0, i = 0;
    while (i < len) {
        char piece[16];
        size_t plen;
        unsigned cp = 0;
        size_t sl = utf8_seq(s + i, len - i, &cp);
        if (sl == 0) {
            plen = (size_t)snprintf(piece, sizeof piece, "\\x%02x", s[i]);
            sl = 1;
        } else if (cp == '\n') {
            plen = 2, memcpy(piece, "\\n", 2);
        } else if (cp == '\t') {
            plen = 2, memcpy(piece, "\\t", 2);
        } else if (cp == '\r') {
            plen = 2, memcpy(piece, "\\r", 2);
        } else if (cp == 0x1b) {
            plen = 2, memcpy(piece, "\\e", 2);
        } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
            plen = (size_t)snprintf(piece, sizeof piece, "\\x%02x", cp);
        } else if (cp == ':' && i > 0 && s[i - 1] == ':') {
            /* "::" never reaches a terminal from user text: a line beginning with it is a
             * GitHub workflow command (wrapped output can start a line anywhere) */
            plen = 4, memcpy(piece, "\\x3a", 4);
        } else if (ck_text_is_noncharacter(cp)) {
            plen = (size_t)snprintf(piece, sizeof piece, "\\u%04x", cp);
        } else {
            plen = sl;
            memcpy(piece, s + i, sl);
        }
        if (k + plen + 1 > n) {
            /* cut: "..." where it fits */
            size_t keep = n > 4 ? n - 4 : 0;
            if (k > keep)
                k = keep;
            /* never end inside a multi-byte sequence */
            while (k > 0 && ((unsigned char)out[k] & 0xc0) == 0x80)
                k--;
            if (n > 4)
                memcpy(out + k, "...", 3), k += 3;
            out[k] = '\0';
            return out;
        }
        memcpy(out + k, piece, plen);
        k += plen;
        i += sl;
    }
    out[k] = '\0';
    return out;
}

bool ck_text_needs_escape(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t len = str ? strlen(str) : 0;
    for (size_t i = 0; i < len;) {
        unsigned cp = 0;
        size_t sl = utf8_seq(s + i, len - i, &cp);
        if (sl == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) ||
            ck_text_is_noncharacter(cp) || (cp == ':' && i > 0 && s[i - 1] == ':'))
            return true;
        i += sl;
    }
    return false;
}

size_t ck_utf8_invalid_at(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (n - i < len)
            return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += len;
    }
    return n;
}
