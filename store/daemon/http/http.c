/* rdzvd's HTTP listener (http.h): libmicrohttpd in its external mode with
 * epoll, driven by the daemon's libuv loop. MHD keeps its sockets in one
 * epoll descriptor of its own; the loop polls that descriptor, and runs
 * MHD (which never blocks there) when it is readable or when MHD's own
 * timeout (idle connections) comes. Every handler runs on the loop's
 * thread. Owns: the MHD daemon, the poll and timer handles, the routes. */
#include "store/daemon/http/http.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <microhttpd.h>
#include <sys/socket.h>

#include "rdzv/error.h"
#include "store/wire/addr.h"

/* An open HTTP connection and when it came: one still open past
 * --http-timeout-ms is shut down, however busily it trickles bytes
 * (MHD's own timeout counts idle time only). */
struct hconn {
  int fd;
  uint64_t since_ms;
  struct hconn *next;
};

struct rdzv_http {
  struct daemon *d;
  struct hconn *conns;
  uv_timer_t sweep;
  struct MHD_Daemon *mhd;
  uv_poll_t poll;
  uv_timer_t timer;
  int handles; /* open: the poll and the two timers; h is freed at 0 */
  uint16_t port;
  rdzv_http_checks_fn checks;
  void *checks_arg;
  uint64_t requests; /* answered, for the debug log */
};

static void drive(struct rdzv_http *h);

static void on_conn(void *cls, struct MHD_Connection *conn, void **socket_ctx,
                    enum MHD_ConnectionNotificationCode code) {
  (void)socket_ctx;
  struct rdzv_http *h = cls;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci == NULL)
    return;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    struct hconn *c = malloc(sizeof(*c));
    if (c == NULL)
      return; /* untracked: MHD's idle timeout still applies */
    c->fd = ci->connect_fd;
    c->since_ms = uv_now(h->d->loop);
    c->next = h->conns;
    h->conns = c;
    return;
  }
  for (struct hconn **p = &h->conns; *p != NULL; p = &(*p)->next)
    if ((*p)->fd == ci->connect_fd) {
      struct hconn *c = *p;
      *p = c->next;
      free(c);
      return;
    }
}

/* Every second: connections open longer than --http-timeout-ms are shut
 * down (MHD then closes them, and its slot frees). */
static void on_sweep(uv_timer_t *t) {
  struct rdzv_http *h = t->data;
  uint64_t now = uv_now(h->d->loop);
  bool any = false;
  for (struct hconn *c = h->conns; c != NULL; c = c->next)
    if (now - c->since_ms > h->d->cfg.http_timeout_ms) {
      shutdown(c->fd, SHUT_RDWR);
      any = true;
    }
  if (any)
    drive(h);
}

static void on_timer(uv_timer_t *t) { drive(t->data); }

static void on_poll(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  drive(p->data);
}

static unsigned open_conns(struct rdzv_http *h) {
  const union MHD_DaemonInfo *i =
      MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
  return i != NULL ? i->num_connections : 0;
}

/* Runs what MHD has to do now, then waits for its descriptor or for its
 * next deadline. A run that closed connections runs again: MHD stops
 * watching its listening socket at --http-max-connections and watches it
 * again only at the start of a run after one closed, so connections
 * waiting in the backlog would otherwise wait for an unrelated event. */
static void drive(struct rdzv_http *h) {
  if (h->mhd == NULL)
    return;
  for (int i = 0; i < 4; i++) {
    unsigned before = open_conns(h);
    MHD_run(h->mhd);
    if (open_conns(h) >= before)
      break;
  }
  MHD_UNSIGNED_LONG_LONG ms;
  if (MHD_get_timeout(h->mhd, &ms) == MHD_YES)
    uv_timer_start(&h->timer, on_timer, (uint64_t)ms, 0);
  else
    uv_timer_stop(&h->timer);
}

static void mhd_log(void *arg, const char *fmt, va_list ap) {
  struct rdzv_http *h = arg;
  char line[300];
  vsnprintf(line, sizeof(line), fmt, ap);
  size_t n = strlen(line);
  while (n > 0 && line[n - 1] == '\n')
    line[--n] = '\0';
  rdzv__log(h->d, 2, "http: %s", line);
}

/* Queues body (copied) with status and content type. */
static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status,
                              const char *type, const char *body, size_t n) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (r == NULL)
    return MHD_NO; /* out of memory: MHD closes the connection */
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result rc = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result answer_text(struct MHD_Connection *conn, unsigned status,
                                   const char *text) {
  return answer(conn, status, "text/plain; charset=utf-8", text, strlen(text));
}

