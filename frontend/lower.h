/* Lowering of the syntax tree to the IR: values, scopes, and the functions
 * shared by lower.c (statements, blocks), lower_expr.c (expressions and
 * numbers) and lower_ops.c (op calls). Everything here is allocated in the
 * lowering arena (fe_lower.mem) and freed with it. */
#ifndef TGC_FRONTEND_LOWER_H
#define TGC_FRONTEND_LOWER_H
#include <stdbool.h>
#include <stdint.h>

#include "frontend/ast.h"
#include "ir/ir.h"

/* Limits that keep any input (the parser is fuzzed) finite and small. */
#define FE_MAX_LOOP_ITERS 65536        /* iterations of one `for` */
#define FE_MAX_WORK 4000000            /* statements + iterations + expressions */
#define FE_MAX_NODES 1000000           /* IR nodes in one model */
#define FE_MAX_INSTANCES 100000        /* block instances in one model */
#define FE_MAX_BLOCK_DEPTH 64          /* blocks instantiating blocks */
#define FE_MAX_DIM ((int64_t)1 << 40)  /* one dimension */
#define FE_MAX_NUMEL ((int64_t)1 << 42) /* elements of one declared tensor */
#define FE_MAX_SPLIT 1024              /* results of one split */
#define FE_MAX_NEST 600                /* expressions + statements being lowered */

typedef enum fe_vkind {
    FE_V_ERROR, /* an error was reported; uses stay silent */
    FE_V_INT,
    FE_V_FLOAT,
    FE_V_BOOL,
    FE_V_TENSOR,
} fe_vkind;

typedef struct fe_value {
    fe_vkind kind;
    int64_t i;   /* INT, BOOL */
    double f;    /* FLOAT */
    ir_node *t;  /* TENSOR */
} fe_value;

/* ---- string-keyed hash map (arena-backed, never shrinks) ------------------ */

typedef struct fe_map_entry {
    const char *key;
    void *val;
} fe_map_entry;

typedef struct fe_map {
    fe_map_entry *slot;
    size_t cap, count;
    arena *mem;
} fe_map;

void fe_map_init(fe_map *m, arena *mem);
void *fe_map_get(const fe_map *m, const char *key);
/* Inserts or replaces. */
void fe_map_put(fe_map *m, const char *key, void *val);

/* Edit distance with a cap (returns cap+1 when larger). */
int fe_edit_distance(const char *a, const char *b, int cap);

/* Best close match of `name` among candidates, NULL if none is close. */
typedef struct fe_suggest {
    const char *name;
    const char *best;
    int dist; /* of best */
    int max;  /* the largest distance accepted */
} fe_suggest;

void fe_suggest_init(fe_suggest *s, const char *name);
void fe_suggest_add(fe_suggest *s, const char *candidate);
void fe_suggest_map(fe_suggest *s, const fe_map *m);

/* ---- symbols and scopes --------------------------------------------------- */

typedef enum fe_sym_kind { FE_SYM_VAR, FE_SYM_INPUT, FE_SYM_PARAM, FE_SYM_HPARAM } fe_sym_kind;

typedef struct fe_sym {
    fe_sym_kind kind;
    fe_value v;
    src_loc loc; /* where it was declared (or first assigned) */
    const fe_expr *def; /* a hyperparameter's defining expression; NULL when --set gave it */
} fe_sym;

typedef struct fe_scope {
    struct fe_scope *parent;   /* the instantiating scope (cycle reports) */
    const fe_stmt *block;      /* the block or op; NULL at the top level */
    const char *prefix;        /* "" at the top level, else "layers.3.attention" */
    fe_map syms;               /* variables, inputs, parameters */
    fe_map insts;              /* instance names used in this scope */
    const fe_stmt *in_op;      /* the custom op being lowered here or around */
    bool in_backward;          /* ... and in its backward body */
    int loop_depth;
    bool returned;
    const fe_stmt *ret_stmt;   /* the `return` that set rets */
    fe_value *rets;
    int nrets;
} fe_scope;

typedef struct fe_lower {
    diag *d;
    const char *file;         /* interned */
    const char *model;
    arena *mem;
    ir_graph *g;
    fe_map hparams;           /* name -> fe_sym */
    fe_map blocks;            /* name -> const fe_stmt: blocks and custom ops */
    fe_map bad_blocks;        /* blocks and ops whose definition has errors */
    fe_map overrides;         /* name -> fe_value (from --set) */
    fe_map reported;          /* "line:col:message" of errors already printed */
    int64_t work;
    int instances;            /* of blocks */
    int op_instances;         /* of custom ops */
    int depth;                /* blocks being instantiated */
    int nest;                 /* expressions and statement lists being lowered */
    bool stop;                /* a limit was hit: unwind without more errors */
    int nerrors;              /* errors reported by the lowering */
    const fe_stmt *loss_stmt;
} fe_lower;

