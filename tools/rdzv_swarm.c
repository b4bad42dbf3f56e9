/* rdzv-swarm: many simulated ranks in one process, each with its own
 * client handle and connection, driven by one poll() loop through the
 * library's poll-driven core. Used by the integration tests and the
 * benchmark to put real load on real daemons.
 *
 *   rdzv-swarm --addrs A[,B...] --job JOB --clients N [--member-base B]
 *              [--timeout S] SCENARIO [ARGS]
 *
 * Clients are spread round-robin over the addresses. Scenarios:
 *   wait KEY          every client waits for KEY; prints "wait ok N"
 *   add KEY           every client adds 1; prints each returned value
 *   get KEY           every client reads a write-once KEY (hinted, so
 *                     nodes coalesce the reads); prints "get ok N"
 *   barrier NAME CNT  client i is member base+i; prints "barrier ok N"
 *   gather NAME CNT   client i gives "m<id>"; checks every result holds
 *                     CNT entries "m0".."m<CNT-1>" in order; prints
 *                     "gather ok N"
 *   ops SECONDS KIND  each client keeps one request of KIND (set, get,
 *                     add) in flight for SECONDS; prints "ops N RATE"
 *   reconnect SECONDS KEY
 *                     for SECONDS each client in turn opens a new handle,
 *                     connects (the hello, and its authentication when
 *                     RDZV_SECRET_FILE or RDZV_SECRET is set), reads the
 *                     write-once KEY (which must exist) and closes it;
 *                     prints "reconnect N RATE" (connections a second)
 * Before submitting, every client connects; "connected N" is printed and
 * stdout flushed, and a scenario starts only after a line is read from
 * stdin when --sync is given (lets a test line things up). With --hold,
 * after the report every client stays connected (idle) until a line is
 * read from stdin (lets a tool measure idle connections' memory).
 * Exit status: 0 when every client succeeded, 1 otherwise (the first
 * failures go to stderr), 2 for usage errors. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdzv/rdzv.h"

struct swarm;

struct cl {
  struct swarm *s;
  rdzv_client_t *c;
  uint64_t member;
  bool recycle; /* reconnect: its handle is done; a new one goes next */
  bool done;
  int status;
  int64_t value;
  uint64_t ops;
};

