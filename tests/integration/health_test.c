/* The host health gate (rdzvd --health-cmd) and quarantine with real
 * daemons: a root and one node whose health command is a script in the
 * test's directory; ranks are threads of this process (real librdzv
 * clients through the node's Unix socket); rdzvctl is the real binary.
 *   - healthy and unhealthy: host u0's check fails (its marker file), its
 *     rank is refused with RDZV_EQUARANTINED naming the host, the node
 *     and the check's last line; the healthy host h0 is admitted and saw
 *     RDZV_HEALTH_HOST, RDZV_JOB and RDZV_ROUND; the root lists u0
 *     (rdzvctl quarantine) and refuses it again even once healthy, until
 *     `rdzvctl quarantine clear u0`, after which it joins; a host
 *     cleared while the generation it failed in is still open is checked
 *     afresh and completes it;
 *   - by hand: `rdzvctl quarantine add` keeps a healthy host out;
 *   - a check that hangs: killed after --health-timeout-ms with its whole
 *     process group (the sleep it started is gone), and the host
 *     refused naming the timeout;
 *   - a spare that fails its check is quarantined, not parked.
 * No assertion depends on wall-clock time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

static char dir[64], root_tcp[64], root_addr[160], node_addr[160];
static char ctl_bin[300];
static struct proc root, node;

static void touch(const char *name) {
  char p[160];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fclose(f);
}

static int setup(void **state) {
  (void)state;
  char cwd[200];
  if (getcwd(cwd, sizeof(cwd)) == NULL)
    return -1;
  snprintf(ctl_bin, sizeof(ctl_bin), "%s/tools/rdzvctl", cwd);
  snprintf(dir, sizeof(dir), "/tmp/rdzv-health-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  /* The check: slow* hosts hang (a sleep in the background, its pid
   * kept); a host with a marker file fails with two lines of output;
   * every other host passes and says what it saw. */
  char script[160];
  snprintf(script, sizeof(script), "%s/check.sh", dir);
  FILE *f = fopen(script, "w");
  if (f == NULL)
    return -1;
  fprintf(f,
          "#!/bin/sh\n"
          "case \"$RDZV_HEALTH_HOST\" in slow*)\n"
          "  sleep 600 & echo $! > %s/slow.pid; wait; exit 0;;\n"
          "esac\n"
          "if [ -e %s/unhealthy-$RDZV_HEALTH_HOST ]; then\n"
          "  echo \"checking $RDZV_HEALTH_HOST\"\n"
          "  echo 'GPU 1: row remap failure' >&2\n"
          "  exit 2\n"
          "fi\n"
          "echo \"$RDZV_HEALTH_HOST $RDZV_JOB $RDZV_ROUND\" >> %s/passed\n",
          dir, dir, dir);
  fclose(f);
  chmod(script, 0755);
  static const char *const root_opts[] = {"--spare-wait-ms=300", NULL};
  if (daemon_start(&root, dir, "root", NULL, root_opts, root_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "root", root_addr, sizeof(root_addr));
  static char health[200];
  snprintf(health, sizeof(health), "--health-cmd=%s", script);
  const char *node_opts[] = {health, "--health-timeout-ms=1000", NULL};
  char tcp[64];
  if (daemon_start(&node, dir, "n0", root_tcp, node_opts, tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "n0", node_addr, sizeof(node_addr));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = proc_stop(&node) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  return bad ? -1 : 0;
}

/* ---- ranks ----------------------------------------------------------------- */

struct joiner {
  const char *job, *host;
  int world, role;
  int status;
  int32_t rank;
  char text[600];
  pthread_t t;
};

static void *join_main(void *arg) {
  struct joiner *j = arg;
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = node_addr;
  o.job_id = j->job;
  o.host = j->host;
  o.role = j->role;
  o.local_rank = 0;
  o.local_size = 1;
  o.world_size = j->world;
  o.timeout_s = 60;
  rdzv_rendezvous_t *r = NULL;
  j->rank = -1;
  j->status = rdzv_rendezvous_join(&o, &r, j->text, sizeof(j->text));
  if (j->status == 0) {
    j->rank = rdzv_rendezvous_rank(r);
    rdzv_rendezvous_destroy(r);
  }
  return NULL;
}

static void start(struct joiner *j, const char *job, const char *host,
                  int world, int role) {
  *j = (struct joiner){.job = job, .host = host, .world = world, .role = role};
  assert_int_equal(pthread_create(&j->t, NULL, join_main, j), 0);
}

static void finish(struct joiner *j) {
  pthread_join(j->t, NULL);
  printf("%s/%s: %s: %s\n", j->job, j->host, rdzv_err_name(j->status), j->text);
}

/* rdzvctl --addr ROOT --job job ARGS...: its stdout, and its status. */
static char *ctl(const char *job, int *status, const char *a1, const char *a2,
                 const char *a3) {
  char addr[200], jobarg[100];
  snprintf(addr, sizeof(addr), "--addr=%s", root_addr);
  snprintf(jobarg, sizeof(jobarg), "--job=%s", job);
  char *argv[] = {ctl_bin,    addr,       jobarg,     (char *)"quarantine",
                  (char *)a1, (char *)a2, (char *)a3, NULL};
  struct proc p;
  assert_int_equal(proc_start(&p, argv, 1), 0);
  char *out = proc_read_all(&p);
  *status = proc_wait(&p);
  assert_non_null(out);
  printf("rdzvctl quarantine %s %s: %s", a1 ? a1 : "", a2 ? a2 : "", out);
  return out;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_unhealthy_host_quarantined_until_cleared(void **state) {
  (void)state;
  touch("unhealthy-u0");
  struct joiner u, h;
  start(&u, "hq", "u0", 1, RDZV_MEMBER_ACTIVE);
  finish(&u);
  assert_int_equal(u.status, RDZV_EQUARANTINED);
  assert_non_null(strstr(u.text, "host u0 is quarantined"));
  assert_non_null(strstr(u.text, "node n0"));
  assert_non_null(strstr(u.text, "exit status 2"));
  assert_non_null(strstr(u.text, "GPU 1: row remap failure"));
  start(&h, "hq", "h0", 1, RDZV_MEMBER_ACTIVE);
  finish(&h);
  assert_int_equal(h.status, 0);
  assert_int_equal(h.rank, 0);
  /* The check saw the host, the job and the round. */
  char p[160];
  snprintf(p, sizeof(p), "%s/passed", dir);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  char line[200] = "";
  assert_non_null(fgets(line, sizeof(line), f));
  fclose(f);
  assert_string_equal(line, "h0 hq world\n");
  assert_true(stats_at_job(node_addr, "hq", "health_checks") >= 2);
  assert_true(stats_at_job(node_addr, "hq", "health_failed") >= 1);
  assert_int_equal(stats_at_job(root_addr, "hq", "quarantine_refused"), 1);
  int st = 0;
  char *out = ctl("hq", &st, NULL, NULL, NULL);
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "quarantined: u0: node n0: health check exit "
                              "status 2: GPU 1: row remap failure (round "
                              "world)"));
  free(out);
  /* Healthy now, still quarantined: the root refuses it. */
  snprintf(p, sizeof(p), "%s/unhealthy-u0", dir);
  assert_int_equal(unlink(p), 0);
  start(&u, "hq", "u0", 1, RDZV_MEMBER_ACTIVE);
  finish(&u);
  assert_int_equal(u.status, RDZV_EQUARANTINED);
  assert_int_equal(stats_at_job(root_addr, "hq", "quarantine_refused"), 2);
  /* Cleared: it joins. */
  out = ctl("hq", &st, "clear", "u0", NULL);
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "host u0 cleared"));
  free(out);
  out = ctl("hq", &st, NULL, NULL, NULL);
  assert_non_null(strstr(out, "no host is quarantined"));
  free(out);
  start(&u, "hq", "u0", 1, RDZV_MEMBER_ACTIVE);
  finish(&u);
  assert_int_equal(u.status, 0);
}

