/* The PyTorch c10d TCPStore front end of rdzvd (--tcpstore-listen): see
 * tcpstore.c. It reaches the daemon only through the transport's
 * in-process connections. Private. */
#ifndef RDZV_STORE_DAEMON_TCPSTORE_H
#define RDZV_STORE_DAEMON_TCPSTORE_H

#include "store/daemon/transport/transport.h"

struct ts_server;

/* Listens on listen (HOST:PORT) for PyTorch c10d TCPStore clients, whose
 * keys live in job `job` of daemon d; writes the bound port to port_file
 * (may be empty). *out is set even on failure (pass it to
 * rdzv__tcpstore_stop). Returns 0 or a negative status (a message went to
 * stderr). */
int rdzv__tcpstore_start(struct daemon *d, const char *listen, const char *job,
                         const char *port_file, struct ts_server **out);
/* Closes the listener and every TCPStore connection. NULL is a no-op. */
void rdzv__tcpstore_stop(struct ts_server *s);

#endif /* RDZV_STORE_DAEMON_TCPSTORE_H */
