/* The rendezvous with real processes: a root and 8 nodes (one per
 * simulated host, a 3-level tree of fan-out 4), ranks as forked processes
 * or as rdzv-example processes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"
#include "rendezvous/topo.h"

#define NHOSTS 8
#define RDZVD "tools/rdzvd"
#define EXAMPLE "tools/rdzv-example"

static char dir[64];
static struct proc root, nodes[NHOSTS];
static char root_addr[64], node_addr[NHOSTS][128];
static int fds_before;

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

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-rv-XXXXXX");
  if (mkdtemp(dir) == NULL || start_daemon(&root, "root", NULL, root_addr))
    return -1;
  char tcp[NHOSTS][64];
  for (int h = 0; h < NHOSTS; h++) {
    /* Host h's node hangs off its tree parent (rendezvous/topo.h). */
    int64_t parent = rdzv_tree_parent(h, NHOSTS, 4);
    char name[16];
    snprintf(name, sizeof(name), "host%d", h);
    if (start_daemon(&nodes[h], name,
                     parent == RDZV_TREE_ROOT ? root_addr : tcp[parent],
                     tcp[h]) < 0)
      return -1;
    snprintf(node_addr[h], sizeof(node_addr[h]), "unix:%s/host%d.sock", dir, h);
  }
  return 0;
}

static int teardown(void **state) {
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

/* A rank in a forked child: joins, then does `then`; reports one line
 * "<status> <rank> <generation> <text>" on its pipe. */
struct rank_spec {
  const char *job;
  const char *host;
  int host_index;
  int32_t local_rank, local_size, world_size;
  double timeout_s;
  const char *then; /* NULL, "barrier", "ids", "hold" (sleep, then exit) */
  const char *location;
};

static void child_report(int fd, int status, rdzv_rendezvous_t *r,
                         const char *text) {
  char line[1400];
  int n = snprintf(line, sizeof(line), "%d %d %" PRId64 " %s\n", status,
                   r ? rdzv_rendezvous_rank(r) : -1,
                   r ? rdzv_rendezvous_generation(r) : 0, text);
  if (write(fd, line, (size_t)n) < 0)
    _exit(3);
}

/* A test id: every byte is the maker's rank. */
static int make_id(void *arg, uint8_t *id) {
  memset(id, rdzv_rendezvous_rank(arg), RDZV_UNIQUE_ID_BYTES);
  return 0;
}

/* Scalable-init ids, 3 ranks per root: block b's id must come from the
 * block's first rank (NCCL's rule), identical everywhere. */
static int check_ids(rdzv_rendezvous_t *r, double timeout_s, char *err,
                     size_t n) {
  uint8_t *ids = NULL;
  int64_t nids = 0;
  int32_t w = rdzv_rendezvous_world_size(r);
  int rc = rdzv_rendezvous_unique_ids(r, "world", 3, make_id, r, &ids, &nids,
                                      timeout_s);
  if (rc < 0) {
    snprintf(err, n, "%s", rdzv_rendezvous_last_error(r));
    return rc;
  }
  for (int64_t b = 0; b < nids; b++)
    for (int k = 0; k < RDZV_UNIQUE_ID_BYTES; k++)
      if (ids[b * RDZV_UNIQUE_ID_BYTES + k] !=
          (uint8_t)rdzv_nccl_block_first(b, w, nids))
        rc = -1;
  snprintf(err, n, "nids=%" PRId64, nids);
  rdzv_free(ids);
  return rc;
}

/* Elastic rounds: the minimum size and last call the next forked ranks
 * use (0: not elastic). */
static int32_t elastic_min;
static double elastic_last_call_s;
/* When set, the next forked ranks use this node address instead. */
static const char *addr_override;

static void child_main(const struct rank_spec *s, int fd) {
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr_override ? addr_override : node_addr[s->host_index];
  o.job_id = s->job;
  o.host = s->host;
  o.location = s->location;
  o.local_rank = s->local_rank;
  o.local_size = s->local_size;
  o.world_size = s->world_size;
  o.timeout_s = s->timeout_s;
  o.min_size = elastic_min;
  if (elastic_min > 0)
    o.last_call_s = elastic_last_call_s;
  o.topology = "gpu_pci=none\n";
  char err[1024] = "";
  rdzv_rendezvous_t *r = NULL;
  int rc = rdzv_rendezvous_join(&o, &r, err, sizeof(err));
  if (rc == 0 && s->then != NULL && strcmp(s->then, "barrier") == 0) {
    rc = rdzv_rendezvous_barrier(r, "after-join", s->timeout_s);
    snprintf(err, sizeof(err), "%s", rdzv_rendezvous_last_error(r));
  } else if (rc == 0 && s->then != NULL && strcmp(s->then, "ids") == 0) {
    rc = check_ids(r, s->timeout_s, err, sizeof(err));
  } else if (rc == 0 && s->then != NULL && strcmp(s->then, "hold") == 0) {
    child_report(fd, 0, r, "joined");
    pause(); /* until killed */
  }
  child_report(fd, rc, r, err);
  rdzv_rendezvous_destroy(r);
  _exit(0);
}

struct rank_proc {
  pid_t pid;
  int fd;
};

static struct rank_proc spawn_rank(const struct rank_spec *s) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    child_main(s, p[1]);
  }
  close(p[1]);
  struct rank_proc rp = {pid, p[0]};
  return rp;
}

