/* Statistics as one JSON object (jansson): the proof that the tree works.
 * Shape (every number an integer):
 *   {"name", "role", "uptime_ms", "jobs", "connections": {"open", "total",
 *    "rejected"}, "bytes": {"in", "out", "shared", "copied_large",
 *    "interned"},
 *    "frames": {"in", "out"},
 *    "proto_errors", "cache_hits", "coalesced", "combined",
 *    "upstream_reconnects", "parent_restarts", "parent_silent",
 *    "children_silent", "split_frames", "resent", "reattached",
 *    "dedup_hits", "fenced", "fenced_here",
 *    "sessions_resumed", "sessions_lost",
 *    "copies": {"granted", "invalidations_sent", "write_waits",
 *    "lease_waits", "hits", "invalidations_received", "reads_combined"},
 *    "auth": {"secret", "challenged", "accepted", "refused", "no_nonce",
 *    "parent_refused", "peer_refused" (Unix-socket peers of a uid not
 *    allowed)},
 *    "tls": {"on", "handshakes", "failed", "plain_refused", "no_cert"},
 *    with an etcd-backed root: "etcd": {"role", "batches", "txns", "ops",
 *    "stand_downs", "elections_won", "requests", "bytes_out", "bytes_in",
 *    "errors"},
 *    "ops": {"<op>": {"received", "forwarded", "local", "errors"}, ...}} */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "store/daemon/transport/transport.h"

static json_t *op_json(const struct op_stats *o) {
  return json_pack("{s:I,s:I,s:I,s:I}", "received", (json_int_t)o->received,
                   "forwarded", (json_int_t)o->forwarded, "local",
                   (json_int_t)o->local, "errors", (json_int_t)o->errors);
}

const uint64_t rdzv__round_bounds_ms[RDZV_ROUND_BUCKETS] = {
    100, 500, 1000, 5000, 10000, 30000, 60000, 300000, 1800000, UINT64_MAX};

void rdzv__reply_stats(struct conn *c, const struct rdzv_msg *m) {
  char *json = rdzv__stats_json(c->d, c->job);
  size_t n = json != NULL ? strlen(json) : 0;
  /* The text becomes the reply's buffer (written from it, not copied). */
  struct rdzv_blob *b =
      json != NULL ? rdzv__blob_take((uint8_t *)json, (uint32_t)n, n + 1)
                   : NULL;
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, b ? 0 : RDZV_ENOMEM);
  struct rdzv_slice v = {b ? b->data : NULL, (uint32_t)n};
  if (b != NULL) {
    r.vals.n = 1;
    r.vals.v = &v;
  }
  rdzv__conn_reply_shared(c, &r, &b, b ? 1 : 0);
  rdzv__blob_unref(b);
}

