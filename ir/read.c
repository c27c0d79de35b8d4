/* The IR reader: a hand-written scanner over the text form (docs/ir.md).
 *
 * The text is read one line at a time, without recursion, and bounded by
 * `len` everywhere (it need not be NUL-terminated and may contain NULs).
 * Every problem is reported as `file:line:col: error: ...` at the offending
 * token and reading goes on with the next line, so one run lists every
 * error (up to the diag limit). A line that fails still defines its name,
 * marked "poisoned": its users are not checked further, so one mistake does
 * not cascade into errors on every line below it.
 *
 * Nodes are rebuilt exactly as printed (ir_node_alloc + ir_graph_append_raw:
 * no CSE, no renaming); the op's shape rule then runs on a scratch copy and
 * must give the printed type. A graph that reads without errors satisfies
 * every check of ir_graph_verify. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "support/util.h"

/* The largest tensor the text form accepts (2^48 elements): keeps element
 * counts and the arithmetic of shape and cost rules far from int64 overflow.
 * ir/verify.c checks the same bound. */
#define READ_MAX_NUMEL IR_MAX_NUMEL
#define READ_MAX_ATTRS 16  /* as ir.c's op table parser */
#define READ_SHOW 60       /* longest token quoted whole in a message */

typedef struct span {
    const char *s;
    size_t n;
} span;

/* Names defined in the file, by a first quick pass: tells "used before its
 * definition" apart from "undefined". Open addressing, power-of-two size. */
typedef struct def_entry {
    const char *s;
    size_t n;
    int line;
} def_entry;

typedef struct def_map {
    def_entry *slot;
    size_t cap;
} def_map;

typedef struct reader {
    ir_graph *g;
    const char *last_loc_file; /* the previous loc's file name, in g's arena */
    diag *d;
    const char *file; /* interned */
    const char *text, *text_end;
    const char *line, *p, *end; /* the current line, the cursor, its end */
    int lineno;
    int errors0;      /* d->nerrors on entry */
    bool header, model_seen, layers_seen, passes_seen;
    unsigned mem_seen; /* mem_size lines read, by ir_mem */
    int *node_line;   /* .ir line of each node, by id */
    int *mem_col;     /* column of its mem(...), by id */
    bool *poisoned;   /* by id */
    int side_cap;
    def_map defs;
    const ir_node *loss, *seed;
    ir_node **srcbuf; /* the operands of the current line */
    int srccap;
} reader;

/* What one node line says, before the node is built. */
typedef struct pending {
    span name;
    const char *name_at, *op_at, *type_at;
    ir_op op;
    int nsrc;         /* operands in r->srcbuf */
    bool src_poisoned; /* an operand is poisoned or undefined */
    ir_attr_val attrs[READ_MAX_ATTRS];
    ir_dtype dtype;
    ir_shape shape;
    unsigned flags;
    ir_shard shard;
    int stage, chunk;
    int fuse; /* fusion group, -1: none */
    ir_phase phase;
    int bucket; /* -1: none */
    ir_mem mem;
    int64_t mem_offset;
    const char *mem_at;
    src_loc loc;
    bool bad; /* a semantic error was reported; the syntax was fine */
} pending;

/* ---- errors ------------------------------------------------------------- */

static void rd_verror(reader *r, int line, int col, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    diag_error(r->d, (src_loc){r->file, line, col}, "%s", msg);
}

