/* rdzvd transport: listeners, connections, framing, hello, limits and the
 * write path, on one libuv loop. Roles (root.c, node.c) see only decoded,
 * validated requests from READY connections. */
#include "store/server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "store/node_int.h"
#include "store/server_int.h"

/* Read buffers start small and double while a frame needs more: 100,000
 * mostly idle connections must not pin 64 KiB each. */
#define READ_MIN 4096

static const char *const state_names[] = {"HELLO_WAIT", "READY", "CLOSING",
                                          "CLOSED"};

void rdzv__log(struct daemon *d, int level, const char *fmt, ...) {
  if ((uint32_t)level > d->cfg.log_level)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rdzvd[%s] ", d->cfg.name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* Dropped connections are logged at most this often per second: a peer
 * that breaks rules in a loop (a scanner, a broken client) must not fill
 * the disk. The next line logged says how many were left out. */
#define DROP_LOGS_PER_S 10u

void rdzv__log_drop(struct daemon *d, const char *fmt, ...) {
  if (d->cfg.log_level < 1)
    return;
  uint64_t sec = uv_now(d->loop) / 1000;
  if (sec != d->drop_log_sec) {
    d->drop_log_sec = sec;
    d->drop_log_n = 0;
  }
  if (d->drop_log_n >= DROP_LOGS_PER_S) {
    d->drop_log_skipped++;
    return;
  }
  d->drop_log_n++;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rdzvd[%s] ", d->cfg.name);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (d->drop_log_skipped > 0)
    fprintf(stderr, " (%llu more dropped connections not logged)",
            (unsigned long long)d->drop_log_skipped);
  d->drop_log_skipped = 0;
  fputc('\n', stderr);
}

uint64_t rdzv__now_ms(struct daemon *d) { return uv_now(d->loop); }

static void conn_set_state(struct conn *c, enum conn_state s) {
  rdzv__log(c->d, 2, "conn %s: %s -> %s", c->name, state_names[c->state],
            state_names[s]);
  c->state = s;
}

void rdzv__reply_init(struct rdzv_msg *r, const struct rdzv_msg *m,
                      int status) {
  memset(r, 0, sizeof(*r));
  r->type = m->type;
  r->req_id = m->req_id;
  r->status = status;
}

/* ---- jobs ------------------------------------------------------------------ */

struct job *rdzv__job_get(struct daemon *d, const uint8_t *id, size_t len) {
  for (struct job *j = d->jobs; j != NULL; j = j->next)
    if (strlen(j->id) == len && memcmp(j->id, id, len) == 0)
      return j;
  struct job *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return NULL;
  j->id = strndup((const char *)id, len);
  if (j->id == NULL) {
    free(j);
    return NULL;
  }
  j->next = d->jobs;
  d->jobs = j;
  rdzv__log(d, 1, "job '%s' created", j->id);
  return j;
}

/* ---- connection lifetime ------------------------------------------------------ */

void rdzv__conn_ref(struct conn *c) { c->refs++; }

static void conn_free(struct conn *c) {
  rdzv_buf_free(&c->in);
  rdzv_buf_free(&c->out);
  rdzv_buf_free(&c->writing);
  free(c);
}

void rdzv__conn_unref(struct conn *c) {
  if (--c->refs == 0)
    conn_free(c);
}

bool rdzv__conn_alive(const struct conn *c) { return c->state == CONN_READY; }

static void on_timer_closed(uv_handle_t *h) {
  rdzv__conn_unref((struct conn *)h->data);
}

static void on_conn_closed(uv_handle_t *h) {
  struct conn *c = h->data;
  uv_close((uv_handle_t *)&c->hello_timer, on_timer_closed);
}

static void conn_close(struct conn *c) {
  if (c->state == CONN_CLOSED)
    return;
  if (c->inproc) {
    struct daemon *d = c->d;
    conn_set_state(c, CONN_CLOSED);
    TAILQ_REMOVE(&d->conns, c, link);
    if (c->dirty)
      TAILQ_REMOVE(&d->dirty, c, dirty_link);
    c->dirty = false;
    d->nconns--;
    d->stats.conns_open--;
    rdzv__conn_unref(c);
    return;
  }
  struct daemon *d = c->d;
  conn_set_state(c, CONN_CLOSED);
  TAILQ_REMOVE(&d->conns, c, link);
  if (c->dirty) {
    TAILQ_REMOVE(&d->dirty, c, dirty_link);
    c->dirty = false;
  }
  d->nconns--;
  d->stats.conns_open--;
  if (d->cfg.role == RDZV_DAEMON_ROOT)
    rdzv__root_conn_closed(d, c);
  else if (c->job != NULL && c->job->node != NULL && !d->stopping)
    rdzv__node_conn_closed(c->job->node, c);
  /* Pending operations may hold c a while longer: nothing more is
   * written, so its output buffer goes now (a write in flight keeps its
   * own; the input may still be referenced by the frame being handled). */
  rdzv_buf_free(&c->out);
  /* Two handles (stream, timer) each hold the conn until closed; the
   * stream's close callback closes the timer, whose callback drops the
   * handle reference taken at accept. */
  uv_close(&c->h.handle, on_conn_closed);
}

/* ---- write path -------------------------------------------------------------- */

static void start_write(struct conn *c);

static void on_write(uv_write_t *req, int status) {
  struct conn *c = req->data;
  c->write_active = false;
  c->writing.len = 0;
  if (c->writing.cap > READ_MIN)
    rdzv_buf_free(&c->writing); /* a big reply must not stay pinned */
  if (status < 0) {
    rdzv__log(c->d, 2, "conn %s: write failed: %s", c->name,
              uv_strerror(status));
    conn_close(c);
  } else if (c->state == CONN_CLOSING && c->out.len == 0) {
    conn_close(c);
  } else if (c->state != CONN_CLOSED && c->out.len > 0) {
    start_write(c);
  }
  rdzv__conn_unref(c);
}

static void start_write(struct conn *c) {
  if (c->write_active || c->out.len == 0 || c->state == CONN_CLOSED)
    return;

  struct rdzv_buf t = c->writing;
  c->writing = c->out;
  c->out = t;
  c->out.len = 0;
  uv_buf_t b = uv_buf_init((char *)c->writing.data, (unsigned)c->writing.len);
  c->wreq.data = c;
  int rc = uv_write(&c->wreq, &c->h.stream, &b, 1, on_write);
  if (rc < 0) {
    c->writing.len = 0;
    conn_close(c);
    return;
  }
  c->d->stats.bytes_out += b.len;
  c->write_active = true;
  rdzv__conn_ref(c);
}

static void on_idle(uv_idle_t *h) { (void)h; }

static void mark_dirty(struct conn *c) {
  struct daemon *d = c->d;
  if (c->dirty)
    return;
  c->dirty = true;
  TAILQ_INSERT_TAIL(&d->dirty, c, dirty_link);
  /* An active idle handle keeps the next poll from blocking, so the check
   * callback below flushes within this loop iteration. */
  uv_idle_start(&d->flush_idle, on_idle);
}

static void on_flush_check(uv_check_t *h) {
  struct daemon *d = h->data;
  struct conn *c;
  while ((c = TAILQ_FIRST(&d->dirty)) != NULL) {
    TAILQ_REMOVE(&d->dirty, c, dirty_link);
    c->dirty = false;
    start_write(c);
  }
  uv_idle_stop(&d->flush_idle);
}

/* Bytes the frame of m takes on the wire (for in-process peers' stats). */
static size_t frame_size(const struct rdzv_msg *m) {
  size_t n = RDZV_WIRE_HEADER_BYTES + RDZV_WIRE_MIN_BODY_BYTES, pos = 0;
  struct rdzv_slice s;
  while (rdzv_items_next(&m->keys, &pos, &s))
    n += 4 + s.n;
  pos = 0;
  while (rdzv_items_next(&m->vals, &pos, &s))
    n += 4 + s.n;
  return n;
}

void rdzv__conn_send(struct conn *c, const struct rdzv_msg *m) {
  if (c->inproc) {
    /* No socket, no encoding: the peer sees the message now (it must not
     * call back into the daemon from deliver; see serve.c). */
    if (c->state == CONN_READY) {
      c->d->stats.frames_out++;
      c->d->stats.bytes_out += frame_size(m);
      c->deliver(c->deliver_arg, m);
    }
    return;
  }
  if (c->state != CONN_READY && c->state != CONN_HELLO_WAIT &&
      !(c->state == CONN_CLOSING && m->type == RDZV_MSG_ERROR))
    return;
  if (rdzv_msg_encode(m, &c->out) < 0) {
    rdzv__log(c->d, 0, "conn %s: cannot encode a reply; closing", c->name);
    conn_close(c);
    return;
  }
  c->d->stats.frames_out++;
  mark_dirty(c);
}

void rdzv__conn_reply(struct conn *c, struct rdzv_msg *reply) {
  struct daemon *d = c->d;
  reply->flags |= RDZV_F_REPLY;
  if (reply->status != 0 && reply->type <= RDZV_MSG_TYPE_MAX)
    d->stats.ops[reply->type].errors++;
  if (c->outstanding > 0)
    c->outstanding--;
  if (c->state == CONN_READY)
    rdzv__conn_send(c, reply);
}

void rdzv__conn_fail(struct conn *c, int status, const char *text) {
  rdzv__conn_fail_req(c, 0, status, text);
}

void rdzv__conn_fail_req(struct conn *c, uint32_t req_id, int status,
                         const char *text) {
  if (c->state == CONN_CLOSING || c->state == CONN_CLOSED)
    return;
  struct daemon *d = c->d;
  d->stats.proto_errors++;
  rdzv__log_drop(d, "conn %s: dropped: %s (%s)", c->name,
                 rdzv_strerror(status), text);
  struct rdzv_slice s = {(const uint8_t *)text, (uint32_t)strlen(text)};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_ERROR;
  m.flags = RDZV_F_REPLY;
  m.req_id = req_id;
  m.status = status;
  m.keys.n = 1;
  m.keys.v = &s;
  conn_set_state(c, CONN_CLOSING);
  uv_read_stop(&c->h.stream);
  rdzv__conn_send(c, &m);
  if (c->dirty) {
    TAILQ_REMOVE(&d->dirty, c, dirty_link);
    c->dirty = false;
  }
  start_write(c);
  if (!c->write_active)
    conn_close(c);
}

/* ---- read path --------------------------------------------------------------- */

static void handle_hello(struct conn *c, const struct rdzv_msg *m) {
  struct daemon *d = c->d;
  struct rdzv_slice job, name = {NULL, 0};
  if (m->type != RDZV_MSG_HELLO) {
    rdzv__conn_fail(c, RDZV_EHELLO, "the first frame must be a hello");
    return;
  }
  if (rdzv_items_get(&m->keys, 0, &job) < 0 || job.n == 0 || job.n > 255) {
    rdzv__conn_fail(c, RDZV_EJOB_ID_MISSING,
                    "hello: job id missing, empty or over 255 bytes");
    return;
  }
  if (m->a != RDZV_ROLE_CLIENT && m->a != RDZV_ROLE_NODE) {
    rdzv__conn_fail(c, RDZV_EBAD_ROLE, "hello: unknown peer role");
    return;
  }
  c->job = rdzv__job_get(d, job.p, job.n);
  if (c->job == NULL) {
    rdzv__conn_fail(c, RDZV_ENOMEM, "out of memory");
    return;
  }
  if (rdzv_items_get(&m->keys, 1, &name) == 0 && name.n > 0) {
    size_t n = name.n < sizeof(c->name) - 1 ? name.n : sizeof(c->name) - 1;
    memcpy(c->name, name.p, n);
    c->name[n] = '\0';
  }
  c->role = (int)m->a;
  uv_timer_stop(&c->hello_timer);
  conn_set_state(c, CONN_READY);
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, 0);
  r.flags = RDZV_F_REPLY;
  rdzv__conn_send(c, &r);
}

