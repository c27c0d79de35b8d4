/* `tgc sample`: text from trained weights (docs/sampling.md). This file
 * scans the command line and prints (the prompt and each token as it is
 * made, the figures on standard error); the generation is the library's,
 * through its public API (include/tgc.h: tgc_generator_new,
 * tgc_generate_ex with a callback per token). */
#include "cli/sample_cmd.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/config.h"
#include "cli/overrides.h"
#include "cli/util.h"
#include "tgc.h"

#define MAX_SETS 64
#define MAX_TOKENS 1000000

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };
/* sample's own options (cli_options_parse_cmd's extra ids); --backend is the
 * configuration table's (cli/config.c), as for tgc run. */
enum {
    OPT_WEIGHTS = TGC_CMDLINE_ID_MIN, OPT_PROMPT, OPT_PROMPT_TOKENS, OPT_TOKENS, OPT_TEMPERATURE, OPT_TOP_K,
    OPT_SEED, OPT_NO_KV_CACHE, OPT_CHECK_KV_CACHE, OPT_LOGITS_OUT
};

typedef struct sample_opts {
    const char *model, *weights, *prompt, *prompt_tokens;
    const char *logits_out; /* --logits-out FILE.safetensors: the prompt's logits */
    int64_t tokens, top_k, seed;
    double temperature;
    cli_override sets[MAX_SETS];
    int nsets;
    int32_t *ids; /* --prompt-tokens, parsed */
    int64_t nids;
    bool no_kv_cache, check_kv_cache;
    tgc_options *lib; /* the table's options (--backend, --attention-backend, the tokenizer's) and the overrides */
} sample_opts;


static int usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "tgc sample: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'tgc sample --help'.\n");
    return EXIT_USAGE;
}

/* "1,2,3" -> o->ids (non-negative integers; their range is checked
 * against the vocabulary later). */
static int parse_ids(sample_opts *o, const char *list)
{
    size_t cap = strlen(list) / 2 + 1;
    o->ids = cli_xmalloc(cap * sizeof *o->ids);
    memset(o->ids, 0, cap * sizeof *o->ids);
    char *copy = cli_xstrdup(list);
    int rc = EXIT_OK;
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && rc == EXIT_OK; t = strtok_r(NULL, ",", &save)) {
        int64_t v;
        if (!tgc_parse_i64(t, &v) || v < 0 || v > INT32_MAX)
            rc = usage("--prompt-tokens: '%s' is not a token id (a non-negative integer)", t);
        else o->ids[o->nids++] = (int32_t)v;
    }
    if (rc == EXIT_OK && o->nids == 0) rc = usage("--prompt-tokens '%s': expected ids such as 1,2,3", list);
    free(copy);
    return rc;
}

static int parse_option(void *user, int id, const char *given, const char *arg)
{
    (void)given;
    sample_opts *o = user;
    switch (id) {
    case OPT_WEIGHTS: o->weights = arg; return EXIT_OK;
    case OPT_PROMPT: o->prompt = arg; return EXIT_OK;
    case OPT_PROMPT_TOKENS: o->prompt_tokens = arg; return parse_ids(o, arg);
    case OPT_TOKENS:
        if (!tgc_parse_i64(arg, &o->tokens) || o->tokens < 0 || o->tokens > MAX_TOKENS)
            return usage("--tokens '%s': expected an integer from 0 to 1000000", arg);
        return EXIT_OK;
    case OPT_TEMPERATURE:
        if (!tgc_parse_double(arg, &o->temperature) || !isfinite(o->temperature) || o->temperature < 0)
            return usage("--temperature '%s': expected a number >= 0 (0: greedy)", arg);
        return EXIT_OK;
    case OPT_TOP_K:
        if (!tgc_parse_i64(arg, &o->top_k) || o->top_k < 0)
            return usage("--top-k '%s': expected an integer >= 0 (0: every token)", arg);
        return EXIT_OK;
    case OPT_SEED:
        if (!tgc_parse_i64(arg, &o->seed) || o->seed < 0) return usage("--seed '%s': expected an integer >= 0", arg);
        return EXIT_OK;
    case OPT_NO_KV_CACHE: o->no_kv_cache = true; return EXIT_OK;
    case OPT_CHECK_KV_CACHE: o->check_kv_cache = true; return EXIT_OK;
    case OPT_LOGITS_OUT: o->logits_out = arg; return EXIT_OK;
    }
    return EXIT_USAGE;
}

