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
 * runs the same scripts under a real Slurm.
 *
 * The job's secret: each host's Prolog derives it from a site key made
 * here (rdzvctl site-key), the same on every host, and writes
 * RDZV_RUN_DIR/<job>.secret for the job's user (nobody here), mode 0400;
 * the ranks run as that user with the TaskProlog's RDZV_SECRET_FILE; the
 * Epilog removes it. A missing or readable site key, or an unknown
 * RDZV_AUTH, fails the Prolog before any daemon starts; RDZV_AUTH=off
 * runs without a secret and says so. RDZV_TLS_DIR (certificates from
 * tools/tls-certs.sh) starts every daemon of the job with TLS; one
 * without the files fails the Prolog before any daemon starts. */
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
static char extra_env[3][300] = {
    "RDZV_TEST_UNUSED1=", "RDZV_TEST_UNUSED2=", "RDZV_TEST_UNUSED3="};
/* The Prolog's site key (RDZV_SITE_KEY) and RDZV_AUTH: the key made in
 * dir and "required", but for one check at a time. */
static char site_key_env[160], auth_env[64] = "RDZV_AUTH=required";
/* The job's user: the Prolog gives it the socket and the secret. */
#define JOB_UID 65534

static int file_exists(const char *fmt, int h) {
  char path[256];
  snprintf(path, sizeof(path), fmt, dir, h);
  return access(path, F_OK) == 0;
}

/* The test's RDZV_PORT_BASE: job J's nodes try ports base + J mod 7 + 0..1
 * (RDZV_PORT_RANGE=7, RDZV_PORT_TRIES=2). Below Linux's ephemeral ports
 * (32768 and up), where other programs' outgoing connections (on a busy
 * machine, thousands) could hold a port the test's nodes need. */
static int port_base(void) { return 20000 + (int)(getpid() % 12000); }

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
  char uid_env[32], gid_env[32];
  snprintf(uid_env, sizeof(uid_env), "SLURM_JOB_UID=%d", JOB_UID);
  snprintf(gid_env, sizeof(gid_env), "SLURM_JOB_GID=%d", JOB_UID);
  char *argv[] = {"/usr/bin/env",
                  "RDZV_SETTINGS=/nonexistent",
                  uid_env,
                  gid_env,
                  site_key_env,
                  auth_env,
                  slurm_conf_env,
                  extra_env[0],
                  extra_env[1],
                  extra_env[2],
                  host,
                  listen,
                  rundir,
                  bin,
                  ctl,
                  base,
                  "RDZV_PORT_RANGE=7",
                  "RDZV_PORT_TRIES=2",
                  "RDZV_FANOUT=1",
                  "RDZV_TCPSTORE=1",
                  "RDZV_HTTP_ADDR=127.0.0.1",
                  "RDZV_HEALTH_CMD=test -n \"$RDZV_HEALTH_HOST\"",
                  "RDZV_START_TIMEOUT=10",
                  job_env,
                  "SLURM_STEP_ID=3",
                  "SLURM_JOB_NODELIST=127.0.0.[1-3]",
                  "/bin/sh",
                  "-c",
                  "exec \"$0\" 2>&1",
                  sc,
                  NULL};
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

/* Processes whose command line contains text (a daemon's --name=...),
 * and also text2 where it is not NULL. */
static int count_procs(const char *text, const char *text2) {
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
    n += strstr(buf, text) != NULL &&
         (text2 == NULL || strstr(buf, text2) != NULL);
  }
  closedir(d);
  return n;
}

/* Runs argv (NULL-terminated) with its stdout and stderr in *out (if not
 * NULL); returns its exit status. */
static int run_cmd(char *const argv[], char **out) {
  char *sh[64] = {"/bin/sh", "-c", "exec \"$@\" 2>&1", "sh"};
  int n = 4;
  for (int i = 0; argv[i] != NULL && n < 63; i++)
    sh[n++] = argv[i];
  sh[n] = NULL;
  struct proc p;
  assert_int_equal(proc_start(&p, sh, 1), 0);
  char *text = proc_read_all(&p);
  if (out != NULL)
    *out = text;
  else
    free(text);
  return proc_wait(&p);
}

/* Job's secret as `rdzvctl job-secret` derives it from the site key made
 * here: 64 hex digits, into out (65 bytes). */
