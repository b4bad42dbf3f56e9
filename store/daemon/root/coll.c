/* Barriers and gathers at the root: members' contributions are counted
 * once each (by member id, so a subtree that re-sends after reattaching is
 * not counted twice), the collective completes when all have come, and
 * its outcome (the gather's result, or why it failed) is kept in the
 * job's state (RDZV_STATE_REC_COLL). COLL_STATUS reports who is missing
 * and, with GIVE_UP, fails it for every member. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "store/daemon/root/round.h"

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
  /* Completed, or failed for good (members disagreed on count, or one
   * gave up at its deadline: every call gets fail_status with the
   * record's text). The outcome itself (the result, member order; or the
   * text) is the state's record RDZV_STATE_REC_COLL of the name. */
  bool done;
  int fail_status;
  struct pending *pend;
};

/* The collective of that type and name; if absent, created with count
 * when create is set, else NULL (NULL also when out of memory). */
static struct coll *coll_lookup(struct root_job *s, uint8_t type,
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

static struct coll *coll_get(struct root_job *s, const struct rdzv_msg *m) {
  struct rdzv_slice name;
  rdzv__root_item(&m->keys, 0, &name);
  return coll_lookup(s, m->type, name, true, (uint64_t)m->b);
}

/* The outcome record of co: { i32 status, u64 member count, then the
 * result (status 0: the encoded vals list, member order) or the failure
 * text }, little-endian: what answers a member without the live struct. */
#define COLL_REC_HEAD 12u

static int coll_save(struct root_job *s, struct coll *co, int status,
                     const uint8_t *p, size_t n) {
  struct rdzv_buf rec = {0};
  uint8_t head[COLL_REC_HEAD];
  for (int i = 0; i < 4; i++)
    head[i] = (uint8_t)((uint32_t)status >> (8 * i));
  rdzv_store_u64le(head + 4, co->count);
  int rc = rdzv_buf_append(&rec, head, sizeof(head));
  if (rc == 0 && n > 0)
    rc = rdzv_buf_append(&rec, p, n);
  if (rc == 0)
    rc = rdzv__state_rec_put(s->st, RDZV_STATE_REC_COLL, co->name, co->nlen,
                             rec.data, (uint32_t)rec.len);
  rdzv_buf_free(&rec);
  return rc;
}

/* What coll_save stored after its head, in *out (borrowed from the
 * state), and the blob that holds it in *blob (may be NULL: unwanted; it
 * gets NULL when the state has none). 0, RDZV_ENOKEY (no record, or a
 * short one), or the state's error. */
static int coll_outcome_blob(struct root_job *s, const struct coll *co,
                             struct rdzv_slice *out, struct rdzv_blob **blob) {
  struct rdzv_state_val v;
  out->p = NULL;
  out->n = 0;
  if (blob != NULL)
    *blob = NULL;
  int rc =
      rdzv__state_rec_get(s->st, RDZV_STATE_REC_COLL, co->name, co->nlen, &v);
  if (rc < 0)
    return rc;
  if (v.n < COLL_REC_HEAD)
    return RDZV_ENOKEY;
  out->p = v.p + COLL_REC_HEAD;
  out->n = v.n - COLL_REC_HEAD;
  if (blob != NULL)
    *blob = v.blob;
  return 0;
}

static int coll_outcome(struct root_job *s, const struct coll *co,
                        struct rdzv_slice *out) {
  return coll_outcome_blob(s, co, out, NULL);
}

static void coll_reply(struct root_job *s, struct coll *co, struct conn *c,
                       uint32_t req_id, int status, uint16_t flags) {
  struct rdzv_msg r;
  memset(&r, 0, sizeof(r));
  r.type = co->type;
  r.req_id = req_id;
  r.status = status;
  r.flags = flags;
  /* A gather's result goes to every member from the record's one buffer. */
  struct rdzv_blob *b = NULL;
  if (status == 0 && !(flags & RDZV_F_SUPERSEDED)) {
    r.a = (int64_t)co->count;
    struct rdzv_slice res;
    int rc =
        co->type == RDZV_MSG_GATHER ? coll_outcome_blob(s, co, &res, &b) : 0;
    if (rc < 0) { /* the result cannot be read: say so, send no part */
      r.status = rc;
      r.a = 0;
    } else if (co->type == RDZV_MSG_GATHER) {
      r.vals.n = (uint32_t)co->count;
      r.vals.raw = res.p;
      r.vals.raw_len = res.n;
    }
  }
  rdzv__conn_reply_shared(c, &r, &b, b != NULL ? 1 : 0);
}

static int by_member_id(const struct member *a, const struct member *b) {
  return a->id < b->id ? -1 : a->id > b->id;
}

static int coll_fail_all(struct root_job *s, struct coll *co, int status,
                         const char *text);

/* All members are in: encode the result, answer everyone waiting. A
 * gather named "rdzv/..." (the rendezvous' unique ids) also becomes the
 * write-once key of that name, so ranks that did not contribute can wait
 * for it and read it from their node's cache. */
static void coll_complete(struct root_job *s, struct coll *co) {
  struct rdzv_buf result = {0}; /* the encoded vals list, member order */
  HASH_SORT(co->members, by_member_id);
  struct member *mb, *tmp;
  HASH_ITER (hh, co->members, mb, tmp) {
    if (co->type == RDZV_MSG_GATHER) {
      /* One item, { u64 member id, data }, written in two parts. */
      uint8_t head[12];
      uint32_t n = 8 + mb->len;
      for (int i = 0; i < 4; i++)
        head[i] = (uint8_t)(n >> (8 * i));
      rdzv_store_u64le(head + 4, mb->id);
      rdzv_buf_append(&result, head, sizeof(head));
      rdzv_buf_append(&result, mb->data, mb->len);
    }
    HASH_DEL(co->members, mb);
    s->coll_bytes -= sizeof(*mb) + mb->len;
    free(mb);
  }
  co->done = true;
  if (coll_save(s, co, 0, result.data, result.len) < 0) {
    co->done = false;
    rdzv_buf_free(&result);
    rdzv__log(s->d, 0, "%s '%.*s': cannot keep its result: out of memory",
              rdzv_msg_type_name(co->type), (int)(co->nlen - 1), co->name + 1);
    coll_fail_all(s, co, RDZV_ENOMEM, "out of memory at the root");
    return;
  }
  if (co->type == RDZV_MSG_GATHER && co->nlen > 6 &&
      memcmp(co->name + 1, "rdzv/", 5) == 0) {
    char key[512];
    if (co->nlen - 1 < sizeof(key)) {
      memcpy(key, co->name + 1, co->nlen - 1);
      key[co->nlen - 1] = '\0';
      rdzv__root_put(s, key, result.data, (uint32_t)result.len);
    }
  }
  rdzv_buf_free(&result);
  rdzv__round_tl_coll(s, co->name + 1, co->nlen - 1, co->count, co->count,
                      TL_PHASE_DONE, false);
  struct pending *p;
  while ((p = co->pend) != NULL) {
    co->pend = p->next;
    coll_reply(s, co, p->c, p->req_id, 0, 0);
    rdzv__conn_unref(p->c);
    free(p);
  }
}

/* Adds the request's contributions; each member id counts once, so a
 * subtree that re-sends after reattaching is not counted twice. */
static int coll_add_members(struct root_job *s, struct coll *co,
                            const struct rdzv_msg *m) {
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
    s->coll_bytes += sizeof(*mb) + mb->len;
    n++;
  }
  if (n > 1)
    s->d->stats.combined += n - 1;
  return 0;
}

