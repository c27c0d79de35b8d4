/* Declarations generated from the op table for the ir/ implementation. */
#ifndef TGC_IR_INTERNAL_H
#define TGC_IR_INTERNAL_H
#include "ir.h"

#define OP(e, mn, lo, hi, attrs, shape, grad, flops, flags) \
    bool shape(ir_node *n, char *err, size_t errlen);        \
    int64_t flops(const ir_node *n);
#include "ops.def"

#endif
