/* Learning-rate and weight-decay schedules (schedule.h). The Megatron
 * functions follow megatron/core/optimizer_param_scheduler.py operation by
 * operation, the PyTorch ones the closed forms of torch.optim.lr_scheduler
 * (_get_closed_form_lr), so rounding matches theirs as far as C's libm
 * matches Python's. */
#include "runtime/train/schedule.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/util.h"

#define SCHED_PI 3.14159265358979323846 /* Python's math.pi */

static bool name_index(const char *const *names, const char *name, int *out)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0) { *out = i; return true; }
    return false;
}

bool rt_decay_style_from(const char *name, rt_decay_style *out)
{
    static const char *const names[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD", NULL};
    int i;
    if (!name || !name_index(names, name, &i)) return false;
    *out = (rt_decay_style)i;
    return true;
}

bool rt_wsd_style_from(const char *name, rt_wsd_style *out)
{
    static const char *const names[] = {"linear", "cosine", "exponential", "minus_sqrt", NULL};
    int i;
    if (!name || !name_index(names, name, &i)) return false;
    *out = (rt_wsd_style)i;
    return true;
}

bool rt_incr_style_from(const char *name, rt_incr_style *out)
{
    static const char *const names[] = {"constant", "linear", "cosine", NULL};
    int i;
    if (!name || !name_index(names, name, &i)) return false;
    *out = (rt_incr_style)i;
    return true;
}

void rt_schedule_init(rt_schedule *s, double lr, double wd, int64_t iters)
{
    memset(s, 0, sizeof *s);
    s->lr = lr;
    s->decay_iters = iters;
    s->wd_incr_iters = iters;
    s->start_wd = s->end_wd = wd;
    s->wsd = RT_WSD_EXPONENTIAL;
}

static bool fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return false;
}

bool rt_schedule_check(const rt_schedule *s, char *err, size_t cap)
{
    if (!(s->min_lr >= 0.0)) return fail(err, cap, "--min-lr %g is negative", s->min_lr);
    if (s->nparts == 0 && !(s->lr >= s->min_lr))
        return fail(err, cap, "--lr %g is below --min-lr %g", s->lr, s->min_lr);
    if (s->nparts == 0 && s->warmup_iters > 0 && !(s->warmup_init <= s->lr))
        return fail(err, cap, "--lr-warmup-init %g is above --lr %g", s->warmup_init, s->lr);
    /* Megatron also asserts warmup < decay iterations; the values are well
     * defined without (min_lr right after the warm-up), and short smoke runs
     * of a long schedule need them. */
    if (s->nparts == 0 && s->decay != RT_DECAY_CONSTANT && s->warmup_iters == 0 && s->decay_iters <= 0)
        return fail(err, cap, "the learning rate decays over %lld iterations (--lr-decay-iters, default "
                    "--train-iters): it must be at least 1", (long long)s->decay_iters);
    if (s->nparts == 0 && s->decay == RT_DECAY_WSD && s->wsd_decay_iters <= 0)
        return fail(err, cap, "--lr-decay-style WSD needs --lr-wsd-decay-iters N (N >= 1)");
    if (!(s->start_wd >= 0.0)) return fail(err, cap, "the start weight decay %g is negative", s->start_wd);
    if (!(s->end_wd >= s->start_wd))
        return fail(err, cap, "--end-weight-decay %g is below --start-weight-decay %g", s->end_wd, s->start_wd);
    if (s->wd_incr != RT_INCR_CONSTANT && s->wd_incr_iters <= 0)
        return fail(err, cap, "the weight decay increments over --train-iters %lld: it must be at least 1",
                    (long long)s->wd_incr_iters);
    return true;
}

/* ---- Megatron ------------------------------------------------------------------ */

