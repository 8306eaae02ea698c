/*
 * Inline SVG charts for the HTML page (html.c), drawn by hand: no library, no script. Each
 * chart is an <svg class="ck-chart" data-points="N"> so a test can check it has data.
 */
#ifndef CK_SVG_H
#define CK_SVG_H

#include <stdbool.h>

#include "reports/strbuf.h"

typedef struct {
    const char *name;   /* legend */
    const double *x, *y;
    int n;
    const char *color;
    bool mark_peak;     /* circle and label the largest y */
} ck_svg_series;

typedef struct {
    const char *title, *xlabel, *ylabel;
    bool y_bytes;       /* y axis ticks as KiB/MiB */
} ck_svg_axes;

/* Lines through each series' points (x ascending). */
void ck_svg_line_chart(ck_strbuf *b, const ck_svg_axes *ax, const ck_svg_series *s, int ns);

/* One point per category on a log y axis, with the bound (y = 1) drawn as a line: points
 * above it red, the worst point ringed and named. y <= 0 sits on the floor ("identical").
 * kinds[i] picks the colour (grad, param, buffer, loss). */
void ck_svg_bound_chart(ck_strbuf *b, const char *title, const char *const *labels,
                        const char *const *kinds, const double *y, int n);

#endif
