/* The relay case (issue 33): a node started with --parent naming its
 * parent alone learns the daemons above it at its start, before any job
 * (its probe, wire.h's RDZV_ROLE_PROBE), so a parent lost before the
 * node's first request does not cut it off.
 *
 * Root R; relay A under R, with no ranks; hosts B, C and D under A, each
 * started with --parent A only. B's and C's 4 ranks each (rdzv-example
 * processes) join a world of 12; A is killed (-9); then D's 4 ranks come.
 * Checked: D knew R (its probe's answer: "probes.learned" 1, R among its
 * ancestors) before A went, and A answered the probes of all three; every
 * one of the 12 ranks completes with the same generation (rdzv-example
 * checks its rank, the ids and a closing barrier). No assertion depends on
 * wall-clock time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "store/wire/wire.h"

#define JOB "relay"
#define PER 4

static char dir[64];
static struct proc root, relay, host[3];
static char root_tcp[64], relay_tcp[64], host_tcp[3][64], host_unix[3][160];

static int setup(void **state) {
  (void)state;
  static const char *const beat[] = {"--heartbeat-ms=100",
                                     "--liveness-timeout-ms=800", NULL};
  snprintf(dir, sizeof(dir), "/tmp/rdzv-relay-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "R", NULL, beat, root_tcp) < 0 ||
      daemon_start(&relay, dir, "A", root_tcp, beat, relay_tcp) < 0)
    return -1;
  for (int h = 0; h < 3; h++) {
    char name[16];
    snprintf(name, sizeof(name), "%c", 'B' + h);
    if (daemon_start(&host[h], dir, name, relay_tcp, beat, host_tcp[h]) < 0)
      return -1;
    daemon_unix_addr(dir, name, host_unix[h], sizeof(host_unix[h]));
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = 0;
  for (int h = 0; h < 3; h++)
    bad |= proc_stop(&host[h]) != 0;
  if (relay.pid > 0)
    bad |= proc_stop(&relay) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  return bad ? -1 : 0;
}

/* Host h's PER rank processes. */
static void start_ranks(int h, struct proc *ranks) {
  for (int lr = 0; lr < PER; lr++) {
    char env_addr[200], env_host[32], env_lr[32];
    snprintf(env_addr, sizeof(env_addr), "RDZV_ADDR=%s", host_unix[h]);
    snprintf(env_host, sizeof(env_host), "RDZV_HOST=host%c", 'B' + h);
    snprintf(env_lr, sizeof(env_lr), "LOCAL_RANK=%d", lr);
    char *argv[] = {"/usr/bin/env",
                    env_addr,
                    env_host,
                    env_lr,
                    "RDZV_JOB=" JOB,
                    "LOCAL_WORLD_SIZE=4",
                    "WORLD_SIZE=12",
                    "tools/rdzv-example",
                    "--nccl",
                    "none",
                    "--timeout",
                    "60",
                    NULL};
    assert_int_equal(proc_start(&ranks[lr], argv, 1), 0);
  }
}

static void test_relay_lost_before_a_hosts_first_request(void **state) {
  (void)state;
  /* Every host learned R from A's answer to its probe, before any job. */
  for (int h = 0; h < 3; h++) {
    assert_int_equal(stats_reach(host_tcp[h], "probes.learned", 1), 1);
    char *json = stats_json_at_job(host_tcp[h], JOB);
    assert_non_null(json);
    char want[100];
    snprintf(want, sizeof(want), "\"%s\"", root_tcp);
    if (strstr(json, want) == NULL)
      fail_msg("host %c does not list %s among its ancestors: %s", 'B' + h,
               root_tcp, json);
    rdzv_free(json);
  }
  assert_true(stats_at(relay_tcp, "probes.answered") >= 3);
  struct proc ranks[3][PER];
  start_ranks(0, ranks[0]);
  start_ranks(1, ranks[1]);
  /* B's and C's 8 ranks have reached the root through A. */
  while (stats_at_job(root_tcp, JOB, "rounds." JOB ".world.ranks") < 8)
    usleep(20 * 1000);
  assert_int_equal(stats_at_job(root_tcp, JOB, "rounds." JOB ".world.ranks"),
                   8);
  printf("8 ranks of hosts B and C joined through A; killing A\n");
  kill(relay.pid, SIGKILL);
  int st;
  waitpid(relay.pid, &st, 0);
  relay.pid = 0;
  start_ranks(2, ranks[2]);
  long long gen = -1;
  int done = 0;
  for (int h = 0; h < 3; h++)
    for (int lr = 0; lr < PER; lr++) {
      char *out = proc_read_all(&ranks[h][lr]);
      int rc = proc_wait(&ranks[h][lr]);
      const char *line = out != NULL ? strstr(out, "generation ") : NULL;
      long long g = -1;
      if (line != NULL && sscanf(line, "generation %lld", &g) != 1)
        g = -1;
      if (rc != 0 || g < 0)
        fail_msg("host %c local rank %d exited %d: %s", 'B' + h, lr, rc,
                 out != NULL ? out : "(no output)");
      if (gen < 0)
        gen = g;
      assert_int_equal(g, gen);
      done++;
      free(out);
    }
  printf("%d of 12 ranks completed, generation %lld\n", done, gen);
  assert_int_equal(done, 12);
}

