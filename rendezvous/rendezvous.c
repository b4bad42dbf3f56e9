/* The rank side of the rendezvous (rdzv/rendezvous.h): options, the join
 * and the handle. Unique ids, topology and sub-groups are in ids.c. */
#include "rdzv/rendezvous.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdzv/store.h"
#include "rendezvous/join_wire.h"
#include "rendezvous/rendezvous_int.h"
#include "rendezvous/topo.h"

/* Keeps the server's text (keys[0] of a failure) of a raw request. */
void rdzv__rdv_keep_reply_text(rdzv_rendezvous_t *r,
                               const struct rdzv_result *res) {
  if (res->status < 0 && res->nkeys > 0)
    snprintf(r->reply_text, sizeof(r->reply_text), "%.*s",
             (int)res->keys[0].len, (const char *)res->keys[0].data);
}

/* The options' size in version 1 (up to secret_file), 2 (up to domain)
 * and 3. */
#define OPTS_V1                                                                \
  (offsetof(struct rdzv_rendezvous_opts, secret_file) + sizeof(const char *))
#define OPTS_V2                                                                \
  (offsetof(struct rdzv_rendezvous_opts, domain) + sizeof(const char *))
#define OPTS_V3 sizeof(struct rdzv_rendezvous_opts)

void rdzv_rendezvous_opts_init(struct rdzv_rendezvous_opts *o) {
  memset(o, 0, sizeof(*o));
  o->size = sizeof(*o);
  o->version = RDZV_RENDEZVOUS_OPTS_VERSION;
  o->round = "world";
  o->local_rank = -1;
  o->last_call_s = 5.0;
  o->timeout_s = 60.0;
}

/* Parses a whole non-negative int32 (a leading number for lists such as
 * SLURM_NTASKS_PER_NODE="8(x4)"). */
static int parse_i32(const char *s, int prefix_ok, int32_t *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || v < 0 || v > INT32_MAX ||
      (!prefix_ok && *end != '\0'))
    return -EINVAL;
  *out = (int32_t)v;
  return 0;
}

static int env_i32(const char *name, int prefix_ok, int32_t *field,
                   int32_t unset, char *err, size_t errlen) {
  const char *v = getenv(name);
  if (*field != unset || v == NULL || *v == '\0')
    return 0;
  if (parse_i32(v, prefix_ok, field) < 0) {
    if (err != NULL)
      snprintf(err, errlen, "%s='%s' is not a non-negative integer", name, v);
    return -EINVAL;
  }
  return 0;
}

static const char *first_env(const char *a, const char *b) {
  const char *v = getenv(a);
  if (v != NULL && *v != '\0')
    return v;
  v = b != NULL ? getenv(b) : NULL;
  return v != NULL && *v != '\0' ? v : NULL;
}

int rdzv_rendezvous_opts_from_env(struct rdzv_rendezvous_opts *o, char *err,
                                  size_t errlen) {
  static char pod_host[64];
  if (o->addr == NULL)
    o->addr = first_env("RDZV_ADDR", NULL);
  if (o->job_id == NULL) {
    const char *t = getenv("TORCHELASTIC_RUN_ID");
    /* torchrun's default run id is the literal "none", shared by every
     * job: never use it as an identity. */
    o->job_id = first_env("RDZV_JOB", NULL);
    if (o->job_id == NULL && t != NULL && *t && strcmp(t, "none") != 0)
      o->job_id = t;
    if (o->job_id == NULL)
      o->job_id = first_env("SLURM_JOB_ID", NULL);
  }
  if (o->host == NULL)
    o->host = first_env("RDZV_HOST", NULL);
  if (o->host == NULL && getenv("JOB_COMPLETION_INDEX") != NULL) {
    snprintf(pod_host, sizeof(pod_host), "pod-%s",
             getenv("JOB_COMPLETION_INDEX"));
    o->host = pod_host;
  }
  if (o->location == NULL)
    o->location = first_env("RDZV_LOCATION", NULL);
  if (o->size >= OPTS_V2 && o->domain == NULL)
    o->domain = first_env("RDZV_DOMAIN", NULL);
  if (o->size >= OPTS_V3 && o->segment_hosts == 0 &&
      env_i32("RDZV_SEGMENT_HOSTS", 0, &o->segment_hosts, 0, err, errlen) < 0)
    return -EINVAL;
  const char *role = first_env("RDZV_ROLE", NULL);
  if (role != NULL && o->size >= OPTS_V2 && o->role == RDZV_MEMBER_ACTIVE) {
    if (strcmp(role, "spare") == 0) {
      o->role = RDZV_MEMBER_SPARE;
    } else if (strcmp(role, "active") != 0) {
      if (err != NULL)
        snprintf(err, errlen,
                 "RDZV_ROLE='%s' is neither 'active' nor "
                 "'spare'",
                 role);
      return -EINVAL;
    }
  }
  int rc = 0;
  if (rc == 0)
    rc = env_i32("LOCAL_RANK", 0, &o->local_rank, -1, err, errlen);
  if (rc == 0)
    rc = env_i32("SLURM_LOCALID", 0, &o->local_rank, -1, err, errlen);
  if (rc == 0)
    rc = env_i32("LOCAL_WORLD_SIZE", 0, &o->local_size, 0, err, errlen);
  if (rc == 0)
    rc = env_i32("SLURM_NTASKS_PER_NODE", 1, &o->local_size, 0, err, errlen);
  if (rc == 0)
    rc = env_i32("WORLD_SIZE", 0, &o->world_size, 0, err, errlen);
  if (rc == 0)
    rc = env_i32("SLURM_NTASKS", 0, &o->world_size, 0, err, errlen);
  return rc;
}

