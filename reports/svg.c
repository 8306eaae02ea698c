/* The SVG charts (svg.h). */
#include "reports/svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "reports/report.h"

enum { W = 720, L = 70, R = 20, T = 30 };
/* the height and bottom margin of the chart being drawn (the bound chart is taller: its
 * tensor names stand below it) */
static int H = 260, B = 50;

static double px(double v, double lo, double hi) { return L + (v - lo) / (hi - lo) * (W - L - R); }
static double py(double v, double lo, double hi) { return H - B - (v - lo) / (hi - lo) * (H - T - B); }

static void frame(ck_strbuf *b, const char *title, int points)
{
    ck_sb_addf(b, "<svg class=\"ck-chart\" data-points=\"%d\" xmlns=\"http://www.w3.org/2000/svg\" "
                  "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n", points, W, H, W, H);
    ck_sb_add(b, "<title>");
    ck_sb_add_xml(b, title);
    ck_sb_add(b, "</title>\n");
    ck_sb_addf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fff\" stroke=\"#999\"/>\n",
               L, T, W - L - R, H - T - B);
    ck_sb_addf(b, "<text x=\"%d\" y=\"18\" font-size=\"13\" font-weight=\"bold\">", L);
    ck_sb_add_xml(b, title);
    ck_sb_add(b, "</text>\n");
}

static void tick_label(char *buf, size_t n, double v, bool bytes)
{
    if (bytes)
        ck_format_bytes((int64_t)llround(v), buf, n);
    else
        snprintf(buf, n, "%.4g", v);
}

void ck_svg_line_chart(ck_strbuf *b, const ck_svg_axes *ax, const ck_svg_series *s, int ns)
{
    H = 260;
    B = 50;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    int points = 0;
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i]))
                continue;
            xlo = fmin(xlo, s[k].x[i]);
            xhi = fmax(xhi, s[k].x[i]);
            ylo = fmin(ylo, s[k].y[i]);
            yhi = fmax(yhi, s[k].y[i]);
            points++;
        }
    frame(b, ax->title, points);
    if (points == 0) {
        ck_sb_add(b, "<text x=\"300\" y=\"130\">no data</text>\n</svg>\n");
        return;
    }
    if (ax->y_bytes)
        ylo = 0.0;
    if (xhi <= xlo)
        xhi = xlo + 1.0;
    if (yhi <= ylo) {
        double pad = fabs(yhi) > 0 ? fabs(yhi) * 0.05 : 1.0;
        ylo -= pad;
        yhi += pad;
    } else {
        yhi += (yhi - ylo) * 0.08;
    }
    /* 5 y ticks, 5 x ticks */
    for (int t = 0; t <= 4; t++) {
        double v = ylo + (yhi - ylo) * t / 4.0;
        char lab[32];
        tick_label(lab, sizeof lab, v, ax->y_bytes);
        ck_sb_addf(b, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                      "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%s</text>\n",
                   L, W - R, py(v, ylo, yhi), py(v, ylo, yhi), L - 4, py(v, ylo, yhi) + 3, lab);
        double xv = xlo + (xhi - xlo) * t / 4.0;
        if (xhi - xlo < 8 && xv != floor(xv))
            continue; /* steps: whole numbers only */
        ck_sb_addf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%.4g</text>\n",
                   px(xv, xlo, xhi), H - B + 14, xv);
    }
    ck_sb_addf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">", (L + W - R) / 2, H - 12);
    ck_sb_add_xml(b, ax->xlabel);
    ck_sb_addf(b, "</text><text x=\"12\" y=\"%d\" font-size=\"11\" transform=\"rotate(-90 12 %d)\" "
                  "text-anchor=\"middle\">", (T + H - B) / 2, (T + H - B) / 2);
    ck_sb_add_xml(b, ax->ylabel);
    ck_sb_add(b, "</text>\n");
    for (int k = 0; k < ns; k++) {
        ck_sb_addf(b, "<path class=\"ck-series\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" d=\"",
                   s[k].color, k == 0 ? "2.5" : "1.5");
        int peak = -1;
        bool first = true;
        for (int i = 0; i < s[k].n; i++) {
            if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i]))
                continue;
            ck_sb_addf(b, "%s%.1f %.1f ", first ? "M" : "L", px(s[k].x[i], xlo, xhi), py(s[k].y[i], ylo, yhi));
            first = false;
            if (peak < 0 || s[k].y[i] > s[k].y[peak])
                peak = i;
        }
        ck_sb_add(b, "\"/>\n");
        if (s[k].n == 1 && peak >= 0)
            ck_sb_addf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                       px(s[k].x[peak], xlo, xhi), py(s[k].y[peak], ylo, yhi), s[k].color);
        if (s[k].mark_peak && peak >= 0) {
            char lab[32];
            tick_label(lab, sizeof lab, s[k].y[peak], ax->y_bytes);
            double cx = px(s[k].x[peak], xlo, xhi), cy = py(s[k].y[peak], ylo, yhi);
            ck_sb_addf(b, "<circle class=\"ck-peak\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"none\" "
                          "stroke=\"%s\" stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                          "fill=\"%s\" text-anchor=\"%s\">peak %s</text>\n",
                       cx, cy, s[k].color, cx + (cx > W / 2 ? -8 : 8), cy - 6 - 12 * k, s[k].color,
                       cx > W / 2 ? "end" : "start", lab);
        }
        /* legend */
        ck_sb_addf(b, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"4\" fill=\"%s\"/>"
                      "<text x=\"%d\" y=\"%d\" font-size=\"11\">", W - R - 170, T + 8 + 14 * k, s[k].color,
                   W - R - 154, T + 13 + 14 * k);
        ck_sb_add_xml(b, s[k].name);
        ck_sb_add(b, "</text>\n");
    }
    ck_sb_add(b, "</svg>\n");
}

