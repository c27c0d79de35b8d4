/* tgc_plot (include/tgc.h), `tgc plot LOG.jsonl -o PLOT.svg`'s work: a
 * run's log drawn as SVG by tgc itself (docs/tools.md). The log is runtime/io/log.c's JSON lines, one flat object
 * per logged step: "step", "loss", "lr", ... and, where a validation ran,
 * "val_loss"; non-finite numbers are null and leave a gap (no point). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "runtime/plan.h"
#include "support/file.h"
#include "support/util.h"

/* One series: (step, value) per line that has the value. */
typedef struct plot_series {
    double *x, *y;
    int n, cap;
} plot_series;

static void series_add(plot_series *s, double x, double y)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->x = xrealloc(s->x, (size_t)s->cap * sizeof *s->x);
        s->y = xrealloc(s->y, (size_t)s->cap * sizeof *s->y);
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

static void series_free(plot_series *s)
{
    free(s->x);
    free(s->y);
}

/* ---- the log ---------------------------------------------------------------- */

typedef struct plot_line {
    const char *s; /* the line, NUL-terminated */
    size_t i;
    const char *err;
} plot_line;

static void pl_ws(plot_line *l)
{
    while (l->s[l->i] == ' ' || l->s[l->i] == '\t' || l->s[l->i] == '\r') l->i++;
}

/* A JSON string (escapes kept as they are: keys are plain). */
static bool pl_string(plot_line *l, const char **start, size_t *len)
{
    if (l->s[l->i] != '"') { l->err = "expected a string"; return false; }
    *start = l->s + ++l->i;
    while (l->s[l->i] && l->s[l->i] != '"') l->i += l->s[l->i] == '\\' && l->s[l->i + 1] ? 2 : 1;
    if (!l->s[l->i]) { l->err = "unterminated string"; return false; }
    *len = (size_t)(l->s + l->i - *start);
    l->i++;
    return true;
}

/* A value: a number (*v), null (NAN), true/false, or a string (NAN). */
static bool pl_value(plot_line *l, double *v, bool *number)
{
    const char *s = l->s + l->i, *tmp;
    size_t n;
    *number = false;
    *v = NAN;
    if (*s == '"') return pl_string(l, &tmp, &n);
    for (const char *const *w = (const char *const[]){"null", "true", "false", NULL}; *w; w++)
        if (strncmp(s, *w, strlen(*w)) == 0) { l->i += strlen(*w); return true; }
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || (*s != '-' && (*s < '0' || *s > '9'))) {
        l->err = "expected a number, null, true, false or a string";
        return false;
    }
    l->i += (size_t)(end - s);
    *v = d;
    *number = true;
    return true;
}

typedef struct plot_data {
    plot_series loss, val, lr;
    int steps;
} plot_data;

/* One line: a flat JSON object with a numeric "step". */
static bool plot_parse_line(const char *text, plot_data *pd, const char **err)
{
    plot_line l = {text, 0, NULL};
    double step = NAN, loss = NAN, val = NAN, lr = NAN;
    bool has_step = false;
    pl_ws(&l);
    if (l.s[l.i] != '{') { *err = "expected '{': each line is a JSON object"; return false; }
    l.i++;
    pl_ws(&l);
    for (bool first = true; l.s[l.i] != '}'; first = false) {
        const char *key;
        size_t klen;
        double v;
        bool num;
        if (!first) {
            if (l.s[l.i] != ',') { *err = "expected ',' or '}'"; return false; }
            l.i++;
            pl_ws(&l);
        }
        if (!pl_string(&l, &key, &klen)) break;
        pl_ws(&l);
        if (l.s[l.i] != ':') { l.err = "expected ':'"; break; }
        l.i++;
        pl_ws(&l);
        if (!pl_value(&l, &v, &num)) break;
        pl_ws(&l);
#define KEY(name) (klen == sizeof(name) - 1 && memcmp(key, name, klen) == 0)
        if (KEY("step")) { step = v; has_step = num; }
        else if (KEY("loss")) loss = v;
        else if (KEY("val_loss")) val = v;
        else if (KEY("lr")) lr = v;
#undef KEY
    }
    if (l.err) { *err = l.err; return false; }
    l.i++;
    pl_ws(&l);
    if (l.s[l.i]) { *err = "trailing characters after the object"; return false; }
    if (!has_step) { *err = "no numeric \"step\" in this line"; return false; }
    pd->steps++;
    if (isfinite(loss)) series_add(&pd->loss, step, loss);
    if (isfinite(val)) series_add(&pd->val, step, val);
    if (isfinite(lr)) series_add(&pd->lr, step, lr);
    return true;
}

