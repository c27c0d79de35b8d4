/* The JSON reader (runtime/io/json.h) on files from strangers: its work is
 * linear in an object's size (counted in key comparisons, never timed), a
 * duplicate key is still refused where it stands, and lookups by key are
 * O(1) in objects of any size. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture.h"
#include "check.h"
#include "runtime/io/json.h"
#include "support/util.h"

/* {"k0": 0, "k1": 1, ...} with n members, one per line. */
static char *object_text(int n, size_t *len)
{
    strbuf b;
    sb_init(&b);
    sb_putc(&b, '{');
    for (int i = 0; i < n; i++) sb_printf(&b, "%s\n\"k%d\": %d", i ? "," : "", i, i);
    sb_puts(&b, "}\n");
    *len = b.len;
    return b.s;
}

/* Key comparisons to parse an n-member object and look every member up. */
static uint64_t work(int n, uint64_t *lookups)
{
    size_t len;
    char *text = object_text(n, &len);
    capture c;
    cap_init(&c);
    uint64_t before = json_key_compares();
    json_doc *doc = json_parse("big.json", text, len, &c.d);
    uint64_t parsed = json_key_compares();
    CHECK(doc && doc->root->kind == JSON_OBJECT && doc->root->n == n);
    bool all = doc != NULL;
    for (int i = 0; doc && i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", i);
        const json_value *v = json_get(doc->root, key);
        all = all && v && v->is_int && v->i == i;
    }
    CHECK(all);
    CHECK(!doc || json_get(doc->root, "absent") == NULL);
    *lookups = json_key_compares() - parsed;
    json_free(doc);
    cap_free(&c);
    free(text);
    return parsed - before;
}

static void test_linear(void)
{
    uint64_t look10, look100;
    uint64_t parse10 = work(10000, &look10), parse100 = work(100000, &look100);
    printf("key comparisons: parse %" PRIu64 " -> %" PRIu64 ", lookups %" PRIu64 " -> %" PRIu64 "\n", parse10,
           parse100, look10, look100);
    /* Linear: a few comparisons per key, and ten times the keys is at most
     * about ten times the work (a quadratic reader does 100 times). */
    CHECK(parse100 <= 4 * 100000ull);
    CHECK(look100 <= 4 * 100000ull);
    CHECK(parse100 <= 12 * (parse10 + 100));
    CHECK(look100 <= 12 * (look10 + 100));
}

/* The duplicate-key error is kept, with its position, in small and big objects. */
static void test_duplicate(void)
{
    static const char *const texts[] = {"{\"a\": 1,\n \"b\": 2, \"a\": 3}", NULL};
    capture c;
    cap_init(&c);
    CHECK(json_parse("dup.json", texts[0], strlen(texts[0]), &c.d) == NULL);
    CHECK(strstr(cap_text(&c), "dup.json:2:10: error: invalid JSON: duplicate key \"a\"") != NULL);
    cap_free(&c);

    size_t len;
    char *text = object_text(50000, &len);
    text[len - 2] = 0; /* drop "}\n", then repeat a key from the middle */
    strbuf b;
    sb_init(&b);
    sb_puts(&b, text);
    sb_puts(&b, ",\n\"k25000\": 1}");
    cap_init(&c);
    CHECK(json_parse("dup.json", b.s, b.len, &c.d) == NULL);
    CHECK(strstr(cap_text(&c), "dup.json:50002:1: error: invalid JSON: duplicate key \"k25000\"") != NULL);
    cap_free(&c);
    sb_free(&b);
    free(text);
}

int main(void)
{
    test_linear();
    test_duplicate();
    CHECK_DONE();
}
