/* The tgc DSL grammar (docs/dsl.md has it in EBNF). A pure parser: all of
 * its state is in fe_parse and the scanner. Syntax errors are reported with
 * file:line:col and the parser recovers at the next statement, so one run
 * reports several. The semantic values live in fe_parse.mem, so nothing
 * needs a destructor on error paths. */
%define api.pure full
%define api.prefix {fe_yy}
%define parse.error custom
%define parse.lac full
%locations
%lex-param {yyscan_t scanner}
%parse-param {yyscan_t scanner} {fe_parse *ps}

%code requires {
#include "frontend/ast.h"
#ifndef FE_YYSCAN_T_DEFINED
#define FE_YYSCAN_T_DEFINED
typedef void *yyscan_t;
#endif
}

%code provides {
int fe_yylex(FE_YYSTYPE *lval, FE_YYLTYPE *lloc, yyscan_t scanner);
int fe_yyparse(yyscan_t scanner, fe_parse *ps);
}

%code {
#include <string.h>

#include "support/util.h"

/* The parser's stack bounds the nesting of brackets and blocks; deeper
 * input is an error ("nested too deeply"), never unbounded recursion. */
#define YYMAXDEPTH 1000
#define YYINITDEPTH 200

#define LOC(l) fe_loc(ps, (l).first_line, (l).first_column)

static void fe_yyerror(FE_YYLTYPE *loc, yyscan_t scanner, fe_parse *ps, const char *msg);

static fe_stmt *fe_stmt_named(fe_parse *ps, fe_stmt_kind k, FE_YYLTYPE kw,
                              const char *name, FE_YYLTYPE name_loc)
{
    fe_stmt *s = fe_stmt_new(ps, k, LOC(kw));
    s->name = name;
    s->name_loc = LOC(name_loc);
    return s;
}

static const char *fe_flag_join(fe_parse *ps, const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *s = arena_alloc(ps->mem, na + nb + 2);
    memcpy(s, a, na);
    s[na] = '-';
    memcpy(s + na + 1, b, nb + 1);
    return s;
}
}

%union {
    int64_t ival;
    double fval;
    const char *str;
    fe_expr *expr;
    fe_stmt *stmt;
    fe_args args;
    fe_idents idents;
    fe_stmts stmts;
    fe_type type;
}

%token <str> IDENT "identifier"
%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token NEWLINE "end of line"
%token HPARAM "'hparam'" INPUT "'input'" PARAM "'param'" BLOCK "'block'"
%token OP "'op'" BACKWARD "'backward'"
%token RETURN "'return'" FOR "'for'" IN "'in'" AS "'as'" IF "'if'" ELSE "'else'"
%token MINIMIZE "'minimize'" OUTPUT "'output'" TRUE "'true'" FALSE "'false'"
%token POW "'**'" FLOORDIV "'//'" DOTDOT "'..'"

%type <stmts> body stmt_seq
%type <stmt> stmt decl assign
%type <expr> expr primary init_opt
%type <args> exprs args args_opt items items_opt
%type <idents> idents idents_opt targets flags_opt
%type <str> flag_name
%type <type> type

%left '+' '-'
%left '*' '/' FLOORDIV '%'
%precedence UNARY
%right POW

%start program

%%

program:
    body                        { ps->program = $1; }
    ;

body:
    seps_opt                    { $$ = (fe_stmts){0}; }
  | seps_opt stmt_seq seps_opt  { $$ = $2; }
  ;

stmt_seq:
    stmt                        { $$ = fe_stmts_add((fe_stmts){0}, $1); }
  | stmt_seq seps stmt          { $$ = fe_stmts_add($1, $3); }
  ;

seps_opt: %empty | seps ;
seps: sep | seps sep ;
sep: NEWLINE | ';' ;

stmt:
    decl
  | assign
  | RETURN exprs                { $$ = fe_stmt_new(ps, FE_ST_RETURN, LOC(@1)); $$->exprs = $2; }
  | MINIMIZE expr               { $$ = fe_stmt_new(ps, FE_ST_MINIMIZE, LOC(@1)); $$->value = $2; }
  | OUTPUT exprs                { $$ = fe_stmt_new(ps, FE_ST_OUTPUT, LOC(@1)); $$->exprs = $2; }
  | error                       { $$ = NULL; }
  ;

