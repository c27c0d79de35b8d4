/* Checkpoints: whole tensors assembled from the ranks, written atomically,
 * verified and resharded at load (runtime/io/checkpoint.h, docs/checkpoints.md). */
#define _GNU_SOURCE /* renameat2 (RENAME_EXCHANGE) */
#include "runtime/io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm/comm.h"
#include "runtime/train/train.h"
#include "support/file.h"
#include "support/env.h"
#include "support/util.h"

/* ---- whole tensors from the ranks' parts ------------------------------------- */

ir_shape rt_param_whole_shape(const ir_node *v, int t)
{
    ir_shape s = v->shape;
    if (v->shard.dim >= 0) s.dim[v->shard.dim] *= t;
    return s;
}

ir_shape rt_param_logical_shape(const ir_node *p, int t)
{
    ir_shape s = rt_param_whole_shape(p, t);
    if (p->op == IR_OP_PARAM && ir_attr_int(p, "rows") > 0) s.dim[0] = ir_attr_int(p, "rows");
    return s;
}

/* A split along dim d is, per outer row, one block at the rank's offset. */
void rt_shard_copy(const ir_node *v, int t, int r, char *whole, char *part, bool to_whole)
{
    int64_t esz = ir_dtype_size(v->dtype), count = ir_shape_numel(&v->shape), outer = 1;
    for (int k = 0; v->shard.dim >= 0 && k < v->shard.dim; k++) outer *= v->shape.dim[k];
    if (v->shard.dim < 0) t = 1, r = 0;
    int64_t block = count / outer * esz;
    for (int64_t o = 0; o < outer; o++) {
        char *w = whole + (o * t + r) * block, *p = part + o * block;
        memcpy(to_whole ? w : p, to_whole ? p : w, (size_t)block);
    }
}

bool rt_st_dtype_of(ir_dtype t, tgc_st_dtype *out)
{
    switch (t) {
    case IR_F32: *out = TGC_ST_F32; return true;
    case IR_F64: *out = TGC_ST_F64; return true;
    case IR_I32: *out = TGC_ST_I32; return true;
    case IR_I64: *out = TGC_ST_I64; return true;
    case IR_U8: *out = TGC_ST_U8; return true;
    default: return false;
    }
}

/* This process's rank in the world of R->comm. */
static tgc_coords my_coords(const rt_ckpt_ranks *R)
{
    return tgc_topology_coords(tgc_comm_topology(R->comm), tgc_comm_rank(R->comm));
}

/* Rank (tp, dp, pp)'s executor when it is in this process, else NULL. */
static rt_exec *rank_at(const rt_ckpt_ranks *R, int tp, int dp, int pp)
{
    TGC_ASSERT(tp < R->t && dp < R->d && pp < R->p);
    if (R->comm) {
        tgc_coords me = my_coords(R);
        return me.tp == tp && me.dp == dp && me.pp == pp ? R->ex[0] : NULL;
    }
    return R->ex[((size_t)dp * (size_t)R->p + (size_t)pp) * (size_t)R->t + (size_t)tp];
}

/* Whether a rank of this process has tensor-parallel rank r of stage s. */
static bool holds(const rt_ckpt_ranks *R, int r, int s)
{
    if (!R->comm) return true;
    tgc_coords me = my_coords(R);
    return me.tp == r && me.pp == s;
}

bool rt_ckpt_is_root(const rt_ckpt_ranks *R) { return !R->comm || tgc_comm_rank(R->comm) == R->root; }

bool rt_ckpt_agree(const rt_ckpt_ranks *R, bool ok, int *first)
{
    if (first) *first = ok ? -1 : 0;
    if (!R->comm) return ok;
    int n = tgc_comm_size(R->comm);
    unsigned char mine = ok, *all = xmalloc((size_t)n);
    bool agreed = tgc_comm_all_gather(R->comm, TGC_COMM_WORLD, &mine, all, 1, TGC_COMM_BYTE) == TGC_COMM_OK;
    int bad = -1;
    for (int r = 0; agreed && r < n && bad < 0; r++)
        if (!all[r]) bad = r;
    free(all);
    if (first) *first = agreed ? bad : tgc_comm_rank(R->comm);
    return agreed && bad < 0;
}

/* `bytes` of rank (tp, dp, pp)'s device memory at `at` (on its executor
 * e; NULL where that rank is in another process) to host memory `to` on
 * the assembling rank (NULL elsewhere): a download within the process, a
 * message from another (downloaded by the holder first). 0, a
 * communicator status, or RT_CKPT_ERR_DEVICE (rt_exec_error says why). */
static int xfer(const rt_ckpt_ranks *R, rt_exec *e, int tp, int dp, int pp, const void *at, void *to, size_t bytes)
{
    if (!R->comm) return rt_exec_read(e, at, to, bytes) ? TGC_COMM_OK : RT_CKPT_ERR_DEVICE;
    int holder = tgc_topology_rank(tgc_comm_topology(R->comm), (tgc_coords){tp, dp, pp}), me = tgc_comm_rank(R->comm);
    if (me == R->root && holder == me) return rt_exec_read(e, at, to, bytes) ? TGC_COMM_OK : RT_CKPT_ERR_DEVICE;
    if (me == R->root) return tgc_comm_recv(R->comm, to, bytes, TGC_COMM_BYTE, holder, RT_CKPT_TAG);
    if (me != holder) return TGC_COMM_OK;
    void *host = xmalloc(bytes ? bytes : 1);
    /* The root waits for the message either way: a failed read sends
     * zeros and the holder reports it (the save then fails everywhere). */
    bool read = rt_exec_read(e, at, host, bytes);
    if (!read) memset(host, 0, bytes);
    int rc = tgc_comm_send(R->comm, host, bytes, TGC_COMM_BYTE, R->root, RT_CKPT_TAG);
    free(host);
    return rc ? rc : read ? TGC_COMM_OK : RT_CKPT_ERR_DEVICE;
}

