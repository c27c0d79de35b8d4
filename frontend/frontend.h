/* The tgc DSL front end: flex lexer, bison parser, AST, name and shape
 * checking, and lowering to the IR. It reports user errors through diag as
 * `file:line:col: error: ...` and never aborts on bad input. */
#ifndef TGC_FRONTEND_H
#define TGC_FRONTEND_H
#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"
#include "support/diag.h"

/* One `--set name=value` from the command line, or (flag) one model flag
 * `--FLAG value` that sets the hyperparameter the model binds to FLAG. */
typedef struct fe_override {
    const char *name; /* the hyperparameter; with flag, the flag without its dashes */
    const char *value;
    bool flag;
} fe_override;

/* The command-line flags a hyperparameter may be bound to, as in
 * `hparam layers = 4 flag num-layers` (docs/dsl.md): Megatron-LM's model
 * options. NULL-terminated. */
extern const char *const fe_model_flags[];
/* A switch (Megatron's store_true: --use-rope-scaling, --add-qkv-bias,
 * --qk-layernorm) takes no value on the command line: given, it sets its
 * hyperparameter to 1. */
bool fe_model_flag_is_switch(const char *flag);

/* Parses and lowers a .tg model. `file` is the name shown in diagnostics and
 * in loc(...) (as the user gave it); the model name is its stem. Overrides
 * replace the value of the named hyperparameter (or of the one bound to the
 * flag); one that names no hyperparameter, a flag the model does not bind,
 * a hyperparameter set both by --set and by its flag, or a value that is
 * not a number, is an error. Returns NULL
 * after reporting every error found (up to d->max_errors). */
ir_graph *fe_compile(const char *file, const char *text, size_t len,
                     const fe_override *ov, int nov, diag *d);

#endif