static double megatron_lr(const rt_schedule *s, int64_t n)
{
    double max_lr = s->lr, min_lr = s->min_lr;
    if (s->warmup_iters > 0 && n <= s->warmup_iters)
        return s->warmup_init + (max_lr - s->warmup_init) * (double)n / (double)s->warmup_iters;
    if (s->decay == RT_DECAY_CONSTANT) return max_lr;
    if (n > s->decay_iters) return min_lr;
    if (s->decay == RT_DECAY_INVSQRT) {
        double w = (double)(s->warmup_iters > 1 ? s->warmup_iters : 1), k = (double)(n > 1 ? n : 1);
        double lr = max_lr * pow(w, 0.5) / pow(k, 0.5);
        return lr > min_lr ? lr : min_lr;
    }
    double ratio = (double)(n - s->warmup_iters) / (double)(s->decay_iters - s->warmup_iters);
    double delta = max_lr - min_lr, coeff = 1.0;
    switch (s->decay) {
    case RT_DECAY_LINEAR: coeff = 1.0 - ratio; break;
    case RT_DECAY_COSINE: coeff = 0.5 * (cos(SCHED_PI * ratio) + 1.0); break;
    case RT_DECAY_WSD: {
        int64_t anneal_start = s->decay_iters - s->wsd_decay_iters;
        if (n <= anneal_start) break;
        double r = (double)(n - anneal_start) / (double)s->wsd_decay_iters;
        switch (s->wsd) {
        case RT_WSD_LINEAR: coeff = 1.0 - r; break;
        case RT_WSD_COSINE: coeff = 0.5 * (cos(SCHED_PI * r) + 1.0); break;
        case RT_WSD_EXPONENTIAL: coeff = 2.0 * pow(0.5, r) - 1.0; break;
        case RT_WSD_MINUS_SQRT: coeff = 1.0 - sqrt(r); break;
        }
        break;
    }
    default: break;
    }
    return min_lr + coeff * delta;
}

double rt_schedule_wd(const rt_schedule *s, int64_t n)
{
    if (n > s->wd_incr_iters || s->wd_incr == RT_INCR_CONSTANT) return s->end_wd;
    double ratio = (double)n / (double)s->wd_incr_iters;
    double coeff = s->wd_incr == RT_INCR_LINEAR ? ratio : 0.5 * (cos(SCHED_PI * (1.0 - ratio)) + 1.0);
    return s->start_wd + coeff * (s->end_wd - s->start_wd);
}

/* ---- PyTorch ------------------------------------------------------------------- */

double rt_torch_part_lr(const rt_torch_part *p, double lr, int64_t t)
{
    switch (p->kind) {
    case RT_TORCH_STEP: return lr * pow(p->gamma, (double)(t / p->step_size));
    case RT_TORCH_MULTISTEP: {
        int k = 0; /* bisect_right(milestones, t) */
        while (k < p->nmilestones && p->milestones[k] <= t) k++;
        return lr * pow(p->gamma, (double)k);
    }
    case RT_TORCH_EXPONENTIAL: return lr * pow(p->gamma, (double)t);
    case RT_TORCH_COSINE:
        return p->eta_min + (lr - p->eta_min) * (1.0 + cos(SCHED_PI * (double)t / (double)p->t_max)) / 2.0;
    case RT_TORCH_COSINE_RESTARTS: {
        /* The cycle holding t: cycle i is T_0 * T_mult^i steps long. */
        int64_t t_i = p->t_0, t_cur = t;
        if (p->t_mult == 1) t_cur = t % t_i;
        while (t_cur >= t_i) {
            t_cur -= t_i;
            t_i = t_i > INT64_MAX / p->t_mult ? INT64_MAX : t_i * p->t_mult;
        }
        return p->eta_min + (lr - p->eta_min) * (1.0 + cos(SCHED_PI * (double)t_cur / (double)t_i)) / 2.0;
    }
    case RT_TORCH_LINEAR: {
        int64_t k = t < p->total_iters ? t : p->total_iters;
        return lr * (p->start_factor + (p->end_factor - p->start_factor) * (double)k / (double)p->total_iters);
    }
    case RT_TORCH_CONSTANT:
        return lr * (p->factor + (double)(t >= p->total_iters) * (1.0 - p->factor));
    }
    return lr;
}

double rt_schedule_lr(const rt_schedule *s, int64_t step)
{
    if (s->nparts == 0) return megatron_lr(s, step);
    int i = 0;
    while (i + 1 < s->nparts && s->part_at[i + 1] <= step) i++;
    return rt_torch_part_lr(&s->part[i], s->lr, step - s->part_at[i]);
}

