/* rdzv-socket-floor's tree (socket_floor.c says what it measures): the
 * hosts in preorder blocks over O.procs processes and the root's, each
 * process's links (a Unix socket from a host to its parent's process,
 * named in the abstract namespace), the frames of the four rounds up and
 * down them on one epoll loop a process, and the run: the processes
 * forked, their counts summed, the floor's line printed. It calls only
 * libc and socket_floor.c's helpers (socket_floor_int.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* accept4 */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench/socket_floor_int.h"

/* One end of a link: the upstream of a host here (child side) or the
 * accepted end of a child host's link (parent side). */
struct link {
  int fd;
  int64_t host; /* the host at the far end (parent side), or this host */
  bool up;      /* this is host's upstream */
  uint8_t *buf; /* unparsed input */
  size_t len, cap;
  uint8_t *out; /* what the socket did not take yet: out[ooff..olen) */
  size_t ooff, olen, ocap;
};

struct host {
  int64_t below;       /* hosts in this subtree, itself included */
  int round;           /* the round it is in */
  int64_t children_in; /* children whose up frame of round has come */
  int64_t nchildren;
  struct link *upl;    /* its upstream (a host of this process) */
  struct link **child; /* its children's links, by child index */
};

struct opts O = {12500, 16, 16, 782 * 136, 8};
static int64_t first_of(int64_t h) { return O.fanout * h + 1; }
static int64_t nchildren_of(int64_t h) {
  int64_t f = first_of(h);
  if (f >= O.hosts)
    return 0;
  return f + O.fanout <= O.hosts ? O.fanout : O.hosts - f;
}

/* Preorder position of every host, and each process's first position. */
static int64_t *pos_of, *below_of;
static int proc_of_host(int64_t h) {
  int64_t per = (O.hosts + O.procs - 1) / O.procs;
  return 1 + (int)(pos_of[h] / per);
}

static void order_hosts(void) {
  pos_of = malloc((size_t)O.hosts * sizeof(*pos_of));
  below_of = malloc((size_t)O.hosts * sizeof(*below_of));
  int64_t *stack = malloc((size_t)O.hosts * sizeof(*stack));
  if (pos_of == NULL || below_of == NULL || stack == NULL)
    floor_die("malloc");
  int64_t sp = 0, k = 0;
  stack[sp++] = 0;
  while (sp > 0) {
    int64_t h = stack[--sp];
    pos_of[h] = k++;
    for (int64_t c = nchildren_of(h) - 1; c >= 0; c--)
      stack[sp++] = first_of(h) + c;
  }
  for (int64_t h = O.hosts - 1; h >= 0; h--) {
    below_of[h] = 1;
    for (int64_t c = 0; c < nchildren_of(h); c++)
      below_of[h] += below_of[first_of(h) + c];
  }
  free(stack);
}

/* Process p's listener: a name in Linux's abstract socket namespace (a
 * leading NUL), so that nothing is left in the file system however the
 * run ends. */
static pid_t run_id;
static void sock_path(int p, struct sockaddr_un *a) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "rdzv-floor-%d-p%d",
           (int)run_id, p);
}

static uint8_t *payload;
static uint64_t *shared; /* each process's bytes and frames sent */
static uint64_t bytes_sent, frames_sent;

static int ep;
static void watch_mod(struct link *l, uint32_t events) {
  struct epoll_event ev = {.events = events, .data.ptr = l};
  if (epoll_ctl(ep, EPOLL_CTL_MOD, l->fd, &ev) < 0)
    floor_die("epoll_ctl");
}

/* Writes buf[0..n) to fd until done or the socket is full; returns the
 * bytes written. */
static size_t write_some(int fd, const uint8_t *buf, size_t n) {
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, buf + off, n - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && errno == EAGAIN)
      break;
    if (w < 0)
      floor_die("write");
    off += (size_t)w;
  }
  return off;
}

/* Writes out what l holds, as far as the socket takes it (from an offset:
 * a big frame is not moved down after each partial write). */
static void flush_link(struct link *l) {
  l->ooff += write_some(l->fd, l->out + l->ooff, l->olen - l->ooff);
  if (l->ooff == l->olen) {
    l->ooff = l->olen = 0;
    watch_mod(l, EPOLLIN);
  }
}

/* One frame (header and body) with one write(2); what the socket cannot
 * take now waits in the link's output for EPOLLOUT. */
