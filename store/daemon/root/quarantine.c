/* Hosts quarantined for a job, at the root. A host is quarantined when its
 * node's health gate failed it (its join records carry the reason,
 * rendezvous/join_wire.h), or when an operator writes its key; it stays
 * so until the key is deleted (`rdzvctl quarantine clear HOST`):
 *
 *   key   "rdzv-quarantine/<host>" in the job's keys (a mutable key: kept
 *         by an etcd-backed root like any other, listed in the status)
 *   value the reason, then " (round R generation G)" when a join set it
 *
 * Every join record of a quarantined host is refused (RDZV_EQUARANTINED),
 * whatever its role; its host's place in the last world is released, so a
 * spare (or a new host) takes it and the generation does not wait for it.
 * Owns nothing but those keys; uses round_members.c for the world. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "rdzv/error.h"
#include "store/daemon/root/round.h"

#define QKEY_MAX 300 /* the prefix and a host of at most 255 bytes */

static int qkey(const struct rdzv_join_rec *j, char *key, size_t n) {
  return snprintf(key, n, RDZV_QUARANTINE_PREFIX "%.*s", (int)j->host_len,
                  j->host);
}

/* Whether host j is quarantined; if so *v is the reason (the state's
 * bytes: valid until the key changes). */
static bool quarantined(struct root_job *s, const struct rdzv_join_rec *j,
                        struct rdzv_slice *v) {
  char key[QKEY_MAX];
  int kl = qkey(j, key, sizeof(key));
  struct rdzv_state_val e = {NULL, 0, false, NULL};
  if (rdzv__state_get(s->st, (const uint8_t *)key, (uint32_t)kl, &e) < 0)
    return false;
  v->p = e.p;
  v->n = e.n;
  return true;
}

/* The place of host j in r's last world is released: the generation does
 * not hold it for the host (a spare or a new host takes it). */
static void release_place(struct round *r, const struct rdzv_join_full *j) {
  struct jmember probe;
  memset(&probe, 0, sizeof(probe));
  probe.j = *j;
  struct world_host *w = (struct world_host *)rdzv__round_world_find(r, &probe);
  if (w == NULL || w->released)
    return;
  w->released = true;
  if (r->state == ROUND_OPEN) {
    r->held -=
        r->held > (uint32_t)w->local_size ? (uint32_t)w->local_size : r->held;
    rdzv__round_progress(r);
  }
}

/* Quarantines host j (unhealthy, with its node's reason). */
static void quarantine_put(struct round *r, const struct rdzv_join_full *j) {
  char key[QKEY_MAX], val[512];
  qkey(&j->rec, key, sizeof(key));
  int vl =
      r->gen > 0
          ? snprintf(val, sizeof(val), "%.*s (round %s generation %" PRId64 ")",
                     (int)j->unhealthy_len, j->unhealthy, r->name, r->gen)
          : snprintf(val, sizeof(val), "%.*s (round %s)", (int)j->unhealthy_len,
                     j->unhealthy, r->name);
  if (vl < 0 || (size_t)vl >= sizeof(val))
    vl = (int)strlen(val);
  int rc = rdzv__root_set(r->s, key, (const uint8_t *)val, (uint32_t)vl, false);
  rdzv__log_job(r->s->d, 0, r->s->job_id,
                "round %s: host %.*s quarantined: %.*s%s%s", r->name,
                (int)j->rec.host_len, j->rec.host, (int)j->unhealthy_len,
                j->unhealthy, rc < 0 ? "; cannot keep it: " : "",
                rc < 0 ? rdzv_strerror(rc) : "");
}

