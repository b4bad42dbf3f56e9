/* The root role of rdzvd: the truth of every job it serves, kept in the
 * state backend given as the role's context (store/daemon/state). What
 * the daemon's assembly (store/daemon/daemon.c) names. Private. */
#ifndef RDZV_STORE_DAEMON_ROOT_H
#define RDZV_STORE_DAEMON_ROOT_H

#include "store/daemon/transport/transport.h"

/* Give it to rdzv__transport_start with a const struct
 * rdzv_state_backend * as role_ctx. */
extern const struct rdzv_role rdzv__root_role;

#endif /* RDZV_STORE_DAEMON_ROOT_H */