static void send_frame(struct link *l, int round, size_t n) {
  uint32_t hdr[2] = {(uint32_t)n, (uint32_t)round};
  memcpy(payload, hdr, sizeof(hdr));
  size_t total = n + 8, off = 0;
  bytes_sent += total;
  frames_sent++;
  if (l->olen == 0) {
    off = write_some(l->fd, payload, total);
    if (off == total)
      return;
  }
  if (l->ooff > 0) { /* compact before appending */
    memmove(l->out, l->out + l->ooff, l->olen - l->ooff);
    l->olen -= l->ooff;
    l->ooff = 0;
  }
  if (l->ocap < l->olen + total - off) {
    l->ocap = l->olen + total - off;
    l->out = realloc(l->out, l->ocap);
    if (l->out == NULL)
      floor_die("realloc");
  }
  memcpy(l->out + l->olen, payload + off, total - off);
  l->olen += total - off;
  watch_mod(l, EPOLLIN | EPOLLOUT);
}

size_t floor_up_bytes(int round, int64_t below) {
  return round == 0 ? (size_t)(48 * O.rph * below) : 64;
}
static size_t down_bytes(int round, int64_t below) {
  switch (round) {
  case 0:
    return (size_t)(32 * O.rph * below);
  case 1:
    return (size_t)O.table;
  case 2:
    return 128;
  default:
    return 64;
  }
}

static struct host *H; /* this process's hosts, by host id (sparse) */
static int64_t done_hosts, my_hosts;

/* Host h is ready for round r once the round's answer came down (or, for
 * round 0, at the start) and its children's up frames have all come. */
static void maybe_up(int64_t h) {
  struct host *x = &H[h];
  if (x->round < ROUNDS && x->children_in == x->nchildren &&
      x->children_in >= 0) {
    x->children_in = -1; /* sent: waiting for the answer */
    send_frame(x->upl, x->round, floor_up_bytes(x->round, x->below));
  }
}

static void on_down(int64_t h, int round) {
  struct host *x = &H[h];
  for (int64_t c = 0; c < x->nchildren; c++)
    send_frame(x->child[c], round,
               down_bytes(round, below_of[first_of(h) + c]));
  x->round = round + 1;
  x->children_in = 0;
  if (x->round == ROUNDS)
    done_hosts++;
  else
    maybe_up(h);
}

static void watch(struct link *l) {
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, l->fd, &ev) < 0)
    floor_die("epoll_ctl");
}

static int lfd_self = -1; /* this process's listener */
static void accept_links(void);

/* A connected Unix socket to process p's listener. The connect does not
 * block: while p's backlog is full (p may be this process, or one that is
 * itself waiting on ours), this process takes its own pending links, then
 * tries again. */
static int connect_to(int p) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    floor_die("socket");
  struct sockaddr_un a;
  sock_path(p, &a);
  double give_up = floor_now_s() + 60;
  while (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
    if (errno != EAGAIN && errno != EINTR)
      floor_die("connect");
    if (floor_now_s() > give_up) {
      fprintf(stderr,
              "rdzv-socket-floor: no room in process %d's listen "
              "backlog for 60 s\n",
              p);
      exit(1);
    }
    accept_links();
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return fd;
}

/* The frames of buf[0..len) for l; returns the bytes of whole frames. */
static size_t parse(struct link *l, const uint8_t *buf, size_t len, int me,
                    int64_t *root_rounds) {
  size_t off = 0;
  while (len - off >= 8) {
    uint32_t hdr[2];
    memcpy(hdr, buf + off, sizeof(hdr));
    if (len - off < 8 + (size_t)hdr[0])
      break;
    off += 8 + hdr[0];
    int round = (int)hdr[1];
    if (l->up) {
      on_down(l->host, round);
    } else if (me == 0) { /* the root: host 0 sent up; answer down */
      send_frame(l, round, down_bytes(round, O.hosts));
      (*root_rounds)++;
    } else {
      int64_t parent = (l->host - 1) / O.fanout;
      H[parent].children_in++;
      maybe_up(parent);
    }
  }
  return off;
}

/* One read of l: into the process's scratch buffer when l holds no part
 * of a frame, else into l's own buffer (grown to the frame); what is left
 * of a frame is kept in l's buffer, which is freed when empty. Returns
 * false when the link failed. */