/* The pipeline rank holding p (export_tensors' rule: stage 0 without stages). */
static int stage_of(const rt_ckpt_ranks *R, const ir_node *p) { return R->p > 1 && p->stage > 0 ? p->stage : 0; }

static const ir_node *grad_of(const ir_graph *g, const ir_node *p)
{
    char name[1024];
    snprintf(name, sizeof name, "grad.%s", p->name);
    return ir_graph_find(g, name);
}

/* Optimizer-state slot k of p on rank e (a device address), whose state
 * is not sharded: it has the parameter buffer's layout. */
static char *state_at(const rt_exec *e, int k, int64_t elem, int64_t esz)
{
    return rt_exec_state_ptr(e, k, elem * esz);
}

/* n elements of slot k from element `elem` of rank (tp, dp, pp)'s state:
 * to part on the assembling rank, or from part into the rank if it is here. */
static int state_move(const rt_ckpt_ranks *R, int tp, int dp, int pp, int k, int64_t elem, char *part, int64_t n,
                      int64_t esz, bool to_part)
{
    rt_exec *e = rank_at(R, tp, dp, pp);
    char *at = e ? state_at(e, k, elem, esz) : NULL;
    if (to_part) return xfer(R, e, tp, dp, pp, at, part, (size_t)(n * esz));
    if (at && !rt_exec_write(e, at, part, (size_t)(n * esz))) return RT_CKPT_ERR_DEVICE;
    return TGC_COMM_OK;
}

/* Copies slot k of p's local part (tp r, stage s) between part and the
 * ranks; under the distributed optimizer element i of the flat buffer lives
 * on replica i / S, at i - replica * S of its slot (S is the same on every
 * rank: the whole graph's parameter buffer over d). */
static int state_part(const rt_ckpt_ranks *R, const ir_node *p, int k, int r, int s, char *part, bool to_part)
{
    /* The state is in p's dtype (fp32), element for element beside the
     * parameter buffer, which mixed precision stores in 16 bits. */
    int64_t esz = ir_dtype_size(p->dtype), n = ir_shape_numel(&p->shape);
    int64_t i0 = p->mem_offset / ir_storage_size(R->ex[0]->g, p), S = R->ex[0]->shard_elems;
    int rc = TGC_COMM_OK;
    if (S == 0) {
        for (int dp = 0; dp < (to_part ? 1 : R->d) && !rc; dp++) rc = state_move(R, r, dp, s, k, i0, part, n, esz, to_part);
        return rc;
    }
    for (int64_t j = 0; j < n && !rc;) {
        int64_t i = i0 + j, rep = i / S, run = (rep + 1) * S - i;
        if (run > n - j) run = n - j;
        rc = state_move(R, r, (int)rep, s, k, i - rep * S, part ? part + j * esz : NULL, run, esz, to_part);
        j += run;
    }
    return rc;
}

bool rt_ckpt_gather(const rt_ckpt_ranks *R, const ir_node *p, int what, void *whole)
{
    TGC_ASSERT((whole != NULL) == rt_ckpt_is_root(R));
    const ir_graph *g = R->ex[0]->g;
    int s = stage_of(R, p), nt = p->shard.dim >= 0 ? R->t : 1, rc = TGC_COMM_OK;
    const ir_node *v = what == RT_CKPT_GRAD ? grad_of(g, p) : p;
    int64_t bytes = ir_shape_numel(&p->shape) * ir_dtype_size(p->dtype);
    if (!v) { /* a parameter without a gradient */
        ir_shape w = rt_param_whole_shape(p, R->t);
        if (whole) memset(whole, 0, (size_t)(ir_shape_numel(&w) * ir_dtype_size(p->dtype)));
        return true;
    }
    /* A value stored in 16 bits (mixed precision) travels as stored and is
     * widened here: checkpoints hold fp32. */
    ir_dtype st = what < 0 ? ir_storage_dtype(g, v) : p->dtype;
    int64_t sbytes = ir_shape_numel(&p->shape) * ir_dtype_size(st);
    char *part = whole ? xmalloc((size_t)bytes) : NULL;
    uint16_t *half = whole && st != p->dtype ? xmalloc((size_t)sbytes) : NULL;
    for (int r = 0; r < nt && !rc; r++) {
        if (what >= 0) rc = state_part(R, p, what, r, s, part, true);
        else {
            rt_exec *e = rank_at(R, r, 0, s);
            rc = xfer(R, e, r, 0, s, e ? rt_exec_ptr(e, v) : NULL, half ? (void *)half : part, (size_t)sbytes);
            if (!rc && half) rt_widen16(st, half, (float *)part, ir_shape_numel(&p->shape));
        }
        if (!rc && whole) rt_shard_copy(p, R->t, r, whole, part, true);
    }
    free(part);
    free(half);
    return rc == TGC_COMM_OK;
}