char *rdzv__stats_json(const struct daemon *d, const struct job *only) {
  const struct stats *s = &d->stats;
  json_t *ops = json_object();
  for (int t = RDZV_MSG_HELLO; t <= RDZV_MSG_TYPE_MAX; t++)
    if (t != RDZV_MSG_ERROR)
      json_object_set_new(ops, rdzv_msg_type_name(t), op_json(&s->ops[t]));
  int njobs = 0;
  for (const struct job *j = d->jobs; j != NULL; j = j->next)
    if (j->role_data != NULL) /* used by a job operation */
      njobs++;
  json_t *o = json_pack(
      "{s:s,s:s,s:s,s:I,s:i,s:{s:I,s:I,s:I},s:{s:I,s:I},s:{s:I,s:I},"
      "s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
      "name", d->cfg.name, "role",
      d->role->name, "listen",
      d->bound_addr, "uptime_ms",
      (json_int_t)(uv_now(d->loop) - d->start_ms), "jobs", njobs,
      "connections", "open", (json_int_t)s->conns_open, "total",
      (json_int_t)s->conns_total, "rejected", (json_int_t)s->conns_rejected,
      "bytes", "in", (json_int_t)s->bytes_in, "out", (json_int_t)s->bytes_out,
      "frames", "in", (json_int_t)s->frames_in, "out",
      (json_int_t)s->frames_out, "proto_errors", (json_int_t)s->proto_errors,
      "cache_hits", (json_int_t)s->cache_hits, "coalesced",
      (json_int_t)s->coalesced, "combined", (json_int_t)s->combined,
      "upstream_reconnects", (json_int_t)s->upstream_reconnects,
      "parent_restarts", (json_int_t)s->parent_restarts, "parent_silent",
      (json_int_t)s->parent_silent, "children_silent",
      (json_int_t)s->children_silent, "split_frames",
      (json_int_t)s->split_frames, "resent", (json_int_t)s->resent,
      "reattached", (json_int_t)s->reattached, "dedup_hits",
      (json_int_t)s->dedup_hits);
  /* Of bytes.out: written from values' shared buffers, and bytes of
   * values of at least --share-min-bytes copied all the same. */
  json_t *bytes = json_object_get(o, "bytes");
  json_object_set_new(bytes, "shared", json_integer((json_int_t)s->bytes_shared));
  json_object_set_new(bytes, "copied_large",
                      json_integer((json_int_t)s->bytes_copied_large));
  json_object_set_new(bytes, "interned",
                      json_integer((json_int_t)s->bytes_interned));
  json_object_set_new(o, "fenced", json_integer((json_int_t)s->fenced));
  json_object_set_new(o, "returned_home",
                      json_integer((json_int_t)s->returned_home));
  json_object_set_new(o, "fenced_here",
                      json_integer((json_int_t)s->fenced_here));
  json_object_set_new(o, "coll_subtree_flushes",
                      json_integer((json_int_t)s->coll_subtree_flushes));
  json_object_set_new(o, "join_subtree_flushes",
                      json_integer((json_int_t)s->join_subtree_flushes));
  json_object_set_new(o, "sessions_resumed",
                      json_integer((json_int_t)s->sessions_resumed));
  json_object_set_new(o, "health_checks",
                      json_integer((json_int_t)s->health_checks));
  json_object_set_new(o, "health_failed",
                      json_integer((json_int_t)s->health_failed));
  json_object_set_new(o, "quarantine_refused",
                      json_integer((json_int_t)s->quarantine_refused));
  json_object_set_new(o, "sessions_lost",
                      json_integer((json_int_t)s->sessions_lost));
  json_object_set_new(
      o, "copies",
      json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "granted",
                (json_int_t)s->copies_granted, "invalidations_sent",
                (json_int_t)s->invalidations_sent, "write_waits",
                (json_int_t)s->copy_write_waits, "lease_waits",
                (json_int_t)s->copy_lease_waits, "hits",
                (json_int_t)s->copy_hits, "invalidations_received",
                (json_int_t)s->invalidations_received, "reads_combined",
                (json_int_t)s->reads_combined));
  /* Authentication: where the secret comes from ("none": any peer that
   * reaches a port joins), and the hellos challenged, accepted, refused
   * (of which without a nonce), parents refused, and Unix-socket peers
   * refused for their uid (--allow-uids). Never a secret. */
  json_object_set_new(
      o, "auth",
      json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "secret",
                d->cfg.secret_file[0] != '\0'  ? "file"
                : d->cfg.secret_dir[0] != '\0' ? "dir"
                                               : "none",
                "challenged", (json_int_t)s->auth_challenged, "accepted",
                (json_int_t)s->auth_accepted, "refused",
                (json_int_t)s->auth_refused, "no_nonce",
                (json_int_t)s->auth_no_nonce, "parent_refused",
                (json_int_t)s->auth_parent_refused, "peer_refused",
                (json_int_t)s->auth_peer_refused));
  /* TLS (--tls-*): on or not, handshakes done and failed, plain peers
   * refused at the TLS port, daemons refused for coming without a
   * certificate. */
  json_object_set_new(
      o, "tls",
      json_pack("{s:b,s:I,s:I,s:I,s:I}", "on", d->tls != NULL, "handshakes",
                (json_int_t)s->tls_handshakes, "failed",
                (json_int_t)s->tls_failed, "plain_refused",
                (json_int_t)s->tls_plain_refused, "no_cert",
                (json_int_t)s->tls_no_cert));
  if (s->etcd_role != NULL)
    json_object_set_new(
        o, "etcd",
        json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "role",
                  s->etcd_role, "batches", (json_int_t)s->etcd_batches,
                  "txns", (json_int_t)s->etcd_txns, "ops",
                  (json_int_t)s->etcd_ops, "stand_downs",
                  (json_int_t)s->etcd_stand_downs, "elections_won",
                  (json_int_t)s->etcd_elections_won, "requests",
                  (json_int_t)s->etcd_requests, "bytes_out",
                  (json_int_t)s->etcd_bytes_out, "bytes_in",
                  (json_int_t)s->etcd_bytes_in, "errors",
                  (json_int_t)s->etcd_errors));
  if (o == NULL) {
    json_decref(ops);
    return NULL;
  }
  json_object_set_new(o, "ops", ops);
  json_t *anc = json_array();
  for (uint32_t i = 0; i < d->nancestors; i++)
    json_array_append_new(anc, json_string(d->ancestors[i]));
  json_object_set_new(o, "ancestors", anc);
  json_object_set_new(o, "probes",
                      json_pack("{s:I,s:I}", "answered",
                                (json_int_t)s->probes_answered, "learned",
                                (json_int_t)s->probes_learned));
  /* The root's rendezvous generations: how long the completed ones took
   * (the histogram's buckets by upper bound, ms), and the failed ones. */
  json_t *hist = json_array();
  for (int i = 0; i < RDZV_ROUND_BUCKETS; i++)
    json_array_append_new(hist, json_integer((json_int_t)s->round_ms_hist[i]));
  json_object_set_new(
      o, "generations",
      json_pack("{s:I,s:I,s:I,s:o}", "completed",
                (json_int_t)s->rounds_completed, "failed",
                (json_int_t)s->rounds_failed, "ms_sum",
                (json_int_t)s->round_ms_sum, "ms_buckets", hist));
  if (d->role->status != NULL)
    d->role->status((struct daemon *)d, only, o);
  char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  return text;
}

void rdzv__check_add(struct rdzv_checks *cs, const char *name, bool ok,
                     const char *fmt, ...) {
  if (cs->n >= RDZV_MAX_CHECKS)
    return;
  struct rdzv_check *c = &cs->c[cs->n++];
  c->name = name;
  c->ok = ok;
  c->why[0] = '\0';
  if (!ok && fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
    /* Peers' bytes (a job id, a root's text) cut anywhere: what is not
     * printable ASCII is '?', so /readyz and /health stay valid UTF-8 and
     * JSON. */
    for (char *p = c->why; *p != '\0'; p++)
      if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
        *p = '?';
  }
}