/* An error at `at` in the current line. */
static void rd_error(reader *r, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rd_error(reader *r, const char *at, const char *fmt, ...)
{
    va_list ap;
    if (!at || at < r->line || at > r->end) at = r->end;
    va_start(ap, fmt);
    rd_verror(r, r->lineno, (int)(at - r->line) + 1, fmt, ap);
    va_end(ap);
}

/* An error at an earlier line, found once the whole file is read. */
static void rd_error_at(reader *r, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void rd_error_at(reader *r, int line, int col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rd_verror(r, line, col, fmt, ap);
    va_end(ap);
}

static bool too_many_errors(const reader *r)
{
    return r->d->nerrors > r->errors0 && r->d->nerrors > r->d->max_errors;
}

/* printf arguments quoting a token: "%.*s%s", SHOW(sp). */
#define SHOW(sp) (int)((sp).n > READ_SHOW ? READ_SHOW : (sp).n), (sp).s, ((sp).n > READ_SHOW ? "..." : "")

/* ---- characters and tokens --------------------------------------------- */

static bool is_ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_name_char(int c) { return is_ident_start(c) || is_digit(c) || c == '.'; }
static bool is_word_char(int c) { return is_name_char(c) || c == '-' || c == '+'; }

static int peek(const reader *r) { return r->p < r->end ? (unsigned char)*r->p : -1; }

static void skip_ws(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r' || *r->p == '\v' || *r->p == '\f'))
        r->p++;
}

/* True at the end of the line or at a comment. */
static bool at_eol(reader *r)
{
    skip_ws(r);
    return r->p >= r->end || *r->p == '#';
}

static span scan_while(reader *r, bool (*ok)(int))
{
    span sp = {r->p, 0};
    while (r->p < r->end && ok((unsigned char)*r->p)) r->p++;
    sp.n = (size_t)(r->p - sp.s);
    return sp;
}

static span scan_ident(reader *r)
{
    if (!is_ident_start(peek(r))) return (span){r->p, 0};
    return scan_while(r, is_name_char);
}

static bool span_is(span sp, const char *s) { return strlen(s) == sp.n && memcmp(sp.s, s, sp.n) == 0; }

/* Copies a token into buf as a C string; false if it does not fit. */
static bool span_cstr(span sp, char *buf, size_t size)
{
    if (sp.n >= size) return false;
    memcpy(buf, sp.s, sp.n);
    buf[sp.n] = 0;
    return true;
}

/* Describes what the cursor is at, for "expected X, got Y". */
static void describe_here(reader *r, char *buf, size_t size)
{
    if (r->p >= r->end) { snprintf(buf, size, "end of line"); return; }
    int c = (unsigned char)*r->p;
    if (c == '#') snprintf(buf, size, "a comment");
    else if (c < 0x20 || c >= 0x7f) snprintf(buf, size, "byte 0x%02x", (unsigned)c);
    else if (is_word_char(c)) {
        const char *save = r->p;
        span w = scan_while(r, is_word_char);
        r->p = save;
        snprintf(buf, size, "'%.*s%s'", SHOW(w));
    } else snprintf(buf, size, "'%c'", c);
}

static bool expect_char(reader *r, char c, const char *what)
{
    skip_ws(r);
    if (peek(r) == (unsigned char)c) { r->p++; return true; }
    char got[128];
    describe_here(r, got, sizeof got);
    rd_error(r, r->p, "expected '%c' %s, got %s", c, what, got);
    return false;
}

static bool expect_eol(reader *r, const char *after)
{
    if (at_eol(r)) return true;
    char got[128];
    describe_here(r, got, sizeof got);
    rd_error(r, r->p, "unexpected %s after %s", got, after);
    return false;
}

/* ---- numbers ------------------------------------------------------------ */

typedef enum { NUM_OK, NUM_SYNTAX, NUM_RANGE } num_status;

static num_status span_to_i64(span w, int64_t *out)
{
    size_t i = 0;
    bool neg = w.n > 0 && w.s[0] == '-';
    if (w.n > 0 && (w.s[0] == '-' || w.s[0] == '+')) i++;
    if (i == w.n) return NUM_SYNTAX;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    bool range = false;
    for (; i < w.n; i++) {
        if (!is_digit((unsigned char)w.s[i])) return NUM_SYNTAX;
        unsigned dgt = (unsigned)(w.s[i] - '0');
        if (v > (lim - dgt) / 10) range = true;
        else v = v * 10 + dgt;
    }
    if (range) return NUM_RANGE;
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return NUM_OK;
}

/* Decimal floats as sb_put_double writes them, plus integers: [+-]digits
 * [.digits][e[+-]digits], inf, nan. Hex floats and the like are refused. */
static bool float_syntax_ok(span w)
{
    size_t i = 0;
    if (i < w.n && (w.s[i] == '-' || w.s[i] == '+')) i++;
    span rest = {w.s + i, w.n - i};
    if (span_is(rest, "inf") || span_is(rest, "nan")) return true;
    size_t digits = 0;
    while (i < w.n && is_digit((unsigned char)w.s[i])) i++, digits++;
    if (i < w.n && w.s[i] == '.')
        for (i++; i < w.n && is_digit((unsigned char)w.s[i]); i++) digits++;
    if (!digits) return false;
    if (i < w.n && (w.s[i] == 'e' || w.s[i] == 'E')) {
        i++;
        if (i < w.n && (w.s[i] == '-' || w.s[i] == '+')) i++;
        size_t exp = 0;
        while (i < w.n && is_digit((unsigned char)w.s[i])) i++, exp++;
        if (!exp) return false;
    }
    return i == w.n;
}

static num_status span_to_double(span w, double *out)
{
    char buf[128];
    if (!float_syntax_ok(w)) return NUM_SYNTAX;
    if (!span_cstr(w, buf, sizeof buf)) return NUM_RANGE;
    double v = strtod(buf, NULL);
    /* Underflow to a subnormal or zero is fine; overflow to inf is not. */
    if (isinf(v) && !strstr(buf, "inf")) return NUM_RANGE;
    *out = v;
    return NUM_OK;
}

/* Reads an integer word within [lo, hi]; reports and returns false if not. */
static bool read_int(reader *r, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    skip_ws(r);
    const char *at = r->p;
    span w = scan_while(r, is_word_char);
    if (!w.n) {
        char got[128];
        describe_here(r, got, sizeof got);
        rd_error(r, at, "expected %s, got %s", what, got);
        return false;
    }
    num_status st = span_to_i64(w, out);
    if (st == NUM_SYNTAX) rd_error(r, at, "expected %s, got '%.*s%s'", what, SHOW(w));
    else if (st == NUM_RANGE) rd_error(r, at, "integer '%.*s%s' is out of range", SHOW(w));
    else if (*out < lo || *out > hi)
        rd_error(r, at, "%s must be between %lld and %lld, got %lld", what, (long long)lo, (long long)hi,
                 (long long)*out);
    else return true;
    return false;
}

/* ---- strings ------------------------------------------------------------ */

static int hex_val(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One escape after a backslash, with the escapes sb_put_quoted writes. */
static bool read_escape(reader *r, strbuf *out)
{
    const char *at = r->p - 1;
    int c = peek(r);
    if (c < 0) { rd_error(r, at, "unterminated string"); return false; }
    r->p++;
    switch (c) {
    case '"': case '\\': sb_putc(out, (char)c); return true;
    case 'n': sb_putc(out, '\n'); return true;
    case 't': sb_putc(out, '\t'); return true;
    case 'x': {
        int hi = hex_val(peek(r)), lo = r->p + 1 < r->end ? hex_val((unsigned char)r->p[1]) : -1;
        if (hi < 0 || lo < 0) { rd_error(r, at, "'\\x' needs two hex digits"); return false; }
        r->p += 2;
        if (hi == 0 && lo == 0) { rd_error(r, at, "a string cannot contain a NUL character"); return false; }
        sb_putc(out, (char)(hi * 16 + lo));
        return true;
    }
    default:
        if (c >= 0x20 && c < 0x7f) rd_error(r, at, "unknown escape '\\%c' in string", c);
        else rd_error(r, at, "unknown escape in string (byte 0x%02x)", (unsigned)c);
        return false;
    }
}

/* A quoted string into out (a fresh strbuf; its text is out->s). */
static bool read_string(reader *r, strbuf *out)
{
    if (!expect_char(r, '"', "to open a string")) return false;
    const char *open = r->p - 1;
    sb_puts(out, "");
    while (r->p < r->end && *r->p != '"') {
        char c = *r->p++;
        if (c == '\\') {
            if (!read_escape(r, out)) return false;
        } else if (c == 0) {
            rd_error(r, r->p - 1, "a string cannot contain a NUL character");
            return false;
        } else {
            sb_putc(out, c);
        }
    }
    if (r->p >= r->end) { rd_error(r, open, "unterminated string"); return false; }
    r->p++;
    return true;
}

/* ---- the first pass: where each name is defined ------------------------- */

static uint64_t span_hash(span sp) { return hash_bytes(sp.s, sp.n, HASH_SEED); }

static def_entry *defs_slot(const def_map *m, span sp)
{
    size_t i = span_hash(sp) & (m->cap - 1);
    while (m->slot[i].s && !(m->slot[i].n == sp.n && memcmp(m->slot[i].s, sp.s, sp.n) == 0))
        i = (i + 1) & (m->cap - 1);
    return &m->slot[i];
}

static void defs_build(reader *r)
{
    size_t lines = 1;
    for (const char *q = r->text; q < r->text_end; q++) lines += *q == '\n';
    size_t cap = 16;
    while (cap < 2 * lines + 2) cap *= 2;
    r->defs.cap = cap;
    r->defs.slot = xcalloc(cap, sizeof *r->defs.slot);
    int lineno = 0;
    for (const char *q = r->text; q < r->text_end;) {
        const char *nl = memchr(q, '\n', (size_t)(r->text_end - q));
        const char *eol = nl ? nl : r->text_end;
        lineno++;
        while (q < eol && (*q == ' ' || *q == '\t')) q++;
        if (q < eol && *q == '%' && q + 1 < eol && is_ident_start((unsigned char)q[1])) {
            span sp = {q + 1, 1};
            while (q + 1 + sp.n < eol && is_name_char((unsigned char)q[1 + sp.n])) sp.n++;
            def_entry *e = defs_slot(&r->defs, sp);
            if (!e->s) *e = (def_entry){sp.s, sp.n, lineno};
        }
        q = nl ? nl + 1 : r->text_end;
    }
}

/* ---- side tables by node id -------------------------------------------- */

static void side_push(reader *r, int id, bool poisoned, int mem_col)
{
    if (id >= r->side_cap) {
        r->side_cap = r->side_cap ? r->side_cap * 2 : 256;
        r->node_line = xrealloc(r->node_line, (size_t)r->side_cap * sizeof *r->node_line);
        r->mem_col = xrealloc(r->mem_col, (size_t)r->side_cap * sizeof *r->mem_col);
        r->poisoned = xrealloc(r->poisoned, (size_t)r->side_cap * sizeof *r->poisoned);
    }
    r->node_line[id] = r->lineno;
    r->mem_col[id] = mem_col;
    r->poisoned[id] = poisoned;
}

/* ---- header lines ------------------------------------------------------- */

/* The first line that says anything must be `tgc-ir 1`. */
static bool read_version(reader *r)
{
    const char *at = r->p;
    static const char magic[] = "tgc-ir";
    size_t n = sizeof magic - 1;
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, magic, n) != 0 ||
        (r->p + n < r->end && is_word_char((unsigned char)r->p[n]))) {
        rd_error(r, at, "expected the header 'tgc-ir 1' (is this a tgc IR file?)");
        return false;
    }
    r->p += n;
    skip_ws(r);
    const char *vat = r->p;
    int64_t v;
    if (!read_int(r, "the IR version", INT64_MIN, INT64_MAX, &v)) return false;
    if (v != 1) {
        rd_error(r, vat, "unsupported IR version %lld (this tgc reads version 1)", (long long)v);
        return false;
    }
    r->header = true;
    expect_eol(r, "the header");
    return true;
}

static void read_model(reader *r, const char *kw_at)
{
    if (r->model_seen) { rd_error(r, kw_at, "the model name is given twice"); return; }
    r->model_seen = true;
    strbuf s;
    sb_init(&s);
    if (read_string(r, &s)) {
        r->g->model = arena_strdup(&r->g->mem, s.s);
        expect_eol(r, "the model name");
    }
    sb_free(&s);
}

static void read_hparam(reader *r)
{
    skip_ws(r);
    const char *at = r->p;
    span name = scan_ident(r);
    if (!name.n) { rd_error(r, at, "expected a hyperparameter name"); return; }
    if (!expect_char(r, '=', "after the hyperparameter name")) return;
    skip_ws(r);
    const char *vat = r->p;
    span w = scan_while(r, is_word_char);
    if (!w.n) {
        char got[128];
        describe_here(r, got, sizeof got);
        rd_error(r, vat, "expected a number, got %s", got);
        return;
    }
    int64_t i = 0;
    double f = 0;
    bool is_float = false;
    num_status st = span_to_i64(w, &i);
    if (st == NUM_SYNTAX) {
        is_float = true;
        st = span_to_double(w, &f);
    }
    if (st == NUM_SYNTAX) { rd_error(r, vat, "expected a number, got '%.*s%s'", SHOW(w)); return; }
    if (st == NUM_RANGE) { rd_error(r, vat, "number '%.*s%s' is out of range", SHOW(w)); return; }
    if (!expect_eol(r, "the hyperparameter's value")) return;
    for (int k = 0; k < r->g->nhparams; k++)
        if (span_is(name, r->g->hparams[k].name)) {
            rd_error(r, at, "hyperparameter '%.*s%s' is given twice", SHOW(name));
            return;
        }
    char *cname = arena_strndup(&r->g->mem, name.s, name.n);
    ir_graph_add_hparam(r->g, cname, is_float, i, f);
}

/* `mem_size KIND = BYTES`: the size of one buffer of the memory plan. */
static void read_mem_size(reader *r)
{
    skip_ws(r);
    const char *at = r->p;
    span kind = scan_ident(r);
    char name[16];
    ir_mem m;
    int64_t v;
    if (!span_cstr(kind, name, sizeof name) || !ir_mem_lookup(name, &m) || m == IR_MEM_NONE) {
        rd_error(r, at, "expected a buffer kind (input, param, grad, act, stash or cache) after 'mem_size'");
        return;
    }
    if (!expect_char(r, '=', "after the buffer kind") || !read_int(r, "a size in bytes", 0, INT64_MAX, &v))
        return;
    if (r->mem_seen & (1u << m)) {
        rd_error(r, at, "mem_size %s is given twice", name);
        return;
    }
    r->mem_seen |= 1u << m;
    r->g->mem_size[m] = v;
    expect_eol(r, "the buffer size");
}

/* precision bf16|f16: the storage of a mixed-precision training graph. */
static void read_precision(reader *r, const char *kw_at)
{
    skip_ws(r);
    const char *at = r->p;
    span w = scan_ident(r);
    char name[16] = "";
    if (w.n < sizeof name) memcpy(name, w.s, w.n), name[w.n] = 0;
    ir_dtype t;
    if (!ir_dtype_lookup(name, &t) || (t != IR_BF16 && t != IR_F16)) {
        rd_error(r, w.n ? at : kw_at, "precision: expected bf16 or f16");
        return;
    }
    r->g->precision = t;
    expect_eol(r, "precision");
}

static void read_num_layers(reader *r, const char *kw_at)
{
    int64_t v;
    if (r->layers_seen) { rd_error(r, kw_at, "num_layers is given twice"); return; }
    r->layers_seen = true;
    if (!read_int(r, "the number of layers", 0, INT_MAX, &v)) return;
    r->g->num_layers = (int)v;
    expect_eol(r, "num_layers");
}

/* ---- node lines: op, operands, attributes ------------------------------- */

/* Edit distance with adjacent transpositions (optimal string alignment):
 * "gleu" is one edit away from "gelu". */
static int edit_distance(const char *a, size_t na, const char *b, size_t nb)
{
    int rows[3][64];
    if (na >= 64 || nb >= 64) return 64;
    int *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= nb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            cur[j] = best;
        }
        int *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[nb];
}