/* ---- the spec parser -------------------------------------------------------------
 *
 *   spec   := part { "then" part "at" INT }
 *   part   := NAME "(" [ arg { "," arg } ] ")"
 *   arg    := KEY "=" ( NUMBER | "[" [ INT { "," INT } ] "]" )
 */

typedef struct lexer {
    const char *s;
    size_t at;
    char *err;
    size_t cap, err_at;
} lexer;

static bool lex_fail(lexer *l, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool lex_fail(lexer *l, size_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->err, l->cap, fmt, ap);
    va_end(ap);
    l->err_at = at;
    return false;
}

static void lex_ws(lexer *l)
{
    while (isspace((unsigned char)l->s[l->at])) l->at++;
}

/* The next token's text for messages: up to the next delimiter. */
static int tok_len(const lexer *l, size_t at)
{
    size_t n = 0;
    while (l->s[at + n] && !isspace((unsigned char)l->s[at + n]) && !strchr("(),=[]", l->s[at + n])) n++;
    if (n == 0 && l->s[at]) n = 1;
    return (int)(n > 40 ? 40 : n);
}

static bool lex_punct(lexer *l, char c, const char *what)
{
    lex_ws(l);
    if (l->s[l->at] == c) { l->at++; return true; }
    if (!l->s[l->at]) return lex_fail(l, l->at, "expected '%c' %s, found the end", c, what);
    return lex_fail(l, l->at, "expected '%c' %s, found '%.*s'", c, what, tok_len(l, l->at), l->s + l->at);
}

static bool lex_ident(lexer *l, char *buf, size_t cap, size_t *start, const char *what)
{
    lex_ws(l);
    *start = l->at;
    size_t n = 0;
    if (isalpha((unsigned char)l->s[l->at]) || l->s[l->at] == '_')
        while (isalnum((unsigned char)l->s[l->at + n]) || l->s[l->at + n] == '_') n++;
    if (n == 0) {
        if (!l->s[l->at]) return lex_fail(l, l->at, "expected %s, found the end", what);
        return lex_fail(l, l->at, "expected %s, found '%.*s'", what, tok_len(l, l->at), l->s + l->at);
    }
    if (n >= cap) return lex_fail(l, l->at, "'%.*s' is too long a name", tok_len(l, l->at), l->s + l->at);
    memcpy(buf, l->s + l->at, n);
    buf[n] = 0;
    l->at += n;
    return true;
}

static bool at_delim(char c) { return !c || isspace((unsigned char)c) || strchr("(),=[]", c); }

static bool lex_number(lexer *l, double *v, size_t *start)
{
    lex_ws(l);
    *start = l->at;
    char *end;
    errno = 0;
    *v = strtod(l->s + l->at, &end);
    size_t n = (size_t)(end - (l->s + l->at));
    if (n == 0 || !at_delim(*end) || errno == ERANGE || !isfinite(*v))
        return lex_fail(l, l->at, "'%.*s' is not a finite number", tok_len(l, l->at), l->s + l->at);
    l->at += n;
    return true;
}

static bool lex_int(lexer *l, int64_t *v, size_t *start)
{
    lex_ws(l);
    *start = l->at;
    char *end;
    errno = 0;
    long long x = strtoll(l->s + l->at, &end, 10);
    size_t n = (size_t)(end - (l->s + l->at));
    if (n == 0 || !at_delim(*end) || errno == ERANGE)
        return lex_fail(l, l->at, "'%.*s' is not an integer", tok_len(l, l->at), l->s + l->at);
    l->at += n;
    *v = x;
    return true;
}

/* Scheduler names: tgc's short ones and PyTorch's class names. */
static const struct {
    const char *name, *cls;
    rt_torch_kind kind;
    const char *keys; /* allowed keys; '!' marks the required ones */
} kinds[] = {
    {"step", "StepLR", RT_TORCH_STEP, "step_size! gamma"},
    {"multistep", "MultiStepLR", RT_TORCH_MULTISTEP, "milestones! gamma"},
    {"exponential", "ExponentialLR", RT_TORCH_EXPONENTIAL, "gamma!"},
    {"cosine", "CosineAnnealingLR", RT_TORCH_COSINE, "T_max! eta_min"},
    {"cosine_restarts", "CosineAnnealingWarmRestarts", RT_TORCH_COSINE_RESTARTS, "T_0! T_mult eta_min"},
    {"linear", "LinearLR", RT_TORCH_LINEAR, "start_factor end_factor total_iters"},
    {"constant", "ConstantLR", RT_TORCH_CONSTANT, "factor total_iters"},
};

