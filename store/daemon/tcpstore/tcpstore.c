/* The PyTorch c10d TCPStore front end of rdzvd (--tcpstore-listen).
 *
 * Unmodified torch.distributed clients (TCPStore, the gloo/NCCL process
 * group bootstrap, torchrun's c10d rendezvous) connect here as if this
 * were their MASTER_ADDR:MASTER_PORT store. Each TCP connection is bridged
 * to an in-process client connection of the daemon in job --tcpstore-job:
 * requests are parsed (store/wire/tcpstore_wire.h), turned into rdzv requests
 * and handled exactly like a native client's (so a node combines, caches
 * and forwards them up the tree), and the rdzv replies are turned back
 * into TCPStore replies. Keys keep the "/" the client puts in front, so
 * `rdzvctl --job JOB get /k` reads what `store.set("k", ...)` wrote.
 *
 * This file owns the TCP side: the listener (the entry points of
 * tcpstore.h, and a key space's listener for spaces.c), each TCPStore
 * connection's life (accepted, bridged, closed, freed), reading its bytes
 * and writing its replies. What a request becomes, the order requests go
 * in, and what closes a connection are bridge.c's (see its opening
 * comment). It may call bridge.c through tcpstore_int.h
 * (rdzv__ts_parse_all, rdzv__ts_on_reply, rdzv__ts_pending_free), the
 * transport's in-process connections, and the daemon's jobs, log and
 * config helpers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/daemon/tcpstore/tcpstore.h"
#include "store/daemon/tcpstore/tcpstore_int.h"
#include "store/daemon/transport/transport.h"
#include "store/wire/tcpstore_wire.h"

/* Requests in flight per connection before reading pauses (SETs are
 * pipelined without replies: backpressure instead of a limit error). */
#define TS_MAX_PENDING 256

/* ---- writing replies ------------------------------------------------------ */

static void on_written(void *arg, int status) {
  struct ts_conn *t = arg;
  t->write_active = false;
  if (t->closing) { /* rdzv__ts_close waited for this write */
    rdzv__ts_close(t, NULL);
    return;
  }
  if (status < 0) {
    rdzv__ts_close(t, uv_strerror(status));
    return;
  }
  if (t->out.buf.len > 0)
    rdzv__ts_flush(t);
  else
    rdzv__outq_release(&t->out); /* an idle connection holds no buffer */
}

void rdzv__ts_flush(struct ts_conn *t) {
  if (t->write_active || t->out.buf.len == 0 || t->closing)
    return;
  struct stats *st = &t->srv->d->stats;
  int rc = rdzv__outq_write(&t->out, t->out.buf.len, (uv_stream_t *)&t->tcp,
                            NULL, on_written, t, NULL, &st->bytes_shared);
  if (rc < 0) {
    rdzv__ts_close(t, rc == RDZV_ENOMEM ? "out of memory" : "write failed");
    return;
  }
  if (rc == RDZV_OUTQ_WRITTEN) { /* all of it went at once */
    if (t->out.buf.len == 0)
      rdzv__outq_release(&t->out);
    return;
  }
  t->write_active = true;
}

/* ---- reading -------------------------------------------------------------- */

/* Read buffers start small and double while a request needs more (they
 * go when a connection has nothing unparsed: 9,000 idle connections
 * must not pin 64 KiB each). */
#define TS_READ_MIN 4096

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  struct ts_conn *t = h->data;
  (void)hint;
  size_t room = t->rbuf.len > TS_READ_MIN ? t->rbuf.len : TS_READ_MIN;
  if (rdzv_buf_reserve(&t->rbuf, room) < 0) {
    *b = uv_buf_init(NULL, 0);
    return;
  }
  *b = uv_buf_init((char *)t->rbuf.data + t->rbuf.len,
                   (unsigned)(t->rbuf.cap - t->rbuf.len));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  struct ts_conn *t = st->data;
  (void)b;
  if (n < 0) {
    rdzv__ts_close(t, n == UV_EOF ? NULL : uv_strerror((int)n));
    return;
  }
  t->rbuf.len += (size_t)n;
  rdzv__ts_parse_all(t);
}

void rdzv__ts_read_more(struct ts_conn *t) {
  if (t->closing || t->reading)
    return;
  t->reading = true;
  uv_read_start((uv_stream_t *)&t->tcp, on_alloc, on_read);
  rdzv__ts_parse_all(t); /* what is buffered already */
}

/* ---- connections ---------------------------------------------------------- */