/* Reads one report line (blocking) into buf; returns its status. */
static int read_report(struct rank_proc *rp, char *buf, size_t n) {
  size_t len = 0;
  while (len + 1 < n) {
    ssize_t k = read(rp->fd, buf + len, 1);
    if (k <= 0 || buf[len] == '\n')
      break;
    len++;
  }
  buf[len] = '\0';
  return (int)strtol(buf, NULL, 10);
}

static int finish_rank(struct rank_proc *rp) {
  int st = 0;
  close(rp->fd);
  waitpid(rp->pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- the example program: 64 processes on 8 hosts -------------------------- */

static void test_example_64_ranks(void **state) {
  (void)state;
  /* The real ncclGetUniqueId where libnccl is installed, else random ids
   * (the test says which). */
  const char *nccl = access("/usr/local/cuda/lib64/libnccl.so.2", R_OK) == 0
                         ? "/usr/local/cuda/lib64/libnccl.so.2"
                         : "none";
  printf("ids from %s\n", nccl);
  struct proc ranks[64];
  for (int i = 0; i < 64; i++) {
    char env_addr[160], env_host[32], env_lr[32];
    snprintf(env_addr, sizeof(env_addr), "RDZV_ADDR=%s", node_addr[i / 8]);
    snprintf(env_host, sizeof(env_host), "RDZV_HOST=host%d", i / 8);
    snprintf(env_lr, sizeof(env_lr), "LOCAL_RANK=%d", i % 8);
    char *argv[] = {"/usr/bin/env",
                    env_addr,
                    env_host,
                    env_lr,
                    "RDZV_JOB=example-64",
                    "LOCAL_WORLD_SIZE=8",
                    "WORLD_SIZE=64",
                    EXAMPLE,
                    "--nccl",
                    (char *)nccl,
                    "--timeout",
                    "60",
                    NULL};
    assert_int_equal(proc_start(&ranks[i], argv, 1), 0);
  }
  int seen[64] = {0}, identical = 0;
  for (int i = 0; i < 64; i++) {
    char *out = proc_read_all(&ranks[i]);
    assert_non_null(out);
    int rank = -1, world = 0, lr = -1, node = -1, first = -1, last = -1;
    char host[32] = "";
    const char *line = strstr(out, "rank ");
    assert_non_null(line);
    assert_int_equal(sscanf(line,
                            "rank %d of %d: local rank %d of %*d, node "
                            "%d of %*d, generation %*d, host %31s "
                            "(ranks %d..%d)",
                            &rank, &world, &lr, &node, host, &first, &last),
                     7);
    assert_int_equal(world, 64);
    /* Hosts in name order, ranks contiguous per host by local rank. */
    assert_int_equal(rank, i);
    assert_int_equal(lr, i % 8);
    assert_int_equal(node, i / 8);
    assert_int_equal(first, (i / 8) * 8);
    assert_int_equal(last, (i / 8) * 8 + 7);
    seen[rank]++;
    assert_non_null(strstr(out, "host record: 8 ranks")); /* node cache */
    if (strstr(out, "ids identical on all 64 ranks") != NULL)
      identical++;
    free(out);
    assert_int_equal(proc_wait(&ranks[i]), 0);
  }
  for (int i = 0; i < 64; i++)
    assert_int_equal(seen[i], 1);
  assert_int_equal(identical, 1); /* rank 0 reports the check */
}

/* ---- missing ranks ----------------------------------------------------------- */

static void test_missing_hosts_named(void **state) {
  (void)state;
  struct rdzv_client_opts co;
  rdzv_client_opts_init(&co);
  co.addr = root_addr;
  co.job_id = "missing";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&co, &c), 0);
  const char *hosts = "hostA\nhostB\nhostC";
  assert_int_equal(rdzv_store_set(c, "rdzv/world/expected-hosts", hosts,
                                  strlen(hosts), 0, 30),
                   0);
  rdzv_client_destroy(c);
  struct rank_proc rp[13];
  for (int i = 0; i < 13; i++) {
    struct rank_spec s = {"missing",
                          i < 8 ? "hostA" : "hostB",
                          i < 8 ? 0 : 1,
                          i % 8,
                          8,
                          24,
                          1.5,
                          NULL,
                          NULL};
    rp[i] = spawn_rank(&s);
  }
  for (int i = 0; i < 13; i++) {
    char line[1400];
    assert_int_equal(read_report(&rp[i], line, sizeof(line)), RDZV_EDEADLINE);
    assert_non_null(strstr(line, "13 of 24 ranks joined"));
    assert_non_null(strstr(line, "host hostB lacks 3 of 8"));
    assert_non_null(strstr(line, "host hostC never joined"));
    assert_null(strstr(line, "host hostA"));
    assert_int_equal(finish_rank(&rp[i]), 0);
  }
}