static bool plot_read(const char *path, plot_data *pd, diag *d)
{
    size_t n;
    char why[256];
    char *text = file_read(path, FILE_LOG, &n, why, sizeof why);
    if (!text) {
        diag_error(d, (src_loc){.file = path}, "cannot read the log: %s", why);
        return false;
    }
    if (strlen(text) != n) {
        diag_error(d, (src_loc){.file = path}, "not a JSON-lines log: it holds a NUL byte");
        free(text);
        return false;
    }
    bool ok = true;
    int line = 0;
    for (char *at = text, *nl; ok && *at; at = nl ? nl + 1 : at + strlen(at)) {
        nl = strchr(at, '\n');
        if (nl) *nl = 0;
        line++;
        const char *err = NULL, *p = at;
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) continue; /* blank lines are allowed */
        if (!plot_parse_line(at, pd, &err)) {
            diag_error(d, (src_loc){.file = path, .line = line, .col = 1}, "malformed log line: %s", err);
            ok = false;
        }
    }
    free(text);
    if (ok && pd->steps == 0) {
        diag_error(d, (src_loc){.file = path}, "no steps logged (the log is empty)");
        ok = false;
    }
    return ok;
}

/* ---- drawing ------------------------------------------------------------------ */

enum { W = 800, H = 620, LEFT = 90, RIGHT = 30, TOP = 50 };

typedef struct plot_axis {
    double lo, hi, step; /* data range, rounded out to whole ticks */
} plot_axis;

/* A "nice" axis over [lo, hi] with about 5 ticks of 1, 2 or 5 x 10^k. */
static plot_axis axis_nice(double lo, double hi)
{
    if (!(hi > lo)) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1.0;
        lo -= pad;
        hi += pad;
    }
    double raw = (hi - lo) / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
    return (plot_axis){floor(lo / step) * step, ceil(hi / step) * step, step};
}

static void series_range(const plot_series *s, double *lo, double *hi, bool x)
{
    for (int i = 0; i < s->n; i++) {
        double v = x ? s->x[i] : s->y[i];
        if (v < *lo) *lo = v;
        if (v > *hi) *hi = v;
    }
}

static void svg_text(strbuf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': sb_puts(b, "&amp;"); break;
        case '<': sb_puts(b, "&lt;"); break;
        case '>': sb_puts(b, "&gt;"); break;
        case '"': sb_puts(b, "&quot;"); break;
        case '\'': sb_puts(b, "&apos;"); break;
        default:
            /* XML 1.0 allows no control characters but tab/newline. */
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n') sb_putc(b, *s);
        }
    }
}

typedef struct plot_panel {
    double y0, y1; /* pixel rows, top and bottom */
    plot_axis ax, ay;
} plot_panel;

/* Data to pixels. */
static double px(const plot_panel *p, double x)
{
    return LEFT + (x - p->ax.lo) / (p->ax.hi - p->ax.lo) * (W - LEFT - RIGHT);
}

static double py(const plot_panel *p, double y)
{
    return p->y1 - (y - p->ay.lo) / (p->ay.hi - p->ay.lo) * (p->y1 - p->y0);
}

/* The frame, ticks with labels and grid lines, and the axis labels. */
static void svg_axes(strbuf *b, const plot_panel *p, const char *ylabel)
{
    for (int i = 0; i <= 1000; i++) {
        double v = p->ax.lo + i * p->ax.step;
        if (v > p->ax.hi + p->ax.step * 1e-6) break;
        sb_printf(b, "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                     "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%g</text>\n",
                  px(p, v), p->y0, px(p, v), p->y1, px(p, v), p->y1 + 15, fabs(v) < p->ax.step * 1e-9 ? 0.0 : v);
    }
    for (int i = 0; i <= 1000; i++) {
        double v = p->ay.lo + i * p->ay.step;
        if (v > p->ay.hi + p->ay.step * 1e-6) break;
        sb_printf(b, "<line class=\"tick\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                     "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%.4g</text>\n",
                  LEFT, py(p, v), W - RIGHT, py(p, v), LEFT - 6, py(p, v) + 4, fabs(v) < p->ay.step * 1e-9 ? 0.0 : v);
    }
    sb_printf(b, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" stroke=\"#000\"/>\n", LEFT,
              p->y0, W - LEFT - RIGHT, p->y1 - p->y0);
    sb_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">step</text>\n",
              LEFT + (W - LEFT - RIGHT) / 2, p->y1 + 32);
    sb_printf(b, "<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 20 %.1f)\">",
              (p->y0 + p->y1) / 2, (p->y0 + p->y1) / 2);
    svg_text(b, ylabel);
    sb_puts(b, "</text>\n");
}

