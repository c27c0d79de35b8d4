/* A small strict JSON reader (RFC 8259) into a tree, for the files other
 * tools write: Hugging Face's config.json and model.safetensors.index.json
 * (runtime/io/hf.h). Errors are `FILE:LINE:COL: error: ...` with the line
 * quoted and an offending byte shown as '\x00' with its offset; duplicate
 * keys, trailing garbage, invalid UTF-8 and nesting deeper than
 * JSON_MAX_DEPTH are refused. Everything lives in the document's arena. */
#ifndef TGC_RUNTIME_JSON_H
#define TGC_RUNTIME_JSON_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support/arena.h"
#include "support/diag.h"

#define JSON_MAX_DEPTH 64

typedef enum json_kind { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_kind;

typedef struct json_value json_value;
struct json_value {
    json_kind kind;
    src_loc loc;       /* where the value starts */
    bool b;            /* JSON_BOOL */
    double num;        /* JSON_NUMBER */
    bool is_int;       /* a number written without fraction or exponent that fits int64 */
    int64_t i;         /* its value when is_int */
    const char *str;   /* JSON_STRING: UTF-8, NUL-terminated (no NUL inside) */
    int n;             /* JSON_ARRAY, JSON_OBJECT: elements / members */
    json_value **items;
    const char **keys; /* JSON_OBJECT: the members' keys, in file order */
    /* JSON_OBJECT, the reader's own: each key's hash, and an open-addressed
     * table of member indices + 1 (0: empty) once the object has more than
     * JSON_SCAN_MAX members, so the duplicate check and json_get are O(1). */
    uint64_t *hashes;
    uint32_t *slots;
    uint32_t nslots;
};

#define JSON_SCAN_MAX 8

typedef struct json_doc {
    arena mem;
    json_value *root;
} json_doc;

/* Parses text (len bytes) read from file; NULL after reporting. */
json_doc *json_parse(const char *file, const char *text, size_t len, diag *d);
/* Reads and parses a file: a regular file (or "-") of at most FILE_JSON's
 * limit (128 MiB), whose first bytes are whitespace then '{' or '[' (checked
 * before the rest is read); the text is held once, by d. NULL after
 * reporting. */
json_doc *json_read_file(const char *path, diag *d);
void json_free(json_doc *doc);

/* The member `key` of an object, NULL when absent (or v is not an object).
 * O(1) (a hash of the keys), so a loop over one object's members may look
 * up another's. */
const json_value *json_get(const json_value *obj, const char *key);
const char *json_kind_name(json_kind k);

/* The key comparisons (strcmp of two keys) json_get and the parser's
 * duplicate-key check have made on this thread: tests check that the
 * reader's work grows linearly with an object's size. */
uint64_t json_key_compares(void);

#endif
