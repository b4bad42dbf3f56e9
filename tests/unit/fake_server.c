/* FAKE SERVER for the client tests (see fake_server.h). It runs in a forked
 * child, single-threaded, with blocking writes: simple rather than fast. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "fake_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store/wire/wire.h"

#define MAX_CONNS 64
#define MAX_KV 4096
#define MAX_WAITS 256
#define MAX_CONTRIBS 64
#define MAX_BODY (64u << 20)

struct kv {
  uint8_t *key;
  uint32_t klen;
  uint8_t *val;
  uint32_t vlen;
};

struct conn {
  int fd;
  int hello;
  struct rdzv_buf in;
};

struct pwait {
  int used;
  int conn;
  uint32_t req_id;
  uint32_t nkeys;
  struct rdzv_buf raw; /* the request's encoded key list */
  int64_t deadline;    /* ms; INT64_MAX = never */
};

struct contrib {
  int used;
  int conn;
  uint32_t req_id;
  uint8_t type;
  int64_t count;
  struct rdzv_buf name;
  struct rdzv_buf item; /* { u64 member, data } as sent */
};

struct srv {
  const struct fake_server_opts *o;
  int lfd[2];
  struct conn conns[MAX_CONNS];
  struct kv kv[MAX_KV];
  int nkv;
  struct pwait waits[MAX_WAITS];
  struct contrib contribs[MAX_CONTRIBS];
};