/* Reports an error once per (location, message); repeated instantiations of
 * a block do not repeat it. */
void fe_error(fe_lower *L, src_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void fe_note(fe_lower *L, src_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Counts work; false (after one error) once a limit is hit. */
bool fe_tick(fe_lower *L, src_loc loc);
/* Enters one level of recursion; false (after one error) past FE_MAX_NEST.
 * Every successful fe_enter is paired with L->nest--. */
bool fe_enter(fe_lower *L, src_loc loc);

/* The IR name for a value named `hint` (or an op temporary) in scope s. */
const char *fe_node_name(fe_lower *L, const fe_scope *s, const char *hint, const char *opname);
/* "tensor f32[256, 8]", "integer 3", "number 0.5", "true". */
const char *fe_value_str(fe_lower *L, fe_value v);
/* Shape text of a node: "f32[256, 8]". */
const char *fe_type_str(fe_lower *L, const ir_node *n);

/* ---- expressions (lower_expr.c) -------------------------------------------- */

/* How the results of an expression are named: one hint per result of the
 * outermost call (the assignment's targets), and the `as` instance name. */
typedef struct fe_hints {
    const fe_ident *targets;
    int ntargets;
    const char *inst; /* instance name from `as`, or NULL */
    src_loc inst_loc;
} fe_hints;

fe_value fe_eval(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h);
/* Evaluates e, which may give several values (split, blocks). Returns the
 * count (>= 0) with *out in the arena, or -1 after an error. */
int fe_eval_multi(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h, fe_value **out);
fe_value fe_eval_number(fe_lower *L, fe_scope *s, const fe_expr *e, const char *what);
bool fe_eval_int(fe_lower *L, fe_scope *s, const fe_expr *e, const char *what, int64_t *out);
/* What a size or count that came out zero or negative is made of: " (
 * hyperparameter layers = -1, from --set layers)" for each hyperparameter
 * e reads whose value is not positive (at most 4), or "" for none. */
const char *fe_blame_hparams(fe_lower *L, const fe_expr *e);
/* A dimension: a positive integer no larger than FE_MAX_DIM. */
bool fe_eval_dim(fe_lower *L, fe_scope *s, const fe_expr *e, int64_t *out);
/* True when the integral double v fits an int64 exactly. */
bool fe_double_is_int(double v, int64_t *out);
fe_value fe_int(int64_t i);
fe_value fe_float(double f);
fe_value fe_tensor(ir_node *t);
double fe_num(fe_value v);

/* Looks a name up in scope s, then among the hyperparameters. */
fe_sym *fe_lookup(fe_lower *L, fe_scope *s, const char *name);
void fe_unknown_name(fe_lower *L, fe_scope *s, const fe_expr *e);

/* ---- statements (lower_stmt.c) -------------------------------------------- */

void fe_scope_init(fe_lower *L, fe_scope *s, fe_scope *parent, const fe_stmt *block, const char *prefix);
void fe_exec_stmts(fe_lower *L, fe_scope *s, const fe_stmt *st);
fe_sym *fe_sym_bind(fe_lower *L, fe_scope *s, const char *name, fe_sym_kind kind, fe_value v, src_loc loc);
/* Binds the call's arguments to the parameters of block or op `def` in the
 * new scope bs (evaluating them in s). */
bool fe_bind_args(fe_lower *L, fe_scope *s, fe_scope *bs, const fe_expr *e, const fe_stmt *def);
/* "block" or "op". */
const char *fe_def_kind(const fe_stmt *def);

/* ---- calls (lower_ops.c, lower_stmt.c) ------------------------------------------ */

/* Lowers a call to an op of the table or a DSL built-in. Returns the number
 * of results, or -1 when it reported an error, or -2 when name is no op. */
int fe_call_op(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h, fe_value **out);
bool fe_is_op_name(const char *name);
void fe_suggest_ops(fe_suggest *sg);
/* Instantiates a block (lower_stmt.c). */
int fe_call_block(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_stmt *blk,
                  const fe_hints *h, fe_value **out);
/* Lowers a call of a custom op: its forward, custom_out, its backward and
 * the custom_grad declarations (lower_custom.c). */
int fe_call_custom_op(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_stmt *op,
                      const fe_hints *h, fe_value **out);
/* The single target's name of a call, or NULL. */
const char *fe_hint_one(const fe_hints *h);

ir_node *fe_finish_node(fe_lower *L, const fe_expr *e, ir_node *n, const char *name);
/* A leaf created by an expression (arange, full): a fresh unique name. */
ir_node *fe_new_leaf(fe_lower *L, ir_op op, const char *name, ir_dtype t,
                     const ir_shape *shape, src_loc loc);
bool fe_check_numel(fe_lower *L, src_loc loc, const ir_shape *sh);

#endif
