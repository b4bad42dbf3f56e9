/* tests/integration/comm_harness.c: see comm_harness.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#include "comm_harness.h"
#include "proc.h"
#include "rdzv/rdzv.h"

static char dir[64];
static struct proc root, nodes[NHOSTS];
static char root_addr[64], node_addr[NHOSTS][128];
static int fds_before;
int go_pipe[2] = {-1, -1};
int sig_pipe[2] = {-1, -1};
const char *made_label = "?";
atomic_int ids_made;

/* ---- daemons (as tests/integration/rendezvous_test.c) -------------------- */

static int start_daemon(struct proc *p, const char *name, const char *parent,
                        char *tcp_out) {
  char pf[128], pfa[160], una[160], pa[128], na[64];
  snprintf(pf, sizeof(pf), "%s/%s.port", dir, name);
  snprintf(pfa, sizeof(pfa), "--port-file=%s", pf);
  snprintf(una, sizeof(una), "--unix=%s/%s.sock", dir, name);
  snprintf(pa, sizeof(pa), "--parent=%s", parent ? parent : "");
  snprintf(na, sizeof(na), "--name=%s", name);
  char *argv[] = {RDZVD,
                  parent ? "--role=node" : "--role=root",
                  "--listen=127.0.0.1:0",
                  pfa,
                  una,
                  na,
                  "--log-level=0",
                  parent ? pa : NULL,
                  NULL};
  if (proc_start(p, argv, 0) < 0)
    return -1;
  int port = wait_port_file(pf, 30);
  if (port < 0)
    return -1;
  snprintf(tcp_out, 64, "127.0.0.1:%d", port);
  return 0;
}

int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-comm-XXXXXX");
  if (mkdtemp(dir) == NULL || start_daemon(&root, "root", NULL, root_addr))
    return -1;
  for (int h = 0; h < NHOSTS; h++) {
    char name[16], tcp[64];
    snprintf(name, sizeof(name), "host%d", h);
    if (start_daemon(&nodes[h], name, root_addr, tcp) < 0)
      return -1;
    snprintf(node_addr[h], sizeof(node_addr[h]), "unix:%s/host%d.sock", dir, h);
  }
  return 0;
}

int teardown(void **state) {
  (void)state;
  int bad = 0;
  for (int h = NHOSTS - 1; h >= 0; h--)
    bad |= proc_stop(&nodes[h]) != 0;
  bad |= proc_stop(&root) != 0;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  bad |= system(cmd) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

/* ---- ranks --------------------------------------------------------------- */

/* Appends to the rank's report. */
static pthread_mutex_t say_lock = PTHREAD_MUTEX_INITIALIZER;

void say(struct rank_ctx *k, const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&say_lock);
  if (k->len + 2 >= sizeof(k->text)) {
    pthread_mutex_unlock(&say_lock);
    return;
  }
  k->text[k->len++] = ' ';
  va_start(ap, fmt);
  int n = vsnprintf(k->text + k->len, sizeof(k->text) - k->len, fmt, ap);
  va_end(ap);
  if (n > 0)
    k->len += (size_t)n < sizeof(k->text) - k->len
                  ? (size_t)n
                  : sizeof(k->text) - k->len - 1;
  pthread_mutex_unlock(&say_lock);
}

/* A check inside a rank: records what failed; the parent asserts on it. */
int check(struct rank_ctx *k, int ok, const char *what) {
  if (!ok) {
    k->failed = 1;
    say(k, "FAIL(%s)", what);
  }
  return ok;
}

/* Ids made by this rank, in order, as the fake logs them (the first 8
 * bytes in hex), each with the label current when it was made. */
static struct rdzv_nccl_api *real_api;

static void hex8(const uint8_t *id, char *out) {
  for (int i = 0; i < 8; i++)
    snprintf(out + 2 * i, 3, "%02x", id[i]);
}

static struct rank_ctx *current;
static pthread_t rank_thread; /* the thread that runs child_main */