static uint8_t *scratch;
static size_t scratch_cap;
static bool read_link(struct link *l, int me, int64_t *root_rounds) {
  uint8_t *dst;
  size_t room;
  if (l->len == 0) {
    dst = scratch;
    room = scratch_cap;
  } else {
    uint32_t need = 0;
    if (l->len >= 4)
      memcpy(&need, l->buf, 4);
    size_t want = l->len >= 4 ? 8 + (size_t)need : 8;
    if (want < l->len + 4096)
      want = l->len + 4096;
    if (l->cap < want) {
      l->buf = realloc(l->buf, want);
      if (l->buf == NULL)
        floor_die("realloc");
      l->cap = want;
    }
    dst = l->buf + l->len;
    room = l->cap - l->len;
  }
  ssize_t n = read(l->fd, dst, room);
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return true;
  if (n == 0) { /* the far end is done (its last frames were read) */
    epoll_ctl(ep, EPOLL_CTL_DEL, l->fd, NULL);
    close(l->fd);
    l->fd = -1;
    return !l->up || H[l->host].round == ROUNDS;
  }
  if (n < 0)
    return false;
  if (dst == scratch) {
    size_t used = parse(l, scratch, (size_t)n, me, root_rounds);
    if (used < (size_t)n) {
      l->cap = (size_t)n - used;
      l->buf = malloc(l->cap);
      if (l->buf == NULL)
        floor_die("malloc");
      memcpy(l->buf, scratch + used, (size_t)n - used);
      l->len = (size_t)n - used;
    }
    return true;
  }
  l->len += (size_t)n;
  size_t used = parse(l, l->buf, l->len, me, root_rounds);
  memmove(l->buf, l->buf + used, l->len - used);
  l->len -= used;
  if (l->len == 0) {
    free(l->buf);
    l->buf = NULL;
    l->cap = 0;
  }
  return true;
}

/* Takes every pending link on this process's listener, with its hello
 * (the child host's id; its sender wrote it right after connecting). */
