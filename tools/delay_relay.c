/* delay-relay: a user-space stand-in for netem's delay (this kernel has
 * none). It listens on a list of addresses and forwards every connection
 * accepted on one to that listener's target, both directions, holding
 * each chunk it reads for D microseconds before writing it on: the link
 * then has a round trip of 2*D plus what the relay itself adds.
 *
 *   delay-relay [--delay-us D] [--max-queued-kib K] [--pairs FILE]
 *               [--realtime] [LISTEN=TARGET ...]
 *
 * Addresses: unix:PATH, tcp:HOST:PORT or HOST:PORT (IPv4 or a name;
 * port 0 on a listener takes a free port). --pairs FILE reads one
 * LISTEN=TARGET a line (blank lines and lines starting with # skipped).
 * Defaults: --delay-us 0 (forward at once), --max-queued-kib 1024 (a
 * direction holding that much stops reading its source: backpressure, as
 * a full link would; the sender's socket buffer then fills). --realtime
 * asks for SCHED_FIFO priority 1 (root or CAP_SYS_NICE), so that on a busy
 * machine the relay wakes when a chunk is due rather than when the
 * scheduler gets to it; without the privilege it runs as usual.
 *
 * Each direction is a FIFO of chunks; all directions share one delay, so
 * one global FIFO of every held chunk is also in deadline order, and the
 * loop sleeps in epoll_pwait2 (nanosecond timeout, timer slack set to 1
 * ns) until its head is due. An end of stream is held like data (the FIN
 * arrives D late), a reset or error closes both sides at once. A target
 * that refuses the connection closes the accepted one (the client sees
 * what it would see of a dead peer).
 *
 * Lines on stdout: "ready ADDR..." once every listener listens (with the
 * ports taken), and on SIGUSR1 and at exit (SIGTERM, SIGINT) "stats
 * {json}": links accepted and open, connects that failed, chunks and
 * bytes forwarded, how late chunks were written past their due time
 * (p50/p99/max, microseconds: the relay's own precision), and the
 * process's CPU seconds. Exit status: 0 after a signal, 2 for a usage
 * error, 1 when a listener cannot be set up. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define RELAY_MAX_PAIRS 4096
#define RELAY_READ_BYTES 65536
#define RELAY_LATE_BUCKETS 10001 /* 0..9999 us, then "10 ms or more" */

enum ep_kind { EP_LISTENER, EP_SIDE, EP_SIGNAL };

struct endpoint {
  enum ep_kind kind;
  struct link *lk; /* EP_SIDE */
  int side;        /* EP_SIDE: 0 accepted, 1 target */
  int pair;        /* EP_LISTENER */
};

struct chunk {
  struct chunk *next;  /* in its direction */
  struct chunk *gnext; /* in the global FIFO */
  struct dir *dir;     /* NULL: its link is gone (still in the global FIFO) */
  uint64_t due_ns;
  uint32_t len, off;
  bool in_global; /* not due yet */
  bool fin;       /* the end of the stream, no data */
  bool timed;     /* its lateness is recorded */
  uint8_t data[];
};

struct dir { /* from side `from` to the other side */
  struct link *lk;
  int from;
  struct chunk *head, *tail;
  size_t queued; /* bytes held */
  bool eof;      /* the source ended: read no more */
  bool fin_sent; /* shutdown(SHUT_WR) done on the target side */
  bool to_flush; /* on the relay's flush list */
  struct dir *next_flush;
};

struct link {
  int fd[2];
  struct endpoint ep[2];
  uint32_t events[2]; /* registered with epoll */
  struct dir d[2];    /* d[s]: from side s to side 1-s */
  bool connecting;    /* side 1 not connected yet */
  bool gone[2];       /* that side's peer closed both ways: off epoll */
  bool dead;
  struct link *next_dead;
  struct link *prev, *next; /* every live link (freed at exit) */
};