/* Whether key is among keys (space separated, '!' suffix = required). */
static bool key_allowed(const char *keys, const char *key)
{
    size_t n = strlen(key);
    for (const char *k = keys; *k;) {
        size_t m = strcspn(k, " !");
        if (m == n && strncmp(k, key, n) == 0) return true;
        k += m;
        while (*k == ' ' || *k == '!') k++;
    }
    return false;
}

static void keys_list(const char *keys, char *buf, size_t cap)
{
    size_t j = 0;
    for (const char *k = keys; *k && j + 3 < cap; k++) {
        if (*k == '!') continue;
        if (*k == ' ') { buf[j++] = ','; buf[j++] = ' '; continue; }
        buf[j++] = *k;
    }
    buf[j] = 0;
}

typedef enum { V_INT, V_FLOAT, V_LIST } vkind;

static vkind key_kind(const char *key)
{
    if (strcmp(key, "milestones") == 0) return V_LIST;
    static const char *const ints[] = {"step_size", "T_max", "T_0", "T_mult", "total_iters"};
    for (size_t i = 0; i < ARRAY_LEN(ints); i++)
        if (strcmp(ints[i], key) == 0) return V_INT;
    return V_FLOAT;
}

static bool parse_list(lexer *l, rt_torch_part *p)
{
    if (!lex_punct(l, '[', "to open the list of milestones")) return false;
    lex_ws(l);
    if (l->s[l->at] == ']') { l->at++; return true; }
    for (;;) {
        int64_t v;
        size_t at;
        if (!lex_int(l, &v, &at)) return false;
        if (p->nmilestones == RT_SCHED_MAX_MILESTONES)
            return lex_fail(l, at, "more than %d milestones", RT_SCHED_MAX_MILESTONES);
        if (v < 0 || (p->nmilestones && v <= p->milestones[p->nmilestones - 1]))
            return lex_fail(l, at, "milestone %lld: milestones must be increasing and non-negative", (long long)v);
        p->milestones[p->nmilestones++] = v;
        lex_ws(l);
        if (l->s[l->at] == ']') { l->at++; return true; }
        if (!lex_punct(l, ',', "or ']' in the list of milestones")) return false;
    }
}

static bool set_key(lexer *l, rt_torch_part *p, const char *key)
{
    size_t at;
    vkind k = key_kind(key);
    if (k == V_LIST) return parse_list(l, p);
    int64_t iv = 0;
    double fv = 0.0;
    if (k == V_INT ? !lex_int(l, &iv, &at) : !lex_number(l, &fv, &at)) return false;
    if (k == V_INT && iv < 1) return lex_fail(l, at, "%s=%lld: must be at least 1", key, (long long)iv);
    if (strcmp(key, "step_size") == 0) p->step_size = iv;
    else if (strcmp(key, "T_max") == 0) p->t_max = iv;
    else if (strcmp(key, "T_0") == 0) p->t_0 = iv;
    else if (strcmp(key, "T_mult") == 0) p->t_mult = iv;
    else if (strcmp(key, "total_iters") == 0) p->total_iters = iv;
    else if (strcmp(key, "gamma") == 0) p->gamma = fv;
    else if (strcmp(key, "eta_min") == 0) p->eta_min = fv;
    else if (strcmp(key, "start_factor") == 0 || strcmp(key, "factor") == 0) {
        if (!(fv > 0.0 && fv <= 1.0)) return lex_fail(l, at, "%s=%g: must be in (0, 1]", key, fv);
        if (key[0] == 's') p->start_factor = fv;
        else p->factor = fv;
    } else if (strcmp(key, "end_factor") == 0) {
        if (!(fv >= 0.0 && fv <= 1.0)) return lex_fail(l, at, "%s=%g: must be in [0, 1]", key, fv);
        p->end_factor = fv;
    }
    return true;
}

static void part_defaults(rt_torch_part *p, rt_torch_kind kind)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->gamma = 0.1;
    p->t_mult = 1;
    p->start_factor = 1.0 / 3.0;
    p->end_factor = 1.0;
    p->factor = 1.0 / 3.0;
    p->total_iters = 5;
}