bool rt_ckpt_scatter(const rt_ckpt_ranks *R, const ir_node *p, int what, const void *whole)
{
    TGC_ASSERT(what != RT_CKPT_GRAD);
    /* A parameter of no stage is on every pipeline rank (as the
     * initialisation puts it), one not split over the tensor-parallel
     * ranks on each of them. */
    int s0 = stage_of(R, p), s1 = R->p > 1 && p->stage < 0 ? R->p : s0 + 1;
    size_t bytes = (size_t)(ir_shape_numel(&p->shape) * ir_dtype_size(p->dtype));
    char *tmp = xmalloc(bytes);
    /* A parameter stored in 16 bits (mixed precision) is rounded into its
     * storage; the state slots (the fp32 masters among them) are fp32. */
    ir_dtype st = ir_storage_dtype(R->ex[0]->g, p);
    size_t sbytes = (size_t)(ir_shape_numel(&p->shape) * ir_dtype_size(st));
    uint16_t *half = st != p->dtype ? xmalloc(sbytes) : NULL;
    bool ok = true;
    for (int s = s0; s < s1 && ok; s++)
        for (int r = 0; r < R->t && ok; r++) {
            if (!holds(R, r, s)) continue;
            rt_shard_copy(p, R->t, r, (char *)whole, tmp, false);
            if (what >= 0) {
                ok = state_part(R, p, what, r, s, tmp, false) == TGC_COMM_OK;
                continue;
            }
            if (half) rt_narrow16(st, (const float *)tmp, half, ir_shape_numel(&p->shape));
            for (int dp = 0; dp < R->d && ok; dp++) {
                rt_exec *e = rank_at(R, r, dp, s);
                if (e) ok = rt_exec_write(e, rt_exec_ptr(e, p), half ? (void *)half : tmp, half ? sbytes : bytes);
            }
        }
    free(tmp);
    free(half);
    return ok;
}

/* ---- the optimizer's state slots ------------------------------------------------ */

#define MAX_SLOTS 8

static const ir_node *optimizer_node(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (ir_node_is_update(g->nodes[i])) return g->nodes[i];
    return NULL;
}

/* The slots the program's kernels use, by name: the optimizer's moments
 * and the fp32 master weights. Returns their count; names[k] NULL: unused. */
static int state_slots(const rt_exec *e, const char *names[MAX_SLOTS])
{
    const cg_program *prog = e->prog;
    bool used[MAX_SLOTS] = {false};
    for (int k = 0; k < prog->nkernels; k++)
        for (int a = 0; a < prog->kernels[k]->nargs; a++)
            if (prog->binds[k][a].kind == CG_BIND_STATE && prog->binds[k][a].node < MAX_SLOTS)
                used[prog->binds[k][a].node] = true;
    const ir_node *opt = optimizer_node(e->g);
    bool adam = opt && opt->op == IR_OP_ADAMW;
    int n = 0;
    for (int k = 0; k < MAX_SLOTS; k++) {
        names[k] = NULL;
        if (!used[k]) continue;
        if (k == prog->master_slot) names[k] = "master";
        else if (adam && k <= 1) names[k] = k == 0 ? "exp_avg" : "exp_avg_sq";
        else if (!adam && k == 0) names[k] = "momentum";
        else {
            static const char *const other[MAX_SLOTS] = {"slot0", "slot1", "slot2", "slot3",
                                                         "slot4", "slot5", "slot6", "slot7"};
            names[k] = other[k];
        }
        n++;
    }
    return n;
}

static const char *precision_name(const ir_graph *g)
{
    return g->precision == IR_BF16 ? "bf16" : g->precision == IR_F16 ? "fp16" : "fp32";
}

/* ---- checksums and metadata ----------------------------------------------------- */

static uint64_t fnv1a64(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Key/value strings owned by the list. */
typedef struct kv_list {
    tgc_st_kv *kv;
    int n, cap;
} kv_list;

static void kv_add(kv_list *l, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void kv_add(kv_list *l, const char *key, const char *fmt, ...)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->kv = xrealloc(l->kv, (size_t)l->cap * sizeof *l->kv);
    }
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    l->kv[l->n++] = (tgc_st_kv){xstrdup(key), xstrdup(buf)};
}

static void kv_free(kv_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free((char *)l->kv[i].key);
        free((char *)l->kv[i].value);
    }
    free(l->kv);
}

/* Tensors of one file, with their buffers and checksums. */
typedef struct tensor_list {
    tgc_st_tensor *t;
    ir_shape *shape;
    char **name, **buf;
    int n, cap;
} tensor_list;

/* Adds `what` of p (named PREFIX.NAME) gathered from the ranks; on a rank
 * that does not assemble, only sends its parts. false when a message failed. */
static bool tl_add(tensor_list *l, const rt_ckpt_ranks *R, const ir_node *p, const char *prefix, int what,
                   kv_list *meta)
{
    if (!rt_ckpt_is_root(R)) return rt_ckpt_gather(R, p, what, NULL);
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
        l->shape = xrealloc(l->shape, (size_t)l->cap * sizeof *l->shape);
        l->name = xrealloc(l->name, (size_t)l->cap * sizeof *l->name);
        l->buf = xrealloc(l->buf, (size_t)l->cap * sizeof *l->buf);
    }
    int i = l->n++;
    ir_shape whole = rt_param_whole_shape(p, R->t);
    l->shape[i] = rt_param_logical_shape(p, R->t);
    size_t esz = (size_t)ir_dtype_size(p->dtype);
    l->buf[i] = xmalloc((size_t)ir_shape_numel(&whole) * esz);
    size_t len = strlen(p->name) + (prefix ? strlen(prefix) + 2 : 1);
    l->name[i] = xmalloc(len);
    snprintf(l->name[i], len, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", p->name);
    l->t[i] = (tgc_st_tensor){l->name[i], TGC_ST_F32, l->shape[i].rank, l->shape[i].dim, l->buf[i]};
    rt_st_dtype_of(p->dtype, &l->t[i].dtype);
    if (!rt_ckpt_gather(R, p, what, l->buf[i])) return false;
    /* The logical rows are the first ones of the whole tensor. */
    char key[1100];
    snprintf(key, sizeof key, "checksum.%s", l->name[i]);
    kv_add(meta, key, "%016" PRIx64, fnv1a64(l->buf[i], (size_t)ir_shape_numel(&l->shape[i]) * esz));
    return true;
}

