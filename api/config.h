/* The training / parallelism configuration of every tgc command and of
 * the library (include/tgc.h), with Megatron-LM's long option names. One
 * table (api/options.def) declares every option once, a row each: its
 * names, kind, field, default, checks, the keys of the IR's record it
 * sets, the pass and run options it fills, and help; the command line
 * (cli/config.h) and tgc_options_set read it. */
#ifndef TGC_API_CONFIG_H
#define TGC_API_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The table's rows at most (tgc_config.seen). */
#define TGC_CONFIG_NOPTS_MAX 128
/* The record keys one option sets at most (tgc_opt_def.rec). */
#define TGC_OPT_RECS_MAX 2

/* The C type of each kind of option (api/options.def). */
#define TGC_CTYPE_INT int64_t
#define TGC_CTYPE_FLOAT double
#define TGC_CTYPE_FLAG bool
#define TGC_CTYPE_STR const char *
#define TGC_CTYPE_CHOICE const char *
#define TGC_CTYPE_SPEC const char *
#define TGC_CTYPE_LIST const char *
#define TGC_CTYPE_WORDS const char *const *

/* One field per row of api/options.def (its help says what it holds),
 * and which options the command line gave. */
typedef struct tgc_config {
#define OPT(name, alias, kind, field, ...) TGC_CTYPE_##kind field;
#include "api/options.def"
    bool seen[TGC_CONFIG_NOPTS_MAX]; /* which options the command line gave, by table index */
} tgc_config;

/* What `tgc run PLAN` does with an option the command line gives (the
 * option table's last column; `tgc run --help` lists the four groups,
 * docs/runtime.md "Plans"). */
typedef enum tgc_opt_use {
    TGC_USE_UNSET,   /* a row without one: a programmer error */
    TGC_USE_RUNTIME, /* read by the runtime: applies over the plan's value */
    TGC_USE_PASSES,  /* read by the passes: the plan is recompiled from its lowered IR */
    TGC_USE_MODEL,   /* changes the model (its hyperparameters): refused when it differs from the plan's */
    TGC_USE_COMPILE, /* an option of tgc compile: tgc run refuses it */
} tgc_opt_use;

/* TGC_OPT_SPEC: text that belongs to the plan (written to it, unlike a
 * path); TGC_OPT_LIST: repeatable, the values joined by ';';
 * TGC_OPT_WORDS: paths, the value and (on the command line) every later
 * argument up to the next option (Megatron's nargs='*'), a NULL-terminated
 * array: tgc_config_set_to sets one word, tgc_config_set_words several. */
typedef enum { TGC_OPT_INT, TGC_OPT_FLOAT, TGC_OPT_FLAG, TGC_OPT_STR, TGC_OPT_CHOICE, TGC_OPT_SPEC, TGC_OPT_LIST,
               TGC_OPT_WORDS } tgc_opt_kind;

typedef struct tgc_opt_def {
    const char *name;    /* Megatron-LM's long name */
    const char *alias;   /* short alias or NULL */
    tgc_opt_kind kind;
    size_t offset;
    const char *const *choices; /* TGC_OPT_CHOICE: the words, NULL-terminated */
    const char *help;
    tgc_opt_use use; /* what tgc run does with it over a plan */
    bool positive;   /* TGC_OPT_INT: at least 1 when given */
    const char *unbuilt; /* what is not built yet (only the default accepted), or NULL */
    /* The keys of the IR's passes line the option sets: {pass, key}, the
     * rest NULL (passes/pass_record.def). */
    struct { const char *pass, *key; } rec[TGC_OPT_RECS_MAX];
} tgc_opt_def;

/* The table: its rows, row i, and the row of a long name or alias (-1). */
int tgc_config_nopts(void);
const tgc_opt_def *tgc_config_opt_at(int i);
int tgc_config_opt_find(const char *name);
/* Sets row i's option from its text (a flag: any value sets it) and marks
 * it given; 0, or 2 after writing "tgc: error: --NAME: 'VALUE' is not
 * ..." to err (NULL: nothing is written). */