/* Returns EXIT_OK, EXIT_USAGE, or -1 after printing the help. --set, the
 * model flags, --help and --backend (its word checked against the table's
 * choices, with tgc run's message) are the configuration parser's. */
static int parse(sample_opts *o, int argc, char **argv, void (*help_fn)(FILE *))
{
    static const char *const config_opts[] = {"backend",    "attention-backend", "tokenizer-type", "vocab-file",
                                              "merge-file", "tokenizer-model",   NULL};
    static const cli_opt own[] = {
        {"weights", true, false, OPT_WEIGHTS}, {"prompt", true, false, OPT_PROMPT},
        {"prompt-tokens", true, false, OPT_PROMPT_TOKENS}, {"tokens", true, false, OPT_TOKENS},
        {"temperature", true, false, OPT_TEMPERATURE}, {"top-k", true, false, OPT_TOP_K},
        {"seed", true, false, OPT_SEED}, {"no-kv-cache", false, false, OPT_NO_KV_CACHE},
        {"check-kv-cache", false, false, OPT_CHECK_KV_CACHE}, {"logits-out", true, false, OPT_LOGITS_OUT}};
    *o = (sample_opts){.tokens = -1, .temperature = 1.0, .seed = 1};
    tgc_cmdline cl = {config_opts, own, (int)(sizeof own / sizeof *own), parse_option, o, 0};
    tgc_set_diagnostics(stderr);
    if (tgc_options_new(&o->lib) != TGC_OK) return EXIT_INPUT;
    tgc_options_set_origin(o->lib, "from the command line");
    const char *pos[1] = {NULL};
    int npos = 0;
    bool help = false;
    int rc = cli_options_parse_cmd(o->lib, argc, argv, &cl, pos, &npos, 1, o->sets, &o->nsets, MAX_SETS, &help);
    if (rc) return rc;
    if (help) {
        help_fn(stdout);
        return -1;
    }
    o->model = pos[0];
    /* The tokenizer options' check, in this command's words. */
    tgc_set_diagnostics(NULL);
    bool tok_ok = tgc_tokenizer_check(o->lib) == TGC_OK;
    tgc_set_diagnostics(stderr);
    if (!tok_ok) {
        const char *why = tgc_last_error(), *prefix = "tgc: error: ";
        return usage("%s", strncmp(why, prefix, strlen(prefix)) == 0 ? why + strlen(prefix) : why);
    }
    if (!o->model) return usage("missing MODEL (a .tg model, text IR or a compiled plan)%s", "");
    if (!o->weights) return usage("missing --weights FILE.safetensors|CHECKPOINT_DIR%s", "");
    if (!o->prompt == !o->prompt_tokens) return usage("give one of --prompt TEXT and --prompt-tokens IDS%s", "");
    if (o->prompt && !*o->prompt) return usage("--prompt is empty: the model needs at least one token%s", "");
    if (o->tokens < 0) return usage("missing --tokens N (how many tokens to generate)%s", "");
    if (o->no_kv_cache && o->check_kv_cache)
        return usage("--check-kv-cache compares the KV cache with the full forward; drop --no-kv-cache%s", "");
    return EXIT_OK;
}

/* ---- printing ------------------------------------------------------------------------ */

/* Prints one byte as text: printable ASCII, newline and tab as they are,
 * a backslash doubled, anything else as \xNN. */
static void put_byte(int c, FILE *out)
{
    if (c == '\\') fputs("\\\\", out);
    else if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) fputc(c, out);
    else fprintf(out, "\\x%02x", c);
}

static void put_token(int32_t t, bool text, bool first, FILE *out)
{
    if (text) put_byte(t, out);
    else fprintf(out, "%s%" PRId32, first ? "" : ",", t);
}

/* How the prompt and each new token are printed: a tokenizer's text
 * (decoded), the bytes of a byte-level model's text prompt, or ids. */
typedef struct printer {
    const sample_opts *o;
    const tgc_generator_info *in;
    const tgc_tokenizer *tok;
    bool decoded, text;
    bool started; /* the prompt was printed: the output ends with a newline */
} printer;

