#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

extern char **environ;

void proc_argv_init(proc_argv *a)
{
    a->cap = 8;
    a->n = 0;
    a->v = xcalloc((size_t)a->cap, sizeof *a->v);
}

void proc_argv_free(proc_argv *a)
{
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

void proc_argv_add(proc_argv *a, const char *word)
{
    if (a->n + 2 > a->cap) {
        a->cap *= 2;
        a->v = xrealloc(a->v, (size_t)a->cap * sizeof *a->v);
    }
    a->v[a->n++] = xstrdup(word);
    a->v[a->n] = NULL;
}

/* One word starting at *p (not a blank); false on bad quoting. */
static bool split_word(const char **p, strbuf *w, char *why, size_t cap)
{
    const char *s = *p;
    for (; *s && *s != ' ' && *s != '\t' && *s != '\n'; s++) {
        if (*s == '\\') {
            if (!s[1]) { snprintf(why, cap, "a backslash at the end"); return false; }
            sb_putc(w, *++s);
        } else if (*s == '\'') {
            const char *q = strchr(s + 1, '\'');
            if (!q) { snprintf(why, cap, "an unterminated ' quote"); return false; }
            sb_putn(w, s + 1, (size_t)(q - s - 1));
            s = q;
        } else if (*s == '"') {
            for (s++; *s && *s != '"'; s++) {
                if (*s == '\\' && s[1] && strchr("\"\\$`", s[1])) s++;
                sb_putc(w, *s);
            }
            if (!*s) { snprintf(why, cap, "an unterminated \" quote"); return false; }
        } else {
            sb_putc(w, *s);
        }
    }
    *p = s;
    return true;
}

bool proc_argv_split(proc_argv *a, const char *s, char *why, size_t cap)
{
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (!*s) return true;
        strbuf w;
        sb_init(&w);
        sb_putc(&w, 0); /* an empty word ('') is still a word */
        w.len = 0;
        bool ok = split_word(&s, &w, why, cap);
        if (ok) proc_argv_add(a, w.s);
        sb_free(&w);
        if (!ok) return false;
    }
}

static int wait_child(pid_t pid, const char *name, char *why, size_t cap)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            snprintf(why, cap, "waiting for %s: %s", name, strerror(errno));
            return -1;
        }
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    snprintf(why, cap, "%s was ended by signal %d (%s)", name, WTERMSIG(st), strsignal(WTERMSIG(st)));
    return -1;
}

int proc_run(const proc_argv *a, const char *out_path, char *why, size_t cap)
{
    TGC_ASSERT(a->n > 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, a->v[0], &fa, NULL, a->v, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        snprintf(why, cap, "cannot run '%s': %s", a->v[0], strerror(rc));
        return -1;
    }
    return wait_child(pid, a->v[0], why, cap);
}