static void tl_free(tensor_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->buf[i]);
        free(l->name[i]);
    }
    free(l->t);
    free(l->shape);
    free(l->name);
    free(l->buf);
}

/* The header: where the run stands and the options that shaped it. */
static void header_meta(kv_list *m, const rt_ckpt_ranks *R, const rt_ckpt_state *st, const rt_train_opts *o)
{
    const ir_graph *g = R->ex[0]->g;
    const ir_node *opt = optimizer_node(g);
    kv_add(m, "producer", "tgc");
    kv_add(m, "model", "%s", g->model);
    kv_add(m, "tgc_checkpoint_version", "%d", RT_CKPT_VERSION);
    kv_add(m, "checksum", "fnv1a64");
    kv_add(m, "step", "%" PRId64, st->step);
    kv_add(m, "opt_step", "%" PRId64, st->opt_step);
    kv_add(m, "loss_scale", "%.17g", st->loss_scale);
    kv_add(m, "loss_scale_growth", "%" PRId64, st->scale_growth);
    kv_add(m, "hysteresis_left", "%" PRId64, st->hysteresis_left);
    kv_add(m, "seed", "%" PRId64, o->seed);
    kv_add(m, "train_iters", "%" PRId64, o->iters);
    kv_add(m, "tp", "%d", R->t);
    kv_add(m, "pp", "%d", R->p);
    kv_add(m, "dp", "%d", R->d);
    kv_add(m, "use_distributed_optimizer", "%s", R->ex[0]->shard_elems > 0 ? "true" : "false");
    kv_add(m, "micro_batch_size", "%" PRId64, o->micro_batch);
    kv_add(m, "global_batch_size", "%" PRId64, o->global_batch);
    kv_add(m, "optimizer", "%s", opt ? ir_op_name(opt->op) : "none");
    kv_add(m, "precision", "%s", precision_name(g));
    kv_add(m, "lr", "%.17g", o->sched.lr);
    kv_add(m, "min_lr", "%.17g", o->sched.min_lr);
    kv_add(m, "lr_warmup_iters", "%" PRId64, o->sched.warmup_iters);
    kv_add(m, "lr_decay_iters", "%" PRId64, o->sched.decay_iters);
    kv_add(m, "lr_decay_style", "%d", (int)o->sched.decay);
    kv_add(m, "start_weight_decay", "%.17g", o->sched.start_wd);
    kv_add(m, "end_weight_decay", "%.17g", o->sched.end_wd);
}

/* ---- files and directories ------------------------------------------------------ */

static bool fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    bool ok = fsync(fd) == 0 || errno == EINVAL; /* not every file system syncs directories */
    close(fd);
    return ok;
}

/* Removes dir and the plain files in it (a checkpoint directory). */
/* Removes dir and the files in it (a checkpoint's directory holds no
 * subdirectories). A symlink at dir is removed itself, never followed: a
 * stale iter_N.tmp-PID planted as a link to another directory must not
 * empty that one. */
static void remove_tree(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dp) {
        if (fd >= 0) close(fd);
        struct stat st;
        if (lstat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) unlink(dir);
        return;
    }
    struct dirent *de;
    while ((de = readdir(dp)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) unlinkat(dirfd(dp), de->d_name, 0);
    closedir(dp);
    rmdir(dir);
}

/* Directories iter_*.tmp-PID left by a process that no longer runs (a crash
 * during a save) are removed. */
static void remove_stale(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        const char *t = strstr(de->d_name, ".tmp-");
        if (strncmp(de->d_name, "iter_", 5) != 0 || !t) continue;
        long pid = strtol(t + 5, NULL, 10);
        if (pid <= 0 || (pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH))) continue;
        char *p = path_join(dir, de->d_name);
        remove_tree(p);
        free(p);
    }
    closedir(dp);
}

static void test_delay(void)
{
    long ms = (long)env_int("TGC_CKPT_TEST_DELAY_MS");
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Moves tmp to final: atomically exchanged with an existing final (a
 * checkpoint of the same iteration saved before), else renamed. */
static bool install_dir(const char *tmp, const char *final)
{
    if (rename(tmp, final) == 0) return true;
    if (errno != ENOTEMPTY && errno != EEXIST) return false;
#ifdef SYS_renameat2
    if (syscall(SYS_renameat2, AT_FDCWD, tmp, AT_FDCWD, final, 2 /* RENAME_EXCHANGE */) == 0) {
        remove_tree(tmp); /* now the old one */
        return true;
    }
#endif
    return false;
}

/* DIR/latest names iteration `step`: written atomically (file_write_atomic). */
static bool write_latest(const char *dir, int64_t step, char **failed)
{
    char text[32], why[256];
    int n = snprintf(text, sizeof text, "%" PRId64 "\n", step);
    char *latest = path_join(dir, "latest");
    bool ok = file_write_atomic(latest, text, (size_t)n, why, sizeof why);
    if (!ok) *failed = latest; /* errno says why */
    else free(latest);
    return ok;
}

/* The iteration DIR/latest names; -1 when there is none (or it is not a number). */
static int64_t read_latest(const char *dir, char *text, size_t cap)
{
    char *latest = path_join(dir, "latest");
    struct stat st;
    char why[256];
    int fd = file_open(latest, FILE_SMALL, &st, why, sizeof why);
    free(latest);
    text[0] = 0;
    if (fd < 0 && errno == ENOENT) return -2;
    if (fd < 0) {
        snprintf(text, cap, "%.*s", (int)cap - 1, why);
        return -1;
    }
    ssize_t got = read(fd, text, cap - 1);
    close(fd);
    size_t n = got > 0 ? (size_t)got : 0;
    text[n] = 0;
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) text[--n] = 0;
    char *end;
    long long v = strtoll(text, &end, 10);
    return n && !*end && v >= 0 ? (int64_t)v : -1;
}

