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

#endif /* RDZV_STORE_DAEMON_NODE_H */
