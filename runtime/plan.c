#include "plan.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/file.h"
#include "support/util.h"

bool rt_write_atomic(const char *path, const void *data, size_t len, diag *d)
{
    char why[256];
    bool ok = file_write_atomic(path, data, len, why, sizeof why);
    if (!ok) diag_error_plain(d, "cannot write '%s': %s", path, why);
    return ok;
}

static src_loc at(const char *path) { return (src_loc){diag_intern(path), 0, 0}; }

static void section(strbuf *b, const char *name, const char *body)
{
    sb_printf(b, "section %s %zu\n", name, strlen(body));
    sb_puts(b, body);
}

/* The sections, in order: the schema's hash covers their names. */
static const char *const section_names[] = {"config", "lowered", "ir", "kernels"};

uint64_t rt_plan_schema(const char *config_keys)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "sections");
    for (size_t i = 0; i < ARRAY_LEN(section_names); i++) sb_printf(&b, " %s", section_names[i]);
    sb_printf(&b, "\n%s", config_keys);
    uint64_t h = hash_bytes(b.s, b.len, HASH_SEED);
    sb_free(&b);
    return h;
}

bool rt_plan_write(const char *path, const rt_plan *p, uint64_t schema, diag *d)
{
    strbuf b;
    sb_init(&b);
    sb_printf(&b, "tgc-plan %d keys %016llx\n", TGC_PLAN_VERSION, (unsigned long long)schema);
    const char *bodies[] = {p->config, p->lowered, p->ir, p->kernels};
    _Static_assert(ARRAY_LEN(bodies) == ARRAY_LEN(section_names), "a body per section");
    for (size_t i = 0; i < ARRAY_LEN(bodies); i++) section(&b, section_names[i], bodies[i]);
    uint64_t h = hash_bytes(b.s, b.len, HASH_SEED);
    sb_printf(&b, "checksum %016llx\n", (unsigned long long)h);
    bool ok = rt_write_atomic(path, b.s, b.len, d);
    sb_free(&b);
    return ok;
}

/* A last line "checksum <16 hex digits>". */
static bool ends_in_checksum(const char *t, size_t len)
{
    const size_t n = 9 + 16 + 1;
    if (len < n + 1 || t[len - n - 1] != '\n' || t[len - 1] != '\n' || memcmp(t + len - n, "checksum ", 9) != 0)
        return false;
    for (size_t i = len - 17; i < len - 1; i++)
        if (!isxdigit((unsigned char)t[i])) return false;
    return true;
}

rt_plan_look rt_plan_sniff_text(const char *t, size_t len)
{
    static const char magic[] = "tgc-plan ";
    if (len >= 9 && memcmp(t, magic, 9) == 0) return RT_PLAN_HEADER;
    int differ = 0; /* bytes of "tgc-plan" that are not there */
    for (size_t i = 0; i < 8; i++) differ += i >= len || t[i] != magic[i];
    if (differ <= 2) return RT_PLAN_DAMAGED;
    const char *nl = memchr(t, '\n', len < 256 ? len : 256);
    size_t rest = nl ? len - (size_t)(nl + 1 - t) : 0;
    if (nl && rest >= 15 && memcmp(nl + 1, "section config ", 15) == 0) return RT_PLAN_DAMAGED;
    return ends_in_checksum(t, len) ? RT_PLAN_DAMAGED : RT_PLAN_NONE;
}

rt_plan_look rt_plan_sniff(const char *path)
{
    if (strcmp(path, "-") == 0) return RT_PLAN_NONE; /* reading would consume it */
    size_t len = 0;
    char why[256];
    char *text = file_read(path, FILE_PLAN, &len, why, sizeof why);
    if (!text) return RT_PLAN_NONE;
    rt_plan_look look = rt_plan_sniff_text(text, len);
    free(text);
    return look;
}

/* Reads "section NAME BYTES\n" + body at *pos. */
static char *read_section(const char *text, size_t len, size_t *pos, const char *name, const char *path, diag *d)
{
    char want[64];
    int wl = snprintf(want, sizeof want, "section %s ", name);
    if (*pos + (size_t)wl > len || strncmp(text + *pos, want, (size_t)wl) != 0) {
        diag_error(d, at(path), "corrupt plan: expected section '%s' at byte %zu", name, *pos);
        return NULL;
    }
    char *end;
    errno = 0;
    const char *digits = text + *pos + wl;
    unsigned long long n = strtoull(digits, &end, 10);
    /* strtoull would also take spaces and a sign ("-1" is ULLONG_MAX). */
    if (errno || !isdigit((unsigned char)*digits) || *end != '\n') {
        diag_error(d, at(path), "corrupt plan: bad length of section '%s'", name);
        return NULL;
    }
    size_t start = (size_t)(end + 1 - text);
    if (n > len - start) { /* not start + n > len: that sum can wrap */
        diag_error(d, at(path), "truncated plan: section '%s' needs %llu bytes, %zu remain", name, n, len - start);
        return NULL;
    }
    *pos = start + n;
    char *body = xmalloc(n + 1);
    memcpy(body, text + start, n);
    body[n] = 0;
    return body;
}