/* The checks, with "loop" first: a daemon that answers turns its loop. */
static void gather(struct rdzv_http *h, struct rdzv_checks *cs) {
  memset(cs, 0, sizeof(*cs));
  rdzv__check_add(cs, "loop", true, NULL);
  rdzv__check_add(cs, "not_stopping", !h->d->stopping, "daemon %s is stopping",
                  h->d->cfg.name);
  if (h->checks != NULL)
    h->checks(h->checks_arg, cs);
}

static enum MHD_Result find_verbose(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value) {
  (void)kind;
  (void)value;
  if (strcmp(key, "verbose") == 0) {
    *(bool *)cls = true;
    return MHD_NO; /* found: stop */
  }
  return MHD_YES;
}

/* /readyz and /livez: Kubernetes' form. */
static enum MHD_Result readyz(struct rdzv_http *h, struct MHD_Connection *conn,
                              bool live) {
  struct rdzv_checks cs;
  gather(h, &cs);
  if (live) /* liveness: the loop, nothing the daemon waits for */
    cs.n = 1;
  /* "?verbose" has no value: looked for as a key. */
  bool verbose = false;
  MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, find_verbose,
                            &verbose);
  /* Room for every check's longest line: "[-]NAME failed: WHY\n". */
  size_t cap = 512 + (size_t)cs.n * (sizeof(cs.c[0].why) + 64), n = 0;
  char *out = malloc(cap);
  if (out == NULL)
    return MHD_NO;
  bool ok = true;
  for (int i = 0; i < cs.n; i++) {
    ok &= cs.c[i].ok;
    if (cs.c[i].ok && verbose)
      n += (size_t)snprintf(out + n, cap - n, "[+]%s ok\n", cs.c[i].name);
    else if (!cs.c[i].ok)
      n += (size_t)snprintf(out + n, cap - n, "[-]%s failed: %s\n",
                            cs.c[i].name, cs.c[i].why);
  }
  if (ok && !verbose)
    n = (size_t)snprintf(out, cap, "ok\n");
  else
    n += (size_t)snprintf(out + n, cap - n, "%s check %s\n",
                          live ? "livez" : "readyz", ok ? "passed" : "failed");
  enum MHD_Result rc =
      answer(conn, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
             "text/plain; charset=utf-8", out, n);
  free(out);
  return rc;
}

/* /health: etcd's form, the failed checks joined as the reason. */
static enum MHD_Result health(struct rdzv_http *h,
                              struct MHD_Connection *conn) {
  struct rdzv_checks cs;
  gather(h, &cs);
  json_t *o = json_object();
  char reason[1024] = "";
  size_t n = 0;
  bool ok = true;
  for (int i = 0; i < cs.n; i++)
    if (!cs.c[i].ok) {
      ok = false;
      if (n < sizeof(reason))
        n += (size_t)snprintf(reason + n, sizeof(reason) - n, "%s%s: %s",
                              n ? "; " : "", cs.c[i].name, cs.c[i].why);
    }
  json_object_set_new(o, "health", json_string(ok ? "true" : "false"));
  json_object_set_new(o, "reason", json_string(reason));
  char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (text == NULL)
    return MHD_NO;
  enum MHD_Result rc =
      answer(conn, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
             "application/json", text, strlen(text));
  free(text);
  return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  (void)version;
  (void)upload_data;
  (void)con_cls;
  struct rdzv_http *h = cls;
  h->requests++;
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    *upload_data_size = 0; /* a body is not read */
    return answer_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                       "only GET and HEAD\n");
  }
  if (strcmp(url, "/metrics") == 0) {
    struct rdzv_checks cs;
    gather(h, &cs);
    char *text = rdzv__http_metrics(h->d, &cs);
    if (text == NULL)
      return MHD_NO;
    enum MHD_Result rc =
        answer(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
               text, strlen(text));
    free(text);
    return rc;
  }
  if (strcmp(url, "/livez") == 0)
    return readyz(h, conn, true);
  if (strcmp(url, "/readyz") == 0)
    return readyz(h, conn, false);
  if (strcmp(url, "/health") == 0)
    return health(h, conn);
  if (strcmp(url, "/status") == 0) {
    struct rdzv_checks cs;
    gather(h, &cs); /* the parts refresh what the statistics hold */
    char *text = rdzv__stats_json(h->d, NULL);
    if (text == NULL)
      return MHD_NO;
    enum MHD_Result rc =
        answer(conn, MHD_HTTP_OK, "application/json", text, strlen(text));
    free(text);
    return rc;
  }
  return answer_text(conn, MHD_HTTP_NOT_FOUND,
                     "not found: rdzvd serves /metrics, /livez, /readyz, "
                     "/health and /status\n");
}