/* " (did you mean 'a' or 'b'?)" for the ops close to w, or "". */
static void suggest_ops(span w, char *buf, size_t size)
{
    const char *close[4];
    int nclose = 0;
    int limit = w.n >= 5 ? 2 : 1;
    for (int op = 0; op < IR_OP_COUNT && nclose < 4; op++) {
        const char *name = ir_op_name((ir_op)op);
        if (edit_distance(w.s, w.n, name, strlen(name)) <= limit) close[nclose++] = name;
    }
    buf[0] = 0;
    if (!nclose) return;
    size_t len = (size_t)snprintf(buf, size, "; did you mean ");
    for (int i = 0; i < nclose && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s'%s'", i == 0 ? "" : i == nclose - 1 ? " or " : ", ",
                                close[i]);
    if (len < size) snprintf(buf + len, size - len, "?");
}

static bool read_op(reader *r, pending *pd)
{
    skip_ws(r);
    pd->op_at = r->p;
    span w = scan_ident(r);
    char name[64], hint[256];
    if (!w.n) {
        char got[128];
        describe_here(r, got, sizeof got);
        rd_error(r, pd->op_at, "expected an op name after '=', got %s", got);
        return false;
    }
    if (!span_cstr(w, name, sizeof name) || !ir_op_lookup(name, &pd->op)) {
        suggest_ops(w, hint, sizeof hint);
        rd_error(r, pd->op_at, "unknown op '%.*s%s'%s", SHOW(w), hint);
        return false;
    }
    const ir_op_info *info = ir_op_get(pd->op);
    TGC_ASSERT(info->nattrs <= READ_MAX_ATTRS);
    for (int i = 0; i < info->nattrs; i++)
        pd->attrs[i] = info->attrs[i].has_default ? info->attrs[i].def : (ir_attr_val){0};
    return true;
}

static ir_node *find_span(const reader *r, span sp)
{
    char buf[256];
    if (span_cstr(sp, buf, sizeof buf)) return ir_graph_find(r->g, buf);
    char *tmp = xmalloc(sp.n + 1);
    span_cstr(sp, tmp, sp.n + 1);
    ir_node *n = ir_graph_find(r->g, tmp);
    free(tmp);
    return n;
}

static void read_operand(reader *r, pending *pd)
{
    const char *at = r->p;
    r->p++; /* '%' */
    span name = scan_ident(r);
    ir_node *n = name.n ? find_span(r, name) : NULL;
    if (n) {
        if (r->poisoned[n->id]) pd->src_poisoned = true;
    } else {
        def_entry *e = defs_slot(&r->defs, name);
        if (e->s && e->line == r->lineno)
            rd_error(r, at, "'%%%.*s%s' is used in its own definition", SHOW(name));
        else if (e->s && e->line > r->lineno)
            rd_error(r, at, "'%%%.*s%s' is used before its definition on line %d (operands must come first)",
                     SHOW(name), e->line);
        else
            rd_error(r, at, "undefined value '%%%.*s%s'", SHOW(name));
        pd->src_poisoned = true;
    }
    if (pd->nsrc == r->srccap) {
        r->srccap = r->srccap ? 2 * r->srccap : 64;
        r->srcbuf = xrealloc(r->srcbuf, (size_t)r->srccap * sizeof *r->srcbuf);
    }
    r->srcbuf[pd->nsrc++] = n;
}

