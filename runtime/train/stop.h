/* Stopping a run early (docs/checkpoints.md, "Stopping a run"): Megatron's
 * exit signal handler and the agreement of every rank on the step after
 * which they stop (--exit-duration-in-mins, signals). */
#ifndef TGC_RT_STOP_H
#define TGC_RT_STOP_H
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a run stops early: a signal number (> 0), or one of these. */
#define RT_STOP_INTERVAL (-1) /* --exit-interval */
#define RT_STOP_DURATION (-2) /* --exit-duration-in-mins */

/* The handlers of SIGINT and SIGTERM for a run's life: the first signal is
 * only recorded (a sig_atomic_t) and both signals' default action put
 * back, so a second one ends the process at once. SA_RESTART: no system
 * call of the run fails with EINTR. */
typedef struct rt_stop_handlers {
    struct sigaction old_int, old_term;
} rt_stop_handlers;

void rt_stop_handlers_install(rt_stop_handlers *h);
void rt_stop_handlers_restore(const rt_stop_handlers *h);
/* The first signal received since the install (0: none). */
int rt_stop_signal(void);

/* Whether the ranks stop after this step, the same answer on every rank of
 * world (NULL: one rank, this one's view): a max all-reduce of one number
 * per step (the signal received here, whether `timed` out here) over the
 * world when exchange is set (the same on every rank). *why: a signal,
 * RT_STOP_DURATION, or 0. Returns the communicator's status (0: agreed). */
struct tgc_comm;
int rt_stop_agree(struct tgc_comm *world, bool exchange, bool timed, int *why);

/* "SIGTERM", "--exit-interval 5", ... into buf. */
void rt_stop_cause(int why, int64_t exit_interval, double exit_duration_mins, char *buf, size_t cap);

#endif