struct pair {
  char listen[256], target[256];
  int fd;
  struct endpoint ep;
};

struct relay {
  int ep;
  uint64_t delay_ns;
  size_t max_queued;
  bool realtime; /* --realtime: SCHED_FIFO if allowed */
  bool rt;       /* ... and it was */
  struct pair *pairs;
  int npairs;
  struct chunk *ghead, *gtail;
  struct link *dead;
  struct link *links; /* live ones */
  struct dir *flush;  /* directions with chunks that just came due */
  uint8_t buf[RELAY_READ_BYTES];
  /* statistics */
  uint64_t accepted, open, connect_failed, chunks, bytes;
  uint64_t late[RELAY_LATE_BUCKETS];
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- addresses ---------------------------------------------------------- */

/* Fills *ss from "unix:PATH", "tcp:HOST:PORT" or "HOST:PORT". Returns 0,
 * or -1 with a reason in err. */
static int parse_addr(const char *a, struct sockaddr_storage *ss,
                      socklen_t *len, char *err, size_t errn) {
  memset(ss, 0, sizeof(*ss));
  if (strncmp(a, "unix:", 5) == 0) {
    struct sockaddr_un *un = (struct sockaddr_un *)ss;
    size_t n = strlen(a + 5);
    if (n == 0 || n >= sizeof(un->sun_path)) {
      snprintf(err, errn, "'%s': a Unix path of 1..%zu bytes", a,
               sizeof(un->sun_path) - 1);
      return -1;
    }
    un->sun_family = AF_UNIX;
    memcpy(un->sun_path, a + 5, n + 1);
    *len = (socklen_t)sizeof(*un);
    return 0;
  }
  const char *hp = strncmp(a, "tcp:", 4) == 0 ? a + 4 : a;
  const char *colon = strrchr(hp, ':');
  char host[200];
  if (colon == NULL || colon == hp || (size_t)(colon - hp) >= sizeof(host) ||
      colon[1] == '\0') {
    snprintf(err, errn, "'%s': not unix:PATH, tcp:HOST:PORT or HOST:PORT", a);
    return -1;
  }
  memcpy(host, hp, (size_t)(colon - hp));
  host[colon - hp] = '\0';
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(host, colon + 1, &hints, &res);
  if (rc != 0 || res == NULL) {
    snprintf(err, errn, "'%s': %s", a, gai_strerror(rc));
    return -1;
  }
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

static void set_nodelay(int fd, const struct sockaddr_storage *ss) {
  int one = 1;
  if (ss->ss_family == AF_INET)
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- epoll interest ----------------------------------------------------- */

/* Registers side s of lk for what it needs now: reading while its
 * outgoing direction may take more, writing while the other direction
 * has due bytes blocked (or the target is connecting). */
static void update_events(struct relay *r, struct link *lk, int s) {
  if (lk->dead || lk->fd[s] < 0 || lk->gone[s])
    return;
  const struct dir *out = &lk->d[s], *in = &lk->d[1 - s];
  uint32_t ev = 0;
  bool connecting = s == 1 && lk->connecting;
  if (!out->eof && out->queued < r->max_queued && !connecting)
    ev |= EPOLLIN;
  if (connecting || (in->head != NULL && !in->head->in_global))
    ev |= EPOLLOUT;
  if (ev == lk->events[s])
    return;
  struct epoll_event e = {.events = ev, .data.ptr = &lk->ep[s]};
  epoll_ctl(r->ep, EPOLL_CTL_MOD, lk->fd[s], &e);
  lk->events[s] = ev;
}

/* ---- links -------------------------------------------------------------- */

static void chunk_free_from_dir(struct dir *d) {
  struct chunk *c = d->head;
  while (c != NULL) {
    struct chunk *n = c->next;
    if (c->in_global)
      c->dir = NULL; /* the global FIFO frees it when it comes due */
    else
      free(c);
    c = n;
  }
  d->head = d->tail = NULL;
  d->queued = 0;
}

/* Closes both sides of lk; its memory goes at the end of the loop pass
 * (events of this pass may still name it). */
static void link_kill(struct relay *r, struct link *lk) {
  if (lk->dead)
    return;
  lk->dead = true;
  for (int s = 0; s < 2; s++) {
    if (lk->fd[s] >= 0)
      close(lk->fd[s]);
    lk->fd[s] = -1;
    chunk_free_from_dir(&lk->d[s]);
  }
  r->open--;
  if (lk->prev != NULL)
    lk->prev->next = lk->next;
  else
    r->links = lk->next;
  if (lk->next != NULL)
    lk->next->prev = lk->prev;
  lk->next_dead = r->dead;
  r->dead = lk;
}

static void record_late(struct relay *r, uint64_t now, uint64_t due) {
  uint64_t us = now > due ? (now - due) / 1000 : 0;
  r->late[us < RELAY_LATE_BUCKETS - 1 ? us : RELAY_LATE_BUCKETS - 1]++;
}

/* Writes the due prefix of direction d (chunks out of the global FIFO)
 * to its target side; a FIN chunk shuts the target's write side. */
static void dir_flush(struct relay *r, struct dir *d) {
  struct link *lk = d->lk;
  int to = 1 - d->from;
  if (lk->dead || (to == 1 && lk->connecting))
    return;
  if (lk->gone[to]) {
    chunk_free_from_dir(d);
    return;
  }
  while (d->head != NULL && !d->head->in_global) {
    struct iovec iov[64];
    int n = 0;
    uint64_t now = now_ns();
    for (struct chunk *c = d->head;
         c != NULL && !c->in_global && !c->fin && n < 64; c = c->next) {
      if (!c->timed) {
        c->timed = true;
        record_late(r, now, c->due_ns);
      }
      iov[n].iov_base = c->data + c->off;
      iov[n].iov_len = c->len - c->off;
      n++;
    }
    if (n == 0) { /* the head is a FIN */
      struct chunk *c = d->head;
      d->head = c->next;
      if (d->head == NULL)
        d->tail = NULL;
      free(c);
      shutdown(lk->fd[to], SHUT_WR);
      d->fin_sent = true;
      if ((lk->d[0].fin_sent && lk->d[1].fin_sent) || lk->gone[d->from]) {
        link_kill(r, lk);
        return;
      }
      continue;
    }
    ssize_t w = writev(lk->fd[to], iov, n);
    if (w < 0 && (errno == EAGAIN || errno == EINTR))
      break;
    if (w < 0) {
      link_kill(r, lk);
      return;
    }
    size_t left = (size_t)w;
    while (left > 0 && d->head != NULL) {
      struct chunk *c = d->head;
      size_t take = c->len - c->off < left ? c->len - c->off : left;
      c->off += (uint32_t)take;
      left -= take;
      d->queued -= take;
      r->bytes += take;
      if (c->off == c->len) {
        d->head = c->next;
        if (d->head == NULL)
          d->tail = NULL;
        r->chunks++;
        free(c);
      }
    }
  }
  update_events(r, lk, to);
  update_events(r, lk, d->from);
}

static void dir_push(struct relay *r, struct dir *d, struct chunk *c) {
  c->dir = d;
  c->next = NULL;
  if (d->tail != NULL)
    d->tail->next = c;
  else
    d->head = c;
  d->tail = c;
  d->queued += c->len;
  if (r->delay_ns == 0) {
    c->in_global = false;
    return;
  }
  c->in_global = true;
  c->gnext = NULL;
  if (r->gtail != NULL)
    r->gtail->gnext = c;
  else
    r->ghead = c;
  r->gtail = c;
}

static struct chunk *chunk_new(const uint8_t *p, size_t n, uint64_t due,
                               bool fin) {
  struct chunk *c = malloc(sizeof(*c) + n);
  if (c == NULL)
    return NULL;
  memset(c, 0, sizeof(*c));
  c->len = (uint32_t)n;
  c->due_ns = due;
  c->fin = fin;
  if (n > 0)
    memcpy(c->data, p, n);
  return c;
}

/* Side s is readable: read what is there (up to the queue limit), each
 * read a chunk due D from now. */
static void side_read(struct relay *r, struct link *lk, int s) {
  struct dir *d = &lk->d[s];
  for (int i = 0; i < 16 && !d->eof && d->queued < r->max_queued; i++) {
    ssize_t n = read(lk->fd[s], r->buf, sizeof(r->buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      break;
    if (n < 0) {
      link_kill(r, lk);
      return;
    }
    struct chunk *c =
        chunk_new(r->buf, (size_t)n, now_ns() + r->delay_ns, n == 0);
    if (c == NULL) {
      link_kill(r, lk);
      return;
    }
    if (n == 0)
      d->eof = true;
    dir_push(r, d, c);
    if ((size_t)n < sizeof(r->buf))
      break;
  }
  if (r->delay_ns == 0)
    dir_flush(r, d);
  if (!lk->dead)
    update_events(r, lk, s);
}

/* Side s's peer closed both ways (level-triggered EPOLLHUP would repeat):
 * it leaves epoll; what was held for it is dropped, and nothing more is
 * read for it. What it sent before still goes on, its FIN last. */
static void side_gone(struct relay *r, struct link *lk, int s) {
  if (lk->gone[s])
    return;
  lk->gone[s] = true;
  epoll_ctl(r->ep, EPOLL_CTL_DEL, lk->fd[s], NULL);
  chunk_free_from_dir(&lk->d[1 - s]);
  lk->d[1 - s].eof = true;
  if (lk->gone[1 - s] || lk->d[s].fin_sent)
    link_kill(r, lk);
  else
    update_events(r, lk, 1 - s);
}

static void side_ready(struct relay *r, struct link *lk, int s, uint32_t ev) {
  if (s == 1 && lk->connecting) {
    int err = 0;
    socklen_t l = sizeof(err);
    getsockopt(lk->fd[1], SOL_SOCKET, SO_ERROR, &err, &l);
    if (err != 0) {
      r->connect_failed++;
      link_kill(r, lk);
      return;
    }
    lk->connecting = false;
    dir_flush(r, &lk->d[0]);
    if (!lk->dead)
      update_events(r, lk, 1);
    return;
  }
  if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR))
    side_read(r, lk, s);
  if (!lk->dead && (ev & (EPOLLHUP | EPOLLERR)) && lk->d[s].eof)
    side_gone(r, lk, s);
  if (!lk->dead && (ev & EPOLLOUT))
    dir_flush(r, &lk->d[1 - s]);
}

static void accept_all(struct relay *r, struct pair *p) {
  for (;;) {
    int fd = accept4(p->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return; /* EAGAIN, or out of files: the client's connect waits */
    struct sockaddr_storage ss;
    socklen_t sl;
    char err[300];
    struct link *lk = calloc(1, sizeof(*lk));
    int tfd = -1;
    if (lk == NULL || parse_addr(p->target, &ss, &sl, err, sizeof(err)) < 0 ||
        (tfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      0)) < 0) {
      free(lk);
      close(fd);
      r->connect_failed++;
      continue;
    }
    set_nodelay(fd, &ss);
    set_nodelay(tfd, &ss);
    int rc = connect(tfd, (struct sockaddr *)&ss, sl);
    if (rc < 0 && errno != EINPROGRESS) {
      close(tfd);
      close(fd);
      free(lk);
      r->connect_failed++;
      continue;
    }
    r->accepted++;
    r->open++;
    lk->next = r->links;
    if (r->links != NULL)
      r->links->prev = lk;
    r->links = lk;
    lk->fd[0] = fd;
    lk->fd[1] = tfd;
    lk->connecting = rc < 0;
    for (int s = 0; s < 2; s++) {
      lk->ep[s] = (struct endpoint){.kind = EP_SIDE, .lk = lk, .side = s};
      lk->d[s].lk = lk;
      lk->d[s].from = s;
      struct epoll_event e = {.events = 0, .data.ptr = &lk->ep[s]};
      epoll_ctl(r->ep, EPOLL_CTL_ADD, lk->fd[s], &e);
      lk->events[s] = 0;
    }
    update_events(r, lk, 0);
    update_events(r, lk, 1);
  }
}

/* ---- timers ------------------------------------------------------------- */

/* Moves every due chunk out of the global FIFO and writes its direction. */
static void release_due(struct relay *r) {
  uint64_t now = now_ns();
  while (r->ghead != NULL && r->ghead->due_ns <= now) {
    struct chunk *c = r->ghead;
    r->ghead = c->gnext;
    if (r->ghead == NULL)
      r->gtail = NULL;
    c->in_global = false;
    if (c->dir == NULL) {
      free(c);
      continue;
    }
    if (!c->dir->to_flush) {
      c->dir->to_flush = true;
      c->dir->next_flush = r->flush;
      r->flush = c->dir;
    }
  }
  /* One write per direction for all its chunks that came due. */
  while (r->flush != NULL) {
    struct dir *d = r->flush;
    r->flush = d->next_flush;
    d->to_flush = false;
    dir_flush(r, d);
  }
}

/* ---- statistics --------------------------------------------------------- */

static uint64_t late_pct(const struct relay *r, double q) {
  uint64_t total = 0;
  for (int i = 0; i < RELAY_LATE_BUCKETS; i++)
    total += r->late[i];
  if (total == 0)
    return 0;
  uint64_t want = (uint64_t)((double)(total - 1) * q) + 1, seen = 0;
  for (int i = 0; i < RELAY_LATE_BUCKETS; i++) {
    seen += r->late[i];
    if (seen >= want)
      return (uint64_t)i;
  }
  return RELAY_LATE_BUCKETS - 1;
}

static void print_stats(const struct relay *r) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  uint64_t maxl = 0;
  for (int i = 0; i < RELAY_LATE_BUCKETS; i++)
    if (r->late[i] != 0)
      maxl = (uint64_t)i;
  printf("stats {\"delay_us\":%llu,\"accepted\":%llu,\"open\":%llu,"
         "\"connect_failed\":%llu,\"chunks\":%llu,\"bytes\":%llu,"
         "\"late_p50_us\":%llu,\"late_p99_us\":%llu,\"late_max_us\":%llu,"
         "\"cpu_s\":%.3f,\"realtime\":%s}\n",
         (unsigned long long)(r->delay_ns / 1000),
         (unsigned long long)r->accepted, (unsigned long long)r->open,
         (unsigned long long)r->connect_failed, (unsigned long long)r->chunks,
         (unsigned long long)r->bytes, (unsigned long long)late_pct(r, 0.5),
         (unsigned long long)late_pct(r, 0.99), (unsigned long long)maxl, cpu,
         r->rt ? "true" : "false");
  fflush(stdout);
}

/* ---- set-up ------------------------------------------------------------- */

static int add_pair(struct relay *r, const char *spec) {
  const char *eq = strchr(spec, '=');
  if (r->npairs == RELAY_MAX_PAIRS) {
    fprintf(stderr, "delay-relay: more than %d pairs\n", RELAY_MAX_PAIRS);
    return -1;
  }
  if (eq == NULL || eq == spec || eq[1] == '\0' ||
      (size_t)(eq - spec) >= sizeof(r->pairs[0].listen) ||
      strlen(eq + 1) >= sizeof(r->pairs[0].target)) {
    fprintf(stderr, "delay-relay: '%s' is not LISTEN=TARGET\n", spec);
    return -1;
  }
  struct pair *p = &r->pairs[r->npairs++];
  memcpy(p->listen, spec, (size_t)(eq - spec));
  p->listen[eq - spec] = '\0';
  snprintf(p->target, sizeof(p->target), "%s", eq + 1);
  p->fd = -1;
  return 0;
}

static int read_pairs(struct relay *r, const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "delay-relay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  char line[600];
  int rc = 0;
  while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0] != '\0' && line[0] != '#')
      rc = add_pair(r, line);
  }
  fclose(f);
  return rc;
}