/* `(%a, %b, ...)`; the cursor is at '('. */
static bool read_operands(reader *r, pending *pd)
{
    r->p++;
    skip_ws(r);
    if (peek(r) == ')') { r->p++; return true; }
    for (;;) {
        skip_ws(r);
        if (peek(r) != '%' || r->p + 1 >= r->end || !is_ident_start((unsigned char)r->p[1])) {
            char got[128];
            describe_here(r, got, sizeof got);
            rd_error(r, r->p, "expected an operand '%%name', got %s", got);
            return false;
        }
        read_operand(r, pd);
        skip_ws(r);
        if (peek(r) == ')') { r->p++; return true; }
        if (!expect_char(r, ',', "or ')' between operands")) return false;
    }
}

static const char *kind_text(ir_attr_kind k)
{
    switch (k) {
    case IR_ATTR_INT: return "an int";
    case IR_ATTR_FLOAT: return "a float";
    case IR_ATTR_BOOL: return "true or false";
    case IR_ATTR_INTS: return "a list of ints like [0, 1]";
    default: return "a symbol";
    }
}

/* `[1, 2, 3]`; the cursor is at '['. */
static bool read_int_list(reader *r, pending *pd, const ir_attr_def *def, ir_attr_val *v)
{
    const char *open = r->p++;
    v->n = 0;
    skip_ws(r);
    if (peek(r) == ']') { r->p++; return true; }
    for (;;) {
        int64_t x;
        if (!read_int(r, "an int", INT64_MIN, INT64_MAX, &x)) return false;
        if (v->n == IR_MAX_INTS) {
            rd_error(r, open, "'%s' holds at most %d values", def->name, IR_MAX_INTS);
            pd->bad = true;
        }
        if (v->n < IR_MAX_INTS) v->ints[v->n++] = x;
        skip_ws(r);
        if (peek(r) == ']') { r->p++; return true; }
        if (!expect_char(r, ',', "or ']' in the list")) return false;
    }
}

static void sym_list(const ir_attr_def *def, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < def->nsyms && len < size; k++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", k == 0 ? "" : k == def->nsyms - 1 ? " or " : ", ",
                                def->syms[k]);
}

/* A word-valued attribute (everything but ints). False only on a syntax
 * error; a value of the wrong kind is reported and marks the line bad. */
static bool read_word_value(reader *r, pending *pd, const ir_attr_def *def, ir_attr_val *v)
{
    const char *op = ir_op_name(pd->op), *at = r->p;
    span w = scan_while(r, is_word_char);
    if (!w.n) {
        char got[128];
        describe_here(r, got, sizeof got);
        rd_error(r, at, "expected a value for '%s', got %s", def->name, got);
        return false;
    }
    num_status st = NUM_OK;
    switch (def->kind) {
    case IR_ATTR_INT: st = span_to_i64(w, &v->i); break;
    case IR_ATTR_FLOAT: st = span_to_double(w, &v->f); break;
    case IR_ATTR_BOOL:
        if (span_is(w, "true") || span_is(w, "false")) v->i = span_is(w, "true");
        else st = NUM_SYNTAX;
        break;
    case IR_ATTR_SYM:
        v->i = -1;
        for (int k = 0; k < def->nsyms; k++)
            if (span_is(w, def->syms[k])) v->i = k;
        if (v->i < 0) {
            char syms[256];
            sym_list(def, syms, sizeof syms);
            rd_error(r, at, "bad value '%.*s%s' for '%s' of '%s' (expected %s)", SHOW(w), def->name, op, syms);
            pd->bad = true;
            return true;
        }
        break;
    case IR_ATTR_INTS: st = NUM_SYNTAX; break;
    }
    if (st == NUM_SYNTAX)
        rd_error(r, at, "'%s' of '%s' takes %s, got '%.*s%s'", def->name, op, kind_text(def->kind), SHOW(w));
    else if (st == NUM_RANGE)
        rd_error(r, at, "number '%.*s%s' is out of range", SHOW(w));
    pd->bad |= st != NUM_OK;
    return true;
}

/* Skips the value of an unknown attribute. */
static bool skip_value(reader *r)
{
    if (peek(r) == '[') {
        const char *close = memchr(r->p, ']', (size_t)(r->end - r->p));
        if (!close) { rd_error(r, r->p, "missing ']'"); return false; }
        r->p = close + 1;
        return true;
    }
    if (scan_while(r, is_word_char).n) return true;
    char got[128];
    describe_here(r, got, sizeof got);
    rd_error(r, r->p, "expected a value, got %s", got);
    return false;
}

static void attr_names(const ir_op_info *info, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < info->nattrs && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", info->attrs[i].name);
}

/* `name=value`; the cursor is at the name. */
static bool read_attr(reader *r, pending *pd, unsigned *given)
{
    const ir_op_info *info = ir_op_get(pd->op);
    const char *at = r->p;
    span name = scan_ident(r);
    if (!expect_char(r, '=', "after the attribute name")) return false;
    skip_ws(r);
    int idx = -1;
    for (int i = 0; i < info->nattrs; i++)
        if (span_is(name, info->attrs[i].name)) idx = i;
    if (idx < 0) {
        char names[512];
        attr_names(info, names, sizeof names);
        if (info->nattrs)
            rd_error(r, at, "'%s' has no attribute '%.*s%s' (its attributes: %s)", info->name, SHOW(name), names);
        else
            rd_error(r, at, "'%s' takes no attributes, got '%.*s%s'", info->name, SHOW(name));
        pd->bad = true;
        return skip_value(r);
    }
    if (*given & (1u << idx)) {
        rd_error(r, at, "attribute '%s' is given twice", info->attrs[idx].name);
        pd->bad = true;
    }
    *given |= 1u << idx;
    const ir_attr_def *def = &info->attrs[idx];
    ir_attr_val *v = &pd->attrs[idx];
    v->set = true;
    if (def->kind != IR_ATTR_INTS) return read_word_value(r, pd, def, v);
    if (peek(r) == '[') return read_int_list(r, pd, def, v);
    rd_error(r, r->p, "'%s' of '%s' takes %s", def->name, info->name, kind_text(def->kind));
    pd->bad = true;
    return skip_value(r);
}

/* ---- node lines: type and annotations ----------------------------------- */

