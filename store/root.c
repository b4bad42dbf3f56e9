/* The root role: holds the truth of each job (keys, counters, waits and
 * collectives) in memory and answers every request itself. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/kvs.h"
#include "store/server_int.h"
#include "store/waits.h"
#include "store/root_int.h"

struct member {
  UT_hash_handle hh;
  uint64_t id;
  uint32_t len;
  uint8_t data[];
};

struct pending {
  struct conn *c;
  uint32_t req_id;
  struct pending *next;
};

struct coll {
  UT_hash_handle hh;
  uint8_t *name; /* type byte + name */
  uint32_t nlen;
  uint8_t type;
  uint64_t count;
  struct member *members;
  uint64_t nmembers;
  bool done;
  struct rdzv_buf result; /* the encoded vals list, member order */
  struct pending *pend;
  /* Failed for good (members disagreed on count, or one gave up at its
   * deadline): every call gets fail_status with this text. */
  char *fail_text;
  int fail_status;
};


/* ---- job state ------------------------------------------------------------- */

static bool key_present(void *ctx, const uint8_t *k, uint32_t klen) {
  struct kvs *s = ctx;
  return rdzv__kv_find(&s->kv, k, klen) != NULL;
}

static void key_value(void *ctx, const uint8_t *k, uint32_t klen,
                      struct rdzv_slice *v, bool *write_once) {
  struct kvs *s = ctx;
  struct kv_entry *e = rdzv__kv_find(&s->kv, k, klen);
  v->p = e ? e->val : NULL;
  v->n = e ? e->vlen : 0;
  *write_once = e != NULL && e->write_once;
}

static const struct waits_hooks root_wait_hooks = {key_present, key_value,
                                                    NULL};

static struct kvs *job_kvs(struct daemon *d, struct job *j) {
  if (j->kvs == NULL) {
    j->kvs = calloc(1, sizeof(*j->kvs));
    if (j->kvs == NULL)
      return NULL;
    j->kvs->d = d;
    rdzv__waits_init(&j->kvs->waits, d->loop, &root_wait_hooks, j->kvs);
  }
  return j->kvs;
}

static void reply_status(struct conn *c, const struct rdzv_msg *m, int st) {
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, st);
  rdzv__conn_reply(c, &r);
}

/* ---- simple operations --------------------------------------------------- */

static void item(const struct rdzv_items *it, uint32_t i,
                 struct rdzv_slice *out) {
  /* Shapes were validated, so the item exists. */
  if (rdzv_items_get(it, i, out) < 0) {
    out->p = NULL;
    out->n = 0;
  }
}

static void handle_set(struct kvs *s, struct conn *c,
                       const struct rdzv_msg *m) {
  struct rdzv_slice k, v;
  item(&m->keys, 0, &k);
  item(&m->vals, 0, &v);
  int rc = rdzv__kv_set(&s->kv, k.p, k.n, v.p, v.n,
                        (m->flags & RDZV_F_WRITE_ONCE) != 0, NULL);
  reply_status(c, m, rc);
  if (rc == 0)
    rdzv__waits_notify(&s->waits, k.p, k.n);
}

static void handle_get(struct kvs *s, struct conn *c,
                       const struct rdzv_msg *m) {
  struct rdzv_slice k;
  item(&m->keys, 0, &k);
  struct kv_entry *e = rdzv__kv_find(&s->kv, k.p, k.n);
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, e ? 0 : RDZV_ENOKEY);
  struct rdzv_slice v = {e ? e->val : NULL, e ? e->vlen : 0};
  if (e != NULL) {
    r.vals.n = 1;
    r.vals.v = &v;
    r.a = e->write_once ? 1 : 0;
  }
  rdzv__conn_reply(c, &r);
}