static void derived_secret(int job, char *out) {
  char ctl[1200], key[160], jobs[24];
  snprintf(ctl, sizeof(ctl), "%s/tools/rdzvctl", cwd);
  snprintf(key, sizeof(key), "%s/site.key", dir);
  snprintf(jobs, sizeof(jobs), "%d", job);
  char *argv[] = {ctl, "job-secret", "--site-key", key, "--job", jobs, NULL};
  char *text = NULL;
  assert_int_equal(run_cmd(argv, &text), 0);
  assert_non_null(text);
  assert_int_equal(strlen(text), 65);
  memcpy(out, text, 64);
  out[64] = '\0';
  free(text);
}

/* Host h's secret file of job: a regular file of the job's user, mode
 * 0400, holding the secret derived from the site key and a newline; the
 * job's user reads it, another user cannot. */
static void check_secret_file(int job, int h) {
  char path[160], want[65], buf[128];
  struct stat st;
  snprintf(path, sizeof(path), "%s/host%d/%d.secret", dir, h, job);
  if (lstat(path, &st) != 0)
    fail_msg("job %d, host %d: no secret file %s", job, h, path);
  if (!S_ISREG(st.st_mode) || (st.st_mode & 07777) != 0400 ||
      st.st_uid != JOB_UID || st.st_gid != JOB_UID)
    fail_msg("job %d, host %d: %s has mode %04o, owner %u:%u (want a regular "
             "file, 0400, %d:%d)",
             job, h, path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
             (unsigned)st.st_gid, JOB_UID, JOB_UID);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  derived_secret(job, want);
  if (n != 65 || memcmp(buf, want, 64) != 0 || buf[64] != '\n')
    fail_msg("job %d, host %d: %s holds %zu bytes, not the secret derived "
             "from the site key and a newline",
             job, h, path, n);
  char uid[32], other[32];
  snprintf(uid, sizeof(uid), "--reuid=%d", JOB_UID);
  snprintf(other, sizeof(other), "--reuid=%d", JOB_UID - 1);
  char *as_user[] = {"/usr/bin/setpriv",
                     uid,
                     "--regid=65534",
                     "--clear-groups",
                     "/bin/cat",
                     path,
                     NULL};
  char *as_other[] = {"/usr/bin/setpriv",
                      other,
                      "--regid=65533",
                      "--clear-groups",
                      "/bin/cat",
                      path,
                      NULL};
  char *text = NULL;
  if (run_cmd(as_user, &text) != 0 || strncmp(text, want, 64) != 0)
    fail_msg("job %d, host %d: the job's user cannot read %s: %s", job, h, path,
             text);
  free(text);
  text = NULL;
  if (run_cmd(as_other, &text) == 0 ||
      strstr(text, "Permission denied") == NULL)
    fail_msg("job %d, host %d: uid %d read %s: [%s]", job, h, JOB_UID - 1, path,
             text);
  free(text);
}

/* rdzvctl without a secret through host h's node of job: "set" (k = v)
 * or "stats". Returns its exit status; *out gets its output. */
static int ctl_nosecret(int h, int job, const char *what, char **out) {
  char addr[160], ctl[1200], jobs[24];
  snprintf(addr, sizeof(addr), "unix:%s/host%d/%d.sock", dir, h, job);
  snprintf(ctl, sizeof(ctl), "%s/tools/rdzvctl", cwd);
  snprintf(jobs, sizeof(jobs), "%d", job);
  char *argv[] = {"/usr/bin/env",
                  "-u",
                  "RDZV_SECRET_FILE",
                  "-u",
                  "RDZV_SECRET",
                  ctl,
                  "--addr",
                  addr,
                  "--job",
                  jobs,
                  "--timeout",
                  "20",
                  (char *)what,
                  strcmp(what, "set") == 0 ? "k" : NULL,
                  "v",
                  NULL};
  return run_cmd(argv, out);
}

/* What the Prolog refuses about the secret, each before any daemon
 * starts and leaving no secret file: a missing site key, one others may
 * read, an unknown RDZV_AUTH. Then RDZV_AUTH=off: the daemons run
 * without a secret, the Prolog says so, the TaskProlog exports none. */
