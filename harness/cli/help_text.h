/* Help and listing text at 80 columns: a line wider than that breaks at its last space
 * before column 80 and continues at the line's description column (the text after the
 * first run of two spaces, as in "  --steps N   description", or after "options: "), so
 * option tables stay tables. Columns count UTF-8 characters, not bytes. */
#ifndef CK_HELP_TEXT_H
#define CK_HELP_TEXT_H

#include <stdio.h>

#define CK_HELP_WIDTH 80

void ck_cli_write_help(FILE *f, const char *text);

#endif
