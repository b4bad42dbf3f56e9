/* rdzvd: the daemon (root or node role) on one libuv loop. */
#ifndef RDZV_STORE_SERVER_H
#define RDZV_STORE_SERVER_H

#include "store/config.h"

/* Runs the daemon described by cfg on a new libuv loop until SIGINT or
 * SIGTERM. Blocks. Returns 0 after a clean stop, or a negative status if
 * it could not start (bind failed, bad address; a message goes to stderr).
 * Must be called once per process. */
int rdzv_daemon_run(const struct rdzv_daemon_config *cfg);

#endif /* RDZV_STORE_SERVER_H */