static void check_secret_prologs(void) {
  struct {
    const char *key; /* RDZV_SITE_KEY, relative to dir */
    const char *auth;
    const char *want[3];
  } cases[] = {
      {"none.key",
       "required",
       {"cannot make the job's secret from the site key",
        "No such file or directory", "rdzvctl site-key --out"}},
      {"readable.key",
       "required",
       {"has mode 0644: its group or others may access it",
        "copy it to every host, root's with mode 0400", NULL}},
      {"site.key",
       "sometimes",
       {"RDZV_AUTH in /nonexistent is 'sometimes': it must be 'required'", NULL,
        NULL}},
  };
  char cmd[400];
  snprintf(cmd, sizeof(cmd),
           "cp %s/site.key %s/readable.key && chmod 0644 %s/readable.key", dir,
           dir, dir);
  assert_int_equal(system(cmd), 0);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    snprintf(site_key_env, sizeof(site_key_env), "RDZV_SITE_KEY=%s/%s", dir,
             cases[c].key);
    snprintf(auth_env, sizeof(auth_env), "RDZV_AUTH=%s", cases[c].auth);
    for (int h = 0; h < 2; h++) {
      char *out = NULL;
      int rc = run_job_script("prolog.sh", h, 4253, NULL, &out);
      assert_non_null(out);
      int ok = rc != 0;
      for (int w = 0; w < 3; w++)
        ok = ok && (cases[c].want[w] == NULL ||
                    strstr(out, cases[c].want[w]) != NULL);
      if (!ok)
        fail_msg("prolog with RDZV_SITE_KEY=%s RDZV_AUTH=%s on host %d: "
                 "status %d, output [%s]",
                 cases[c].key, cases[c].auth, h, rc, out);
      free(out);
      assert_false(file_exists("%s/host%d/4253.secret", h));
      assert_false(file_exists("%s/host%d/4253.node.pid", h));
      assert_false(file_exists("%s/host%d/4253.root.pid", h));
    }
    assert_int_equal(count_procs("--job=4253 ", NULL), 0);
  }
  /* RDZV_AUTH=off. */
  snprintf(site_key_env, sizeof(site_key_env), "RDZV_SITE_KEY=%s/none.key",
           dir);
  snprintf(auth_env, sizeof(auth_env), "RDZV_AUTH=off");
  for (int h = 0; h < 3; h++) {
    char *out = NULL;
    assert_int_equal(run_job_script("prolog.sh", h, 4254, NULL, &out), 0);
    if (strstr(out, "RDZV_AUTH=off in /nonexistent: the job's daemons run "
                    "without a secret") == NULL)
      fail_msg("prolog with RDZV_AUTH=off on host %d does not say so: [%s]", h,
               out);
    free(out);
    assert_false(file_exists("%s/host%d/4254.secret", h));
    assert_true(file_exists("%s/host%d/4254.node.port", h));
    out = NULL;
    assert_int_equal(run_job_script("task-prolog.sh", h, 4254, NULL, &out), 0);
    if (strstr(out, "RDZV_SECRET_FILE") != NULL)
      fail_msg("task prolog with RDZV_AUTH=off: [%s]", out);
    free(out);
  }
  assert_int_equal(count_procs("--job=4254 ", NULL), 4);
  assert_int_equal(count_procs("--job=4254 ", "--secret-file"), 0);
  /* Its daemons serve without a secret (the hosts' nodes reach the root
   * through each other). */
  char *text = NULL;
  if (ctl_nosecret(2, 4254, "set", &text) != 0)
    fail_msg("set through job 4254's node (RDZV_AUTH=off): [%s]", text);
  free(text);
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_job_script("epilog.sh", h, 4254, NULL, NULL), 0);
  assert_int_equal(count_procs("--job=4254 ", NULL), 0);
  snprintf(site_key_env, sizeof(site_key_env), "RDZV_SITE_KEY=%s/site.key",
           dir);
  snprintf(auth_env, sizeof(auth_env), "RDZV_AUTH=required");
}

/* The first number after "name": in a daemon's statistics' object
 * "obj" (-1 if none). */
static long stat_in(const char *json, const char *obj, const char *name) {
  const char *o = strstr(json, obj);
  const char *k = o != NULL ? strstr(o, name) : NULL;
  if (k == NULL)
    return -1;
  k += strlen(name);
  while (*k != '\0' && (*k < '0' || *k > '9'))
    k++;
  return *k != '\0' ? strtol(k, NULL, 10) : -1;
}

