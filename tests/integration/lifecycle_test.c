/* Relaunches with the same job id through a tree two node levels deep
 * (rank -> leaf -> mid -> root, the layout of every Slurm host after the
 * first), and one level deep for comparison: after a clean end (the rank
 * leaves) and after a rank is killed, the next launch gets the next
 * generation, 1, 2, 3, ...; a rank's leave travels to the root at any
 * depth, so its slot is free again. Real daemons, the rank in this
 * process (clean end) or a forked child killed with SIGKILL. */
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

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

static char dir[64];
static struct proc root, mid, leaf;
static char leaf_addr[160], mid_addr[160];
static char root_tcp[64], mid_tcp[64], leaf_tcp[64];
static int fds_before;
/* The nodes' --job-linger-ms (the root keeps the daemon default). */
static const char *node_linger = "30000";

/* Starts a daemon (a node of parent, or the root when parent is NULL)
 * with the --job-linger-ms of its kind. */
static int start(struct proc *p, const char *name, const char *parent,
                 char *tcp, size_t tcplen) {
  char linger[64];
  (void)tcplen;
  snprintf(linger, sizeof(linger), "--job-linger-ms=%s",
           parent ? node_linger : "30000");
  const char *extra[] = {linger, NULL};
  return daemon_start(p, dir, name, parent, extra, tcp);
}

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-life-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  if (start(&root, "root", NULL, root_tcp, sizeof(root_tcp)) < 0 ||
      start(&mid, "mid", root_tcp, mid_tcp, sizeof(mid_tcp)) < 0 ||
      start(&leaf, "leaf", mid_tcp, leaf_tcp, sizeof(leaf_tcp)) < 0)
    return -1;
  daemon_unix_addr(dir, "leaf", leaf_addr, sizeof(leaf_addr));
  daemon_unix_addr(dir, "mid", mid_addr, sizeof(mid_addr));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  /* leaf.pid is 0 once a test killed and reaped it. */
  int bad = leaf.pid != 0 && proc_stop(&leaf) != 0;
  bad |= proc_stop(&mid) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

static int setup_short_node_linger(void **state) {
  node_linger = "100";
  int rc = setup(state);
  node_linger = "30000";
  return rc;
}

/* A rank of job "relaunch" (host, local rank of host's local_size,
 * world) joins through addr. Returns the handle; *err gets the error text
 * on failure. */
static int join_as(const char *addr, const char *host, int local_rank,
                   int local_size, int world, rdzv_rendezvous_t **out,
                   char *err, size_t errlen) {
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr;
  o.job_id = "relaunch";
  o.round = "world";
  o.host = host;
  o.local_rank = local_rank;
  o.local_size = local_size;
  o.world_size = world;
  o.timeout_s = 20;
  o.topology = "gpu=test\n";
  return rdzv_rendezvous_join(&o, out, err, errlen);
}

/* One rank of a world of 1 on hostL. */
static int join(const char *addr, rdzv_rendezvous_t **out, char *err,
                size_t errlen) {
  return join_as(addr, "hostL", 0, 1, 1, out, err, errlen);
}

/* Three clean launches, one after another: generations 1, 2, 3 (plus
 * whatever ran before in this job: first_gen). */
static int64_t clean_launches(const char *addr, int64_t first_gen) {
  int64_t gen = first_gen;
  for (int i = 0; i < 3; i++) {
    rdzv_rendezvous_t *r = NULL;
    char err[512] = "";
    int rc = join(addr, &r, err, sizeof(err));
    if (rc != 0)
      fail_msg("launch %d through %s: %s (%s)", i + 1, addr, rdzv_strerror(rc),
               err);
    if (gen > 0)
      assert_int_equal(rdzv_rendezvous_generation(r), gen + 1);
    gen = rdzv_rendezvous_generation(r);
    assert_int_equal(rdzv_rendezvous_rank(r), 0);
    rdzv_rendezvous_destroy(r); /* leaves cleanly */
  }
  return gen;
}

static void test_relaunch_two_levels_down(void **state) {
  (void)state;
  int64_t gen = clean_launches(leaf_addr, 0);
  assert_int_equal(gen, 3);
}

static void test_relaunch_one_level_down(void **state) {
  (void)state;
  int64_t gen = clean_launches(mid_addr, 0);
  assert_int_equal(gen, 3);
}