decl:
    HPARAM IDENT '=' expr
        { $$ = fe_stmt_named(ps, FE_ST_HPARAM, @1, $2, @2); $$->value = $4; }
  | HPARAM IDENT '=' expr IDENT flag_name
        { $$ = fe_stmt_named(ps, FE_ST_HPARAM, @1, $2, @2); $$->value = $4;
          if (strcmp($5, "flag") != 0)
              fe_parse_error(ps, LOC(@5), "syntax error, unexpected identifier '%s' after the value of "
                             "hyperparameter '%s', expected 'flag' or end of line", $5, $2);
          $$->flag = $6; $$->flag_loc = LOC(@6); }
  | INPUT IDENT ':' type
        { $$ = fe_stmt_named(ps, FE_ST_INPUT, @1, $2, @2); $$->type = $4; }
  | PARAM IDENT ':' type init_opt flags_opt
        { $$ = fe_stmt_named(ps, FE_ST_PARAM, @1, $2, @2);
          $$->type = $4; $$->value = $5; $$->idents = $6; }
  | BLOCK IDENT '(' idents_opt ')' nls_opt '{' body '}'
        { $$ = fe_stmt_named(ps, FE_ST_BLOCK, @1, $2, @2);
          $$->idents = $4; $$->body = $8; }
  | OP IDENT '(' idents_opt ')' nls_opt '{' body '}' nls_opt
    BACKWARD '(' idents_opt ')' nls_opt '{' body '}'
        { $$ = fe_stmt_named(ps, FE_ST_OP, @1, $2, @2);
          $$->idents = $4; $$->body = $8;
          $$->bwd_loc = LOC(@11); $$->bwd_params = $13; $$->bwd_body = $17; }
  | FOR IDENT IN expr DOTDOT expr nls_opt '{' body '}'
        { $$ = fe_stmt_named(ps, FE_ST_FOR, @1, $2, @2);
          $$->lo = $4; $$->hi = $6; $$->body = $9; }
    /* `} else {` on one line: a newline after '}' ends the if. */
  | IF expr nls_opt '{' body '}'
        { $$ = fe_stmt_new(ps, FE_ST_IF, LOC(@1)); $$->value = $2; $$->body = $5; }
  | IF expr nls_opt '{' body '}' ELSE nls_opt '{' body '}'
        { $$ = fe_stmt_new(ps, FE_ST_IF, LOC(@1)); $$->value = $2; $$->body = $5; $$->else_body = $10; }
    /* A broken header: skip to its '{' and still parse the body, so that
       its '}' is not reported as well. */
  | BLOCK IDENT '(' error ')' nls_opt '{' body '}'  { $$ = NULL; }
  | OP IDENT '(' error ')' nls_opt '{' body '}' nls_opt
    BACKWARD '(' idents_opt ')' nls_opt '{' body '}' { $$ = NULL; }
  | OP IDENT '(' idents_opt ')' nls_opt '{' body '}' nls_opt
    BACKWARD '(' error ')' nls_opt '{' body '}'      { $$ = NULL; }
    /* No backward: resume at the next statement, not at the op's '('. */
  | OP IDENT '(' idents_opt ')' nls_opt '{' body '}' nls_opt error { $$ = NULL; }
  | FOR error '{' body '}'                          { $$ = NULL; }
  | IF error '{' body '}'                           { $$ = NULL; }
  ;

nls_opt: %empty | nls_opt NEWLINE ;

/* A flag's name is words joined by '-', with no space around them. */
flag_name:
    IDENT                       { $$ = $1; }
  | flag_name '-' IDENT
        { if (@2.first_column != @1.last_column || @3.first_column != @2.last_column)
              fe_parse_error(ps, LOC(@2), "a flag's name is written without spaces around its '-'");
          $$ = fe_flag_join(ps, $1, $3); }
  ;

assign:
    targets '=' expr
        { $$ = fe_stmt_new(ps, FE_ST_ASSIGN, $1.head->loc); $$->idents = $1; $$->value = $3; }
  | targets '=' expr AS IDENT
        { $$ = fe_stmt_new(ps, FE_ST_ASSIGN, $1.head->loc); $$->idents = $1; $$->value = $3;
          $$->as_name = $5; $$->as_loc = LOC(@5); }
  | targets '=' expr AS IDENT '[' expr ']'
        { $$ = fe_stmt_new(ps, FE_ST_ASSIGN, $1.head->loc); $$->idents = $1; $$->value = $3;
          $$->as_name = $5; $$->as_loc = LOC(@5); $$->as_index = $7; }
  ;

targets:
    IDENT                       { $$ = fe_idents_one(ps, $1, LOC(@1)); }
  | targets ',' IDENT           { $$ = fe_idents_add(ps, $1, $3, LOC(@3)); }
  ;

type:
    IDENT '[' items_opt ']'     { $$ = (fe_type){$1, LOC(@1), $3}; }
  ;

init_opt:
    %empty                      { $$ = NULL; }
  | '=' expr                    { $$ = $2; }
  ;

flags_opt:
    %empty                      { $$ = (fe_idents){0}; }
  | flags_opt IDENT             { $$ = fe_idents_add(ps, $1, $2, LOC(@2)); }
  ;

idents_opt:
    %empty                      { $$ = (fe_idents){0}; }
  | idents
  | idents ','
  ;