static char *iter_dir(const char *dir, int64_t step)
{
    char name[64];
    snprintf(name, sizeof name, "iter_%07" PRId64, step);
    return path_join(dir, name);
}

/* ---- saving ----------------------------------------------------------------------- */

/* The two files of a checkpoint, whole, on the assembling rank. */
typedef struct ckpt_files {
    kv_list mmeta, ometa;
    tensor_list mt, ot;
} ckpt_files;

/* Every parameter and state slot, gathered from the ranks (collective with
 * a communicator; the other ranks only send). false when a message failed. */
static bool collect_files(ckpt_files *F, const rt_ckpt_ranks *R, const rt_ckpt_state *st, const rt_train_opts *o)
{
    const ir_graph *g = R->ex[0]->g;
    bool root = rt_ckpt_is_root(R), ok = true;
    if (root) header_meta(&F->mmeta, R, st, o);
    const char *slots[MAX_SLOTS];
    state_slots(R->ex[0], slots);
    for (int i = 0; ok && i < g->nnodes; i++) {
        const ir_node *p = g->nodes[i];
        if (!(p->flags & IR_NF_PARAM)) continue;
        ok = tl_add(&F->mt, R, p, NULL, RT_CKPT_VALUE, &F->mmeta);
        for (int k = 0; ok && k < MAX_SLOTS; k++)
            if (slots[k]) ok = tl_add(&F->ot, R, p, slots[k], k, &F->ometa);
    }
    if (!root) return ok;
    kv_add(&F->ometa, "producer", "tgc");
    kv_add(&F->ometa, "model", "%s", g->model);
    kv_add(&F->ometa, "tgc_checkpoint_version", "%d", RT_CKPT_VERSION);
    kv_add(&F->ometa, "checksum", "fnv1a64");
    kv_add(&F->ometa, "step", "%" PRId64, st->step);
    /* The shapes' arrays moved as the lists grew. */
    for (int i = 0; i < F->mt.n; i++) F->mt.t[i].shape = F->mt.shape[i].dim;
    for (int i = 0; i < F->ot.n; i++) F->ot.t[i].shape = F->ot.shape[i].dim;
    return ok;
}

static bool write_files(const char *tmp, const ckpt_files *F, diag *d)
{
    char *mpath = path_join(tmp, "model.safetensors"), *opath = path_join(tmp, "optimizer.safetensors");
    test_delay();
    bool ok = tgc_st_write(mpath, F->mt.t, F->mt.n, F->mmeta.kv, F->mmeta.n, d);
    if (ok) test_delay();
    ok = ok && tgc_st_write(opath, F->ot.t, F->ot.n, F->ometa.kv, F->ometa.n, d);
    free(mpath);
    free(opath);
    return ok;
}

static void files_free(ckpt_files *F)
{
    tl_free(&F->mt);
    tl_free(&F->ot);
    kv_free(&F->mmeta);
    kv_free(&F->ometa);
}

/* DIR and a fresh temporary directory in it (stale ones of dead processes removed). */
static bool save_prepare(const char *dir, const char *tmp, diag *d)
{
    if (!file_mkdirs(dir, 0777)) {
        diag_error_plain(d, "--save: cannot create the directory '%s': %s", dir, strerror(errno));
        return false;
    }
    remove_stale(dir);
    remove_tree(tmp);
    if (mkdir(tmp, 0777) != 0) {
        diag_error_plain(d, "--save: cannot create '%s': %s", tmp, strerror(errno));
        return false;
    }
    return true;
}

/* The written directory to DIR/iter_N, then DIR/latest; *wrote false once
 * the temporary directory is gone. */
static bool save_install(const char *dir, const char *tmp, const char *final, int64_t step, bool *wrote, diag *d)
{
    test_delay();
    if (!fsync_path(tmp) || !install_dir(tmp, final)) {
        diag_error_plain(d, "--save: cannot move '%s' to '%s': %s", tmp, final, strerror(errno));
        return false;
    }
    *wrote = false;
    char *failed = NULL;
    bool ok = fsync_path(dir) && write_latest(dir, step, &failed);
    if (!ok) diag_error_plain(d, "--save: cannot write '%s': %s", failed ? failed : dir, strerror(errno));
    free(failed);
    return ok;
}