static bool read_type(reader *r, pending *pd)
{
    skip_ws(r);
    pd->type_at = r->p;
    span w = scan_ident(r);
    char name[16];
    if (!w.n || !span_cstr(w, name, sizeof name) || !ir_dtype_lookup(name, &pd->dtype)) {
        char got[128];
        r->p = pd->type_at;
        describe_here(r, got, sizeof got);
        rd_error(r, pd->type_at, "expected a dtype (f32, f16, bf16, f64, i32, i64 or u8), got %s", got);
        return false;
    }
    if (!expect_char(r, '[', "after the dtype")) return false;
    skip_ws(r);
    if (peek(r) == ']') { r->p++; return true; }
    int64_t numel = 1;
    for (;;) {
        skip_ws(r);
        const char *at = r->p;
        int64_t dim;
        if (!read_int(r, "a dimension", INT64_MIN, INT64_MAX, &dim)) return false;
        if (dim <= 0) {
            rd_error(r, at, "dimensions must be positive, got %lld", (long long)dim);
            return false;
        }
        if (pd->shape.rank == IR_MAX_RANK) {
            rd_error(r, at, "a tensor has at most %d dimensions", IR_MAX_RANK);
            return false;
        }
        pd->shape.dim[pd->shape.rank++] = dim;
        if (numel > READ_MAX_NUMEL / dim) {
            rd_error(r, pd->type_at, "tensor too large: more than 2^48 elements");
            return false;
        }
        numel *= dim;
        skip_ws(r);
        if (peek(r) == ']') { r->p++; return true; }
        if (!expect_char(r, ',', "or ']' between dimensions")) return false;
    }
}

/* `(N)` after stage, chunk or fuse. */
static bool read_paren_int(reader *r, const char *what, int *out)
{
    int64_t v;
    if (!expect_char(r, '(', "after the keyword") || !read_int(r, what, 0, INT_MAX, &v) ||
        !expect_char(r, ')', "to close it"))
        return false;
    *out = (int)v;
    return true;
}

static bool read_shard(reader *r, pending *pd)
{
    int64_t dim;
    if (!expect_char(r, '(', "after 'shard'")) return false;
    skip_ws(r);
    const char *at = r->p;
    if (!read_int(r, "the sharded dimension", 0, IR_MAX_RANK - 1, &dim)) return false;
    if (dim >= pd->shape.rank) {
        rd_error(r, at, "cannot shard dimension %lld of a rank-%d tensor", (long long)dim, pd->shape.rank);
        pd->bad = true;
    }
    if (!expect_char(r, ',', "after the sharded dimension")) return false;
    skip_ws(r);
    const char *gat = r->p;
    span g = scan_ident(r);
    if (span_is(g, "tp")) pd->shard.group = IR_GROUP_TP;
    else if (span_is(g, "dp")) pd->shard.group = IR_GROUP_DP;
    else if (span_is(g, "pp")) pd->shard.group = IR_GROUP_PP;
    else {
        rd_error(r, gat, "expected a group (tp, dp or pp) in shard(...)");
        return false;
    }
    pd->shard.dim = (int8_t)dim;
    return expect_char(r, ')', "to close shard(...)");
}

static bool read_loc(reader *r, pending *pd)
{
    int64_t line, col;
    strbuf file;
    sb_init(&file);
    bool ok = expect_char(r, '(', "after 'loc'") && read_string(r, &file) &&
              expect_char(r, ':', "after the file name") && read_int(r, "a line number", 0, INT_MAX, &line) &&
              expect_char(r, ':', "after the line number") && read_int(r, "a column", 0, INT_MAX, &col) &&
              expect_char(r, ')', "to close loc(...)");
    /* File names live in the graph's arena (one copy per distinct name in
     * a row), so reading untrusted IR grows nothing process-wide. */
    if (ok) {
        if (!r->last_loc_file || strcmp(r->last_loc_file, file.s) != 0)
            r->last_loc_file = arena_strdup(&r->g->mem, file.s);
        pd->loc = (src_loc){r->last_loc_file, (int)line, (int)col};
    }
    sb_free(&file);
    return ok && expect_eol(r, "loc(...)");
}

/* `seed` marks the backward's seed (autodiff's d loss / d loss): a
 * floating-point scalar `full`, one per graph. */
static void check_seed(reader *r, pending *pd, const char *at)
{
    char t[96];
    if (pd->op != IR_OP_FULL || !ir_dtype_is_float(pd->dtype) || pd->shape.rank != 0) {
        ir_type_str(pd->dtype, &pd->shape, t, sizeof t);
        rd_error(r, at, "'seed' marks the backward's seed, a floating-point scalar 'full', not %s %s",
                 ir_op_name(pd->op), t);
        pd->bad = true;
    }
    if (r->seed) {
        rd_error(r, at, "a graph has one seed, and '%%%s' (line %d) is already it", r->seed->name,
                 r->node_line[r->seed->id]);
        pd->bad = true;
    }
}

static void check_flag(reader *r, pending *pd, unsigned flag, const char *at)
{
    char t[96];
    if (flag == IR_NF_NO_DECAY && pd->op != IR_OP_PARAM) {
        rd_error(r, at, "'no_decay' applies to parameters only, not to '%s'", ir_op_name(pd->op));
        pd->bad = true;
    }
    if (flag == IR_NF_SEED) {
        check_seed(r, pd, at);
        return;
    }
    if (flag != IR_NF_LOSS) return;
    if (!ir_dtype_is_float(pd->dtype) || pd->shape.rank != 0) {
        ir_type_str(pd->dtype, &pd->shape, t, sizeof t);
        rd_error(r, at, "the loss must be a floating-point scalar, got %s", t);
        pd->bad = true;
    }
    if (r->loss) {
        rd_error(r, at, "a graph has one loss, and '%%%s' (line %d) is already it", r->loss->name,
                 r->node_line[r->loss->id]);
        pd->bad = true;
    }
}

/* `(KIND, OFFSET)` after mem: where the memory plan put the value. */
static bool read_mem(reader *r, pending *pd)
{
    if (!expect_char(r, '(', "after 'mem'")) return false;
    skip_ws(r);
    const char *at = r->p;
    span kind = scan_ident(r);
    char name[16];
    if (!span_cstr(kind, name, sizeof name) || !ir_mem_lookup(name, &pd->mem) || pd->mem == IR_MEM_NONE) {
        rd_error(r, at, "expected a buffer kind (input, param, grad, act, stash or cache) in mem(...)");
        return false;
    }
    return expect_char(r, ',', "after the buffer kind") &&
           read_int(r, "an offset in bytes", 0, INT64_MAX, &pd->mem_offset) && expect_char(r, ')', "to close mem(...)");
}

/* `(PHASE)` after phase: begin, fwd, bwd, end or opt. */
static bool read_phase(reader *r, pending *pd)
{
    if (!expect_char(r, '(', "after 'phase'")) return false;
    skip_ws(r);
    const char *at = r->p;
    span w = scan_ident(r);
    char name[16] = "";
    if (w.n > 0 && w.n < sizeof name) memcpy(name, w.s, w.n);
    ir_phase ph;
    if (!w.n || w.n >= sizeof name || !ir_phase_lookup(name, &ph) || ph == IR_PHASE_NONE) {
        rd_error(r, at, "expected a phase (begin, fwd, bwd, end or opt) in phase(...)");
        return false;
    }
    pd->phase = ph;
    return expect_char(r, ')', "to close phase(...)");
}

