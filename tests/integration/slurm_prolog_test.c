/* deploy/slurm end to end without Slurm: the Prolog starts the job's node
 * (and, on the first host, the root) on 3 simulated hosts, the TaskProlog
 * gives ranks their address and job id, 6 rdzv-example ranks (2 a host)
 * complete the rendezvous through the tree the Prolog built, and the
 * Epilog stops every daemon and removes its files. A second job whose
 * ports overlap the first's shares the hosts (RDZV_PORT_TRIES=2: its nodes
 * take the range's next port); Prologs that cannot start their daemons (a
 * third such job, a daemon that exits at once) fail with a message and
 * leave nothing running. The hosts are 127.0.0.1-3, so every host's name
 * resolves and each binds its own loopback address; the Prolog expands
 * the host list itself (rdzvctl tree-position). tests/slurm:slurm_test
 * runs the same scripts under a real Slurm. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"

static char dir[64], cwd[1024];
/* The Prolog's SLURM_CONF (where it reads PrologFlags): none by default. */
static char slurm_conf_env[160] = "SLURM_CONF=/nonexistent";
/* More of the Prolog's environment, for one check at a time. */
static char extra_env[3][300] = {"RDZV_TEST_UNUSED1=", "RDZV_TEST_UNUSED2=",
                                 "RDZV_TEST_UNUSED3="};

static int file_exists(const char *fmt, int h) {
  char path[256];
  snprintf(path, sizeof(path), fmt, dir, h);
  return access(path, F_OK) == 0;
}

/* The test's RDZV_PORT_BASE: job J's nodes try ports base + J mod 7 + 0..1
 * (RDZV_PORT_RANGE=7, RDZV_PORT_TRIES=2). */
static int port_base(void) { return 20000 + (int)(getpid() % 20000); }

/* Runs a deploy script for host h with job's Slurm environment, and bin
 * as RDZV_BIN (NULL: the rdzvd built here). *out (if not NULL) gets its
 * stdout and stderr. */
static int run_job_script(const char *script, int h, int job,
                          const char *bin_path, char **out) {
  char host[32], rundir[128], bin[1200], ctl[1200], sc[1200], job_env[48];
  snprintf(sc, sizeof(sc), "%s/deploy/slurm/%s", cwd, script);
  snprintf(ctl, sizeof(ctl), "RDZVCTL_BIN=%s/tools/rdzvctl", cwd);
  snprintf(host, sizeof(host), "RDZV_HOSTNAME=127.0.0.%d", h + 1);
  char listen[48];
  snprintf(listen, sizeof(listen), "RDZV_LISTEN_ADDR=127.0.0.%d", h + 1);
  snprintf(rundir, sizeof(rundir), "RDZV_RUN_DIR=%s/host%d", dir, h);
  if (bin_path != NULL)
    snprintf(bin, sizeof(bin), "RDZV_BIN=%s", bin_path);
  else
    snprintf(bin, sizeof(bin), "RDZV_BIN=%s/tools/rdzvd", cwd);
  snprintf(job_env, sizeof(job_env), "SLURM_JOB_ID=%d", job);
  char base[48];
  snprintf(base, sizeof(base), "RDZV_PORT_BASE=%d", port_base());
  char *argv[] = {"/usr/bin/env", "RDZV_SETTINGS=/nonexistent",
                  slurm_conf_env, extra_env[0], extra_env[1], extra_env[2],
                  host, listen,
                  rundir, bin, ctl, base, "RDZV_PORT_RANGE=7",
                  "RDZV_PORT_TRIES=2", "RDZV_FANOUT=1", "RDZV_TCPSTORE=1",
                  "RDZV_START_TIMEOUT=10", job_env, "SLURM_STEP_ID=3",
                  "SLURM_JOB_NODELIST=127.0.0.[1-3]", "/bin/sh", "-c",
                  "exec \"$0\" 2>&1", sc, NULL};
  struct proc p;
  assert_int_equal(proc_start(&p, argv, 1), 0);
  char *text = proc_read_all(&p);
  if (out != NULL)
    *out = text;
  else
    free(text);
  return proc_wait(&p);
}

static int run_script(const char *script, int h, char **out) {
  return run_job_script(script, h, 4242, NULL, out);
}

/* Processes whose command line contains text (a daemon's --name=...). */
static int count_procs(const char *text) {
  int n = 0;
  DIR *d = opendir("/proc");
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char path[300], buf[4096];
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      continue;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (size_t i = 0; i < len; i++)
      if (buf[i] == '\0')
        buf[i] = ' ';
    buf[len] = '\0';
    n += strstr(buf, text) != NULL;
  }
  closedir(d);
  return n;
}

/* Jobs whose ports overlap share the hosts up to RDZV_PORT_TRIES; a
 * Prolog that cannot start its daemons fails, says why, and leaves no
 * daemon or pid file of that job behind; the daemons that hold the ports
 * are not disturbed. */