static void accept_links(void) {
  int fd;
  while ((fd = accept4(lfd_self, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
    uint8_t hello[16];
    size_t got = 0;
    while (got < sizeof(hello)) {
      ssize_t r = read(fd, hello + got, sizeof(hello) - got);
      if (r <= 0)
        floor_die("read hello");
      got += (size_t)r;
    }
    int64_t child;
    memcpy(&child, hello + 8, 8);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    struct link *c = calloc(1, sizeof(*c));
    if (c == NULL)
      floor_die("calloc");
    c->fd = fd;
    c->host = child;
    if (child > 0) {
      int64_t parent = (child - 1) / O.fanout;
      H[parent].child[child - first_of(parent)] = c;
    }
    watch(c);
  }
}

/* Every process's listening socket, made before the processes start so
 * that no connect waits for one. */
static int listeners[MAX_PROCS + 1];
static void make_listeners(void) {
  for (int p = 0; p <= O.procs; p++) {
    struct sockaddr_un a;
    sock_path(p, &a);
    listeners[p] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (listeners[p] < 0 ||
        bind(listeners[p], (struct sockaddr *)&a, sizeof(a)) < 0 ||
        listen(listeners[p], 4096) < 0)
      floor_die("listen");
  }
}

static int run_proc(int me) {
  for (int p = 0; p <= O.procs; p++)
    if (p != me)
      close(listeners[p]);
  int lfd = listeners[me];
  lfd_self = lfd;
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    floor_die("epoll_create1");
  double t_start = floor_now_s();
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  H = calloc((size_t)O.hosts, sizeof(*H));
  scratch_cap = 1 << 20;
  scratch = malloc(scratch_cap);
  if (H == NULL || scratch == NULL)
    floor_die("calloc");
  /* Connect every host of this process to its parent's process (host 0
   * to the root): the links open now, as a node's upstream opens for a
   * job. */
  for (int64_t h = 0; h < O.hosts && me != 0; h++) {
    if (proc_of_host(h) != me)
      continue;
    my_hosts++;
    struct host *x = &H[h];
    x->below = below_of[h];
    x->nchildren = nchildren_of(h);
    x->child = calloc((size_t)(x->nchildren + 1), sizeof(*x->child));
    x->upl = calloc(1, sizeof(*x->upl));
    if (x->child == NULL || x->upl == NULL)
      floor_die("calloc");
  }
  /* (Every host is set up first: links to them may be taken while this
   * process waits to connect.) */
  for (int64_t h = 0; h < O.hosts && me != 0; h++) {
    struct host *x = &H[h];
    if (x->upl == NULL)
      continue;
    int parent_proc = h == 0 ? 0 : proc_of_host((h - 1) / O.fanout);
    x->upl->fd = connect_to(parent_proc);
    x->upl->host = h;
    x->upl->up = true;
    uint64_t id = (uint64_t)h;
    uint8_t hello[16];
    uint32_t len = 8, round = 0;
    memcpy(hello, &len, 4);
    memcpy(hello + 4, &round, 4);
    memcpy(hello + 8, &id, 8);
    if (write(x->upl->fd, hello, sizeof(hello)) != (ssize_t)sizeof(hello))
      floor_die("write hello");
    fcntl(x->upl->fd, F_SETFL, O_NONBLOCK);
    watch(x->upl);
  }
  /* Leaves start at once; the others once their children's frames come. */
  for (int64_t h = 0; h < O.hosts && me != 0; h++)
    if (H[h].upl != NULL && H[h].nchildren == 0)
      maybe_up(h);
  int64_t root_rounds = 0;
  struct epoll_event evs[256];
  char who[32];
  snprintf(who, sizeof(who), "process %d", me);
  while (me == 0 ? root_rounds < ROUNDS : done_hosts < my_hosts) {
    int n = floor_wait_events(ep, evs, who);
    for (int i = 0; i < n; i++) {
      struct link *l = evs[i].data.ptr;
      if (l == NULL) { /* the listener */
        accept_links();
        continue;
      }
      if ((evs[i].events & EPOLLOUT) && l->fd >= 0)
        flush_link(l);
      if (!(evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) || l->fd < 0)
        continue;
      if (!read_link(l, me, &root_rounds)) {
        fprintf(stderr, "rdzv-socket-floor: process %d: a link closed\n", me);
        return 1;
      }
    }
  }
  shared[4 * me] = bytes_sent;
  shared[4 * me + 1] = frames_sent;
  double t_end = floor_now_s();
  memcpy(&shared[4 * me + 2], &t_start, 8);
  memcpy(&shared[4 * me + 3], &t_end, 8);
  return 0;
}

int floor_tree_run(int64_t top) {
  order_hosts();
  payload = calloc(1, (size_t)(top > O.table ? top : O.table) + 8);
  run_id = getpid();
  shared = mmap(NULL, sizeof(uint64_t) * 4 * (MAX_PROCS + 1),
                PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (payload == NULL || shared == MAP_FAILED)
    floor_die("setup");
  make_listeners();
  fflush(stdout);
  double t0 = floor_now_s();
  pid_t pids[MAX_PROCS + 1];
  for (int p = 0; p <= O.procs; p++) {
    pids[p] = fork();
    if (pids[p] < 0)
      floor_die("fork");
    if (pids[p] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* the run is killed: all of it */
      _exit(run_proc(p));
    }
  }
  int bad = 0;
  for (int p = 0; p <= O.procs; p++) {
    int st;
    if (waitpid(pids[p], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      bad = 1;
  }
  double whole = floor_now_s() - t0;
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  double user = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
  double sys = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  uint64_t bytes = 0, frames = 0;
  double first = 0, last = 0;
  for (int p = 0; p <= O.procs; p++) {
    double a, b;
    bytes += shared[4 * p];
    frames += shared[4 * p + 1];
    memcpy(&a, &shared[4 * p + 2], 8);
    memcpy(&b, &shared[4 * p + 3], 8);
    if (p == 0 || a < first)
      first = a;
    if (b > last)
      last = b;
  }
  if (bad) {
    fprintf(stderr, "rdzv-socket-floor: a process failed\n");
    return 1;
  }
  printf("socket floor: %" PRId64 " hosts, fan-out %" PRId64 ", %" PRId64
         " processes, table %" PRId64 " B: wall %.3f s (%.3f s with the "
         "processes' start and exit), cpu %.3f s (user %.3f, system %.3f), "
         "%" PRIu64 " frames, %" PRIu64 " bytes\n",
         O.hosts, O.fanout, O.procs, O.table, last - first, whole, user + sys,
         user, sys, frames, bytes);
  return 0;
}
