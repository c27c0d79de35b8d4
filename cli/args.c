#include "cli/args.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "tgc.h"

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tgc %s: error: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    size_t word = strcspn(cmd, " ");
    fprintf(stderr, "\nTry 'tgc %.*s --help'.\n", (int)word, cmd);
    return 2;
}

void cli_args_init(cli_args *a, const char *cmd, int argc, char **argv, const cli_opt *opts, int nopts)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
    a->next = 1;
    a->opts = opts;
    a->nopts = nopts;
}

/* Whether word is an option rather than a value: "-" (standard input)
 * and numbers ("-1", "-1e-3") are values. */
static bool looks_like_option(const char *word)
{
    double v;
    return word[0] == '-' && word[1] && !tgc_parse_double(word, &v);
}

static const cli_opt *find_exact(const cli_args *a, const char *name, size_t len)
{
    for (int i = 0; i < a->nopts; i++)
        if (strlen(a->opts[i].name) == len && strncmp(a->opts[i].name, name, len) == 0) return &a->opts[i];
    return NULL;
}

/* An unknown long option; the options it abbreviates, if any, are named. */
static int unknown_long(const cli_args *a, const char *name, size_t len)
{
    size_t cap = 64, used = 0;
    char *cands = cli_xmalloc(cap);
    int n = 0;
    for (int i = 0; len && i < a->nopts; i++) {
        if (strlen(a->opts[i].name) <= 1 || strncmp(a->opts[i].name, name, len) != 0) continue;
        size_t need = used + strlen(a->opts[i].name) + 5;
        if (need > cap) cands = cli_xrealloc(cands, cap = 2 * need);
        used += (size_t)snprintf(cands + used, cap - used, "%s--%s", n++ ? ", " : "", a->opts[i].name);
    }
    if (n)
        cli_usage_error(a->cmd, "unknown option '--%.*s': options are matched by their whole name (did you mean %s?)",
                        (int)len, name, cands);
    else cli_usage_error(a->cmd, "unknown option '--%.*s'", (int)len, name);
    free(cands);
    return CLI_ARGS_ERROR;
}

/* Records o's id; a second time is an error unless o is repeatable. */
static int note_seen(cli_args *a, const cli_opt *o)
{
    if (o->repeatable) return o->id;
    for (int i = 0; i < a->nseen; i++) {
        if (a->seen[i] != o->id) continue;
        if (!o->has_value) cli_usage_error(a->cmd, "%s is given twice%s%s", a->seen_given[i],
                                           strcmp(a->seen_given[i], a->given) ? ", as " : "",
                                           strcmp(a->seen_given[i], a->given) ? a->given : "");
        else cli_usage_error(a->cmd, "an option is given twice: %s '%s', then %s '%s'; give it once",
                             a->seen_given[i], a->seen_value[i], a->given, a->value);
        return CLI_ARGS_ERROR;
    }
    if (a->nseen < (int)N_OF(a->seen)) {
        a->seen[a->nseen] = o->id;
        snprintf(a->seen_given[a->nseen], sizeof a->seen_given[a->nseen], "%s", a->given);
        a->seen_value[a->nseen++] = a->value;
    }
    return o->id;
}

/* o's value: after '=' (inline), else the next argument unless that is an option. */
static int take_value(cli_args *a, const cli_opt *o, const char *inline_value)
{
    a->value = NULL;
    if (!o->has_value) {
        if (inline_value) {
            cli_usage_error(a->cmd, "%s takes no value (got '%s')", a->given, inline_value);
            return CLI_ARGS_ERROR;
        }
        return note_seen(a, o);
    }
    if (inline_value) a->value = inline_value;
    else if (a->next < a->argc && !looks_like_option(a->argv[a->next])) a->value = a->argv[a->next++];
    else {
        if (a->next < a->argc)
            cli_usage_error(a->cmd, "missing value for '%s' (the next argument, '%s', is an option; write %s=VALUE "
                            "for a value that starts with '-')", a->given, a->argv[a->next], a->given);
        else cli_usage_error(a->cmd, "missing value for '%s'", a->given);
        return CLI_ARGS_ERROR;
    }
    return note_seen(a, o);
}

const char *cli_args_next_word(cli_args *a)
{
    if (a->only_positional || a->next >= a->argc || looks_like_option(a->argv[a->next])) return NULL;
    return a->argv[a->next++];
}

int cli_args_next(cli_args *a)
{
    if (a->next >= a->argc) return CLI_ARGS_END;
    const char *w = a->argv[a->next++];
    if (a->only_positional || !looks_like_option(w)) {
        a->value = w;
        return CLI_ARGS_POSITIONAL;
    }
    if (strcmp(w, "--") == 0) {
        a->only_positional = true;
        return cli_args_next(a);
    }
    if (w[1] == '-') {
        const char *name = w + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const cli_opt *o = len > 1 ? find_exact(a, name, len) : NULL;
        if (!o) return unknown_long(a, name, len);
        snprintf(a->given_buf, sizeof a->given_buf, "--%.*s", (int)len, name);
        a->given = a->given_buf;
        return take_value(a, o, eq ? eq + 1 : NULL);
    }
    const cli_opt *o = find_exact(a, w + 1, 1);
    if (!o || (!o->has_value && w[2])) {
        cli_usage_error(a->cmd, "unknown option '%s'", w);
        return CLI_ARGS_ERROR;
    }
    snprintf(a->given_buf, sizeof a->given_buf, "-%c", w[1]);
    a->given = a->given_buf;
    return take_value(a, o, w[2] ? w + 2 : NULL);
}
