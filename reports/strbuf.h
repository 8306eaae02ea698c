/*
 * A growing text buffer for the writers that build a whole document before writing it
 * atomically (JUnit, HTML, SVG, the Markdown step summary). Out of memory is remembered
 * and reported once, at the end.
 */
#ifndef CK_STRBUF_H
#define CK_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *s;
    size_t n, cap;
    bool failed;
} ck_strbuf;

void ck_sb_add(ck_strbuf *b, const char *text);
void ck_sb_addf(ck_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* text with &, <, >, " and ' escaped, and control characters other than tab and newline
 * dropped (XML 1.0 forbids them) */
void ck_sb_add_xml(ck_strbuf *b, const char *text);
void ck_sb_free(ck_strbuf *b);

#endif