/* RDZV_TLS_DIR: a directory without the certificates fails the Prolog
 * before any daemon starts; with them, every daemon of the job starts
 * with --tls-dir, a key set through the last host's node goes up through
 * the others over TLS, and the first host's node counted its handshakes
 * (its root's link and its child's). */
static void check_tls_prologs(void) {
  char cmd[1500], *out = NULL;
  snprintf(cmd, sizeof(cmd), "%s/tools/tls-certs.sh %s/tls >/dev/null", cwd,
           dir);
  assert_int_equal(system(cmd), 0);
  snprintf(site_key_env, sizeof(site_key_env), "RDZV_SITE_KEY=%s/none.key",
           dir);
  snprintf(auth_env, sizeof(auth_env), "RDZV_AUTH=off");
  snprintf(extra_env[0], sizeof(extra_env[0]), "RDZV_TLS_DIR=%s/notls", dir);
  assert_int_not_equal(run_job_script("prolog.sh", 0, 4256, NULL, &out), 0);
  if (strstr(out, "notls/tls.crt is missing or unreadable") == NULL)
    fail_msg("prolog with an empty RDZV_TLS_DIR: [%s]", out);
  free(out);
  assert_int_equal(count_procs("--job=4256 ", NULL), 0);
  snprintf(extra_env[0], sizeof(extra_env[0]), "RDZV_TLS_DIR=%s/tls", dir);
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_job_script("prolog.sh", h, 4255, NULL, NULL), 0);
  assert_int_equal(count_procs("--job=4255 ", "--tls-dir="), 4);
  char *text = NULL;
  if (ctl_nosecret(2, 4255, "set", &text) != 0)
    fail_msg("set through job 4255's node over TLS: [%s]", text);
  free(text);
  text = NULL;
  assert_int_equal(ctl_nosecret(0, 4255, "stats", &text), 0);
  long hs = stat_in(text, "\"tls\"", "\"handshakes\""),
       failed = stat_in(text, "\"tls\"", "\"failed\"");
  if (hs < 2 || failed != 0)
    fail_msg("host 0's node over TLS: handshakes %ld, failed %ld: [%s]", hs,
             failed, text);
  free(text);
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_job_script("epilog.sh", h, 4255, NULL, NULL), 0);
  assert_int_equal(count_procs("--job=4255 ", NULL), 0);
  snprintf(extra_env[0], sizeof(extra_env[0]), "RDZV_TEST_UNUSED1=");
  snprintf(site_key_env, sizeof(site_key_env), "RDZV_SITE_KEY=%s/site.key",
           dir);
  snprintf(auth_env, sizeof(auth_env), "RDZV_AUTH=required");
}

/* Jobs whose ports overlap share the hosts up to RDZV_PORT_TRIES; a
 * Prolog that cannot start its daemons fails, says why, and leaves no
 * daemon or pid file of that job behind; the daemons that hold the ports
 * are not disturbed. */
