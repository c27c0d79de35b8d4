#ifndef TGC_CLI_LOAD_H
#define TGC_CLI_LOAD_H
#include "frontend/frontend.h"
#include "ir/ir.h"

/* Loads a model: a .tg file through the front end, or text IR (a .ir file,
 * or any input starting with "tgc-ir") through the IR reader, then runs the
 * verifier. "-" reads standard input. A compiled plan, intact or damaged
 * (told by its content, runtime/plan.h), is refused as one rather than
 * parsed as a model. Errors go to d; NULL on failure. */
ir_graph *cli_load_model(const char *path, const fe_override *sets, int nsets, diag *d);

#endif
