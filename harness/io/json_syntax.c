/* Strict JSON syntax (json_syntax.h). */
#include "harness/io/json_syntax.h"

#include <string.h>

#include "harness/core/text.h"

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* ---------------------------------------------------------------------------------------
 * The syntax gate (json_strict.h)
 * --------------------------------------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t n, i;
    const char *why;
} jscan;

enum { JSON_MAX_DEPTH = 512 };

static bool jfail(jscan *j, const char *why)
{
    if (!j->why)
        j->why = why;
    return false;
}

static void jskip(jscan *j)
{
    while (j->i < j->n && is_space(j->s[j->i]))
        j->i++;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int hex4(const char *p)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static bool jstring(jscan *j)
{
    j->i++; /* the opening quote */
    while (j->i < j->n) {
        unsigned char c = (unsigned char)j->s[j->i];
        if (c == '"') {
            j->i++;
            return true;
        }
        if (c < 0x20)
            return jfail(j, "a raw control character in a string (write it as an escape)");
        if (c != '\\') {
            j->i++;
            continue;
        }
        if (j->i + 1 >= j->n)
            break;
        char e = j->s[j->i + 1];
        if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
            e == 't') {
            j->i += 2;
            continue;
        }
        if (e != 'u')
            return jfail(j, "an unknown escape in a string");
        int v = j->i + 6 <= j->n ? hex4(j->s + j->i + 2) : -1;
        if (v < 0)
            return jfail(j, "a \\u escape needs four hex digits");
        if (v == 0)
            return jfail(j, "a string holds \\u0000");
        if (v >= 0xdc00 && v <= 0xdfff)
            return jfail(j, "an unpaired surrogate escape in a string");
        if (v >= 0xd800 && v <= 0xdbff) {
            int w = j->i + 12 <= j->n && j->s[j->i + 6] == '\\' && j->s[j->i + 7] == 'u'
                        ? hex4(j->s + j->i + 8)
                        : -1;
            if (w < 0xdc00 || w > 0xdfff)
                return jfail(j, "an unpaired surrogate escape in a string");
            j->i += 12;
            continue;
        }
        j->i += 6;
    }
    return jfail(j, "an unterminated string");
}

static bool jnumber(jscan *j)
{
    const char *s = j->s;
    size_t start = j->i;
    if (j->i < j->n && s[j->i] == '-')
        j->i++;
    if (j->i >= j->n || !is_digit(s[j->i])) {
        j->i = start;
        return jfail(j, "malformed JSON");
    }
    if (s[j->i] == '0') {
        j->i++;
        if (j->i < j->n && is_digit(s[j->i]))
            return jfail(j, "a number with a leading zero");
    } else {
        while (j->i < j->n && is_digit(s[j->i]))
            j->i++;
    }
    if (j->i < j->n && s[j->i] == '.') {
        j->i++;
        if (j->i >= j->n || !is_digit(s[j->i]))
            return jfail(j, "a number needs digits after its decimal point");
        while (j->i < j->n && is_digit(s[j->i]))
            j->i++;
    }
    if (j->i < j->n && (s[j->i] == 'e' || s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (s[j->i] == '+' || s[j->i] == '-'))
            j->i++;
        if (j->i >= j->n || !is_digit(s[j->i]))
            return jfail(j, "a number needs digits in its exponent");
        while (j->i < j->n && is_digit(s[j->i]))
            j->i++;
    }
    return true;
}

static bool jliteral(jscan *j, const char *word)
{
    size_t m = strlen(word);
    if (j->n - j->i < m || memcmp(j->s + j->i, word, m) != 0)
        return jfail(j, "malformed JSON");
    j->i += m;
    return true;
}

static bool jvalue(jscan *j, int depth)
{
    jskip(j);
    if (j->i >= j->n)
        return jfail(j, "malformed JSON");
    char c = j->s[j->i];
    if (c == '{' || c == '[') {
        if (depth >= JSON_MAX_DEPTH)
            return jfail(j, "nested too deeply");
        char close = c == '{' ? '}' : ']';
        j->i++;
        jskip(j);
        if (j->i < j->n && j->s[j->i] == close) {
            j->i++;
            return true;
        }
        for (;;) {
            if (c == '{') {
                jskip(j);
                if (j->i >= j->n || j->s[j->i] != '"')
                    return jfail(j, "malformed JSON");
                if (!jstring(j))
                    return false;
                jskip(j);
                if (j->i >= j->n || j->s[j->i] != ':')
                    return jfail(j, "malformed JSON");
                j->i++;
            }
            if (!jvalue(j, depth + 1))
                return false;
            jskip(j);
            if (j->i < j->n && j->s[j->i] == ',') {
                j->i++;
                continue;
            }
            if (j->i < j->n && j->s[j->i] == close) {
                j->i++;
                return true;
            }
            return jfail(j, "malformed JSON");
        }
    }
    if (c == '"')
        return jstring(j);
    if (c == '-' || is_digit(c))
        return jnumber(j);
    if (c == 't')
        return jliteral(j, "true");
    if (c == 'f')
        return jliteral(j, "false");
    if (c == 'n')
        return jliteral(j, "null");
    return jfail(j, "malformed JSON");
}

bool ck_json_syntax_ok(const char *text, size_t len, size_t *offset, const char **why)
{
    const void *nul = memchr(text, '\0', len);
    if (nul) {
        *offset = (size_t)((const char *)nul - text);
        *why = "contains a NUL byte";
        return false;
    }
    size_t bad = ck_utf8_invalid_at(text, len);
    if (bad < len) {
        *offset = bad;
        *why = "not valid UTF-8";
        return false;
    }
    jscan j = {text, len, 0, NULL};
    if (!jvalue(&j, 0)) {
        *offset = j.i;
        *why = j.why ? j.why : "malformed JSON";
        return false;
    }
    jskip(&j);
    if (j.i < len) {
        *offset = j.i;
        *why = "unexpected text after the JSON value";
        return false;
    }
    return true;
}

