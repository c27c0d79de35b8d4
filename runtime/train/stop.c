#include "runtime/train/stop.h"

#include <stdio.h>

#include "runtime/comm/comm.h"

static volatile sig_atomic_t stop_signal_got;

/* Only async-signal-safe calls: an assignment and sigaction. */
static void stop_on_signal(int sig)
{
    stop_signal_got = sig;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
}

void rt_stop_handlers_install(rt_stop_handlers *h)
{
    stop_signal_got = 0;
    struct sigaction sa = {.sa_handler = stop_on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &h->old_int);
    sigaction(SIGTERM, &sa, &h->old_term);
}

void rt_stop_handlers_restore(const rt_stop_handlers *h)
{
    sigaction(SIGINT, &h->old_int, NULL);
    sigaction(SIGTERM, &h->old_term, NULL);
}

int rt_stop_signal(void) { return stop_signal_got; }

int rt_stop_agree(struct tgc_comm *world, bool exchange, bool timed, int *why)
{
    /* 2 x the signal + the time-out: the max keeps a signal over a time-out. */
    double v = (double)stop_signal_got * 2.0 + (timed ? 1.0 : 0.0);
    *why = 0;
    if (world && exchange) {
        int rc = tgc_comm_all_reduce(world, TGC_COMM_WORLD, &v, 1, TGC_COMM_F64, TGC_COMM_MAX);
        if (rc != TGC_COMM_OK) return rc;
    }
    if (v >= 2.0) *why = (int)(v / 2.0);
    else if (v >= 1.0) *why = RT_STOP_DURATION;
    return TGC_COMM_OK;
}

void rt_stop_cause(int why, int64_t exit_interval, double exit_duration_mins, char *buf, size_t cap)
{
    if (why == RT_STOP_INTERVAL) snprintf(buf, cap, "--exit-interval %lld", (long long)exit_interval);
    else if (why == RT_STOP_DURATION) snprintf(buf, cap, "--exit-duration-in-mins %g", exit_duration_mins);
    else snprintf(buf, cap, "%s", why == SIGINT ? "SIGINT" : why == SIGTERM ? "SIGTERM" : "a signal");
}