/* ---- duplicate claims and a second job with the same id ----------------- */

static void test_duplicate_claim(void **state) {
  (void)state;
  struct rank_spec a = {"dup", "hostA", 0, 0, 2, 2, 30, "barrier", NULL};
  struct rank_proc first = spawn_rank(&a);
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL); /* let the first claim arrive first */
  struct rank_spec twin = {"dup", "hostA", 0, 0, 2, 2, 30, NULL, NULL};
  struct rank_proc second = spawn_rank(&twin);
  char line[1400];
  assert_int_equal(read_report(&second, line, sizeof(line)),
                   RDZV_EDUPLICATE_CLAIM);
  assert_non_null(strstr(line, "host hostA local rank 0 is claimed by two"));
  /* Both processes by name (host:pid), the first with its generation. */
  char first_name[64];
  snprintf(first_name, sizeof(first_name), ":%d (joined first", (int)first.pid);
  assert_non_null(strstr(line, first_name));
  assert_int_equal(finish_rank(&second), 0);
  struct rank_spec b = {"dup", "hostA", 0, 1, 2, 2, 30, "barrier", NULL};
  struct rank_proc other = spawn_rank(&b);
  assert_int_equal(read_report(&first, line, sizeof(line)), 0);
  assert_int_equal(read_report(&other, line, sizeof(line)), 0);
  assert_int_equal(finish_rank(&first), 0);
  assert_int_equal(finish_rank(&other), 0);
}

