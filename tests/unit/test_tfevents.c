/* TensorBoard event files (runtime/io/tfevents.h): CRC32C against its
 * published check values (RFC 3720's among them) and a bitwise reference,
 * TFRecord framing and masking, the Event protobuf byte for byte, and the
 * writer: the directory made, the file created exclusively, its records
 * read back and checked, what is not a directory refused by name. The
 * reader of the tensorboard package reads real runs' files in
 * tests/tensorboard/tensorboard_test.py. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "runtime/io/tfevents.h"
#include "support/util.h"

/* CRC32C one bit at a time: the reference the table must equal. */
static uint32_t crc_ref(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

static void test_crc32c(void)
{
    CHECK(tgc_crc32c(0, "123456789", 9) == 0xe3069283u);
    CHECK(tgc_crc32c(0, "", 0) == 0);
    uint8_t zeros[32] = {0}, ones[32], up[32], down[32];
    for (int i = 0; i < 32; i++) {
        ones[i] = 0xff;
        up[i] = (uint8_t)i;
        down[i] = (uint8_t)(31 - i);
    }
    /* RFC 3720, B.4. */
    CHECK(tgc_crc32c(0, zeros, 32) == 0x8a9136aau);
    CHECK(tgc_crc32c(0, ones, 32) == 0x62a8ab43u);
    CHECK(tgc_crc32c(0, up, 32) == 0x46dd794eu);
    CHECK(tgc_crc32c(0, down, 32) == 0x113fdb5cu);
    /* Extending a CRC is the CRC of the whole. */
    CHECK(tgc_crc32c(tgc_crc32c(0, "1234", 4), "56789", 5) == 0xe3069283u);
    uint8_t buf[1000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
    int same = 0;
    for (size_t n = 0; n <= sizeof buf; n += 37) same += tgc_crc32c(0, buf, n) == crc_ref(buf, n);
    CHECK(same == (int)(sizeof buf / 37 + 1));
    /* The mask: ((c >> 15) | (c << 17)) + 0xa282ead8. */
    CHECK(tgc_crc32c_mask(0xe3069283u) == 0xc78ab0e5u);
    CHECK(tgc_crc32c_mask(0) == 0xa282ead8u);
    CHECK(tgc_crc32c_mask(0xffffffffu) == 0xa282ead7u);
}

static void test_frame(void)
{
    uint8_t out[64];
    size_t n = tgc_tfrecord_frame("123456789", 9, out, sizeof out);
    CHECK(n == 25);
    CHECK(le64(out) == 9);
    CHECK(le32(out + 8) == tgc_crc32c_mask(crc_ref(out, 8)));
    CHECK(memcmp(out + 12, "123456789", 9) == 0);
    CHECK(out[21] == 0xe5 && out[22] == 0xb0 && out[23] == 0x8a && out[24] == 0xc7); /* 0xc78ab0e5, LE */
    n = tgc_tfrecord_frame("", 0, out, sizeof out);
    CHECK(n == 16 && le64(out) == 0 && le32(out + 12) == 0xa282ead8u);
    CHECK(le32(out + 8) == tgc_crc32c_mask(crc_ref(out, 8)));
    CHECK(tgc_tfrecord_frame("123456789", 9, out, 24) == 0);
    CHECK(tgc_tfrecord_frame("123456789", 9, out, 25) == 25);
}

static void test_event(void)
{
    uint8_t out[256];
    /* wall_time 1.5 = 0x3ff8000000000000. */
    static const uint8_t wall[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f};
    size_t n = tgc_tfevents_encode_version(1.5, out, sizeof out);
    CHECK(n == 9 + 2 + 13);
    CHECK(memcmp(out, wall, 9) == 0 && out[9] == 0x1a && out[10] == 13 && memcmp(out + 11, "brain.Event:2", 13) == 0);
    /* step 7, summary {value {tag "lm loss", simple_value 2.5 (0x40200000)}}. */
    n = tgc_tfevents_encode_scalar(1.5, 7, "lm loss", 2.5f, out, sizeof out);
    static const uint8_t scalar[] = {0x10, 7,    0x2a, 16,   0x0a, 14,  0x0a, 7,    'l',  'm',
                                     ' ',  'l',  'o',  's',  's',  0x15, 0x00, 0x00, 0x20, 0x40};
    CHECK(n == 9 + sizeof scalar);
    CHECK(memcmp(out, wall, 9) == 0 && memcmp(out + 9, scalar, sizeof scalar) == 0);
    /* A step of two varint bytes (300 = 0xac 0x02); 0.0 is written (a oneof). */
    n = tgc_tfevents_encode_scalar(1.5, 300, "x", 0.0f, out, sizeof out);
    CHECK(n == 9 + 3 + 2 + 2 + 3 + 5);
    CHECK(out[9] == 0x10 && out[10] == 0xac && out[11] == 0x02 && out[12] == 0x2a);
    CHECK(out[n - 5] == 0x15 && le32(out + n - 4) == 0);
    /* Too small a buffer, too long a tag. */
    CHECK(tgc_tfevents_encode_scalar(1.5, 7, "lm loss", 2.5f, out, 28) == 0);
    char tag[TGC_TFEVENTS_TAG_MAX + 2];
    memset(tag, 'a', sizeof tag - 1);
    tag[sizeof tag - 1] = 0;
    CHECK(tgc_tfevents_encode_scalar(1.5, 7, tag, 2.5f, out, sizeof out) == 0);
}

/* The records of a file, each one's CRCs checked: how many, and the last one's data. */
static int read_records(const char *path, uint8_t *last, size_t *nlast)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint8_t head[12], data[512], foot[4];
    int n = 0;
    while (fread(head, 1, 12, f) == 12) {
        uint64_t len = le64(head);
        if (le32(head + 8) != tgc_crc32c_mask(crc_ref(head, 8)) || len > sizeof data ||
            fread(data, 1, len, f) != len || fread(foot, 1, 4, f) != 4 ||
            le32(foot) != tgc_crc32c_mask(crc_ref(data, len))) {
            n = -1;
            break;
        }
        memcpy(last, data, len);
        *nlast = len;
        n++;
    }
    fclose(f);
    return n;
}

/* The names in dir starting "events.out.tfevents.": how many, and the last. */
static int event_files(const char *dir, char *name, size_t cap)
{
    DIR *dp = opendir(dir);
    int n = 0;
    for (struct dirent *e; dp && (e = readdir(dp));)
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
            snprintf(name, cap, "%s", e->d_name);
            n++;
        }
    if (dp) closedir(dp);
    return n;
}

