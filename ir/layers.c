/* The transformer layers of a graph, found by name (ir.h,
 * ir_graph_find_layers): shared by the pp pass (which layers go to which
 * stage) and the recompute pass (which layers form a group). */
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "support/util.h"

/* "layers.3.mlp.h" -> prefix length 6, index 3 (no leading zeros); false
 * for other names. */
static bool layer_name(const char *s, size_t *plen, long *idx)
{
    const char *dot = strchr(s, '.');
    if (!dot || dot == s || !isdigit((unsigned char)dot[1]) || (dot[1] == '0' && isdigit((unsigned char)dot[2])))
        return false;
    char *end;
    long i = strtol(dot + 1, &end, 10);
    if ((*end != '.' && *end != 0) || i > INT_MAX / 2) return false;
    *plen = (size_t)(dot - s);
    *idx = i;
    return true;
}

#define MAX_PREFIXES 16

typedef struct prefix {
    const char *name; /* the first node's name, of which len chars */
    size_t len;
    int count, offset; /* indices 0 .. count-1; its layers start at global index offset */
    bool *seen;
    bool ok;
} prefix;

static prefix *prefix_of(prefix *pf, int *npf, const char *name, size_t len, int L)
{
    for (int k = 0; k < *npf; k++)
        if (pf[k].len == len && strncmp(pf[k].name, name, len) == 0) return &pf[k];
    if (*npf == MAX_PREFIXES) return NULL;
    pf[*npf] = (prefix){name, len, 0, 0, xcalloc((size_t)L + 1, 1), true};
    return &pf[(*npf)++];
}

bool ir_graph_find_layers(const ir_graph *g, int nnodes, int *layer)
{
    int L = g->num_layers, npf = 0, total = 0;
    prefix pf[MAX_PREFIXES];
    for (int i = 0; i < nnodes; i++) {
        size_t len;
        long idx;
        const char *name = g->nodes[i]->name;
        layer[i] = -1;
        prefix *x = L > 0 && layer_name(name, &len, &idx) ? prefix_of(pf, &npf, name, len, L) : NULL;
        if (!x || !x->ok) continue;
        if (idx >= L) x->ok = false;
        else {
            x->seen[idx] = true;
            if (idx + 1 > x->count) x->count = (int)idx + 1;
        }
    }
    for (int k = 0; k < npf; k++) {
        for (int i = 0; pf[k].ok && i < pf[k].count; i++) pf[k].ok = pf[k].seen[i];
        if (pf[k].ok && pf[k].seen[0]) {
            pf[k].offset = total;
            total += pf[k].count;
        } else {
            pf[k].ok = false;
        }
    }
    bool found = total == L && L > 0;
    for (int i = 0; found && i < nnodes; i++) {
        size_t len;
        long idx;
        if (!layer_name(g->nodes[i]->name, &len, &idx)) continue;
        for (int k = 0; k < npf; k++)
            if (pf[k].ok && pf[k].len == len && strncmp(pf[k].name, g->nodes[i]->name, len) == 0)
                layer[i] = pf[k].offset + (int)idx;
    }
    for (int k = 0; k < npf; k++) free(pf[k].seen);
    return found;
}
