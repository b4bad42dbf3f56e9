/* A node's copies of mutable keys (store/daemon/keys/copies.h has the
 * rule): what the parent granted (values, and keys known absent), served
 * only while the parent's lease runs; the invalidations that come down
 * (dropped here, passed to this node's own child nodes, acknowledged up
 * once they are gone below too); and the leases this node gives its
 * child nodes, never longer than what is left of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "store/daemon/node/node_int.h"

struct absent {
  UT_hash_handle hh;
  uint32_t klen;
  uint8_t key[];
};

static void absent_del(struct node_job *nj, const uint8_t *k, uint32_t klen) {
  struct absent *a = NULL;
  HASH_FIND(hh, nj->absent, k, klen, a);
  if (a != NULL) {
    HASH_DEL(nj->absent, a);
    free(a);
  }
}

static void drop_all(struct node_job *nj) {
  rdzv__kv_clear(&nj->copies);
  struct absent *a, *t;
  HASH_ITER (hh, nj->absent, a, t) {
    HASH_DEL(nj->absent, a);
    free(a);
  }
}

void rdzv__node_copies_init(struct node_job *nj) {
  snprintf(nj->what, sizeof(nj->what), "job %s", nj->job->id);
  rdzv__copies_init(&nj->holders, nj->d, nj->what);
  rdzv__upstream_copies(nj->up, rdzv__node_copies_on_inval,
                        rdzv__node_copies_on_lost);
}

void rdzv__node_copies_free(struct node_job *nj) {
  rdzv__copies_free(&nj->holders);
  drop_all(nj);
}

bool rdzv__node_copies_valid(struct node_job *nj) {
  return nj->d->cfg.cache_mutable && rdzv__upstream_lease_left(nj->up) > 0;
}

int rdzv__node_copy_find(struct node_job *nj, struct rdzv_slice k,
                         struct rdzv_slice *v, struct rdzv_blob **blob) {
  if (!rdzv__node_copies_valid(nj))
    return -1;
  struct kv_entry *e = rdzv__kv_find(&nj->copies, k.p, k.n);
  if (e != NULL) {
    v->p = e->val;
    v->n = e->vlen;
    *blob = e->blob;
    return 1;
  }
  struct absent *a = NULL;
  HASH_FIND(hh, nj->absent, k.p, k.n, a);
  return a != NULL ? 0 : -1;
}

void rdzv__node_copy_put(struct node_job *nj, struct rdzv_slice k,
                         const struct rdzv_slice *v) {
  if (k.n == 0)
    return;
  rdzv__upstream_want_lease(nj->up);
  /* Past --max-copies no new key is kept (one already kept is updated). */
  if (nj->copies.count + HASH_COUNT(nj->absent) >= nj->d->cfg.max_copies &&
      rdzv__kv_find(&nj->copies, k.p, k.n) == NULL) {
    struct absent *a = NULL;
    HASH_FIND(hh, nj->absent, k.p, k.n, a);
    if (a == NULL)
      return;
  }
  if (v == NULL) {
    rdzv__kv_delete(&nj->copies, k.p, k.n);
    struct absent *a = NULL;
    HASH_FIND(hh, nj->absent, k.p, k.n, a);
    if (a != NULL)
      return;
    a = malloc(sizeof(*a) + k.n);
    if (a == NULL)
      return; /* not kept: the next read asks the parent */
    a->klen = k.n;
    memcpy(a->key, k.p, k.n);
    HASH_ADD_KEYPTR(hh, nj->absent, a->key, a->klen, a);
    return;
  }
  absent_del(nj, k.p, k.n);
  /* A big value that came in the frame being handled is kept by
   * reference to that frame's buffer, as the write-once cache does. */
  struct rdzv_blob *fb = nj->d->frame_blob;
  int rc;
  if (fb != NULL && v->n >= nj->d->cfg.share_min_bytes &&
      (uint64_t)v->n * 2 >= fb->len && rdzv__blob_holds(fb, v->p, v->n))
    rc =
        rdzv__kv_set_shared(&nj->copies, k.p, k.n, fb, v->p, v->n, false, NULL);
  else
    rc = rdzv__kv_set(&nj->copies, k.p, k.n, v->p, v->n, false, NULL);
  if (rc < 0)
    rdzv__kv_delete(&nj->copies, k.p, k.n); /* never an old value */
}