static char *read_text(FILE *f)
{
    static char buf[1024];
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    return buf;
}

static void test_writer(void)
{
    char tmp[] = "/tmp/tgc_test_tfevents_XXXXXX";
    if (!mkdtemp(tmp)) { CHECK(0); return; }
    char dir[128], path[512], name[256];
    snprintf(dir, sizeof dir, "%s/runs/a", tmp); /* made with its parent */
    diag d;
    diag_init(&d, stderr);
    tgc_tfevents *w = tgc_tfevents_open(dir, "--tensorboard-dir", &d);
    CHECK(w != NULL);
    if (!w) return;
    struct stat st;
    CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(tgc_tfevents_scalar(w, "lm loss", 1, 3.25) && tgc_tfevents_scalar(w, "learning-rate", 1, 1e-3));
    CHECK(tgc_tfevents_flush(w));
    /* Records of many steps: the buffer is written when full. */
    for (int i = 2; i <= 1000; i++) CHECK(tgc_tfevents_scalar(w, "lm loss vs samples", i * 4, 1.0 / i));
    snprintf(path, sizeof path, "%s", tgc_tfevents_path(w));
    /* A second writer in the same second gets its own file. */
    tgc_tfevents *w2 = tgc_tfevents_open(dir, "--tensorboard-dir", &d);
    CHECK(w2 && strcmp(tgc_tfevents_path(w2), path) != 0);
    CHECK(tgc_tfevents_close(w2, &d));
    CHECK(tgc_tfevents_close(w, &d));
    CHECK(event_files(dir, name, sizeof name) == 2);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char pid[32];
    snprintf(pid, sizeof pid, ".%ld.", (long)getpid());
    CHECK(strstr(path, "/runs/a/events.out.tfevents.") && strstr(path, host) && strstr(path, pid));
    uint8_t last[512];
    size_t nlast = 0;
    CHECK(read_records(path, last, &nlast) == 1 + 2 + 999);
    uint8_t want[256];
    size_t nwant = tgc_tfevents_encode_scalar(0, 4000, "lm loss vs samples", (float)(1.0 / 1000), want, sizeof want);
    /* The last record: the same event but for its wall time (field 1, 9 bytes). */
    CHECK(nlast == nwant && memcmp(last + 9, want + 9, nlast - 9) == 0 && last[0] == 0x09);
    double wall;
    uint64_t bits = le64(last + 1);
    memcpy(&wall, &bits, 8);
    CHECK(wall > 1.5e9 && wall < 1e10);
    diag_free(&d);

    /* Not a directory: a file, a symbolic link to one, under a file. */
    FILE *err = tmpfile();
    diag_init(&d, err);
    char file[128], link[128], under[160];
    snprintf(file, sizeof file, "%s/plain", tmp);
    snprintf(link, sizeof link, "%s/link", tmp);
    snprintf(under, sizeof under, "%s/plain/sub", tmp);
    FILE *f = fopen(file, "w");
    fputs("x\n", f);
    fclose(f);
    CHECK(symlink("plain", link) == 0);
    CHECK(tgc_tfevents_open(file, "--tensorboard-dir", &d) == NULL);
    CHECK(strstr(read_text(err), "--tensorboard-dir ") && strstr(read_text(err), "/plain: is a file, not a directory"));
    CHECK(tgc_tfevents_open(link, "--tensorboard-dir", &d) == NULL);
    CHECK(strstr(read_text(err), "/link: is a symbolic link to a file, not a directory"));
    CHECK(tgc_tfevents_open(under, "--tensorboard-dir", &d) == NULL);
    CHECK(strstr(read_text(err), "--tensorboard-dir: cannot create the directory '") &&
          strstr(read_text(err), "/plain/sub': Not a directory"));
    /* A symbolic link to a directory is a directory. */
    char dlink[128];
    snprintf(dlink, sizeof dlink, "%s/dlink", tmp);
    CHECK(symlink("runs/a", dlink) == 0);
    w = tgc_tfevents_open(dlink, "--tensorboard-dir", &d);
    CHECK(w != NULL && tgc_tfevents_close(w, &d));
    CHECK(event_files(dir, name, sizeof name) == 3);
    diag_free(&d);
    fclose(err);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s/runs/a", tmp);
    DIR *dp = opendir(cmd);
    for (struct dirent *e; dp && (e = readdir(dp));)
        if (e->d_name[0] != '.') {
            char *p = path_join(cmd, e->d_name);
            unlink(p);
            free(p);
        }
    if (dp) closedir(dp);
    rmdir(cmd);
    snprintf(cmd, sizeof cmd, "%s/runs", tmp);
    rmdir(cmd);
    unlink(file);
    unlink(link);
    unlink(dlink);
    rmdir(tmp);
}

int main(void)
{
    test_crc32c();
    test_frame();
    test_event();
    test_writer();
    CHECK_DONE();
}
