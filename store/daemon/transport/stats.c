/* Statistics as one JSON object (jansson): the proof that the tree works.
 * Shape (every number an integer):
 *   {"name", "role", "listen", "uptime_ms", "jobs",
 *    then the counters of transport.h's RDZV_STATS_COUNTERS, in their
 *    order, each group ("connections", "bytes", "frames", "copies",
 *    "auth" led by "secret", "tls" led by "on", "etcd" led by "role" and
 *    only with an etcd-backed root, "probes") an object, the rest at the
 *    top level,
 *    "ops": {"<op>": {"received", "forwarded", "local", "errors"}, ...},
 *    "ancestors": [...], "generations": {"completed", "failed", "ms_sum",
 *    "ms_buckets": [...]}, then what the role adds} */
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

/* The object of group g in o (created where first asked for, with what
 * leads it: auth's "secret", tls's "on", etcd's "role"); o itself for
 * "top"; NULL for a group this daemon has not (etcd without etcd). */
static json_t *group_of(const struct daemon *d, json_t *o, const char *g) {
  if (strcmp(g, "top") == 0)
    return o;
  json_t *x = json_object_get(o, g);
  if (x != NULL)
    return x;
  if (strcmp(g, "etcd") == 0 && d->stats.etcd_role == NULL)
    return NULL;
  x = json_object();
  if (x == NULL || json_object_set_new(o, g, x) < 0)
    return NULL;
  if (strcmp(g, "auth") == 0)
    /* Where the secret comes from ("none": any peer that reaches a port
     * joins). Never a secret. */
    json_object_set_new(x, "secret",
                        json_string(d->cfg.secret_file[0] != '\0'  ? "file"
                                    : d->cfg.secret_dir[0] != '\0' ? "dir"
                                                                   : "none"));
  else if (strcmp(g, "tls") == 0)
    json_object_set_new(x, "on", json_boolean(d->tls != NULL));
  else if (strcmp(g, "etcd") == 0)
    json_object_set_new(x, "role", json_string(d->stats.etcd_role));
  return x;
}

/* Counter v as key of group g in o (see group_of). */
static void add_counter(const struct daemon *d, json_t *o, const char *g,
                        const char *key, uint64_t v) {
  json_t *x = group_of(d, o, g);
  if (x != NULL)
    json_object_set_new(x, key, json_integer((json_int_t)v));
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
  json_t *o =
      json_pack("{s:s,s:s,s:s,s:I,s:i}", "name", d->cfg.name, "role",
                d->role->name, "listen", d->bound_addr, "uptime_ms",
                (json_int_t)(uv_now(d->loop) - d->start_ms), "jobs", njobs);
  if (o == NULL) {
    json_decref(ops);
    return NULL;
  }
  /* The counters, each in its group (transport.h's RDZV_STATS_COUNTERS):
   * a group appears where its first counter is listed. */
#define RDZV_STATS_JSON(group, key, field)                                     \
  add_counter(d, o, #group, #key, s->field);
  RDZV_STATS_COUNTERS(RDZV_STATS_JSON)
#undef RDZV_STATS_JSON
  json_object_set_new(o, "ops", ops);
  json_t *anc = json_array();
  for (uint32_t i = 0; i < d->nancestors; i++)
    json_array_append_new(anc, json_string(d->ancestors[i]));
  json_object_set_new(o, "ancestors", anc);
  /* The root's rendezvous generations: how long the completed ones took
   * (the histogram's buckets by upper bound, ms), and the failed ones. */
  json_t *hist = json_array();
  for (int i = 0; i < RDZV_ROUND_BUCKETS; i++)
    json_array_append_new(hist, json_integer((json_int_t)s->round_ms_hist[i]));
  json_object_set_new(o, "generations",
                      json_pack("{s:I,s:I,s:I,s:o}", "completed",
                                (json_int_t)s->rounds_completed, "failed",
                                (json_int_t)s->rounds_failed, "ms_sum",
                                (json_int_t)s->round_ms_sum, "ms_buckets",
                                hist));
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
