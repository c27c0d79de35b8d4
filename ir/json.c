/* JSON output (`tgc dump-ir --format json`); the schema is in docs/ir.md.
 *
 * Every attribute is written, defaults included; finite floats in their
 * shortest round-tripping form, non-finite ones as null. Strings are
 * escaped and invalid UTF-8 becomes U+FFFD, so the output is always valid
 * JSON. One node per line keeps dumps diffable. */
#include <math.h>
#include <string.h>

#include "ir.h"
#include "support/util.h"

/* Length of the valid UTF-8 sequence at s, or 0. */
static int utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    if (c >= 0xc2 && c <= 0xdf) return (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        unsigned lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        unsigned lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 && (s[3] & 0xc0) == 0x80 ? 4 : 0;
    }
    return 0;
}

static void json_str(strbuf *b, const char *s)
{
    if (!s) { sb_puts(b, "null"); return; }
    sb_putc(b, '"');
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') { sb_putc(b, '\\'); sb_putc(b, (char)c); p++; }
        else if (c == '\n') { sb_puts(b, "\\n"); p++; }
        else if (c == '\t') { sb_puts(b, "\\t"); p++; }
        else if (c < 0x20 || c == 0x7f) { sb_printf(b, "\\u%04x", c); p++; }
        else if (c < 0x80) { sb_putc(b, (char)c); p++; }
        else {
            int n = utf8_len(p); /* stops at the NUL: continuation bytes are never 0 */
            if (n) { sb_putn(b, (const char *)p, (size_t)n); p += n; }
            else { sb_puts(b, "\\ufffd"); p++; }
        }
    }
    sb_putc(b, '"');
}

static void json_double(strbuf *b, double v)
{
    if (isfinite(v)) sb_put_double(b, v);
    else sb_puts(b, "null");
}

static void json_int_or_null(strbuf *b, long long v)
{
    if (v < 0) sb_puts(b, "null");
    else sb_printf(b, "%lld", v);
}

static void put_attrs(strbuf *b, const ir_node *n)
{
    const ir_op_info *info = ir_op_get(n->op);
    sb_putc(b, '{');
    for (int i = 0; i < info->nattrs; i++) {
        const ir_attr_def *d = &info->attrs[i];
        const ir_attr_val *v = &n->attrs[i];
        sb_puts(b, i ? ", " : "");
        json_str(b, d->name);
        sb_puts(b, ": ");
        if (!v->set) { sb_puts(b, "null"); continue; }
        switch (d->kind) {
        case IR_ATTR_INT: sb_printf(b, "%lld", (long long)v->i); break;
        case IR_ATTR_FLOAT: json_double(b, v->f); break;
        case IR_ATTR_BOOL: sb_puts(b, v->i ? "true" : "false"); break;
        case IR_ATTR_SYM: json_str(b, v->i >= 0 && v->i < d->nsyms ? d->syms[v->i] : NULL); break;
        case IR_ATTR_INTS:
            sb_putc(b, '[');
            for (int k = 0; k < v->n && k < IR_MAX_INTS; k++) sb_printf(b, "%s%lld", k ? ", " : "", (long long)v->ints[k]);
            sb_putc(b, ']');
            break;
        }
    }
    sb_putc(b, '}');
}

static void put_flags(strbuf *b, unsigned flags)
{
    static const struct { unsigned bit; const char *name; } names[] = {
        {IR_NF_INPUT, "input"}, {IR_NF_PARAM, "param"}, {IR_NF_OUTPUT, "output"},
        {IR_NF_LOSS, "loss"}, {IR_NF_NO_DECAY, "no_decay"}, {IR_NF_SEED, "seed"},
    };
    sb_putc(b, '[');
    int k = 0;
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (flags & names[i].bit) sb_printf(b, "%s\"%s\"", k++ ? ", " : "", names[i].name);
    sb_putc(b, ']');
}