static void check_failed_prologs(void) {
  /* Job 4249 is 4242 mod RDZV_PORT_RANGE (7): its nodes take the range's
   * second port on every host. */
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_job_script("prolog.sh", h, 4249, NULL, NULL), 0);
  char pf[128];
  snprintf(pf, sizeof(pf), "%s/host1/4249.node.port", dir);
  assert_int_equal(wait_port_file(pf, 5), port_base() + 4242 % 7 + 1);
  /* Job 4256 too: both ports are taken on every host. On host 0 its root
   * starts (port 0) and must be stopped. */
  for (int h = 0; h < 3; h++) {
    char *out = NULL;
    int rc = run_job_script("prolog.sh", h, 4256, NULL, &out);
    assert_non_null(out);
    if (rc == 0 || strstr(out, "the rdzv node daemon did not start") == NULL ||
        strstr(out, "every port is in use (other jobs on this host") == NULL ||
        strstr(out, "raise RDZV_PORT_TRIES") == NULL ||
        strstr(out, "address already in use") == NULL)
      fail_msg("prolog of job 4256 on host %d: status %d, output [%s]", h, rc,
               out);
    free(out);
    assert_false(file_exists("%s/host%d/4256.node.pid", h));
    assert_false(file_exists("%s/host%d/4256.root.pid", h));
    assert_false(file_exists("%s/host%d/4256.sock", h));
  }
  assert_int_equal(count_procs("--name=root-4256"), 0);
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_job_script("epilog.sh", h, 4249, NULL, NULL), 0);
  assert_int_equal(count_procs("--name=root-4249"), 0);
  /* A slurm.conf without PrologFlags=Alloc: refused before any daemon
   * starts, saying what to add. */
  char conf[128];
  snprintf(conf, sizeof(conf), "%s/slurm.conf", dir);
  FILE *cf = fopen(conf, "w");
  assert_non_null(cf);
  fputs("ClusterName=x\nPrologFlags=Serial\n", cf);
  fclose(cf);
  snprintf(slurm_conf_env, sizeof(slurm_conf_env), "SLURM_CONF=%s", conf);
  char *cout = NULL;
  int crc = run_job_script("prolog.sh", 0, 4251, NULL, &cout);
  snprintf(slurm_conf_env, sizeof(slurm_conf_env), "SLURM_CONF=/nonexistent");
  assert_non_null(cout);
  if (crc == 0 || strstr(cout, "lacks PrologFlags=Alloc (PrologFlags=Serial)") ==
                      NULL)
    fail_msg("prolog without PrologFlags=Alloc: status %d, output [%s]", crc,
             cout);
  free(cout);
  assert_false(file_exists("%s/host%d/4251.root.pid", 0));
  assert_int_equal(count_procs("--name=root-4251"), 0);
  /* A failure message goes to the job's output file as the job's user,
   * never as root: a file the user names in a directory only root may
   * write is not created. */
  char secret[128], target[200];
  snprintf(secret, sizeof(secret), "%s/root-only", dir);
  assert_int_equal(mkdir(secret, 0700), 0);
  snprintf(target, sizeof(target), "%s/planted", secret);
  snprintf(extra_env[0], sizeof(extra_env[0]), "SLURM_JOB_STDOUT=%s", target);
  snprintf(extra_env[1], sizeof(extra_env[1]), "SLURM_JOB_UID=65534");
  snprintf(extra_env[2], sizeof(extra_env[2]), "SLURM_JOB_GID=65534");
  char *sout = NULL;
  int src = run_job_script("prolog.sh", 1, 4252, "/bin/false", &sout);
  for (int i = 0; i < 3; i++)
    snprintf(extra_env[i], sizeof(extra_env[i]), "RDZV_TEST_UNUSED%d=", i);
  assert_non_null(sout);
  if (src == 0 || access(target, F_OK) == 0)
    fail_msg("prolog failure with SLURM_JOB_STDOUT in a root-only directory: "
             "status %d, %s created, output [%s]", src, target, sout);
  free(sout);
  /* The Prolog run again for a job whose node runs here: exits 0 and
   * leaves that node alone (slurmd may retry). */
  char *again = NULL;
  assert_int_equal(run_job_script("prolog.sh", 1, 4242, NULL, &again), 0);
  assert_non_null(again);
  if (strstr(again, "its node already runs") == NULL)
    fail_msg("prolog run twice: output [%s]", again);
  free(again);
  assert_true(file_exists("%s/host%d/4242.sock", 1));
  /* A daemon that exits at once (here: not rdzvd at all). */
  char *out = NULL;
  int rc = run_job_script("prolog.sh", 1, 4250, "/bin/false", &out);
  assert_non_null(out);
  if (rc == 0 ||
      strstr(out, "the rdzv node daemon did not start (it exited)") == NULL)
    fail_msg("prolog with RDZV_BIN=/bin/false: status %d, output [%s]", rc,
             out);
  free(out);
  assert_false(file_exists("%s/host%d/4250.node.pid", 1));
}


/* Sends req to a TCPStore port on 127.0.0.1 and reads want_len bytes of
 * reply (0: none expected) into out. Returns the bytes read, or -1. */
static int ts_exchange(int port, const void *req, size_t len, uint8_t *out,
                       size_t want_len) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(0x7f000001)};
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
      write(fd, req, len) != (ssize_t)len) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  size_t got = 0;
  while (got < want_len) {
    ssize_t k = read(fd, out + got, want_len - got);
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  close(fd);
  return (int)got;
}