bool rt_ckpt_save(const char *dir, const rt_ckpt_ranks *R, const rt_ckpt_state *st, const rt_train_opts *o, diag *d)
{
    bool root = rt_ckpt_is_root(R);
    char prev_text[64], name[96];
    int64_t prev = root ? read_latest(dir, prev_text, sizeof prev_text) : -2;
    char *final = iter_dir(dir, st->step), *prev_dir = prev >= 0 ? iter_dir(dir, prev) : NULL;
    snprintf(name, sizeof name, "iter_%07" PRId64 ".tmp-%ld", st->step, (long)getpid());
    char *tmp = path_join(dir, name);
    bool ok = !root || save_prepare(dir, tmp, d);
    bool wrote = root && ok; /* a failure below leaves the temporary directory to remove */
    /* Every rank learns whether the root's directory is ready, and at the
     * end whether the checkpoint is complete. */
    if (rt_ckpt_agree(R, ok, NULL)) {
        ckpt_files F = {0};
        ok = collect_files(&F, R, st, o);
        if (ok && root) ok = write_files(tmp, &F, d) && save_install(dir, tmp, final, st->step, &wrote, d);
        files_free(&F);
        ok = rt_ckpt_agree(R, ok, NULL) && ok;
    } else
        ok = false;
    if (!ok && root) {
        if (R->comm && tgc_comm_last_status(R->comm) != TGC_COMM_OK)
            diag_error_plain(d, "--save: %s", tgc_comm_error(R->comm));
        if (wrote) remove_tree(tmp);
        if (prev >= 0)
            diag_error_plain(d, "--save: the checkpoint of step %" PRId64 " was not saved%s; the previous checkpoint "
                             "'%s' (named by %s/latest) is intact", st->step, wrote ? " (its partial files were removed)"
                             : "", prev_dir, dir);
        else
            diag_error_plain(d, "--save: the checkpoint of step %" PRId64 " was not saved%s; '%s' holds no earlier "
                             "checkpoint", st->step, wrote ? " (its partial files were removed)" : "", dir);
    } else if (ok && root && !o->quiet)
        fprintf(stderr, "tgc: saved checkpoint %s (step %" PRId64 ")\n", final, st->step);
    free(final);
    free(prev_dir);
    free(tmp);
    return ok;
}

/* ---- one writer per directory ---------------------------------------------------- */

/* What DIR/tgc.lock says of its holder ("pid 123 on host h"), or that it
 * names none (a lock taken by another program). */
static void lock_holder(int fd, char *buf, size_t cap)
{
    ssize_t n = pread(fd, buf, cap - 1, 0);
    if (n < 0) n = 0;
    buf[n] = 0;
    buf[strcspn(buf, "\n")] = 0;
    if (!*buf) snprintf(buf, cap, "a process the lock file does not name");
}

/* Opens DIR/tgc.lock without following a symlink there (O_NOFOLLOW) and
 * without truncating it: a lock that is not a regular file of one link, or
 * that belongs to another user, is refused by name, so a file planted there
 * is never written. -1 after reporting. */
static int lock_open(const char *path, diag *d)
{
    /* O_CLOEXEC: the C compiler tgc starts must not inherit the lock;
     * O_NONBLOCK: a FIFO there cannot hang tgc. */
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd < 0 && errno == ELOOP) {
        diag_error_plain(d, "--save: the lock file '%s' is a symbolic link; tgc does not follow it (remove it)", path);
        return -1;
    }
    if (fd < 0) {
        diag_error_plain(d, "--save: cannot open the lock file '%s': %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    const char *bad = NULL;
    if (fstat(fd, &st) != 0) bad = strerror(errno);
    else if (!S_ISREG(st.st_mode)) bad = "it is not a regular file";
    else if (st.st_nlink != 1) bad = "it has other hard links";
    else if (st.st_uid != geteuid()) bad = "it belongs to another user";
    if (bad) {
        diag_error_plain(d, "--save: refusing the lock file '%s': %s (remove it)", path, bad);
        close(fd);
        return -1;
    }
    return fd;
}

int rt_ckpt_lock(const char *dir, diag *d)
{
    if (!file_mkdirs(dir, 0777)) {
        diag_error_plain(d, "--save: cannot create the directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    char *path = path_join(dir, RT_CKPT_LOCK);
    int fd = lock_open(path, d);
    if (fd < 0) {
        free(path);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char holder[320];
        if (errno == EWOULDBLOCK) {
            lock_holder(fd, holder, sizeof holder);
            diag_error_plain(d, "--save %s: another run is writing its checkpoints there: '%s' is held by %s; give "
                             "each run its own --save directory", dir, path, holder);
        } else
            diag_error_plain(d, "--save: cannot lock '%s': %s", path, strerror(errno));
        close(fd);
        free(path);
        return -1;
    }
    char host[256] = "", text[320];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    int n = snprintf(text, sizeof text, "pid %ld on host %s\n", (long)getpid(), host);
    bool ok = ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)n, 0) == n;
    if (!ok) {
        diag_error_plain(d, "--save: cannot write the lock file '%s': %s", path, strerror(errno));
        close(fd);
        fd = -1;
    }
    free(path);
    return fd;
}

void rt_ckpt_unlock(int fd)
{
    if (fd >= 0) close(fd); /* closing the last descriptor releases the flock */
}

/* ---- loading ---------------------------------------------------------------------- */

/* The iteration directory DIR means: DIR/latest's, or DIR itself. */
static char *resolve(const char *dir, diag *d)
{
    char text[64];
    int64_t it = read_latest(dir, text, sizeof text);
    if (it >= 0) return iter_dir(dir, it);
    if (it == -1) {
        diag_error_plain(d, "--load: %s/latest does not hold an iteration number ('%s')", dir, text);
        return NULL;
    }
    char *m = path_join(dir, "model.safetensors");
    struct stat sb;
    bool here = stat(m, &sb) == 0;
    free(m);
    if (here) return xstrdup(dir);
    diag_error_plain(d, "--load: no checkpoint in '%s' (neither %s/latest nor %s/model.safetensors exists)", dir, dir,
                     dir);
    return NULL;
}

static bool meta_int(const tgc_st_file *f, const char *key, int64_t *out, diag *d)
{
    const char *v = tgc_st_meta(f, key);
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || end == v || *end) {
        diag_error((d), (src_loc){.file = tgc_st_path(f)}, "corrupt checkpoint header: metadata '%s' is %s", key,
                   v ? "not an integer" : "missing");
        return false;
    }
    *out = (int64_t)x;
    return true;
}

