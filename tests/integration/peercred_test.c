/* Who may use a daemon's Unix socket, with real processes of other uids
 * (forked children of this test that drop to nobody's uid and group, as
 * setpriv --reuid=nobody --regid=nogroup --clear-groups does):
 *  - by default the socket is 0600 and its directory 0700 (the daemon
 *    set them): a stranger's connect fails with EACCES, first at the
 *    directory, then (the directory opened by the test) at the socket;
 *  - with both made world-accessible by the test, the daemon's uid check
 *    (SO_PEERCRED) refuses every stranger with RDZV_EAUTH, naming its uid
 *    and the daemon, counts each (auth.peer_refused, not proto_errors)
 *    and logs it, while a job of 4 allowed ranks (rdzv-example, this
 *    test's uid) completes its rendezvous through the same socket at the
 *    same time; one that connects and sends nothing is told all the same
 *    (the refusal comes before any hello is read);
 *  - a daemon with --allow-uids naming nobody makes the socket 0666 and
 *    its directory 0711, lets nobody in (a set and a get), and still
 *    refuses a uid it does not name.
 * Needs root (to become another uid); skipped, saying so, otherwise. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "store/wire/wire.h"

#define EXAMPLE "tools/rdzv-example"
/* Strangers' attempts while the allowed job runs. */
#define STRANGERS 40
/* A uid that no --allow-uids of this test names. */
#define OTHER_UID 12345

static char dir[64], dir2[64], node_sock[128], node_addr[160], log_path[128];
static struct proc root, node, open_root;
static uid_t nobody_uid;
static gid_t nobody_gid;
static int fds_before;

/* daemon_start with the daemon's stderr (its log) in path. */
static int start_logged(struct proc *p, const char *d, const char *name,
                        const char *parent, const char *const *extra,
                        const char *path) {
  char tcp[64];
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int saved = dup(2);
  if (fd < 0 || saved < 0)
    return -1;
  dup2(fd, 2);
  int rc = daemon_start(p, d, name, parent, extra, tcp);
  dup2(saved, 2);
  close(saved);
  close(fd);
  return rc;
}

static int setup(void **state) {
  (void)state;
  if (geteuid() != 0)
    return 0; /* each test skips, saying why */
  struct passwd *pw = getpwnam("nobody");
  if (pw == NULL || pw->pw_uid == 0 || pw->pw_uid == OTHER_UID)
    return -1;
  nobody_uid = pw->pw_uid;
  nobody_gid = pw->pw_gid;
  fds_before = count_open_fds();
  /* Under /tmp (1777), which every uid may traverse: what keeps a
   * stranger out is this directory's mode and the socket's. */
  snprintf(dir, sizeof(dir), "/tmp/rdzv-peer-XXXXXX");
  snprintf(dir2, sizeof(dir2), "/tmp/rdzv-peer2-XXXXXX");
  if (mkdtemp(dir) == NULL || mkdtemp(dir2) == NULL)
    return -1;
  /* Open for all to begin with: the daemons set the modes. */
  if (chmod(dir, 0755) != 0 || chmod(dir2, 0755) != 0)
    return -1;
  char root_tcp[64];
  static const char *const logged[] = {"--log-level=1", NULL};
  /* The root serves the node over TCP only: the directory is the node's. */
  static const char *const no_unix[] = {"--unix=", NULL};
  static const char *const open_opts[] = {"--allow-uids=nobody", NULL};
  snprintf(log_path, sizeof(log_path), "%s/node.log", dir);
  if (daemon_start(&root, dir, "root", NULL, no_unix, root_tcp) < 0 ||
      start_logged(&node, dir, "node", root_tcp, logged, log_path) < 0 ||
      daemon_start(&open_root, dir2, "open", NULL, open_opts, root_tcp) < 0)
    return -1;
  snprintf(node_sock, sizeof(node_sock), "%s/node.sock", dir);
  daemon_unix_addr(dir, "node", node_addr, sizeof(node_addr));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (geteuid() != 0)
    return 0;
  int bad = proc_stop(&open_root) != 0;
  bad |= proc_stop(&node) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= rm_rf(dir2) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

static void need_root(void) {
  if (geteuid() != 0) {
    print_message("skipped: needs root, to run strangers as another uid "
                  "(this test runs as uid %u)\n",
                  (unsigned)geteuid());
    skip();
  }
}

static unsigned mode_of(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return (unsigned)(st.st_mode & 07777);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char *s = calloc(1, 1 << 20);
  assert_non_null(s);
  size_t n = fread(s, 1, (1 << 20) - 1, f);
  s[n] = '\0';
  fclose(f);
  return s;
}

/* What a stranger does, in a child of uid/gid. */
enum act {
  ACT_CONNECT, /* a bare connect(2): "errno N" (0: connected) */
  ACT_HELLO,   /* a client's connect: "status N: last_error" */
  ACT_SETGET,  /* connect, set key "k" and read it back: "status N: ..." */
  ACT_SILENT,  /* a bare connect that sends nothing and reads until the
                  daemon closes: "frame TYPE status N: text" */
};

static void child_line(int fd, const char *fmt, ...) {
  char line[1200];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= (int)sizeof(line) - 1)
    n = (int)sizeof(line) - 2;
  line[n++] = '\n';
  if (write(fd, line, (size_t)n) != n)
    _exit(3);
}

