/* Help and listing text wrapped at 80 columns (help_text.h). */
#include "harness/cli/help_text.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Columns of s[0, n): UTF-8 continuation bytes take none. */
static size_t columns(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* The byte offset where len bytes of s reach `cols` columns (len when they never do). */
static size_t byte_at_column(const char *s, size_t len, size_t cols)
{
    size_t c = 0, i = 0;
    for (; i < len; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == cols)
                return i;
            c++;
        }
    }
    return len;
}

/* Where a wrapped line's continuation starts (in columns). */
static size_t hang_of(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len && s[i] == ' ')
        i++;
    size_t indent = i;
    if (len - i > 9 && strncmp(s + i, "options: ", 9) == 0)
        return columns(s, i + 9);
    for (size_t j = i; j + 1 < len && j < 48; j++)
        if (s[j] == ' ' && s[j + 1] == ' ') {
            while (j < len && s[j] == ' ')
                j++;
            return columns(s, j);
        }
    if (i < len && s[i] == '-') { /* an option as wide as its column: "--long-name text" */
        const char *sp = memchr(s + i, ' ', len - i);
        if (sp && (size_t)(sp - s) < 48)
            return columns(s, (size_t)(sp - s) + 1);
    }
    return indent + 4;
}

static void write_line(FILE *f, const char *s, size_t len, size_t hang)
{
    size_t lead = 0;
    if (hang > CK_HELP_WIDTH / 2)
        hang = CK_HELP_WIDTH / 2;
    for (;;) {
        size_t room = CK_HELP_WIDTH - lead;
        if (columns(s, len) <= room) {
            fprintf(f, "%*s%.*s\n", (int)lead, "", (int)len, s);
            return;
        }
        size_t cut = byte_at_column(s, len, room);
        size_t floor_at = lead == 0 ? byte_at_column(s, len, hang) : 0;
        while (cut > floor_at && s[cut] != ' ')
            cut--;
        if (cut <= floor_at) { /* one word wider than the room: break after it */
            cut = byte_at_column(s, len, room);
            while (cut < len && s[cut] != ' ')
                cut++;
        }
        size_t end = cut;
        while (end > 0 && s[end - 1] == ' ')
            end--;
        fprintf(f, "%*s%.*s\n", (int)lead, "", (int)end, s);
        while (cut < len && s[cut] == ' ')
            cut++;
        if (cut >= len)
            return;
        s += cut;
        len -= cut;
        lead = hang;
    }
}

static bool has_double_space(const char *s, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++)
        if (s[i] == ' ' && s[i + 1] == ' ')
            return true;
    return false;
}

static size_t leading_spaces(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len && s[i] == ' ')
        i++;
    return i;
}

/* Lines the text already continues at a paragraph's description column are joined to it
 * before wrapping, so hand-wrapped help reflows instead of leaving short lines. */
void ck_cli_write_help(FILE *f, const char *text)
{
    size_t total = strlen(text);
    char *para = malloc(total + 1);
    while (*text) {
        const char *nl = strchr(text, '\n');
        size_t len = nl ? (size_t)(nl - text) : strlen(text);
        text += nl ? len + 1 : len;
        if (!para) { /* out of memory: each line wrapped alone */
            write_line(f, text - (nl ? len + 1 : len), len, hang_of(text - (nl ? len + 1 : len), len));
            continue;
        }
        memcpy(para, text - (nl ? len + 1 : len), len);
        size_t plen = len, hang = hang_of(para, plen), indent = leading_spaces(para, plen);
        bool option = indent < plen && para[indent] == '-';
        /* prose: a paragraph at column 0 without a table's double space reflows whole */
        bool prose = indent == 0 && plen > 0 && !has_double_space(para, plen);
        if (prose)
            hang = 0;
        bool joined = false;
        while (*text && (hang > 0 || prose)) {
            const char *nl2 = strchr(text, '\n');
            size_t l2 = nl2 ? (size_t)(nl2 - text) : strlen(text);
            size_t lead = leading_spaces(text, l2);
            /* an option's continuation: any deeper line that is not an option itself */
            bool cont = prose    ? lead == 0 && l2 > 0 && !has_double_space(text, l2)
                        : option ? lead > indent && lead < l2 && text[lead] != '-'
                                 : lead == hang;
            if (!cont || lead == l2 ||
                (l2 - lead >= 9 && strncmp(text + lead, "options: ", 9) == 0))
                break;
            if (option && !joined)
                hang = lead; /* the column the author continued at */
            joined = true;
            para[plen++] = ' ';
            memcpy(para + plen, text + lead, l2 - lead);
            plen += l2 - lead;
            text += nl2 ? l2 + 1 : l2;
        }
        write_line(f, para, plen, hang);
    }
    free(para);
}