/* Binds and listens on every pair's listen address. */
static int listen_all(struct relay *r) {
  for (int i = 0; i < r->npairs; i++) {
    struct pair *p = &r->pairs[i];
    struct sockaddr_storage ss, tss;
    socklen_t sl, tsl;
    char err[300];
    if (parse_addr(p->listen, &ss, &sl, err, sizeof(err)) < 0 ||
        parse_addr(p->target, &tss, &tsl, err, sizeof(err)) < 0) {
      fprintf(stderr, "delay-relay: %s\n", err);
      return -1;
    }
    p->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (p->fd >= 0 && ss.ss_family == AF_INET)
      setsockopt(p->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ss.ss_family == AF_UNIX)
      unlink(((struct sockaddr_un *)&ss)->sun_path);
    if (p->fd < 0 || bind(p->fd, (struct sockaddr *)&ss, sl) < 0 ||
        listen(p->fd, 1024) < 0) {
      fprintf(stderr, "delay-relay: cannot listen on %s: %s\n", p->listen,
              strerror(errno));
      return -1;
    }
    if (ss.ss_family == AF_INET) { /* port 0: say which one it took */
      struct sockaddr_in in;
      socklen_t il = sizeof(in);
      getsockname(p->fd, (struct sockaddr *)&in, &il);
      char *colon = strrchr(p->listen, ':');
      snprintf(colon + 1, sizeof(p->listen) - (size_t)(colon + 1 - p->listen),
               "%u", (unsigned)ntohs(in.sin_port));
    }
    p->ep = (struct endpoint){.kind = EP_LISTENER, .pair = i};
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &p->ep};
    epoll_ctl(r->ep, EPOLL_CTL_ADD, p->fd, &e);
  }
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: delay-relay [--delay-us D] [--max-queued-kib K] "
                  "[--pairs FILE] [--realtime] [LISTEN=TARGET ...]\n"
                  "  addresses: unix:PATH, tcp:HOST:PORT or HOST:PORT\n"
                  "  defaults: --delay-us 0 --max-queued-kib 1024\n");
}