static void child_act(int fd, enum act act, const char *path) {
  if (act == ACT_CONNECT) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = connect(s, (struct sockaddr *)&sa, sizeof(sa));
    child_line(fd, "errno %d", rc == 0 ? 0 : errno);
    close(s);
    return;
  }
  if (act == ACT_SILENT) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    uint8_t buf[4096];
    size_t got = 0;
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
      child_line(fd, "connect: errno %d", errno);
      close(s);
      return;
    }
    for (ssize_t k = 1; k > 0 && got < sizeof(buf); got += (size_t)k)
      if ((k = read(s, buf + got, sizeof(buf) - got)) <= 0)
        break;
    close(s);
    struct rdzv_msg m;
    size_t used = 0;
    struct rdzv_slice t = {NULL, 0};
    if (rdzv_msg_decode(buf, got, sizeof(buf), &m, &used) != 0) {
      child_line(fd, "no frame in %zu bytes", got);
      return;
    }
    rdzv_items_get(&m.keys, 0, &t);
    child_line(fd, "frame %s status %d: %.*s", rdzv_msg_type_name(m.type),
               m.status, (int)t.n, t.p != NULL ? (const char *)t.p : "");
    return;
  }
  char addr[160];
  snprintf(addr, sizeof(addr), "unix:%s", path);
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = "stranger-job";
  rdzv_client_t *c = NULL;
  int rc = rdzv_client_create(&o, &c);
  if (rc == 0)
    rc = rdzv_client_connect(c, 20);
  void *v = NULL;
  size_t n = 0;
  if (rc == 0 && act == ACT_SETGET)
    rc = rdzv_store_set(c, "k", "from-nobody", 11, 0, 20);
  if (rc == 0 && act == ACT_SETGET)
    rc = rdzv_store_get(c, "k", &v, &n, 20);
  child_line(fd, "status %d: %s%s%.*s", rc,
             rc != 0 && c != NULL ? rdzv_client_last_error(c) : "",
             v != NULL ? "value " : "", (int)n, v != NULL ? (char *)v : "");
  rdzv_free(v);
  rdzv_client_destroy(c);
}

/* Starts a child that becomes uid/gid (no supplementary groups) and does
 * act on path `times` times, a line each on *fd_out. */
static pid_t stranger_start(uid_t uid, gid_t gid, enum act act,
                            const char *path, int times, int *fd_out) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 ||
        setresuid(uid, uid, uid) != 0 || geteuid() != uid) {
      child_line(p[1], "cannot become uid %u: %s", (unsigned)uid,
                 strerror(errno));
      _exit(2);
    }
    for (int i = 0; i < times; i++) {
      child_act(p[1], act, path);
      usleep(5000);
    }
    _exit(0);
  }
  close(p[1]);
  *fd_out = p[0];
  return pid;
}