idents:
    IDENT                       { $$ = fe_idents_one(ps, $1, LOC(@1)); }
  | idents ',' IDENT            { $$ = fe_idents_add(ps, $1, $3, LOC(@3)); }
  ;

exprs:
    expr                        { $$ = fe_args_one(ps, NULL, $1->loc, $1); }
  | exprs ',' expr              { $$ = fe_args_add(ps, $1, NULL, $3->loc, $3); }
  ;

expr:
    primary
  | expr '+' expr               { $$ = fe_expr_binary(ps, LOC(@2), FE_AR_ADD, $1, $3); }
  | expr '-' expr               { $$ = fe_expr_binary(ps, LOC(@2), FE_AR_SUB, $1, $3); }
  | expr '*' expr               { $$ = fe_expr_binary(ps, LOC(@2), FE_AR_MUL, $1, $3); }
  | expr '/' expr               { $$ = fe_expr_binary(ps, LOC(@2), FE_AR_DIV, $1, $3); }
  | expr FLOORDIV expr          { $$ = fe_expr_binary(ps, LOC(@2), FE_AR_FLOORDIV, $1, $3); }
  | expr '%' expr               { $$ = fe_expr_binary(ps, LOC(@2), FE_AR_MOD, $1, $3); }
  | expr POW expr               { $$ = fe_expr_binary(ps, LOC(@2), FE_AR_POW, $1, $3); }
  | '-' expr %prec UNARY        { $$ = fe_expr_unary(ps, LOC(@1), FE_AR_NEG, $2); }
  | '+' expr %prec UNARY        { $$ = fe_expr_unary(ps, LOC(@1), FE_AR_POS, $2); }
  ;

primary:
    INT                         { $$ = fe_expr_int(ps, LOC(@1), $1); }
  | FLOAT                       { $$ = fe_expr_float(ps, LOC(@1), $1); }
  | TRUE                        { $$ = fe_expr_bool(ps, LOC(@1), true); }
  | FALSE                       { $$ = fe_expr_bool(ps, LOC(@1), false); }
  | IDENT                       { $$ = fe_expr_name(ps, LOC(@1), $1); }
  | IDENT '(' args_opt ')'      { $$ = fe_expr_call(ps, LOC(@1), $1, $3); }
  | '(' expr ')'                { $$ = $2; }
  | '[' items_opt ']'           { $$ = fe_expr_list(ps, LOC(@1), $2); }
  ;

args_opt:
    %empty                      { $$ = (fe_args){0}; }
  | args
  | args ','
  ;

args:
    expr                        { $$ = fe_args_one(ps, NULL, $1->loc, $1); }
  | IDENT '=' expr              { $$ = fe_args_one(ps, $1, LOC(@1), $3); }
  | args ',' expr               { $$ = fe_args_add(ps, $1, NULL, $3->loc, $3); }
  | args ',' IDENT '=' expr     { $$ = fe_args_add(ps, $1, $3, LOC(@3), $5); }
  ;

items_opt:
    %empty                      { $$ = (fe_args){0}; }
  | items
  | items ','
  ;

items:
    expr                        { $$ = fe_args_one(ps, NULL, $1->loc, $1); }
  | items ',' expr              { $$ = fe_args_add(ps, $1, NULL, $3->loc, $3); }
  ;

%%

/* "unexpected ')', expected ']' or ','": the found token (with its text for
 * names and numbers) and, when there are few, the tokens that would fit. */
static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, fe_parse *ps)
{
    (void)scanner;
    strbuf b;
    sb_init(&b);
    yysymbol_kind_t tok = yypcontext_token(ctx);
    sb_puts(&b, "syntax error");
    if (tok != YYSYMBOL_YYEMPTY) {
        sb_printf(&b, ", unexpected %s", yysymbol_name(tok));
        if (tok == YYSYMBOL_IDENT || tok == YYSYMBOL_INT || tok == YYSYMBOL_FLOAT)
            sb_printf(&b, " '%s'", ps->tok);
    }
    yysymbol_kind_t exp[4];
    int n = yypcontext_expected_tokens(ctx, exp, 4);
    for (int i = 0; i < n; i++)
        sb_printf(&b, "%s%s", i == 0 ? ", expected " : i == n - 1 ? " or " : ", ",
                  yysymbol_name(exp[i]));
    fe_parse_error(ps, LOC(*yypcontext_location(ctx)), "%s", b.s);
    sb_free(&b);
    ps->nest = 0; /* resynchronise on the next newline */
    return 0;
}

static void fe_yyerror(FE_YYLTYPE *loc, yyscan_t scanner, fe_parse *ps, const char *msg)
{
    (void)scanner;
    if (strcmp(msg, "memory exhausted") == 0)
        fe_parse_error(ps, LOC(*loc), "input nested too deeply");
    else
        fe_parse_error(ps, LOC(*loc), "%s", msg);
}