static int print_event(void *user, tgc_generate_event ev, const int32_t *tokens, int64_t n, const char *s, size_t len)
{
    printer *p = user;
    if (ev == TGC_GENERATE_ENCODED) {
        fprintf(stderr, "tgc sample: tokenizer %s (vocabulary %lld, %s): the prompt is %lld tokens\n",
                tgc_tokenizer_type(p->tok), (long long)tgc_tokenizer_vocab_size(p->tok),
                p->in->tokenizer_from_options ? "from the command line" : p->in->tokenizer_origin, (long long)n);
        return 0;
    }
    if (p->decoded) fwrite(s, 1, len, stdout);
    else
        for (int64_t i = 0; i < n; i++) put_token(tokens[i], p->text, ev == TGC_GENERATE_PROMPT && i == 0, stdout);
    fflush(stdout);
    p->started = true;
    return 0;
}

static int generate(tgc_generator *G, const tgc_generator_info *in, const sample_opts *o)
{
    bool tok = in->tokenizer_origin != NULL;
    printer pr = {.o = o, .in = in, .tok = tgc_generator_tokenizer(G), .decoded = o->prompt && tok, .text = o->prompt && !tok && in->vocab <= 256};
    tgc_generate_args args = {.text = o->prompt, .prompt_tokens = o->prompt ? NULL : o->ids, .nprompt = o->nids,
                              .n = o->tokens, .temperature = o->temperature, .top_k = o->top_k,
                              .seed = (uint64_t)o->seed, .prompt_name = o->prompt ? "--prompt" : "--prompt-tokens",
                              .logits_out = o->logits_out, .fn = print_event, .user = &pr};
    tgc_generation out;
    tgc_generate_stats st;
    tgc_status s = tgc_generate_ex(G, &args, &out, &st);
    tgc_generation_free(&out);
    if (!pr.started) return EXIT_INPUT;
    fputc('\n', stdout);
    fflush(stdout);
    if (!st.done) return EXIT_INPUT;
    char how[256];
    if (in->kv_cache)
        snprintf(how, sizeof how, "KV cache: %" PRId64 " forward%s over %" PRId64 " positions, %" PRId64
                 " decoding step%s of one", st.prefills, st.prefills == 1 ? "" : "s", in->context,
                 st.made - st.prefills, st.made - st.prefills == 1 ? "" : "s");
    else snprintf(how, sizeof how, "each token: one forward over %" PRId64 " positions, no KV cache", in->context);
    fprintf(stderr, "tgc sample: %" PRId64 " tokens in %.2f s, %.1f tokens/s (%s)\n", st.made, st.seconds,
            st.seconds > 0 ? (double)st.made / st.seconds : 0.0, how);
    if (in->check_kv_cache)
        fprintf(stderr, "tgc sample: KV cache check: %" PRId64 " tokens' logits against the full forward: max "
                "|difference| %.3g (largest logit %.3g, tolerance %.3g): %s\n", st.checked, st.max_diff,
                st.max_abs, st.tol, st.check_ok ? "ok" : "FAILED");
    return s == TGC_OK ? EXIT_OK : EXIT_INPUT;
}

static int sample_run(const sample_opts *o)
{
    unsigned flags = (o->no_kv_cache ? TGC_GENERATE_NO_KV_CACHE : 0) | (o->check_kv_cache ? TGC_GENERATE_CHECK_KV_CACHE : 0);
    tgc_generator *G;
    if (tgc_generator_new(o->model, o->weights, o->lib, flags, &G) != TGC_OK) return EXIT_INPUT;
    tgc_generator_info in;
    tgc_generator_info_get(G, &in);
    fprintf(stderr, "tgc sample: model %s (%lld parameters, context %" PRId64 ", vocabulary %" PRId64 "), weights %s, "
            "backend %s\n", in.model, (long long)in.params, in.context, in.vocab, in.weights, in.backend);
    int rc = generate(G, &in, o);
    tgc_generator_free(G);
    return rc;
}

int cli_sample(int argc, char **argv, void (*help_fn)(FILE *))
{
    sample_opts o;
    int rc = parse(&o, argc, argv, help_fn);
    if (rc == EXIT_OK) rc = sample_run(&o);
    for (int i = 0; i < o.nsets; i++) free((char *)o.sets[i].name);
    free(o.ids);
    tgc_options_free(o.lib);
    return rc < 0 ? EXIT_OK : rc;
}