static void set_err(char *err, size_t n, const char *fmt, const char *a,
                    const char *b) {
  if (err != NULL && n > 0)
    snprintf(err, n, fmt, a, b);
}

static int check_opts(const struct rdzv_rendezvous_opts *o, char *err,
                      size_t n) {
  if (o == NULL || (o->size != sizeof(*o) && o->size != OPTS_V1))
    return -EINVAL;
  if (o->job_id == NULL || o->job_id[0] == '\0' || strlen(o->job_id) > 255) {
    set_err(err, n, "%s%s", "job id missing, empty or over 255 bytes: set ",
            "opts.job_id or RDZV_JOB (there is no shared default)");
    return RDZV_EJOB_ID_MISSING;
  }
  const char *bad = NULL;
  if (o->addr == NULL)
    bad = "addr (or RDZV_ADDR)";
  else if (o->round == NULL || !*o->round || strlen(o->round) > 127 ||
           strchr(o->round, '/'))
    bad = "round (1..127 bytes, no '/')";
  else if (o->local_rank < 0)
    bad = "local_rank (or LOCAL_RANK / SLURM_LOCALID)";
  else if (o->world_size < 1)
    bad = "world_size (or WORLD_SIZE / SLURM_NTASKS)";
  else if (o->min_size < 0 || o->min_size > o->world_size)
    bad = "min_size (0 .. world_size)";
  else if (!(o->timeout_s > 0) || !(o->last_call_s >= 0))
    bad = "timeout_s / last_call_s";
  else if (o->size >= OPTS_V2 && o->role != RDZV_MEMBER_ACTIVE &&
           o->role != RDZV_MEMBER_SPARE)
    bad = "role (RDZV_MEMBER_ACTIVE or RDZV_MEMBER_SPARE)";
  else if (o->size >= OPTS_V2 && o->domain != NULL && strlen(o->domain) > 255)
    bad = "domain (<= 255 bytes)";
  else if (o->size >= OPTS_V3 && o->segment_hosts < 0)
    bad = "segment_hosts (0: none, else hosts of one domain per segment)";
  if (bad != NULL) {
    set_err(err, n, "%s%s", "rendezvous option missing or out of range: ", bad);
    return -EINVAL;
  }
  return 0;
}

/* ---- join ---------------------------------------------------------------------- */

struct join_call {
  int done;
  int status;
  uint64_t claim;
  int64_t gen;
  struct rdzv_assignment a;
  char text[768];
};