static void check_failed_prologs(void) {
  /* Job 4249 is 4242 mod RDZV_PORT_RANGE (7): its nodes take the range's
   * second port on every host. */
  for (int h = 0; h < 3; h++) {
    char *out = NULL;
    int rc = run_job_script("prolog.sh", h, 4249, NULL, &out);
    if (rc != 0)
      fail_msg("prolog of job 4249 on host %d: status %d, output [%s]", h, rc,
               out);
    free(out);
  }
  char pf[128];
  snprintf(pf, sizeof(pf), "%s/host1/4249.node.port", dir);
  assert_int_equal(wait_port_file(pf, 5), port_base() + 4242 % 7 + 1);
  /* Its own secret, not job 4242's. */
  check_secret_file(4249, 1);
  char s4242[65], s4249[65];
  derived_secret(4242, s4242);
  derived_secret(4249, s4249);
  assert_string_not_equal(s4242, s4249);
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
    assert_false(file_exists("%s/host%d/4256.secret", h));
  }
  assert_int_equal(count_procs("--name=root-4256", NULL), 0);
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_job_script("epilog.sh", h, 4249, NULL, NULL), 0);
  assert_int_equal(count_procs("--name=root-4249", NULL), 0);
  for (int h = 0; h < 3; h++)
    assert_false(file_exists("%s/host%d/4249.secret", h));
  check_secret_prologs();
  check_tls_prologs();
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
  if (crc == 0 ||
      strstr(cout, "lacks PrologFlags=Alloc (PrologFlags=Serial)") == NULL)
    fail_msg("prolog without PrologFlags=Alloc: status %d, output [%s]", crc,
             cout);
  free(cout);
  assert_false(file_exists("%s/host%d/4251.root.pid", 0));
  assert_int_equal(count_procs("--name=root-4251", NULL), 0);
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
             "status %d, %s created, output [%s]",
             src, target, sout);
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
  /* ... and the secret it had written went with it. */
  assert_false(file_exists("%s/host%d/4250.secret", 1));
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
  static const uint8_t set_get[] = {
      0, 3, 0, 0,   0,   0, 0, 0, 0, '/', 'k', 'x', 2, 0, 0,   0,   0,
      0, 0, 0, 'v', '1', 2, 3, 0, 0, 0,   0,   0,   0, 0, '/', 'k', 'x'};
  static const uint8_t wait_get[] = {5, 1, 0, 0, 0, 0, 0,   0,   0,   3,  0,
                                     0, 0, 0, 0, 0, 0, '/', 'k', 'x', 2,  3,
                                     0, 0, 0, 0, 0, 0, 0,   '/', 'k', 'x'};
  static const uint8_t blob[] = {2, 0, 0, 0, 0, 0, 0, 0, 'v', '1'};
  uint8_t out[16];
  assert_int_equal(ts_exchange(port_host1, set_get, sizeof(set_get), out, 10),
                   10);
  assert_memory_equal(out, blob, 10);
  assert_int_equal(ts_exchange(port_host3, wait_get, sizeof(wait_get), out, 11),
                   11);
  assert_int_equal(out[0], 0); /* STOP_WAITING */
  assert_memory_equal(out + 1, blob, 10);
}

/* RDZV_HTTP_ADDR=127.0.0.1: each host's node serves operators' HTTP on
 * the port the Prolog's port file names; its /readyz answers 200 ("ok":
 * its link to its parent is up) and its /metrics holds the node's role. */
static void check_http(void) {
  for (int h = 0; h < 3; h++) {
    char path[256], buf[8192];
    snprintf(path, sizeof(path), "%s/host%d/4242.http.port", dir, h);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      fail_msg("no HTTP port file %s", path);
    int port = 0;
    assert_int_equal(fscanf(f, "%d", &port), 1);
    fclose(f);
    static const char readyz[] =
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    memset(buf, 0, sizeof(buf));
    int n = ts_exchange(port, readyz, sizeof(readyz) - 1, (uint8_t *)buf,
                        sizeof(buf) - 1);
    if (n <= 0 || strncmp(buf, "HTTP/1.1 200", 12) != 0 ||
        strstr(buf, "\r\n\r\nok\n") == NULL)
      fail_msg("host %d's node /readyz on port %d: [%s]", h + 1, port, buf);
    static const char metrics[] =
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    memset(buf, 0, sizeof(buf));
    n = ts_exchange(port, metrics, sizeof(metrics) - 1, (uint8_t *)buf,
                    sizeof(buf) - 1);
    if (n <= 0 || strstr(buf, "role=\"node\"} 1") == NULL)
      fail_msg("host %d's node /metrics on port %d: [%.300s]", h + 1, port,
               buf);
  }
}

/* rdzvctl against job 4242's daemons with the secret file given (NULL:
 * none, RDZV_SECRET_FILE and RDZV_SECRET unset) at addr: its status, and
 * its output in *out. */
static int ctl_with_secret(const char *secret_file, const char *addr,
                           const char *cmd, char **out) {
  char ctl[1200], env[200];
  snprintf(ctl, sizeof(ctl), "%s/tools/rdzvctl", cwd);
  snprintf(env, sizeof(env), "RDZV_SECRET_FILE=%s",
           secret_file != NULL ? secret_file : "");
  char *argv[] = {"/usr/bin/env",
                  "-u",
                  "RDZV_SECRET",
                  "-u",
                  "RDZV_SECRET_FILE",
                  env,
                  ctl,
                  "--addr",
                  (char *)addr,
                  "--job",
                  "4242",
                  "--timeout",
                  "10",
                  (char *)cmd,
                  "k",
                  "v",
                  NULL};
  if (secret_file == NULL)
    argv[5] = "RDZV_TEST_NO_SECRET=1";
  return run_cmd(argv, out);
}