/* Parses a whole decimal int64; an absent value is 0. */
static int parse_i64(const struct kv_entry *e, int64_t *out) {
  if (e == NULL) {
    *out = 0;
    return 0;
  }
  if (e->vlen == 0 || e->vlen > 20)
    return RDZV_ENOT_NUMBER;
  char buf[24];
  memcpy(buf, e->val, e->vlen);
  buf[e->vlen] = '\0';
  char *end = NULL;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno != 0 || *end != '\0')
    return RDZV_ENOT_NUMBER;
  *out = v;
  return 0;
}

static void handle_add(struct kvs *s, struct conn *c,
                       const struct rdzv_msg *m) {
  struct rdzv_slice k;
  item(&m->keys, 0, &k);
  struct kv_entry *e = rdzv__kv_find(&s->kv, k.p, k.n);
  int64_t cur = 0;
  int rc = parse_i64(e, &cur);
  if (rc == 0 && __builtin_add_overflow(cur, m->a, &cur))
    rc = -ERANGE;
  if (rc == 0) {
    char text[24];
    int n = snprintf(text, sizeof(text), "%" PRId64, cur);
    rc = rdzv__kv_set(&s->kv, k.p, k.n, (const uint8_t *)text, (uint32_t)n,
                      false, NULL);
  }
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, rc);
  r.a = cur;
  rdzv__conn_reply(c, &r);
  if (rc == 0)
    rdzv__waits_notify(&s->waits, k.p, k.n);
}

static void handle_cas(struct kvs *s, struct conn *c,
                       const struct rdzv_msg *m) {
  struct rdzv_slice k, exp, des;
  item(&m->keys, 0, &k);
  item(&m->vals, 0, &exp);
  item(&m->vals, 1, &des);
  struct kv_entry *e = rdzv__kv_find(&s->kv, k.p, k.n);
  bool match = e == NULL ? exp.n == 0
                         : (e->vlen == exp.n &&
                            (exp.n == 0 || memcmp(e->val, exp.p, exp.n) == 0));
  int rc = match ? 0 : RDZV_ECAS_FAILED;
  if (match) {
    bool wo = e != NULL && e->write_once;
    rc = rdzv__kv_set(&s->kv, k.p, k.n, des.p, des.n, wo, &e);
  }
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, rc);
  struct rdzv_slice cur = {e ? e->val : NULL, e ? e->vlen : 0};
  r.vals.n = 1;
  r.vals.v = &cur;
  r.a = e != NULL;
  rdzv__conn_reply(c, &r);
  if (rc == 0)
    rdzv__waits_notify(&s->waits, k.p, k.n);
}

static void handle_delete(struct kvs *s, struct conn *c,
                          const struct rdzv_msg *m) {
  struct rdzv_slice k;
  item(&m->keys, 0, &k);
  struct rdzv_msg r;
  struct kv_entry *e = rdzv__kv_find(&s->kv, k.p, k.n);
  /* Nodes cache write-once keys for good: deleting one would leave stale
   * copies, so it is refused (generations remove their own keys). */
  rdzv__reply_init(&r, m, e != NULL && e->write_once ? RDZV_EWRITE_ONCE : 0);
  if (r.status == 0)
    r.a = rdzv__kv_delete(&s->kv, k.p, k.n);
  rdzv__conn_reply(c, &r);
}

static void handle_mget(struct kvs *s, struct conn *c,
                        const struct rdzv_msg *m) {
  struct rdzv_slice *vals = calloc(m->keys.n, sizeof(*vals));
  struct rdzv_slice *missing = calloc(m->keys.n, sizeof(*missing));
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, 0);
  if (vals == NULL || missing == NULL) {
    r.status = RDZV_ENOMEM;
  } else {
    uint32_t nmiss = 0;
    size_t pos = 0;
    struct rdzv_slice k;
    for (uint32_t i = 0; rdzv_items_next(&m->keys, &pos, &k); i++) {
      struct kv_entry *e = rdzv__kv_find(&s->kv, k.p, k.n);
      if (e == NULL) {
        missing[nmiss++] = k;
      } else {
        vals[i].p = e->val;
        vals[i].n = e->vlen;
      }
    }
    if (nmiss > 0) {
      r.status = RDZV_ENOKEY;
      r.keys.n = nmiss;
      r.keys.v = missing;
    } else {
      r.vals.n = m->keys.n;
      r.vals.v = vals;
    }
  }
  rdzv__conn_reply(c, &r);
  free(vals);
  free(missing);
}

