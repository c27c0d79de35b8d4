/* Declarations generated from the op table for the ir/ implementation. */
#ifndef TGC_IR_INTERNAL_H
#define TGC_IR_INTERNAL_H
#include "ir.h"

/* Shared by the shape rules (shape*.c): a node's type as text, and an
 * error message written into err (returns false). */
#define IR_TYPE_BUF 96
const char *ir_shape_ty(const ir_node *n, char buf[IR_TYPE_BUF]);
bool ir_shape_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define NOAXIS ir_axis_norule
#define OP(e, mn, lo, hi, attrs, shape, grad, flops, axis, flags) \
    bool shape(ir_node *n, char *err, size_t errlen);              \
    int64_t flops(const ir_node *n);                               \
    int axis(const ir_node *n, int operand, int dim);
#include "ops.def"
#undef NOAXIS

#endif