static void handle_frame(struct conn *c, const struct rdzv_msg *m) {
  struct daemon *d = c->d;
  d->stats.frames_in++;
  if (c->state == CONN_HELLO_WAIT) {
    d->stats.ops[RDZV_MSG_HELLO].received++;
    handle_hello(c, m);
    return;
  }
  int rc = rdzv_msg_validate_request(m, &d->limits);
  if (rc < 0) {
    char text[96];
    snprintf(text, sizeof(text), "%s request rejected",
             rdzv_msg_type_name(m->type));
    rdzv__conn_fail_req(c, m->req_id, rc, text);
    return;
  }
  if (m->type == RDZV_MSG_HELLO) {
    rdzv__conn_fail(c, RDZV_EPROTO, "a second hello");
    return;
  }
  if (++c->outstanding > d->cfg.max_outstanding) {
    rdzv__conn_fail_req(c, m->req_id, RDZV_ETOO_MANY_REQUESTS,
                        "over --max-outstanding requests");
    return;
  }
  d->stats.ops[m->type].received++;
  if (d->cfg.role == RDZV_DAEMON_ROOT)
    rdzv__root_handle(d, c, m);
  else
    rdzv__node_handle(d, c, m);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct conn *c = h->data;
  (void)suggested;
  if (rdzv_buf_reserve(&c->in, c->in.len > READ_MIN ? c->in.len : READ_MIN) <
      0) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = (char *)c->in.data + c->in.len;
  buf->len = c->in.cap - c->in.len;
}