static void handle_mset(struct kvs *s, struct conn *c,
                        const struct rdzv_msg *m) {
  bool wo = (m->flags & RDZV_F_WRITE_ONCE) != 0;
  size_t kp = 0, vp = 0;
  struct rdzv_slice k, v;
  /* Check every write-once conflict first, so the call is all or nothing. */
  while (rdzv_items_next(&m->keys, &kp, &k) &&
         rdzv_items_next(&m->vals, &vp, &v)) {
    struct kv_entry *e = rdzv__kv_find(&s->kv, k.p, k.n);
    if (e != NULL && e->write_once &&
        (e->vlen != v.n || (v.n > 0 && memcmp(e->val, v.p, v.n) != 0))) {
      reply_status(c, m, RDZV_EWRITE_ONCE);
      return;
    }
  }
  int rc = 0;
  kp = vp = 0;
  while (rc == 0 && rdzv_items_next(&m->keys, &kp, &k) &&
         rdzv_items_next(&m->vals, &vp, &v)) {
    rc = rdzv__kv_set(&s->kv, k.p, k.n, v.p, v.n, wo, NULL);
    if (rc == 0)
      rdzv__waits_notify(&s->waits, k.p, k.n);
  }
  reply_status(c, m, rc);
}

static void handle_append(struct kvs *s, struct conn *c,
                          const struct rdzv_msg *m) {
  struct rdzv_slice k, v;
  item(&m->keys, 0, &k);
  item(&m->vals, 0, &v);
  struct kv_entry *e = rdzv__kv_find(&s->kv, k.p, k.n);
  /* The value after the append obeys the same limit as a set. */
  if (e != NULL && (uint64_t)e->vlen + v.n > s->d->cfg.max_value_bytes) {
    reply_status(c, m, RDZV_EVALUE_TOO_BIG);
    return;
  }
  int rc = rdzv__kv_append(&s->kv, k.p, k.n, v.p, v.n, NULL);
  reply_status(c, m, rc);
  if (rc == 0)
    rdzv__waits_notify(&s->waits, k.p, k.n);
}

static void handle_stats(struct daemon *d, struct conn *c,
                         const struct rdzv_msg *m) {
  char *json = rdzv__stats_json(d);
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, json ? 0 : RDZV_ENOMEM);
  struct rdzv_slice v = {(const uint8_t *)json,
                         json ? (uint32_t)strlen(json) : 0};
  if (json != NULL) {
    r.vals.n = 1;
    r.vals.v = &v;
  }
  rdzv__conn_reply(c, &r);
  free(json);
}

/* ---- collectives: barrier and gather ------------------------------------ */

/* The collective of that type and name; if absent, created with count
 * when create is set, else NULL (NULL also when out of memory). */
static struct coll *coll_lookup(struct kvs *s, uint8_t type,
                                struct rdzv_slice name, bool create,
                                uint64_t count) {
  uint8_t stackkey[256];
  uint32_t nlen = name.n + 1;
  uint8_t *key = nlen <= sizeof(stackkey) ? stackkey : malloc(nlen);
  if (key == NULL)
    return NULL;
  key[0] = type;
  memcpy(key + 1, name.p, name.n);
  struct coll *co = NULL;
  HASH_FIND(hh, s->colls, key, nlen, co);
  if (co == NULL && create && (co = calloc(1, sizeof(*co))) != NULL) {
    co->name = malloc(nlen);
    if (co->name == NULL) {
      free(co);
      co = NULL;
    } else {
      memcpy(co->name, key, nlen);
      co->nlen = nlen;
      co->type = type;
      co->count = count;
      HASH_ADD_KEYPTR(hh, s->colls, co->name, co->nlen, co);
    }
  }
  if (key != stackkey)
    free(key);
  return co;
}

