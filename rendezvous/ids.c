/* The rank side of the rendezvous (rdzv/rendezvous.h): NCCL unique ids,
 * the host table and topology records, and the ids and barriers of
 * sub-groups, all through the tree (waits, write-once keys, gathers). */
#include "rdzv/rendezvous.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdzv/store.h"
#include "rendezvous/join_wire.h"
#include "rendezvous/members.h"
#include "rendezvous/rendezvous_int.h"
#include "rendezvous/topo.h"

/* ---- unique ids and topology --------------------------------------------- */

struct wait_value {
  int done, status;
  void *val;
  size_t len;
  rdzv_rendezvous_t *r;
};

static void on_wait_value(rdzv_client_t *c, const struct rdzv_result *res,
                          void *arg) {
  struct wait_value *k = arg;
  (void)c;
  k->done = 1;
  k->status = res->status;
  rdzv__rdv_keep_reply_text(k->r, res);
  if (res->status == 0 && res->nvals == 1 && res->vals[0].len > 0 &&
      (k->val = malloc(res->vals[0].len + 1)) != NULL) {
    memcpy(k->val, res->vals[0].data, res->vals[0].len);
    ((char *)k->val)[res->vals[0].len] = '\0';
    k->len = res->vals[0].len;
  }
}

/* Drives the client until *done (a callback set it). Every request has a
 * deadline, so that happens. Returns 0, or RDZV_EWOULDBLOCK_CB when called
 * from inside a callback of the handle. */
static int drive_until(rdzv_rendezvous_t *r, const int *done) {
  while (!*done) {
    struct pollfd p = {rdzv_client_fd(r->c), rdzv_client_events(r->c), 0};
    int t = rdzv_client_timeout_ms(r->c);
    if (t < 0 || t > 100)
      t = 100;
    (void)poll(&p, p.fd >= 0 ? 1 : 0, t); /* a failed poll: retry */
    int rc = rdzv_client_process(r->c);
    if (rc < 0)
      return rc; /* only from inside a callback: nothing can progress */
  }
  return 0;
}

/* Waits for a write-once key of this generation and returns its value:
 * the wait's answer carries it (and fills the node's cache on the way);
 * a separate read only if it did not. */
static int read_gen_key(rdzv_rendezvous_t *r, const char *key, void **val,
                        size_t *len, double timeout_s) {
  struct rdzv_bytes k = {key, strlen(key)};
  struct rdzv_request req = {.op = RDZV_OP_WAIT, .nkeys = 1, .keys = &k};
  struct wait_value w = {.r = r};
  r->reply_text[0] = '\0';
  int rc = rdzv_client_submit(r->c, &req, timeout_s, on_wait_value, &w);
  if (rc == 0)
    rc = drive_until(r, &w.done);
  if (rc < 0 && !w.done)
    return rc; /* the handle failed: its requests were failed with it */
  rc = w.status;
  if (rc == 0 && w.val != NULL) {
    *val = w.val;
    *len = w.len;
    return 0;
  }
  free(w.val);
  if (rc == 0)
    rc = rdzv_store_get(r->c, key, val, len, timeout_s);
  return rc;
}

/* Copies the ids out of an encoded gather result: n items of { u32 len,
 * u64 member, 128 id bytes } in member order 0..n-1. */
static int ids_from_result(const uint8_t *p, size_t len, int64_t n,
                           uint8_t *ids) {
  size_t off = 0;
  for (int64_t i = 0; i < n; i++) {
    if (len - off < 4 + 8 + RDZV_UNIQUE_ID_BYTES)
      return RDZV_EPROTO;
    uint32_t l = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 |
                 (uint32_t)p[off + 2] << 16 | (uint32_t)p[off + 3] << 24;
    uint64_t member = 0;
    for (int b = 7; b >= 0; b--)
      member = member << 8 | p[off + 4 + b];
    if (l != 8 + RDZV_UNIQUE_ID_BYTES || member != (uint64_t)i)
      return RDZV_EPROTO;
    memcpy(ids + i * RDZV_UNIQUE_ID_BYTES, p + off + 12, RDZV_UNIQUE_ID_BYTES);
    off += 4 + l;
  }
  return off == len ? 0 : RDZV_EPROTO;
}

