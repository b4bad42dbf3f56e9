/* delay-relay's links (delay_relay.c says what the relay does): the
 * addresses, each link's two sides on epoll, its two directions' FIFOs of
 * held chunks, and the global FIFO that releases them when due. It owns
 * the forwarding; it calls only libc (delay_relay_int.h for the state). */
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
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tools/delay_relay_int.h"

uint64_t relay_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- addresses ---------------------------------------------------------- */

/* Fills *ss from "unix:PATH", "tcp:HOST:PORT" or "HOST:PORT". Returns 0,
 * or -1 with a reason in err. */
int relay_parse_addr(const char *a, struct sockaddr_storage *ss, socklen_t *len,
                     char *err, size_t errn) {
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
void relay_link_kill(struct relay *r, struct link *lk) {
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
    uint64_t now = relay_now_ns();
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
        relay_link_kill(r, lk);
        return;
      }
      continue;
    }
    ssize_t w = writev(lk->fd[to], iov, n);
    if (w < 0 && (errno == EAGAIN || errno == EINTR))
      break;
    if (w < 0) {
      relay_link_kill(r, lk);
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
      relay_link_kill(r, lk);
      return;
    }
    struct chunk *c =
        chunk_new(r->buf, (size_t)n, relay_now_ns() + r->delay_ns, n == 0);
    if (c == NULL) {
      relay_link_kill(r, lk);
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
    relay_link_kill(r, lk);
  else
    update_events(r, lk, 1 - s);
}

void relay_side_ready(struct relay *r, struct link *lk, int s, uint32_t ev) {
  if (s == 1 && lk->connecting) {
    int err = 0;
    socklen_t l = sizeof(err);
    getsockopt(lk->fd[1], SOL_SOCKET, SO_ERROR, &err, &l);
    if (err != 0) {
      r->connect_failed++;
      relay_link_kill(r, lk);
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

void relay_accept_all(struct relay *r, struct pair *p) {
  for (;;) {
    int fd = accept4(p->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return; /* EAGAIN, or out of files: the client's connect waits */
    struct sockaddr_storage ss;
    socklen_t sl;
    char err[300];
    struct link *lk = calloc(1, sizeof(*lk));
    int tfd = -1;
    if (lk == NULL ||
        relay_parse_addr(p->target, &ss, &sl, err, sizeof(err)) < 0 ||
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
void relay_release_due(struct relay *r) {
  uint64_t now = relay_now_ns();
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
