/* Arena allocator: everything the compiler allocates for one graph or one
 * AST lives in an arena and is freed in one call. */
#ifndef TGC_ARENA_H
#define TGC_ARENA_H
#include <stddef.h>

typedef struct arena_block arena_block;

typedef struct arena {
    arena_block *head;
    size_t total; /* bytes handed out, for reports */
} arena;

void arena_init(arena *a);
void arena_free(arena *a);
/* Zeroed, 16-byte aligned memory that lives until arena_free. */
void *arena_alloc(arena *a, size_t n);
char *arena_strdup(arena *a, const char *s);
char *arena_strndup(arena *a, const char *s, size_t n);
char *arena_printf(arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
