/* A rendezvous generation's timeline at the root (round.h): when it
 * opened, how many ranks and hosts had joined over time (a point at each
 * 16th of its maximum), the last 10 to join, what it still lacks, how it
 * ended; the earlier generations in short. For operators: the root's
 * /status and stats (`rdzvctl rounds`). Also counts the generations in
 * the daemon's statistics (the round-duration histogram of /metrics).
 * Owns nothing but the fixed-size struct timeline inside struct round. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <jansson.h>

#include "store/daemon/root/round.h"

static uint32_t since(const struct round *r, uint64_t now) {
  uint64_t d = now > r->opened_ms ? now - r->opened_ms : 0;
  return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

void rdzv__round_tl_join(struct round *r, const struct jmember *m) {
  struct timeline *tl = &r->tl;
  uint32_t ms = since(r, rdzv__now_ms(r->s->d));
  struct tl_join *j = &tl->last[tl->nlast++ % TL_LAST];
  snprintf(j->host, sizeof(j->host), "%.*s",
           (int)(m->j.rec.host_len < 63 ? m->j.rec.host_len : 63),
           (const char *)m->j.rec.host);
  j->local_rank = m->j.rec.local_rank;
  j->ms = ms;
  /* A point each time the ranks reach the next 16th of the maximum. */
  uint64_t max = r->params.max_size > 0 ? r->params.max_size : 1;
  if (tl->nsamples < TL_SAMPLES &&
      (uint64_t)r->n * TL_SAMPLES >= (tl->nsamples + 1) * max) {
    tl->samples[tl->nsamples].ms = ms;
    tl->samples[tl->nsamples].ranks = r->n;
    tl->samples[tl->nsamples].hosts = HASH_CNT(hh_host, r->by_host);
    tl->nsamples++;
  }
}

/* Splits "rdzv/ROUND/gGEN/REST" into the round (*rl bytes at *rp), the
 * generation and REST (*kl bytes at *kp). false when name is not so. */
static bool phase_name(const uint8_t *name, uint32_t nlen, const uint8_t **rp,
                       uint32_t *rl, int64_t *gen, const uint8_t **kp,
                       uint32_t *kl) {
  if (nlen < 9 || memcmp(name, "rdzv/", 5) != 0)
    return false;
  uint32_t i = 5, r0 = 5;
  while (i < nlen && name[i] != '/')
    i++;
  if (i == r0 || i + 3 > nlen || name[i + 1] != 'g')
    return false;
  *rp = name + r0;
  *rl = i - r0;
  int64_t g = 0;
  uint32_t j = i + 2;
  if (j + 1 < nlen && name[j] == '0' && name[j + 1] != '/')
    return false; /* "g01": not how the library writes a generation */
  for (; j < nlen && name[j] >= '0' && name[j] <= '9' && g < INT64_MAX / 10;
       j++)
    g = g * 10 + (name[j] - '0');
  if (j == i + 2 || j >= nlen || name[j] != '/')
    return false;
  *gen = g;
  *kp = name + j + 1;
  *kl = nlen - j - 1;
  return true;
}

