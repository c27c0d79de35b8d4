/* Parsing one .tg buffer into the syntax tree (fe_parse.program). */
#ifndef TGC_FRONTEND_PARSE_H
#define TGC_FRONTEND_PARSE_H
#include <stdbool.h>
#include <stddef.h>

#include "frontend/ast.h"

/* ps->mem, ps->d and ps->file must be set. Returns false after reporting
 * syntax errors (the tree then holds what could be recovered). */
bool fe_parse_text(fe_parse *ps, const char *text, size_t len);

#endif
