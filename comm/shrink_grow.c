/* comm/shrink_grow.c: rdzv_comm_shrink, rdzv_comm_grow, rdzv_comm_grow_in
 * and rdzv_comm_grow_join (see rdzv/comm.h) over NCCL's ncclCommShrink,
 * ncclCommGetUniqueId and ncclCommGrow, which the loader resolves as
 * optional entry points (comm/nccl_api.h).
 *
 * Agreement through the store, under the generation's workers' keys
 * ("rdzv/<round>/w<gen>/", not "g<gen>/"): a member whose process died
 * aborts the generation, and the root then refuses its "g<gen>/" keys,
 * while the survivors' NCCL communicator still stands and is what they
 * shrink. Workers' keys are not refused after an abort and go with the
 * generation's own when a later generation completes.
 *   "rdzv/<round>/w<gen>/shrink/<name>/<n>"  the exclude list of the n-th
 *       shrink of communicator <name>: the first survivor's proposal wins
 *       (a compare-and-set from "absent"); every survivor reads it back
 *       and shrinks with exactly it. Value: ascending parent ranks as
 *       decimal text, "3,5".
 *   "rdzv/<round>/w<gen>/grow/<name>/<n>"    the n-th grow of <name>: the
 *       id rank 0 made with ncclCommGetUniqueId and the new membership,
 *       written once (write-once key). Value: the 128 id bytes, then
 *       int32 LE old size, int32 LE new size, and the new size's world
 *       ranks (int32 LE each) in new-rank order. <gen> is the generation
 *       of the world the new members are in: the handle's own
 *       (rdzv_comm_grow), or a later one's (rdzv_comm_grow_in: a handle of
 *       generation G, e.g. shrunk after G aborted, grows by the members of
 *       G+1 that replace the lost ones; its record and new handle go with
 *       G+1's world, through that world's store connection).
 * Each runs under the store lock of the world whose keys it uses, with
 * the handle's lock held (lock order: handle, then store, as the init
 * paths). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"
#include "comm/groups.h"
#include "rdzv/store.h"

#define GROW_HEAD (RDZV_NCCL_UNIQUE_ID_BYTES + 8)

/* ---- helpers ------------------------------------------------------------- */

static double left(double deadline) {
  double t = deadline - rdzv__comm_now();

  return t > 0.001 ? t : 0.001;
}

/* "rdzv/<round>/w<gen>/<what>/<name>/<n>" */
static void agree_key(const struct rdzv__comm_ctx *x, int64_t gen,
                      const char *what, const char *name, int32_t n, char *out,
                      size_t len) {
  snprintf(out, len, "rdzv/%s/w%" PRId64 "/%s/%s/%d",
           rdzv_rendezvous_round(x->r), gen, what, name, (int)n);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

  return (x > y) - (x < y);
}

/* Sorts ranks[0 .. n) (a copy in *out) and checks them against a
 * communicator of `size`: in range, distinct, fewer than all. */
static int sorted_list(const int32_t *ranks, int32_t n, int32_t size,
                       int32_t **out) {
  int32_t *l;

  *out = NULL;
  if (n < 0 || n >= size || (n > 0 && ranks == NULL))
    return -EINVAL;
  l = malloc(((size_t)n + 1) * sizeof(*l));
  if (l == NULL)
    return RDZV_ENOMEM;
  if (n > 0)
    memcpy(l, ranks, (size_t)n * sizeof(*l));
  qsort(l, (size_t)n, sizeof(*l), cmp_i32);
  for (int32_t i = 0; i < n; i++)
    if (l[i] < 0 || l[i] >= size || (i > 0 && l[i] == l[i - 1])) {
      free(l);
      return -EINVAL;
    }
  *out = l;
  return 0;
}

/* "3,5" into out (len bytes). */
static void list_text(const int32_t *l, int32_t n, char *out, size_t len) {
  size_t used = 0;

  out[0] = '\0';
  for (int32_t i = 0; i < n && used + 14 < len; i++)
    used += (size_t)snprintf(out + used, len - used, "%s%d", i ? "," : "",
                             (int)l[i]);
  if (n > 0 && used + 14 >= len)
    snprintf(out + used, len - used, ",...");
}