static void test_two_live_jobs_one_id(void **state) {
  (void)state;
  struct rank_proc a[2], b[2];
  char line[1400];
  for (int i = 0; i < 2; i++) {
    struct rank_spec s = {"shared-id", "hostA", 0, i, 2, 2, 30, "hold", NULL};
    a[i] = spawn_rank(&s);
  }
  for (int i = 0; i < 2; i++)
    assert_int_equal(read_report(&a[i], line, sizeof(line)), 0);
  /* Job B reuses the id while A lives: refused, A untouched. */
  for (int i = 0; i < 2; i++) {
    struct rank_spec s = {"shared-id", "hostA", 0, i, 2, 2, 5, NULL, NULL};
    b[i] = spawn_rank(&s);
  }
  for (int i = 0; i < 2; i++) {
    assert_int_equal(read_report(&b[i], line, sizeof(line)),
                     RDZV_EDUPLICATE_CLAIM);
    assert_non_null(strstr(line, "job id in use by a live job"));
    assert_int_equal(finish_rank(&b[i]), 0);
  }
  rdzv_client_t *c = NULL;
  struct rdzv_client_opts co;
  rdzv_client_opts_init(&co);
  co.addr = root_addr;
  co.job_id = "shared-id";
  assert_int_equal(rdzv_client_create(&co, &c), 0);
  void *v = NULL;
  size_t len = 0;
  assert_int_equal(rdzv_store_get(c, "rdzv/world/g1/hosts", &v, &len, 30), 0);
  rdzv_free(v);
  rdzv_client_destroy(c);
  for (int i = 0; i < 2; i++) {
    kill(a[i].pid, SIGKILL);
    finish_rank(&a[i]);
  }
}

/* ---- generations -------------------------------------------------------------- */

static int64_t run_round(const char *job, int n, const char *then) {
  struct rank_proc rp[8];
  char line[1400];
  int64_t gen = -1;
  for (int i = 0; i < n; i++) {
    struct rank_spec s = {job, "hostA", 0, i, n, n, 30, then, NULL};
    rp[i] = spawn_rank(&s);
  }
  for (int i = 0; i < n; i++) {
    assert_int_equal(read_report(&rp[i], line, sizeof(line)), 0);
    long long g = 0;
    assert_int_equal(sscanf(line, "%*d %*d %lld", &g), 1);
    gen = g;
    assert_int_equal(finish_rank(&rp[i]), 0);
  }
  return gen;
}

/* Job A finishes (its ranks leave cleanly); job B reuses the id: it gets a
 * fresh generation, and a request for A's generation is refused as stale
 * (the service, not the clients, numbers generations). */
static void test_new_generation_and_stale(void **state) {
  (void)state;
  rdzv_client_t *c = NULL;
  struct rdzv_client_opts co;
  rdzv_client_opts_init(&co);
  co.addr = node_addr[3];
  co.job_id = "reused-id";
  assert_int_equal(rdzv_client_create(&co, &c), 0);
  int64_t keys1 = -1, keys2 = -1;
  assert_int_equal(run_round("reused-id", 2, "barrier"), 1);
  assert_int_equal(rdzv_store_num_keys(c, &keys1, 30), 0);
  assert_int_equal(run_round("reused-id", 2, "barrier"), 2);
  assert_int_equal(rdzv_store_num_keys(c, &keys2, 30), 0);
  /* Generation 1's keys (host table, host record) were removed. */
  assert_true(keys1 > 0);
  assert_int_equal(keys2, keys1);
  void *v = NULL;
  size_t len = 0;
  assert_int_equal(rdzv_store_get(c, "rdzv/world/g1/hosts", &v, &len, 30),
                   RDZV_ESTALE_GENERATION);
  assert_int_equal(rdzv_store_get(c, "rdzv/world/g2/hosts", &v, &len, 30), 0);
  assert_non_null(strstr((char *)v, "hostA"));
  rdzv_free(v);
  rdzv_client_destroy(c);
}