static void put_annotations(strbuf *b, const ir_node *n)
{
    static const char *const groups[] = {"none", "tp", "dp", "pp"};
    sb_puts(b, ", \"shard\": ");
    if (n->shard.dim >= 0) {
        int g = n->shard.group >= 0 && n->shard.group < 4 ? n->shard.group : 0;
        sb_printf(b, "{\"dim\": %d, \"group\": \"%s\"}", n->shard.dim, groups[g]);
    } else {
        sb_puts(b, "null");
    }
    sb_puts(b, ", \"stage\": ");
    json_int_or_null(b, n->stage);
    sb_puts(b, ", \"chunk\": ");
    json_int_or_null(b, n->chunk);
    sb_puts(b, ", \"phase\": ");
    if (n->phase != IR_PHASE_NONE) json_str(b, ir_phase_name(n->phase));
    else sb_puts(b, "null");
    sb_puts(b, ", \"bucket\": ");
    json_int_or_null(b, n->bucket);
    sb_puts(b, ", \"fuse\": ");
    json_int_or_null(b, n->fuse);
    sb_puts(b, ", \"mem\": ");
    if (n->mem != IR_MEM_NONE) {
        sb_puts(b, "{\"kind\": ");
        json_str(b, ir_mem_name(n->mem));
        sb_printf(b, ", \"offset\": %lld}", (long long)n->mem_offset);
    } else {
        sb_puts(b, "null");
    }
    sb_puts(b, ", \"loc\": ");
    if (n->loc.file) {
        sb_puts(b, "{\"file\": ");
        json_str(b, n->loc.file);
        sb_printf(b, ", \"line\": %d, \"col\": %d}", n->loc.line, n->loc.col);
    } else {
        sb_puts(b, "null");
    }
}

static void put_node(strbuf *b, const ir_node *n)
{
    sb_printf(b, "    {\"id\": %d, \"name\": ", n->id);
    json_str(b, n->name);
    sb_puts(b, ", \"op\": ");
    json_str(b, ir_op_name(n->op));
    sb_puts(b, ", \"operands\": [");
    for (int i = 0; i < n->nsrc; i++) {
        sb_puts(b, i ? ", " : "");
        if (n->src[i]) sb_printf(b, "%d", n->src[i]->id);
        else sb_puts(b, "null");
    }
    sb_puts(b, "], \"dtype\": ");
    json_str(b, ir_dtype_name(n->dtype));
    sb_puts(b, ", \"shape\": [");
    for (int i = 0; i < n->shape.rank && i < IR_MAX_RANK; i++)
        sb_printf(b, "%s%lld", i ? ", " : "", (long long)n->shape.dim[i]);
    sb_puts(b, "], \"attrs\": ");
    put_attrs(b, n);
    sb_puts(b, ", \"flags\": ");
    put_flags(b, n->flags);
    put_annotations(b, n);
    sb_putc(b, '}');
}

char *ir_graph_json(const ir_graph *g)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\n  \"format\": \"tgc-ir\",\n  \"version\": 1,\n  \"model\": ");
    json_str(&b, g->model);
    sb_puts(&b, ",\n  \"hparams\": {");
    for (int i = 0; i < g->nhparams; i++) {
        const ir_hparam *h = &g->hparams[i];
        sb_puts(&b, i ? ", " : "");
        json_str(&b, h->name);
        sb_puts(&b, ": ");
        if (h->is_float) json_double(&b, h->f);
        else sb_printf(&b, "%lld", (long long)h->i);
    }
    sb_printf(&b, "},\n  \"num_layers\": %d,\n  \"passes\": [", g->num_layers);
    for (int i = 0; i < g->npasses_run; i++) sb_printf(&b, "%s\"%s\"", i ? ", " : "", g->passes_run[i]);
    sb_puts(&b, "],\n  \"mem_size\": {");
    for (int m = IR_MEM_NONE + 1; m < IR_MEM_COUNT; m++)
        sb_printf(&b, "%s\"%s\": %lld", m > IR_MEM_NONE + 1 ? ", " : "", ir_mem_name((ir_mem)m), (long long)g->mem_size[m]);
    sb_puts(&b, "},\n  \"nodes\": [");
    for (int i = 0; i < g->nnodes; i++) {
        sb_puts(&b, i ? ",\n" : "\n");
        put_node(&b, g->nodes[i]);
    }
    sb_puts(&b, g->nnodes ? "\n  ]\n}\n" : "]\n}\n");
    return b.s;
}
