/* rdzv-socket-floor --tcp-ranks N: the floor under a TCPStore server (see
 * socket_floor.c): one client process on CPU 0 with N loopback
 * connections, each making the init pattern's round trips in turn, and a
 * server process on CPU 1 that only answers; the line with the wall time
 * and each process's CPU. It calls only libc and socket_floor.c's helpers
 * (socket_floor_int.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* sched_setaffinity, accept4 */
#endif
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sched.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench/socket_floor_int.h"

/* The init pattern's round trips a rank, as rdzv-bench --incumbents' C
 * clients put them on the wire (tools/bench/ts_drive.c: the legacy
 * TCPStore dialect, where a SET has no reply): connect; ADD init/ (an
 * 8-byte reply); WAIT the uid (1 byte); GET it (4-byte length and 128
 * bytes); SET topo and ADD barrier in one write (8 bytes back); WAIT
 * barrier_done (1 byte). The server answers at once: no store, no
 * waiting, and no parsing beyond each request's size. */
enum { TCP_TRIPS = 5 };
static size_t tcp_req_bytes(int trip) { return trip == 3 ? 112 : 32; }
static size_t tcp_reply_bytes(int trip) {
  static const size_t n[TCP_TRIPS] = {8, 1, 4 + 128, 8, 1};
  return n[trip];
}

static void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set); /* best effort */
}

struct tconn {
  int fd;
  int trip;   /* round trips done */
  size_t got; /* bytes of the current request (server) or reply */
};

/* The server: accepts n connections and answers n * TCP_TRIPS requests. */
static int tcp_server(int lfd, int64_t n) {
  static uint8_t zero[256]; /* the longest reply: 132 bytes */
  int e = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  if (e < 0 || epoll_ctl(e, EPOLL_CTL_ADD, lfd, &ev) < 0)
    floor_die("epoll");
  int64_t answered = 0;
  struct epoll_event evs[256];
  uint8_t buf[4096];
  while (answered < n * TCP_TRIPS) {
    int k = floor_wait_events(e, evs, "the server");
    for (int i = 0; i < k; i++) {
      struct tconn *c = evs[i].data.ptr;
      if (c == NULL) {
        int fd;
        while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >=
               0) {
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          c = calloc(1, sizeof(*c));
          if (c == NULL)
            floor_die("calloc");
          c->fd = fd;
          struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
          epoll_ctl(e, EPOLL_CTL_ADD, fd, &cev);
        }
        continue;
      }
      ssize_t r = read(c->fd, buf, sizeof(buf));
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN)
          continue;
        epoll_ctl(e, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        free(c);
        continue;
      }
      c->got += (size_t)r;
      while (c->trip < TCP_TRIPS && c->got >= tcp_req_bytes(c->trip)) {
        /* Small replies: the socket takes them. */
        c->got -= tcp_req_bytes(c->trip);
        if (write(c->fd, zero, tcp_reply_bytes(c->trip)) < 0)
          floor_die("write");
        c->trip++;
        answered++;
      }
    }
  }
  return 0;
}

/* The clients: n connections at once, each TCP_TRIPS round trips in turn.
 * Sets the wall time from the first connect to the last reply. */
static int tcp_clients(int port, int64_t n, double *wall) {
  static uint8_t req[128];
  int e = epoll_create1(EPOLL_CLOEXEC);
  struct tconn *cs = calloc((size_t)n, sizeof(*cs));
  if (e < 0 || cs == NULL)
    floor_die("setup");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  double t0 = floor_now_s();
  for (int64_t k = 0; k < n; k++) {
    cs[k].fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (cs[k].fd < 0)
      floor_die("socket");
    int one = 1;
    setsockopt(cs[k].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(cs[k].fd, (struct sockaddr *)&a, sizeof(a)) < 0 &&
        errno != EINPROGRESS)
      floor_die("connect");
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = &cs[k]};
    epoll_ctl(e, EPOLL_CTL_ADD, cs[k].fd, &ev);
  }
  int64_t done = 0;
  struct epoll_event evs[256];
  uint8_t buf[256];
  while (done < n) {
    int k = floor_wait_events(e, evs, "the clients");
    for (int i = 0; i < k; i++) {
      struct tconn *c = evs[i].data.ptr;
      if (evs[i].events & EPOLLOUT) { /* connected: the first request */
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          errno = err;
          floor_die("connect");
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(e, EPOLL_CTL_MOD, c->fd, &ev);
        if (write(c->fd, req, tcp_req_bytes(0)) != (ssize_t)tcp_req_bytes(0))
          floor_die("write");
        continue;
      }
      ssize_t r = read(c->fd, buf, sizeof(buf));
      if (r < 0 && errno == EAGAIN)
        continue;
      if (r <= 0)
        floor_die("read");
      c->got += (size_t)r;
      if (c->got < tcp_reply_bytes(c->trip))
        continue;
      c->got -= tcp_reply_bytes(c->trip);
      if (++c->trip == TCP_TRIPS) {
        epoll_ctl(e, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        done++;
      } else if (write(c->fd, req, tcp_req_bytes(c->trip)) !=
                 (ssize_t)tcp_req_bytes(c->trip)) {
        floor_die("write");
      }
    }
  }
  *wall = floor_now_s() - t0;
  return 0;
}

static double cpu_of(const struct rusage *ru) {
  return (double)ru->ru_utime.tv_sec + ru->ru_utime.tv_usec / 1e6 +
         (double)ru->ru_stime.tv_sec + ru->ru_stime.tv_usec / 1e6;
}

int floor_tcp_run(int64_t n) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(a);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
      listen(lfd, 65535) < 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &alen) < 0)
    floor_die("listen");
  double *wall = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (wall == MAP_FAILED)
    floor_die("mmap");
  pid_t server = fork();
  if (server < 0)
    floor_die("fork");
  if (server == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    pin_to(1);
    _exit(tcp_server(lfd, n));
  }
  pid_t client = fork();
  if (client < 0)
    floor_die("fork");
  if (client == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(lfd);
    pin_to(0);
    _exit(tcp_clients(ntohs(a.sin_port), n, wall));
  }
  close(lfd);
  int st_s, st_c, bad = 0;
  struct rusage ru_s, ru_c;
  /* The clients first: if they fail (no more files, say), the server
   * would wait for them in vain. */
  if (wait4(client, &st_c, 0, &ru_c) < 0)
    floor_die("wait4");
  if (!WIFEXITED(st_c) || WEXITSTATUS(st_c) != 0)
    kill(server, SIGKILL);
  if (wait4(server, &st_s, 0, &ru_s) < 0)
    floor_die("wait4");
  bad = !WIFEXITED(st_s) || WEXITSTATUS(st_s) != 0 || !WIFEXITED(st_c) ||
        WEXITSTATUS(st_c) != 0;
  if (bad) {
    fprintf(stderr, "rdzv-socket-floor: a process failed\n");
    return 1;
  }
  printf("tcp floor: %" PRId64 " ranks, %d round trips each: wall %.3f s, "
         "server cpu %.3f s, clients cpu %.3f s\n",
         n, TCP_TRIPS, *wall, cpu_of(&ru_s), cpu_of(&ru_c));
  return 0;
}
