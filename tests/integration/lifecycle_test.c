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

#define RDZVD "tools/rdzvd"

static char dir[64];
static struct proc root, mid, leaf;
static char leaf_addr[160], mid_addr[160];
static int fds_before;

/* Starts a daemon of role with --parent parent (NULL for the root); its
 * TCP address goes to tcp, its Unix socket is DIR/<name>.sock. */
static int start(struct proc *p, const char *name, const char *parent,
                 char *tcp, size_t tcplen) {
  char pf[128], pfa[160], una[160], par[192], nm[64];
  snprintf(pf, sizeof(pf), "%s/%s.port", dir, name);
  snprintf(pfa, sizeof(pfa), "--port-file=%s", pf);
  snprintf(una, sizeof(una), "--unix=%s/%s.sock", dir, name);
  snprintf(par, sizeof(par), "--parent=%s", parent ? parent : "");
  snprintf(nm, sizeof(nm), "--name=%s", name);
  char *argv[] = {RDZVD, parent ? "--role=node" : "--role=root",
                  "--listen=127.0.0.1:0", pfa, una, nm, "--log-level=0",
                  parent ? par : NULL, NULL};
  if (proc_start(p, argv, 0) < 0)
    return -1;
  int port = wait_port_file(pf, 30);
  if (port < 0)
    return -1;
  snprintf(tcp, tcplen, "127.0.0.1:%d", port);
  return 0;
}

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-life-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  char root_tcp[64], mid_tcp[64], leaf_tcp[64];
  if (start(&root, "root", NULL, root_tcp, sizeof(root_tcp)) < 0 ||
      start(&mid, "mid", root_tcp, mid_tcp, sizeof(mid_tcp)) < 0 ||
      start(&leaf, "leaf", mid_tcp, leaf_tcp, sizeof(leaf_tcp)) < 0)
    return -1;
  snprintf(leaf_addr, sizeof(leaf_addr), "unix:%s/leaf.sock", dir);
  snprintf(mid_addr, sizeof(mid_addr), "unix:%s/mid.sock", dir);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = proc_stop(&leaf) != 0;
  bad |= proc_stop(&mid) != 0;
  bad |= proc_stop(&root) != 0;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  bad |= system(cmd) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

/* One rank of a world of 1 joins job "relaunch" through addr. Returns the
 * handle; *err gets the error text on failure. */
static int join(const char *addr, rdzv_rendezvous_t **out, char *err,
                size_t errlen) {
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr;
  o.job_id = "relaunch";
  o.round = "world";
  o.host = "hostL";
  o.local_rank = 0;
  o.local_size = 1;
  o.world_size = 1;
  o.timeout_s = 20;
  o.topology = "gpu=test\n";
  return rdzv_rendezvous_join(&o, out, err, errlen);
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
      fail_msg("launch %d through %s: %s (%s)", i + 1, addr,
               rdzv_strerror(rc), err);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_relaunch_two_levels_down, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_relaunch_one_level_down, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_relaunch_after_kill, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