/* Who the members of a collective of this generation are, for the nodes
 * (rendezvous/members.h), in spec; returns its length, 0 when the group
 * needs too many runs to tell (nodes then wait their quiet interval). */
static size_t members_spec(const int32_t *members, int64_t nmembers, int kind,
                           uint8_t spec[RDZV_MEMBERS_MAX_BYTES]) {
  int n = rdzv_members_encode(members, nmembers, kind, spec,
                              RDZV_MEMBERS_MAX_BYTES);
  return n > 0 ? (size_t)n : 0;
}

static int publish_id(rdzv_rendezvous_t *r, const char *key,
                      const int32_t *members, int64_t nmembers, int64_t b,
                      int64_t n, rdzv_make_id_fn make_id, void *arg,
                      uint8_t *ids, double timeout_s) {
  uint8_t id[RDZV_UNIQUE_ID_BYTES], spec[RDZV_MEMBERS_MAX_BYTES];
  int rc = make_id(arg, id);
  if (rc < 0)
    return rdzv__rdv_fail(r, rc, "making a unique id");
  size_t sl = members_spec(members, nmembers, RDZV_MEMBERS_BLOCKS, spec);
  struct rdzv_value *vals = NULL;
  rc = rdzv_store_gather_of(r->c, key, (uint64_t)b, (uint64_t)n, id, sizeof(id),
                            sl > 0 ? spec : NULL, sl, &vals, timeout_s);
  if (rc < 0)
    return rdzv__rdv_fail(r, rc, "publishing a unique id");
  for (int64_t i = 0; i < n; i++) {
    if (vals[i].len != RDZV_UNIQUE_ID_BYTES || vals[i].member != (uint64_t)i)
      rc = RDZV_EPROTO;
    else
      memcpy(ids + i * RDZV_UNIQUE_ID_BYTES, vals[i].data,
             RDZV_UNIQUE_ID_BYTES);
  }
  rdzv_values_free(vals, (size_t)n);
  return rc < 0 ? rdzv__rdv_fail(r, rc, "unique ids") : 0;
}

static int exchange(rdzv_rendezvous_t *r, const char *key,
                    const int32_t *members, int64_t nmembers, int64_t mine,
                    int64_t n, rdzv_make_id_fn make_id, void *arg, uint8_t *out,
                    double timeout_s);
static void name_missing(rdzv_rendezvous_t *r, const char *what,
                         const char *key, int gather, const int32_t *members,
                         int64_t n, int64_t count, int by_block);

int rdzv_rendezvous_unique_ids(rdzv_rendezvous_t *r, const char *comm,
                               int64_t ranks_per_root, rdzv_make_id_fn make_id,
                               void *arg, uint8_t **ids, int64_t *nids,
                               double timeout_s) {
  if (comm == NULL || !*comm || strlen(comm) > 100 || strchr(comm, '/') ||
      make_id == NULL || ids == NULL || nids == NULL || ranks_per_root < 1)
    return -EINVAL;
  int64_t w = r->a.world_size, n = rdzv_nccl_nids(w, ranks_per_root);
  int64_t b = rdzv_nccl_block_of(r->a.rank, w, n);
  char key[512], rest[128];
  snprintf(rest, sizeof(rest), "uid/%s", comm);
  rdzv__rdv_gen_key(r, key, sizeof(key), rest);
  uint8_t *out = malloc((size_t)n * RDZV_UNIQUE_ID_BYTES);
  if (out == NULL)
    return RDZV_ENOMEM;
  int64_t mine = rdzv_nccl_block_first(b, w, n) == r->a.rank ? b : -1;
  int rc = exchange(r, key, NULL, w, mine, n, make_id, arg, out, timeout_s);
  if (rc == RDZV_EDEADLINE) {
    /* Name the ranks whose ids never came (each block's first rank), as
     * a barrier names its missing members. */
    char what[200];
    snprintf(what, sizeof(what),
             "unique ids of '%s' (%" PRId64 " ranks, %" PRId64 " ids)", comm, w,
             n);
    name_missing(r, what, key, 1, NULL, w, n, 1);
  }
  if (rc < 0) {
    free(out);
    return rc;
  }
  *ids = out;
  *nids = n;
  return 0;
}