static bool read_annotation(reader *r, pending *pd, span kw, const char *at, unsigned *seen)
{
    static const char *const words[] = {"output", "loss",  "no_decay", "seed",  "shard", "stage",
                                        "chunk",  "mem",   "fuse",     "phase", "bucket"};
    static const unsigned flags[] = {IR_NF_OUTPUT, IR_NF_LOSS, IR_NF_NO_DECAY, IR_NF_SEED};
    int k = -1;
    for (int i = 0; i < (int)ARRAY_LEN(words); i++)
        if (span_is(kw, words[i])) k = i;
    if (k < 0) {
        if (span_is(kw, "input") || span_is(kw, "param"))
            rd_error(r, at, "'%.*s%s' is implied by the op and is not written", SHOW(kw));
        else
            rd_error(r, at, "unexpected '%.*s%s' after the type (expected output, loss, no_decay, seed, shard(...), "
                     "stage(...), chunk(...), phase(...), bucket(...), fuse(...), mem(...) or loc(...))", SHOW(kw));
        return false;
    }
    if (*seen & (1u << k)) {
        rd_error(r, at, "'%s' is given twice", words[k]);
        pd->bad = true;
    }
    *seen |= 1u << k;
    if (k < (int)ARRAY_LEN(flags)) {
        pd->flags |= flags[k];
        check_flag(r, pd, flags[k], at);
        return true;
    }
    if (k == 4) return read_shard(r, pd);
    if (k == 7) {
        pd->mem_at = at;
        return read_mem(r, pd);
    }
    if (k == 8) return read_paren_int(r, "a fusion group", &pd->fuse);
    if (k == 9) return read_phase(r, pd);
    if (k == 10) return read_paren_int(r, "a bucket", &pd->bucket);
    return read_paren_int(r, k == 5 ? "a stage" : "a chunk", k == 5 ? &pd->stage : &pd->chunk);
}

/* Flags and annotations after the type, up to the end of the line. */
static bool read_annotations(reader *r, pending *pd)
{
    unsigned seen = 0;
    while (!at_eol(r)) {
        const char *at = r->p;
        span kw = scan_ident(r);
        if (!kw.n) {
            char got[128];
            describe_here(r, got, sizeof got);
            rd_error(r, at, "unexpected %s after the type", got);
            return false;
        }
        if (span_is(kw, "loc")) return read_loc(r, pd);
        if (!read_annotation(r, pd, kw, at, &seen)) return false;
    }
    return true;
}

/* `= OP(...) attrs : TYPE annotations`, after the name. */
static bool read_node_body(reader *r, pending *pd, bool *op_known)
{
    if (!expect_char(r, '=', "after the name") || !read_op(r, pd)) return false;
    *op_known = true;
    skip_ws(r);
    if (peek(r) == '(' && !read_operands(r, pd)) return false;
    unsigned given = 0;
    for (;;) {
        skip_ws(r);
        if (peek(r) == ':') break;
        if (!is_ident_start(peek(r))) {
            char got[128];
            describe_here(r, got, sizeof got);
            rd_error(r, r->p, "expected an attribute or ':' and the type, got %s", got);
            return false;
        }
        if (!read_attr(r, pd, &given)) return false;
    }
    r->p++;
    return read_type(r, pd) && read_annotations(r, pd);
}

/* ---- node lines: checks and building ------------------------------------ */

static bool check_arity(reader *r, const pending *pd)
{
    const ir_op_info *info = ir_op_get(pd->op);
    if (pd->nsrc >= info->min_src && pd->nsrc <= info->max_src) return true;
    if (info->max_src == 0)
        rd_error(r, pd->op_at, "'%s' takes no operands, got %d", info->name, pd->nsrc);
    else if (info->min_src == info->max_src)
        rd_error(r, pd->op_at, "'%s' takes %d operand%s, got %d", info->name, info->min_src,
                 info->min_src == 1 ? "" : "s", pd->nsrc);
    else
        rd_error(r, pd->op_at, "'%s' takes %d to %d operands, got %d", info->name, info->min_src, info->max_src,
                 pd->nsrc);
    return false;
}

static bool check_required(reader *r, const pending *pd)
{
    const ir_op_info *info = ir_op_get(pd->op);
    bool ok = true;
    for (int i = 0; i < info->nattrs; i++)
        if (!pd->attrs[i].set) {
            rd_error(r, pd->op_at, "'%s' needs the attribute '%s' (%s)", info->name, info->attrs[i].name,
                     kind_text(info->attrs[i].kind));
            ok = false;
        }
    return ok;
}

/* Runs the shape rule on a scratch copy and compares with the printed type. */
static bool check_shape(reader *r, const pending *pd, const ir_node *n)
{
    ir_node tmp = *n;
    char err[512], said[96], got[96];
    if (!ir_op_get(n->op)->shape(&tmp, err, sizeof err)) {
        rd_error(r, pd->op_at, "%s", err);
        return false;
    }
    if (tmp.dtype == n->dtype && ir_shape_eq(&tmp.shape, &n->shape)) return true;
    ir_type_str(n->dtype, &n->shape, said, sizeof said);
    ir_type_str(tmp.dtype, &tmp.shape, got, sizeof got);
    rd_error(r, pd->type_at, "type mismatch: the line says %s but '%s' gives %s", said, ir_op_name(n->op), got);
    return false;
}

static void node_define(reader *r, pending *pd, bool syntax_ok, bool op_known)
{
    bool poisoned = !syntax_ok || pd->bad || pd->src_poisoned;
    if (op_known && syntax_ok) {
        poisoned |= !check_arity(r, pd);
        poisoned |= !check_required(r, pd);
    }
    int nsrc = op_known ? pd->nsrc : 0;
    ir_node *n = ir_node_alloc(r->g, op_known ? pd->op : IR_OP_INPUT, nsrc);
    if (nsrc) memcpy(n->src, r->srcbuf, (size_t)nsrc * sizeof *n->src);
    if (op_known && ir_op_get(pd->op)->nattrs)
        memcpy(n->attrs, pd->attrs, (size_t)ir_op_get(pd->op)->nattrs * sizeof *n->attrs);
    n->name = arena_strndup(&r->g->mem, pd->name.s, pd->name.n);
    n->dtype = pd->dtype;
    n->shape = pd->shape;
    n->flags = pd->flags | (n->op == IR_OP_INPUT ? IR_NF_INPUT : 0) | (n->op == IR_OP_PARAM ? IR_NF_PARAM : 0);
    n->shard = pd->shard;
    n->stage = pd->stage;
    n->chunk = pd->chunk;
    n->fuse = pd->fuse;
    n->phase = pd->phase;
    n->bucket = pd->bucket;
    n->mem = pd->mem;
    n->mem_offset = pd->mem_offset;
    n->loc = pd->loc;
    if (!poisoned) poisoned = !check_shape(r, pd, n);
    TGC_ASSERT(ir_graph_append_raw(r->g, n));
    side_push(r, n->id, poisoned, pd->mem_at ? (int)(pd->mem_at - r->line) + 1 : 0);
    if (!poisoned && (n->flags & IR_NF_LOSS) && !r->loss) r->loss = n;
    if (!poisoned && (n->flags & IR_NF_SEED) && !r->seed) r->seed = n;
}

static void read_node(reader *r)
{
    pending pd;
    memset(&pd, 0, sizeof pd);
    pd.shard.dim = -1;
    pd.stage = pd.chunk = pd.fuse = pd.bucket = -1;
    r->p++; /* '%' */
    pd.name_at = r->p;
    pd.name = scan_ident(r);
    if (!pd.name.n) {
        rd_error(r, pd.name_at, "expected a name after '%%'");
        return;
    }
    const ir_node *prev = find_span(r, pd.name);
    if (prev)
        rd_error(r, pd.name_at - 1, "redefinition of '%%%.*s%s' (first defined on line %d)", SHOW(pd.name),
                 r->node_line[prev->id]);
    bool op_known = false;
    bool ok = read_node_body(r, &pd, &op_known);
    if (!prev) node_define(r, &pd, ok, op_known);
}

/* ---- the passes line ---------------------------------------------------- */

/* The names of passes/passes.def, in its order: the vocabulary of the
 * `passes` line. The IR records which passes ran; it does not run them. */