static void decode_frames(struct conn *c) {
  struct daemon *d = c->d;
  size_t off = 0;
  /* A reference keeps c valid while handlers run, even if one closes it. */
  rdzv__conn_ref(c);
  while (c->state == CONN_HELLO_WAIT || c->state == CONN_READY) {
    struct rdzv_msg m;
    size_t used = 0;
    int rc = rdzv_msg_decode(c->in.data + off, c->in.len - off,
                             d->cfg.max_frame_bytes, &m, &used);
    if (rc == RDZV_ENEEDMORE)
      break;
    if (rc < 0) {
      rdzv__conn_fail(c, rc, "undecodable frame");
      break;
    }
    if (m.flags & RDZV_F_REPLY) {
      rdzv__conn_fail(c, RDZV_EPROTO, "a reply frame sent as a request");
      break;
    }
    handle_frame(c, &m);
    off += used;
  }
  if (c->state != CONN_CLOSED)
    rdzv_buf_consume(&c->in, off);
  if (c->in.len == 0)
    rdzv_buf_free(&c->in); /* idle connections hold no buffer */
  rdzv__conn_unref(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct conn *c = s->data;
  (void)buf;
  if (nread < 0) {
    if (nread != UV_EOF)
      rdzv__log(c->d, 2, "conn %s: read: %s", c->name, uv_strerror((int)nread));
    conn_close(c);
    return;
  }
  if (nread == 0)
    return;
  c->in.len += (size_t)nread;
  c->d->stats.bytes_in += (uint64_t)nread;
  decode_frames(c);
}

static void on_hello_timeout(uv_timer_t *t) {
  struct conn *c = t->data;
  rdzv__conn_fail(c, RDZV_EHELLO, "no hello before --hello-timeout-ms");
}

/* ---- in-process peers (benchmark) ------------------------------------------ */

struct conn *rdzv_daemon_inproc_connect(struct daemon *d, const char *job,
                                        void (*deliver)(void *,
                                                        const struct rdzv_msg *),
                                        void *arg) {
  struct conn *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return NULL;
  c->d = d;
  c->refs = 1;
  c->inproc = true;
  c->deliver = deliver;
  c->deliver_arg = arg;
  c->role = RDZV_ROLE_CLIENT;
  c->job = rdzv__job_get(d, (const uint8_t *)job, strlen(job));
  snprintf(c->name, sizeof(c->name), "inproc#%llu",
           (unsigned long long)d->stats.conns_total + 1);
  c->state = c->job != NULL ? CONN_READY : CONN_CLOSED;
  TAILQ_INSERT_TAIL(&d->conns, c, link);
  d->nconns++;
  d->stats.conns_open++;
  d->stats.conns_total++;
  if (c->job == NULL) {
    conn_close(c);
    return NULL;
  }
  return c;
}

int rdzv_daemon_inproc_send(struct conn *c, const uint8_t *frame,
                            size_t len) {
  if (c->state != CONN_READY)
    return RDZV_ECONN_CLOSED;
  c->d->stats.bytes_in += len;
  struct rdzv_msg m;
  size_t used;
  int rc = rdzv_msg_decode(frame, len, c->d->cfg.max_frame_bytes, &m, &used);
  if (rc < 0 || used != len)
    return rc < 0 ? rc : RDZV_EPROTO;
  rdzv__conn_ref(c);
  handle_frame(c, &m);
  rdzv__conn_unref(c);
  return 0;
}

void rdzv_daemon_inproc_close(struct conn *c) {
  conn_close(c);
}

/* ---- listeners ------------------------------------------------------------- */

static void on_connection(uv_stream_t *server, int status) {
  struct daemon *d = server->data;
  if (status < 0)
    return;
  struct conn *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return;
  c->d = d;
  c->refs = 1;
  int rc = server == (uv_stream_t *)&d->tcp_listen
               ? uv_tcp_init(d->loop, &c->h.tcp)
               : uv_pipe_init(d->loop, &c->h.pipe, 0);
  if (rc == 0)
    rc = uv_accept(server, &c->h.stream);
  c->h.handle.data = c;
  uv_timer_init(d->loop, &c->hello_timer);
  c->hello_timer.data = c;
  snprintf(c->name, sizeof(c->name), "#%llu",
           (unsigned long long)d->stats.conns_total + 1);
  TAILQ_INSERT_TAIL(&d->conns, c, link);
  d->nconns++;
  d->stats.conns_open++;
  d->stats.conns_total++;
  if (rc < 0) {
    conn_close(c);
    return;
  }
  if (server == (uv_stream_t *)&d->tcp_listen)
    uv_tcp_nodelay(&c->h.tcp, 1);
  if (d->nconns > d->cfg.max_connections) {
    d->stats.conns_rejected++;
    rdzv__conn_fail(c, RDZV_ETOO_MANY_CONNECTIONS,
                    "over --max-connections");
    return;
  }
  uv_timer_start(&c->hello_timer, on_hello_timeout, d->cfg.hello_timeout_ms,
                 0);
  uv_read_start(&c->h.stream, on_alloc, on_read);
}

int rdzv__split_host_port(const char *addr, char *host, size_t hostlen,
                           int *port) {
  const char *colon = strrchr(addr, ':');
  if (colon == NULL)
    return RDZV_EBAD_ADDR;
  const char *h = addr;
  size_t hl = (size_t)(colon - addr);
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
    h++;
    hl -= 2;
  }
  char *end = NULL;
  long p = strtol(colon + 1, &end, 10);
  if (hl == 0 || hl >= hostlen || end == colon + 1 || *end != '\0' ||
      p < 0 || p > 65535)
    return RDZV_EBAD_ADDR;
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = (int)p;
  return 0;
}