/* A host cleared while the generation it failed in is still open (h1
 * waits for a second rank) is checked afresh, not failed again by the
 * node's old verdict: healthy now, it completes the generation. */
static void test_cleared_while_generation_open(void **state) {
  (void)state;
  struct joiner h, u;
  start(&h, "open", "h1", 2, RDZV_MEMBER_ACTIVE);
  while (stats_at_job(root_addr, "open", "rounds.open.world.ranks") != 1)
    usleep(20 * 1000);
  touch("unhealthy-u1");
  start(&u, "open", "u1", 2, RDZV_MEMBER_ACTIVE);
  finish(&u);
  assert_int_equal(u.status, RDZV_EQUARANTINED);
  char p[160];
  snprintf(p, sizeof(p), "%s/unhealthy-u1", dir);
  assert_int_equal(unlink(p), 0);
  int st = 0;
  char *out = ctl("open", &st, "clear", "u1", NULL);
  assert_int_equal(st, 0);
  free(out);
  start(&u, "open", "u1", 2, RDZV_MEMBER_ACTIVE);
  finish(&u);
  assert_int_equal(u.status, 0);
  finish(&h);
  assert_int_equal(h.status, 0);
  assert_int_equal(h.rank + u.rank, 1); /* ranks 0 and 1 */
}