static void on_join(rdzv_client_t *c, const struct rdzv_result *res,
                    void *arg) {
  struct join_call *k = arg;
  (void)c;
  k->done = 1;
  k->status = res->status;
  k->gen = res->a; /* also of a parked join: the generation to outwait */
  if (res->nkeys > 0)
    snprintf(k->text, sizeof(k->text), "%.*s", (int)res->keys[0].len,
             (const char *)res->keys[0].data);
  for (size_t i = 0; k->status == 0 && i < res->nvals; i++) {
    uint64_t claim = 0;
    struct rdzv_assignment a;
    int st = rdzv_join_assign_decode(res->vals[i].data, res->vals[i].len,
                                     &claim, &a);
    if (claim != k->claim)
      continue;
    k->status = st;
    k->a = a;
    k->gen = res->a;
    return;
  }
  if (k->status == 0) {
    k->status = RDZV_EPROTO;
    snprintf(k->text, sizeof(k->text), "the join reply lacks this rank");
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t new_claim(void) {
  uint64_t v = 0;
  FILE *f = fopen("/dev/urandom", "rb");
  if (f != NULL) {
    if (fread(&v, sizeof(v), 1, f) != 1)
      v = 0;
    fclose(f);
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return v ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec;
}

/* A spare asks for a round deadline of at most this long (its own
 * timeout_s may be hours): a generation it opens still fails in time,
 * naming who is missing, and the spare joins the next. */
#define SPARE_ROUND_DEADLINE_S 60.0

/* Sends one join and runs it for at most timeout_s. */
static int send_join(rdzv_rendezvous_t *r, const struct rdzv_rendezvous_opts *o,
                     const char *host, const char *topo, double timeout_s,
                     struct join_call *k) {
  bool spare = o->size >= OPTS_V2 && o->role == RDZV_MEMBER_SPARE;
  double round_s = spare && o->timeout_s > SPARE_ROUND_DEADLINE_S
                       ? SPARE_ROUND_DEADLINE_S
                       : o->timeout_s;
  struct rdzv_join_params p = {
      .min_size = (uint32_t)(o->min_size ? o->min_size : o->world_size),
      .max_size = (uint32_t)o->world_size,
      .last_call_ms = (uint32_t)(o->last_call_s * 1000),
      .timeout_ms = (uint32_t)(round_s * 1000),
      .segment_hosts = o->size >= OPTS_V3 ? (uint32_t)o->segment_hosts : 0};
  struct rdzv_join_full j = {
      .rec = {.host = (const uint8_t *)host,
              .host_len = (uint32_t)strlen(host),
              .location = (const uint8_t *)(o->location ? o->location : ""),
              .location_len = o->location ? (uint32_t)strlen(o->location) : 0,
              .local_rank = o->local_rank,
              .claim = k->claim},
      .local_size = o->local_size,
      .topo = (const uint8_t *)topo,
      .topo_len = (uint32_t)strlen(topo)};
  if (o->size >= OPTS_V2) {
    j.role = (uint8_t)o->role;
    j.rec.domain = (const uint8_t *)(o->domain ? o->domain : "");
    j.rec.domain_len = o->domain ? (uint32_t)strlen(o->domain) : 0;
  }
  uint8_t params[RDZV_JOIN_PARAMS_MAX_BYTES];
  rdzv_join_params_encode(&p, params);
  size_t rl = rdzv_join_rec_size(&j);
  uint8_t *rec = malloc(rl);
  if (rec == NULL)
    return RDZV_ENOMEM;
  int rc = rdzv_join_rec_encode(&j, rec);
  struct rdzv_bytes key = {r->round, strlen(r->round)};
  struct rdzv_bytes vals[2] = {{params, rdzv_join_params_size(&p)}, {rec, rl}};
  struct rdzv_request req = {
      .op = RDZV_OP_JOIN, .nkeys = 1, .keys = &key, .nvals = 2, .vals = vals};
  if (rc == 0)
    rc = rdzv_client_submit(r->c, &req, timeout_s, on_join, k);
  if (rc == 0)
    rc = rdzv_client_run(r->c, timeout_s + 3);
  if (rc == 0 && k->done && k->status == 0) {
    /* The rank's session: should its connection be lost (its node
     * restarts, or it is reached through a fallback), the same record
     * with the generation goes first on the next one, and the daemons
     * bind this claim to the new path instead of aborting (wire.h,
     * RDZV_MSG_JOIN with a = generation). */
    req.a = k->gen;
    int src = rdzv_client_set_resume(r->c, &req);
    if (src < 0) {
      free(rec);
      return src;
    }
  }
  free(rec);
  return rc < 0 && !k->done ? rc : 0;
}

static int make_client(const struct rdzv_rendezvous_opts *o,
                       rdzv_client_t **c) {
  struct rdzv_client_opts co;
  rdzv_client_opts_init(&co);
  co.addr = o->addr;
  co.job_id = o->job_id;
  co.secret_file = o->secret_file;
  return rdzv_client_create(&co, c);
}

/* The topology record plus "process=<hostname>:<pid>", so that errors
 * about this process (a duplicate claim) can name it. */
static const char *with_process(const char *topo, char *out, size_t n) {
  char hn[128] = "host";
  gethostname(hn, sizeof(hn) - 1);
  hn[sizeof(hn) - 1] = '\0';
  size_t tl = strlen(topo);
  int w =
      snprintf(out, n, "%s%sprocess=%s:%d\n", topo,
               tl > 0 && topo[tl - 1] != '\n' ? "\n" : "", hn, (int)getpid());
  return w > 0 && (size_t)w < n ? out : topo;
}

int rdzv_rendezvous_join(const struct rdzv_rendezvous_opts *o,
                         rdzv_rendezvous_t **out, char *err, size_t errlen) {
  int rc = check_opts(o, err, errlen);
  if (rc < 0)
    return rc;
  /* domain "auto": this host's NVLink domain from NVML, or none. */
  struct rdzv_rendezvous_opts with_domain;
  char domain[64];
  if (o->size >= OPTS_V2 && o->domain != NULL &&
      strcmp(o->domain, "auto") == 0) {
    rdzv_rendezvous_opts_init(&with_domain);
    memcpy(&with_domain, o,
           o->size < sizeof(with_domain) ? o->size : sizeof(with_domain));
    with_domain.domain =
        rdzv_domain_detect(NULL, 0, domain, sizeof(domain)) > 0 ? domain : NULL;
    o = &with_domain;
  }
  char host[256], topo[4096], rec[8192];
  if (o->host != NULL)
    snprintf(host, sizeof(host), "%s", o->host);
  else if (gethostname(host, sizeof(host) - 1) != 0)
    snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = '\0';
  if (o->topology == NULL &&
      rdzv_topology_detect(host, o->local_rank, o->location, topo,
                           sizeof(topo)) < 0)
    topo[0] = '\0';
  rdzv_rendezvous_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return RDZV_ENOMEM;
  r->magic = RDZV_RENDEZVOUS_MAGIC;
  snprintf(r->round, sizeof(r->round), "%s", o->round);
  struct join_call k = {.claim = new_claim()};
  rc = make_client(o, &r->c);
  const char *record =
      with_process(o->topology ? o->topology : topo, rec, sizeof(rec));
  double end = now_s() + o->timeout_s;
  bool spare = o->size >= OPTS_V2 && o->role == RDZV_MEMBER_SPARE;
  for (;;) {
    double left = end - now_s();
    if (rc == 0)
      rc = send_join(r, o, host, record, left > 0.1 ? left : 0.1, &k);
    if (rc == 0)
      rc = k.status;
    left = end - now_s();
    if (spare && left > 1 &&
        (rc == RDZV_EABORTED || rc == RDZV_ESTALE_GENERATION ||
         rc == RDZV_EDEADLINE)) {
      /* The generation this spare waited in failed (a member lost, its
       * deadline): the next one is joined. */
      struct timespec pause = {0, 200 * 1000 * 1000};
      nanosleep(&pause, NULL);
      rc = 0;
      k.done = 0;
      k.text[0] = '\0';
      continue;
    }
    if (rc != RDZV_EPARKED || !spare || left <= 0)
      break;
    /* Parked: the generation's end (its successor's number, or its
     * abort) opens a place; then join again, with the same claim. */
    char next[200];
    snprintf(next, sizeof(next), "rdzv/%s/g%" PRId64 "/next", o->round, k.gen);
    const char *keys[1] = {next};
    int wrc = rdzv_store_wait(r->c, keys, 1, left);
    if (wrc == RDZV_EDEADLINE || wrc == -ETIMEDOUT) {
      char was[sizeof(k.text)];
      snprintf(was, sizeof(was), "%s", k.text);
      snprintf(k.text, sizeof(k.text), "still parked after %g s: %.600s",
               o->timeout_s, was);
      break;
    }
    if (wrc < 0 && wrc != RDZV_EABORTED && wrc != RDZV_ESTALE_GENERATION) {
      rc = wrc;
      snprintf(k.text, sizeof(k.text), "waiting parked for %s: %s", next,
               rdzv_client_last_error(r->c));
      break;
    }
    rc = 0;
    k.done = 0;
    k.text[0] = '\0';
  }
  if (rc < 0) {
    if (err != NULL && errlen > 0)
      snprintf(err, errlen, "join round '%s' of job '%s': %s: %s", o->round,
               o->job_id, rdzv_strerror(rc),
               k.text[0] ? k.text : (r->c ? rdzv_client_last_error(r->c) : ""));
    rdzv_client_destroy(r->c);
    free(r);
    return rc;
  }
  r->a = k.a;
  r->gen = k.gen;
  *out = r;
  return 0;
}

/* ---- the handle ------------------------------------------------------------- */

static void on_leave(rdzv_client_t *c, const struct rdzv_result *res,
                     void *arg) {
  (void)c;
  (void)res;
  (void)arg;
}

static int send_abort(rdzv_rendezvous_t *r, const char *why, double timeout_s) {
  struct rdzv_bytes keys[2] = {{r->round, strlen(r->round)},
                               {why, strlen(why)}};
  struct rdzv_request req = {
      .op = RDZV_OP_ABORT, .a = r->gen, .nkeys = 2, .keys = keys};
  int rc = rdzv_client_submit(r->c, &req, timeout_s, on_leave, NULL);
  if (rc == 0)
    rc = rdzv_client_run(r->c, timeout_s);
  return rc;
}

void rdzv_rendezvous_destroy(rdzv_rendezvous_t *r) {
  if (r == NULL)
    return;
  /* A clean leave first: the node must not take this connection's end
   * for a dead rank. */
  struct rdzv_bytes key = {r->round, strlen(r->round)};
  struct rdzv_request req = {.op = RDZV_OP_ABORT,
                             .flags = RDZV_STORE_LEAVE,
                             .a = r->gen,
                             .nkeys = 1,
                             .keys = &key};
  if (rdzv_client_submit(r->c, &req, 2.0, on_leave, NULL) == 0)
    rdzv_client_run(r->c, 2.0);
  rdzv_client_destroy(r->c);
  free(r->hosts);
  r->magic = 0;
  free(r);
}

int32_t rdzv_rendezvous_rank(const rdzv_rendezvous_t *r) { return r->a.rank; }
int32_t rdzv_rendezvous_world_size(const rdzv_rendezvous_t *r) {
  return r->a.world_size;
}
int32_t rdzv_rendezvous_local_rank(const rdzv_rendezvous_t *r) {
  return r->a.local_rank;
}
int32_t rdzv_rendezvous_local_size(const rdzv_rendezvous_t *r) {
  return r->a.local_size;
}
int32_t rdzv_rendezvous_node_rank(const rdzv_rendezvous_t *r) {
  return r->a.node_rank;
}
int32_t rdzv_rendezvous_node_count(const rdzv_rendezvous_t *r) {
  return r->a.node_count;
}
int64_t rdzv_rendezvous_generation(const rdzv_rendezvous_t *r) {
  return r->gen;
}
rdzv_client_t *rdzv_rendezvous_client(rdzv_rendezvous_t *r) { return r->c; }
const char *rdzv_rendezvous_round(const rdzv_rendezvous_t *r) {
  return r->round;
}
const char *rdzv_rendezvous_last_error(const rdzv_rendezvous_t *r) {
  return r->last_error;
}

int rdzv__rdv_fail(rdzv_rendezvous_t *r, int rc, const char *what) {
  snprintf(r->last_error, sizeof(r->last_error), "%s: %s (%s)", what,
           rdzv_strerror(rc),
           r->reply_text[0] ? r->reply_text : rdzv_client_last_error(r->c));
  r->reply_text[0] = '\0';
  return rc;
}

/* "rdzv/<round>/g<gen>/<rest>" */
void rdzv__rdv_gen_key(const rdzv_rendezvous_t *r, char *out, size_t n,
                       const char *rest) {
  snprintf(out, n, "rdzv/%s/g%" PRId64 "/%s", r->round, r->gen, rest);
}

int rdzv_rendezvous_abort(rdzv_rendezvous_t *r, const char *reason,
                          double timeout_s) {
  int rc = send_abort(r, reason ? reason : "aborted by a rank", timeout_s);
  return rc < 0 ? rdzv__rdv_fail(r, rc, "abort") : 0;
}

int rdzv_rendezvous_barrier(rdzv_rendezvous_t *r, const char *name,
                            double timeout_s) {
  return rdzv_rendezvous_group_barrier(r, name, NULL, r->a.world_size,
                                       timeout_s);
}
