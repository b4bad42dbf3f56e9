/* The in-memory state backend: a job's keys and records in hash tables
 * (store/daemon/keys/kvs.h), gone when the process ends. The default, and
 * the embedded root's. Private. */
#ifndef RDZV_STORE_DAEMON_STATE_MEM_H
#define RDZV_STORE_DAEMON_STATE_MEM_H

#include "store/daemon/state/state.h"

extern const struct rdzv_state_backend rdzv__state_mem;

#endif /* RDZV_STORE_DAEMON_STATE_MEM_H */