static struct coll *coll_get(struct kvs *s, const struct rdzv_msg *m) {
  struct rdzv_slice name;
  item(&m->keys, 0, &name);
  return coll_lookup(s, m->type, name, true, (uint64_t)m->b);
}

static void coll_reply(struct coll *co, struct conn *c, uint32_t req_id,
                       int status, uint16_t flags) {
  struct rdzv_msg r;
  memset(&r, 0, sizeof(r));
  r.type = co->type;
  r.req_id = req_id;
  r.status = status;
  r.flags = flags;
  if (status == 0 && !(flags & RDZV_F_SUPERSEDED)) {
    r.a = (int64_t)co->count;
    if (co->type == RDZV_MSG_GATHER) {
      r.vals.n = (uint32_t)co->count;
      r.vals.raw = co->result.data;
      r.vals.raw_len = co->result.len;
    }
  }
  rdzv__conn_reply(c, &r);
}

static int by_member_id(const struct member *a, const struct member *b) {
  return a->id < b->id ? -1 : a->id > b->id;
}

/* All members are in: encode the result, answer everyone waiting. A
 * gather named "rdzv/..." (the rendezvous' unique ids) also becomes the
 * write-once key of that name, so ranks that did not contribute can wait
 * for it and read it from their node's cache. */
static void coll_complete(struct kvs *s, struct coll *co) {
  HASH_SORT(co->members, by_member_id);
  struct member *mb, *tmp;
  HASH_ITER(hh, co->members, mb, tmp) {
    if (co->type == RDZV_MSG_GATHER) {
      /* One item, { u64 member id, data }, written in two parts. */
      uint8_t head[12];
      uint32_t n = 8 + mb->len;
      for (int i = 0; i < 4; i++)
        head[i] = (uint8_t)(n >> (8 * i));
      rdzv_store_u64le(head + 4, mb->id);
      rdzv_buf_append(&co->result, head, sizeof(head));
      rdzv_buf_append(&co->result, mb->data, mb->len);
    }
    HASH_DEL(co->members, mb);
    free(mb);
  }
  co->done = true;
  if (co->type == RDZV_MSG_GATHER && co->nlen > 6 &&
      memcmp(co->name + 1, "rdzv/", 5) == 0) {
    char key[512];
    if (co->nlen - 1 < sizeof(key)) {
      memcpy(key, co->name + 1, co->nlen - 1);
      key[co->nlen - 1] = '\0';
      rdzv__root_put(s, key, co->result.data, (uint32_t)co->result.len);
    }
  }
  struct pending *p;
  while ((p = co->pend) != NULL) {
    co->pend = p->next;
    coll_reply(co, p->c, p->req_id, 0, 0);
    rdzv__conn_unref(p->c);
    free(p);
  }
}

/* Adds the request's contributions; each member id counts once, so a
 * subtree that re-sends after reattaching is not counted twice. */
static int coll_add_members(struct coll *co, const struct rdzv_msg *m,
                            struct daemon *d) {
  size_t pos = 0;
  struct rdzv_slice v;
  uint32_t n = 0;
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    uint64_t id = rdzv_load_u64le(v.p);
    struct member *mb = NULL;
    HASH_FIND(hh, co->members, &id, sizeof(id), mb);
    if (mb != NULL)
      continue;
    mb = malloc(sizeof(*mb) + v.n - 8);
    if (mb == NULL)
      return RDZV_ENOMEM;
    mb->id = id;
    mb->len = v.n - 8;
    memcpy(mb->data, v.p + 8, mb->len);
    HASH_ADD(hh, co->members, id, sizeof(mb->id), mb);
    co->nmembers++;
    n++;
  }
  if (n > 1)
    d->stats.combined += n - 1;
  return 0;
}

/* An error answer with keys[0] = text. */
static void reply_text(struct conn *c, uint8_t type, uint32_t req_id,
                       int status, const char *text) {
  struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)strlen(text)};
  struct rdzv_msg r;
  memset(&r, 0, sizeof(r));
  r.type = type;
  r.req_id = req_id;
  r.status = status;
  r.keys.n = 1;
  r.keys.v = &t;
  rdzv__conn_reply(c, &r);
}

