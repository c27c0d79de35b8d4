/* The JSON reader (runtime/io/json.h) on files from strangers: its work is
 * linear in an object's size (counted in key comparisons, never timed), a
 * duplicate key is still refused where it stands, and lookups by key are
 * O(1) in objects of any size. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture.h"
#include "check.h"
#include "runtime/io/json.h"
#include "support/file.h"
#include "support/util.h"

#include "tmpdir.h"

#include "sanitizer.h"

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

/* A file of n NUL bytes (sparse: no disk used), then tail. */
static const char *nul_file(const char *name, off_t n, const char *tail)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    CHECK(f && ftruncate(fileno(f), n) == 0 && fseeko(f, n, SEEK_SET) == 0);
    if (f) { fputs(tail, f); fclose(f); }
    return path;
}

static long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void expect_read_error(const char *path, const char *want)
{
    capture c;
    cap_init(&c);
    CHECK(json_read_file(path, &c.d) == NULL);
    const char *got = cap_text(&c);
    if (!strstr(got, want)) fprintf(stderr, "expected \"%s\" in:\n%s\n", want, got);
    CHECK(strstr(got, want) != NULL);
    cap_free(&c);
}

/* Files that are not JSON are refused from their first bytes, without being
 * read whole; the offending byte is shown escaped with its offset. */
static void test_refused_early(void)
{
    long rss = max_rss_kb();
    char want[512];
    const char *p = nul_file("nul.json", 100 << 20, "{}");
    snprintf(want, sizeof want, "%s:1:1: error: invalid JSON: expected '{' or '[' (a JSON object or array), "
             "not '\\x00' (byte 0); the file was not read further", p);
    expect_read_error(p, want);
    CHECK(max_rss_kb() - rss < 16 * 1024); /* 100 MB of NUL bytes were not read in */

    p = tmp_path("late.json");
    FILE *f = fopen(p, "wb");
    fputs("\n  \x01{}", f);
    fclose(f);
    snprintf(want, sizeof want, "%s:2:3: error: invalid JSON: expected '{' or '[' (a JSON object or array), "
             "not '\\x01' (byte 3)", p);
    expect_read_error(p, want);

    /* Over FILE_JSON's limit: refused by its size before anything is read. */
    p = nul_file("big.json", (off_t)file_kind_limit(FILE_JSON) + 1, "");
    snprintf(want, sizeof want, "%s: error: cannot read: it is %llu bytes, over the 128 MiB limit of a JSON file", p,
             (unsigned long long)file_kind_limit(FILE_JSON) + 1);
    expect_read_error(p, want);

    /* A FIFO (no writer: no hang) and a device (endless: no unbounded read). */
    p = tmp_path("fifo.json");
    CHECK(mkfifo(p, 0600) == 0);
    snprintf(want, sizeof want, "%s: error: cannot read: it is a FIFO, not a regular file", p);
    expect_read_error(p, want);
    expect_read_error("/dev/zero", "/dev/zero: error: cannot read: it is a character device, not a regular file");

    /* Inside a value the byte is shown the same way, with its offset. */
    static const char text[] = "{\"a\": \x00}";
    capture c;
    cap_init(&c);
    CHECK(json_parse("in.json", text, sizeof text - 1, &c.d) == NULL);
    CHECK(strstr(cap_text(&c), "in.json:1:7: error: invalid JSON: unexpected character '\\x00' (byte 6)") != NULL);
    cap_free(&c);
}

/* A file's buffer that cannot be had is the reader's error, not an exit:
 * read in a child whose address space is capped below the file's size
 * (not under ASan, whose shadow memory needs the address space). */
static void test_out_of_memory(void)
{
#ifndef TEST_ASAN
    const char *p = tmp_path("oom.json");
    FILE *f = fopen(p, "wb");
    CHECK(f && fputc('{', f) != EOF && ftruncate(fileno(f), 100 << 20) == 0);
    if (f) fclose(f);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        long pages = 0, page = sysconf(_SC_PAGESIZE);
        FILE *st = fopen("/proc/self/statm", "r");
        if (!st || fscanf(st, "%ld", &pages) != 1) _exit(3);
        fclose(st);
        struct rlimit rl = {(rlim_t)(pages * page) + (48 << 20), (rlim_t)(pages * page) + (48 << 20)};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        capture c;
        cap_init(&c);
        json_doc *doc = json_read_file(p, &c.d);
        bool ok = !doc && strstr(cap_text(&c), ": error: cannot read: out of memory reading it (") != NULL;
        if (!ok) fprintf(stderr, "child: %s\n", cap_text(&c));
        _exit(ok ? 0 : 4);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) fprintf(stderr, "child status %d\n", status);
#endif
}

static void cleanup(void)
{
    static const char *names[] = {"nul.json", "late.json", "big.json", "fifo.json", "oom.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
    CHECK(rmdir(tmpdir) == 0);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/tgc-json-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) return 1;
    test_linear();
    test_duplicate();
    test_refused_early();
    test_out_of_memory();
    cleanup();
    CHECK_DONE();
}