static int64_t now_ms(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_all(struct srv *s, int ci, const void *p, size_t n) {
  const uint8_t *b = p;
  ssize_t w;

  while (n > 0 && s->conns[ci].fd >= 0) {
    w = send(s->conns[ci].fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return;
    b += w;
    n -= (size_t)w;
  }
}

static void conn_close(struct srv *s, int ci) {
  int i;

  if (s->conns[ci].fd >= 0)
    close(s->conns[ci].fd);
  s->conns[ci].fd = -1;
  rdzv_buf_free(&s->conns[ci].in);
  for (i = 0; i < MAX_WAITS; i++) {
    if (s->waits[i].used && s->waits[i].conn == ci) {
      s->waits[i].used = 0;
      rdzv_buf_free(&s->waits[i].raw);
    }
  }
}

static void send_msg(struct srv *s, int ci, const struct rdzv_msg *m) {
  struct rdzv_buf b = {0};

  if (rdzv_msg_encode(m, &b) == 0)
    write_all(s, ci, b.data, b.len);
  rdzv_buf_free(&b);
}

/* Replies to a request of type `type` and id `id`. */
static void reply(struct srv *s, int ci, uint8_t type, uint32_t id, int status,
                  int64_t a, const struct rdzv_items *keys,
                  const struct rdzv_items *vals) {
  struct rdzv_msg m;

  memset(&m, 0, sizeof(m));
  m.type = type;
  m.flags = RDZV_F_REPLY;
  m.req_id = id;
  m.status = status;
  m.a = a;
  if (keys != NULL)
    m.keys = *keys;
  if (vals != NULL)
    m.vals = *vals;
  send_msg(s, ci, &m);
}

static struct kv *kv_find(struct srv *s, struct rdzv_slice k) {
  int i;

  for (i = 0; i < s->nkv; i++) {
    if (s->kv[i].klen == k.n && memcmp(s->kv[i].key, k.p, k.n) == 0)
      return &s->kv[i];
  }
  return NULL;
}

static void kv_put(struct srv *s, struct rdzv_slice k, const void *v,
                   uint32_t n) {
  struct kv *e = kv_find(s, k);

  if (e == NULL) {
    if (s->nkv == MAX_KV)
      return;
    e = &s->kv[s->nkv++];
    e->key = malloc(k.n + 1);
    memcpy(e->key, k.p, k.n);
    e->klen = k.n;
    e->val = NULL;
  }
  free(e->val);
  e->val = malloc(n + 1);
  if (n > 0)
    memcpy(e->val, v, n);
  e->vlen = n;
}

static void kv_del(struct srv *s, struct kv *e) {
  free(e->key);
  free(e->val);
  *e = s->kv[--s->nkv];
}

static int slice_is(struct rdzv_slice k, const char *str) {
  return k.n == strlen(str) && memcmp(k.p, str, k.n) == 0;
}

/* Answers a WAIT if all its keys exist. Returns 1 if answered. */
static int wait_try(struct srv *s, int ci, uint32_t id,
                    const struct rdzv_items *keys, int64_t deadline,
                    int64_t now) {
  struct rdzv_slice k;
  struct rdzv_slice miss[64];
  struct rdzv_items mi = {0};
  size_t pos = 0;

  while (rdzv_items_next(keys, &pos, &k)) {
    if (kv_find(s, k) == NULL && mi.n < 64)
      miss[mi.n++] = k;
  }
  if (mi.n == 0) {
    reply(s, ci, RDZV_MSG_WAIT, id, 0, 0, NULL, NULL);
    return 1;
  }
  if (now < deadline)
    return 0;
  mi.v = miss;
  reply(s, ci, RDZV_MSG_WAIT, id, RDZV_EDEADLINE, 0, &mi, NULL);
  return 1;
}

static void waits_check(struct srv *s, int64_t now) {
  struct pwait *w;
  struct rdzv_items keys;
  int i;

  for (i = 0; i < MAX_WAITS; i++) {
    w = &s->waits[i];
    if (!w->used)
      continue;
    keys = (struct rdzv_items){w->nkeys, NULL, w->raw.data, w->raw.len};
    if (wait_try(s, w->conn, w->req_id, &keys, w->deadline, now)) {
      w->used = 0;
      rdzv_buf_free(&w->raw);
    }
  }
}

static void on_wait(struct srv *s, int ci, const struct rdzv_msg *m) {
  int64_t deadline =
      s->o->wait_mode == FAKE_WAIT_NEVER ? INT64_MAX : now_ms() + m->a / 2;
  int i;

  if (wait_try(s, ci, m->req_id, &m->keys, deadline, now_ms()))
    return;
  for (i = 0; i < MAX_WAITS && s->waits[i].used; i++)
    ;
  if (i == MAX_WAITS)
    return;
  s->waits[i] = (struct pwait){1, ci, m->req_id, m->keys.n, {0}, deadline};
  rdzv_buf_append(&s->waits[i].raw, m->keys.raw, m->keys.raw_len);
}

/* The special keys of GET. Returns 1 if k was one. */
static int get_special(struct srv *s, int ci, const struct rdzv_msg *m,
                       struct rdzv_slice k) {
  static const char junk[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
  struct rdzv_slice text = {(const uint8_t *)"fake error: key too long", 24};
  struct rdzv_msg e;
  uint8_t hdr[RDZV_WIRE_HEADER_BYTES];

  if (slice_is(k, "drop")) {
    conn_close(s, ci);
  } else if (slice_is(k, "error")) {
    memset(&e, 0, sizeof(e));
    e.type = RDZV_MSG_ERROR;
    e.flags = RDZV_F_REPLY;
    e.status = RDZV_EKEY_TOO_LONG;
    e.keys = (struct rdzv_items){1, &text, NULL, 0};
    send_msg(s, ci, &e);
    conn_close(s, ci);
  } else if (slice_is(k, "garbage")) {
    write_all(s, ci, junk, sizeof(junk) - 1);
  } else if (slice_is(k, "huge")) {
    rdzv_store_u64le(hdr, RDZV_WIRE_MAGIC);
    hdr[4] = RDZV_WIRE_VERSION;
    hdr[5] = RDZV_MSG_GET;
    hdr[6] = RDZV_F_REPLY;
    hdr[7] = 0;
    rdzv_store_u64le(hdr + 8, m->req_id | (uint64_t)(1u << 30) << 32);
    write_all(s, ci, hdr, sizeof(hdr));
  } else {
    return 0;
  }
  return 1;
}

static void on_get(struct srv *s, int ci, const struct rdzv_msg *m) {
  struct rdzv_slice k;
  struct rdzv_slice v;
  struct rdzv_items vals = {1, &v, NULL, 0};
  struct kv *e;

  rdzv_items_get(&m->keys, 0, &k);
  if (get_special(s, ci, m, k))
    return;
  e = kv_find(s, k);
  if (e == NULL) {
    reply(s, ci, m->type, m->req_id, RDZV_ENOKEY, 0, NULL, NULL);
    return;
  }
  v = (struct rdzv_slice){e->val, e->vlen};
  reply(s, ci, m->type, m->req_id, 0, 0, NULL, &vals);
}

static void on_add(struct srv *s, int ci, const struct rdzv_msg *m) {
  struct rdzv_slice k;
  struct kv *e;
  char buf[32];
  int64_t v = 0;

  rdzv_items_get(&m->keys, 0, &k);
  e = kv_find(s, k);
  if (e != NULL) {
    snprintf(buf, sizeof(buf), "%.*s", (int)e->vlen, (const char *)e->val);
    v = strtoll(buf, NULL, 10);
  }
  if (m->flags & RDZV_F_OPID) {
    /* Parts { u64 op id, i64 delta } (wire.h), as a client sends them;
     * the double applies each, with no dedup of its own. */
    struct rdzv_slice p;
    size_t pos = 0;
    while (rdzv_items_next(&m->vals, &pos, &p))
      if (p.n == 16)
        v += (int64_t)rdzv_load_u64le(p.p + 8);
  } else {
    v += m->a;
  }
  snprintf(buf, sizeof(buf), "%lld", (long long)v);
  kv_put(s, k, buf, (uint32_t)strlen(buf));
  reply(s, ci, m->type, m->req_id, 0, v, NULL, NULL);
}

static void on_cas(struct srv *s, int ci, const struct rdzv_msg *m) {
  struct rdzv_slice k, exp, des, cur = {(const uint8_t *)"", 0};
  struct rdzv_items vals = {1, &cur, NULL, 0};
  struct kv *e;
  int st = RDZV_ECAS_FAILED;

  rdzv_items_get(&m->keys, 0, &k);
  rdzv_items_get(&m->vals, 0, &exp);
  rdzv_items_get(&m->vals, 1, &des);
  e = kv_find(s, k);
  if ((e == NULL && exp.n == 0) ||
      (e != NULL && e->vlen == exp.n && memcmp(e->val, exp.p, exp.n) == 0)) {
    kv_put(s, k, des.p, des.n);
    e = kv_find(s, k);
    st = 0;
  }
  if (e != NULL)
    cur = (struct rdzv_slice){e->val, e->vlen};
  reply(s, ci, m->type, m->req_id, st, 0, NULL, &vals);
}

static void on_mget(struct srv *s, int ci, const struct rdzv_msg *m) {
  struct rdzv_slice v[64];
  struct rdzv_slice miss[64];
  struct rdzv_items vals = {0, v, NULL, 0};
  struct rdzv_items mi = {0, miss, NULL, 0};
  struct rdzv_slice k;
  struct kv *e;
  size_t pos = 0;

  while (rdzv_items_next(&m->keys, &pos, &k) && vals.n < 64) {
    e = kv_find(s, k);
    if (e == NULL)
      miss[mi.n++] = k;
    else
      v[vals.n++] = (struct rdzv_slice){e->val, e->vlen};
  }
  if (mi.n > 0)
    reply(s, ci, m->type, m->req_id, RDZV_ENOKEY, 0, &mi, NULL);
  else
    reply(s, ci, m->type, m->req_id, 0, 0, NULL, &vals);
}

static void on_set_like(struct srv *s, int ci, const struct rdzv_msg *m) {
  struct rdzv_slice k, v;
  struct kv *e;
  uint8_t *nv;
  uint32_t i;

  for (i = 0; i < m->keys.n; i++) {
    rdzv_items_get(&m->keys, i, &k);
    rdzv_items_get(&m->vals, i, &v);
    e = kv_find(s, k);
    if (m->type == RDZV_MSG_APPEND && e != NULL) {
      nv = malloc(e->vlen + v.n + 1);
      memcpy(nv, e->val, e->vlen);
      memcpy(nv + e->vlen, v.p, v.n);
      kv_put(s, k, nv, e->vlen + v.n);
      free(nv);
    } else {
      kv_put(s, k, v.p, v.n);
    }
  }
  reply(s, ci, m->type, m->req_id, 0, 0, NULL, NULL);
  waits_check(s, now_ms());
}

static int contrib_cmp(const void *a, const void *b) {
  const struct contrib *x = *(const struct contrib *const *)a;
  const struct contrib *y = *(const struct contrib *const *)b;
  uint64_t mx = rdzv_load_u64le(x->item.data);
  uint64_t my = rdzv_load_u64le(y->item.data);

  return mx < my ? -1 : mx > my;
}

/* Replies to every member of a complete collective and forgets it. */
static void collective_done(struct srv *s, struct contrib **all, int n) {
  struct rdzv_slice items[MAX_CONTRIBS];
  struct rdzv_items vals = {(uint32_t)n, items, NULL, 0};
  int i;

  qsort(all, (size_t)n, sizeof(*all), contrib_cmp);
  for (i = 0; i < n; i++)
    items[i] =
        (struct rdzv_slice){all[i]->item.data, (uint32_t)all[i]->item.len};
  for (i = 0; i < n; i++)
    reply(s, all[i]->conn, all[i]->type, all[i]->req_id, 0, n, NULL,
          all[i]->type == RDZV_MSG_GATHER ? &vals : NULL);
  for (i = 0; i < n; i++) {
    rdzv_buf_free(&all[i]->name);
    rdzv_buf_free(&all[i]->item);
    all[i]->used = 0;
  }
}

static void on_collective(struct srv *s, int ci, const struct rdzv_msg *m) {
  struct contrib *all[MAX_CONTRIBS];
  struct rdzv_slice name, item;
  struct contrib *c;
  int i, n = 0;

  rdzv_items_get(&m->keys, 0, &name);
  rdzv_items_get(&m->vals, 0, &item);
  for (i = 0; i < MAX_CONTRIBS && s->contribs[i].used; i++)
    ;
  if (i == MAX_CONTRIBS)
    return;
  c = &s->contribs[i];
  *c = (struct contrib){1, ci, m->req_id, m->type, m->b, {0}, {0}};
  rdzv_buf_append(&c->name, name.p, name.n);
  rdzv_buf_append(&c->item, item.p, item.n);
  for (i = 0; i < MAX_CONTRIBS; i++) {
    c = &s->contribs[i];
    if (c->used && c->type == m->type && c->name.len == name.n &&
        memcmp(c->name.data, name.p, name.n) == 0)
      all[n++] = c;
  }
  if (n >= m->b)
    collective_done(s, all, n);
}

static void on_hello(struct srv *s, int ci, const struct rdzv_msg *m) {
  struct rdzv_slice job;

  if (m->type != RDZV_MSG_HELLO || rdzv_items_get(&m->keys, 0, &job) < 0) {
    conn_close(s, ci);
    return;
  }
  if (!slice_is(job, s->o->job_id)) {
    reply(s, ci, RDZV_MSG_HELLO, m->req_id, RDZV_EJOB_MISMATCH, 0, NULL, NULL);
    conn_close(s, ci);
    return;
  }
  s->conns[ci].hello = 1;
  reply(s, ci, RDZV_MSG_HELLO, m->req_id, 0, 0, NULL, NULL);
}

static void handle(struct srv *s, int ci, const struct rdzv_msg *m) {
  struct rdzv_slice k;
  struct rdzv_slice js = {(const uint8_t *)"{\"fake\":true}", 13};
  struct rdzv_items vals = {1, &js, NULL, 0};
  struct kv *e;

  if (!s->conns[ci].hello) {
    on_hello(s, ci, m);
    return;
  }
  /* A SET of the key "drop" closes the connection, unapplied (a mutation
   * that kills every daemon it reaches). */
  if (m->type == RDZV_MSG_SET && m->keys.n == 1 && m->keys.raw_len == 4 + 4 &&
      memcmp(m->keys.raw + 4, "drop", 4) == 0) {
    conn_close(s, ci);
    return;
  }
  switch (m->type) {
  case RDZV_MSG_SET:
  case RDZV_MSG_MSET:
  case RDZV_MSG_APPEND:
    on_set_like(s, ci, m);
    break;
  case RDZV_MSG_GET:
    on_get(s, ci, m);
    break;
  case RDZV_MSG_WAIT:
    on_wait(s, ci, m);
    break;
  case RDZV_MSG_ADD:
    on_add(s, ci, m);
    break;
  case RDZV_MSG_CAS:
    on_cas(s, ci, m);
    break;
  case RDZV_MSG_DELETE:
    rdzv_items_get(&m->keys, 0, &k);
    e = kv_find(s, k);
    if (e != NULL)
      kv_del(s, e);
    reply(s, ci, m->type, m->req_id, 0, e != NULL, NULL, NULL);
    break;
  case RDZV_MSG_MGET:
    on_mget(s, ci, m);
    break;
  case RDZV_MSG_NKEYS:
    reply(s, ci, m->type, m->req_id, 0, s->nkv, NULL, NULL);
    break;
  case RDZV_MSG_BARRIER:
  case RDZV_MSG_GATHER:
    on_collective(s, ci, m);
    break;
  case RDZV_MSG_STATS:
    reply(s, ci, m->type, m->req_id, 0, 0, NULL, &vals);
    break;
  case RDZV_MSG_PING: /* a heartbeat, as rdzvd answers it */
    reply(s, ci, m->type, m->req_id, 0, 0, NULL, NULL);
    break;
  default:
    conn_close(s, ci);
  }
}

static void conn_readable(struct srv *s, int ci) {
  struct conn *c = &s->conns[ci];
  struct rdzv_msg m;
  size_t off = 0;
  size_t used;
  ssize_t n;
  int err;

  rdzv_buf_reserve(&c->in, 65536);
  n = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, 0);
  if (n <= 0) {
    conn_close(s, ci);
    return;
  }
  c->in.len += (size_t)n;
  for (;;) {
    err =
        rdzv_msg_decode(c->in.data + off, c->in.len - off, MAX_BODY, &m, &used);
    if (err == RDZV_ENEEDMORE)
      break;
    if (err < 0) {
      conn_close(s, ci);
      return;
    }
    off += used;
    handle(s, ci, &m);
    if (c->fd < 0)
      return;
  }
  rdzv_buf_consume(&c->in, off);
}

static void accept_one(struct srv *s, int lfd) {
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  int i;

  if (fd < 0)
    return;
  for (i = 0; i < MAX_CONNS && s->conns[i].fd >= 0; i++)
    ;
  if (i == MAX_CONNS) {
    close(fd);
    return;
  }
  s->conns[i].fd = fd;
  s->conns[i].hello = 0;
}

static int next_timeout(struct srv *s) {
  int64_t t = INT64_MAX;
  int64_t now = now_ms();
  int i;

  for (i = 0; i < MAX_WAITS; i++) {
    if (s->waits[i].used && s->waits[i].deadline < t)
      t = s->waits[i].deadline;
  }
  if (t == INT64_MAX)
    return -1;
  return t <= now ? 0 : (int)(t - now);
}

static void serve(struct srv *s, int ctl) {
  struct pollfd p[3 + MAX_CONNS];
  int idx[3 + MAX_CONNS];
  int n, i;

  for (;;) {
    p[0] = (struct pollfd){ctl, POLLIN, 0};
    p[1] = (struct pollfd){s->lfd[0], POLLIN, 0};
    p[2] = (struct pollfd){s->lfd[1], POLLIN, 0};
    n = 3;
    for (i = 0; i < MAX_CONNS; i++) {
      if (s->conns[i].fd >= 0) {
        idx[n] = i;
        p[n++] = (struct pollfd){s->conns[i].fd, POLLIN, 0};
      }
    }
    if (poll(p, (nfds_t)n, next_timeout(s)) < 0 && errno != EINTR)
      return;
    if (p[0].revents != 0)
      return;
    for (i = 1; i < 3; i++) {
      if (p[i].revents & POLLIN)
        accept_one(s, p[i].fd);
    }
    for (i = 3; i < n; i++) {
      if (p[i].revents != 0 && s->conns[idx[i]].fd == p[i].fd)
        conn_readable(s, idx[i]);
    }
    waits_check(s, now_ms());
  }
}

static int listen_tcp(int *port) {
  struct sockaddr_in sin;
  socklen_t len = sizeof(sin);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  memset(&sin, 0, sizeof(sin));
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
      listen(fd, 128) != 0 ||
      getsockname(fd, (struct sockaddr *)&sin, &len) != 0)
    _exit(3);
  *port = ntohs(sin.sin_port);
  return fd;
}

static int listen_unix(const char *path) {
  struct sockaddr_un sun;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  memset(&sun, 0, sizeof(sun));
  sun.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof(sun.sun_path))
    _exit(4);
  memcpy(sun.sun_path, path, strlen(path));
  if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0 ||
      listen(fd, 128) != 0)
    _exit(4);
  return fd;
}