static bool parse_args(lexer *l, rt_torch_part *p, const char *keys, const char *name, size_t name_at)
{
    char seen[8][40];
    int nseen = 0;
    if (!lex_punct(l, '(', "after the scheduler name")) return false;
    lex_ws(l);
    if (l->s[l->at] == ')') l->at++;
    else for (;;) {
        char key[40];
        size_t at;
        if (!lex_ident(l, key, sizeof key, &at, "an argument name")) return false;
        if (!key_allowed(keys, key)) {
            char all[96];
            keys_list(keys, all, sizeof all);
            return lex_fail(l, at, "%s has no argument '%s' (it takes %s)", name, key, all);
        }
        for (int i = 0; i < nseen; i++)
            if (strcmp(seen[i], key) == 0) return lex_fail(l, at, "argument '%s' given twice", key);
        strcpy(seen[nseen++], key);
        if (!lex_punct(l, '=', "after the argument name") || !set_key(l, p, key)) return false;
        lex_ws(l);
        if (l->s[l->at] == ')') { l->at++; break; }
        if (!lex_punct(l, ',', "or ')' after an argument")) return false;
    }
    for (const char *k = keys; *k;) {
        size_t m = strcspn(k, " !");
        bool required = k[m] == '!';
        bool given = false;
        for (int i = 0; i < nseen; i++) given |= strlen(seen[i]) == m && strncmp(seen[i], k, m) == 0;
        if (required && !given) return lex_fail(l, name_at, "%s needs the argument %.*s", name, (int)m, k);
        k += m;
        while (*k == ' ' || *k == '!') k++;
    }
    return true;
}

static bool parse_part(lexer *l, rt_torch_part *p)
{
    char name[40];
    size_t at;
    if (!lex_ident(l, name, sizeof name, &at, "a scheduler name")) return false;
    for (size_t i = 0; i < ARRAY_LEN(kinds); i++) {
        if (strcmp(kinds[i].name, name) != 0 && strcmp(kinds[i].cls, name) != 0) continue;
        part_defaults(p, kinds[i].kind);
        return parse_args(l, p, kinds[i].keys, name, at);
    }
    return lex_fail(l, at, "unknown scheduler '%s' (expected step, multistep, exponential, cosine, "
                    "cosine_restarts, linear or constant, or PyTorch's class names StepLR, ...)", name);
}

bool rt_schedule_parse_torch(rt_schedule *s, const char *spec, char *err, size_t cap, size_t *at)
{
    lexer l = {spec, 0, err, cap, 0};
    s->nparts = 0;
    s->part_at[0] = 0;
    bool ok = true;
    for (;;) {
        if (s->nparts == RT_SCHED_MAX_PARTS) {
            ok = lex_fail(&l, l.at, "more than %d schedulers in sequence", RT_SCHED_MAX_PARTS);
            break;
        }
        if (!(ok = parse_part(&l, &s->part[s->nparts]))) break;
        s->nparts++;
        if (s->nparts > 1) {
            char word[40];
            size_t wat, nat;
            int64_t m;
            if (!(ok = lex_ident(&l, word, sizeof word, &wat, "'at STEP' after a scheduler that follows 'then'")))
                break;
            if (strcmp(word, "at") != 0) {
                ok = lex_fail(&l, wat, "expected 'at STEP' after a scheduler that follows 'then', found '%s'", word);
                break;
            }
            if (!(ok = lex_int(&l, &m, &nat))) break;
            if (m < 1 || m <= s->part_at[s->nparts - 2]) {
                ok = lex_fail(&l, nat, "at %lld: the steps where schedulers start must increase from 1", (long long)m);
                break;
            }
            s->part_at[s->nparts - 1] = m;
        }
        lex_ws(&l);
        if (!spec[l.at]) break;
        char word[40];
        size_t wat;
        if (!(ok = lex_ident(&l, word, sizeof word, &wat, "'then' or the end"))) break;
        if (strcmp(word, "then") != 0) {
            ok = lex_fail(&l, wat, "expected 'then' or the end, found '%s'", word);
            break;
        }
    }
    if (!ok) {
        s->nparts = 0;
        *at = l.err_at;
    }
    return ok;
}