static int parse_args(struct relay *r, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i];
    if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0)
      return 1;
    if (strncmp(k, "--", 2) != 0) {
      if (add_pair(r, k) < 0)
        return -1;
      continue;
    }
    if (strcmp(k, "--realtime") == 0) { /* the one option without value */
      r->realtime = true;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "delay-relay: %s needs a value\n", k);
      return -1;
    }
    const char *v = argv[++i];
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 10);
    bool num = end != v && *end == '\0' && v[0] != '-';
    if (strcmp(k, "--delay-us") == 0 && num && x <= 10000000ull) {
      r->delay_ns = x * 1000;
    } else if (strcmp(k, "--max-queued-kib") == 0 && num && x >= 1 &&
               x <= 1048576ull) {
      r->max_queued = (size_t)x * 1024;
    } else if (strcmp(k, "--pairs") == 0) {
      if (read_pairs(r, v) < 0)
        return -1;
    } else {
      fprintf(stderr, "delay-relay: bad option or value: %s %s\n", k, v);
      return -1;
    }
  }
  if (r->npairs == 0) {
    fprintf(stderr, "delay-relay: no LISTEN=TARGET pair given\n");
    return -1;
  }
  return 0;
}

static int signal_fd(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, NULL);
  return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

/* The wait until the global FIFO's head is due (NULL: none held). */
static struct timespec *head_timeout(const struct relay *r,
                                     struct timespec *ts) {
  if (r->ghead == NULL)
    return NULL;
  uint64_t now = now_ns(), due = r->ghead->due_ns;
  uint64_t left = due > now ? due - now : 0;
  ts->tv_sec = (time_t)(left / 1000000000u);
  ts->tv_nsec = (long)(left % 1000000000u);
  return ts;
}