int rdzv_rendezvous_hosts(rdzv_rendezvous_t *r, const char **text, size_t *len,
                          double timeout_s) {
  if (r->hosts == NULL) {
    char key[512];
    void *v = NULL;
    rdzv__rdv_gen_key(r, key, sizeof(key), "hosts");
    int rc = read_gen_key(r, key, &v, &r->hosts_len, timeout_s);
    if (rc < 0)
      return rdzv__rdv_fail(r, rc, "reading the host table");
    r->hosts = v;
  }
  *text = r->hosts;
  if (len != NULL)
    *len = r->hosts_len;
  return 0;
}

int rdzv_rendezvous_host_of(rdzv_rendezvous_t *r, int32_t rank,
                            int32_t *node_rank, int32_t *first, int32_t *count,
                            char *host, size_t hostlen, char *location,
                            size_t loclen, double timeout_s) {
  const char *t;
  if (rank < 0 || rank >= r->a.world_size)
    return -EINVAL;
  int rc = rdzv_rendezvous_hosts(r, &t, NULL, timeout_s);
  if (rc < 0)
    return rc;
  for (const char *line = t; *line; line = strchr(line, '\n') + 1) {
    int nr, fr, ls, hl = 0, he = 0, ll = 0, le = 0;
    if (sscanf(line, "%d %d %d %n%*s%n %n%*[^\n]%n", &nr, &fr, &ls, &hl, &he,
               &ll, &le) < 3)
      break;
    if (rank >= fr && rank < fr + ls) {
      if (node_rank)
        *node_rank = nr;
      if (first)
        *first = fr;
      if (count)
        *count = ls;
      if (host && hostlen)
        snprintf(host, hostlen, "%.*s", he - hl, line + hl);
      if (location && loclen)
        snprintf(location, loclen, "%.*s", le > ll ? le - ll : 0, line + ll);
      return 0;
    }
    if (strchr(line, '\n') == NULL)
      break;
  }
  return rdzv__rdv_fail(r, RDZV_ETOPOLOGY, "rank not in the host table");
}

int rdzv_rendezvous_topology(rdzv_rendezvous_t *r, int32_t node_rank,
                             char **text, size_t *len, double timeout_s) {
  char key[512], rest[64];
  if (node_rank < 0 || node_rank >= r->a.node_count || text == NULL)
    return -EINVAL;
  snprintf(rest, sizeof(rest), "topo/%d", node_rank);
  rdzv__rdv_gen_key(r, key, sizeof(key), rest);
  void *v = NULL;
  size_t l = 0;
  int rc = read_gen_key(r, key, &v, &l, timeout_s);
  if (rc < 0)
    return rdzv__rdv_fail(r, rc, "reading a topology record");
  *text = v;
  if (len != NULL)
    *len = l;
  return 0;
}

/* ---- unique ids of a sub-group ------------------------------------------- */

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* World rank of group member i; members NULL is the world itself. */
static int32_t member_rank(const int32_t *members, int64_t i) {
  return members != NULL ? members[i] : (int32_t)i;
}

/* Index of this rank in the group, -1 if absent; -EINVAL if a member is
 * out of range or appears twice. */
static int64_t member_index(const rdzv_rendezvous_t *r, const int32_t *members,
                            int64_t n) {
  int32_t w = r->a.world_size;
  if (members == NULL)
    return n == w ? r->a.rank : -EINVAL;
  uint8_t *seen = calloc((size_t)w / 8 + 1, 1);
  if (seen == NULL)
    return RDZV_ENOMEM;
  int64_t me = -1;
  for (int64_t i = 0; i < n; i++) {
    int32_t m = members[i];
    if (m < 0 || m >= w || (seen[m / 8] >> (m % 8) & 1)) {
      me = -EINVAL;
      break;
    }
    seen[m / 8] |= (uint8_t)(1u << (m % 8));
    if (m == r->a.rank)
      me = i;
  }
  free(seen);
  return me;
}