static const char *const pass_table[] = {
#define PASS(name, fn, gate, summary) #name,
#include "passes/passes.def"
};
#define NPASSES ((int)(sizeof pass_table / sizeof pass_table[0]))
_Static_assert(sizeof pass_table / sizeof pass_table[0] <= IR_MAX_PASSES, "IR_MAX_PASSES is below the pass count");

static int pass_find(span w)
{
    for (int k = 0; k < NPASSES; k++)
        if (span_is(w, pass_table[k])) return k;
    return -1;
}

static void pass_list(char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < NPASSES && len < size; k++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", k ? ", " : "", pass_table[k]);
}

/* One name of the list: its index in pass_table, or -1 after an error. */
static int read_pass_name(reader *r, int last)
{
    skip_ws(r);
    const char *at = r->p;
    span w = scan_ident(r);
    char list[512], got[128];
    pass_list(list, sizeof list);
    if (!w.n) {
        describe_here(r, got, sizeof got);
        rd_error(r, at, "expected a pass name, got %s (the passes: %s)", got, list);
        return -1;
    }
    int k = pass_find(w);
    if (k < 0) {
        const char *close = NULL;
        for (int j = 0; j < NPASSES && !close; j++)
            if (edit_distance(w.s, w.n, pass_table[j], strlen(pass_table[j])) <= (w.n >= 5 ? 2 : 1))
                close = pass_table[j];
        snprintf(got, sizeof got, "; did you mean '%s'?", close ? close : "");
        rd_error(r, at, "unknown pass '%.*s%s'%s (the passes: %s)", SHOW(w), close ? got : "", list);
    } else if (k == last) {
        rd_error(r, at, "pass '%s' is listed twice", pass_table[k]);
        k = -1;
    } else if (k < last) {
        rd_error(r, at, "pass '%s' is listed after '%s', but runs before it (the passes run in the order %s)",
                 pass_table[k], pass_table[last], list);
        k = -1;
    }
    return k;
}

/* The rows of ir_pass_keys of pass `name` (adjacent): the first, and how many. */
static int pass_keys(const char *name, int *first)
{
    int n = 0;
    *first = -1;
    for (int i = 0; i < ir_pass_nkeys; i++)
        if (strcmp(ir_pass_keys[i].pass, name) == 0) {
            if (*first < 0) *first = i;
            n++;
        }
    return n;
}