/* Parses an agreed list ("3,5") of a communicator of `size`. */
static int parse_list(const char *v, size_t len, int32_t size, int32_t **out,
                      int32_t *n) {
  int32_t *l = malloc((len / 2 + 1) * sizeof(*l)), k = 0;
  const char *p = v, *end = v + len;
  int rc;

  if (l == NULL)
    return RDZV_ENOMEM;
  while (p < end) {
    char *e;
    long r;

    errno = 0;
    r = strtol(p, &e, 10);
    if (e == p || errno != 0 || e > end || r < 0 || r >= size ||
        (e < end && *e != ',') || (size_t)k > len / 2) {
      free(l);
      return RDZV_EPROTO;
    }
    l[k++] = (int32_t)r;
    p = e < end ? e + 1 : e;
  }
  rc = sorted_list(l, k, size, out);
  free(l);
  if (rc == -EINVAL || (rc == 0 && k == 0)) {
    free(*out);
    *out = NULL;
    return RDZV_EPROTO;
  }
  *n = k;
  return rc;
}

static void put_le32(uint8_t *p, int32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)((uint32_t)v >> (8 * i));
}

static int32_t get_le32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

/* A new handle for an NCCL call's communicator: name, members (world
 * ranks, taken), rank and size; its lock is held by the caller while
 * it settles. */
static rdzv_comm_t *child_new(rdzv_comm_t *parent, const char *name,
                              int32_t *members, int32_t size, int32_t rank,
                              const char *path) {
  rdzv_comm_t *h = rdzv__comm_new(parent->ctx, parent, name, parent->gen);

  if (h == NULL) {
    free(members);
    return NULL;
  }
  h->members = members;
  h->size = size;
  h->rank = rank;
  h->path = path;
  h->nonblocking = parent->ctx->nonblocking;
  return h;
}

/* Settles the new handle h after NCCL's call that made it (h->lock held):
 * polls a non-blocking one to its end. On failure copies h's error into
 * c and destroys h. */
static int settle(rdzv_comm_t *c, rdzv_comm_t *h,
                  const struct rdzv_nccl_api *api, rdzv_nccl_comm_t comm,
                  rdzv_nccl_result res, const char *what, double deadline,
                  rdzv_comm_t **out) {
  int rc;

  h->deadline = deadline;
  pthread_mutex_lock(&h->lock);
  rc = rdzv__comm_started(h, api, comm, res, what);
  if (rc == 0 && h->state == RDZV_COMM_PENDING)
    rc = rdzv__comm_wait_locked(h);
  pthread_mutex_unlock(&h->lock);
  if (rc < 0) {
    rdzv__comm_fail(c, rc, "%s", h->last_error);
    rdzv_comm_destroy(h);
    return rc;
  }
  *out = h;
  return 0;
}

/* NCCL's config for the call that makes h's communicator: h's mode (its
 * world's opts.nonblocking) and name. */
static void config_for(const rdzv_comm_t *h, struct rdzv_nccl_config *cfg) {
  rdzv_nccl_config_init(cfg);
  cfg->blocking = h->nonblocking ? 0 : 1;
  cfg->commName = h->name;
}

/* The checks every call makes: arguments, a member, an initialized
 * communicator (c->lock held). */
static int ready_locked(rdzv_comm_t *c, const char *call) {
  if (c->rank < 0)
    return rdzv__comm_fail(c, RDZV_ENOT_MEMBER,
                           "%s: %s: this rank is not one of its %d members",
                           c->name, call, (int)c->size);
  if (c->state != RDZV_COMM_READY || c->nccl == NULL)
    return rdzv__comm_fail(c, -EINVAL,
                           "%s: %s: the communicator is not initialized and "
                           "ready (initialize it with rdzv_comm_nccl first)",
                           c->name, call);
  return 0;
}

static int optional(rdzv_comm_t *c, const struct rdzv_nccl_api *api,
                    const char *call, const char *symbol, int since,
                    int present) {
  char err[512];
  int rc = rdzv_nccl_optional(api, symbol, since, present, err, sizeof(err));

  if (rc < 0)
    rdzv__comm_fail(c, rc, "%s: %s: %s", c->name, call, err);
  return rc;
}

/* ---- shrink -------------------------------------------------------------- */

/* The agreed exclude list of shrink n of c: proposes `mine` (text, may be
 * "" for none) and reads back what won. store_lock taken here. */