static bool on_signal(struct relay *r, int sfd) {
  struct signalfd_siginfo si;
  bool stop = false;
  while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    print_stats(r);
    if (si.ssi_signo != SIGUSR1)
      stop = true;
  }
  return stop;
}

int main(int argc, char **argv) {
  static struct relay r;
  r.max_queued = 1024 * 1024;
  r.pairs = calloc(RELAY_MAX_PAIRS, sizeof(*r.pairs));
  if (r.pairs == NULL)
    return 1;
  int rc = parse_args(&r, argc, argv);
  if (rc != 0) {
    usage();
    return rc > 0 ? 0 : 2;
  }
  signal(SIGPIPE, SIG_IGN);
  /* The sleep until the next chunk is due must not be rounded up by the
   * default 50 us of timer slack. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  /* A wire is not scheduled: with --realtime the relay runs before the
   * daemons it carries for, so a busy machine delays chunks by little
   * more than D (without the privilege, it says so and goes on). */
  int rt = 0;
  if (r.realtime) {
    struct sched_param sp = {.sched_priority = 1};
    rt = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
    r.rt = rt;
    if (!rt)
      fprintf(stderr,
              "delay-relay: --realtime: %s; running as a normal "
              "process\n",
              strerror(errno));
  }
  r.ep = epoll_create1(EPOLL_CLOEXEC);
  int sfd = signal_fd();
  if (r.ep < 0 || sfd < 0 || listen_all(&r) < 0)
    return 1;
  struct endpoint sig_ep = {.kind = EP_SIGNAL};
  struct epoll_event se = {.events = EPOLLIN, .data.ptr = &sig_ep};
  epoll_ctl(r.ep, EPOLL_CTL_ADD, sfd, &se);
  printf("ready");
  for (int i = 0; i < r.npairs; i++)
    printf(" %s", r.pairs[i].listen);
  printf("\n");
  fflush(stdout);
  struct epoll_event evs[256];
  bool stop = false;
  while (!stop) {
    struct timespec ts;
    int n = epoll_pwait2(r.ep, evs, 256, head_timeout(&r, &ts), NULL);
    if (n < 0 && errno != EINTR)
      break;
    for (int i = 0; i < n; i++) {
      struct endpoint *e = evs[i].data.ptr;
      if (e->kind == EP_LISTENER)
        accept_all(&r, &r.pairs[e->pair]);
      else if (e->kind == EP_SIGNAL)
        stop = on_signal(&r, sfd) || stop;
      else if (!e->lk->dead)
        side_ready(&r, e->lk, e->side, evs[i].events);
    }
    release_due(&r);
    while (r.dead != NULL) {
      struct link *lk = r.dead;
      r.dead = lk->next_dead;
      free(lk);
    }
  }
  /* Everything goes: open links, held chunks, listeners. */
  while (r.links != NULL)
    link_kill(&r, r.links);
  /* What is still in the global FIFO belongs to killed links now. */
  while (r.ghead != NULL) {
    struct chunk *c = r.ghead;
    r.ghead = c->gnext;
    free(c);
  }
  while (r.dead != NULL) {
    struct link *lk = r.dead;
    r.dead = lk->next_dead;
    free(lk);
  }
  for (int i = 0; i < r.npairs; i++) {
    if (r.pairs[i].fd >= 0)
      close(r.pairs[i].fd);
    if (strncmp(r.pairs[i].listen, "unix:", 5) == 0)
      unlink(r.pairs[i].listen + 5);
  }
  free(r.pairs);
  close(sfd);
  close(r.ep);
  return 0;
}