/* Opens a checkpoint file and verifies its version and every tensor's
 * checksum. */
static tgc_st_file *open_verified(const char *dir, const char *file, diag *d)
{
    char *path = path_join(dir, file);
    tgc_st_file *f = tgc_st_open(path, d);
    free(path);
    if (!f) return NULL;
    src_loc at = {.file = tgc_st_path(f)};
    const char *ver = tgc_st_meta(f, "tgc_checkpoint_version");
    bool ok = true;
    if (!ver) {
        diag_error(d, at, "not a tgc checkpoint (its metadata has no tgc_checkpoint_version)");
        ok = false;
    } else if (atoi(ver) != RT_CKPT_VERSION) {
        diag_error(d, at, "checkpoint format version %s; this tgc reads version %d", ver, RT_CKPT_VERSION);
        ok = false;
    }
    for (int i = 0; ok && i < tgc_st_count(f); i++) {
        const tgc_st_info *t = tgc_st_at(f, i);
        char key[1100], have[20];
        snprintf(key, sizeof key, "checksum.%s", t->name);
        const char *want = tgc_st_meta(f, key);
        snprintf(have, sizeof have, "%016" PRIx64, fnv1a64(t->data, (size_t)t->nbytes));
        if (!want) diag_error(d, at, "tensor '%s' has no checksum in the header", t->name);
        else if (strcmp(want, have) != 0)
            diag_error(d, at, "checksum mismatch in tensor '%s' (stored %s, computed %s): the file is corrupt", t->name,
                       want, have);
        ok = want && strcmp(want, have) == 0;
    }
    if (!ok) {
        tgc_st_close(f);
        return NULL;
    }
    return f;
}

/* The header against this run: the model, the optimizer and the precision
 * must agree; the partition may differ (resharding). */
static bool check_header(const tgc_st_file *mf, const tgc_st_file *of, const rt_ckpt_ranks *R, const rt_train_opts *o,
                         rt_ckpt_state *st, diag *d)
{
    const ir_graph *g = R->ex[0]->g;
    src_loc at = {.file = tgc_st_path(mf)};
    const char *model = tgc_st_meta(mf, "model"), *opt = tgc_st_meta(mf, "optimizer"),
               *prec = tgc_st_meta(mf, "precision"), *ls = tgc_st_meta(mf, "loss_scale");
    const ir_node *on = optimizer_node(g);
    const char *my_opt = on ? ir_op_name(on->op) : "none";
    int64_t ostep = 0, seed = 0;
    bool ok = meta_int(mf, "step", &st->step, d) && meta_int(mf, "opt_step", &st->opt_step, d) &&
              meta_int(mf, "loss_scale_growth", &st->scale_growth, d) &&
              meta_int(mf, "hysteresis_left", &st->hysteresis_left, d) && meta_int(mf, "seed", &seed, d) &&
              meta_int(of, "step", &ostep, d);
    if (!ok) return false;
    char *end = NULL;
    st->loss_scale = ls ? strtod(ls, &end) : 0.0;
    if (!ls || end == ls || *end) {
        diag_error(d, at, "corrupt checkpoint header: metadata 'loss_scale' is %s", ls ? "not a number" : "missing");
        return false;
    }
    if (ostep != st->step) {
        diag_error(d, (src_loc){.file = tgc_st_path(of)}, "of step %" PRId64 ", but model.safetensors beside it is of "
                   "step %" PRId64 "", ostep, st->step);
        return false;
    }
    if (!model || strcmp(model, g->model) != 0) {
        diag_error(d, at, "a checkpoint of model '%s', but this run trains model '%s'", model ? model : "?", g->model);
        return false;
    }
    if (!opt || strcmp(opt, my_opt) != 0 || !prec || strcmp(prec, precision_name(g)) != 0) {
        diag_error(d, at, "saved with optimizer %s and %s precision; this run has optimizer %s and %s precision (the "
                   "optimizer state differs)", opt ? opt : "?", prec ? prec : "?", my_opt, precision_name(g));
        return false;
    }
    if (seed != o->seed && !o->quiet)
        fprintf(stderr, "tgc: note: the checkpoint was trained with --seed %" PRId64 ", this run has --seed %" PRId64
                ": data order and dropout masks continue from the new seed\n", seed, o->seed);
    return true;
}

/* Every parameter (model) or state slot (optimizer) the run needs, by name
 * and logical shape, into the ranks. */
static bool load_tensors(const tgc_st_file *f, const rt_ckpt_ranks *R, int what, const char *prefix, diag *d)
{
    const ir_graph *g = R->ex[0]->g;
    bool ok = true;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *p = g->nodes[i];
        if (!(p->flags & IR_NF_PARAM)) continue;
        char name[1100];
        snprintf(name, sizeof name, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", p->name);
        tgc_st_dtype dt = TGC_ST_F32;
        rt_st_dtype_of(p->dtype, &dt);
        ir_shape s = rt_param_logical_shape(p, R->t), whole = rt_param_whole_shape(p, R->t);
        const void *src = tgc_st_expect(f, name, dt, s.rank, s.dim, d);
        if (!src) { ok = false; continue; }
        /* Padding rows (past the vocabulary) start at zero. */
        size_t esz = (size_t)ir_dtype_size(p->dtype);
        char *buf = xcalloc((size_t)ir_shape_numel(&whole), esz);
        memcpy(buf, src, (size_t)ir_shape_numel(&s) * esz);
        if (!rt_ckpt_scatter(R, p, what, buf)) {
            diag_error_plain(d, "%s: '%s' to the device: %s", tgc_st_path(f), name, rt_exec_error(R->ex[0]));
            ok = false;
        }
        free(buf);
    }
    return ok;
}