static int agree_exclude(rdzv_comm_t *c, int32_t n, const char *mine,
                         double deadline, int32_t **agreed, int32_t *nagreed) {
  struct rdzv__comm_ctx *x = c->ctx;
  rdzv_client_t *cl = rdzv_rendezvous_client(x->r);
  char key[400];
  void *cur = NULL;
  size_t cur_len = 0;
  int rc;

  agree_key(x, c->gen, "shrink", c->name, n, key, sizeof(key));
  pthread_mutex_lock(&x->store_lock);
  if (mine[0] != '\0') {
    rc = rdzv_store_cas(cl, key, "", 0, mine, strlen(mine), &cur, &cur_len,
                        left(deadline));
    if (rc == RDZV_ECAS_FAILED)
      rc = 0; /* another survivor's proposal came first: cur has it */
  } else {
    const char *keys[1] = {key};

    rc = rdzv_store_wait(cl, keys, 1, left(deadline));
    if (rc == 0)
      rc = rdzv_store_get(cl, key, &cur, &cur_len, left(deadline));
  }
  if (rc < 0)
    rdzv__comm_fail(c, rc,
                    "%s: shrink %d: agreeing on the exclude list (%s): "
                    "%s",
                    c->name, (int)n, key, rdzv_client_last_error(cl));
  pthread_mutex_unlock(&x->store_lock);
  if (rc == 0 && cur == NULL)
    rc = rdzv__comm_fail(c, RDZV_EPROTO, "%s: shrink %d: %s has no value",
                         c->name, (int)n, key);
  if (rc == 0) {
    rc = parse_list(cur, cur_len, c->size, agreed, nagreed);
    if (rc < 0)
      rdzv__comm_fail(c, rc,
                      "%s: shrink %d: %s holds '%.64s', not an exclude list "
                      "of ranks 0 .. %d",
                      c->name, (int)n, key, (const char *)cur,
                      (int)c->size - 1);
  }
  rdzv_free(cur);
  return rc;
}

static int shrink_locked(rdzv_comm_t *c, const int32_t *lost, int32_t nlost,
                         int flags, rdzv_comm_t **out, double timeout_s) {
  const struct rdzv_nccl_api *api = c->ctx->api;
  double t0 = rdzv__comm_now(), deadline = t0 + timeout_s;
  int32_t n = c->nshrinks + 1, *mine = NULL, *agreed = NULL, nagreed = 0;
  char text[1024], part[32], name[RDZV_COMM_NAME_MAX + 1];
  struct rdzv_nccl_config cfg;
  rdzv_nccl_comm_t nc = NULL;
  rdzv_nccl_result res;
  int32_t *members, below = 0;
  rdzv_comm_t *h;
  int rc;

  rc = ready_locked(c, "rdzv_comm_shrink");
  if (rc == 0)
    rc = optional(c, api, "rdzv_comm_shrink", "ncclCommShrink",
                  RDZV_NCCL_SHRINK_VERSION, api->comm_shrink != NULL);
  if (rc < 0)
    return rc;
  snprintf(part, sizeof(part), "shrink%d", (int)n);
  if (rdzv__comm_child_name(c->name, part, -1, name, sizeof(name)) < 0)
    return rdzv__comm_fail(c, -ENAMETOOLONG,
                           "%s: shrink %d: the new name '%s.%s' is over %d "
                           "bytes",
                           c->name, (int)n, c->name, part, RDZV_COMM_NAME_MAX);
  rc = sorted_list(lost, nlost, c->size, &mine);
  if (rc < 0)
    return rdzv__comm_fail(c, rc,
                           "%s: shrink %d: lost must be 0 .. %d distinct "
                           "ranks of 0 .. %d",
                           c->name, (int)n, (int)c->size - 1, (int)c->size - 1);
  list_text(mine, nlost, text, sizeof(text));
  free(mine);
  rc = agree_exclude(c, n, text, deadline, &agreed, &nagreed);
  if (rc < 0)
    return rc;
  list_text(agreed, nagreed, text, sizeof(text));
  for (int32_t i = 0; i < nagreed; i++) {
    if (agreed[i] == c->rank) {
      free(agreed);
      return rdzv__comm_fail(
          c, RDZV_EEXCLUDED,
          "%s: shrink %d: this rank (%d) is on the agreed exclude list {%s}: "
          "the survivors declared it lost and shrink without it",
          c->name, (int)n, (int)c->rank, text);
    }
    below += agreed[i] < c->rank;
  }
  members = malloc((size_t)(c->size - nagreed) * sizeof(*members));
  if (members == NULL) {
    free(agreed);
    return rdzv__comm_fail(c, RDZV_ENOMEM, "%s: out of memory", c->name);
  }
  for (int32_t r = 0, k = 0, j = 0; r < c->size; r++) {
    if (j < nagreed && agreed[j] == r)
      j++;
    else
      members[k++] = rdzv_comm_world_rank(c, r);
  }
  h = child_new(c, name, members, c->size - nagreed, c->rank - below, "shrink");
  if (h == NULL) {
    free(agreed);
    return rdzv__comm_fail(c, RDZV_ENOMEM, "%s: out of memory", c->name);
  }
  h->excluded = agreed;
  h->nexcluded = nagreed;
  h->t.ids_s = rdzv__comm_now() - t0;
  config_for(h, &cfg);
  h->nccl_t0 = rdzv__comm_now();
  /* NCCL takes int ranks; agreed is int32_t, the same type here. */
  res = api->comm_shrink(c->nccl, (int *)agreed, (int)nagreed, &nc, &cfg,
                         flags & RDZV_COMM_SHRINK_ABORT
                             ? RDZV_NCCL_SHRINK_ABORT
                             : RDZV_NCCL_SHRINK_DEFAULT);
  if (flags & RDZV_COMM_SHRINK_ABORT)
    c->shrunk_abort = 1; /* its operations were terminated */
  rc = settle(c, h, api, nc, res, "ncclCommShrink", deadline, out);
  if (rc == 0)
    c->nshrinks = n;
  return rc;
}