int rdzv__quarantine_filter(struct round *r, struct conn *c,
                            const struct rdzv_msg *m, struct rdzv_msg *out,
                            struct rdzv_buf *kept) {
  struct rdzv_buf errs = {0};
  uint32_t nerr = 0, nkept = 0;
  char text[700] = "";
  struct rdzv_slice v;
  size_t pos = 0;
  rdzv_items_next(&m->vals, &pos, &v); /* params */
  size_t first = pos;
  /* Most joins pass: nothing is copied until a record is refused. */
  bool any = false;
  while (!any && rdzv_items_next(&m->vals, &pos, &v)) {
    struct rdzv_join_full j;
    struct rdzv_slice why;
    any = rdzv_join_rec_decode(v.p, v.n, &j) == 0 &&
          (j.unhealthy_len > 0 || quarantined(r->s, &j.rec, &why));
  }
  if (!any)
    return 0;
  pos = 0;
  rdzv_items_next(&m->vals, &pos, &v);
  rdzv_items_append(kept, v.p, v.n); /* the params */
  pos = first;
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct rdzv_join_full j;
    struct rdzv_slice why = {NULL, 0};
    if (rdzv_join_rec_decode(v.p, v.n, &j) < 0) {
      rdzv_items_append(kept, v.p, v.n); /* refused as malformed later */
      nkept++;
      continue;
    }
    bool was = quarantined(r->s, &j.rec, &why);
    if (!was && j.unhealthy_len == 0) {
      rdzv_items_append(kept, v.p, v.n);
      nkept++;
      continue;
    }
    if (!was) {
      quarantine_put(r, &j);
      why.p = j.unhealthy;
      why.n = j.unhealthy_len;
    }
    release_place(r, &j);
    r->s->d->stats.quarantine_refused++;
    uint8_t item[RDZV_JOIN_ERROR_BYTES];
    rdzv_join_error_encode(j.rec.claim, RDZV_EQUARANTINED, item);
    rdzv_items_append(&errs, item, sizeof(item));
    nerr++;
    if (text[0] == '\0')
      snprintf(text, sizeof(text),
               "host %.*s is quarantined for this job: %.*s (`rdzvctl "
               "quarantine clear %.*s` lets it join again)",
               (int)j.rec.host_len, j.rec.host, (int)why.n, (const char *)why.p,
               (int)j.rec.host_len, j.rec.host);
  }
  if (nkept == 0) {
    /* A node gets its refusals item by item under status 0: a failed
     * request would fail every join it holds for the round, the
     * healthy hosts' too. */
    rdzv__round_reply(c, m->req_id,
                      c->role == RDZV_ROLE_NODE ? 0 : RDZV_EQUARANTINED, 0,
                      &errs, nerr, text, 0, 0);
    rdzv_buf_free(&errs);
    rdzv_buf_free(kept);
    return 1;
  }
  /* Some records of the request pass (a node's, of several hosts): the
   * refusals go now, the rest as a request of their own. */
  rdzv__round_reply(c, m->req_id, 0, RDZV_F_PARTIAL, &errs, nerr, text, 0, 0);
  rdzv_buf_free(&errs);
  *out = *m;
  out->vals.n = nkept + 1;
  out->vals.raw = kept->data;
  out->vals.raw_len = kept->len;
  return 0;
}

/* ---- listing ----------------------------------------------------------------- */

struct qlist {
  json_t *arr;
  uint32_t n;
  char *text; /* describe: where to write, and how much is left */
  size_t off, cap;
};

#define QLIST_MAX 64    /* hosts listed in the status; the rest counted */
#define QDESCRIBE_MAX 4 /* hosts named in a deadline's reason */

static json_t *printable(const uint8_t *p, uint32_t n) {
  char buf[600];
  uint32_t k = 0;
  for (uint32_t i = 0; i < n && k + 1 < sizeof(buf); i++)
    buf[k++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
  buf[k] = '\0';
  return json_string(buf);
}

static int list_one(void *arg, const uint8_t *k, uint32_t klen,
                    const struct rdzv_state_val *v) {
  struct qlist *q = arg;
  uint32_t pl = (uint32_t)strlen(RDZV_QUARANTINE_PREFIX);
  if (q->arr != NULL && q->n < QLIST_MAX)
    json_array_append_new(q->arr, json_pack("{s:o,s:o}", "host",
                                            printable(k + pl, klen - pl),
                                            "reason", printable(v->p, v->n)));
  if (q->text != NULL && q->n < QDESCRIBE_MAX && q->off < q->cap)
    q->off += (size_t)snprintf(
        q->text + q->off, q->cap - q->off, "; host %.*s quarantined: %.*s",
        (int)(klen - pl), k + pl, (int)v->n, (const char *)v->p);
  q->n++;
  return RDZV_STATE_KEEP;
}

void rdzv__quarantine_json(struct root_job *s, json_t *o) {
  struct qlist q = {json_array(), 0, NULL, 0, 0};
  if (q.arr == NULL)
    return;
  rdzv__state_scan(s->st, (const uint8_t *)RDZV_QUARANTINE_PREFIX,
                   (uint32_t)strlen(RDZV_QUARANTINE_PREFIX), list_one, &q);
  json_object_set_new(o, "quarantined", q.arr);
  json_object_set_new(o, "quarantined_hosts", json_integer(q.n));
}

void rdzv__quarantine_describe(struct root_job *s, char *out, size_t n) {
  size_t off = strlen(out);
  struct qlist q = {NULL, 0, out, off, n};
  if (off >= n)
    return;
  rdzv__state_scan(s->st, (const uint8_t *)RDZV_QUARANTINE_PREFIX,
                   (uint32_t)strlen(RDZV_QUARANTINE_PREFIX), list_one, &q);
  if (q.n > QDESCRIBE_MAX && q.off < n)
    snprintf(out + q.off, n - q.off, "; %u more hosts quarantined",
             q.n - QDESCRIBE_MAX);
}