/* A number from the stats of job 4242's daemon at addr (tcp:HOST:PORT),
 * asked with the job's secret file; -1 if they cannot be read. */
static int64_t node_auth_stat(const char *secret_file, const char *addr,
                              const char *path) {
  char ctl[1200], env[200];
  snprintf(ctl, sizeof(ctl), "%s/tools/rdzvctl", cwd);
  snprintf(env, sizeof(env), "RDZV_SECRET_FILE=%s", secret_file);
  char *argv[] = {
      "/usr/bin/env", "-u",         "RDZV_SECRET", env,    ctl,
      "--addr",       (char *)addr, "--job",       "4242", "--timeout",
      "10",           "stats",      NULL};
  char *out = NULL;
  int rc = run_cmd(argv, &out);
  int64_t v = rc == 0 ? stats_get(out, path) : -1;
  free(out);
  return v;
}

/* Job 4242's nodes refuse whoever lacks its secret: rdzvctl with no
 * secret at a node's TCP port and at its Unix socket, and with another
 * job's secret (derived from the same site key), each refused with
 * RDZV_EAUTH; with the job's own secret file the same command works. A
 * daemon without the secret that poses as a child node is refused too.
 * port: the first port of the job's nodes. */
static void check_refused(int port) {
  char tcp[64], sock[160], other[160], own[160];
  snprintf(tcp, sizeof(tcp), "tcp:127.0.0.2:%d", port);
  snprintf(sock, sizeof(sock), "unix:%s/host1/4242.sock", dir);
  snprintf(own, sizeof(own), "%s/host1/4242.secret", dir);
  /* Another job's secret, as its Prolog would have written it. */
  snprintf(other, sizeof(other), "%s/other.secret", dir);
  char ctl[1200], key[160];
  snprintf(ctl, sizeof(ctl), "%s/tools/rdzvctl", cwd);
  snprintf(key, sizeof(key), "%s/site.key", dir);
  char *mk[] = {ctl,    "job-secret", "--site-key", key, "--job",
                "4243", "--out",      other,        NULL};
  assert_int_equal(run_cmd(mk, NULL), 0);
  struct {
    const char *secret, *addr, *what;
  } refused[] = {
      {NULL, tcp, "no secret, at the node's TCP port"},
      {NULL, sock, "no secret, at the node's Unix socket"},
      {other, tcp, "job 4243's secret, at the node's TCP port"},
  };
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    char *out = NULL;
    int rc = ctl_with_secret(refused[i].secret, refused[i].addr, "set", &out);
    if (rc == 0 || strstr(out, "RDZV_EAUTH") == NULL)
      fail_msg("rdzvctl set with %s: status %d, output [%s] (want a "
               "refusal, RDZV_EAUTH)",
               refused[i].what, rc, out);
    free(out);
  }
  char *out = NULL;
  int rc = ctl_with_secret(own, tcp, "set", &out);
  if (rc != 0)
    fail_msg("rdzvctl set with the job's secret at %s: status %d, [%s]", tcp,
             rc, out);
  free(out);
  /* A daemon without the secret posing as a child node of host 1's: it
   * takes a client's set (it asks no secret itself), but its hello to the
   * node carries no proof and is refused (the node counts it in
   * auth.no_nonce), so the key never reaches the job. */
  int64_t before = node_auth_stat(own, tcp, "auth.no_nonce");
  assert_true(before >= 0);
  struct proc fake;
  char fake_tcp[64], parent[64], fake_addr[80];
  snprintf(parent, sizeof(parent), "127.0.0.2:%d", port);
  const char *fx[] = {"--job=4242", NULL};
  const char *saved = getenv("RDZV_SECRET_FILE");
  char keep[200];
  snprintf(keep, sizeof(keep), "%s", saved != NULL ? saved : "");
  unsetenv("RDZV_SECRET_FILE");
  assert_int_equal(daemon_start(&fake, dir, "fake-child", parent, fx, fake_tcp),
                   0);
  if (keep[0] != '\0')
    setenv("RDZV_SECRET_FILE", keep, 1);
  snprintf(fake_addr, sizeof(fake_addr), "tcp:%s", fake_tcp);
  char *fset[] = {"/usr/bin/env",
                  "-u",
                  "RDZV_SECRET",
                  "-u",
                  "RDZV_SECRET_FILE",
                  ctl,
                  "--addr",
                  fake_addr,
                  "--job",
                  "4242",
                  "--timeout",
                  "3",
                  "set",
                  "from-fake",
                  "v",
                  NULL};
  out = NULL;
  rc = run_cmd(fset, &out);
  if (rc == 0)
    fail_msg("a set through a child node without the secret succeeded: [%s]",
             out);
  free(out);
  int64_t after = node_auth_stat(own, tcp, "auth.no_nonce");
  assert_int_equal(proc_stop(&fake), 0);
  if (after <= before)
    fail_msg("host 1's node did not refuse the fake child's hello: "
             "auth.no_nonce %lld then %lld",
             (long long)before, (long long)after);
  out = NULL;
  char *get[] = {"/usr/bin/env",
                 "-u",
                 "RDZV_SECRET",
                 "RDZV_SECRET_FILE=",
                 ctl,
                 "--addr",
                 tcp,
                 "--job",
                 "4242",
                 "--timeout",
                 "5",
                 "get",
                 "from-fake",
                 NULL};
  char sfe[200];
  snprintf(sfe, sizeof(sfe), "RDZV_SECRET_FILE=%s", own);
  get[3] = sfe;
  rc = run_cmd(get, &out);
  if (rc != 1 || strstr(out, "not found") == NULL)
    fail_msg("the fake child's key reached the job: status %d, [%s]", rc, out);
  free(out);
}