/* A rank that dies after joining aborts the generation for the others,
 * promptly and with the reason (not at their deadline). */
static void test_dead_rank_aborts(void **state) {
  (void)state;
  struct rank_proc live[2], doomed;
  char line[1400];
  struct rank_spec d = {"dies", "hostB", 1, 2, 3, 3, 60, "hold", NULL};
  doomed = spawn_rank(&d);
  for (int i = 0; i < 2; i++) {
    struct rank_spec s = {"dies", "hostA", 0, i, 2, 3, 60, "barrier", NULL};
    live[i] = spawn_rank(&s);
  }
  assert_int_equal(read_report(&doomed, line, sizeof(line)), 0);
  kill(doomed.pid, SIGKILL);
  finish_rank(&doomed);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(read_report(&live[i], line, sizeof(line)), RDZV_EABORTED);
    /* Its process is gone (the node sees its Unix peer exit): at once,
     * not after --session-grace-ms. */
    if (strstr(line, "host hostB lost rank 2 (local rank 0, process ") ==
            NULL ||
        strstr(line, "the process exited") == NULL)
      fail_msg("the abort does not name the dead rank: %s", line);
    assert_int_equal(finish_rank(&live[i]), 0);
  }
}

/* A rank that joined but never comes to a barrier: the others' barrier
 * fails at its deadline naming that rank and its host (asked of the root,
 * through the node that still holds the others' combined arrivals). */
static void test_barrier_names_missing_rank(void **state) {
  (void)state;
  struct rank_proc live[2], away;
  char line[1400];
  struct rank_spec d = {"away", "hostB", 1, 0, 1, 3, 3, "hold", NULL};
  away = spawn_rank(&d);
  for (int i = 0; i < 2; i++) {
    struct rank_spec s = {"away", "hostA", 0, i, 2, 3, 3, "barrier", NULL};
    live[i] = spawn_rank(&s);
  }
  assert_int_equal(read_report(&away, line, sizeof(line)), 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(read_report(&live[i], line, sizeof(line)), RDZV_EDEADLINE);
    printf("rank saw: %s\n", line);
    assert_non_null(strstr(line, "barrier 'after-join' of 3 ranks: deadline "
                                 "passed; 1 of 3 missing: rank 2 (host "
                                 "hostB)"));
    assert_int_equal(finish_rank(&live[i]), 0);
  }
  kill(away.pid, SIGKILL);
  finish_rank(&away);
}

/* 8 ranks on 2 hosts, 3 ranks per root: NCCL's block rule gives 3 ids
 * (blocks of 3, 3, 2 ranks, made by ranks 0, 3, 6). */
static void test_scalable_ids(void **state) {
  (void)state;
  struct rank_proc rp[8];
  char line[1400];
  for (int i = 0; i < 8; i++) {
    struct rank_spec s = {
        "ids", i < 4 ? "hostA" : "hostB", i < 4 ? 2 : 5, i % 4, 4, 8, 30, "ids",
        NULL};
    rp[i] = spawn_rank(&s);
  }
  for (int i = 0; i < 8; i++) {
    assert_int_equal(read_report(&rp[i], line, sizeof(line)), 0);
    assert_non_null(strstr(line, "nids=3"));
    assert_int_equal(finish_rank(&rp[i]), 0);
  }
}

/* One host, two locations: refused (it would split the host in two). */
static void test_host_with_two_locations(void **state) {
  (void)state;
  struct rank_spec a = {"loc", "hostL", 0, 0, 2, 2, 5, NULL, "rackA"};
  struct rank_proc first = spawn_rank(&a);
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  struct rank_spec b = {"loc", "hostL", 0, 1, 2, 2, 5, NULL, "rackB"};
  struct rank_proc second = spawn_rank(&b);
  char line[1400];
  assert_int_equal(read_report(&second, line, sizeof(line)), RDZV_EPROTO);
  assert_non_null(strstr(line, "host hostL reports two locations"));
  assert_int_equal(finish_rank(&second), 0);
  assert_int_equal(read_report(&first, line, sizeof(line)), RDZV_EDEADLINE);
  assert_int_equal(finish_rank(&first), 0);
}