static void pass_key_list(const char *name, char *buf, size_t size)
{
    int first, n = pass_keys(name, &first);
    size_t len = 0;
    buf[0] = 0;
    for (int j = 0; j < n && len < size; j++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", j ? ", " : "", ir_pass_keys[first + j].key);
}

/* A SET value: none, all, or words of its choices joined by '+', each once. */
static bool read_pass_set(reader *r, const ir_pass_key *k, span w, strbuf *out)
{
    unsigned bits = 0;
    if (span_is(w, "all")) bits = ~0u;
    else if (!span_is(w, "none"))
        for (size_t i = 0, j = 0; j < w.n; i = j + 1) {
            j = i;
            while (j < w.n && w.s[j] != '+') j++;
            span part = {w.s + i, j - i};
            if (!part.n) {
                rd_error(r, part.s, "an empty entry in %s=: expected all, none, or words of %s joined by '+'", k->key,
                         k->choices);
                return false;
            }
            int found = -1;
            strbuf c;
            sb_init(&c);
            for (int q = 0; found < 0 && ir_pass_choice(k->choices, q, &c); q++, c.len = 0, c.s[0] = 0)
                if (span_is(part, c.s)) found = q;
            sb_free(&c);
            if (found < 0 || (bits & (1u << found))) {
                rd_error(r, part.s, "%s '%.*s%s' in %s=: expected all, none, or words of %s joined by '+', each "
                         "once", found < 0 ? "unknown" : "repeated", SHOW(part), k->key, k->choices);
                return false;
            }
            bits |= 1u << found;
        }
    ir_pass_set_write(k->choices, bits, out);
    return true;
}

/* A choice value: one of the words of k->choices, written as is. */
static bool read_pass_choice(reader *r, const ir_pass_key *k, span w, const char *at, strbuf *out)
{
    strbuf c;
    sb_init(&c);
    bool found = false;
    for (int q = 0; !found && ir_pass_choice(k->choices, q, &c); q++, c.len = 0, c.s[0] = 0) found = span_is(w, c.s);
    sb_free(&c);
    if (found) sb_putn(out, w.s, w.n);
    else rd_error(r, at, "%s='%.*s%s': expected one of %s", k->key, SHOW(w), k->choices);
    return found;
}

/* The value of key k after its '=', canonical into out (as pass.c writes it). */
static bool read_pass_value(reader *r, const ir_pass_key *k, strbuf *out)
{
    skip_ws(r);
    const char *at = r->p;
    if (k->kind == IR_PKEY_TEXT) {
        strbuf t;
        sb_init(&t);
        bool ok = read_string(r, &t);
        if (ok) sb_put_quoted(out, t.s);
        sb_free(&t);
        return ok;
    }
    span w = scan_while(r, is_word_char);
    char got[128];
    if (!w.n) {
        describe_here(r, got, sizeof got);
        rd_error(r, at, "expected the value of %s, got %s", k->key, got);
        return false;
    }
    int64_t i;
    double f;
    switch (k->kind) {
    case IR_PKEY_I64:
        if (span_to_i64(w, &i) == NUM_OK && i >= 0) { sb_printf(out, "%lld", (long long)i); return true; }
        rd_error(r, at, "%s='%.*s%s': expected a non-negative integer", k->key, SHOW(w));
        return false;
    case IR_PKEY_F64:
        if (span_to_double(w, &f) == NUM_OK && isfinite(f)) { sb_put_double(out, f); return true; }
        rd_error(r, at, "%s='%.*s%s': expected a finite number", k->key, SHOW(w));
        return false;
    case IR_PKEY_BOOL:
        if (span_is(w, "true") || span_is(w, "false")) { sb_putn(out, w.s, w.n); return true; }
        rd_error(r, at, "%s='%.*s%s': expected true or false", k->key, SHOW(w));
        return false;
    case IR_PKEY_SET: return read_pass_set(r, k, w, out);
    default: return read_pass_choice(r, k, w, at, out);
    }
}

#define READ_MAX_PASS_KEYS 16

/* The options pass `name` ran with, `(key=value ...)` after its name:
 * each of its keys once, in any order, into canon in pass_record.def's
 * order. A pass that records none has no parentheses. */
static bool read_pass_args(reader *r, const char *name, strbuf *canon)
{
    int first, n = pass_keys(name, &first);
    char keys[512], got[128];
    pass_key_list(name, keys, sizeof keys);
    TGC_ASSERT(n <= READ_MAX_PASS_KEYS);
    skip_ws(r);
    if (peek(r) != '(' || n == 0) {
        if (n == 0 && peek(r) != '(') return true;
        describe_here(r, got, sizeof got);
        if (n == 0) rd_error(r, r->p, "pass '%s' records no options, got '('", name);
        else rd_error(r, r->p, "expected '(' and the options pass '%s' ran with (%s) after its name, got %s", name,
                      keys, got);
        return false;
    }
    r->p++;
    strbuf vals[READ_MAX_PASS_KEYS];
    bool seen[READ_MAX_PASS_KEYS] = {false}, ok = true;
    for (int j = 0; j < n; j++) sb_init(&vals[j]);
    while (ok) {
        skip_ws(r);
        if (peek(r) == ')') break;
        const char *at = r->p;
        span key = scan_ident(r);
        int j = 0;
        while (j < n && !span_is(key, ir_pass_keys[first + j].key)) j++;
        describe_here(r, got, sizeof got);
        if (!key.n) rd_error(r, at, "expected a key of pass '%s' (%s) or ')', got %s", name, keys, got);
        else if (j == n) rd_error(r, at, "unknown key '%.*s%s' of pass '%s' (its keys: %s)", SHOW(key), name, keys);
        else if (seen[j]) rd_error(r, at, "key '%s' of pass '%s' is given twice", ir_pass_keys[first + j].key, name);
        ok = key.n && j < n && !seen[j] && expect_char(r, '=', "after the key") &&
             read_pass_value(r, &ir_pass_keys[first + j], &vals[j]);
        if (ok) seen[j] = true;
    }
    for (int j = 0; ok && j < n; j++)
        if (!seen[j]) {
            rd_error(r, r->p, "pass '%s' ran with %s too: expected %s=VALUE before ')' (its keys: %s)", name,
                     ir_pass_keys[first + j].key, ir_pass_keys[first + j].key, keys);
            ok = false;
        }
    if (ok) r->p++;
    for (int j = 0; j < n; j++) {
        if (ok) sb_printf(canon, "%s%s=%s", j ? " " : "", ir_pass_keys[first + j].key, vals[j].s);
        sb_free(&vals[j]);
    }
    return ok;
}

/* `passes NAME(ARGS), NAME, ...`: the passes applied, in passes.def order,
 * with the options they ran with. */
static void read_passes(reader *r, const char *kw_at)
{
    if (r->passes_seen) { rd_error(r, kw_at, "the passes line is given twice"); return; }
    int last = -1, n = 0;
    const char *names[NPASSES];
    strbuf args[NPASSES];
    bool ok = true;
    while (ok) {
        last = read_pass_name(r, last);
        if (last < 0) break;
        names[n] = pass_table[last];
        sb_init(&args[n]);
        ok = read_pass_args(r, names[n], &args[n]);
        n++;
        if (!ok || at_eol(r)) break;
        ok = expect_char(r, ',', "between pass names");
    }
    ok = ok && last >= 0;
    if (ok) r->passes_seen = true; /* a bad line is reported for itself, not as a repeat */
    for (int i = 0; i < n; i++) {
        if (ok) ir_graph_pass_record(r->g, names[i], args[i].len ? args[i].s : NULL);
        sb_free(&args[i]);
    }
}

/* ---- lines and files ---------------------------------------------------- */

/* Returns false when reading must stop (no usable header). */
static bool read_line(reader *r)
{
    if (at_eol(r)) return true;
    if (!r->header) return read_version(r);
    if (*r->p == '%') { read_node(r); return true; }
    const char *at = r->p;
    span kw = scan_ident(r);
    if (span_is(kw, "model")) read_model(r, at);
    else if (span_is(kw, "hparam")) read_hparam(r);
    else if (span_is(kw, "num_layers")) read_num_layers(r, at);
    else if (span_is(kw, "mem_size")) read_mem_size(r);
    else if (span_is(kw, "precision")) read_precision(r, at);
    else if (span_is(kw, "passes")) read_passes(r, at);
    else if (kw.n == 3 && memcmp(kw.s, "tgc", 3) == 0 && peek(r) == '-')
        rd_error(r, at, "the header 'tgc-ir' is given twice");
    else {
        char got[128];
        r->p = at;
        describe_here(r, got, sizeof got);
        rd_error(r, at, "expected a node '%%name = op ...' or a header line (model, hparam, num_layers, "
                 "precision, passes, mem_size), got %s", got);
    }
    return true;
}

/* Once every mem_size is known: each planned value lies inside its buffer. */
static void check_mem_fit(reader *r)
{
    for (int i = 0; i < r->g->nnodes; i++) {
        const ir_node *n = r->g->nodes[i];
        if (n->mem == IR_MEM_NONE || r->poisoned[i]) continue;
        int64_t bytes = ir_shape_numel(&n->shape) * ir_storage_size(r->g, n), size = r->g->mem_size[n->mem];
        if (bytes > size || n->mem_offset > size - bytes)
            rd_error_at(r, r->node_line[i], r->mem_col[i],
                        "'%%%s' (%lld bytes at offset %lld) does not fit in the %s buffer (mem_size %s = %lld)",
                        n->name, (long long)bytes, (long long)n->mem_offset, ir_mem_name(n->mem),
                        ir_mem_name(n->mem), (long long)size);
    }
}

/* Every stage(N) and chunk(N) below the pp pass's record, pp(p=P v=V)
 * (1 and 1 where it did not run), as the verifier holds them: the
 * degrees' one source (ir_graph_pp_dims). Checked once the passes line,
 * which may come anywhere in the header, has been read. */
static void check_stages(reader *r)
{
    int p, v;
    ir_graph_pp_dims(r->g, &p, &v);
    for (int i = 0; i < r->g->nnodes; i++) {
        const ir_node *n = r->g->nodes[i];
        if (r->poisoned[i]) continue;
        if (n->stage >= p)
            rd_error_at(r, r->node_line[i], 1, "'%%%s' has stage %d, but the pp pass's record gives %d stage%s "
                        "(passes ... pp(p=%d))", n->name, n->stage, p, p == 1 ? "" : "s", p);
        if (n->chunk >= v)
            rd_error_at(r, r->node_line[i], 1, "'%%%s' has chunk %d, but the pp pass's record gives %d model chunk%s "
                        "per rank (passes ... pp(v=%d))", n->name, n->chunk, v, v == 1 ? "" : "s", v);
    }
}

/* IR written before the seed flag existed (a plan or a dump of an older
 * tgc) says autodiff ran but flags no seed: its seed is autodiff's scalar
 * `full` 1 named grad.<loss>, the one place a name is read for it. */
static void seed_of_old_ir(reader *r)
{
    if (r->seed || !r->loss || !ir_graph_pass_ran(r->g, "autodiff")) return;
    const char *name = arena_printf(&r->g->mem, "grad.%s", r->loss->name);
    ir_node *s = ir_graph_find(r->g, name);
    if (s && s->op == IR_OP_FULL && s->shape.rank == 0 && ir_attr_float(s, "value") == 1.0) s->flags |= IR_NF_SEED;
}

ir_graph *ir_graph_read(const char *text, size_t len, const char *file, diag *d)
{
    reader r;
    memset(&r, 0, sizeof r);
    r.d = d;
    r.errors0 = d->nerrors;
    r.file = diag_add_source(d, file ? file : "<ir>", text, len);
    r.text = text;
    r.text_end = text + len;
    r.g = ir_graph_new("model");
    defs_build(&r);
    bool go = true;
    for (const char *q = text; go && q < r.text_end && !too_many_errors(&r);) {
        const char *nl = memchr(q, '\n', (size_t)(r.text_end - q));
        r.line = r.p = q;
        r.end = nl ? nl : r.text_end;
        r.lineno++;
        go = read_line(&r);
        q = nl ? nl + 1 : r.text_end;
    }
    if (!r.header && go) {
        r.line = r.p = r.end = text;
        r.lineno = 1;
        rd_error(&r, text, "empty input: expected the header 'tgc-ir 1'");
    }
    if (r.header) check_mem_fit(&r);
    if (r.header) check_stages(&r);
    if (d->nerrors == r.errors0) seed_of_old_ir(&r);
    free(r.defs.slot);
    free(r.node_line);
    free(r.mem_col);
    free(r.poisoned);
    free(r.srcbuf);
    if (d->nerrors > r.errors0) {
        ir_graph_free(r.g);
        return NULL;
    }
    return r.g;
}