/* The TCPStore front end the Prolog starts with RDZV_TCPSTORE=1: a key a
 * torch 1.13 client sets through host 1's node (legacy SET, then GET on
 * the same connection to know it landed) is read through host 3's node
 * (WAIT, then GET), so the tree carries PyTorch's keys between hosts. */
static void check_tcpstore(int port_host1, int port_host3) {
  static const uint8_t set_get[] = {0, 3, 0, 0, 0, 0, 0, 0, 0, '/', 'k', 'x',
                                    2, 0, 0, 0, 0, 0, 0, 0, 'v', '1',
                                    2, 3, 0, 0, 0, 0, 0, 0, 0, '/', 'k', 'x'};
  static const uint8_t wait_get[] = {5, 1, 0, 0, 0, 0, 0, 0, 0,
                                     3, 0, 0, 0, 0, 0, 0, 0, '/', 'k', 'x',
                                     2, 3, 0, 0, 0, 0, 0, 0, 0, '/', 'k', 'x'};
  static const uint8_t blob[] = {2, 0, 0, 0, 0, 0, 0, 0, 'v', '1'};
  uint8_t out[16];
  assert_int_equal(ts_exchange(port_host1, set_get, sizeof(set_get), out, 10),
                   10);
  assert_memory_equal(out, blob, 10);
  assert_int_equal(
      ts_exchange(port_host3, wait_get, sizeof(wait_get), out, 11), 11);
  assert_int_equal(out[0], 0); /* STOP_WAITING */
  assert_memory_equal(out + 1, blob, 10);
}

static void test_prolog_task_prolog_epilog(void **state) {
  (void)state;
  assert_non_null(getcwd(cwd, sizeof(cwd)));
  snprintf(dir, sizeof(dir), "/tmp/rdzv-slurm-XXXXXX");
  assert_non_null(mkdtemp(dir));
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_script("prolog.sh", h, NULL), 0);
  assert_true(file_exists("%s/host%d/4242.root.pid", 0));
  assert_false(file_exists("%s/host%d/4242.root.pid", 1));
  for (int h = 0; h < 3; h++)
    assert_true(file_exists("%s/host%d/4242.node.port", h));
  check_failed_prologs();
  struct proc ranks[6];
  int ts_port[3] = {0, 0, 0};
  for (int i = 0; i < 6; i++) {
    char *env = NULL;
    assert_int_equal(run_script("task-prolog.sh", i / 2, &env), 0);
    char addr[256] = "", job[64] = "";
    assert_int_equal(sscanf(env, "export RDZV_ADDR=%255s export RDZV_JOB=%63s",
                            addr, job), 2);
    const char *mp = strstr(env, "export MASTER_PORT=");
    assert_non_null(mp);
    ts_port[i / 2] = atoi(mp + strlen("export MASTER_PORT="));
    assert_non_null(strstr(env, "export MASTER_ADDR=127.0.0.1\n"));
    assert_non_null(strstr(env, "export TORCHELASTIC_USE_AGENT_STORE=True\n"));
    /* The step's own key space: torch prefixes keys with it. */
    assert_non_null(strstr(env, "export TORCHELASTIC_RESTART_COUNT=3\n"));
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
  /* The third host's node knows its chain up to the first host's node
   * (RDZV_FANOUT=1: host 2, then host 1): where it would reattach. */
  char sock[160], pfile[128], want[96];
  snprintf(sock, sizeof(sock), "unix:%s/host2/4242.sock", dir);
  snprintf(pfile, sizeof(pfile), "%s/host0/4242.node.port", dir);
  int first = port_base() + 4242 % 7;
  snprintf(want, sizeof(want), "\"ancestors\":[\"127.0.0.1:%d-%d\"", first,
           first + 1);
  assert_int_equal(wait_port_file(pfile, 5), first);
  char *json = NULL;
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = sock;
  o.job_id = "stats";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  assert_int_equal(rdzv_store_stats(c, &json, 10), 0);
  if (strstr(json, want) == NULL)
    fail_msg("host 3's node lacks its ancestors (%s): %s", want, json);
  rdzv_free(json);
  rdzv_client_destroy(c);
  /* ... given by the Prolog, before any hello told it. */
  char chain[96];
  snprintf(chain, sizeof(chain), "--parent=127.0.0.2:%d-%d,127.0.0.1:%d-%d",
           first, first + 1, first, first + 1);
  assert_int_equal(count_procs(chain), 1);
  check_tcpstore(ts_port[0], ts_port[2]);
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_script("epilog.sh", h, NULL), 0);
  for (int h = 0; h < 3; h++) {
    assert_false(file_exists("%s/host%d/4242.sock", h));
    assert_false(file_exists("%s/host%d/4242.sock.lock", h));
    assert_false(file_exists("%s/host%d/4242.node.pid", h));
    assert_false(file_exists("%s/host%d/4242.node.port", h));
  }
  assert_false(file_exists("%s/host%d/4242.root.port", 0));
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
