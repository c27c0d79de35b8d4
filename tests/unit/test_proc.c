/* support/proc.c (argument vectors, word splitting, spawning without a
 * shell), runtime/backend/kcache.c (validated cache entries) and the CPU kernel
 * cache key (runtime/backend/cpu.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "runtime/backend/cpu.h"
#include "runtime/backend/kcache.h"
#include "support/file.h"
#include "support/proc.h"
#include "support/util.h"

#include "tmpdir.h"

/* The words of s joined by '|', or "ERR: why". */
static const char *split(const char *s)
{
    static char out[512];
    proc_argv a;
    proc_argv_init(&a);
    char why[128];
    if (!proc_argv_split(&a, s, why, sizeof why)) snprintf(out, sizeof out, "ERR: %s", why);
    else {
        out[0] = 0;
        for (int i = 0; i < a.n; i++) {
            strcat(out, a.v[i]);
            if (i + 1 < a.n) strcat(out, "|");
        }
        CHECK(a.v[a.n] == NULL);
    }
    proc_argv_free(&a);
    return out;
}

static void test_split(void)
{
    CHECK_STR(split("  -O2\t-g  "), "-O2|-g");
    CHECK_STR(split(""), "");
    CHECK_STR(split("-DX='a b' \"-DY=c \\\"d\\\"\" e\\ f"), "-DX=a b|-DY=c \"d\"|e f");
    CHECK_STR(split("'' x"), "|x");
    CHECK_STR(split("a;touch INJECTED $HOME *"), "a;touch|INJECTED|$HOME|*");
    CHECK_STR(split("-fsanitize='address"), "ERR: an unterminated ' quote");
    CHECK_STR(split("\"x"), "ERR: an unterminated \" quote");
    CHECK_STR(split("x\\"), "ERR: a backslash at the end");
}

static void test_run(void)
{
    proc_argv a;
    proc_argv_init(&a);
    /* Each word reaches the child as one argument, quotes and ; included. */
    const char *words[] = {"printf", "[%s]", "it's", "a;touch INJECTED", "$HOME"};
    for (size_t i = 0; i < ARRAY_LEN(words); i++) proc_argv_add(&a, words[i]);
    char why[256];
    const char *out = tmp_path("out.txt");
    CHECK(proc_run(&a, out, why, sizeof why) == 0);
    size_t n;
    char *text = file_read(out, FILE_SMALL, &n, why, sizeof why);
    CHECK_STR(text, "[it's][a;touch INJECTED][$HOME]");
    free(text);
    CHECK(access("INJECTED", F_OK) != 0);
    proc_argv_free(&a);
    /* An exit status comes back; a missing program is an error, not a crash. */
    proc_argv_init(&a);
    proc_argv_add(&a, "false");
    CHECK(proc_run(&a, out, why, sizeof why) == 1);
    proc_argv_free(&a);
    proc_argv_init(&a);
    proc_argv_add(&a, "tgc-no-such-program");
    CHECK(proc_run(&a, out, why, sizeof why) == -1);
    CHECK(strstr(why, "cannot run 'tgc-no-such-program'") != NULL);
    proc_argv_free(&a);
}

static void write_bytes(const char *path, const char *s, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fwrite(s, 1, n, f);
    CHECK(file_close(f));
}

static void test_cache(void)
{
    const char *entry = tmp_path("k1.bin"), *tmp = tmp_path("k1.bin.tmp");
    char why[512], *data = NULL;
    size_t n = 0;
    rt_cache_remove(entry);
    CHECK(rt_cache_check(entry, NULL, NULL, why, sizeof why) == RT_CACHE_MISS);
    write_bytes(tmp, "0123456789", 10);
    CHECK(rt_cache_commit(tmp, entry, "arch test\n", why, sizeof why));
    CHECK(access(tmp, F_OK) != 0);
    CHECK(rt_cache_check(entry, &data, &n, why, sizeof why) == RT_CACHE_OK);
    CHECK(n == 10 && data && memcmp(data, "0123456789", 10) == 0);
    free(data);
    /* Truncated, or the same size with other bytes: damaged. */
    CHECK(truncate(entry, 4) == 0);
    CHECK(rt_cache_check(entry, NULL, NULL, why, sizeof why) == RT_CACHE_BAD);
    CHECK_STR(why, "it holds 4 bytes, its manifest says 10");
    write_bytes(entry, "0123456780", 10);
    CHECK(rt_cache_check(entry, NULL, NULL, why, sizeof why) == RT_CACHE_BAD);
    CHECK(strstr(why, "differs from its manifest's") != NULL);
    /* An entry without its manifest (an older tgc, an interrupted write). */
    rt_cache_remove(entry);
    write_bytes(entry, "0123456789", 10);
    CHECK(rt_cache_check(entry, NULL, NULL, why, sizeof why) == RT_CACHE_BAD);
    CHECK(strstr(why, "manifest") != NULL);
    rt_cache_remove(entry);
    CHECK(access(entry, F_OK) != 0);
}

/* The key changes with every part: the source, a flag, the target the
 * flags resolve to (an AVX2 and an AVX-512 machine sharing a cache). */
static void test_key(void)
{
    const char *w[] = {"cc", "-O3", "-march=native"}, *w2[] = {"cc", "-O2", "-march=native"};
    uint64_t k = rt_cc_key("void f(void){}", w, 3, 1);
    CHECK(k == rt_cc_key("void f(void){}", w, 3, 1));
    CHECK(k != rt_cc_key("void g(void){}", w, 3, 1));
    CHECK(k != rt_cc_key("void f(void){}", w2, 3, 1));
    CHECK(k != rt_cc_key("void f(void){}", w, 3, 2));
    CHECK(k != rt_cc_key("void f(void){}", w, 2, 1));
}

/* An entry that matches its manifest but that dlopen refuses (another
 * machine's garbage with a manifest to match) is rebuilt too. */
static void test_cc_load(void)
{
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache", tmpdir);
    setenv("TGC_CACHE_DIR", cache, 1);
    const char *src = "int tgc_test_seven(void) { return 7; }\n";
    rt_cc_options o = {0};
    diag d;
    diag_init(&d, stderr);
    for (int round = 0; round < 2; round++) {
        rt_so *so = rt_cc_load(src, &o, &d);
        CHECK(so != NULL);
        if (!so) break;
        int (*seven)(void) = (int (*)(void))rt_so_sym(so, "tgc_test_seven");
        CHECK(seven && seven() == 7);
        char path[1200], why[512];
        snprintf(path, sizeof path, "%s", rt_so_path(so));
        rt_so_close(so);
        if (round == 1) {
            rt_cache_remove(path);
            break;
        }
        char tmp[1300];
        snprintf(tmp, sizeof tmp, "%s.garbage", path);
        write_bytes(tmp, "not an ELF object", 17);
        CHECK(rt_cache_commit(tmp, path, NULL, why, sizeof why));
        CHECK(rt_cache_check(path, NULL, NULL, why, sizeof why) == RT_CACHE_OK);
    }
    CHECK(d.nerrors == 0);
    diag_free(&d);
    rmdir(cache);
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/tgc-test-proc-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) return 1;
    test_split();
    test_run();
    test_cache();
    test_key();
    test_cc_load();
    remove(tmp_path("out.txt"));
    rmdir(tmpdir);
    CHECK_DONE();
}
