/* The one way tgc makes an output (support/file.h, file_out): a symlink a
 * stranger planted at TARGET.tmp or at TARGET is never written through, a
 * failure or an abort leaves nothing behind and the target as it was,
 * outputs synced together go in together, a device is written in place,
 * and the log's appending follows no symlink of another user. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "support/file.h"
#include "tmpdir.h"

static char *slurp(const char *path)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf[k], 1, sizeof buf[k] - 1, f) : 0;
    if (f) fclose(f);
    buf[k][n] = 0;
    return f ? buf[k] : NULL;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static bool regular(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The number of entries of the scratch directory: nothing left behind. */
static int entries(void)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void test_planted(void)
{
    put(tmp_path("victim"), "victim");
    CHECK(symlink("victim", tmp_path("out.tmp")) == 0);
    CHECK(symlink("victim", tmp_path("out")) == 0);
    char why[256] = "";
    CHECK(file_write_atomic(tmp_path("out"), "new", 3, why, sizeof why));
    CHECK_STR(slurp(tmp_path("victim")), "victim");
    CHECK(regular(tmp_path("out")));
    CHECK_STR(slurp(tmp_path("out")), "new");
    CHECK(entries() == 3); /* victim, out.tmp (the link), out */
    unlink(tmp_path("out.tmp"));
    unlink(tmp_path("out"));
    unlink(tmp_path("victim"));
}

static void test_abort_and_failure(void)
{
    put(tmp_path("keep"), "old");
    char why[256] = "";
    file_out *o = file_out_begin(tmp_path("keep"), why, sizeof why);
    CHECK(o && regular(file_out_tmp(o)) && strcmp(file_out_tmp(o), tmp_path("keep")) != 0);
    /* Two outputs of one target get different temporaries. */
    file_out *o2 = file_out_begin(tmp_path("keep"), why, sizeof why);
    CHECK(o2 && strcmp(file_out_tmp(o), file_out_tmp(o2)) != 0);
    fputs("half", file_out_stream(o));
    file_out_abort(o);
    file_out_abort(o2);
    CHECK_STR(slurp(tmp_path("keep")), "old");
    CHECK(entries() == 1);
    /* A directory at the target fails before anything is made. */
    CHECK(mkdir(tmp_path("dir"), 0755) == 0);
    CHECK(!file_out_begin(tmp_path("dir"), why, sizeof why) && errno == EISDIR);
    CHECK_STR(why, strerror(EISDIR));
    CHECK(!file_write_atomic(tmp_path("no/such/x"), "x", 1, why, sizeof why));
    CHECK_STR(why, strerror(ENOENT));
    CHECK(entries() == 2);
    rmdir(tmp_path("dir"));
    unlink(tmp_path("keep"));
}

static void test_together(void)
{
    char why[256] = "";
    file_out *a = file_out_begin(tmp_path("a"), why, sizeof why), *b = file_out_begin(tmp_path("b"), why, sizeof why);
    fputs("A", file_out_stream(a));
    fputs("B", file_out_stream(b));
    CHECK(file_out_sync(a, why, sizeof why) && file_out_sync(b, why, sizeof why));
    CHECK(access(tmp_path("a"), F_OK) != 0 && access(tmp_path("b"), F_OK) != 0); /* not yet */
    CHECK(file_out_commit(a, why, sizeof why) && file_out_commit(b, why, sizeof why));
    CHECK_STR(slurp(tmp_path("a")), "A");
    CHECK_STR(slurp(tmp_path("b")), "B");
    CHECK(entries() == 2);
    unlink(tmp_path("a"));
    unlink(tmp_path("b"));
}

/* A device is written in place; a symlink to one is followed only when
 * root or the caller made it. */
static void test_special(void)
{
    char why[256] = "";
    CHECK(file_write_atomic("/dev/null", "x", 1, why, sizeof why));
    CHECK(!file_write_atomic("/dev/full", "x", 1, why, sizeof why));
    CHECK_STR(why, strerror(ENOSPC));
    CHECK(symlink("/dev/null", tmp_path("mine")) == 0);
    CHECK(file_write_atomic(tmp_path("mine"), "x", 1, why, sizeof why));
    struct stat st;
    CHECK(lstat(tmp_path("mine"), &st) == 0 && S_ISLNK(st.st_mode));
    unlink(tmp_path("mine"));
    if (geteuid() != 0) return; /* only root can give a link to another user */
    CHECK(symlink("/dev/null", tmp_path("theirs")) == 0 && lchown(tmp_path("theirs"), 65534, 65534) == 0);
    CHECK(file_write_atomic(tmp_path("theirs"), "x", 1, why, sizeof why));
    CHECK(regular(tmp_path("theirs"))); /* replaced, not followed */
    unlink(tmp_path("theirs"));
    put(tmp_path("victim"), "victim");
    CHECK(symlink("victim", tmp_path("log")) == 0 && lchown(tmp_path("log"), 65534, 65534) == 0);
    CHECK(file_open_append(tmp_path("log"), why, sizeof why) < 0);
    CHECK_STR(slurp(tmp_path("victim")), "victim");
    unlink(tmp_path("log"));
    unlink(tmp_path("victim"));
}

static void test_private_dir(void)
{
    char *d = file_private_dir(tmp_path("k"));
    struct stat st;
    CHECK(d && lstat(d, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 077) == 0);
    rmdir(d);
    free(d);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tgc_test_file_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_planted();
    test_abort_and_failure();
    test_together();
    test_special();
    test_private_dir();
    CHECK(entries() == 0);
    CHECK(rmdir(tmpdir) == 0);
    CHECK_DONE();
}