static void on_closed(uv_handle_t *h) {
  struct ts_conn *t = h->data;
  struct ts_pending *p;
  while ((p = t->pending) != NULL) {
    t->pending = p->next;
    rdzv__ts_pending_free(p);
  }
  rdzv_buf_free(&t->rbuf);
  rdzv__outq_release(&t->out);
  free(t);
}

void rdzv__ts_close(struct ts_conn *t, const char *why) {
  struct ts_server *s = t->srv;
  if (t->closing && why != NULL)
    return;
  if (!t->closing) {
    t->closing = true;
    /* A client that hangs up is ordinary (debug); a broken rule is not. */
    if (why != NULL && t->broke_rule)
      rdzv__log_drop(s->d, "tcpstore conn closed: %s", why);
    else if (why != NULL)
      rdzv__log(s->d, 2, "tcpstore conn closed: %s", why);
    if (t->in != NULL) {
      struct conn *in = t->in;
      t->in = NULL;
      rdzv_daemon_inproc_close(in); /* a no-op if already closed */
      rdzv__conn_unref(in);
    }
    if (t->prev != NULL)
      t->prev->next = t->next;
    else
      s->conns = t->next;
    if (t->next != NULL)
      t->next->prev = t->prev;
  }
  if (t->write_active)
    return; /* on_written comes back here */
  if (!uv_is_closing((uv_handle_t *)&t->tcp))
    uv_close((uv_handle_t *)&t->tcp, on_closed);
}

static void on_connection(uv_stream_t *ls, int status) {
  struct ts_server *s = ls->data;
  if (status < 0 || s->closing)
    return;
  struct ts_conn *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return;
  t->srv = s;
  uv_tcp_init(s->d->loop, &t->tcp);
  t->tcp.data = t;
  if (uv_accept(ls, (uv_stream_t *)&t->tcp) < 0) {
    uv_close((uv_handle_t *)&t->tcp, on_closed);
    return;
  }
  uv_tcp_nodelay(&t->tcp, 1);
  t->in = rdzv_daemon_inproc_connect(s->d, s->job, rdzv__ts_on_reply, t);
  if (t->in == NULL) {
    uv_close((uv_handle_t *)&t->tcp, on_closed);
    return;
  }
  /* Ours until rdzv__ts_close, even if the daemon closes it first (limits, a
   * stop): sending to it then fails cleanly instead of touching freed
   * memory. */
  rdzv__conn_ref(t->in);
  t->next = s->conns;
  if (s->conns != NULL)
    s->conns->prev = t;
  s->conns = t;
  rdzv__ts_read_more(t);
}

/* ---- the listener --------------------------------------------------------- */

/* rdzv__tcpstore_start, and a key space's listener (prefix non-empty:
 * the job is not pinned, the holder's connection keeps it). */