/* RDZV_DOMAIN=auto: each host's NVLink domain read from NVML, here the
 * FAKE NVML (tests/fake_nvml, a test double loaded through the same
 * dlopen seam as libnvidia-ml.so.1) answering clique 2 on hostP and 1 on
 * hostQ of one cluster. With whole domains of one host
 * (RDZV_SEGMENT_HOSTS=1) the world is ordered by domain, and the root
 * publishes the domains the 4 rdzv-example ranks joined with. */
static void test_domain_auto(void **state) {
  (void)state;
  static const char uuid[] =
      "FAKE_NVML_CLUSTER=00112233445566778899aabbccddeeff";
  struct proc ranks[4];
  for (int i = 0; i < 4; i++) {
    char env_addr[160], env_host[32], env_lr[32], clique[32];
    snprintf(env_addr, sizeof(env_addr), "RDZV_ADDR=%s", node_addr[i / 2]);
    snprintf(env_host, sizeof(env_host), "RDZV_HOST=host%c", "PQ"[i / 2]);
    snprintf(env_lr, sizeof(env_lr), "LOCAL_RANK=%d", i % 2);
    snprintf(clique, sizeof(clique), "FAKE_NVML_CLIQUE=%d", 2 - i / 2);
    char *argv[] = {"/usr/bin/env",
                    env_addr,
                    env_host,
                    env_lr,
                    "RDZV_JOB=domains",
                    "LOCAL_WORLD_SIZE=2",
                    "WORLD_SIZE=4",
                    "RDZV_DOMAIN=auto",
                    "RDZV_SEGMENT_HOSTS=1",
                    "RDZV_NVML_LIBRARY=tests/fake_nvml/libfake_nvml.so",
                    (char *)uuid,
                    clique,
                    EXAMPLE,
                    "--nccl",
                    "none",
                    "--timeout",
                    "30",
                    NULL};
    assert_int_equal(proc_start(&ranks[i], argv, 1), 0);
  }
  for (int i = 0; i < 4; i++) {
    char *out = proc_read_all(&ranks[i]);
    int st = proc_wait(&ranks[i]);
    if (st != 0)
      fail_msg("rank process %d exited %d: %s", i, st, out ? out : "");
    free(out);
  }
  struct rdzv_client_opts co;
  rdzv_client_t *c = NULL;
  void *v = NULL;
  size_t len = 0;
  rdzv_client_opts_init(&co);
  co.addr = root_addr;
  co.job_id = "domains";
  assert_int_equal(rdzv_client_create(&co, &c), 0);
  assert_int_equal(rdzv_store_get(c, "rdzv/world/g1/domains", &v, &len, 30), 0);
  char got[400];
  snprintf(got, sizeof(got), "%.*s", (int)len, (const char *)v);
  rdzv_free(v);
  rdzv_client_destroy(c);
  /* node rank, hosts, first rank, ranks, domain: hostQ (clique 1) first */
  assert_string_equal(got,
                      "0 1 0 2 nvl-00112233-4455-6677-8899-aabbccddeeff-1\n"
                      "1 1 2 2 nvl-00112233-4455-6677-8899-aabbccddeeff-2\n");
}

/* Elastic: between 2 and 4 ranks; 3 arrive, the round completes after
 * the last call with a world of 3, ranks 0..2. */