struct swarm {
  struct cl *cls;
  size_t n;
  size_t pending;
  size_t failed;
  const char *scenario;
  const char *arg;
  uint64_t count;
  double timeout_s;
  double stop_at;            /* ops and reconnect scenarios */
  int kind;                  /* ops scenario: RDZV_OP_* */
  const char *addr_of_first; /* reconnect: where new handles go */
  const char *job;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_u64(const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-')
    return -1;
  *out = v;
  return 0;
}

static void fail(struct cl *k, int status, const char *what) {
  struct swarm *s = k->s;
  k->status = status;
  if (s->failed++ < 5)
    fprintf(stderr, "rdzv-swarm: client %" PRIu64 ": %s: %s (%s)\n", k->member,
            what, rdzv_strerror(status), rdzv_client_last_error(k->c));
}

/* Checks a gather result: CNT entries, member i holding "m<i>". */
static int check_gather(struct swarm *s, const struct rdzv_result *res) {
  if (res->nvals != s->count)
    return -1;
  for (size_t i = 0; i < res->nvals; i++) {
    const uint8_t *p = res->vals[i].data;
    char want[32];
    int n = snprintf(want, sizeof(want), "m%zu", i);
    if (res->vals[i].len != 8 + (size_t)n ||
        memcmp(p + 8, want, (size_t)n) != 0)
      return -1;
    uint64_t id = 0;
    for (int b = 7; b >= 0; b--)
      id = (id << 8) | p[b];
    if (id != i)
      return -1;
  }
  return 0;
}

static int submit(struct cl *k);

static void on_done(rdzv_client_t *c, const struct rdzv_result *res,
                    void *arg) {
  struct cl *k = arg;
  struct swarm *s = k->s;
  (void)c;
  if (res->status != 0) {
    fail(k, res->status, s->scenario);
  } else if (strcmp(s->scenario, "gather") == 0 && check_gather(s, res)) {
    fail(k, RDZV_EPROTO, "gather result differs from the expected");
  } else {
    k->value = res->a;
    k->ops++;
    if (strcmp(s->scenario, "ops") == 0 && now_s() < s->stop_at &&
        submit(k) == 0)
      return;
    if (strcmp(s->scenario, "reconnect") == 0 && now_s() < s->stop_at) {
      k->recycle = true; /* not destroyed inside its own callback */
      return;
    }
  }
  k->done = true;
  s->pending--;
}

static int submit(struct cl *k) {
  struct swarm *s = k->s;
  struct rdzv_bytes key = {s->arg, strlen(s->arg)};
  uint8_t contrib[40];
  struct rdzv_bytes val = {contrib, 8};
  struct rdzv_request req;
  memset(&req, 0, sizeof(req));
  req.nkeys = 1;
  req.keys = &key;
  for (int b = 0; b < 8; b++)
    contrib[b] = (uint8_t)(k->member >> (8 * b));
  if (strcmp(s->scenario, "wait") == 0) {
    req.op = RDZV_OP_WAIT;
  } else if (strcmp(s->scenario, "add") == 0) {
    req.op = RDZV_OP_ADD;
    req.a = 1;
  } else if (strcmp(s->scenario, "get") == 0 ||
             strcmp(s->scenario, "reconnect") == 0) {
    req.op = RDZV_OP_GET;
    req.flags = RDZV_STORE_WRITE_ONCE;
  } else if (strcmp(s->scenario, "barrier") == 0 ||
             strcmp(s->scenario, "gather") == 0) {
    req.op = s->scenario[0] == 'b' ? RDZV_OP_BARRIER : RDZV_OP_GATHER;
    req.b = (int64_t)s->count;
    if (req.op == RDZV_OP_GATHER)
      val.len =
          8 + (size_t)snprintf((char *)contrib + 8, 32, "m%" PRIu64, k->member);
    req.nvals = 1;
    req.vals = &val;
  } else { /* ops */
    req.op = s->kind;
    req.a = 1;
    if (s->kind == RDZV_OP_SET) {
      req.nvals = 1;
      val.len = 8;
      req.vals = &val;
    }
  }
  return rdzv_client_submit(k->c, &req, s->timeout_s, on_done, k);
}

/* One poll() over every client's socket, then let each make progress. */
static int drive(struct swarm *s, struct pollfd *pfds, double deadline) {
  int timeout = (int)((deadline - now_s()) * 1000);
  if (timeout < 0)
    return RDZV_EDEADLINE;
  nfds_t np = 0;
  for (size_t i = 0; i < s->n; i++) {
    int t = rdzv_client_timeout_ms(s->cls[i].c);
    if (t >= 0 && t < timeout)
      timeout = t;
    int fd = rdzv_client_fd(s->cls[i].c);
    pfds[i].fd = fd;
    pfds[i].events = fd >= 0 ? rdzv_client_events(s->cls[i].c) : 0;
    pfds[i].revents = 0;
    np = i + 1;
  }
  if (poll(pfds, np, timeout) < 0 && errno != EINTR)
    return -errno;
  for (size_t i = 0; i < s->n; i++) {
    int rc = rdzv_client_process(s->cls[i].c);
    if (rc < 0)
      return rc;
  }
  for (size_t i = 0; i < s->n; i++) { /* reconnect: a new handle each */
    struct cl *k = &s->cls[i];
    if (!k->recycle)
      continue;
    k->recycle = false;
    rdzv_client_destroy(k->c);
    k->c = NULL;
    struct rdzv_client_opts o;
    rdzv_client_opts_init(&o);
    o.addr = s->addr_of_first;
    o.job_id = s->job;
    int rc = rdzv_client_create(&o, &k->c);
    if (rc == 0)
      rc = submit(k);
    if (rc < 0) {
      fail(k, rc, "reconnect");
      k->done = true;
      s->pending--;
      if (k->c == NULL) /* every handle stays valid for the loops */
        return rc;
    }
  }
  return 0;
}

static int run_until_done(struct swarm *s, double timeout_s) {
  struct pollfd *pfds = calloc(s->n, sizeof(*pfds));
  if (pfds == NULL)
    return RDZV_ENOMEM;
  double deadline = now_s() + timeout_s + 1;
  int rc = 0;
  while (s->pending > 0 && rc == 0)
    rc = drive(s, pfds, deadline);
  free(pfds);
  return rc;
}

static int usage_to(FILE *f, int rc) {
  fprintf(f, "usage: rdzv-swarm --addrs A[,B...] --job JOB --clients N\n"
             "       [--member-base B] [--timeout S] [--sync] [--hold]\n"
             "       SCENARIO ARGS\n"
             "scenarios: wait KEY | add KEY | get KEY | barrier NAME COUNT |\n"
             "           gather NAME COUNT | ops SECONDS set|get|add |\n"
             "           reconnect SECONDS KEY\n"
             "(the job's secret: RDZV_SECRET_FILE or RDZV_SECRET)\n");
  return rc;
}

static int usage(void) { return usage_to(stderr, 2); }

static int create_clients(struct swarm *s, char *addrs, const char *job,
                          uint64_t base) {
  const char *list[256];
  size_t na = 0;
  for (char *save = NULL, *a = strtok_r(addrs, ",", &save);
       a != NULL && na < 256; a = strtok_r(NULL, ",", &save))
    list[na++] = a;
  if (na == 0)
    return -EINVAL;
  for (size_t i = 0; i < s->n; i++) {
    struct rdzv_client_opts o;
    rdzv_client_opts_init(&o);
    o.addr = list[i % na];
    o.job_id = job;
    struct cl *k = &s->cls[i];
    k->s = s;
    k->member = base + i;
    int rc = rdzv_client_create(&o, &k->c);
    if (rc == 0)
      rc = rdzv_client_connect(k->c, s->timeout_s);
    if (rc < 0) {
      fprintf(stderr, "rdzv-swarm: connect %s: %s (%s)\n", o.addr,
              rdzv_strerror(rc), k->c ? rdzv_client_last_error(k->c) : "");
      return rc;
    }
  }
  return 0;
}

static int parse_scenario(struct swarm *s, int argc, char **argv, int i) {
  if (i >= argc)
    return -1;
  s->scenario = argv[i++];
  if (i >= argc)
    return -1;
  s->arg = argv[i++];
  bool coll =
      strcmp(s->scenario, "barrier") == 0 || strcmp(s->scenario, "gather") == 0;
  if (coll && (i >= argc || parse_u64(argv[i++], &s->count) < 0))
    return -1;
  if (strcmp(s->scenario, "reconnect") == 0) {
    uint64_t secs;
    if (parse_u64(s->arg, &secs) < 0 || i >= argc)
      return -1;
    s->arg = argv[i++];
    s->stop_at = (double)secs;
  } else if (strcmp(s->scenario, "ops") == 0) {
    uint64_t secs;
    if (parse_u64(s->arg, &secs) < 0 || i >= argc)
      return -1;
    const char *kind = argv[i++];
    s->kind = strcmp(kind, "set") == 0   ? RDZV_OP_SET
              : strcmp(kind, "get") == 0 ? RDZV_OP_GET
              : strcmp(kind, "add") == 0 ? RDZV_OP_ADD
                                         : -1;
    if (s->kind < 0)
      return -1;
    s->arg = s->kind == RDZV_OP_ADD ? "bench/counter" : "bench/key";
    s->stop_at = (double)secs;
  } else if (!coll && strcmp(s->scenario, "wait") != 0 &&
             strcmp(s->scenario, "add") != 0 &&
             strcmp(s->scenario, "get") != 0) {
    return -1;
  }
  return i == argc ? 0 : -1;
}

static void report(struct swarm *s, double elapsed) {
  if (strcmp(s->scenario, "add") == 0) {
    for (size_t i = 0; i < s->n; i++)
      if (s->cls[i].status == 0)
        printf("%" PRId64 "\n", s->cls[i].value);
  } else if (strcmp(s->scenario, "ops") == 0 ||
             strcmp(s->scenario, "reconnect") == 0) {
    uint64_t total = 0;
    for (size_t i = 0; i < s->n; i++)
      total += s->cls[i].ops;
    printf("%s %" PRIu64 " %.0f\n", s->scenario, total,
           (double)total / elapsed);
  } else {
    printf("%s ok %zu\n", s->scenario, s->n - s->failed);
  }
}

int main(int argc, char **argv) {
  struct swarm s;
  memset(&s, 0, sizeof(s));
  s.timeout_s = 60;
  char *addrs = NULL;
  const char *job = getenv("RDZV_JOB");
  uint64_t n = 0, base = 0;
  bool sync = false, hold = false;
  int i = 1;
  for (int k = 1; k < argc; k++)
    if (strcmp(argv[k], "--help") == 0 || strcmp(argv[k], "-h") == 0)
      return usage_to(stdout, 0);
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    const char *o = argv[i];
    if (strcmp(o, "--sync") == 0) {
      sync = true;
      continue;
    }
    if (strcmp(o, "--hold") == 0) {
      hold = true;
      continue;
    }
    if (i + 1 >= argc)
      return usage();
    const char *v = argv[++i];
    uint64_t t;
    if (strcmp(o, "--addrs") == 0)
      addrs = strdup(v);
    else if (strcmp(o, "--job") == 0)
      job = v;
    else if (strcmp(o, "--clients") == 0 && parse_u64(v, &n) == 0)
      ;
    else if (strcmp(o, "--member-base") == 0 && parse_u64(v, &base) == 0)
      ;
    else if (strcmp(o, "--timeout") == 0 && parse_u64(v, &t) == 0)
      s.timeout_s = (double)t;
    else
      return usage();
  }
  if (addrs == NULL || job == NULL || n == 0 ||
      parse_scenario(&s, argc, argv, i) < 0)
    return usage();
  s.n = n;
  s.job = job;
  /* reconnect: new handles go to the first address (strtok cuts the
   * list itself). */
  char *addrs_copy = strdup(addrs);
  if (addrs_copy == NULL)
    return 1;
  s.addr_of_first = addrs_copy;
  if (strchr(addrs_copy, ',') != NULL)
    *strchr(addrs_copy, ',') = '\0';
  s.cls = calloc(n, sizeof(*s.cls));
  if (s.cls == NULL || create_clients(&s, addrs, job, base) < 0)
    return 1;
  printf("connected %zu\n", s.n);
  fflush(stdout);
  char line[64];
  if (sync && fgets(line, sizeof(line), stdin) == NULL)
    return 1;
  double t0 = now_s();
  if (s.stop_at > 0)
    s.stop_at += t0;
  for (size_t k = 0; k < s.n; k++) {
    int rc = submit(&s.cls[k]);
    if (rc < 0)
      fail(&s.cls[k], rc, "submit");
    else
      s.pending++;
  }
  int rc =
      run_until_done(&s, s.timeout_s + (s.stop_at > 0 ? s.stop_at - t0 : 0));
  report(&s, now_s() - t0);
  fflush(stdout);
  if (hold && fgets(line, sizeof(line), stdin) == NULL)
    line[0] = '\0'; /* stdin closed: let go as well */
  for (size_t k = 0; k < s.n; k++)
    rdzv_client_destroy(s.cls[k].c);
  free(s.cls);
  free(addrs);
  free(addrs_copy);
  return rc == 0 && s.failed == 0 ? 0 : 1;
}