static int ts_start(struct daemon *d, const char *listen, const char *job,
                    const char *prefix, const char *port_file,
                    struct ts_server **out) {
  char host[256];
  int port, rc;
  struct sockaddr_storage ss;

  *out = NULL;
  if (job == NULL || job[0] == '\0' || strlen(job) > 255) {
    fprintf(stderr, "rdzvd: --tcpstore-listen needs --tcpstore-job JOB "
                    "(1..255 bytes): the job whose keys TCPStore clients "
                    "use\n");
    return -EINVAL;
  }
  if (rdzv__split_host_port(listen, host, sizeof(host), &port) < 0) {
    fprintf(stderr, "rdzvd: --tcpstore-listen '%s' is not HOST:PORT\n", listen);
    return RDZV_EBAD_ADDR;
  }
  /* The one name of a loopback address taken (--tcpstore-listen is
   * loopback unless --tcpstore-remote, config.c). */
  if (strcmp(host, "localhost") == 0)
    snprintf(host, sizeof(host), "127.0.0.1");
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) < 0 &&
      uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) < 0) {
    fprintf(stderr, "rdzvd: --tcpstore-listen '%s': not a numeric address\n",
            host);
    return RDZV_EBAD_ADDR;
  }
  struct ts_server *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return RDZV_ENOMEM;
  s->keys = calloc(TS_KEYS_CAP, sizeof(*s->keys));
  s->vals = calloc(TS_KEYS_CAP, sizeof(*s->vals));
  s->pkeys = calloc(TS_KEYS_CAP, sizeof(*s->pkeys));
  if (s->keys == NULL || s->vals == NULL || s->pkeys == NULL) {
    free(s->keys);
    free(s->vals);
    free(s->pkeys);
    free(s);
    return RDZV_ENOMEM;
  }
  s->d = d;
  snprintf(s->job, sizeof(s->job), "%s", job);
  snprintf(s->prefix, sizeof(s->prefix), "%s", prefix);
  s->plen = (uint32_t)strlen(s->prefix);
  /* A TCPStore server keeps its keys for its whole life, clients or not:
   * so does this job (it never lingers out). */
  struct job *j = rdzv__job_get(d, (const uint8_t *)job, strlen(job));
  if (j == NULL) {
    free(s->keys);
    free(s->vals);
    free(s->pkeys);
    free(s);
    return RDZV_ENOMEM;
  }
  if (s->plen == 0)
    rdzv__job_pin(j);
  s->lim.max_key_bytes = d->cfg.max_key_bytes;
  s->lim.max_value_bytes = d->cfg.max_value_bytes;
  s->lim.max_keys = TS_KEYS_CAP;
  s->max_pending = d->cfg.max_outstanding < TS_MAX_PENDING
                       ? d->cfg.max_outstanding
                       : TS_MAX_PENDING;
  uv_tcp_init(d->loop, &s->listen);
  s->listen.data = s;
  uv_idle_init(d->loop, &s->deferred);
  s->deferred.data = s;
  *out = s; /* from here rdzv__tcpstore_stop releases it */
  rc = uv_tcp_bind(&s->listen, (struct sockaddr *)&ss, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&s->listen, (int)d->cfg.backlog,
                   on_connection);
  if (rc < 0) {
    fprintf(stderr, "rdzvd: --tcpstore-listen %s: %s\n", listen,
            uv_strerror(rc));
    return rc;
  }
  int len = sizeof(ss);
  uv_tcp_getsockname(&s->listen, (struct sockaddr *)&ss, &len);
  int bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  s->port = bound;
  if (s->plen > 0) {
    rdzv__log(d, 2, "TCPStore key space %s of job %s on %s:%d", s->prefix, job,
              host, bound);
    return 0;
  }
  if (port_file != NULL && port_file[0] != '\0' &&
      (rc = rdzv__write_port_file(port_file, bound)) < 0) {
    fprintf(stderr, "rdzvd: --tcpstore-port-file %s: %s\n", port_file,
            strerror(-rc));
    return rc;
  }
  rdzv__log(d, 1, "TCPStore front end on %s:%d for job %s", host, bound, job);
  if (!rdzv_config_host_loopback(host))
    rdzv__log(d, 0,
              "warning: the TCPStore front end listens on %s:%d, not a "
              "loopback address (--tcpstore-remote): PyTorch's TCPStore "
              "protocol has no authentication, so anyone who reaches that "
              "port can read and write job %s's keys",
              host, bound, job);
  else if (d->auth)
    rdzv__log(d, 1,
              "note: the TCPStore front end on %s:%d has no authentication "
              "(its protocol has none): the job secret does not guard it; "
              "any process on this host that reaches the port can read and "
              "write job %s's keys",
              host, bound, job);
  return 0;
}

int rdzv__tcpstore_start(struct daemon *d, const char *listen, const char *job,
                         const char *port_file, struct ts_server **out) {
  return ts_start(d, listen, job, "", port_file, out);
}

int rdzv__tcpstore_start_space(struct daemon *d, const char *job,
                               const char *prefix, struct ts_server **out) {
  size_t n = strlen(prefix);
  if (n == 0 || n > RDZV_TS_SPACE_PREFIX_MAX || memchr(prefix, '\0', n)) {
    *out = NULL;
    return -EINVAL;
  }
  return ts_start(d, "127.0.0.1:0", job, prefix, NULL, out);
}

int rdzv__tcpstore_port(const struct ts_server *s) { return s->port; }

static void on_listen_closed(uv_handle_t *h) {
  struct ts_server *s = h->data;
  rdzv_buf_free(&s->frame);
  rdzv_buf_free(&s->kbuf);
  free(s->keys);
  free(s->vals);
  free(s->pkeys);
  free(s);
}

static void on_deferred_closed(uv_handle_t *h) {
  struct ts_server *s = h->data;
  uv_close((uv_handle_t *)&s->listen, on_listen_closed);
}

void rdzv__tcpstore_stop(struct ts_server *s) {
  if (s == NULL || s->closing)
    return;
  s->closing = true;
  while (s->conns != NULL)
    rdzv__ts_close(s->conns, "stopping");
  uv_close((uv_handle_t *)&s->deferred, on_deferred_closed);
}
