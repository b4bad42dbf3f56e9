/* deploy/slurm end to end without Slurm: the Prolog starts the job's node
 * (and, on the first host, the root) on 3 simulated hosts, the TaskProlog
 * gives ranks their address and job id, 6 rdzv-example ranks (2 a host)
 * complete the rendezvous through the tree the Prolog built, and the
 * Epilog stops every daemon and removes its files. `scontrol` is a test
 * double (a script printing the host list); the hosts are 127.0.0.1-3, so
 * every host's name resolves and each binds its own loopback address. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

static char dir[64], cwd[1024];

static void write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  chmod(path, mode);
}

/* Runs a deploy script for host h with the job's Slurm environment. */
static int run_script(const char *script, int h, char **out) {
  char path[3000], env_path[4200], host[32], rundir[128],
      bin[1200], sc[1200];
  snprintf(sc, sizeof(sc), "%s/deploy/slurm/%s", cwd, script);
  snprintf(path, sizeof(path), "%s", getenv("PATH") ? getenv("PATH") : "");
  snprintf(env_path, sizeof(env_path), "PATH=%s:%s", dir, path);
  snprintf(host, sizeof(host), "RDZV_HOSTNAME=127.0.0.%d", h + 1);
  char listen[48];
  snprintf(listen, sizeof(listen), "RDZV_LISTEN_ADDR=127.0.0.%d", h + 1);
  snprintf(rundir, sizeof(rundir), "RDZV_RUN_DIR=%s/host%d", dir, h);
  snprintf(bin, sizeof(bin), "RDZV_BIN=%s/tools/rdzvd", cwd);
  int job_port = 20000 + (int)(getpid() % 20000);
  char base[48];
  snprintf(base, sizeof(base), "RDZV_PORT_BASE=%d", job_port);
  char *argv[] = {"/usr/bin/env", env_path, host, listen, rundir, bin, base,
                  "RDZV_PORT_RANGE=7", "RDZV_FANOUT=1", "SLURM_JOB_ID=4242",
                  "SLURM_JOB_NODELIST=127.0.0.[1-3]", sc, NULL};
  struct proc p;
  assert_int_equal(proc_start(&p, argv, 1), 0);
  char *text = proc_read_all(&p);
  if (out != NULL)
    *out = text;
  else
    free(text);
  return proc_wait(&p);
}

static int file_exists(const char *fmt, int h) {
  char path[256];
  snprintf(path, sizeof(path), fmt, dir, h);
  return access(path, F_OK) == 0;
}

static void test_prolog_task_prolog_epilog(void **state) {
  (void)state;
  assert_non_null(getcwd(cwd, sizeof(cwd)));
  snprintf(dir, sizeof(dir), "/tmp/rdzv-slurm-XXXXXX");
  assert_non_null(mkdtemp(dir));
  char sc[128];
  snprintf(sc, sizeof(sc), "%s/scontrol", dir);
  /* Test double of `scontrol show hostnames 127.0.0.[1-3]`. */
  write_file(sc,
             "#!/bin/sh\n[ \"$1 $2\" = \"show hostnames\" ] || exit 2\n"
             "printf '127.0.0.1\\n127.0.0.2\\n127.0.0.3\\n'\n",
             0755);
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_script("prolog.sh", h, NULL), 0);
  assert_true(file_exists("%s/host%d/4242.root.pid", 0));
  assert_false(file_exists("%s/host%d/4242.root.pid", 1));
  struct proc ranks[6];
  for (int i = 0; i < 6; i++) {
    char *env = NULL;
    assert_int_equal(run_script("task-prolog.sh", i / 2, &env), 0);
    char addr[256] = "", job[64] = "";
    assert_int_equal(sscanf(env, "export RDZV_ADDR=%255s export RDZV_JOB=%63s",
                            addr, job), 2);
    free(env);
    char a[300], j[80], hn[40], lr[32];
    snprintf(a, sizeof(a), "RDZV_ADDR=%s", addr);
    snprintf(j, sizeof(j), "RDZV_JOB=%s", job);
    snprintf(hn, sizeof(hn), "RDZV_HOST=127.0.0.%d", i / 2 + 1);
    snprintf(lr, sizeof(lr), "SLURM_LOCALID=%d", i % 2);
    char ex[1200];
    snprintf(ex, sizeof(ex), "%s/tools/rdzv-example", cwd);
    char *argv[] = {"/usr/bin/env", a, j, hn, lr, "SLURM_NTASKS=6",
                    "SLURM_NTASKS_PER_NODE=2", ex, "--nccl", "none",
                    "--timeout", "60", NULL};
    assert_int_equal(proc_start(&ranks[i], argv, 1), 0);
  }
  int identical = 0;
  for (int i = 0; i < 6; i++) {
    char *out = proc_read_all(&ranks[i]);
    assert_non_null(out);
    identical += strstr(out, "ids identical on all 6 ranks") != NULL;
    free(out);
    assert_int_equal(proc_wait(&ranks[i]), 0);
  }
  assert_int_equal(identical, 1);
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_script("epilog.sh", h, NULL), 0);
  for (int h = 0; h < 3; h++) {
    assert_false(file_exists("%s/host%d/4242.sock", h));
    assert_false(file_exists("%s/host%d/4242.node.pid", h));
  }
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prolog_task_prolog_epilog),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
