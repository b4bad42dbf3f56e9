/* rdzv-bench --drive: simulated ranks over real sockets, each with its own
 * librdzv handle and Unix-socket connection to its host's node (or, flat,
 * to the root), all driven by one epoll loop through the library's
 * poll-driven core. Lines with the orchestrator:
 *   -> "ready"         handles created
 *   <- "go"            start every rank (connect, then the rendezvous)
 *   -> "done OK FAIL"  all finished; durations written
 *   <- "exit"          disconnect and exit */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdzv/rdzv.h"
#include "tools/bench/bench.h"
#include "tools/bench/rank.h"

struct sock_rank {
  struct bench_rank r;
  rdzv_client_t *c;
  int cur_fd; /* registered with epoll, or -1 */
  short cur_ev;
};

static int64_t ndone, nfail;

static void on_result(rdzv_client_t *c, const struct rdzv_result *res,
                      void *arg) {
  struct sock_rank *sr = arg;
  (void)c;
  bench_rank_on_result(&sr->r, res);
  if (sr->r.step == STEP_DONE || sr->r.step == STEP_FAILED) {
    ndone++;
    if (sr->r.step == STEP_FAILED) {
      if (nfail++ < 3)
        fprintf(stderr, "rdzv-bench: rank on %s: %s (%s)\n", sr->r.host,
                rdzv_strerror(sr->r.status), rdzv_client_last_error(sr->c));
    }
  }
}

static int sock_submit(struct bench_rank *r, const struct rdzv_request *req,
                       double timeout_s) {
  struct sock_rank *sr = r->transport;
  return rdzv_client_submit(sr->c, req, timeout_s, on_result, sr);
}

/* Keeps rank i's socket registered with epoll for the events its core
 * wants (the socket changes across reconnects; the events as requests
 * are written). */
static void rearm(int ep, struct sock_rank *sr, uint64_t i) {
  int fd = rdzv_client_fd(sr->c);
  short ev = fd >= 0 ? rdzv_client_events(sr->c) : 0;
  if (fd == sr->cur_fd && ev == sr->cur_ev)
    return;
  if (sr->cur_fd >= 0 && sr->cur_fd != fd)
    epoll_ctl(ep, EPOLL_CTL_DEL, sr->cur_fd, NULL);
  if (fd >= 0) {
    struct epoll_event e = {.events = (ev & POLLIN ? EPOLLIN : 0) |
                                      (ev & POLLOUT ? EPOLLOUT : 0),
                            .data.u64 = i};
    if (epoll_ctl(ep, sr->cur_fd == fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd,
                  &e) < 0 &&
        errno == EEXIST)
      epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e);
  }
  sr->cur_fd = fd;
  sr->cur_ev = ev;
}

/* One epoll_wait; progress for the handles with events, and every 50 ms
 * for those whose timer is due (deadlines, reconnect backoff). Each handle's
 * registration follows what its core wants next. */
static int drive(int ep, struct sock_rank *rs, int64_t n,
                 struct epoll_event *evs, double *last_sweep) {
  int got = epoll_wait(ep, evs, 4096, 10);
  if (got < 0 && errno != EINTR)
    return -errno;
  for (int k = 0; k < got; k++) {
    struct sock_rank *sr = &rs[evs[k].data.u64];
    rdzv_client_process(sr->c);
    rearm(ep, sr, evs[k].data.u64);
  }
  double now = bench_now();
  if (now - *last_sweep > 0.05) {
    *last_sweep = now;
    /* Only the handles whose core has a timer due: a read attempt on
     * every socket would cost 100,000 syscalls a sweep. */
    for (int64_t i = 0; i < n; i++) {
      if (rdzv_client_timeout_ms(rs[i].c) != 0)
        continue;
      rdzv_client_process(rs[i].c);
      rearm(ep, &rs[i], (uint64_t)i);
    }
  }
  return 0;
}

int bench_drive_main(struct bench_opts *o) {
  int64_t n = 0;
  for (int64_t h = o->first; h < o->first + o->count; h++)
    n += bench_host_ranks(o, h);
  struct sock_rank *rs = calloc((size_t)n, sizeof(*rs));
  struct epoll_event *evs = calloc(4096, sizeof(*evs));
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct bench_params p = {"world", (int32_t)o->ranks, o->ranks_per_root,
                           o->timeout_s, sock_submit};
  if (rs == NULL || evs == NULL || ep < 0)
    return 1;
  int64_t k = 0;
  for (int64_t h = o->first; h < o->first + o->count; h++) {
    char path[200], addr[220];
    if (o->flat)
      bench_root_path(o, path, sizeof(path));
    else
      bench_node_path(o, h, path, sizeof(path));
    snprintf(addr, sizeof(addr), "unix:%s", path);
    for (int64_t l = 0; l < bench_host_ranks(o, h); l++, k++) {
      struct rdzv_client_opts co;
      rdzv_client_opts_init(&co);
      co.addr = addr;
      co.job_id = o->job;
      /* The daemons share this machine's two cores, hundreds to a
       * process: one may not run for seconds. A rank must not take that
       * for a dead daemon (and its pings, 100,000 of them a second at
       * 100k ranks, would add to the load). A real node is a process of
       * its own on its own host. */
      co.heartbeat_s = 30;
      co.liveness_timeout_s = o->timeout_s;
      co.attempt_timeout_s = 30;
      if (rdzv_client_create(&co, &rs[k].c) < 0)
        return 1;
      rs[k].r.p = &p;
      rs[k].r.transport = &rs[k];
      snprintf(rs[k].r.host, sizeof(rs[k].r.host), "h%06" PRId64, h);
      rs[k].r.local_rank = (int32_t)l;
      rs[k].r.local_size = (int32_t)bench_host_ranks(o, h);
      rs[k].r.claim = ((uint64_t)getpid() << 40) ^ ((uint64_t)k + 1);
      rs[k].cur_fd = -1;
    }
  }
  printf("ready\n");
  fflush(stdout);
  char line[64];
  if (fgets(line, sizeof(line), stdin) == NULL)
    return 1;
  double t_go = bench_now(), last = t_go;
  for (k = 0; k < n; k++) {
    if (bench_rank_start(&rs[k].r) < 0)
      return 1;
    rdzv_client_process(rs[k].c); /* starts connecting */
    rearm(ep, &rs[k], (uint64_t)k);
  }
  while (ndone < n && drive(ep, rs, n, evs, &last) == 0)
    ;
  bench_write_durations(o, rs, sizeof(*rs), n, t_go);
  printf("done %" PRId64 " %" PRId64 "\n", n - nfail, nfail);
  fflush(stdout);
  /* Stay connected until every driver is done: a rank's connection
   * closing mid-run would (rightly) abort the generation. */
  if (fgets(line, sizeof(line), stdin) == NULL)
    line[0] = '\0';
  for (k = 0; k < n; k++)
    rdzv_client_destroy(rs[k].c);
  free(rs);
  free(evs);
  close(ep);
  return nfail == 0 ? 0 : 1;
}