bool rdzv__node_copies_grant(struct node_job *nj, struct conn *c,
                             const struct rdzv_slice *keys, uint32_t n) {
  if (c->role != RDZV_ROLE_NODE || !nj->d->cfg.cache_mutable)
    return false;
  for (uint32_t i = 0; i < n; i++)
    if (rdzv__copies_register(&nj->holders, c, keys[i].p, keys[i].n) < 0)
      return false;
  return true;
}

/* An invalidation batch waiting for this node's child nodes. */
struct inval_ack {
  struct node_job *nj;
  uint64_t gen, seq;
};

static void on_below_done(void *arg) {
  struct inval_ack *a = arg;
  rdzv__upstream_inval_ack(a->nj->up, a->gen, a->seq);
  free(a);
}

void rdzv__node_copies_on_inval(void *arg, uint64_t gen,
                                const struct rdzv_msg *m) {
  struct node_job *nj = arg;
  uint64_t seq = (uint64_t)m->a;
  bool all = (m->flags & RDZV_F_ALL) != 0;
  if (all) {
    drop_all(nj);
  } else {
    size_t pos = 0;
    struct rdzv_slice k;
    while (rdzv_items_next(&m->keys, &pos, &k)) {
      rdzv__kv_delete(&nj->copies, k.p, k.n);
      absent_del(nj, k.p, k.n);
    }
  }
  /* Then below: acknowledged up once this node's child nodes dropped
   * theirs (or their leases ran out). */
  struct inval_ack *a = malloc(sizeof(*a));
  int rc = RDZV_ENOMEM;
  if (a != NULL) {
    a->nj = nj;
    a->gen = gen;
    a->seq = seq;
    rc = all ? rdzv__copies_invalidate(&nj->holders, NULL, 0, RDZV_COPIES_ALL,
                                       on_below_done, a)
             : rdzv__copies_invalidate_items(&nj->holders, &m->keys, 0,
                                             on_below_done, a);
  }
  if (rc == 1)
    return;
  free(a);
  if (rc < 0) {
    /* Out of memory: the children were sent the invalidation but it
     * cannot be waited for. Not acknowledging keeps the write waiting at
     * the parent until this node's lease there ends, which is at least
     * as long as any lease it gave (they are bounded by it). */
    rdzv__log(nj->d, 0,
              "%s: out of memory waiting for child nodes' "
              "invalidations: the parent waits for this node's lease",
              nj->what);
    return;
  }
  rdzv__upstream_inval_ack(nj->up, gen, seq);
}

void rdzv__node_copies_on_lost(void *arg) {
  struct node_job *nj = arg;
  drop_all(nj);
  /* The copies below were granted through the lost connection: they go
   * too (nothing waits for it; their leases are bounded by ours, and a
   * renewal counts only once they applied this). */
  rdzv__copies_invalidate(&nj->holders, NULL, 0, RDZV_COPIES_ALL, NULL, NULL);
}

void rdzv__node_copies_ping(struct daemon *d, struct conn *c,
                            struct rdzv_msg *r) {
  /* A child that pings for a job this node holds nothing of (it
   * restarted): the job's link to the parent starts now, so that what
   * the child is told of the root (RDZV_F_ROOT_AWAY until it is up) is
   * this node's own. */
  struct node_job *nj = c->job != NULL ? rdzv__node_job(d, c->job) : NULL;
  if (nj == NULL) {
    r->flags |= RDZV_F_ROOT_AWAY;
    return; /* out of memory: no copies granted either */
  }
  if (!rdzv__upstream_root_reachable(nj->up, NULL, 0))
    r->flags |= RDZV_F_ROOT_AWAY; /* the child's root_reachable */
  uint64_t left = rdzv__upstream_lease_left(nj->up);
  uint32_t grant = rdzv_config_copy_lease_ms(&d->cfg);
  if (left < grant)
    grant = (uint32_t)left;
  rdzv__copies_ping(&nj->holders, c, grant, &r->a, &r->b);
}
