/* The tgc DSL front end: flex lexer, bison parser, AST, name and shape
 * checking, and lowering to the IR. It reports user errors through diag as
 * `file:line:col: error: ...` and never aborts on bad input. */
#ifndef TGC_FRONTEND_H
#define TGC_FRONTEND_H
#include <stddef.h>

#include "ir/ir.h"
#include "support/diag.h"

/* One `--set name=value` from the command line. */
typedef struct fe_override {
    const char *name;
    const char *value;
} fe_override;

/* Parses and lowers a .tg model. `file` is the name shown in diagnostics and
 * in loc(...) (as the user gave it); the model name is its stem. Overrides
 * replace the value of the named hyperparameter; one that names no
 * hyperparameter, or whose value is not a number, is an error. Returns NULL
 * after reporting every error found (up to d->max_errors). */
ir_graph *fe_compile(const char *file, const char *text, size_t len,
                     const fe_override *ov, int nov, diag *d);

#endif