/* Fails co for good: every member waiting now, and every later one, gets
 * status with text (one side alone could otherwise wait until its own
 * deadline, or complete while another member already failed). */
static void coll_fail_all(struct coll *co, int status, const char *text) {
  struct pending *p;
  co->fail_text = strdup(text);
  co->fail_status = status;
  while ((p = co->pend) != NULL) {
    co->pend = p->next;
    reply_text(p->c, co->type, p->req_id, status, text);
    rdzv__conn_unref(p->c);
    free(p);
  }
}

/* Members disagree on the member count: a collective that can never
 * complete; RDZV_ECOUNT_MISMATCH with both counts for everyone. */
static void coll_mismatch(struct coll *co, struct conn *c,
                          const struct rdzv_msg *m) {
  struct rdzv_slice v = {NULL, 0};
  uint64_t who = 0;
  if (rdzv_items_get(&m->vals, 0, &v) == 0 && v.n >= 8)
    who = rdzv_load_u64le(v.p);
  char text[400];
  snprintf(text, sizeof(text),
           "members of %s '%.*s' disagree on the member count: %" PRIu64
           " (the first to come) and %" PRId64 " (member %" PRIu64 ")",
           rdzv_msg_type_name(co->type), (int)(co->nlen - 1), co->name + 1,
           co->count, m->b, who);
  if (!co->done) /* one that completed stays completed */
    coll_fail_all(co, RDZV_ECOUNT_MISMATCH, text);
  reply_text(c, co->type, m->req_id, RDZV_ECOUNT_MISMATCH, text);
}

