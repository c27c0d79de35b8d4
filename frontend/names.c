/* Symbol tables, "did you mean" suggestions, error reporting and naming
 * helpers of the lowering. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "frontend/lower.h"
#include "support/util.h"

/* ---- string-keyed hash map -------------------------------------------------- */

void fe_map_init(fe_map *m, arena *mem)
{
    m->slot = NULL;
    m->cap = m->count = 0;
    m->mem = mem;
}

static uint64_t key_hash(const char *s) { return hash_bytes(s, strlen(s), HASH_SEED); }

void *fe_map_get(const fe_map *m, const char *key)
{
    if (!m->cap) return NULL;
    size_t i = key_hash(key) & (m->cap - 1);
    for (; m->slot[i].key; i = (i + 1) & (m->cap - 1))
        if (strcmp(m->slot[i].key, key) == 0) return m->slot[i].val;
    return NULL;
}

static void map_insert(fe_map_entry *slot, size_t cap, const char *key, void *val)
{
    size_t i = key_hash(key) & (cap - 1);
    while (slot[i].key && strcmp(slot[i].key, key) != 0) i = (i + 1) & (cap - 1);
    slot[i].key = key;
    slot[i].val = val;
}

void fe_map_put(fe_map *m, const char *key, void *val)
{
    if (fe_map_get(m, key)) {
        map_insert(m->slot, m->cap, key, val);
        return;
    }
    if ((m->count + 1) * 2 > m->cap) {
        /* The old table stays in the arena: at most as much again. */
        size_t cap = m->cap ? m->cap * 2 : 16;
        fe_map_entry *slot = arena_alloc(m->mem, cap * sizeof *slot);
        for (size_t i = 0; i < m->cap; i++)
            if (m->slot[i].key) map_insert(slot, cap, m->slot[i].key, m->slot[i].val);
        m->slot = slot;
        m->cap = cap;
    }
    map_insert(m->slot, m->cap, key, val);
    m->count++;
}

/* ---- suggestions ------------------------------------------------------------ */

#define FE_EDIT_MAX_LEN 64

int fe_edit_distance(const char *a, const char *b, int cap)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > FE_EDIT_MAX_LEN || m > FE_EDIT_MAX_LEN) return cap + 1;
    if ((n > m ? n - m : m - n) > (size_t)cap) return cap + 1;
    /* Optimal string alignment: insertions, deletions, substitutions and
     * transpositions of neighbours each cost one. */
    int d[FE_EDIT_MAX_LEN + 1][FE_EDIT_MAX_LEN + 1];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m] > cap ? cap + 1 : d[n][m];
}

void fe_suggest_init(fe_suggest *s, const char *name)
{
    s->name = name;
    s->best = NULL;
    size_t len = strlen(name);
    s->max = len <= 3 ? 1 : len <= 8 ? 2 : 3;
    s->dist = s->max + 1;
}

void fe_suggest_add(fe_suggest *s, const char *candidate)
{
    if (strcmp(candidate, s->name) == 0) return;
    int d = fe_edit_distance(s->name, candidate, s->max);
    if (d > s->max || d >= (int)strlen(candidate)) return; /* "x" is no hint for "y" */
    /* Ties go to the alphabetically first, so output is deterministic. */
    if (d < s->dist || (d == s->dist && strcmp(candidate, s->best) < 0)) {
        s->dist = d;
        s->best = candidate;
    }
}

void fe_suggest_map(fe_suggest *s, const fe_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slot[i].key) fe_suggest_add(s, m->slot[i].key);
}

/* ---- errors ----------------------------------------------------------------- */

void fe_error(fe_lower *L, src_loc loc, const char *fmt, ...)
{
    if (L->stop) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *key = arena_printf(L->mem, "%d:%d:%s", loc.line, loc.col, msg);
    if (fe_map_get(&L->reported, key)) return;
    fe_map_put(&L->reported, key, (void *)key);
    L->nerrors++;
    diag_error(L->d, loc, "%s", msg);
    /* Past the diag's limit nothing more is printed: stop early. */
    if (L->d->nerrors > L->d->max_errors) L->stop = true;
}

void fe_note(fe_lower *L, src_loc loc, const char *fmt, ...)
{
    if (L->stop) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_note(L->d, loc, "%s", msg);
}

bool fe_tick(fe_lower *L, src_loc loc)
{
    if (L->stop) return false;
    if (++L->work > FE_MAX_WORK) {
        fe_error(L, loc, "model too large: evaluation stopped after %d steps (a runaway loop?)",
                 FE_MAX_WORK);
        L->stop = true;
        return false;
    }
    if (L->g->nnodes > FE_MAX_NODES) {
        fe_error(L, loc, "model too large: more than %d IR nodes", FE_MAX_NODES);
        L->stop = true;
        return false;
    }
    return true;
}

bool fe_enter(fe_lower *L, src_loc loc)
{
    if (L->nest >= FE_MAX_NEST) {
        fe_error(L, loc, "model nested too deeply (more than %d levels of blocks, loops and "
                 "expressions)", FE_MAX_NEST);
        L->stop = true;
        return false;
    }
    L->nest++;
    return true;
}

/* ---- names and descriptions --------------------------------------------- */

const char *fe_node_name(fe_lower *L, const fe_scope *s, const char *hint, const char *opname)
{
    const char *base = hint ? hint : opname;
    if (!s->prefix[0]) return base;
    return arena_printf(L->mem, "%s.%s", s->prefix, base);
}

const char *fe_type_str(fe_lower *L, const ir_node *n)
{
    char buf[256];
    ir_type_str(n->dtype, &n->shape, buf, sizeof buf);
    return arena_strdup(L->mem, buf);
}

const char *fe_value_str(fe_lower *L, fe_value v)
{
    strbuf b;
    sb_init(&b);
    switch (v.kind) {
    case FE_V_INT: sb_printf(&b, "integer %lld", (long long)v.i); break;
    case FE_V_FLOAT: sb_puts(&b, "number "); sb_put_double(&b, v.f); break;
    case FE_V_BOOL: sb_puts(&b, v.i ? "true" : "false"); break;
    case FE_V_TENSOR: sb_printf(&b, "tensor %s", fe_type_str(L, v.t)); break;
    case FE_V_ERROR: sb_puts(&b, "an invalid value"); break;
    }
    const char *s = arena_strdup(L->mem, b.s);
    sb_free(&b);
    return s;
}