static void test_quarantine_by_hand(void **state) {
  (void)state;
  int st = 0;
  char *out = ctl("hand", &st, "add", "h9", "bad NIC (ticket 12)");
  assert_int_equal(st, 0);
  free(out);
  struct joiner h;
  start(&h, "hand", "h9", 1, RDZV_MEMBER_ACTIVE);
  finish(&h);
  assert_int_equal(h.status, RDZV_EQUARANTINED);
  assert_non_null(strstr(h.text, "bad NIC (ticket 12)"));
  out = ctl("hand", &st, "clear", "h8", NULL); /* never quarantined */
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "host h8 was not quarantined"));
  free(out);
  out = ctl("hand", &st, "add", "h9", NULL); /* no reason: usage */
  assert_int_equal(st, 2);
  free(out);
  out = ctl("hand", &st, "add", "h7", "  "); /* a blank one: usage */
  assert_int_equal(st, 2);
  free(out);
}

static void test_hung_check_killed(void **state) {
  (void)state;
  struct joiner s;
  start(&s, "slow", "slow0", 1, RDZV_MEMBER_ACTIVE);
  finish(&s);
  assert_int_equal(s.status, RDZV_EQUARANTINED);
  assert_non_null(strstr(s.text, "gave no verdict within --health-timeout-ms "
                                 "(1000 ms)"));
  /* The sleep the check started went with its process group. */
  char p[160];
  snprintf(p, sizeof(p), "%s/slow.pid", dir);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  int pid = 0;
  assert_int_equal(fscanf(f, "%d", &pid), 1);
  fclose(f);
  assert_true(pid > 0);
  /* Gone, or dead and not reaped yet (a zombie: its parent, the shell,
   * was killed too, and whoever inherits it may be slow to reap). */
  int gone = 0;
  for (int i = 0; i < 500 && !gone; i++) {
    char stat[64], buf[256] = "";
    snprintf(stat, sizeof(stat), "/proc/%d/stat", pid);
    FILE *sf = fopen(stat, "r");
    if (sf == NULL) {
      gone = errno == ENOENT;
    } else {
      size_t n = fread(buf, 1, sizeof(buf) - 1, sf);
      fclose(sf);
      buf[n] = '\0';
      const char *close_paren = strrchr(buf, ')');
      gone =
          close_paren != NULL && close_paren[1] == ' ' && close_paren[2] == 'Z';
    }
    if (!gone)
      usleep(10000);
  }
  assert_true(gone);
}

static void test_unhealthy_spare_not_parked(void **state) {
  (void)state;
  touch("unhealthy-s0");
  struct joiner a, s;
  start(&a, "sp", "a0", 1, RDZV_MEMBER_ACTIVE);
  finish(&a);
  assert_int_equal(a.status, 0);
  start(&s, "sp", "s0", 1, RDZV_MEMBER_SPARE);
  finish(&s);
  assert_int_equal(s.status, RDZV_EQUARANTINED);
  assert_non_null(strstr(s.text, "host s0 is quarantined"));
  char path[64];
  snprintf(path, sizeof(path), "quarantine.sp.quarantined_hosts");
  assert_int_equal(stats_at_job(root_addr, "sp", path), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unhealthy_host_quarantined_until_cleared),
      cmocka_unit_test(test_cleared_while_generation_open),
      cmocka_unit_test(test_quarantine_by_hand),
      cmocka_unit_test(test_hung_check_killed),
      cmocka_unit_test(test_unhealthy_spare_not_parked),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