/* ---- what a probe gets from daemons with a job secret --------------------- */

/* Connects to 127.0.0.1:PORT of hostport. */
static int raw_tcp(const char *hostport) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)atoi(strrchr(hostport, ':') + 1));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  return fd;
}

/* A root and a node with --secret-file: the node learned the root at its
 * start all the same (the probe needs no secret); a probe sent by hand
 * to the node gets the chain (the root's address), no challenge and no
 * job state, and the connection closes: a request after it is not
 * answered. */
static void test_probe_with_secrets(void **state) {
  (void)state;
  char sdir[96], sf[128], sfa[160], rtcp[64], ntcp[64];
  struct proc r, n;
  snprintf(sdir, sizeof(sdir), "%s/secret", dir);
  assert_int_equal(mkdir(sdir, 0700), 0);
  snprintf(sf, sizeof(sf), "%s/job", sdir);
  int fd = open(sf, O_WRONLY | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "0123456789abcdef0123", 20), 20);
  close(fd);
  snprintf(sfa, sizeof(sfa), "--secret-file=%s", sf);
  const char *o[] = {sfa, NULL};
  assert_int_equal(daemon_start(&r, dir, "sR", NULL, o, rtcp), 0);
  assert_int_equal(daemon_start(&n, dir, "sN", rtcp, o, ntcp), 0);
  setenv("RDZV_SECRET_FILE", sf, 1); /* this process's stats requests */
  assert_int_equal(stats_reach(ntcp, "probes.learned", 1), 1);

  fd = raw_tcp(ntcp);
  struct rdzv_slice k[2] = {{(const uint8_t *)"", 0},
                            {(const uint8_t *)"by-hand", 7}};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_HELLO;
  m.req_id = 5;
  m.a = RDZV_ROLE_PROBE;
  m.keys.n = 2;
  m.keys.v = k;
  struct rdzv_buf out = {0};
  assert_int_equal(rdzv_msg_encode(&m, &out), 0);
  struct rdzv_slice gk = {(const uint8_t *)"secret-key", 10};
  struct rdzv_msg g;
  memset(&g, 0, sizeof(g));
  g.type = RDZV_MSG_GET;
  g.req_id = 6;
  g.keys.n = 1;
  g.keys.v = &gk;
  assert_int_equal(rdzv_msg_encode(&g, &out), 0); /* right behind it */
  assert_int_equal(send(fd, out.data, out.len, MSG_NOSIGNAL), (ssize_t)out.len);
  rdzv_buf_free(&out);
  uint8_t buf[4096];
  size_t have = 0;
  for (;;) { /* everything the node sends, until it closes */
    ssize_t got = recv(fd, buf + have, sizeof(buf) - have, 0);
    if (got <= 0)
      break;
    have += (size_t)got;
  }
  close(fd);
  struct rdzv_msg reply;
  size_t used = 0;
  assert_int_equal(rdzv_msg_decode(buf, have, UINT32_MAX, &reply, &used), 0);
  assert_int_equal(reply.type, RDZV_MSG_HELLO);
  assert_int_equal(reply.req_id, 5);
  assert_int_equal(reply.status, 0);
  assert_int_equal(reply.flags, RDZV_F_REPLY); /* no challenge */
  struct rdzv_slice v;
  assert_int_equal(rdzv_items_get(&reply.vals, 0, &v), 0);
  assert_int_equal(v.n, strlen(rtcp));
  assert_memory_equal(v.p, rtcp, v.n);
  assert_int_equal(reply.vals.n, 1);
  assert_int_equal(used, have); /* nothing after it: the GET unanswered */
  assert_true(stats_at(ntcp, "probes.answered") >= 1);
  unsetenv("RDZV_SECRET_FILE");
  assert_int_equal(proc_stop(&n), 0);
  assert_int_equal(proc_stop(&r), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(
          test_relay_lost_before_a_hosts_first_request, setup, teardown),
      cmocka_unit_test_setup_teardown(test_probe_with_secrets, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