/* Fails co for good: every member waiting now, and every later one, gets
 * status with text (one side alone could otherwise wait until its own
 * deadline, or complete while another member already failed). */
static int coll_fail_all(struct root_job *s, struct coll *co, int status,
                         const char *text) {
  struct pending *p;
  int rc = coll_save(s, co, status, (const uint8_t *)text, strlen(text));
  co->fail_status = status;
  rdzv__round_tl_coll(s, co->name + 1, co->nlen - 1, co->nmembers, co->count,
                      TL_PHASE_FAILED, false);
  while ((p = co->pend) != NULL) {
    co->pend = p->next;
    rdzv__conn_answer_text(p->c, co->type, p->req_id, status, text,
                           strlen(text));
    rdzv__conn_unref(p->c);
    free(p);
  }
  return rc;
}

/* Members disagree on the member count: a collective that can never
 * complete; RDZV_ECOUNT_MISMATCH with both counts for everyone. */
static void coll_mismatch(struct root_job *s, struct coll *co, struct conn *c,
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
    coll_fail_all(s, co, RDZV_ECOUNT_MISMATCH, text);
  rdzv__conn_answer_text(c, co->type, m->req_id, RDZV_ECOUNT_MISMATCH, text,
                         strlen(text));
}

void rdzv__root_collective(struct root_job *s, struct conn *c,
                           const struct rdzv_msg *m) {
  struct coll *co = coll_get(s, m);
  if (co == NULL) {
    rdzv__root_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (co->fail_status != 0) {
    struct rdzv_slice t;
    if (coll_outcome(s, co, &t) < 0) { /* no text kept: the status's */
      t.p = (const uint8_t *)rdzv_strerror(co->fail_status);
      t.n = (uint32_t)strlen((const char *)t.p);
    }
    rdzv__conn_answer_text(c, co->type, m->req_id, co->fail_status,
                           (const char *)t.p, t.n);
    return;
  }
  if (co->count != (uint64_t)m->b) {
    coll_mismatch(s, co, c, m);
    return;
  }
  if (co->done) {
    coll_reply(s, co, c, m->req_id, 0, 0);
    return;
  }
  size_t pos = 0;
  struct rdzv_slice v;
  uint64_t more = 0;
  while (rdzv_items_next(&m->vals, &pos, &v))
    more += sizeof(struct member) + v.n;
  if (rdzv__root_room(s, c, m, more) < 0)
    return;
  bool first = co->nmembers == 0;
  int rc = coll_add_members(s, co, m);
  if (rc < 0) {
    rdzv__root_reply_status(c, m, rc);
    return;
  }
  rdzv__round_tl_coll(s, co->name + 1, co->nlen - 1, co->nmembers, co->count,
                      TL_PHASE_OPEN, first);
  /* One pending reply per child node: its older request is answered
   * "superseded" so only the newest carries the result. (A client may
   * contribute several members on one connection; each gets its reply.) */
  struct pending *p = NULL;
  if (c->role == RDZV_ROLE_NODE)
    for (p = co->pend; p != NULL && p->c != c; p = p->next)
      ;
  if (p != NULL) {
    coll_reply(s, co, c, p->req_id, 0, RDZV_F_SUPERSEDED);
    p->req_id = m->req_id;
  } else if ((p = calloc(1, sizeof(*p))) != NULL) {
    p->c = c;
    p->req_id = m->req_id;
    p->next = co->pend;
    co->pend = p;
    rdzv__conn_ref(c);
  } else {
    rdzv__root_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (co->nmembers >= co->count)
    coll_complete(s, co);
}

/* The ids 0 .. count-1 not among co's members, at most max of them, as a
 * list of u64 items; *n gets how many. Probing each id: this runs only
 * after somebody's deadline. */
static int missing_ids(const struct coll *co, uint64_t max,
                       struct rdzv_buf *ids, uint32_t *n) {
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
static int coll_give_up(struct root_job *s, struct coll *co,
                        const struct rdzv_msg *m, struct rdzv_slice name) {
  struct rdzv_slice why = {(const uint8_t *)"a member gave up at its deadline",
                           32};
  if (m->keys.n > 1)
    rdzv__root_item(&m->keys, 1, &why);
  if (co == NULL && (co = coll_lookup(s, (uint8_t)m->a, name, true, 0)) == NULL)
    return RDZV_ENOMEM;
  if (co->done || co->fail_status != 0)
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
  return coll_fail_all(s, co, RDZV_EDEADLINE, text);
}

/* COLL_STATUS: how many members of a collective have contributed, and
 * the first of those missing; with GIVE_UP, first fail it unless it
 * completed. */
void rdzv__root_coll_status(struct root_job *s, struct conn *c,
                            const struct rdzv_msg *m) {
  struct rdzv_slice name;
  rdzv__root_item(&m->keys, 0, &name);
  struct coll *co = coll_lookup(s, (uint8_t)m->a, name, false, 0);
  if (m->flags & RDZV_F_GIVE_UP) {
    int rc = coll_give_up(s, co, m, name);
    if (rc < 0) {
      rdzv__root_reply_status(c, m, rc);
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
      rdzv__root_reply_status(c, m, RDZV_ENOMEM);
      return;
    }
  }
  r.vals.n = n;
  r.vals.raw = ids.data;
  r.vals.raw_len = ids.len;
  rdzv__conn_reply(c, &r);
  rdzv_buf_free(&ids);
}

/* Frees co; with forget, its outcome record goes too. */
static void coll_free(struct root_job *s, struct coll *co, bool forget) {
  struct member *mb, *mt;
  HASH_ITER (hh, co->members, mb, mt) {
    HASH_DEL(co->members, mb);
    s->coll_bytes -= sizeof(*mb) + mb->len;
    free(mb);
  }
  struct pending *p;
  while ((p = co->pend) != NULL) {
    co->pend = p->next;
    rdzv__conn_unref(p->c);
    free(p);
  }
  HASH_DEL(s->colls, co);
  if (forget &&
      rdzv__state_rec_del(s->st, RDZV_STATE_REC_COLL, co->name, co->nlen) < 0)
    rdzv__log(s->d, 0, "%s '%.*s': its record stays: out of memory",
              rdzv_msg_type_name(co->type), (int)(co->nlen - 1), co->name + 1);
  free(co->name);
  free(co);
}

void rdzv__root_colls_fail_prefix(struct root_job *s, const char *prefix,
                                  int status, const char *text) {
  size_t pl = strlen(prefix);
  struct coll *co, *tmp;
  HASH_ITER (hh, s->colls, co, tmp) {
    if (co->done || co->nlen - 1 < pl || memcmp(co->name + 1, prefix, pl))
      continue;
    for (struct pending *p = co->pend; p != NULL; p = p->next)
      rdzv__conn_answer_text(p->c, co->type, p->req_id, status, text,
                             strlen(text));
    coll_free(s, co, true);
  }
}

void rdzv__root_colls_conn_closed(struct root_job *s, struct conn *c) {
  struct coll *co, *tmp;
  HASH_ITER (hh, s->colls, co, tmp) {
    struct pending **pp = &co->pend;
    while (*pp != NULL) {
      struct pending *p = *pp;
      if (p->c != c) {
        pp = &p->next;
        continue;
      }
      *pp = p->next;
      rdzv__conn_unref(c);
      free(p);
    }
  }
}

void rdzv__root_colls_free(struct root_job *s) {
  struct coll *co, *tmp;
  HASH_ITER (hh, s->colls, co, tmp)
    coll_free(s, co, false);
}
