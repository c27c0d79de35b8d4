/* `tgc sample`: text from trained weights (docs/sampling.md). This file
 * scans the command line and prints (the prompt and each token as it is
 * made, the figures on standard error); the model's forward-only programs,
 * the weights, the tokenizer, the KV-cache loop and --logits-out are the
 * library's (api/generate.c, the side of tgc_generate that this command
 * shares). */
#include "cli/sample_cmd.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/generate.h"
#include "cli/args.h"
#include "cli/config.h"
#include "passes/pass.h"
#include "support/util.h"

#define MAX_SETS 64
#define MAX_TOKENS 1000000

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };
/* sample's own options (tgc_config_parse_cmd's extra ids); --backend is the
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
    fe_override sets[MAX_SETS];
    int nsets;
    int32_t *ids; /* --prompt-tokens, parsed */
    int64_t nids;
    bool no_kv_cache, check_kv_cache;
    rt_backend backend; /* --backend: every program of the sampler runs there */
    tgc_tokenizer_opts tok_opts; /* --tokenizer-type and its files (the configuration table's) */
    int attention;      /* --attention-backend: PASS_ATTENTION_* (the attention pass of a .tg model) */
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
    o->ids = xcalloc(cap, sizeof *o->ids);
    char *copy = xstrdup(list);
    int rc = EXIT_OK;
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && rc == EXIT_OK; t = strtok_r(NULL, ",", &save)) {
        int64_t v;
        if (!parse_i64(t, &v) || v < 0 || v > INT32_MAX)
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
        if (!parse_i64(arg, &o->tokens) || o->tokens < 0 || o->tokens > MAX_TOKENS)
            return usage("--tokens '%s': expected an integer from 0 to 1000000", arg);
        return EXIT_OK;
    case OPT_TEMPERATURE:
        if (!parse_double(arg, &o->temperature) || !isfinite(o->temperature) || o->temperature < 0)
            return usage("--temperature '%s': expected a number >= 0 (0: greedy)", arg);
        return EXIT_OK;
    case OPT_TOP_K:
        if (!parse_i64(arg, &o->top_k) || o->top_k < 0)
            return usage("--top-k '%s': expected an integer >= 0 (0: every token)", arg);
        return EXIT_OK;
    case OPT_SEED:
        if (!parse_i64(arg, &o->seed) || o->seed < 0) return usage("--seed '%s': expected an integer >= 0", arg);
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
    tgc_cmdline cl = {config_opts, own, (int)ARRAY_LEN(own), parse_option, o, 0};
    tgc_config c;
    tgc_config_defaults(&c);
    const char *pos[1] = {NULL};
    int npos = 0;
    bool help = false;
    int rc = tgc_config_parse_cmd(&c, argc, argv, &cl, pos, &npos, 1, o->sets, &o->nsets, MAX_SETS, &help);
    if (rc) return rc;
    if (help) {
        help_fn(stdout);
        return -1;
    }
    o->model = pos[0];
    pass_attention_backend_parse(c.attention_backend, &o->attention);
    o->tok_opts = (tgc_tokenizer_opts){c.tokenizer_type, c.vocab_file, c.merge_file, c.tokenizer_model};
    char why[512];
    if (!tgc_tokenizer_opts_check(&o->tok_opts, why, sizeof why)) return usage("%s", why);
    o->backend = strcmp(c.backend, "cuda") == 0 ? RT_BACKEND_CUDA
               : strcmp(c.backend, "sim") == 0  ? RT_BACKEND_SIM
                                                : RT_BACKEND_CPU;
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

/* How each new token is printed: a tokenizer's text (decoded), the bytes
 * of a byte-level model's text prompt, or ids. */
typedef struct printer {
    api_gen_text t;
    bool decoded, text;
} printer;

static bool print_token(void *user, const int32_t *ctx, int64_t len, diag *d)
{
    printer *p = user;
    if (p->decoded) {
        const char *s;
        size_t n;
        if (!api_gen_text_add(&p->t, ctx, len, &s, &n, d)) return false;
        fwrite(s, 1, n, stdout);
    } else put_token(ctx[len - 1], p->text, len == 1, stdout);
    fflush(stdout);
    return true;
}

static int generate(api_gen *G, const api_gen_info *in, const sample_opts *o, diag *d)
{
    const char *where = o->prompt ? "--prompt" : "--prompt-tokens";
    int64_t len;
    int32_t *ctx = api_gen_encode(G, o->prompt, o->ids, o->nids, o->tokens, &len, where, d);
    if (!ctx) return EXIT_INPUT;
    if (o->prompt && in->tok)
        fprintf(stderr, "tgc sample: tokenizer %s (vocabulary %lld, %s): the prompt is %lld tokens\n",
                tgc_tokenizer_kind_name(tgc_tokenizer_kind_of(in->tok)), (long long)tgc_tokenizer_vocab_size(in->tok),
                in->tok_from, (long long)len);
    if (!api_gen_check_prompt(G, ctx, len, where, o->prompt && !in->tok, d) ||
        (o->logits_out && !api_gen_write_logits(G, ctx, len, o->logits_out, d))) {
        free(ctx);
        return EXIT_INPUT;
    }
    printer pr = {.decoded = o->prompt && in->tok, .text = o->prompt && !in->tok && in->vocab <= 256};
    if (pr.decoded) {
        const char *s;
        size_t n;
        bool ok = api_gen_text_begin(&pr.t, in->tok, ctx, len, &s, &n, d);
        if (ok) fwrite(s, 1, n, stdout);
        if (!ok) {
            api_gen_text_end(&pr.t);
            free(ctx);
            return EXIT_INPUT;
        }
    } else
        for (int64_t i = 0; i < len; i++) put_token(ctx[i], pr.text, i == 0, stdout);
    fflush(stdout);
    api_gen_stats st;
    bool ok = api_gen_run(G, ctx, &len, o->tokens, o->temperature, o->top_k, (uint64_t)o->seed, print_token, &pr, &st,
                          d);
    fputc('\n', stdout);
    fflush(stdout);
    int rc = ok ? EXIT_OK : EXIT_INPUT;
    if (ok) {
        char how[256];
        if (in->kv_cache)
            snprintf(how, sizeof how, "KV cache: %" PRId64 " forward%s over %" PRId64 " positions, %" PRId64
                     " decoding step%s of one", st.prefills, st.prefills == 1 ? "" : "s", in->context,
                     st.made - st.prefills, st.made - st.prefills == 1 ? "" : "s");
        else snprintf(how, sizeof how, "each token: one forward over %" PRId64 " positions, no KV cache", in->context);
        fprintf(stderr, "tgc sample: %" PRId64 " tokens in %.2f s, %.1f tokens/s (%s)\n", st.made, st.seconds,
                st.seconds > 0 ? (double)st.made / st.seconds : 0.0, how);
    }
    if (ok && in->check_kv_cache) {
        fprintf(stderr, "tgc sample: KV cache check: %" PRId64 " tokens' logits against the full forward: max "
                "|difference| %.3g (largest logit %.3g, tolerance %.3g): %s\n", st.checked, st.max_diff,
                st.max_abs, st.tol, st.check_ok ? "ok" : "FAILED");
        if (!st.check_ok) rc = EXIT_INPUT;
    }
    if (pr.decoded) api_gen_text_end(&pr.t);
    free(ctx);
    return rc;
}

static int sample_run(const sample_opts *o, diag *d)
{
    api_gen_opts go = {.model = o->model, .weights = o->weights, .sets = o->sets, .nsets = o->nsets,
                       .no_kv_cache = o->no_kv_cache, .check_kv_cache = o->check_kv_cache, .backend = o->backend,
                       .attention = o->attention, .tok = o->tok_opts, .tok_from = "from the command line"};
    api_gen *G = api_gen_new(&go, d, stderr);
    if (!G) return EXIT_INPUT;
    api_gen_info in;
    api_gen_describe(G, &in);
    fprintf(stderr, "tgc sample: model %s (%lld parameters, context %" PRId64 ", vocabulary %" PRId64 "), weights %s, "
            "backend %s\n", in.model, in.params, in.context, in.vocab, in.weights, in.backend);
    int rc = generate(G, &in, o, d);
    api_gen_free(G);
    return rc;
}

int cli_sample(int argc, char **argv, void (*help_fn)(FILE *))
{
    sample_opts o;
    int rc = parse(&o, argc, argv, help_fn);
    if (rc == EXIT_OK) {
        diag d;
        diag_init(&d, stderr);
        rc = sample_run(&o, &d);
        diag_finish(&d);
        diag_free(&d);
    }
    for (int i = 0; i < o.nsets; i++) free((char *)o.sets[i].name);
    free(o.ids);
    return rc < 0 ? EXIT_OK : rc;
}