int rdzv__write_port_file(const char *path, int port) {
  char tmp[300];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (f == NULL)
    return -errno;
  fprintf(f, "%d\n", port);
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return -e;
  }
  return 0;
}

/* The port the TCP listener is bound to (the kernel's choice for port 0). */
static int tcp_bound_port(struct daemon *d) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  if (uv_tcp_getsockname(&d->tcp_listen, (struct sockaddr *)&ss, &len) < 0)
    return 0;
  /* sin_port and sin6_port sit at the same offset. */
  return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static int listen_tcp(struct daemon *d) {
  char host[256];
  int port;
  struct sockaddr_storage ss;
  int rc = rdzv__split_host_port(d->cfg.listen, host, sizeof(host), &port);
  if (rc < 0) {
    fprintf(stderr, "rdzvd: --listen '%s' is not HOST:PORT\n", d->cfg.listen);
    return rc;
  }
  rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
  if (rc < 0)
    rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
  if (rc < 0) {
    fprintf(stderr, "rdzvd: --listen '%s': not a numeric address\n", host);
    return RDZV_EBAD_ADDR;
  }
  uv_tcp_init(d->loop, &d->tcp_listen);
  d->tcp_listen.data = d;
  d->have_tcp = true;
  rc = uv_tcp_bind(&d->tcp_listen, (struct sockaddr *)&ss, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&d->tcp_listen, (int)d->cfg.backlog,
                   on_connection);
  if (rc < 0) {
    fprintf(stderr, "rdzvd: listen on %s: %s\n", d->cfg.listen,
            uv_strerror(rc));
    return rc;
  }
  snprintf(d->bound_addr, sizeof(d->bound_addr), "%s:%d", host,
           tcp_bound_port(d));
  return 0;
}

