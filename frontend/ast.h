/* The tgc DSL syntax tree. The parser builds it in one arena (fe_parse.mem)
 * that is freed in one call once lowering is done; nothing in it is freed
 * on its own, so error paths leak nothing. Lists are singly linked, in
 * source order. */
#ifndef TGC_FRONTEND_AST_H
#define TGC_FRONTEND_AST_H
#include <stdbool.h>
#include <stdint.h>

#include "support/arena.h"
#include "support/diag.h"

/* Deeper expressions are rejected (the evaluator recurses over them). */
#define FE_MAX_EXPR_DEPTH 200

typedef enum fe_expr_kind {
    FE_EX_INT,
    FE_EX_FLOAT,
    FE_EX_BOOL,
    FE_EX_NAME,   /* a variable, parameter, hyperparameter or symbol */
    FE_EX_LIST,   /* [a, b, ...] */
    FE_EX_CALL,   /* name(args) */
    FE_EX_BINARY, /* lhs op rhs */
    FE_EX_UNARY,  /* op lhs */
    FE_EX_ERROR,  /* already reported */
} fe_expr_kind;

typedef enum fe_arith {
    FE_AR_ADD,
    FE_AR_SUB,
    FE_AR_MUL,
    FE_AR_DIV,
    FE_AR_FLOORDIV,
    FE_AR_MOD,
    FE_AR_POW,
    FE_AR_NEG,
    FE_AR_POS,
} fe_arith;

typedef struct fe_expr fe_expr;

/* A call argument (key set for `key=value`) or a list item. */
typedef struct fe_arg {
    struct fe_arg *next;
    const char *key;
    src_loc loc; /* of the key, or of the value */
    fe_expr *value;
} fe_arg;

typedef struct fe_args {
    fe_arg *head, *tail;
    int n;
} fe_args;

struct fe_expr {
    fe_expr_kind kind;
    src_loc loc; /* the name of a call, the operator of an operation */
    int depth;
    fe_arith op;
    int64_t i;        /* INT, BOOL */
    double f;         /* FLOAT */
    const char *name; /* NAME, CALL */
    fe_expr *lhs, *rhs;
    fe_args args; /* CALL arguments, LIST items */
};

typedef struct fe_ident {
    struct fe_ident *next;
    const char *name;
    src_loc loc;
} fe_ident;

typedef struct fe_idents {
    fe_ident *head, *tail;
    int n;
} fe_idents;

typedef struct fe_type {
    const char *dtype;
    src_loc loc;
    fe_args dims;
} fe_type;

typedef enum fe_stmt_kind {
    FE_ST_HPARAM,
    FE_ST_INPUT,
    FE_ST_PARAM,
    FE_ST_BLOCK,
    FE_ST_OP,     /* op NAME(args) { forward } backward(dy) { gradients } */
    FE_ST_FOR,
    FE_ST_IF,     /* if COND { body } [else { else_body }]: COND a hyperparameter expression */
    FE_ST_ASSIGN,
    FE_ST_RETURN,
    FE_ST_MINIMIZE,
    FE_ST_OUTPUT,
} fe_stmt_kind;

typedef struct fe_stmt fe_stmt;

typedef struct fe_stmts {
    fe_stmt *head, *tail;
    int n;
} fe_stmts;

struct fe_stmt {
    fe_stmt_kind kind;
    src_loc loc; /* the keyword, or the first target */
    fe_stmt *next;
    const char *name;   /* HPARAM, INPUT, PARAM, BLOCK, OP, FOR variable */
    src_loc name_loc;
    fe_expr *value;     /* HPARAM, PARAM initialiser, ASSIGN, MINIMIZE */
    fe_type type;       /* INPUT, PARAM */
    fe_idents idents;   /* PARAM flags, BLOCK and OP arguments, ASSIGN targets */
    fe_expr *lo, *hi;   /* FOR */
    fe_stmts body;      /* BLOCK, FOR, IF (taken when COND is nonzero), OP's forward */
    fe_stmts else_body; /* IF: taken otherwise */
    src_loc bwd_loc;    /* OP: the 'backward' keyword */
    fe_idents bwd_params; /* OP: the gradient of the result (exactly one) */
    fe_stmts bwd_body;  /* OP: the backward, returning one gradient per argument */
    fe_args exprs;      /* RETURN, OUTPUT */
    const char *flag;   /* HPARAM: the command-line flag bound to it (`flag num-layers`), or NULL */
    src_loc flag_loc;
    const char *as_name; /* ASSIGN: `as name` or `as name[index]` */
    src_loc as_loc;
    fe_expr *as_index;
};

/* State shared by the lexer and the parser of one file. */
typedef struct fe_parse {
    arena *mem;
    diag *d;
    const char *file;   /* interned */
    fe_stmts program;
    int nest;           /* open ( and [: newlines inside are ignored */
    int line, col;      /* the lexer's position */
    char tok[40];       /* text of the last token, for syntax errors */
    bool depth_reported;
    int nerrors;        /* errors found while parsing */
} fe_parse;

src_loc fe_loc(const fe_parse *ps, int line, int col);
void fe_parse_error(fe_parse *ps, src_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

fe_expr *fe_expr_new(fe_parse *ps, fe_expr_kind kind, src_loc loc);
fe_expr *fe_expr_int(fe_parse *ps, src_loc loc, int64_t v);
fe_expr *fe_expr_float(fe_parse *ps, src_loc loc, double v);
fe_expr *fe_expr_bool(fe_parse *ps, src_loc loc, bool v);
fe_expr *fe_expr_name(fe_parse *ps, src_loc loc, const char *name);
fe_expr *fe_expr_binary(fe_parse *ps, src_loc loc, fe_arith op, fe_expr *l, fe_expr *r);
fe_expr *fe_expr_unary(fe_parse *ps, src_loc loc, fe_arith op, fe_expr *x);
fe_expr *fe_expr_call(fe_parse *ps, src_loc loc, const char *name, fe_args args);
fe_expr *fe_expr_list(fe_parse *ps, src_loc loc, fe_args items);

fe_args fe_args_one(fe_parse *ps, const char *key, src_loc loc, fe_expr *value);
fe_args fe_args_add(fe_parse *ps, fe_args l, const char *key, src_loc loc, fe_expr *value);
fe_idents fe_idents_one(fe_parse *ps, const char *name, src_loc loc);
fe_idents fe_idents_add(fe_parse *ps, fe_idents l, const char *name, src_loc loc);
fe_stmts fe_stmts_add(fe_stmts l, fe_stmt *s);

fe_stmt *fe_stmt_new(fe_parse *ps, fe_stmt_kind kind, src_loc loc);

const char *fe_arith_name(fe_arith op);

#endif
