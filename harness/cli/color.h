/* Colour on a terminal: PASS green, FAIL red, ERROR/SKIP yellow at the start of a line.
 * On when stdout is a TTY, off with NO_COLOR (any value) or --color never. */
#ifndef CK_COLOR_H
#define CK_COLOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* "auto", "always", "never"; false for anything else. */
bool ck_cli_color_parse(const char *when);
bool ck_cli_color_on(FILE *f);
/* Writes text to f, colouring the status word that starts a line when colour is on, and
 * wrapping a line wider than 80 columns at its last space before column 80 (the rest
 * continues indented by four more spaces than the line). */
void ck_cli_color_write(FILE *f, const char *text, size_t n);

#endif
