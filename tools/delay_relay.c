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
 * error, 1 when a listener cannot be set up.
 *
 * This file owns the command: the options and pairs, the listeners, the
 * loop and its signals, the statistics line, the end. The forwarding is
 * delay_relay_links.c's, called through delay_relay_int.h. */
#include <errno.h>
#include <netinet/in.h>
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
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tools/delay_relay_int.h"

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
    if (relay_parse_addr(p->listen, &ss, &sl, err, sizeof(err)) < 0 ||
        relay_parse_addr(p->target, &tss, &tsl, err, sizeof(err)) < 0) {
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
  uint64_t now = relay_now_ns(), due = r->ghead->due_ns;
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

/* --realtime: SCHED_FIFO priority 1 if allowed (r->rt says whether). */
static void go_realtime(struct relay *r) {
  /* A wire is not scheduled: with --realtime the relay runs before the
   * daemons it carries for, so a busy machine delays chunks by little
   * more than D (without the privilege, it says so and goes on). */
  int rt = 0;
  if (r->realtime) {
    struct sched_param sp = {.sched_priority = 1};
    rt = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
    r->rt = rt;
    if (!rt)
      fprintf(stderr,
              "delay-relay: --realtime: %s; running as a normal "
              "process\n",
              strerror(errno));
  }
}

/* The loop: connections accepted, sides served, due chunks written, dead
 * links freed, until SIGTERM or SIGINT on sfd (or epoll fails). */
static void serve(struct relay *r, int sfd) {
  struct epoll_event evs[256];
  bool stop = false;
  while (!stop) {
    struct timespec ts;
    int n = epoll_pwait2(r->ep, evs, 256, head_timeout(r, &ts), NULL);
    if (n < 0 && errno != EINTR)
      break;
    for (int i = 0; i < n; i++) {
      struct endpoint *e = evs[i].data.ptr;
      if (e->kind == EP_LISTENER)
        relay_accept_all(r, &r->pairs[e->pair]);
      else if (e->kind == EP_SIGNAL)
        stop = on_signal(r, sfd) || stop;
      else if (!e->lk->dead)
        relay_side_ready(r, e->lk, e->side, evs[i].events);
    }
    relay_release_due(r);
    while (r->dead != NULL) {
      struct link *lk = r->dead;
      r->dead = lk->next_dead;
      free(lk);
    }
  }
}

/* Everything goes: open links, held chunks, listeners. */
static void shut_down(struct relay *r, int sfd) {
  while (r->links != NULL)
    relay_link_kill(r, r->links);
  /* What is still in the global FIFO belongs to killed links now. */
  while (r->ghead != NULL) {
    struct chunk *c = r->ghead;
    r->ghead = c->gnext;
    free(c);
  }
  while (r->dead != NULL) {
    struct link *lk = r->dead;
    r->dead = lk->next_dead;
    free(lk);
  }
  for (int i = 0; i < r->npairs; i++) {
    if (r->pairs[i].fd >= 0)
      close(r->pairs[i].fd);
    if (strncmp(r->pairs[i].listen, "unix:", 5) == 0)
      unlink(r->pairs[i].listen + 5);
  }
  free(r->pairs);
  close(sfd);
  close(r->ep);
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
  go_realtime(&r);
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
  serve(&r, sfd);
  shut_down(&r, sfd);
  return 0;
}