int tgc_config_set_to(tgc_config *c, int i, const char *value, FILE *err);
/* Option i, of kind TGC_OPT_WORDS, set to words[0..n) (kept, not copied). */
void tgc_config_set_words(tgc_config *c, int i, const char *const *words, int n);
/* A flag given as false (the library's tgc_options_set(o, "fp16", "false")). */
void tgc_config_unset_flag(tgc_config *c, int i);
/* s (malloc'd), kept until the process ends, as configurations' strings are. */
const char *tgc_config_keep(char *s);


typedef struct strbuf strbuf;
/* The options of use `use` that cli's command line gave and whose values
 * differ from plan's (every one given when plan is NULL), as
 * "--name value (the plan's value)" joined by ", " onto out (which may be
 * NULL); returns how many. */
int tgc_config_changes(const tgc_config *cli, const tgc_config *plan, tgc_opt_use use, strbuf *out);
/* The plan format's schema: rt_plan_schema of the keys tgc_config_write
 * writes (a "name kind" line each). */
uint64_t tgc_config_plan_schema(void);
/* Writes the configuration as `name value` lines (every option but paths
 * and tgc compile's own), and reads one such line back; false names an
 * unknown key or bad value. */
void tgc_config_write(const tgc_config *c, strbuf *out);
bool tgc_config_read_line(tgc_config *c, const char *line);
/* Row i's value in c as text onto out (a flag "true"/"false", a number as
 * the plans write it, words joined by spaces); false (nothing written) for
 * a string or words that are not set. */
bool tgc_config_value_text(const tgc_config *c, int i, strbuf *out);
/* Row i back to its default, not given. */
void tgc_config_reset(tgc_config *c, int i);
/* Copies into dst the options that src's command line gave explicitly. */
void tgc_config_overlay(tgc_config *dst, const tgc_config *src);
/* Whether the command line gave option `name` (its long name or alias). */
bool tgc_config_given(const tgc_config *c, const char *name);

void tgc_config_defaults(tgc_config *c);

/* Cross-option checks (e.g. the global batch divides by micro-batch x dp);
 * returns 0 or 2 after printing the offending values. */
int tgc_config_check(const tgc_config *c);
int tgc_config_check_to(const tgc_config *c, FILE *err);
/* What `tgc run` cannot execute yet although compile accepts it (pipeline
 * parallelism, several micro-batches per step): 0, or 2 after saying so. */
int tgc_config_check_run(const tgc_config *c);
int tgc_config_check_run_to(const tgc_config *c, FILE *err);
/* The learning-rate and weight-decay schedule the options describe;
 * returns 0, or 2 after printing what is wrong. */
struct rt_schedule;
int tgc_config_schedule(const tgc_config *c, struct rt_schedule *s);
int tgc_config_schedule_to(const tgc_config *c, struct rt_schedule *s, FILE *err);

/* The options of the passes (parallel degrees, optimizer, precision,
 * fusion, pipeline, recomputation) as the configuration gives them. */
struct pass_options;
void tgc_config_pass_options(const tgc_config *c, struct pass_options *po);
/* The options c was given (seen) that the IR's passes line records, one
 * entry per recorded key they set (a table next to the option table):
 * for pass_ctx.given. At most TGC_CONFIG_GIVEN_MAX; returns how many. */
#define TGC_CONFIG_GIVEN_MAX 64
struct pass_given;
int tgc_config_pass_given(const tgc_config *c, struct pass_given *out, int max);
/* Runs every pass on g with the configuration's options (verifying after
 * each when verify; after, if not NULL, is called after each: TGC_DEBUG's
 * dumps). false after reporting to d. */
struct ir_graph;
struct diag;
bool tgc_config_run_passes(struct ir_graph *g, const tgc_config *c, bool verify,
                           void (*after)(const char *name, const struct ir_graph *g, void *user), struct diag *d);

#endif
