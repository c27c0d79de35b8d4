/* Runs the reentrant flex scanner and the pure bison parser over a buffer. */
#include <limits.h>

#include "frontend/ast.h"
#include "frontend/parse.h"
#define YYSTYPE FE_YYSTYPE
#define YYLTYPE FE_YYLTYPE
#include "parser.h"
#include "lexer.h"

bool fe_parse_text(fe_parse *ps, const char *text, size_t len)
{
    ps->line = 1;
    ps->col = 1;
    if (len > INT_MAX / 2) {
        fe_parse_error(ps, fe_loc(ps, 0, 0), "file too large (%zu bytes)", len);
        return false;
    }
    yyscan_t scanner;
    if (fe_yylex_init_extra(ps, &scanner) != 0) {
        fe_parse_error(ps, fe_loc(ps, 0, 0), "cannot start the lexer");
        return false;
    }
    YY_BUFFER_STATE buf = fe_yy_scan_bytes(text, (int)len, scanner);
    int rc = fe_yyparse(scanner, ps);
    fe_yy_delete_buffer(buf, scanner);
    fe_yylex_destroy(scanner);
    if (rc != 0 && ps->nerrors == 0)
        fe_parse_error(ps, fe_loc(ps, ps->line, ps->col), "syntax error");
    return rc == 0 && ps->nerrors == 0;
}