static void test_elastic_round(void **state) {
  (void)state;
  struct rank_proc rp[3];
  char line[1400];
  elastic_min = 2;
  elastic_last_call_s = 0.5;
  for (int i = 0; i < 3; i++) {
    struct rank_spec s = {"elastic", "hostE", 4, i, 3, 4, 30, "barrier", NULL};
    rp[i] = spawn_rank(&s);
  }
  elastic_min = 0;
  int seen = 0;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(read_report(&rp[i], line, sizeof(line)), 0);
    int rank = -1;
    assert_int_equal(sscanf(line, "%*d %d", &rank), 1);
    assert_true(rank >= 0 && rank < 3);
    seen |= 1 << rank;
    assert_int_equal(finish_rank(&rp[i]), 0);
  }
  assert_int_equal(seen, 7); /* the barrier over a world of 3 passed too */
}

/* A node that dies after its ranks joined aborts the generation for the
 * ranks on other nodes at once (not at their deadline), naming it. A tree
 * of its own: root, node A, node B; B is killed. */
static void test_dead_node_aborts(void **state) {
  (void)state;
  struct proc xroot, xa, xb;
  char raddr[64], aaddr[64], baddr[64], ua[160], ub[160];
  assert_int_equal(start_daemon(&xroot, "xroot", NULL, raddr), 0);
  assert_int_equal(start_daemon(&xa, "xa", raddr, aaddr), 0);
  assert_int_equal(start_daemon(&xb, "xb", raddr, baddr), 0);
  snprintf(ua, sizeof(ua), "unix:%s/xa.sock", dir);
  snprintf(ub, sizeof(ub), "unix:%s/xb.sock", dir);
  struct rank_proc live[2], doomed;
  char line[1400];
  addr_override = ub;
  struct rank_spec d = {"node-dies", "hostB", 0, 0, 1, 3, 60, "hold", NULL};
  doomed = spawn_rank(&d);
  addr_override = ua;
  for (int i = 0; i < 2; i++) {
    struct rank_spec s = {"node-dies", "hostA", 0,         i,   2,
                          3,           60,      "barrier", NULL};
    live[i] = spawn_rank(&s);
  }
  addr_override = NULL;
  assert_int_equal(read_report(&doomed, line, sizeof(line)), 0);
  kill(xb.pid, SIGKILL);
  proc_wait(&xb);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(read_report(&live[i], line, sizeof(line)), RDZV_EABORTED);
    /* After --session-grace-ms (its subtree did not come back), naming
     * the node, the host and the rank lost. */
    if (strstr(line, "node xb disconnected") == NULL ||
        strstr(line, "host hostB (ranks 2) lost") == NULL)
      fail_msg("the abort names no lost host: %s", line);
    assert_int_equal(finish_rank(&live[i]), 0);
  }
  kill(doomed.pid, SIGKILL);
  finish_rank(&doomed);
  assert_int_equal(proc_stop(&xa), 0);
  assert_int_equal(proc_stop(&xroot), 0);
}

static void test_job_id_required(void **state) {
  (void)state;
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = node_addr[0];
  o.local_rank = 0;
  o.world_size = 1;
  rdzv_rendezvous_t *r = NULL;
  char err[256];
  assert_int_equal(rdzv_rendezvous_join(&o, &r, err, sizeof(err)),
                   RDZV_EJOB_ID_MISSING);
  assert_null(r);
  o.job_id = "";
  assert_int_equal(rdzv_rendezvous_join(&o, &r, err, sizeof(err)),
                   RDZV_EJOB_ID_MISSING);
  assert_non_null(strstr(err, "no shared default"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_example_64_ranks),
      cmocka_unit_test(test_missing_hosts_named),
      cmocka_unit_test(test_duplicate_claim),
      cmocka_unit_test(test_two_live_jobs_one_id),
      cmocka_unit_test(test_new_generation_and_stale),
      cmocka_unit_test(test_dead_rank_aborts),
      cmocka_unit_test(test_barrier_names_missing_rank),
      cmocka_unit_test(test_scalable_ids),
      cmocka_unit_test(test_host_with_two_locations),
      cmocka_unit_test(test_elastic_round),
      cmocka_unit_test(test_domain_auto),
      cmocka_unit_test(test_dead_node_aborts),
      cmocka_unit_test(test_job_id_required),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