/* Waits for the child and returns its lines (malloc'd). */
static char *stranger_end(pid_t pid, int fd) {
  struct proc pr = {.pid = pid, .out_fd = fd};
  char *out = proc_read_all(&pr);
  assert_non_null(out);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  close(fd);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("stranger exited with status %d: %s", status, out);
  return out;
}

static char *stranger(uid_t uid, gid_t gid, enum act act, const char *path,
                      int times) {
  int fd;
  pid_t pid = stranger_start(uid, gid, act, path, times, &fd);
  return stranger_end(pid, fd);
}

/* Every one of n lines of out is want (a whole line). */
static void all_lines(const char *out, int n, const char *want) {
  int seen = 0;
  for (const char *l = out; *l != '\0'; seen++) {
    const char *e = strchr(l, '\n');
    assert_non_null(e);
    if ((size_t)(e - l) != strlen(want) || strncmp(l, want, strlen(want)) != 0)
      fail_msg("line %d is [%.*s], not [%s]", seen, (int)(e - l), l, want);
    l = e + 1;
  }
  assert_int_equal(seen, n);
}

static void test_default_modes_keep_strangers_out(void **state) {
  (void)state;
  need_root();
  assert_int_equal(mode_of(node_sock), 0600);
  assert_int_equal(mode_of(dir), 0700);
  char *log = read_file(log_path);
  if (strstr(log, "mode 0600 (this daemon's uid 0 and root only)") == NULL ||
      strstr(log, "mode 0755 -> 0700") == NULL)
    fail_msg("the node's log does not say what it did to the modes: [%s]", log);
  free(log);
  char want[32];
  snprintf(want, sizeof(want), "errno %d", EACCES);
  /* The directory keeps it out... */
  char *out = stranger(nobody_uid, nobody_gid, ACT_CONNECT, node_sock, 1);
  all_lines(out, 1, want);
  free(out);
  /* ...and, with the directory open to it, the socket does. */
  assert_int_equal(chmod(dir, 0711), 0);
  out = stranger(nobody_uid, nobody_gid, ACT_CONNECT, node_sock, 1);
  all_lines(out, 1, want);
  free(out);
  assert_int_equal(chmod(dir, 0700), 0);
  assert_int_equal(stats_at(node_addr, "auth.peer_refused"), 0);
}