/* True if something accepts connections on the Unix socket at path: a
 * daemon that does not take the lock below (an older rdzvd), whose socket
 * must not be taken over either. */
static bool unix_socket_live(const char *path) {
  struct sockaddr_un sa;
  if (strlen(path) >= sizeof(sa.sun_path))
    return false;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  bool live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  close(fd);
  return live;
}

/* Whether the directory that would hold path exists (libuv reports a
 * bind into a missing directory as "permission denied"). */
static bool parent_dir_exists(const char *path) {
  char dir[PATH_MAX];
  struct stat st;
  const char *slash = strrchr(path, '/');
  if (slash == NULL)
    return true; /* the working directory */
  if (slash == path)
    return true; /* "/" */
  snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The Unix socket's lock: whoever holds an exclusive flock on PATH.lock
 * owns PATH, for its whole life. Taken before PATH is looked at, so two
 * daemons started at once cannot both find PATH free, unlink and bind;
 * the loser touches nothing. The holder removes PATH.lock (while still
 * holding it) when it stops, so a lock taken on a file that was removed
 * meanwhile is dropped and taken again on the current file. */
static void unix_lock_path(const struct daemon *d, char *out, size_t n) {
  snprintf(out, n, "%s.lock", d->cfg.unix_path);
}

/* Returns the locked descriptor, -EWOULDBLOCK when another process holds
 * the lock, or -errno. */
static int unix_lock_take(const char *lock_path) {
  for (int tries = 0; tries < 100; tries++) {
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
      return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
      int e = errno;
      close(fd);
      return e == EAGAIN ? -EWOULDBLOCK : -e;
    }
    struct stat held, now;
    if (fstat(fd, &held) == 0 && stat(lock_path, &now) == 0 &&
        held.st_dev == now.st_dev && held.st_ino == now.st_ino)
      return fd;
    close(fd); /* its holder removed that file as it stopped: retry */
  }
  return -EWOULDBLOCK;
}

