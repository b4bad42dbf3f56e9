/* The host health gate of a node (--health-cmd; health.c says how it
 * runs). Private to store/daemon/node; loop thread only. */
#ifndef RDZV_STORE_DAEMON_NODE_HEALTH_H
#define RDZV_STORE_DAEMON_NODE_HEALTH_H

#include <stdint.h>

#include "rendezvous/join_wire.h"
#include "store/wire/wire.h"

struct njround;
struct conn;

enum rdzv_health_verdict {
  RDZV_HEALTH_PASS, /* forward the join as it is */
  RDZV_HEALTH_HELD, /* held: handed back to rdzv__node_join when the
                       host's check ends (dropped if c closes first) */
  RDZV_HEALTH_FAIL, /* forward it marked unhealthy with *reason */
};

/* A local rank's join m (not a resumed one) of round jr, whose first
 * record j names its host. With no --health-cmd, or from a child node (it
 * gates its own hosts): PASS. Otherwise the host's check for the round's
 * pending generation decides: started if there is none (m held), still
 * running (m held), passed, or failed: *reason (*reason_len bytes, 1..255,
 * owned by the check: valid until this call returns to the loop) names
 * the node and why ("node n3: health check exit status 1: ECC errors").
 * Out of memory: PASS (the root still refuses a quarantined host). */
enum rdzv_health_verdict
rdzv__node_health_gate(struct njround *jr, struct conn *c,
                       const struct rdzv_msg *m, const struct rdzv_join_full *j,
                       const uint8_t **reason, uint32_t *reason_len);

/* jr's pending generation was answered: the verdicts of its hosts are
 * forgotten (a later join checks again); running checks stay. */
void rdzv__node_health_round_done(struct njround *jr);

/* jr is being freed: its checks are dropped (a running one killed with
 * its process group), their held joins too. */
void rdzv__node_health_free(struct njround *jr);

#endif /* RDZV_STORE_DAEMON_NODE_HEALTH_H */