/* Loads the checkpoint into the ranks of this process; *saved gets the
 * saving run's partition ("t=2 p=2 d=1") and *same whether it is this run's. */
static bool load_here(const char *dir, const rt_ckpt_ranks *R, const rt_train_opts *o, rt_ckpt_state *st,
                      char **it, char saved[64], bool *same, diag *d)
{
    if (!(*it = resolve(dir, d))) return false;
    tgc_st_file *mf = open_verified(*it, "model.safetensors", d);
    tgc_st_file *of = mf ? open_verified(*it, "optimizer.safetensors", d) : NULL;
    bool ok = of && check_header(mf, of, R, o, st, d) && load_tensors(mf, R, RT_CKPT_VALUE, NULL, d);
    const char *slots[MAX_SLOTS];
    state_slots(R->ex[0], slots);
    for (int k = 0; ok && k < MAX_SLOTS; k++)
        if (slots[k]) ok = load_tensors(of, R, k, slots[k], d);
    if (ok) {
        /* The saving run's partition (informative only). */
        const char *t = tgc_st_meta(mf, "tp"), *p = tgc_st_meta(mf, "pp"), *dd = tgc_st_meta(mf, "dp");
        *same = t && p && dd && atoi(t) == R->t && atoi(p) == R->p && atoi(dd) == R->d;
        snprintf(saved, 64, "t=%.8s p=%.8s d=%.8s", t ? t : "?", p ? p : "?", dd ? dd : "?");
    }
    tgc_st_close(mf);
    tgc_st_close(of);
    return ok;
}

/* One process per rank: each loads its own parts, its messages held back
 * until all agree; the lowest failing rank reports. */
static bool load_ranks(const char *dir, const rt_ckpt_ranks *R, const rt_train_opts *o, rt_ckpt_state *st,
                       char **it, char saved[64], bool *same, diag *d)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    diag held;
    diag_init(&held, mem ? mem : d->out);
    rt_train_opts q = *o;
    q.quiet = o->quiet || !rt_ckpt_is_root(R);
    bool ok = load_here(dir, R, &q, st, it, saved, same, &held);
    if (mem) fclose(mem);
    int first, me = tgc_comm_rank(R->comm);
    bool all = rt_ckpt_agree(R, ok, &first), lost = tgc_comm_last_status(R->comm) != TGC_COMM_OK;
    /* Who failed is known unless the exchange itself failed: then every
     * failing rank reports, and the root what the exchange met. */
    if (!ok && (lost || me == first)) {
        if (text) fputs(text, d->out);
        d->nerrors += held.nerrors;
    }
    if (lost && rt_ckpt_is_root(R)) diag_error_plain(d, "--load: %s", tgc_comm_error(R->comm));
    if (!lost && me == first && first > 0)
        diag_error_plain(d, "--load: rank %d of %d could not load the checkpoint (the messages above are its own; "
                         "every rank reads the files itself: a run over several hosts needs a shared file system)",
                         first, tgc_comm_size(R->comm));
    diag_free(&held);
    free(text);
    return all;
}

bool rt_ckpt_load(const char *dir, const rt_ckpt_ranks *R, const rt_train_opts *o, rt_ckpt_state *st, diag *d)
{
    char *it = NULL, saved[64] = "";
    bool same = false;
    bool ok = R->comm ? load_ranks(dir, R, o, st, &it, saved, &same, d) : load_here(dir, R, o, st, &it, saved, &same, d);
    if (ok && rt_ckpt_is_root(R) && !o->quiet)
        fprintf(stderr, "tgc: loaded checkpoint %s (step %" PRId64 ", saved with %s%s)\n", it, st->step, saved,
                same ? "" : ", resharded to this run's partition");
    free(it);
    return ok;
}

bool rt_ckpt_export(const char *ckpt, const char *out, diag *d)
{
    char *it = resolve(ckpt, d);
    if (!it) return false;
    tgc_st_file *f = open_verified(it, "model.safetensors", d);
    free(it);
    if (!f) return false;
    int n = tgc_st_count(f);
    tgc_st_tensor *ts = xcalloc((size_t)n + 1, sizeof *ts);
    for (int i = 0; i < n; i++) {
        const tgc_st_info *t = tgc_st_at(f, i);
        ts[i] = (tgc_st_tensor){t->name, t->dtype, t->rank, t->shape, t->data};
    }
    const char *model = tgc_st_meta(f, "model");
    tgc_st_kv meta[] = {{"format", "pt"}, {"model", model ? model : "?"}, {"producer", "tgc"}};
    bool ok = tgc_st_write(out, ts, n, meta, 3, d);
    free(ts);
    tgc_st_close(f);
    return ok;
}

tgc_st_file *rt_ckpt_open_weights(const char *path, diag *d)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char *it = resolve(path, d);
        tgc_st_file *f = it ? open_verified(it, "model.safetensors", d) : NULL;
        free(it);
        return f;
    }
    tgc_st_file *f = tgc_st_open(path, d);
    if (f && tgc_st_meta(f, "tgc_checkpoint_version")) {
        tgc_st_close(f);
        const char *slash = strrchr(path, '/');
        char *dir = slash ? xstrdup(path) : xstrdup(".");
        if (slash) dir[slash == path ? 1 : slash - path] = 0;
        f = open_verified(dir, slash ? slash + 1 : path, d);
        free(dir);
    }
    return f;
}