/* The locks held by the daemons of this process (several share a process
 * in the benchmark), by daemon. */
struct unix_lock {
  const struct daemon *d;
  int fd;
  struct unix_lock *next;
};
static struct unix_lock *unix_locks;
static pthread_mutex_t unix_locks_mu = PTHREAD_MUTEX_INITIALIZER;

static int unix_lock_keep(const struct daemon *d, int fd) {
  struct unix_lock *l = malloc(sizeof(*l));
  if (l == NULL)
    return RDZV_ENOMEM;
  l->d = d;
  l->fd = fd;
  pthread_mutex_lock(&unix_locks_mu);
  l->next = unix_locks;
  unix_locks = l;
  pthread_mutex_unlock(&unix_locks_mu);
  return 0;
}

/* Removes PATH.lock and releases the lock, if d holds it. */
static void unix_lock_release(const struct daemon *d) {
  struct unix_lock *l = NULL;
  pthread_mutex_lock(&unix_locks_mu);
  for (struct unix_lock **p = &unix_locks; *p != NULL; p = &(*p)->next) {
    if ((*p)->d == d) {
      l = *p;
      *p = l->next;
      break;
    }
  }
  pthread_mutex_unlock(&unix_locks_mu);
  if (l == NULL)
    return;
  char lock_path[sizeof(d->cfg.unix_path) + 8];
  unix_lock_path(d, lock_path, sizeof(lock_path));
  unlink(lock_path);
  close(l->fd);
  free(l);
}

/* With the lock held: PATH may be free, or a stale socket of an earlier
 * run (removed here); anything else is refused and left alone. */