/* A rank killed after joining, two levels down: the next launch gets the
 * next generation (the generation was aborted, its claims gone). */
static void test_relaunch_after_kill(void **state) {
  (void)state;
  int64_t gen = clean_launches(leaf_addr, 0);
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(pipefd[0]);
    rdzv_rendezvous_t *r = NULL;
    char err[256];
    char ok = join(leaf_addr, &r, err, sizeof(err)) == 0 ? 'y' : 'n';
    if (write(pipefd[1], &ok, 1) != 1)
      _exit(2);
    pause(); /* killed here, never leaves */
    _exit(0);
  }
  close(pipefd[1]);
  char ok = 0;
  assert_int_equal(read(pipefd[0], &ok, 1), 1);
  close(pipefd[0]);
  assert_int_equal(ok, 'y');
  kill(pid, SIGKILL);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  /* The killed rank had generation gen + 1; the abort travels up while
   * the next launch may already be on its way: it gets gen + 2. A launch
   * that arrives before the abort is refused naming the dead process;
   * retry a few times, as a launcher would. */
  rdzv_rendezvous_t *r = NULL;
  char err[512] = "";
  int rc = -1;
  for (int tries = 0; tries < 50 && rc != 0; tries++) {
    rc = join(leaf_addr, &r, err, sizeof(err));
    if (rc != 0)
      usleep(100 * 1000);
  }
  if (rc != 0)
    fail_msg("relaunch after a kill: %s (%s)", rdzv_strerror(rc), err);
  assert_int_equal(rdzv_rendezvous_generation(r), gen + 2);
  rdzv_rendezvous_destroy(r);
  assert_int_equal(clean_launches(leaf_addr, gen + 2), gen + 5);
}

/* Waits until the daemon at addr holds no job. */
static void wait_no_jobs(const char *addr) {
  for (int tries = 0; tries < 600; tries++) {
    if (stats_at(addr, "jobs") == 0)
      return;
    usleep(100 * 1000);
  }
  fail_msg("%s still holds a job a minute after its last connection", addr);
}

/* A job that ends cleanly through two node levels aborts nothing: the
 * nodes free it (short linger) and close their connections for it, and
 * the root (long linger) still has generation 1 complete: its keys read
 * as they were, not "aborted". */
static void test_clean_end_aborts_nothing(void **state) {
  (void)state;
  rdzv_rendezvous_t *r = NULL;
  char err[512] = "";
  int rc = join(leaf_addr, &r, err, sizeof(err));
  if (rc != 0)
    fail_msg("launch: %s (%s)", rdzv_strerror(rc), err);
  assert_int_equal(rdzv_rendezvous_generation(r), 1);
  rdzv_rendezvous_destroy(r);
  wait_no_jobs(leaf_tcp);
  wait_no_jobs(mid_tcp);
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = root_tcp;
  o.job_id = "relaunch";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  void *v = NULL;
  size_t n = 0;
  rc = rdzv_store_get(c, "rdzv/world/g1/hosts", &v, &n, 20);
  if (rc != 0)
    fail_msg("generation 1 after a clean end: %s (%s)", rdzv_strerror(rc),
             rdzv_client_last_error(c));
  assert_non_null(strstr(v, "hostL"));
  rdzv_free(v);
  rdzv_client_destroy(c);
}

/* A forked rank: joins (host, local rank 0 of 1, world 2) through addr and
 * writes its generation (or -1) to fd, then waits to be killed or for
 * stop_fd to close. */
static int pipe_res[2], pipe_stop[2];

static pid_t rank_child(const char *addr, const char *host, int fd,
                        int stop_fd) {
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  /* Only the parent holds the stop pipe's write end, so its close ends
   * the wait below. */
  close(pipe_stop[1]);
  close(pipe_res[0]);
  rdzv_rendezvous_t *r = NULL;
  char err[256];
  int64_t gen = -1;
  if (join_as(addr, host, 0, 1, 2, &r, err, sizeof(err)) == 0)
    gen = rdzv_rendezvous_generation(r);
  if (write(fd, &gen, sizeof(gen)) != sizeof(gen))
    _exit(2);
  char b;
  while (read(stop_fd, &b, 1) > 0)
    ;
  rdzv_rendezvous_destroy(r);
  _exit(0);
}

/* An interior node dies while a join through it is pending: the node
 * above it aborts the generation (it had counted joins from it), so the
 * relaunched ranks get generation 2 together, and neither completes
 * generation 1 with the dead rank. */