/* "HOST:PORT" or "[V6]:PORT" resolved (passive) into ss. */
static int resolve(const char *listen, struct sockaddr_storage *ss,
                   socklen_t *len) {
  char host[RDZV_ADDR_HOST_MAX + 1], port[8];
  int pn;
  if (rdzv__split_host_port(listen, host, sizeof(host), &pn) < 0)
    return RDZV_EBAD_ADDR;
  snprintf(port, sizeof(port), "%d", pn);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (getaddrinfo(host, port, &hints, &ai) != 0 || ai == NULL)
    return RDZV_EBAD_ADDR;
  memcpy(ss, ai->ai_addr, ai->ai_addrlen);
  *len = ai->ai_addrlen;
  freeaddrinfo(ai);
  return 0;
}

int rdzv__http_start(struct daemon *d, const char *listen,
                     rdzv_http_checks_fn checks, void *checks_arg,
                     struct rdzv_http **out) {
  *out = NULL;
  struct sockaddr_storage ss;
  socklen_t sl = 0;
  if (resolve(listen, &ss, &sl) < 0) {
    fprintf(stderr,
            "rdzvd: --http-listen %s: not HOST:PORT with a host "
            "this machine resolves\n",
            listen);
    return RDZV_EBAD_ADDR;
  }
  struct rdzv_http *h = calloc(1, sizeof(*h));
  if (h == NULL)
    return RDZV_ENOMEM;
  h->d = d;
  h->checks = checks;
  h->checks_arg = checks_arg;
  unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
  if (ss.ss_family == AF_INET6)
    flags |= MHD_USE_IPv6;
  unsigned timeout_s = (d->cfg.http_timeout_ms + 999) / 1000;
  /* One address holds at most --http-max-connections-per-ip of them
   * (more than the total counts as the total; 0: no limit of its own). */
  unsigned per_ip = d->cfg.http_max_connections_per_ip;
  if (per_ip > d->cfg.http_max_connections)
    per_ip = d->cfg.http_max_connections;
  h->mhd = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
      h, MHD_OPTION_NOTIFY_CONNECTION, on_conn, h, MHD_OPTION_SOCK_ADDR,
      (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)d->cfg.http_max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      per_ip, MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)d->cfg.http_max_request_bytes,
      MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)64, MHD_OPTION_END);
  if (h->mhd == NULL) {
    fprintf(stderr,
            "rdzvd: --http-listen %s: cannot listen there (in use, "
            "or not this machine's address)\n",
            listen);
    free(h);
    return RDZV_EBAD_ADDR;
  }
  const union MHD_DaemonInfo *pi =
      MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
  const union MHD_DaemonInfo *ei =
      MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
  if (pi == NULL || ei == NULL) {
    MHD_stop_daemon(h->mhd);
    free(h);
    return RDZV_EBAD_ADDR;
  }
  h->port = pi->port;
  uv_poll_init(d->loop, &h->poll, ei->epoll_fd);
  uv_timer_init(d->loop, &h->timer);
  uv_timer_init(d->loop, &h->sweep);
  h->poll.data = h->timer.data = h->sweep.data = h;
  h->handles = 3;
  uv_poll_start(&h->poll, UV_READABLE, on_poll);
  uv_timer_start(&h->sweep, on_sweep, 1000, 1000);
  drive(h);
  rdzv__log(d, 1,
            "http: /metrics, /livez, /readyz, /health and /status on "
            "%s (port %u)",
            listen, (unsigned)h->port);
  *out = h;
  return 0;
}

uint16_t rdzv__http_port(const struct rdzv_http *h) { return h->port; }

static void on_closed(uv_handle_t *handle) {
  struct rdzv_http *h = handle->data;
  if (--h->handles == 0)
    free(h);
}

void rdzv__http_stop(struct rdzv_http *h) {
  if (h == NULL || h->mhd == NULL)
    return;
  /* The poll leaves the loop (uv_close stops it now) before MHD closes
   * the descriptor it watches. */
  uv_close((uv_handle_t *)&h->poll, on_closed);
  uv_close((uv_handle_t *)&h->timer, on_closed);
  uv_close((uv_handle_t *)&h->sweep, on_closed);
  MHD_stop_daemon(h->mhd); /* its close notifications free h->conns */
  h->mhd = NULL;
  while (h->conns != NULL) { /* any it did not notify */
    struct hconn *c = h->conns;
    h->conns = c->next;
    free(c);
  }
}