static int unix_path_claim(const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0)
    return errno == ENOENT ? 0 : -errno;
  if (!S_ISSOCK(st.st_mode)) {
    fprintf(stderr, "rdzvd: unix:%s exists and is not a socket\n", path);
    return -EEXIST;
  }
  if (unix_socket_live(path)) {
    fprintf(stderr, "rdzvd: unix:%s is in use by a live daemon\n", path);
    return -EADDRINUSE;
  }
  if (unlink(path) < 0 && errno != ENOENT) {
    int e = errno;
    fprintf(stderr, "rdzvd: unix:%s: cannot remove the stale socket: %s\n",
            path, strerror(e));
    return -e;
  }
  return 0;
}

static void close_cb_noop(uv_handle_t *h);

static int listen_unix(struct daemon *d) {
  const char *path = d->cfg.unix_path;
  struct sockaddr_un sa;
  if (path[0] == '\0')
    return 0;
  if (strlen(path) >= sizeof(sa.sun_path)) {
    fprintf(stderr,
            "rdzvd: unix:%s: the path is %zu bytes; a Unix socket path holds "
            "at most %zu bytes\n",
            path, strlen(path), sizeof(sa.sun_path) - 1);
    return RDZV_EBAD_ADDR;
  }
  char lock_path[sizeof(d->cfg.unix_path) + 8];
  unix_lock_path(d, lock_path, sizeof(lock_path));
  int fd = unix_lock_take(lock_path);
  if (fd == -EWOULDBLOCK) {
    fprintf(stderr, "rdzvd: unix:%s is in use by a live daemon\n", path);
    return -EADDRINUSE;
  }
  if (fd < 0 && !parent_dir_exists(path)) {
    fprintf(stderr,
            "rdzvd: listen on unix:%s: its directory does not exist "
            "(create it first)\n",
            path);
    return UV_ENOENT;
  }
  if (fd < 0) {
    fprintf(stderr, "rdzvd: unix:%s: cannot take its lock file %s: %s\n",
            path, lock_path, strerror(-fd));
    return fd;
  }
  bool bound = false;
  int rc = unix_path_claim(path);
  if (rc == 0) {
    uv_pipe_init(d->loop, &d->unix_listen, 0);
    d->unix_listen.data = d;
    d->have_unix = true;
    rc = uv_pipe_bind(&d->unix_listen, path);
    bound = rc == 0;
    if (rc == 0)
      rc = uv_listen((uv_stream_t *)&d->unix_listen, (int)d->cfg.backlog,
                     on_connection);
    if (rc < 0)
      fprintf(stderr, "rdzvd: listen on unix:%s: %s\n", path, uv_strerror(rc));
  }
  if (rc == 0)
    rc = unix_lock_keep(d, fd);
  if (rc < 0) {
    if (d->have_unix) {
      uv_close((uv_handle_t *)&d->unix_listen, close_cb_noop);
      d->have_unix = false;
    }
    if (bound)
      unlink(path);
    unlink(lock_path);
    close(fd);
  }
  return rc;
}

/* ---- start and stop ------------------------------------------------------- */

static void close_cb_noop(uv_handle_t *h) { (void)h; }

void rdzv_daemon_stop(struct daemon *d) {
  if (d->stopping)
    return;
  d->stopping = true;
  rdzv__log(d, 1, "stopping");
  rdzv__tcpstore_stop(d->tcpstore); /* its in-process connections first */
  d->tcpstore = NULL;
  struct conn *c;
  while ((c = TAILQ_FIRST(&d->conns)) != NULL)
    conn_close(c);
  for (struct job *j = d->jobs; j != NULL; j = j->next) {
    if (d->cfg.role == RDZV_DAEMON_ROOT)
      rdzv__root_job_free(j);
    else
      rdzv__node_job_free(j);
  }
  if (d->have_tcp)
    uv_close((uv_handle_t *)&d->tcp_listen, close_cb_noop);
  if (d->have_unix) {
    uv_close((uv_handle_t *)&d->unix_listen, close_cb_noop);
    unlink(d->cfg.unix_path); /* ours: we hold its lock */
  }
  unix_lock_release(d);
  uv_close((uv_handle_t *)&d->flush_idle, close_cb_noop);
  uv_close((uv_handle_t *)&d->flush_check, close_cb_noop);
}

