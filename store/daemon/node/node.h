/* The node role of rdzvd: a host's agent, which serves its ranks and child
 * nodes, caches write-once keys, coalesces waits and reads, and combines
 * adds, barriers, gathers and joins before one request to its parent
 * (cfg.parent). What the daemon's assembly (store/daemon/daemon.c) names.
 * Private. */
#ifndef RDZV_STORE_DAEMON_NODE_H
#define RDZV_STORE_DAEMON_NODE_H

#include "store/daemon/transport/transport.h"

/* Give it to rdzv__transport_start with a NULL role_ctx. */
extern const struct rdzv_role rdzv__node_role;

struct upstream;
/* The node's probe of its parent at start (wire.h's RDZV_ROLE_PROBE),
 * before any job: tried until the parent answers (with the backoff of a
 * job's link), it tells the chain of daemons above the parent, kept as
 * the node's ancestors (the places a job's link reattaches to when the
 * parent is lost) until a job's hello tells them again. *slot holds the
 * probe while it runs; the probe sets it to NULL when it ends (answered,
 * or refused by a parent that knows no probes). NULL when out of memory
 * or the node has no parent. Stop it with rdzv__upstream_destroy(*slot,
 * false) when *slot is not NULL. */
struct upstream *rdzv__node_probe(struct daemon *d, struct upstream **slot);
/* Ends a link to the parent (see node_int.h). */
void rdzv__upstream_destroy(struct upstream *u, bool flush);

#endif /* RDZV_STORE_DAEMON_NODE_H */
