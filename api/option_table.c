/* The option table through include/tgc.h: what a command-line scanner
 * (cli/config.c) reads of each row, the model flags, the passes' names,
 * the table's numbers and the words --tokenizer-type takes. The table
 * itself is api/config.c's; these calls only read it (tgc_config_nopts,
 * tgc_config_opt_at, ...). */
#include <string.h>

#include "api/config.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "support/util.h"
#include "tgc.h"
#include "tokenizer/tokenizer.h"

/* The public enums are the table's, value for value (checked here). */
_Static_assert((int)TGC_OPTION_INT == (int)TGC_OPT_INT && (int)TGC_OPTION_FLOAT == (int)TGC_OPT_FLOAT &&
               (int)TGC_OPTION_FLAG == (int)TGC_OPT_FLAG && (int)TGC_OPTION_PATH == (int)TGC_OPT_STR &&
               (int)TGC_OPTION_CHOICE == (int)TGC_OPT_CHOICE && (int)TGC_OPTION_SPEC == (int)TGC_OPT_SPEC &&
               (int)TGC_OPTION_LIST == (int)TGC_OPT_LIST && (int)TGC_OPTION_WORDS == (int)TGC_OPT_WORDS,
               "tgc_option_kind is tgc_opt_kind");
_Static_assert((int)TGC_OPTION_RUNTIME == (int)TGC_USE_RUNTIME && (int)TGC_OPTION_PASSES == (int)TGC_USE_PASSES &&
               (int)TGC_OPTION_MODEL == (int)TGC_USE_MODEL && (int)TGC_OPTION_COMPILE == (int)TGC_USE_COMPILE,
               "tgc_option_use is tgc_opt_use");

int tgc_option_count(void) { return tgc_config_nopts(); }

tgc_status tgc_option_info_get(int i, tgc_option_info *out)
{
    if (!out || i < 0 || i >= tgc_config_nopts()) return TGC_EINVAL;
    const tgc_opt_def *d = tgc_config_opt_at(i);
    *out = (tgc_option_info){d->name, d->alias, d->help, (tgc_option_kind)d->kind, (tgc_option_use)d->use,
                             d->choices};
    return TGC_OK;
}

int tgc_option_find(const char *name) { return name ? tgc_config_opt_find(name) : -1; }

const char *tgc_model_flag(int i)
{
    if (i < 0) return NULL;
    for (int k = 0; fe_model_flags[k]; k++)
        if (k == i) return fe_model_flags[k];
    return NULL;
}

int tgc_model_flag_is_switch(int i) { return fe_model_flag_is_switch(tgc_model_flag(i)); }

const char *tgc_pass_name(int i) { return i >= 0 && i < pass_count() ? pass_at(i)->name : NULL; }

int tgc_parse_i64(const char *s, int64_t *out) { return out && parse_i64(s, out); }

int tgc_parse_double(const char *s, double *out) { return out && parse_double(s, out); }

const char *tgc_tokenizer_type_parse(const char *name)
{
    tgc_tokenizer_kind k;
    return name && tgc_tokenizer_parse_type(name, &k) ? tgc_tokenizer_kind_name(k) : NULL;
}

const char *tgc_tokenizer_types(void) { return TGC_TOKENIZER_TYPES; }
