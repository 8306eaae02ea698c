/* Terminal colour and line wrapping of the text output (color.h). */
#include "harness/cli/color.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int mode; /* 0 auto, 1 always, 2 never */

bool ck_cli_color_parse(const char *when)
{
    if (strcmp(when, "auto") == 0)
        mode = 0;
    else if (strcmp(when, "always") == 0)
        mode = 1;
    else if (strcmp(when, "never") == 0)
        mode = 2;
    else
        return false;
    return true;
}

bool ck_cli_color_on(FILE *f)
{
    if (mode == 2)
        return false;
    const char *nc = getenv("NO_COLOR");
    if (nc && *nc)
        return false;
    return mode == 1 || isatty(fileno(f));
}

enum { WIDTH = 80 };

/* The last space at or before `room` past floor_at, preferring one outside parentheses
 * so that "(saving 75.4%)" stays on one line; floor_at when there is none. */
static size_t break_at(const char *s, size_t room, size_t floor_at)
{
    int depth = 0;
    size_t outside = floor_at, any = floor_at;
    for (size_t i = 0; i <= room; i++) {
        if (s[i] == ' ' && i > floor_at) {
            any = i;
            if (depth <= 0)
                outside = i;
        }
        depth += s[i] == '(';
        depth -= s[i] == ')';
    }
    /* a break outside parentheses unless it would leave under half the room used */
    return outside > floor_at && outside >= room / 2 ? outside : any;
}

/* One line (without its newline) in pieces of at most WIDTH columns where it has spaces;
 * its first `skip` bytes were already written (a coloured word). */
static void put_wrapped(FILE *f, const char *s, size_t len, size_t skip)
{
    size_t indent = 0;
    while (indent < len && s[indent] == ' ')
        indent++;
    bool first = true;
    while (len > 0) {
        size_t lead = first ? 0 : indent + 4;
        if (lead > WIDTH / 2)
            lead = WIDTH / 2;
        size_t room = WIDTH - lead, cut = len;
        if (len > room) {
            size_t floor_at = first ? indent : 0;
            cut = break_at(s, room, floor_at);
            if (cut <= floor_at)
                cut = len; /* no space to break at: leave it whole */
        }
        if (!first)
            fprintf(f, "%*s", (int)lead, "");
        size_t from = first ? (skip < cut ? skip : cut) : 0;
        fwrite(s + from, 1, cut - from, f);
        fputc('\n', f);
        while (cut < len && s[cut] == ' ')
            cut++;
        s += cut;
        len -= cut;
        first = false;
    }
}

void ck_cli_color_write(FILE *f, const char *text, size_t n)
{
    static const struct {
        const char *word, *code;
    } words[] = {{"PASS", "\033[32m"}, {"FAIL", "\033[31m"}, {"ERROR", "\033[33m"}, {"SKIP", "\033[33m"}};
    bool on = ck_cli_color_on(f);
    size_t i = 0;
    while (i < n) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (text + i)) + 1 : n - i;
        size_t body = nl ? len - 1 : len, skip = 0;
        for (size_t w = 0; on && w < sizeof words / sizeof words[0] && !skip; w++) {
            size_t wl = strlen(words[w].word);
            if (body > wl && strncmp(text + i, words[w].word, wl) == 0 && text[i + wl] == ' ') {
                fprintf(f, "%s\033[1m%s\033[0m", words[w].code, words[w].word);
                skip = wl;
            }
        }
        if (body <= WIDTH || !nl)
            fwrite(text + i + skip, 1, len - skip, f);
        else
            put_wrapped(f, text + i, body, skip);
        i += len;
    }
}
