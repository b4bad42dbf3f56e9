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
/* Longest key-space prefix (RDZV_MSG_TS_SPACE), bytes. */
#define RDZV_TS_SPACE_PREFIX_MAX 200

/* A key space: a listener on 127.0.0.1 (a port the kernel picks) whose
 * clients' keys live in job `job` under prefix (1..RDZV_TS_SPACE_PREFIX_MAX
 * bytes, copied): "k" is stored as prefix + "k"; LIST_KEYS and GETNUMKEYS
 * see only the keys under it. Returns 0, -EINVAL (bad prefix), or a
 * negative status; *out as rdzv__tcpstore_start. */
int rdzv__tcpstore_start_space(struct daemon *d, const char *job,
                               const char *prefix, struct ts_server **out);
/* The port a server listens on. */
int rdzv__tcpstore_port(const struct ts_server *s);
/* Closes the listener and every TCPStore connection. NULL is a no-op. */
void rdzv__tcpstore_stop(struct ts_server *s);

#endif /* RDZV_STORE_DAEMON_TCPSTORE_H */