/* Appends "rank R<extra> (host H)" to list (host from the host table, when it
 * can be read within a short time). */
static size_t append_rank(rdzv_rendezvous_t *r, char *list, size_t size,
                          size_t len, int first, int32_t rank,
                          const char *extra) {
  char host[128] = "";
  if (len >= size)
    return len;
  if (rdzv_rendezvous_host_of(r, rank, NULL, NULL, NULL, host, sizeof(host),
                              NULL, 0, 2.0) < 0)
    host[0] = '\0';
  int w =
      snprintf(list + len, size - len, "%srank %d%s%s%s%s", first ? "" : ", ",
               rank, extra, host[0] ? " (host " : "", host, host[0] ? ")" : "");
  return len + (w > 0 ? (size_t)w : 0);
}

#define NAME_AT_MOST 8

/* After a deadline on the collective named key (count members, member i
 * is world rank of_member(i)): asks the root who has not contributed and
 * writes "<what>: deadline passed; N of M missing: rank 3 (host b), ..."
 * into last_error. by_block: members are id blocks (the unique-id
 * gather), named with their block. */
static void name_missing(rdzv_rendezvous_t *r, const char *what,
                         const char *key, int gather, const int32_t *members,
                         int64_t n, int64_t count, int by_block) {
  uint64_t ids[NAME_AT_MOST], arrived = 0, known = 0;
  size_t nmiss = 0, len = 0;
  char list[700] = "";
  int rc = rdzv_store_collective_missing(r->c, key, gather, ids, NAME_AT_MOST,
                                         &nmiss, &arrived, &known, 2.0);
  if (rc < 0) {
    snprintf(r->last_error, sizeof(r->last_error),
             "%s: deadline passed; could not ask who is missing: %s", what,
             rdzv_strerror(rc));
    return;
  }
  if (known == 0) { /* nobody came: all are missing */
    arrived = 0;
    known = (uint64_t)count;
    nmiss = count < NAME_AT_MOST ? (size_t)count : NAME_AT_MOST;
    for (size_t i = 0; i < nmiss; i++)
      ids[i] = i;
  }
  int self = 0;
  for (size_t i = 0; i < nmiss; i++) {
    int64_t m = (int64_t)ids[i];
    char extra[64] = "";
    if (!by_block && member_rank(members, m) == r->a.rank)
      self = 1;
    if (by_block) {
      snprintf(extra, sizeof(extra), " (block %" PRId64 " of %" PRId64 ")", m,
               count);
      m = rdzv_nccl_block_first(m, n, count);
    }
    len = append_rank(r, list, sizeof(list), len, i == 0,
                      member_rank(members, m), extra);
  }
  if (known - arrived > nmiss && len < sizeof(list))
    snprintf(list + len, sizeof(list) - len, ", and %" PRIu64 " more",
             known - arrived - (uint64_t)nmiss);
  if (known == arrived)
    snprintf(r->last_error, sizeof(r->last_error),
             "%s: deadline passed; every member arrived, the answer did "
             "not come back in time",
             what);
  else
    snprintf(r->last_error, sizeof(r->last_error),
             "%s: deadline passed; %" PRIu64 " of %" PRIu64 " missing: %s%s",
             what, known - arrived, known, list,
             self ? " (this rank came after the others had given up)" : "");
}

