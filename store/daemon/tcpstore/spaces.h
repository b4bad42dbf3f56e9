/* TCPStore key spaces of rdzvd (RDZV_MSG_TS_SPACE, --tcpstore-spaces):
 * see spaces.c. Private. */
#ifndef RDZV_STORE_DAEMON_TCPSTORE_SPACES_H
#define RDZV_STORE_DAEMON_TCPSTORE_SPACES_H

#include <stdint.h>

#include "store/daemon/transport/transport.h"

struct ts_spaces;

/* The spaces of daemon d, at most max open at once. *out is set even on
 * failure (pass it to rdzv__ts_spaces_stop). 0 or RDZV_ENOMEM. */
int rdzv__ts_spaces_new(struct daemon *d, uint32_t max, struct ts_spaces **out);
/* RDZV_MSG_TS_SPACE from client c (arg: the ts_spaces; m->b: 0, or the
 * pid of the process that holds the space instead of c): answers it with
 * the port, or -EINVAL (bad prefix or pid), RDZV_EBAD_ROLE (not a client
 * of a job; a pid asked over TCP), -ESRCH (no such process) or another
 * -errno of pidfd_open, RDZV_ETOO_MANY_CONNECTIONS (--tcpstore-spaces
 * open, or the space at --max-connections holders), RDZV_ENOMEM, or the
 * listener's error, each with a message naming this daemon. */
void rdzv__ts_spaces_request(void *arg, struct conn *c,
                             const struct rdzv_msg *m);
/* Closes every space and frees sp (its timer closes on the loop). NULL is
 * a no-op. */
void rdzv__ts_spaces_stop(struct ts_spaces *sp);

#endif /* RDZV_STORE_DAEMON_TCPSTORE_SPACES_H */
