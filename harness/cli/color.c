/* Terminal colour (color.h). */
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
        bool done = false;
        for (size_t w = 0; on && w < sizeof words / sizeof words[0] && !done; w++) {
            size_t wl = strlen(words[w].word);
            if (len > wl && strncmp(text + i, words[w].word, wl) == 0 && text[i + wl] == ' ') {
                fprintf(f, "%s\033[1m%s\033[0m", words[w].code, words[w].word);
                fwrite(text + i + wl, 1, len - wl, f);
                done = true;
            }
        }
        if (!done)
            fwrite(text + i, 1, len, f);
        i += len;
    }
}