static void test_uid_check_refuses_while_a_job_runs(void **state) {
  (void)state;
  need_root();
  assert_int_equal(chmod(dir, 0711), 0);
  assert_int_equal(chmod(node_sock, 0666), 0);
  int sfd;
  pid_t spid = stranger_start(nobody_uid, nobody_gid, ACT_HELLO, node_sock,
                              STRANGERS, &sfd);
  struct proc ranks[4];
  for (int i = 0; i < 4; i++) {
    char env_addr[200], env_lr[32];
    snprintf(env_addr, sizeof(env_addr), "RDZV_ADDR=%s", node_addr);
    snprintf(env_lr, sizeof(env_lr), "LOCAL_RANK=%d", i);
    char *argv[] = {"/usr/bin/env",
                    env_addr,
                    "RDZV_HOST=h0",
                    env_lr,
                    "RDZV_JOB=allowed-job",
                    "LOCAL_WORLD_SIZE=4",
                    "WORLD_SIZE=4",
                    EXAMPLE,
                    "--nccl",
                    "none",
                    "--timeout",
                    "60",
                    NULL};
    assert_int_equal(proc_start(&ranks[i], argv, 1), 0);
  }
  char *out = stranger_end(spid, sfd);
  char want[400];
  snprintf(want, sizeof(want),
           "daemon node: uid %u is not allowed on this "
           "socket (unix:%s)",
           (unsigned)nobody_uid, node_sock);
  int refused = 0, lines = 0;
  for (const char *l = out; *l != '\0'; lines++) {
    const char *e = strchr(l, '\n');
    assert_non_null(e);
    char head[32];
    snprintf(head, sizeof(head), "status %d: ", RDZV_EAUTH);
    if (strncmp(l, head, strlen(head)) == 0 &&
        memmem(l, (size_t)(e - l), want, strlen(want)))
      refused++;
    else
      fail_msg("a stranger got [%.*s], not RDZV_EAUTH with [%s]", (int)(e - l),
               l, want);
    l = e + 1;
  }
  free(out);
  assert_int_equal(lines, STRANGERS);
  assert_int_equal(refused, STRANGERS);
  int identical = 0;
  for (int i = 0; i < 4; i++) {
    char *r = proc_read_all(&ranks[i]);
    assert_non_null(r);
    if (strstr(r, "ids identical on all 4 ranks") != NULL)
      identical++;
    int st = proc_wait(&ranks[i]);
    if (st != 0)
      fail_msg("allowed rank %d exited %d: %s", i, st, r);
    free(r);
  }
  assert_int_equal(identical, 1); /* rank 0 reports the check */
  /* One that sends nothing is refused all the same, at once: the
   * refusal does not wait for a hello. */
  out = stranger(nobody_uid, nobody_gid, ACT_SILENT, node_sock, 1);
  char silent[600];
  snprintf(silent, sizeof(silent),
           "frame %s status %d: %s: only the "
           "daemon's own uid, root and --allow-uids are",
           rdzv_msg_type_name(RDZV_MSG_ERROR), RDZV_EAUTH, want);
  all_lines(out, 1, silent);
  free(out);
  /* Each attempt counted once, as a refusal, not a broken rule. */
  assert_int_equal(stats_at(node_addr, "auth.peer_refused"), STRANGERS + 1);
  assert_int_equal(stats_at(node_addr, "proto_errors"), 0);
  /* ...and logged, naming the uid (at most 10 lines a second). */
  char *log = read_file(log_path);
  char logged[64];
  snprintf(logged, sizeof(logged), "refused: uid %u (pid",
           (unsigned)nobody_uid);
  if (strstr(log, logged) == NULL)
    fail_msg("the node's log has no [%s]: [%s]", logged, log);
  free(log);
  /* The refused connections are gone (each stranger hung up, as did the
   * ranks): only the stats reader's own is open. */
  int64_t open_now = -1;
  for (int tries = 0; tries < 600 && open_now != 1; tries++) {
    if (tries > 0)
      usleep(50 * 1000);
    open_now = stats_at(node_addr, "connections.open");
  }
  assert_int_equal(open_now, 1);
  assert_int_equal(chmod(node_sock, 0600), 0);
  assert_int_equal(chmod(dir, 0700), 0);
}

static void test_allow_uids_lets_nobody_in(void **state) {
  (void)state;
  need_root();
  char sock[128], addr[160];
  snprintf(sock, sizeof(sock), "%s/open.sock", dir2);
  daemon_unix_addr(dir2, "open", addr, sizeof(addr));
  assert_int_equal(mode_of(sock), 0666);
  assert_int_equal(mode_of(dir2), 0711);
  char *out = stranger(nobody_uid, nobody_gid, ACT_SETGET, sock, 1);
  all_lines(out, 1, "status 0: value from-nobody");
  free(out);
  /* A uid it does not name is still refused, by the uid check alone. */
  out = stranger(OTHER_UID, OTHER_UID, ACT_HELLO, sock, 1);
  char head[32], want[64];
  snprintf(head, sizeof(head), "status %d: ", RDZV_EAUTH);
  snprintf(want, sizeof(want), "uid %d is not allowed", OTHER_UID);
  if (strncmp(out, head, strlen(head)) != 0 || strstr(out, want) == NULL)
    fail_msg("uid %d on a socket of --allow-uids=nobody: [%s]", OTHER_UID, out);
  free(out);
  assert_int_equal(stats_at(addr, "auth.peer_refused"), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_modes_keep_strangers_out),
      cmocka_unit_test(test_uid_check_refuses_while_a_job_runs),
      cmocka_unit_test(test_allow_uids_lets_nobody_in),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
