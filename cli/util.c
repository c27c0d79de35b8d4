#include "cli/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgc.h"

static _Noreturn void out_of_memory(size_t n)
{
    fprintf(stderr, "tgc: error: out of memory allocating %zu bytes\n", n);
    exit(1);
}

void *cli_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) out_of_memory(n);
    return p;
}

void *cli_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) out_of_memory(n);
    return q;
}

char *cli_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(cli_xmalloc(n), s, n);
}

int cli_parse_double_list(const char *s, double *out, int max)
{
    int n = 0;
    char *buf = cli_xmalloc(s ? strlen(s) + 1 : 1);
    for (const char *p = s; p && n <= max;) {
        const char *comma = strchr(p, ',');
        size_t k = comma ? (size_t)(comma - p) : strlen(p);
        memcpy(buf, p, k);
        buf[k] = 0;
        if (n == max || !tgc_parse_double(buf, &out[n])) { n = -1; break; }
        n++;
        p = comma ? comma + 1 : NULL;
    }
    free(buf);
    return n;
}

bool cli_close_stdout(char *why, size_t cap)
{
    errno = 0;
    bool ok = fflush(stdout) == 0 && !ferror(stdout);
    int err = errno;
    if (fclose(stdout) != 0 && ok && errno != EBADF) {
        ok = false;
        err = errno;
    }
    if (!ok) snprintf(why, cap, "%s", err ? strerror(err) : "write error");
    return ok;
}