static void test_interior_node_dies_during_join(void **state) {
  (void)state;
  int *res = pipe_res, *stop = pipe_stop;
  assert_int_equal(pipe(res), 0);
  assert_int_equal(pipe(stop), 0);
  /* Rank 1 of 2 joins through leaf (under mid) and waits for a peer. It
   * writes its outcome to a pipe of its own (nobody reads it: when it
   * comes depends on how the client notices its node's death). */
  int r1res[2];
  assert_int_equal(pipe(r1res), 0);
  pid_t r1 = rank_child(leaf_addr, "hostB", r1res[1], stop[0]);
  assert_true(r1 > 0);
  /* Until mid has passed the join on (the root received it). */
  assert_true(stats_reach(root_tcp, "ops.join.received", 1) >= 1);
  /* The host goes: its node and its rank (a rank alone would go on
   * through the node's parent: sessions, see session_test). */
  kill(r1, SIGKILL);
  kill(leaf.pid, SIGKILL);
  int st;
  waitpid(leaf.pid, &st, 0);
  waitpid(r1, &st, 0);
  leaf.pid = 0;
  /* mid tells the root when the leaf's --session-grace-ms has passed (an
   * ABORT naming the lost node and host), before the round's own
   * deadline (20 s) would fail it. */
  assert_true(stats_reach(root_tcp, "ops.abort.received", 1) >= 1);
  close(r1res[0]);
  close(r1res[1]);
  /* Two ranks launched through mid, on other hosts than the dead one (so
   * no slot conflict hides a generation 1 still open): generation 2 for
   * both, not generation 1 completed with the dead rank. */
  pid_t a = rank_child(mid_addr, "hostC", res[1], stop[0]);
  pid_t b = rank_child(mid_addr, "hostA", res[1], stop[0]);
  int64_t ga = 0, gb = 0;
  assert_int_equal(read(res[0], &ga, sizeof(ga)), sizeof(ga));
  assert_int_equal(read(res[0], &gb, sizeof(gb)), sizeof(gb));
  close(stop[1]);
  waitpid(a, &st, 0);
  waitpid(b, &st, 0);
  close(stop[0]);
  close(res[0]);
  close(res[1]);
  assert_int_equal(ga, 2);
  assert_int_equal(gb, 2);
}

static int fake_id(void *arg, uint8_t *id) {
  (void)arg;
  memset(id, 7, RDZV_UNIQUE_ID_BYTES);
  return 0;
}

/* The world's unique-id exchange at its deadline names the rank that
 * never made its id, with its host, as a barrier names its missing
 * members: rank 0 (hostA) joins but never publishes. */
static void test_ids_deadline_names_the_maker(void **state) {
  (void)state;
  int *res = pipe_res, *stop = pipe_stop;
  assert_int_equal(pipe(res), 0);
  assert_int_equal(pipe(stop), 0);
  pid_t maker = rank_child(mid_addr, "hostA", res[1], stop[0]);
  rdzv_rendezvous_t *r = NULL;
  char err[512] = "";
  int rc = join_as(mid_addr, "hostB", 0, 1, 2, &r, err, sizeof(err));
  if (rc != 0)
    fail_msg("join: %s (%s)", rdzv_strerror(rc), err);
  assert_int_equal(rdzv_rendezvous_rank(r), 1);
  uint8_t *ids = NULL;
  int64_t nids = 0;
  rc = rdzv_rendezvous_unique_ids(r, "world", 128, fake_id, NULL, &ids, &nids,
                                  1.0);
  assert_int_equal(rc, RDZV_EDEADLINE);
  const char *e = rdzv_rendezvous_last_error(r);
  if (strstr(e, "1 of 1 missing: rank 0") == NULL ||
      strstr(e, "(host hostA)") == NULL)
    fail_msg("the deadline names nobody: %s", e);
  rdzv_rendezvous_destroy(r);
  close(stop[1]);
  int st;
  waitpid(maker, &st, 0);
  close(stop[0]);
  close(res[0]);
  close(res[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_relaunch_two_levels_down, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_relaunch_one_level_down, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_relaunch_after_kill, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_clean_end_aborts_nothing,
                                      setup_short_node_linger, teardown),
      cmocka_unit_test_setup_teardown(test_interior_node_dies_during_join,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_ids_deadline_names_the_maker, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