int rdzv_rendezvous_group_barrier(rdzv_rendezvous_t *r, const char *name,
                                  const int32_t *members, int64_t nmembers,
                                  double timeout_s) {
  char key[512], rest[220], what[300];
  if (r == NULL || name == NULL || !*name || strlen(name) > 200 || nmembers < 1)
    return -EINVAL;
  int64_t me = member_index(r, members, nmembers);
  if (me < 0) {
    snprintf(r->last_error, sizeof(r->last_error), "barrier '%s': %s", name,
             me == -1 ? "this rank is not a member"
                      : "members out of range or repeated");
    return me == -1 ? -EINVAL : (int)me;
  }
  snprintf(rest, sizeof(rest), "barrier/%s", name);
  rdzv__rdv_gen_key(r, key, sizeof(key), rest);
  uint8_t spec[RDZV_MEMBERS_MAX_BYTES];
  size_t sl = members_spec(members, nmembers, RDZV_MEMBERS_EACH, spec);
  int rc = rdzv_store_barrier_of(r->c, key, (uint64_t)me, (uint64_t)nmembers,
                                 sl > 0 ? spec : NULL, sl, timeout_s);
  if (rc == RDZV_EDEADLINE) {
    snprintf(what, sizeof(what), "barrier '%s' of %" PRId64 " ranks", name,
             nmembers);
    name_missing(r, what, key, 0, members, nmembers, nmembers, 0);
    return rc;
  }
  return rc < 0 ? rdzv__rdv_fail(r, rc, "barrier") : 0;
}

/* A member's check-in: a barrier of the group that runs alongside the id
 * exchange. On the heap: if the exchange fails otherwise, the caller
 * returns without waiting and the callback frees it. */
struct arrival {
  int done, status, abandoned;
  char text[512]; /* the server's, when it failed the check-in */
};

static void on_arrival(rdzv_client_t *c, const struct rdzv_result *res,
                       void *arg) {
  struct arrival *a = arg;
  (void)c;
  if (a->abandoned) {
    free(a);
    return;
  }
  a->done = 1;
  a->status = res->status;
  if (res->status < 0 && res->nkeys > 0)
    snprintf(a->text, sizeof(a->text), "%.*s", (int)res->keys[0].len,
             (const char *)res->keys[0].data);
}

/* This member's part of the id exchange: publish its block's id, or wait
 * for the table. */
static int exchange(rdzv_rendezvous_t *r, const char *key,
                    const int32_t *members, int64_t nmembers, int64_t mine,
                    int64_t n, rdzv_make_id_fn make_id, void *arg, uint8_t *out,
                    double timeout_s) {
  if (mine >= 0)
    return publish_id(r, key, members, nmembers, mine, n, make_id, arg, out,
                      timeout_s);
  void *v = NULL;
  size_t len = 0;
  int rc = read_gen_key(r, key, &v, &len, timeout_s);
  if (rc == 0)
    rc = ids_from_result(v, len, n, out);
  rdzv_free(v);
  return rc < 0 ? rdzv__rdv_fail(r, rc, "waiting for the unique ids") : 0;
}

/* The check-in's outcome, once its answer came: 0 when every member
 * arrived. When this member's own deadline ended it, the root is asked
 * to fail it for everyone unless it completed meanwhile (then 0: every
 * member goes on, none is left behind in NCCL's init). */
static int arrival_outcome(rdzv_rendezvous_t *r, const char *akey,
                           const struct arrival *in) {
  if (in->status != RDZV_EDEADLINE || in->text[0] != '\0')
    return in->status;
  char why[96];
  int done = 0;
  snprintf(why, sizeof(why), "rank %d gave up at its deadline", (int)r->a.rank);
  if (rdzv_store_collective_give_up(r->c, akey, 0, why, &done, 2.0) == 0 &&
      done)
    return 0;
  return RDZV_EDEADLINE;
}

static int arrival_submit(rdzv_rendezvous_t *r, const char *key,
                          const int32_t *members, int64_t me, int64_t n,
                          double timeout_s, struct arrival *a) {
  uint8_t id[8], spec[RDZV_MEMBERS_MAX_BYTES];
  for (int i = 0; i < 8; i++)
    id[i] = (uint8_t)((uint64_t)me >> (8 * i));
  size_t sl = members_spec(members, n, RDZV_MEMBERS_EACH, spec);
  struct rdzv_bytes k[2] = {{key, strlen(key)}, {spec, sl}},
                    v = {id, sizeof(id)};
  struct rdzv_request req = {.op = RDZV_OP_BARRIER,
                             .b = n,
                             .nkeys = sl > 0 ? 2 : 1,
                             .keys = k,
                             .nvals = 1,
                             .vals = &v};
  int rc = rdzv_client_submit(r->c, &req, timeout_s, on_arrival, a);
  return rc < 0 ? rdzv__rdv_fail(r, rc, "checking in") : 0;
}