static void free_jobs(struct daemon *d) {
  struct job *j = d->jobs;
  while (j != NULL) {
    struct job *next = j->next;
    free(j->id);
    free(j);
    j = next;
  }
  d->jobs = NULL;
}

void rdzv_daemon_free(struct daemon *d) {
  if (d == NULL)
    return;
  unix_lock_release(d); /* stopped already, unless the caller skipped it */
  free_jobs(d);
  free(d);
}

int rdzv_daemon_start(uv_loop_t *loop, const struct rdzv_daemon_config *cfg,
                      struct daemon **out) {
  struct daemon *d = calloc(1, sizeof(*d));
  if (d == NULL)
    return RDZV_ENOMEM;
  d->cfg = *cfg;
  if (d->cfg.name[0] == '\0') {
    char host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    snprintf(d->cfg.name, sizeof(d->cfg.name), "%s:%d", host, (int)getpid());
  }
  d->limits.max_key_bytes = cfg->max_key_bytes;
  d->limits.max_value_bytes = cfg->max_value_bytes;
  d->loop = loop;
  TAILQ_INIT(&d->conns);
  TAILQ_INIT(&d->dirty);
  uv_idle_init(d->loop, &d->flush_idle);
  uv_check_init(d->loop, &d->flush_check);
  d->flush_check.data = d;
  uv_check_start(&d->flush_check, on_flush_check);
  d->start_ms = uv_now(d->loop);
  int rc = cfg->listen[0] != '\0' ? listen_tcp(d) : 0;
  if (rc == 0)
    rc = listen_unix(d);
  if (rc == 0 && cfg->tcpstore_listen[0] != '\0')
    rc = rdzv__tcpstore_start(d, cfg->tcpstore_listen, cfg->tcpstore_job,
                              cfg->tcpstore_port_file, &d->tcpstore);
  /* The port is published only once every listener is up: a script that
   * waits for the port file must never find a daemon that gave up. */
  if (rc == 0 && d->have_tcp && cfg->port_file[0] != '\0') {
    rc = rdzv__write_port_file(cfg->port_file, tcp_bound_port(d));
    if (rc < 0)
      fprintf(stderr, "rdzvd: --port-file %s: %s\n", cfg->port_file,
              strerror(-rc));
  }
  if (rc < 0) {
    rdzv_daemon_stop(d);
    *out = d; /* the caller runs the loop to close handles, then frees */
    return rc;
  }
  rdzv__log(d, 1, "%s listening on tcp:%s%s%s",
            cfg->role == RDZV_DAEMON_ROOT ? "root" : "node",
            d->have_tcp ? d->bound_addr : "(none)",
            d->have_unix ? " and unix:" : "", d->have_unix ? cfg->unix_path : "");
  *out = d;
  return 0;
}

char *rdzv_daemon_stats_json(const struct daemon *d) {
  return rdzv__stats_json(d);
}

struct run_ctx {
  struct daemon *d;
  uv_signal_t sigint, sigterm;
};

static void on_signal(uv_signal_t *s, int signum) {
  struct run_ctx *r = s->data;
  (void)signum;
  rdzv_daemon_stop(r->d);
  uv_close((uv_handle_t *)&r->sigint, close_cb_noop);
  uv_close((uv_handle_t *)&r->sigterm, close_cb_noop);
}

int rdzv_daemon_run(const struct rdzv_daemon_config *cfg) {
  /* libuv writes with write(2): a peer that hung up must cost an EPIPE on
   * that connection, not the process. */
  signal(SIGPIPE, SIG_IGN);
  uv_loop_t *loop = uv_default_loop();
  struct run_ctx r;
  int rc = rdzv_daemon_start(loop, cfg, &r.d);
  if (rc == 0) {
    uv_signal_init(loop, &r.sigint);
    uv_signal_init(loop, &r.sigterm);
    r.sigint.data = r.sigterm.data = &r;
    uv_signal_start(&r.sigint, on_signal, SIGINT);
    uv_signal_start(&r.sigterm, on_signal, SIGTERM);
  }
  uv_run(loop, UV_RUN_DEFAULT); /* until stopped; then close callbacks */
  uv_loop_close(loop);
  rdzv_daemon_free(r.d);
  return rc;
}