/* The first line, quoted for a message: at most 48 bytes, others as \xNN. */
static void first_line(const char *text, size_t len, char *out, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < len && i < 48 && text[i] != '\n' && k + 5 < n; i++) {
        unsigned char ch = (unsigned char)text[i];
        k += (size_t)(isprint(ch) ? snprintf(out + k, n - k, "%c", ch) : snprintf(out + k, n - k, "\\x%02x", ch));
    }
    out[k] = 0;
}

/* " keys <16 hex digits>\n" at s, before limit; *after: the byte past it. */
static bool parse_keys(const char *s, const char *limit, unsigned long long *keys, const char **after)
{
    if (limit - s < 23 || memcmp(s, " keys ", 6) != 0 || s[22] != '\n') return false;
    *keys = 0;
    for (int i = 6; i < 22; i++) {
        int c = (unsigned char)s[i];
        if (!isxdigit(c)) return false;
        *keys = *keys * 16 + (unsigned)(isdigit(c) ? c - '0' : tolower(c) - 'a' + 10);
    }
    *after = s + 23;
    return true;
}

/* "tgc-plan <version> keys <16 hex>\n": the version, then the keys' hash. */
static bool check_header(const char *text, size_t len, size_t *pos, uint64_t schema, const char *path, diag *d)
{
    rt_plan_look look = rt_plan_sniff_text(text, len);
    if (look == RT_PLAN_NONE) {
        diag_error(d, at(path), "not a tgc plan (no 'tgc-plan' header)");
        return false;
    }
    char *end = NULL;
    long version = look == RT_PLAN_HEADER && isdigit((unsigned char)text[9]) ? strtol(text + 9, &end, 10) : -1;
    if (version >= 0 && version != TGC_PLAN_VERSION && end && (*end == '\n' || *end == ' ')) {
        diag_error(d, at(path), "plan format version %ld, but this tgc reads version %d; recompile the model",
                   version, TGC_PLAN_VERSION);
        return false;
    }
    unsigned long long keys = 0;
    const char *after = NULL;
    if (version != TGC_PLAN_VERSION || !parse_keys(end, text + len, &keys, &after)) {
        char line[256];
        first_line(text, len, line, sizeof line);
        diag_error(d, at(path), "damaged plan: its first line '%s' is not a 'tgc-plan %d keys HASH' header; "
                   "recompile the model", line, TGC_PLAN_VERSION);
        return false;
    }
    if (keys != schema) {
        diag_error(d, at(path), "plan format version %d with keys %016llx, but this tgc's keys are %016llx: the "
                   "plan was written by a tgc with other configuration keys; recompile the model", TGC_PLAN_VERSION, keys,
                   (unsigned long long)schema);
        return false;
    }
    *pos = (size_t)(after - text);
    return true;
}

static bool check_sum(const char *text, size_t len, size_t pos, const char *path, diag *d)
{
    unsigned long long want;
    int used = 0;
    if (sscanf(text + pos, "checksum %16llx\n%n", &want, &used) != 1 || pos + (size_t)used != len) {
        diag_error(d, at(path), "corrupt plan: missing or malformed checksum line");
        return false;
    }
    uint64_t h = hash_bytes(text, pos, HASH_SEED);
    if (h != want) {
        diag_error(d, at(path), "corrupt plan: checksum %016llx does not match the contents (%016llx)", want,
                         (unsigned long long)h);
        return false;
    }
    return true;
}

rt_plan *rt_plan_read(const char *path, uint64_t schema, diag *d)
{
    size_t len = 0;
    char why[256];
    char *text = file_read(path, FILE_PLAN, &len, why, sizeof why);
    if (!text) {
        diag_error_plain(d, "cannot read '%s': %s", path, why);
        return NULL;
    }
    rt_plan *p = xcalloc(1, sizeof *p);
    size_t pos = 0;
    bool ok = check_header(text, len, &pos, schema, path, d) &&
              (p->config = read_section(text, len, &pos, "config", path, d)) &&
              (p->lowered = read_section(text, len, &pos, "lowered", path, d)) &&
              (p->ir = read_section(text, len, &pos, "ir", path, d)) &&
              (p->kernels = read_section(text, len, &pos, "kernels", path, d)) &&
              check_sum(text, len, pos, path, d);
    free(text);
    if (!ok) { rt_plan_free(p); return NULL; }
    return p;
}

void rt_plan_free(rt_plan *p)
{
    if (!p) return;
    free(p->config);
    free(p->lowered);
    free(p->ir);
    free(p->kernels);
    free(p);
}
