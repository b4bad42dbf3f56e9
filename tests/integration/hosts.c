/* Simulated hosts for tests (hosts.h): a forked process per host, a
 * thread per rank. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2 */
#endif
#include "hosts.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

int hosts_adds_per_cmd = 100;

struct hostctx {
  const char *addr, *job;
  char host[32];
  int host_idx, nranks, world, res_w;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int seq;
  char cmds[256];
};

struct rankctx {
  struct hostctx *h;
  int local_rank;
};

static void send_report(struct hostctx *h, struct report *rp) {
  if (write(h->res_w, rp, sizeof(*rp)) != sizeof(*rp))
    _exit(3);
}

/* Joins (rp's join fields and status filled); returns the handle or
 * NULL. */
static rdzv_rendezvous_t *join(struct rankctx *rc, struct report *rp) {
  struct hostctx *h = rc->h;
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = h->addr;
  o.job_id = h->job;
  o.round = "world";
  o.host = h->host;
  o.local_rank = rc->local_rank;
  o.local_size = h->nranks;
  o.world_size = h->world;
  o.timeout_s = 60;
  o.topology = "gpu=test\n";
  rdzv_rendezvous_t *r = NULL;
  char err[512] = "";
  rp->status = rdzv_rendezvous_join(&o, &r, err, sizeof(err));
  rp->rank = rp->world = -1;
  rp->gen = 0;
  if (rp->status == 0) {
    rp->rank = rdzv_rendezvous_rank(r);
    rp->world = rdzv_rendezvous_world_size(r);
    rp->gen = rdzv_rendezvous_generation(r);
  }
  snprintf(rp->text, sizeof(rp->text), "%.200s", err);
  return r;
}

static void *rank_main(void *arg) {
  struct rankctx *rc = arg;
  struct hostctx *h = rc->h;
  struct report rp;
  memset(&rp, 0, sizeof(rp));
  rp.host = h->host_idx;
  rp.local_rank = rc->local_rank;
  rdzv_rendezvous_t *r = join(rc, &rp);
  send_report(h, &rp);
  for (int done = 0; r != NULL;) {
    pthread_mutex_lock(&h->mu);
    while (h->seq == done)
      pthread_cond_wait(&h->cv, &h->mu);
    char cmd = h->cmds[done % (int)sizeof(h->cmds)];
    int seq = ++done;
    pthread_mutex_unlock(&h->mu);
    rp.cmd = cmd;
    rp.count = 0;
    rp.text[0] = '\0';
    if (cmd == 'q')
      break;
    rdzv_client_t *c = rdzv_rendezvous_client(r);
    char key[64], val[32];
    if (cmd == 'b') {
      snprintf(key, sizeof(key), "b%d", seq);
      rp.status = rdzv_rendezvous_barrier(r, key, 30);
      snprintf(rp.text, sizeof(rp.text), "%.200s",
               rdzv_rendezvous_last_error(r));
    } else if (cmd == 'a') {
      /* Sequential adds, each acknowledged or not: the counter at the root
       * must equal the acknowledged ones. */
      snprintf(key, sizeof(key), "ctr");
      rp.status = 0;
      for (int i = 0; i < hosts_adds_per_cmd; i++) {
        int64_t v;
        int st = rdzv_store_add(c, key, 1, &v, 30);
        if (st == 0)
          rp.count++;
        else
          rp.status = st;
      }
      snprintf(rp.text, sizeof(rp.text), "%.200s", rdzv_client_last_error(c));
    } else if (cmd == 's') {
      snprintf(key, sizeof(key), "k-%d", rp.rank);
      int n = snprintf(val, sizeof(val), "%d", seq);
      rp.status = rdzv_store_set(c, key, val, (size_t)n, 0, 30);
      snprintf(rp.text, sizeof(rp.text), "%.200s", rdzv_client_last_error(c));
    } else if (cmd == 'i') {
      /* Idle for 3 s, driving the handle as an event loop would: pings
       * go out, and a lost node is left for its parent (count = sessions
       * resumed so far). */
      /* slow: calls that held the loop (a loop that drives many
       * handles would hold them all that long). */
      struct timespec t0, t1, ts;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      rp.slow = 0;
      do {
        struct pollfd p = {rdzv_client_fd(c), rdzv_client_events(c), 0};
        int ms = rdzv_client_timeout_ms(c);
        if (ms < 0 || ms > 50)
          ms = 50;
        (void)poll(&p, p.fd >= 0 ? 1 : 0, ms);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        (void)rdzv_client_process(c);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - ts.tv_sec) * 1000 +
                (t1.tv_nsec - ts.tv_nsec) / 1000000 >=
            50)
          rp.slow++;
      } while ((t1.tv_sec - t0.tv_sec) * 1000 +
                   (t1.tv_nsec - t0.tv_nsec) / 1000000 <
               3000);
      rp.status = 0;
      rp.count = (int32_t)rdzv_client_resumes(c);
    } else if (cmd == 'j') {
      rdzv_rendezvous_destroy(r); /* a clean leave */
      r = join(rc, &rp);
    }
    send_report(h, &rp);
  }
  rdzv_rendezvous_destroy(r);
  return NULL;
}

