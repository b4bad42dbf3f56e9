/* rdzvd's HTTP listener for operators (--http-listen): Prometheus metrics,
 * liveness, readiness and status, served by libmicrohttpd driven from the
 * daemon's own libuv loop (one thread: handlers read the daemon's state
 * directly). Private to the daemon's assembly (store/daemon/daemon.c).
 *
 *   GET /metrics  the Prometheus text format, version 0.0.4 (metrics.c);
 *   GET /livez    200 "ok": the loop turns (a loop that does not answers
 *                 nothing, and the probe's timeout says so);
 *   GET /readyz   200 "ok", or 503 naming each failed check; ?verbose
 *                 lists every check as "[+]name ok" or "[-]name failed:
 *                 why" (the form of Kubernetes' and etcd's endpoints);
 *   GET /health   etcd's form: {"health":"true"|"false","reason":"..."};
 *   GET /status   the JSON `rdzvctl stats` prints.
 * Anything else: 404; a method other than GET or HEAD: 405. */
#ifndef RDZV_STORE_DAEMON_HTTP_H
#define RDZV_STORE_DAEMON_HTTP_H

#include <stdint.h>

#include "store/daemon/transport/transport.h"

struct rdzv_http;

/* Fills cs with the readiness checks of the daemon's parts (the role's,
 * an etcd-backed root's); called on the loop at each /readyz. */
typedef void (*rdzv_http_checks_fn)(void *arg, struct rdzv_checks *cs);

/* Starts serving on listen ("HOST:PORT", numeric or a name resolved now;
 * port 0: the kernel's choice), bounded by d->cfg's http_max_connections
 * (connections at once), http_timeout_ms (an idle connection is closed,
 * rounded up to whole seconds) and http_max_request_bytes (a request's
 * headers; more is answered 431 or dropped). *out is NULL on error.
 * Errors: RDZV_EBAD_ADDR (listen unparsable or unresolvable, or not
 * bindable: in use, not this machine's; said on stderr), RDZV_ENOMEM. */
int rdzv__http_start(struct daemon *d, const char *listen,
                     rdzv_http_checks_fn checks, void *checks_arg,
                     struct rdzv_http **out);

/* The bound TCP port. */
uint16_t rdzv__http_port(const struct rdzv_http *h);

/* Stops serving (open connections are closed) and frees h once its loop
 * handles have closed; h may be NULL. */
void rdzv__http_stop(struct rdzv_http *h);

/* metrics.c: the Prometheus text of d's statistics and of checks cs (one
 * rdzv_ready gauge a check). A malloc'd NUL-terminated text; NULL when
 * out of memory. */
char *rdzv__http_metrics(const struct daemon *d, const struct rdzv_checks *cs);

#endif
