/* A durable, highly available root on etcd (rdzvd --role root --etcd
 * URL[,URL...]).
 *
 * What it is: a state backend (store/daemon/state/state.h) that keeps a
 * job's state in memory, as the in-memory backend does, and persists every
 * change to etcd before the root acknowledges anything that depends on it;
 * and the leader election that lets several roots share one --etcd, one
 * leader serving, the others standing by.
 *
 * Persistence. Every change of a loop iteration (keys, counters, write-once
 * keys, round, assignment, collective and op records) marks its key dirty.
 * At the end of the iteration the transport's write gate (transport.h)
 * seals: the frames queued so far wait while the dirty keys go to etcd as
 * transactions of at most --etcd-max-txn-ops operations and
 * --etcd-max-request-bytes bytes (the latest value of each key once, so
 * etcd sees one write per combined message, not one per rank), each
 * fenced by a compare on the leader key's create revision. Once every
 * transaction of the batch succeeded the frames go out. A deposed
 * leader's transaction fails its compare: that root stands down. The
 * leader also watches its own key, and stands down when it is deleted or
 * replaced.
 *
 * etcd layout under --etcd-prefix P:
 *   P/leader                  the leader's address, on its lease
 *   P/roots/ADDR              every root's address, on its own lease
 *   P/incarnation             the state's identity (decimal), told to
 *                             nodes in the hello: it survives failovers
 *   P/j/JOB/lease             the job's lease id (decimal), on that lease
 *   P/j/JOB/k/KEY             'w' or 'm' (write-once or mutable) + value
 *   P/j/JOB/r/N/NAME          record of kind N (state.h) + its bytes
 *   P/j/JOB/o/ID              op-id answers (RDZV_STATE_REC_OP) of the
 *                             mutations of one key in one batch, written
 *                             in the same transaction as that key
 *   P/j/JOB/K/KEY, R/N/NAME, O/ID
 *                             a value over half of
 *                             --etcd-max-request-bytes: "PID:N:BYTES",
 *                             its N parts at P/j/JOB/p/PID/000000...,
 *                             written first under a fresh PID
 * JOB is the job id with every byte outside [A-Za-z0-9._-] as %XX. Every
 * key of a job is on the job's lease (--etcd-job-ttl-s), kept alive while
 * a leader has the job open: a job no root serves any more expires; a job
 * that ended (its --job-linger-ms passed) is removed at once.
 *
 * Lease trouble: etcd errors are retried until the leader's lease would
 * have expired (--etcd-lease-ttl-s after the last keepalive etcd
 * answered). Then, or when etcd says the lease is gone, the root stands
 * down: every connection is closed with RDZV_ELEASE_LOST ("etcd lease
 * lost"), what was not persisted is dropped unacknowledged, and the root
 * campaigns again.
 *
 * Threading: the daemon's loop thread only. Private. */
#ifndef RDZV_STORE_DAEMON_DURABLE_H
#define RDZV_STORE_DAEMON_DURABLE_H

#include <uv.h>

#include "store/daemon/config.h"
#include "store/daemon/state/state.h"

struct rdzv_checks;

struct daemon;
struct rdzv_durable;

/* Creates the durable root of cfg (cfg->etcd non-empty) on loop; contacts
 * nobody yet. 0 with *out set, or RDZV_EBAD_ADDR (an --etcd URL not
 * understood), -errno (the credentials file could not be read), RDZV_EPROTO
 * (it holds no "user:password" line), RDZV_ENOMEM; a message went to
 * stderr then. */
int rdzv__durable_new(uv_loop_t *loop, const struct rdzv_daemon_config *cfg,
                      struct rdzv_durable **out);

/* The state backend to start the root with (borrowed from du). */
const struct rdzv_state_backend *rdzv__durable_backend(struct rdzv_durable *du);

/* Attaches du to its started daemon d: installs the write gate and the
 * hello admission (a standby refuses hellos naming the leader), then
 * campaigns. */
void rdzv__durable_attach(struct rdzv_durable *du, struct daemon *d);

/* The daemon stops: in-flight work is dropped, this root's lease is
 * revoked (a standby takes over at once), the etcd client closes; du frees
 * itself once its handles are closed. Persisted state stays. */
void rdzv__durable_stop(struct rdzv_durable *du);

/* Adds the root's readiness checks to cs: "leader_or_standby" (it leads,
 * or stands by behind a leader it knows; failed while it campaigns, loads
 * or stopped, saying why) and "etcd" (its last keepalive or campaign step
 * did not fail; failed naming the endpoint and etcd's error). Refreshes
 * the statistics' etcd fields first, so that /metrics agrees. */
void rdzv__durable_checks(struct rdzv_durable *du, struct rdzv_checks *cs);

/* du was never attached (the daemon's start failed): frees it. */
void rdzv__durable_free(struct rdzv_durable *du);

#endif /* RDZV_STORE_DAEMON_DURABLE_H */