static int recording_make_id(void *arg, uint8_t *id) {
  char hex[17];
  (void)arg;
  if (real_api != NULL) {
    rdzv_nccl_unique_id u;
    if (real_api->get_unique_id(&u) != RDZV_NCCL_SUCCESS)
      return RDZV_ENCCL;
    memcpy(id, u.internal, RDZV_UNIQUE_ID_BYTES);
  } else if (getrandom(id, RDZV_UNIQUE_ID_BYTES, 0) != RDZV_UNIQUE_ID_BYTES) {
    return -EIO;
  }
  hex8(id, hex);
  atomic_fetch_add(&ids_made, 1);
  say(current, "made=%s:%s", made_label, hex);
  if (!pthread_equal(pthread_self(), rank_thread))
    say(current, "made-bg=%s", made_label);
  return 0;
}

static void child_report(int fd, int status, const struct rank_ctx *k,
                         int64_t gen) {
  char line[REPORT_MAX];
  int n = snprintf(line, sizeof(line), "%d %d %" PRId64 "%s\n", status, k->rank,
                   gen, k->text);
  if (write(fd, line, (size_t)n) < 0)
    _exit(3);
}

static void child_main(const struct world_spec *w, int index, int fd) {
  struct rank_ctx k = {.rank = -1};
  char log[160], err[1024] = "";
  current = &k;
  rank_thread = pthread_self();
  if (go_pipe[1] >= 0)
    close(go_pipe[1]);
  snprintf(log, sizeof(log), "%s/%s-%d.log", dir, w->job, index);
  setenv("FAKE_NCCL_LOG", log, 1);
  if (w->polls != NULL)
    setenv("FAKE_NCCL_INIT_POLLS", w->polls, 1);
  if (w->fail != NULL)
    setenv("FAKE_NCCL_FAIL_INIT", w->fail, 1);
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = node_addr[index / w->per_host];
  o.job_id = w->job;
  o.host = index / w->per_host == 0 ? "hostA" : "hostB";
  o.local_rank = index % w->per_host;
  o.local_size = w->per_host;
  o.world_size = w->n;
  o.timeout_s = 30;
  o.topology = "gpu_pci=none\n";
  k.opts = &o;
  int rc = rdzv_rendezvous_join(&o, &k.r, err, sizeof(err));
  if (rc < 0) {
    say(&k, "join: %s", err);
    child_report(fd, rc, &k, 0);
    _exit(0);
  }
  k.rank = rdzv_rendezvous_rank(k.r);
  if (w->real_ids && access(REAL_NCCL, R_OK) == 0 &&
      rdzv_nccl_load(REAL_NCCL, &real_api, err, sizeof(err)) < 0)
    say(&k, "real NCCL not loadable: %s", err);
  say(&k, "ids-from=%s", real_api != NULL ? "real" : "random");
  struct rdzv_comm_opts co;
  rdzv_comm_opts_init(&co);
  co.nccl_path = FAKE;
  co.nonblocking = w->nonblocking;
  co.make_id = recording_make_id;
  co.always_scalable = w->always_scalable;
  if (w->ranks_per_root > 0)
    co.ranks_per_root = w->ranks_per_root;
  rc = rdzv_comm_world(k.r, &co, &k.world);
  if (check(&k, rc == 0, "world"))
    w->fn(&k);
  rdzv_comm_destroy(k.world);
  child_report(fd, k.failed ? -1 : 0, &k, rdzv_rendezvous_generation(k.r));
  rdzv_rendezvous_destroy(k.r);
  rdzv_nccl_unload(real_api);
#ifdef __SANITIZE_ADDRESS__
  /* _exit skips LeakSanitizer's check at exit: run it here (it prints
   * what leaked), and fail the rank's exit status. */
  if (__lsan_do_recoverable_leak_check() != 0)
    _exit(5);
#endif
  _exit(0);
}

void launch_one(const struct world_spec *w, int index, struct rank_proc *rp) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    child_main(w, index, p[1]);
  }
  close(p[1]);
  rp->pid = pid;
  rp->fd = p[0];
}

void launch(const struct world_spec *w, struct rank_proc *rp) {
  for (int i = 0; i < w->n; i++)
    launch_one(w, i, &rp[i]);
}