_Static_assert(sizeof(int) == sizeof(int32_t), "NCCL's int ranks");

int rdzv_comm_shrink(rdzv_comm_t *c, const int32_t *lost, int32_t nlost,
                     int flags, rdzv_comm_t **out, double timeout_s) {
  int rc;

  if (c == NULL)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  if (out == NULL || !(timeout_s > 0) || (flags & ~RDZV_COMM_SHRINK_ABORT))
    rc = rdzv__comm_fail(c, -EINVAL, "%s: rdzv_comm_shrink: %s", c->name,
                         out == NULL ? "out is NULL"
                         : !(timeout_s > 0)
                             ? "timeout_s must be > 0"
                             : "flags: 0 or RDZV_COMM_SHRINK_ABORT");
  else
    rc = shrink_locked(c, lost, nlost, flags, out, timeout_s);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

int32_t rdzv_comm_excluded(const rdzv_comm_t *c, const int32_t **ranks) {
  if (ranks != NULL)
    *ranks = c->excluded;
  return c->nexcluded;
}

/* ---- grow ---------------------------------------------------------------- */

/* A grow's record: the id, the old and new sizes, the members (world
 * ranks, malloc'd). */
struct grow_rec {
  rdzv_nccl_unique_id id;
  int32_t old_size, size;
  int32_t *members;
};

static int grow_decode(const void *v, size_t len, int32_t world,
                       struct grow_rec *g) {
  const uint8_t *p = v;

  memset(g, 0, sizeof(*g));
  if (len < GROW_HEAD)
    return RDZV_EPROTO;
  memcpy(g->id.internal, p, RDZV_NCCL_UNIQUE_ID_BYTES);
  g->old_size = get_le32(p + RDZV_NCCL_UNIQUE_ID_BYTES);
  g->size = get_le32(p + RDZV_NCCL_UNIQUE_ID_BYTES + 4);
  if (g->old_size < 1 || g->size <= g->old_size || g->size > world ||
      len != GROW_HEAD + 4 * (size_t)g->size)
    return RDZV_EPROTO;
  g->members = malloc((size_t)g->size * sizeof(*g->members));
  if (g->members == NULL)
    return RDZV_ENOMEM;
  for (int32_t i = 0; i < g->size; i++) {
    g->members[i] = get_le32(p + GROW_HEAD + 4 * (size_t)i);
    if (g->members[i] < 0 || g->members[i] >= world) {
      free(g->members);
      g->members = NULL;
      return RDZV_EPROTO;
    }
  }
  return 0;
}

/* Reads grow n of `name` from key, through the store of world context x
 * (waiting for it unless `nowait`); failures are reported into c.
 * RDZV_ENOKEY when nowait and absent. x->store_lock held. */
static int grow_read(rdzv_comm_t *c, struct rdzv__comm_ctx *x, const char *key,
                     int nowait, double deadline, struct grow_rec *g) {
  rdzv_client_t *cl = rdzv_rendezvous_client(x->r);
  const char *keys[1] = {key};
  void *v = NULL;
  size_t len = 0;
  int rc = 0;

  if (!nowait)
    rc = rdzv_store_wait(cl, keys, 1, left(deadline));
  if (rc == 0)
    rc = rdzv_store_get(cl, key, &v, &len, left(deadline));
  if (rc == RDZV_ENOKEY && nowait)
    return rc;
  if (rc < 0)
    return rdzv__comm_fail(c, rc, "%s: waiting for %s: %s", c->name, key,
                           rdzv_client_last_error(cl));
  rc = grow_decode(v, len, rdzv_rendezvous_world_size(x->r), g);
  rdzv_free(v);
  if (rc < 0)
    rdzv__comm_fail(c, rc, "%s: %s does not hold a grow record", c->name, key);
  return rc;
}

/* Rank 0 of c: the grow's record, made once, written through the store
 * of world context x (c's own, or the later generation's it grows into).
 * A record already there (a retry of the same grow number) is used as it
 * is: its id is not made again. api: c's table. x->store_lock held. */
static int grow_publish(rdzv_comm_t *c, struct rdzv__comm_ctx *x,
                        const char *key, const struct rdzv_nccl_api *api,
                        const int32_t *members, int32_t size, double deadline,
                        struct grow_rec *g) {
  rdzv_client_t *cl = rdzv_rendezvous_client(x->r);
  rdzv_nccl_unique_id id;
  rdzv_nccl_result res;
  char err[768];
  uint8_t *v;
  size_t len = GROW_HEAD + 4 * (size_t)size;
  int rc = grow_read(c, x, key, 1, deadline, g);

  if (rc != RDZV_ENOKEY)
    return rc;
  res = api->comm_get_unique_id(c->nccl, &id);
  rc = rdzv_nccl_check(api, c->nccl, res, "ncclCommGetUniqueId", err,
                       sizeof(err));
  if (rc < 0)
    return rdzv__comm_fail(c, rc, "%s: %s", c->name, err);
  v = malloc(len);
  if (v == NULL)
    return rdzv__comm_fail(c, RDZV_ENOMEM, "%s: out of memory", c->name);
  memcpy(v, id.internal, RDZV_NCCL_UNIQUE_ID_BYTES);
  put_le32(v + RDZV_NCCL_UNIQUE_ID_BYTES, c->size);
  put_le32(v + RDZV_NCCL_UNIQUE_ID_BYTES + 4, size);
  for (int32_t i = 0; i < size; i++)
    put_le32(v + GROW_HEAD + 4 * (size_t)i, members[i]);
  rc = rdzv_store_set(cl, key, v, len, RDZV_STORE_WRITE_ONCE, left(deadline));
  free(v);
  if (rc < 0 && rc != RDZV_EWRITE_ONCE)
    return rdzv__comm_fail(c, rc, "%s: publishing %s: %s", c->name, key,
                           rdzv_client_last_error(cl));
  return grow_read(c, x, key, 0, deadline, g);
}

/* rdzv_comm_grow_in's checks of w, a world of another context than c's
 * (c->lock held; w's fields read here are fixed at creation): a world
 * handle of c's round, generation >= c's, in which this process kept its
 * world rank and every member of c has a place. Loads w's NCCL table into
 * *wapi (under w->lock, briefly: lock order c, then w, then its api_lock)
 * and checks it is c's library (api): the new handle, w's, polls and
 * destroys the communicator c's library makes. */
static int grow_world_check(rdzv_comm_t *c, rdzv_comm_t *w, int32_t n,
                            const struct rdzv_nccl_api *api,
                            const struct rdzv_nccl_api **wapi) {
  const char *round = rdzv_rendezvous_round(c->ctx->r);
  const char *wround = rdzv_rendezvous_round(w->ctx->r);
  int32_t me = rdzv_comm_world_rank(c, c->rank);
  int32_t wme = rdzv_rendezvous_rank(w->ctx->r);
  long long gen = (long long)c->gen, wgen = (long long)w->gen;
  int rc;

  if (strcmp(round, wround) != 0)
    return rdzv__comm_fail(c, -EINVAL,
                           "%s: grow %d: the world handle is of round '%s', "
                           "this communicator of round '%s'",
                           c->name, (int)n, wround, round);
  if (wgen < gen)
    return rdzv__comm_fail(c, -EINVAL,
                           "%s: grow %d: the world handle is of generation "
                           "%lld, older than this communicator's %lld",
                           c->name, (int)n, wgen, gen);
  if (wme != me)
    return rdzv__comm_fail(
        c, -EINVAL,
        "%s: grow %d: this process is world rank %d in generation %lld but "
        "%d in generation %lld: its rank moved between generations, so the "
        "communicator cannot grow into generation %lld (initialize a new "
        "communicator there)",
        c->name, (int)n, (int)me, gen, (int)wme, wgen, wgen);
  for (int32_t r = 0; r < c->size; r++)
    if (rdzv_comm_world_rank(c, r) >= w->size)
      return rdzv__comm_fail(c, -EINVAL,
                             "%s: grow %d: member %d (world rank %d) has no "
                             "place in generation %lld's world of %d ranks",
                             c->name, (int)n, (int)r,
                             (int)rdzv_comm_world_rank(c, r), wgen,
                             (int)w->size);
  pthread_mutex_lock(&w->lock);
  rc = rdzv__comm_load_api(w, wapi);
  if (rc < 0)
    rdzv__comm_fail(c, rc, "%s: grow %d: generation %lld's world: %s", c->name,
                    (int)n, wgen, w->last_error);
  pthread_mutex_unlock(&w->lock);
  if (rc == 0 && (*wapi)->comm_abort != api->comm_abort)
    rc = rdzv__comm_fail(c, -EINVAL,
                         "%s: grow %d: generation %lld's world loaded NCCL "
                         "from '%s', this communicator from '%s': both must "
                         "use one library",
                         c->name, (int)n, wgen, (*wapi)->path, api->path);
  return rc;
}

/* A grow of c (c->lock held). w: NULL to agree under c's generation's
 * keys and make a child of c (rdzv_comm_grow), or a world of another
 * context (a later generation) to agree under its keys, through its store
 * lock, and make a child of it (rdzv_comm_grow_in). */
static int grow_locked(rdzv_comm_t *c, rdzv_comm_t *w, const char *call,
                       const int32_t *added, int32_t nadded, rdzv_comm_t **out,
                       double timeout_s) {
  const struct rdzv_nccl_api *api = c->ctx->api, *wapi = api;
  struct rdzv__comm_ctx *x = w != NULL ? w->ctx : c->ctx;
  rdzv_comm_t *parent = w != NULL ? w : c; /* of the new handle */
  double t0 = rdzv__comm_now(), deadline = t0 + timeout_s;
  int32_t n = c->ngrows + 1, size, *members;
  int32_t world = rdzv_rendezvous_world_size(x->r);
  char key[400], part[32], name[RDZV_COMM_NAME_MAX + 1];
  struct grow_rec g = {0};
  struct rdzv_nccl_config cfg;
  rdzv_nccl_comm_t nc = NULL;
  rdzv_nccl_result res;
  rdzv_comm_t *h;
  int rc;

  rc = ready_locked(c, call);
  if (rc == 0)
    rc = optional(c, api, call, "ncclCommGrow", RDZV_NCCL_GROW_VERSION,
                  api->comm_grow != NULL && api->comm_get_unique_id != NULL);
  if (rc == 0 && w != NULL)
    rc = grow_world_check(c, w, n, api, &wapi);
  if (rc < 0)
    return rc;
  snprintf(part, sizeof(part), "grow%d", (int)n);
  if (rdzv__comm_child_name(c->name, part, -1, name, sizeof(name)) < 0)
    return rdzv__comm_fail(c, -ENAMETOOLONG,
                           "%s: grow %d: the new name is over %d bytes",
                           c->name, (int)n, RDZV_COMM_NAME_MAX);
  if (added == NULL || nadded < 1 || nadded > world - c->size)
    return rdzv__comm_fail(c, -EINVAL,
                           "%s: grow %d: added must be 1 .. %d world ranks",
                           c->name, (int)n, (int)(world - c->size));
  size = c->size + nadded;
  members = malloc((size_t)size * sizeof(*members));
  if (members == NULL)
    return rdzv__comm_fail(c, RDZV_ENOMEM, "%s: out of memory", c->name);
  for (int32_t r = 0; r < c->size; r++)
    members[r] = rdzv_comm_world_rank(c, r);
  memcpy(members + c->size, added, (size_t)nadded * sizeof(*members));
  if (rdzv__comm_list_index(members, size, world, -1) < -1) {
    free(members);
    return rdzv__comm_fail(c, -EINVAL,
                           "%s: grow %d: added must be distinct world ranks "
                           "of 0 .. %d, none of them a member already",
                           c->name, (int)n, (int)world - 1);
  }
  agree_key(x, parent->gen, "grow", c->name, n, key, sizeof(key));
  pthread_mutex_lock(&x->store_lock);
  if (c->rank == 0)
    rc = grow_publish(c, x, key, api, members, size, deadline, &g);
  else
    rc = grow_read(c, x, key, 0, deadline, &g);
  pthread_mutex_unlock(&x->store_lock);
  if (rc == 0 && (g.old_size != c->size || g.size != size ||
                  memcmp(g.members, members, (size_t)size * sizeof(*members))))
    rc = rdzv__comm_fail(c, -EINVAL,
                         "%s: grow %d: rank 0 published %d members (%d "
                         "before), this rank was given others (%d, %d "
                         "before): every existing member must pass the same "
                         "added ranks",
                         c->name, (int)n, (int)g.size, (int)g.old_size,
                         (int)size, (int)c->size);
  free(g.members);
  if (rc < 0) {
    free(members);
    return rc;
  }
  h = child_new(parent, name, members, size, c->rank, "grow");
  if (h == NULL)
    return rdzv__comm_fail(c, RDZV_ENOMEM, "%s: out of memory", c->name);
  h->t.ids_s = rdzv__comm_now() - t0;
  h->t.nids = 1;
  config_for(h, &cfg);
  h->nccl_t0 = rdzv__comm_now();
  /* c's library makes it; h's world (the same library) polls it. */
  res =
      api->comm_grow(c->nccl, size, c->rank == 0 ? &g.id : NULL, -1, &nc, &cfg);
  rc = settle(c, h, wapi, nc, res, "ncclCommGrow", deadline, out);
  if (rc == 0)
    c->ngrows = n;
  return rc;
}

/* rdzv_comm_grow and rdzv_comm_grow_in: one path. world NULL, or a world
 * of c's own context, grows within c's generation. */
static int grow_call(rdzv_comm_t *c, rdzv_comm_t *world, const char *call,
                     const int32_t *added, int32_t nadded, rdzv_comm_t **out,
                     double timeout_s) {
  int rc;

  if (c == NULL)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  if (out == NULL || !(timeout_s > 0))
    rc = rdzv__comm_fail(c, -EINVAL, "%s: %s: %s", c->name, call,
                         out == NULL ? "out is NULL" : "timeout_s must be > 0");
  else if (world != NULL && world->parent != NULL)
    rc = rdzv__comm_fail(c, -EINVAL,
                         "%s: %s: '%s' is not a world handle (make it with "
                         "rdzv_comm_world)",
                         c->name, call, world->name);
  else
    rc = grow_locked(c, world != NULL && world->ctx != c->ctx ? world : NULL,
                     call, added, nadded, out, timeout_s);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

int rdzv_comm_grow(rdzv_comm_t *c, const int32_t *added, int32_t nadded,
                   rdzv_comm_t **out, double timeout_s) {
  return grow_call(c, NULL, "rdzv_comm_grow", added, nadded, out, timeout_s);
}

int rdzv_comm_grow_in(rdzv_comm_t *c, rdzv_comm_t *world, const int32_t *added,
                      int32_t nadded, rdzv_comm_t **out, double timeout_s) {
  return grow_call(c, world, "rdzv_comm_grow_in", added, nadded, out,
                   timeout_s);
}

/* A full communicator name: dot-separated parts of [A-Za-z0-9_-]. */
static int full_name_check(const char *name) {
  char part[RDZV_COMM_NAME_MAX + 1];
  size_t len, i = 0;

  if (name == NULL || (len = strlen(name)) == 0 || len > RDZV_COMM_NAME_MAX)
    return -EINVAL;
  while (i <= len) {
    size_t k = strcspn(name + i, ".");

    memcpy(part, name + i, k);
    part[k] = '\0';
    if (rdzv__comm_name_check(part) < 0)
      return -EINVAL;
    i += k + 1;
  }
  return 0;
}

static int grow_join_locked(rdzv_comm_t *w, const char *name, int32_t n,
                            rdzv_comm_t **out, double timeout_s) {
  const struct rdzv_nccl_api *api = NULL;
  double t0 = rdzv__comm_now(), deadline = t0 + timeout_s;
  int32_t me = rdzv_rendezvous_rank(w->ctx->r), rank = -1;
  char key[400], part[32], full[RDZV_COMM_NAME_MAX + 1];
  struct grow_rec g = {0};
  struct rdzv_nccl_config cfg;
  rdzv_nccl_comm_t nc = NULL;
  rdzv_nccl_result res;
  rdzv_comm_t *h;
  int rc;

  snprintf(part, sizeof(part), "grow%d", (int)n);
  if (w->parent != NULL || full_name_check(name) < 0 || n < 1 ||
      rdzv__comm_child_name(name, part, -1, full, sizeof(full)) < 0)
    return rdzv__comm_fail(w, -EINVAL,
                           "%s: rdzv_comm_grow_join: needs a world handle, a "
                           "communicator's full name ('world.train') and a "
                           "grow number >= 1 whose new name fits %d bytes",
                           w->name, RDZV_COMM_NAME_MAX);
  rc = rdzv__comm_load_api(w, &api);
  if (rc == 0)
    rc = optional(w, api, "rdzv_comm_grow_join", "ncclCommGrow",
                  RDZV_NCCL_GROW_VERSION, api->comm_grow != NULL);
  if (rc < 0)
    return rc;
  agree_key(w->ctx, w->gen, "grow", name, n, key, sizeof(key));
  pthread_mutex_lock(&w->ctx->store_lock);
  rc = grow_read(w, w->ctx, key, 0, deadline, &g);
  pthread_mutex_unlock(&w->ctx->store_lock);
  if (rc < 0)
    return rc;
  for (int32_t i = 0; i < g.size; i++)
    if (g.members[i] == me)
      rank = i;
  if (rank < g.old_size) {
    free(g.members);
    return rdzv__comm_fail(
        w, rank < 0 ? RDZV_ENOT_MEMBER : -EINVAL,
        "%s: grow %d of %s: world rank %d is %s", w->name, (int)n, name,
        (int)me,
        rank < 0 ? "not one of the ranks it adds"
                 : "an existing member (it calls rdzv_comm_grow or "
                   "rdzv_comm_grow_in)");
  }
  h = child_new(w, full, g.members, g.size, rank, "grow");
  if (h == NULL)
    return rdzv__comm_fail(w, RDZV_ENOMEM, "%s: out of memory", w->name);
  h->t.ids_s = rdzv__comm_now() - t0;
  h->t.nids = 1;
  config_for(h, &cfg);
  h->nccl_t0 = rdzv__comm_now();
  res = api->comm_grow(NULL, g.size, &g.id, rank, &nc, &cfg);
  return settle(w, h, api, nc, res, "ncclCommGrow", deadline, out);
}

int rdzv_comm_grow_join(rdzv_comm_t *world, const char *name, int32_t grow,
                        rdzv_comm_t **out, double timeout_s) {
  int rc;

  if (world == NULL)
    return -EINVAL;
  pthread_mutex_lock(&world->lock);
  if (out == NULL || !(timeout_s > 0))
    rc = rdzv__comm_fail(world, -EINVAL, "%s: rdzv_comm_grow_join: %s",
                         world->name,
                         out == NULL ? "out is NULL" : "timeout_s must be > 0");
  else
    rc = grow_join_locked(world, name, grow, out, timeout_s);
  pthread_mutex_unlock(&world->lock);
  return rc;
}