static const char *kind_color(const char *kind)
{
    if (!kind)
        return "#555";
    if (strcmp(kind, "grad") == 0)
        return "#1f77b4";
    if (strcmp(kind, "param") == 0)
        return "#2ca02c";
    if (strcmp(kind, "buffer") == 0)
        return "#9467bd";
    return "#555";
}

void ck_svg_bound_chart(ck_strbuf *b, const char *title, const char *const *labels,
                        const char *const *kinds, const double *y, int n)
{
    bool names = n <= 48;
    H = names ? 330 : 260;
    B = names ? 120 : 50;
    frame(b, title, n);
    if (n == 0) {
        ck_sb_add(b, "<text x=\"300\" y=\"130\">no tensors</text>\n</svg>\n");
        return;
    }
    /* log10 axis from the smallest nonzero ratio (at most 1e-8 below 1) to above the worst */
    double lo = 0.0, hi = 0.0;
    int worst = -1;
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (worst < 0 || y[i] > y[worst] || (isinf(y[i]) && !isinf(y[worst])))
            worst = i;
        if (y[i] > 0 && isfinite(y[i])) {
            double l = log10(y[i]);
            lo = any ? fmin(lo, l) : l;
            hi = any ? fmax(hi, l) : l;
            any = true;
        }
    }
    lo = floor(fmin(lo, -1.0)) - 1.0; /* the floor row holds identical tensors */
    if (lo < -12)
        lo = -12;
    hi = ceil(fmax(hi, 0.0)) + 1.0;
    for (int e = (int)lo; e <= (int)hi; e++) {
        double yy = py(e, lo, hi);
        ck_sb_addf(b, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                      "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%s1e%d</text>\n",
                   L, W - R, yy, yy, L - 4, yy + 3, e == (int)lo ? "&#8804;" : "", e);
    }
    double by = py(0.0, lo, hi);
    ck_sb_addf(b, "<line class=\"ck-bound\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                  "stroke-dasharray=\"6 3\"/><text x=\"%d\" y=\"%.1f\" font-size=\"10\" fill=\"#d62728\" "
                  "text-anchor=\"end\">bound (atol + rtol |ref|)</text>\n",
               L, W - R, by, by, W - R - 4, by - 4);
    ck_sb_addf(b, "<text x=\"12\" y=\"%d\" font-size=\"11\" transform=\"rotate(-90 12 %d)\" "
                  "text-anchor=\"middle\">error / bound</text>\n", (T + H - B) / 2, (T + H - B) / 2);
    for (int i = 0; i < n; i++) {
        double v = y[i] > 0 ? (isinf(y[i]) ? hi : fmax(log10(y[i]), lo)) : lo;
        double cx = L + (i + 0.5) * (double)(W - L - R) / n, cy = py(v, lo, hi);
        bool out = y[i] > 1.0;
        ck_sb_addf(b, "<circle class=\"ck-point%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\">"
                      "<title>", out ? " ck-outside" : "", cx, cy, n > 120 ? "2" : "3.5",
                   out ? "#d62728" : kind_color(kinds[i]));
        ck_sb_add_xml(b, labels[i]);
        ck_sb_addf(b, ": %.3g</title></circle>\n", y[i]);
        if (names) {
            ck_sb_addf(b, "<text class=\"ck-label\" x=\"%.1f\" y=\"%d\" font-size=\"9\" "
                          "text-anchor=\"end\" transform=\"rotate(-50 %.1f %d)\"%s>", cx, H - B + 12,
                       cx, H - B + 12, out ? " fill=\"#d62728\" font-weight=\"bold\"" : "");
            ck_sb_add_xml(b, labels[i]);
            ck_sb_add(b, "</text>\n");
        }
    }
    if (worst >= 0 && y[worst] > 0) {
        double v = isinf(y[worst]) ? hi : log10(y[worst]);
        double cx = L + (worst + 0.5) * (double)(W - L - R) / n, cy = py(v, lo, hi);
        ck_sb_addf(b, "<circle class=\"ck-worst\" cx=\"%.1f\" cy=\"%.1f\" r=\"8\" fill=\"none\" "
                      "stroke=\"#000\" stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                      "font-weight=\"bold\" text-anchor=\"%s\">worst: ",
                   cx, cy, cx + (cx > W / 2 ? -12 : 12), cy < T + 20 ? cy + 16 : cy - 10,
                   cx > W / 2 ? "end" : "start");
        ck_sb_add_xml(b, labels[worst]);
        ck_sb_addf(b, " (%.3g)</text>\n", y[worst]);
    }
    ck_sb_addf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">tensors in "
                  "record order; grad blue, param green, buffer purple, outside the bound red"
                  "</text>\n", (L + W - R) / 2, H - 4);
    ck_sb_add(b, "</svg>\n");
}