static void handle_collective(struct kvs *s, struct conn *c,
                              const struct rdzv_msg *m) {
  struct coll *co = coll_get(s, m);
  if (co == NULL) {
    reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (co->fail_text != NULL) {
    reply_text(c, co->type, m->req_id, co->fail_status, co->fail_text);
    return;
  }
  if (co->count != (uint64_t)m->b) {
    coll_mismatch(co, c, m);
    return;
  }
  if (co->done) {
    coll_reply(co, c, m->req_id, 0, 0);
    return;
  }
  int rc = coll_add_members(co, m, s->d);
  if (rc < 0) {
    reply_status(c, m, rc);
    return;
  }
  /* One pending reply per child node: its older request is answered
   * "superseded" so only the newest carries the result. (A client may
   * contribute several members on one connection; each gets its reply.) */
  struct pending *p = NULL;
  if (c->role == RDZV_ROLE_NODE)
    for (p = co->pend; p != NULL && p->c != c; p = p->next)
      ;
  if (p != NULL) {
    coll_reply(co, c, p->req_id, 0, RDZV_F_SUPERSEDED);
    p->req_id = m->req_id;
  } else if ((p = calloc(1, sizeof(*p))) != NULL) {
    p->c = c;
    p->req_id = m->req_id;
    p->next = co->pend;
    co->pend = p;
    rdzv__conn_ref(c);
  } else {
    reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (co->nmembers >= co->count)
    coll_complete(s, co);
}

/* The ids 0 .. count-1 not among co's members, at most max of them, as a
 * list of u64 items; *n gets how many. Probing each id: this runs only
 * after somebody's deadline. */
static int missing_ids(const struct coll *co, uint64_t max, struct rdzv_buf *ids,
                       uint32_t *n) {
  *n = 0;
  for (uint64_t id = 0; !co->done && id < co->count && *n < max; id++) {
    struct member *mb = NULL;
    HASH_FIND(hh, co->members, &id, sizeof(id), mb);
    if (mb != NULL)
      continue;
    uint8_t le[8];
    rdzv_store_u64le(le, id);
    if (rdzv_items_append(ids, le, sizeof(le)) < 0)
      return RDZV_ENOMEM;
    (*n)++;
  }
  return 0;
}

/* GIVE_UP: a member's deadline passed before co completed: fail it for
 * everyone, saying why and who was missing. */
static int coll_give_up(struct kvs *s, struct coll *co, const struct rdzv_msg *m,
                        struct rdzv_slice name) {
  struct rdzv_slice why = {(const uint8_t *)"a member gave up at its deadline",
                           32};
  if (m->keys.n > 1)
    item(&m->keys, 1, &why);
  if (co == NULL &&
      (co = coll_lookup(s, (uint8_t)m->a, name, true, 0)) == NULL)
    return RDZV_ENOMEM;
  if (co->done || co->fail_text != NULL)
    return 0;
  char text[700];
  int len = snprintf(text, sizeof(text), "%s '%.*s' failed: %.*s; ",
                     rdzv_msg_type_name(co->type), (int)name.n, name.p,
                     (int)why.n, why.p);
  if (co->count == 0) {
    snprintf(text + len, sizeof(text) - (size_t)len,
             "no member had reached the root");
  } else {
    struct rdzv_buf ids = {0};
    uint32_t n = 0;
    if (missing_ids(co, 16, &ids, &n) < 0) {
      rdzv_buf_free(&ids);
      return RDZV_ENOMEM;
    }
    len += snprintf(text + len, sizeof(text) - (size_t)len,
                    "%" PRIu64 " of %" PRIu64 " members missing: ",
                    co->count - co->nmembers, co->count);
    size_t pos = 0;
    struct rdzv_slice v;
    struct rdzv_items it = {n, NULL, ids.data, ids.len};
    for (int i = 0; len < (int)sizeof(text) && rdzv_items_next(&it, &pos, &v);
         i++)
      len += snprintf(text + len, sizeof(text) - (size_t)len, "%s%" PRIu64,
                      i > 0 ? ", " : "", rdzv_load_u64le(v.p));
    if (co->count - co->nmembers > n && len < (int)sizeof(text))
      snprintf(text + len, sizeof(text) - (size_t)len, " and %" PRIu64 " more",
               co->count - co->nmembers - n);
    rdzv_buf_free(&ids);
  }
  coll_fail_all(co, RDZV_EDEADLINE, text);
  return co->fail_text != NULL ? 0 : RDZV_ENOMEM;
}

/* COLL_STATUS: how many members of a collective have contributed, and
 * the first of those missing; with GIVE_UP, first fail it unless it
 * completed. */
static void handle_coll_status(struct kvs *s, struct conn *c,
                               const struct rdzv_msg *m) {
  struct rdzv_slice name;
  item(&m->keys, 0, &name);
  struct coll *co = coll_lookup(s, (uint8_t)m->a, name, false, 0);
  if (m->flags & RDZV_F_GIVE_UP) {
    int rc = coll_give_up(s, co, m, name);
    if (rc < 0) {
      reply_status(c, m, rc);
      return;
    }
  }
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, 0);
  struct rdzv_buf ids = {0};
  uint32_t n = 0;
  if (co != NULL) {
    r.a = (int64_t)(co->done ? co->count : co->nmembers);
    r.b = (int64_t)co->count;
    if (missing_ids(co, (uint64_t)m->b, &ids, &n) < 0) {
      rdzv_buf_free(&ids);
      reply_status(c, m, RDZV_ENOMEM);
      return;
    }
  }
  r.vals.n = n;
  r.vals.raw = ids.data;
  r.vals.raw_len = ids.len;
  rdzv__conn_reply(c, &r);
  rdzv_buf_free(&ids);
}

static void coll_free(struct kvs *s, struct coll *co) {
  struct member *mb, *mt;
  HASH_ITER(hh, co->members, mb, mt) {
    HASH_DEL(co->members, mb);
    free(mb);
  }
  struct pending *p;
  while ((p = co->pend) != NULL) {
    co->pend = p->next;
    rdzv__conn_unref(p->c);
    free(p);
  }
  HASH_DEL(s->colls, co);
  rdzv_buf_free(&co->result);
  free(co->fail_text);
  free(co->name);
  free(co);
}

void rdzv__root_colls_fail_prefix(struct kvs *s, const char *prefix,
                                  int status, const char *text) {
  size_t pl = strlen(prefix);
  struct coll *co, *tmp;
  HASH_ITER(hh, s->colls, co, tmp) {
    if (co->done || co->nlen - 1 < pl || memcmp(co->name + 1, prefix, pl))
      continue;
    for (struct pending *p = co->pend; p != NULL; p = p->next)
      reply_text(p->c, co->type, p->req_id, status, text);
    coll_free(s, co);
  }
}

/* ---- dispatch and teardown ------------------------------------------------ */

void rdzv__root_handle(struct daemon *d, struct conn *c,
                       const struct rdzv_msg *m) {
  struct kvs *s = job_kvs(d, c->job);
  if (s == NULL) {
    reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  const char *why = "";
  int gen_rc = m->type == RDZV_MSG_JOIN || m->type == RDZV_MSG_ABORT
                   ? 0
                   : rdzv__root_gen_check(s, m, &why);
  if (gen_rc < 0) {
    struct rdzv_slice t = {(const uint8_t *)why, (uint32_t)strlen(why)};
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, gen_rc);
    r.keys.n = t.n > 0 ? 1 : 0;
    r.keys.v = &t;
    rdzv__conn_reply(c, &r);
    return;
  }
  if (m->type != RDZV_MSG_WAIT && m->type != RDZV_MSG_BARRIER &&
      m->type != RDZV_MSG_GATHER && m->type != RDZV_MSG_JOIN)
    d->stats.ops[m->type].local++;
  switch (m->type) {
  case RDZV_MSG_JOIN: rdzv__root_join(s, c, m); break;
  case RDZV_MSG_ABORT: rdzv__root_abort(s, c, m); break;
  case RDZV_MSG_SET: handle_set(s, c, m); break;
  case RDZV_MSG_GET: handle_get(s, c, m); break;
  case RDZV_MSG_WAIT:
    if (rdzv__waits_add(&s->waits, c, m) == 0)
      d->stats.ops[m->type].local++;
    break;
  case RDZV_MSG_ADD: handle_add(s, c, m); break;
  case RDZV_MSG_CAS: handle_cas(s, c, m); break;
  case RDZV_MSG_DELETE: handle_delete(s, c, m); break;
  case RDZV_MSG_MGET: handle_mget(s, c, m); break;
  case RDZV_MSG_MSET: handle_mset(s, c, m); break;
  case RDZV_MSG_APPEND: handle_append(s, c, m); break;
  case RDZV_MSG_NKEYS: {
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, 0);
    r.a = (int64_t)s->kv.count;
    rdzv__conn_reply(c, &r);
    break;
  }
  case RDZV_MSG_BARRIER:
  case RDZV_MSG_GATHER: handle_collective(s, c, m); break;
  case RDZV_MSG_COLL_STATUS: handle_coll_status(s, c, m); break;
  case RDZV_MSG_STATS: handle_stats(d, c, m); break;
  default: reply_status(c, m, RDZV_EPROTO); break;
  }
}

void rdzv__root_conn_closed(struct daemon *d, struct conn *c) {
  /* Waiters and collective entries hold a reference to c and answer into
   * the void once c is closed; waits end at their deadline. A generation
   * c joined ranks to is aborted at once. */
  if (d->stopping || c->job == NULL || c->job->kvs == NULL)
    return;
  rdzv__root_rounds_conn_closed(c->job->kvs, c);
}

void rdzv__root_job_free(struct job *j) {
  struct kvs *s = j->kvs;
  if (s == NULL)
    return;
  rdzv__waits_clear(&s->waits);
  rdzv__root_rounds_free(s);
  struct coll *co, *tmp;
  HASH_ITER(hh, s->colls, co, tmp)
    coll_free(s, co);
  rdzv__kv_clear(&s->kv);
  free(s);
  j->kvs = NULL;
}