int finish(struct rank_proc *rp, char *buf, size_t n) {
  size_t len = 0;
  int st = 0;
  while (len + 1 < n) {
    ssize_t k = read(rp->fd, buf + len, 1);
    if (k <= 0 || buf[len] == '\n')
      break;
    len++;
  }
  buf[len] = '\0';
  close(rp->fd);
  waitpid(rp->pid, &st, 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return (int)strtol(buf, NULL, 10);
}

void run_world(const struct world_spec *w, char reports[][REPORT_MAX]) {
  struct rank_proc rp[MAX_RANKS];
  launch(w, rp);
  for (int i = 0; i < w->n; i++) {
    int st = finish(&rp[i], reports[i], sizeof(reports[i]));
    if (st != 0)
      fail_msg("%s rank %d: %s", w->job, i, reports[i]);
    int rank = -1;
    assert_int_equal(sscanf(reports[i], "%*d %d", &rank), 1);
    assert_int_equal(rank, i);
  }
}

/* ---- reading the fake's logs --------------------------------------------- */

char *fake_log(const char *job, int index) {
  char path[160];
  snprintf(path, sizeof(path), "%s/%s-%d.log", dir, job, index);
  FILE *f = fopen(path, "r");
  long size = 0;
  if (f != NULL && fseek(f, 0, SEEK_END) == 0) {
    size = ftell(f);
    rewind(f);
  }
  char *buf = calloc(1, (size_t)(size > 0 ? size : 0) + 1);
  assert_non_null(buf);
  if (f != NULL) {
    size_t n = fread(buf, 1, (size_t)(size > 0 ? size : 0), f);
    buf[n] = '\0';
    fclose(f);
  }
  return buf;
}

int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p != NULL;
       p = strstr(p + 1, needle))
    n++;
  return n;
}

int field(const char *text, const char *line_has, const char *key, char *out,
          size_t n) {
  const char *l = strstr(text, line_has);
  if (l == NULL)
    return -1;
  const char *end = strchr(l, '\n');
  const char *v = strstr(l, key);
  if (v == NULL || (end != NULL && v > end))
    return -1;
  v += strlen(key);
  size_t len = strcspn(v, " \n");
  snprintf(out, n, "%.*s", (int)len, v);
  return 0;
}

int made_id(const char *report, const char *label, char *out, size_t n) {
  char key[64];
  snprintf(key, sizeof(key), "made=%s:", label);
  const char *v = strstr(report, key);
  if (v == NULL)
    return -1;
  v += strlen(key);
  snprintf(out, n, "%.16s", v);
  return 0;
}

int key_exists(const char *job, const char *key) {
  struct rdzv_client_opts co;
  rdzv_client_t *c = NULL;
  void *v = NULL;
  size_t len = 0;
  rdzv_client_opts_init(&co);
  co.addr = root_addr;
  co.job_id = job;
  assert_int_equal(rdzv_client_create(&co, &c), 0);
  int rc = rdzv_store_get(c, key, &v, &len, 30);
  rdzv_free(v);
  rdzv_client_destroy(c);
  assert_true(rc == 0 || rc == RDZV_ENOKEY);
  return rc == 0;
}

/* ---- holding and signalling between ranks -------------------------------- */

void hold(void) {
  char b;
  while (read(go_pipe[0], &b, 1) > 0) {
  }
}

void sig_open(void) { assert_int_equal(pipe(sig_pipe), 0); }

void sig_close(void) {
  for (int i = 0; i < 2; i++) {
    if (sig_pipe[i] >= 0)
      close(sig_pipe[i]);
    sig_pipe[i] = -1;
  }
}

void sig_send(void) {
  char b = 1;
  if (write(sig_pipe[1], &b, 1) != 1)
    _exit(4);
}

int sig_wait(void) {
  char b;
  ssize_t n;
  /* Only the senders' copies of the write end stay open. */
  if (sig_pipe[1] >= 0)
    close(sig_pipe[1]);
  sig_pipe[1] = -1;
  do
    n = read(sig_pipe[0], &b, 1);
  while (n < 0 && errno == EINTR);
  return n == 1;
}