/* FNV-1a, 64 bits. */
static uint64_t fnv1a(const uint8_t *p, uint32_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void rdzv__round_tl_coll(struct root_job *s, const uint8_t *name, uint32_t nlen,
                         uint64_t arrived, uint64_t count,
                         enum tl_phase_state state, bool first) {
  const uint8_t *rp, *kp;
  uint32_t rl, kl;
  int64_t gen;
  if (!phase_name(name, nlen, &rp, &rl, &gen, &kp, &kl))
    return;
  const char *kind;
  uint32_t skip;
  if (kl > 4 && memcmp(kp, "uid/", 4) == 0) {
    kind = "ids";
    skip = 4;
  } else if (kl > 8 && memcmp(kp, "barrier/", 8) == 0) {
    kind = "barrier";
    skip = 8;
  } else {
    return;
  }
  struct round *r = NULL;
  HASH_FIND(hh, s->rounds, rp, rl, r);
  if (r == NULL || r->gen != gen)
    return;
  struct timeline *tl = &r->tl;
  const uint8_t *np = kp + skip;
  uint32_t full = kl - skip, nl = full < 55 ? full : 55;
  uint64_t id = fnv1a(np, full);
  struct tl_phase *ph = NULL;
  for (uint32_t i = 0; i < tl->nphases && ph == NULL; i++)
    if (tl->phases[i].id == id && tl->phases[i].id_len == full &&
        strcmp(tl->phases[i].kind, kind) == 0)
      ph = &tl->phases[i];
  uint32_t ms = since(r, rdzv__now_ms(r->s->d));
  if (ph == NULL) {
    if (tl->nphases >= TL_PHASES) {
      if (first)
        tl->phases_left_out++;
      return;
    }
    ph = &tl->phases[tl->nphases++];
    memset(ph, 0, sizeof(*ph));
    snprintf(ph->kind, sizeof(ph->kind), "%s", kind);
    for (uint32_t i = 0; i < nl; i++)
      ph->name[i] = np[i] >= 0x20 && np[i] < 0x7f ? (char)np[i] : '?';
    ph->name[nl] = '\0';
    ph->id = id;
    ph->id_len = full;
    ph->first_ms = ms;
  }
  if (ph->state != TL_PHASE_OPEN)
    return; /* its end is kept */
  if (arrived > ph->arrived) {
    ph->arrived = arrived;
    ph->last_ms = ms;
  }
  ph->count = count;
  ph->state = state;
  if (state != TL_PHASE_OPEN)
    ph->ended_ms = ms;
}

void rdzv__round_tl_end(struct round *r) {
  struct stats *s = &r->s->d->stats;
  r->tl.ended_ms = rdzv__now_ms(r->s->d);
  uint32_t ms = since(r, r->tl.ended_ms);
  if (r->state == ROUND_FAILED) {
    s->rounds_failed++;
    return;
  }
  s->rounds_completed++;
  s->round_ms_sum += ms;
  for (int i = 0; i < RDZV_ROUND_BUCKETS; i++)
    if (ms <= rdzv__round_bounds_ms[i]) {
      s->round_ms_hist[i]++;
      break;
    }
}

void rdzv__round_tl_open(struct round *r) {
  struct timeline *tl = &r->tl;
  if (r->gen > 0) {
    struct tl_past *p = &tl->past[tl->npast++ % TL_HISTORY];
    p->gen = r->gen;
    p->outcome = r->state;
    p->ms = since(r, tl->ended_ms ? tl->ended_ms : rdzv__now_ms(r->s->d));
    p->ranks = r->n;
    snprintf(p->reason, sizeof(p->reason), "%.159s",
             r->state == ROUND_FAILED ? r->reason : "");
  }
  uint32_t npast = tl->npast;
  struct tl_past past[TL_HISTORY];
  memcpy(past, tl->past, sizeof(past));
  memset(tl, 0, sizeof(*tl));
  memcpy(tl->past, past, sizeof(past));
  tl->npast = npast;
}

/* A JSON string of s with each byte that is not printable ASCII as '?'
 * (host names and reasons carry peers' bytes; JSON wants UTF-8). */
static json_t *ascii(const char *s) {
  char buf[1100];
  size_t i = 0;
  for (; s[i] != '\0' && i + 1 < sizeof(buf); i++)
    buf[i] =
        (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
  buf[i] = '\0';
  return json_string(buf);
}

static const char *state_name(enum round_state s) {
  return s == ROUND_OPEN ? "open" : s == ROUND_DONE ? "complete" : "failed";
}

json_t *rdzv__round_tl_json(struct round *r, uint64_t now) {
  const struct timeline *tl = &r->tl;
  bool open = r->state == ROUND_OPEN;
  uint32_t elapsed = since(r, open || tl->ended_ms == 0 ? now : tl->ended_ms);
  json_t *o = json_pack(
      "{s:o,s:I,s:s,s:I,s:I,s:I,s:I,s:I}", "round", ascii(r->name),
      "generation", (json_int_t)r->gen, "state", state_name(r->state),
      "opened_ms_ago", (json_int_t)since(r, now), "elapsed_ms",
      (json_int_t)elapsed, "ranks", (json_int_t)(r->n - r->nspare_all), "hosts",
      (json_int_t)HASH_CNT(hh_host, r->by_host), "max",
      (json_int_t)r->params.max_size);
  if (o == NULL)
    return NULL;
  json_object_set_new(o, "min", json_integer(r->params.min_size));
  if (open)
    json_object_set_new(o, "spare_ranks", json_integer(r->nspare));
  rdzv__round_members_json(r, o);
  json_t *pts = json_array();
  for (uint32_t i = 0; i < tl->nsamples; i++)
    json_array_append_new(
        pts, json_pack("{s:I,s:I,s:I}", "ms", (json_int_t)tl->samples[i].ms,
                       "ranks", (json_int_t)tl->samples[i].ranks, "hosts",
                       (json_int_t)tl->samples[i].hosts));
  json_object_set_new(o, "joined", pts);
  json_t *last = json_array();
  uint32_t k = tl->nlast < TL_LAST ? tl->nlast : TL_LAST;
  for (uint32_t i = 0; i < k; i++) { /* the latest first */
    const struct tl_join *j = &tl->last[(tl->nlast - 1 - i) % TL_LAST];
    json_array_append_new(
        last, json_pack("{s:o,s:i,s:I}", "host", ascii(j->host), "local_rank",
                        j->local_rank, "ms", (json_int_t)j->ms));
  }
  json_object_set_new(o, "last_joined", last);
  static const char *const pstate[] = {"open", "complete", "failed"};
  json_t *phases = json_array();
  for (uint32_t i = 0; i < tl->nphases; i++) {
    const struct tl_phase *ph = &tl->phases[i];
    json_t *e = json_pack(
        "{s:s,s:o,s:s,s:I,s:I,s:I,s:I}", "kind", ph->kind, "name",
        ascii(ph->name), "state", pstate[ph->state], "arrived",
        (json_int_t)ph->arrived, "count", (json_int_t)ph->count, "first_ms",
        (json_int_t)ph->first_ms, "last_ms", (json_int_t)ph->last_ms);
    if (e != NULL && ph->state != TL_PHASE_OPEN)
      json_object_set_new(e, "ended_ms", json_integer(ph->ended_ms));
    json_array_append_new(phases, e);
  }
  json_object_set_new(o, "phases", phases);
  if (tl->phases_left_out > 0)
    json_object_set_new(o, "phases_left_out",
                        json_integer(tl->phases_left_out));
  if (open) {
    char why[1024];
    rdzv__round_describe_missing(r, why, sizeof(why));
    json_object_set_new(o, "missing", ascii(why));
  } else if (r->state == ROUND_FAILED && r->gen > 0) {
    json_object_set_new(o, "reason", ascii(r->reason));
  }
  json_t *past = json_array();
  uint32_t np = tl->npast < TL_HISTORY ? tl->npast : TL_HISTORY;
  for (uint32_t i = 0; i < np; i++) {
    const struct tl_past *p = &tl->past[(tl->npast - 1 - i) % TL_HISTORY];
    json_t *e = json_pack("{s:I,s:s,s:I,s:I}", "generation", (json_int_t)p->gen,
                          "state", state_name(p->outcome), "ms",
                          (json_int_t)p->ms, "ranks", (json_int_t)p->ranks);
    if (e != NULL && p->reason[0] != '\0')
      json_object_set_new(e, "reason", ascii(p->reason));
    json_array_append_new(past, e);
  }
  json_object_set_new(o, "earlier", past);
  return o;
}

/* Rounds listed in one status object at most (a root serving many jobs). */
#define STATUS_MAX_ROUNDS 256

void rdzv__root_status(struct daemon *d, const struct job *only, void *out) {
  json_t *o = out;
  json_t *jobs = json_object();
  uint64_t now = rdzv__now_ms(d);
  uint32_t listed = 0, left = 0;
  for (const struct job *j = d->jobs; j != NULL; j = j->next) {
    struct root_job *s = j->role_data;
    if (s == NULL || s->rounds == NULL || (only != NULL && j != only))
      continue;
    json_t *rounds = json_object();
    struct round *r, *t;
    HASH_ITER (hh, s->rounds, r, t) {
      if (listed >= STATUS_MAX_ROUNDS) {
        left++;
        continue;
      }
      json_t *tl = rdzv__round_tl_json(r, now);
      if (tl != NULL) {
        json_object_set(rounds, json_string_value(json_object_get(tl, "round")),
                        tl);
        json_decref(tl);
        listed++;
      }
    }
    json_t *id = ascii(j->id);
    if (id != NULL)
      json_object_set_new(jobs, json_string_value(id), rounds);
    else
      json_decref(rounds);
    json_decref(id);
  }
  json_object_set_new(o, "rounds", jobs);
  if (left > 0)
    json_object_set_new(o, "rounds_not_listed", json_integer(left));
  /* Each job's quarantined hosts (only jobs that have some). */
  json_t *quar = json_object();
  for (const struct job *j = d->jobs; j != NULL && quar != NULL; j = j->next) {
    struct root_job *s = j->role_data;
    if (s == NULL || (only != NULL && j != only))
      continue;
    json_t *q = json_object();
    json_t *id = ascii(j->id);
    if (q != NULL && id != NULL) {
      rdzv__quarantine_json(s, q);
      if (json_integer_value(json_object_get(q, "quarantined_hosts")) > 0)
        json_object_set(quar, json_string_value(id), q);
    }
    json_decref(q);
    json_decref(id);
  }
  if (quar != NULL)
    json_object_set_new(o, "quarantine", quar);
}