static void child_main(const struct fake_server_opts *o, const char *path,
                       int ctl, int portw) {
  static struct srv s;
  struct timespec d = {0, 0};
  int port = 0;
  int i;

  if (o->delay_ms > 0)
    d = (struct timespec){o->delay_ms / 1000, (o->delay_ms % 1000) * 1000000L};
  s.o = o;
  for (i = 0; i < MAX_CONNS; i++)
    s.conns[i].fd = -1;
  signal(SIGPIPE, SIG_IGN);
  s.lfd[1] = listen_tcp(&port);
  if (write(portw, &port, sizeof(port)) != (ssize_t)sizeof(port))
    _exit(5);
  close(portw);
  if (o->delay_ms >= 0) {
    nanosleep(&d, NULL);
  } else if (read(ctl, &i, 1) != 1) {
    _exit(0);
  }
  s.lfd[0] = listen_unix(path);
  serve(&s, ctl);
  _exit(0);
}

int fake_server_start(struct fake_server *s, const struct fake_server_opts *o) {
  int ctl[2];
  int pp[2];
  int port = 0;

  memset(s, 0, sizeof(*s));
  snprintf(s->path, sizeof(s->path), "%s/fake.sock", o->dir);
  snprintf(s->unix_addr, sizeof(s->unix_addr), "unix:%s", s->path);
  if (pipe2(ctl, O_CLOEXEC) != 0)
    return -errno;
  if (pipe2(pp, O_CLOEXEC) != 0) {
    close(ctl[0]);
    close(ctl[1]);
    return -errno;
  }
  s->pid = fork();
  if (s->pid == 0) {
    close(ctl[1]);
    close(pp[0]);
    child_main(o, s->path, ctl[0], pp[1]);
  }
  close(ctl[0]);
  close(pp[1]);
  s->ctl = ctl[1];
  if (s->pid < 0 || read(pp[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
    close(pp[0]);
    fake_server_stop(s);
    return -EIO;
  }
  close(pp[0]);
  s->port = port;
  snprintf(s->tcp_addr, sizeof(s->tcp_addr), "tcp:127.0.0.1:%d", port);
  return 0;
}

void fake_server_go(struct fake_server *s) {
  if (write(s->ctl, "g", 1) != 1)
    perror("fake_server_go");
}

void fake_server_stop(struct fake_server *s) {
  if (s->ctl > 0)
    close(s->ctl);
  s->ctl = -1;
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
  }
  s->pid = 0;
  unlink(s->path);
}