static void test_prolog_task_prolog_epilog(void **state) {
  (void)state;
  assert_non_null(getcwd(cwd, sizeof(cwd)));
  snprintf(dir, sizeof(dir), "/tmp/rdzv-slurm-XXXXXX");
  assert_non_null(mkdtemp(dir));
  /* The job's user (nobody) reaches its sockets and secrets in here. */
  assert_int_equal(chmod(dir, 0711), 0);
  /* The site key every host's Prolog derives the secrets from, as an
   * admin makes it; and rdzv-example where the job's user may run it. */
  char cmd[6000];
  snprintf(cmd, sizeof(cmd),
           "%s/tools/rdzvctl site-key --out %s/site.key && "
           "cp %s/tools/rdzv-example %s/rdzv-example && "
           "chmod 0755 %s/rdzv-example",
           cwd, dir, cwd, dir, dir);
  assert_int_equal(system(cmd), 0);
  snprintf(site_key_env, sizeof(site_key_env), "RDZV_SITE_KEY=%s/site.key",
           dir);
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_script("prolog.sh", h, NULL), 0);
  assert_true(file_exists("%s/host%d/4242.root.pid", 0));
  assert_false(file_exists("%s/host%d/4242.root.pid", 1));
  for (int h = 0; h < 3; h++)
    assert_true(file_exists("%s/host%d/4242.node.port", h));
  /* Every host made the same secret, the job's user's alone, and gave it
   * to its daemons (the first host's root and node both). */
  for (int h = 0; h < 3; h++) {
    check_secret_file(4242, h);
    char opt[200];
    snprintf(opt, sizeof(opt), "--secret-file=%s/host%d/4242.secret ", dir, h);
    assert_int_equal(count_procs("--job=4242 ", opt), h == 0 ? 2 : 1);
  }
  check_failed_prologs();
  struct proc ranks[6];
  int ts_port[3] = {0, 0, 0};
  for (int i = 0; i < 6; i++) {
    char *env = NULL;
    assert_int_equal(run_script("task-prolog.sh", i / 2, &env), 0);
    char addr[256] = "", job[64] = "";
    assert_int_equal(
        sscanf(env, "export RDZV_ADDR=%255s export RDZV_JOB=%63s", addr, job),
        2);
    const char *mp = strstr(env, "export MASTER_PORT=");
    assert_non_null(mp);
    ts_port[i / 2] = atoi(mp + strlen("export MASTER_PORT="));
    assert_non_null(strstr(env, "export MASTER_ADDR=127.0.0.1\n"));
    assert_non_null(strstr(env, "export TORCHELASTIC_USE_AGENT_STORE=True\n"));
    /* The step's own key space: torch prefixes keys with it. */
    assert_non_null(strstr(env, "export TORCHELASTIC_RESTART_COUNT=3\n"));
    /* The job's secret, by its file's name. */
    char sf[200], want_sf[200];
    snprintf(want_sf, sizeof(want_sf),
             "export RDZV_SECRET_FILE=%s/host%d/4242.secret\n", dir, i / 2);
    if (strstr(env, want_sf) == NULL)
      fail_msg("the task prolog does not export [%s]: [%s]", want_sf, env);
    snprintf(sf, sizeof(sf), "RDZV_SECRET_FILE=%s/host%d/4242.secret", dir,
             i / 2);
    free(env);
    char a[300], j[80], hn[40], lr[32];
    snprintf(a, sizeof(a), "RDZV_ADDR=%s", addr);
    snprintf(j, sizeof(j), "RDZV_JOB=%s", job);
    snprintf(hn, sizeof(hn), "RDZV_HOST=127.0.0.%d", i / 2 + 1);
    snprintf(lr, sizeof(lr), "SLURM_LOCALID=%d", i % 2);
    char ex[200], uid[32];
    snprintf(ex, sizeof(ex), "%s/rdzv-example", dir);
    snprintf(uid, sizeof(uid), "--reuid=%d", JOB_UID);
    /* As the job's user, as Slurm runs a task. */
    char *argv[] = {"/usr/bin/setpriv",
                    uid,
                    "--regid=65534",
                    "--clear-groups",
                    "/usr/bin/env",
                    "-u",
                    "RDZV_SECRET",
                    a,
                    j,
                    hn,
                    lr,
                    sf,
                    "SLURM_NTASKS=6",
                    "SLURM_NTASKS_PER_NODE=2",
                    ex,
                    "--nccl",
                    "none",
                    "--timeout",
                    "60",
                    NULL};
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
  /* The client library takes the secret from RDZV_SECRET_FILE, as a
   * task's does. */
  char host2_secret[160];
  snprintf(host2_secret, sizeof(host2_secret), "%s/host2/4242.secret", dir);
  assert_int_equal(setenv("RDZV_SECRET_FILE", host2_secret, 1), 0);
  rdzv_client_opts_init(&o);
  o.addr = sock;
  /* The node holds job 4242's secret only (--job): stats as that job. */
  o.job_id = "4242";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  assert_int_equal(rdzv_store_stats(c, &json, 10), 0);
  if (strstr(json, want) == NULL)
    fail_msg("host 3's node lacks its ancestors (%s): %s", want, json);
  /* RDZV_HEALTH_CMD: the node checked its host before admitting it. */
  if (stats_get(json, "health_checks") < 1 ||
      stats_get(json, "health_failed") != 0)
    fail_msg("host 3's node ran no passing health check: %s", json);
  rdzv_free(json);
  rdzv_client_destroy(c);
  /* ... given by the Prolog, before any hello told it. */
  char chain[96];
  snprintf(chain, sizeof(chain), "--parent=127.0.0.2:%d-%d,127.0.0.1:%d-%d",
           first, first + 1, first, first + 1);
  assert_int_equal(count_procs(chain, NULL), 1);
  check_tcpstore(ts_port[0], ts_port[2]);
  check_http();
  check_refused(first);
  unsetenv("RDZV_SECRET_FILE");
  for (int h = 0; h < 3; h++)
    assert_int_equal(run_script("epilog.sh", h, NULL), 0);
  for (int h = 0; h < 3; h++) {
    assert_false(file_exists("%s/host%d/4242.secret", h));
    assert_false(file_exists("%s/host%d/4242.sock", h));
    assert_false(file_exists("%s/host%d/4242.sock.lock", h));
    assert_false(file_exists("%s/host%d/4242.node.pid", h));
    assert_false(file_exists("%s/host%d/4242.node.port", h));
  }
  assert_false(file_exists("%s/host%d/4242.root.port", 0));
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prolog_task_prolog_epilog),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