int rdzv_rendezvous_group_unique_ids(rdzv_rendezvous_t *r, const char *comm,
                                     const int32_t *members, int64_t nmembers,
                                     int64_t ranks_per_root,
                                     rdzv_make_id_fn make_id, void *arg,
                                     uint8_t **ids, int64_t *nids,
                                     double timeout_s) {
  if (r == NULL || comm == NULL || !*comm || strlen(comm) > 100 ||
      strchr(comm, '/') || make_id == NULL || ids == NULL || nids == NULL ||
      ranks_per_root < 1 || nmembers < 1)
    return -EINVAL;
  int64_t me = member_index(r, members, nmembers);
  if (me < 0) {
    snprintf(r->last_error, sizeof(r->last_error), "unique ids of '%s': %s",
             comm,
             me == -1 ? "this rank is not a member"
                      : "members out of range or repeated");
    return me == -1 ? -EINVAL : (int)me;
  }
  double deadline = mono_s() + timeout_s;
  int64_t n = rdzv_nccl_nids(nmembers, ranks_per_root);
  int64_t b = rdzv_nccl_block_of(me, nmembers, n);
  int64_t mine = rdzv_nccl_block_first(b, nmembers, n) == me ? b : -1;
  char key[512], rest[128];
  snprintf(rest, sizeof(rest), "uid/%s", comm);
  rdzv__rdv_gen_key(r, key, sizeof(key), rest);
  uint8_t *out = malloc((size_t)n * RDZV_UNIQUE_ID_BYTES);
  struct arrival *in = calloc(1, sizeof(*in));
  char akey[600];
  snprintf(akey, sizeof(akey), "%s/arrive", key);
  int rc = out != NULL && in != NULL ? 0 : RDZV_ENOMEM;
  if (rc == 0)
    rc = arrival_submit(r, akey, members, me, nmembers, timeout_s, in);
  if (rc < 0) {
    free(out);
    free(in);
    return rc;
  }
  rc = exchange(r, key, members, nmembers, mine, n, make_id, arg, out,
                deadline - mono_s());
  /* The ids may be complete while a member that makes none is missing:
   * the check-in says so. Both end by the same deadline. */
  if (rc == 0 || rc == RDZV_EDEADLINE) {
    int drc = drive_until(r, &in->done);
    if (drc < 0 && rc == 0)
      rc = drc;
  }
  int arrived = in->done ? arrival_outcome(r, akey, in) : RDZV_EDEADLINE;
  if (arrived == 0 && rc == RDZV_EDEADLINE)
    /* Everyone came, so the ids are on their way: one more try. */
    rc = exchange(r, key, members, nmembers, mine, n, make_id, arg, out, 5.0);
  char what[200];
  snprintf(what, sizeof(what),
           "unique ids of '%s' (%" PRId64 " members, %" PRId64 " ids)", comm,
           nmembers, n);
  if (in->done && arrived == RDZV_EDEADLINE &&
      (rc == 0 || rc == RDZV_EDEADLINE)) {
    rc = RDZV_EDEADLINE;
    name_missing(r, what, akey, 0, members, nmembers, nmembers, 0);
  } else if (rc == 0 && arrived < 0) {
    snprintf(r->reply_text, sizeof(r->reply_text), "%s", in->text);
    rc = rdzv__rdv_fail(r, arrived, "checking in");
  } else if (rc == RDZV_EDEADLINE) {
    name_missing(r, what, key, 1, members, nmembers, n, 1);
  }
  if (in->done)
    free(in);
  else
    in->abandoned = 1; /* its callback frees it */
  if (rc < 0) {
    free(out);
    return rc;
  }
  *ids = out;
  *nids = n;
  return 0;
}