static void svg_polyline(strbuf *b, const plot_panel *p, const plot_series *s, const char *id, const char *color)
{
    if (!s->n) return;
    sb_printf(b, "<polyline id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", id, color);
    for (int i = 0; i < s->n; i++) sb_printf(b, "%s%.2f,%.2f", i ? " " : "", px(p, s->x[i]), py(p, s->y[i]));
    sb_puts(b, "\"/>\n");
}

static void svg_legend(strbuf *b, double x, double y, int k, const char *color, const char *label)
{
    sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
                 "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">",
              x, y + 16 * k, x + 24, y + 16 * k, color, x + 30, y + 16 * k + 4);
    svg_text(b, label);
    sb_puts(b, "</text>\n");
}

static char *plot_svg(const plot_data *pd, const char *title)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY, llo = INFINITY, lhi = -INFINITY;
    series_range(&pd->loss, &xlo, &xhi, true);
    series_range(&pd->val, &xlo, &xhi, true);
    series_range(&pd->lr, &xlo, &xhi, true);
    series_range(&pd->loss, &ylo, &yhi, false);
    series_range(&pd->val, &ylo, &yhi, false);
    series_range(&pd->lr, &llo, &lhi, false);
    if (!(xlo <= xhi)) xlo = xhi = 0; /* nothing finite at all */
    if (!(ylo <= yhi)) ylo = yhi = 0;
    if (!(llo <= lhi)) llo = lhi = 0;
    plot_panel loss = {TOP + 10, 350, axis_nice(xlo, xhi), axis_nice(ylo, yhi)};
    plot_panel lr = {400, H - 50, loss.ax, axis_nice(llo, lhi)};
    strbuf b;
    sb_init(&b);
    sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                  "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
                  "<text x=\"%d\" y=\"30\" text-anchor=\"middle\" font-size=\"16\">", W, H, W, H, W / 2);
    svg_text(&b, title);
    sb_puts(&b, "</text>\n<g id=\"loss-panel\">\n");
    svg_axes(&b, &loss, "loss");
    svg_polyline(&b, &loss, &pd->loss, "train-loss", "#1f77b4");
    svg_polyline(&b, &loss, &pd->val, "val-loss", "#ff7f0e");
    svg_legend(&b, W - RIGHT - 170, loss.y0 + 16, 0, "#1f77b4", "training loss");
    if (pd->val.n) svg_legend(&b, W - RIGHT - 170, loss.y0 + 16, 1, "#ff7f0e", "validation loss");
    sb_puts(&b, "</g>\n<g id=\"lr-panel\">\n");
    svg_axes(&b, &lr, "learning rate");
    svg_polyline(&b, &lr, &pd->lr, "lr", "#2ca02c");
    svg_legend(&b, W - RIGHT - 170, lr.y0 + 16, 0, "#2ca02c", "learning rate");
    sb_puts(&b, "</g>\n</svg>\n");
    return b.s;
}

tgc_status tgc_plot(const char *log, const char *out, const char *title, tgc_plot_info *info)
{
    if (info) memset(info, 0, sizeof *info);
    api_call a;
    api_call_begin(&a);
    if (!log || !out) {
        fprintf(a.f, "tgc: error: tgc_plot: log and out must be given\n");
        return api_call_end(&a, TGC_EINVAL);
    }
    plot_data pd = {0};
    bool ok = plot_read(log, &pd, &a.d);
    if (ok) {
        strbuf t;
        sb_init(&t);
        if (title) sb_puts(&t, title);
        else sb_printf(&t, "%s: %d steps", log, pd.steps);
        char *svg = plot_svg(&pd, t.s);
        if (strcmp(out, "-") == 0) ok = fputs(svg, stdout) >= 0 && fflush(stdout) == 0;
        else ok = rt_write_atomic(out, svg, strlen(svg), &a.d);
        if (ok && info) *info = (tgc_plot_info){pd.steps, pd.loss.n, pd.val.n, pd.lr.n};
        free(svg);
        sb_free(&t);
    }
    series_free(&pd.loss);
    series_free(&pd.val);
    series_free(&pd.lr);
    return api_call_end(&a, ok ? TGC_OK : TGC_ERROR);
}