struct hostproc host_start(const char *addr, const char *job, const char *name,
                           int idx, int n, int world) {
  int cmd[2], res[2];
  struct hostproc hp = {0, -1, -1};
  /* Close-on-exec: a daemon the test starts later must not hold the
   * command pipe open (the host would never see its end). */
  if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(res, O_CLOEXEC) != 0 ||
      (hp.pid = fork()) < 0) {
    perror("host_start");
    abort();
  }
  if (hp.pid > 0) {
    close(cmd[0]);
    close(res[1]);
    hp.cmd_w = cmd[1];
    hp.res_r = res[0];
    return hp;
  }
  /* Only these two: another host's pipe ends held here would keep that
   * host from seeing its end. */
  for (int fd = 3; fd < 1024; fd++)
    if (fd != cmd[0] && fd != res[1])
      close(fd);
  static struct hostctx h;
  memset(&h, 0, sizeof(h));
  h.addr = addr;
  h.job = job;
  if (name != NULL)
    snprintf(h.host, sizeof(h.host), "%s", name);
  else
    snprintf(h.host, sizeof(h.host), "h%d", idx);
  h.host_idx = idx;
  h.nranks = n;
  h.world = world;
  h.res_w = res[1];
  pthread_mutex_init(&h.mu, NULL);
  pthread_cond_init(&h.cv, NULL);
  pthread_t *th = calloc((size_t)n, sizeof(*th));
  struct rankctx *rc = calloc((size_t)n, sizeof(*rc));
  if (th == NULL || rc == NULL)
    _exit(4);
  for (int i = 0; i < n; i++) {
    rc[i] = (struct rankctx){&h, i};
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 << 10);
    if (pthread_create(&th[i], &at, rank_main, &rc[i]) != 0)
      _exit(4);
  }
  char b;
  while (read(cmd[0], &b, 1) == 1) {
    pthread_mutex_lock(&h.mu);
    h.cmds[h.seq % (int)sizeof(h.cmds)] = b;
    h.seq++;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
  }
  /* The test closed the pipe: every rank that is still here quits. */
  pthread_mutex_lock(&h.mu);
  h.cmds[h.seq % (int)sizeof(h.cmds)] = 'q';
  h.seq++;
  pthread_cond_broadcast(&h.cv);
  pthread_mutex_unlock(&h.mu);
  for (int i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  _exit(0);
}

void host_cmd(struct hostproc *hp, char c) {
  if (write(hp->cmd_w, &c, 1) != 1)
    abort();
}

void host_read(struct hostproc *hp, struct report *rp) {
  size_t got = 0;
  while (got < sizeof(*rp)) {
    ssize_t n = read(hp->res_r, (char *)rp + got, sizeof(*rp) - got);
    if (n <= 0) {
      fprintf(stderr, "host_read: the host's reports ended\n");
      abort();
    }
    got += (size_t)n;
  }
}

static int reap(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int host_end(struct hostproc *hp) {
  close(hp->cmd_w);
  int st = reap(hp->pid);
  close(hp->res_r);
  return st;
}

void host_kill(struct hostproc *hp) {
  kill(hp->pid, SIGKILL);
  reap(hp->pid);
  close(hp->cmd_w);
  close(hp->res_r);
}
