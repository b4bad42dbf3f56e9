/* Rendezvous sessions at a node (node_join_int.h; node_join.c's opening
 * comment says the rules): joins of completed members sent again (a
 * rank resuming, a child node re-sending after it reattached), aborts and
 * leaves passed up (a lost daemon's stale aborts refused, RDZV_EFENCED),
 * lost connections and their --session-grace-ms, a rank whose process is
 * gone, the parent restarted or lost. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "rendezvous/join_wire.h"
#include "rendezvous/members.h"
#include "store/daemon/node/node_int.h"
#include "store/daemon/node/node_join_int.h"

/* ---- sessions: members sent again ------------------------------------------- */

struct resume { /* a re-send in flight to the parent */
  struct node_job *nj;
  struct lreq *l;
  char round[128];
  int64_t gen;
  struct rdzv_buf recs; /* the records sent (items) */
};

struct claim_rank {
  UT_hash_handle hh;
  uint64_t claim;
  int32_t rank, local_rank;
};

/* The root answered a re-send: only now, when it has accepted that
 * generation, are the members bound here (a refused or bogus one changes
 * nothing of this node's sessions). */
static void on_resume_reply(struct daemon *d, const struct rdzv_msg *r,
                            void *arg) {
  struct resume *rs = arg;
  struct conn *c = rs->l->c;
  struct njround *jr = r->status == RDZV_ECANCELED
                           ? NULL /* the job is ending */
                           : rdzv__nj_jround_find(rs->nj, rs->round);
  if (jr != NULL && r->status == 0 && r->a == rs->gen &&
      rs->gen >= jr->done_gen && rdzv__conn_alive(c)) {
    rdzv__nj_binds_for_gen(jr, rs->gen);
    struct claim_rank *ranks = NULL, *cr, *ct;
    struct rdzv_slice v;
    size_t pos = 0;
    while (rdzv_items_next(&r->vals, &pos, &v)) {
      uint64_t claim;
      struct rdzv_assignment a;
      if (rdzv_join_assign_decode(v.p, v.n, &claim, &a) < 0 ||
          (cr = calloc(1, sizeof(*cr))) == NULL)
        continue;
      cr->claim = claim;
      cr->rank = a.rank;
      cr->local_rank = a.local_rank;
      HASH_ADD(hh, ranks, claim, sizeof(cr->claim), cr);
    }
    struct rdzv_items it = {0, NULL, rs->recs.data, rs->recs.len};
    struct joined *jn = NULL;
    pos = 0;
    while (rdzv_items_next(&it, &pos, &v)) {
      struct rdzv_join_full j;
      if (rdzv_join_rec_decode(v.p, v.n, &j) < 0)
        continue;
      cr = NULL;
      HASH_FIND(hh, ranks, &j.rec.claim, sizeof(uint64_t), cr);
      struct rdzv_assignment a = {.rank = cr ? cr->rank : -1,
                                  .local_rank = cr ? cr->local_rank : -1};
      if (jn == NULL)
        jn = rdzv__nj_mark_joined(jr, c, rs->gen, j.rec.claim, cr ? &a : NULL,
                                  &j);
      if (jn != NULL)
        (void)rdzv__nj_bind_claim(jr, j.rec.claim, jn, a.rank, v.p, v.n);
    }
    HASH_ITER (hh, ranks, cr, ct) {
      HASH_DEL(ranks, cr);
      free(cr);
    }
    if (rs->gen > jr->last_gen)
      jr->last_gen = rs->gen;
    if (c->role != RDZV_ROLE_NODE) {
      d->stats.sessions_resumed++;
      rdzv__log(d, 2,
                "round %s generation %" PRId64 ": rank %d (process "
                "%s) resumed its session",
                jr->name, rs->gen, jn ? jn->rank : -1, c->name);
    }
  }
  rdzv__node_lreq_answer(rs->l, RDZV_MSG_JOIN, r);
  rdzv_buf_free(&rs->recs);
  free(rs);
}

/* Members of generation m->a sent again: a rank resuming its session (its
 * own record), or a child node after it reconnected (its subtree's). Not
 * combined: the root binds them to this path if that generation still
 * stands, else refuses (RDZV_EABORTED); it never opens a new one. When
 * the root accepts, they are bound to c here too (on_resume_reply), so
 * that this node's own losses and reconnections account for them. Those
 * a child node may not take (a live rank's own connection holds them) are
 * left out; a re-send of nothing but those is refused (RDZV_EFENCED), and
 * one with no record this node can read, at once (RDZV_EPROTO: the root
 * would drop this node's connection for it). */
void rdzv__nj_resume_join(struct node_job *nj, struct njround *jr,
                          struct conn *c, const struct rdzv_msg *m) {
  struct rdzv_slice v, params = {NULL, 0};
  struct rdzv_buf keep = {0}, recs = {0};
  uint32_t nkeep = 0, nfenced = 0;
  size_t pos = 0;
  if (jr->max_size == 0 && jr->npending == 0) {
    /* A node that has not seen this round's joins (it restarted): the
     * params of the re-send are the round's. */
    struct rdzv_join_params pp;
    struct rdzv_slice pv;
    if (rdzv_items_get(&m->vals, 0, &pv) == 0 &&
        rdzv_join_params_decode(pv.p, pv.n, &pp) == 0) {
      memcpy(jr->params, pv.p, pv.n);
      jr->params_len = pv.n;
      jr->max_size = pp.max_size;
    }
  }
  rdzv_items_next(&m->vals, &pos, &params);
  rdzv_items_append(&keep, params.p, params.n);
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct rdzv_join_full j;
    if (rdzv_join_rec_decode(v.p, v.n, &j) < 0)
      continue;
    struct cbind *b = NULL;
    if (m->a == jr->done_gen)
      HASH_FIND(hh, jr->binds, &j.rec.claim, sizeof(uint64_t), b);
    if (b != NULL && c->role == RDZV_ROLE_NODE && b->jn != NULL &&
        b->jn->c != c && rdzv__nj_live_rank(b->jn)) {
      nfenced++; /* a live rank's own connection holds it: stale */
      continue;
    }
    rdzv_items_append(&keep, v.p, v.n);
    rdzv_items_append(&recs, v.p, v.n);
    nkeep++;
  }
  if (nkeep == 0) {
    char text[600];
    int st = nfenced > 0 ? RDZV_EFENCED : RDZV_EPROTO;
    if (nfenced > 0) {
      nj->d->stats.fenced++;
      snprintf(text, sizeof(text),
               "node %s: the %u members of round %s "
               "generation %" PRId64 " that %s sent again are held by live "
               "ranks here: a stale re-send, refused",
               nj->d->cfg.name, nfenced, jr->name, m->a, c->name);
      rdzv__log_event(nj->d, "%s", text);
    } else {
      snprintf(text, sizeof(text),
               "node %s: a re-send of round %s "
               "generation %" PRId64 " with no readable join record",
               nj->d->cfg.name, jr->name, m->a);
    }
    rdzv__conn_reply_text(c, m, st, text);
    rdzv_buf_free(&keep);
    rdzv_buf_free(&recs);
    return;
  }
  struct resume *rs = calloc(1, sizeof(*rs));
  struct lreq *l = rs ? rdzv__node_lreq_new(c, m->req_id) : NULL;
  if (l == NULL) {
    free(rs);
    rdzv_buf_free(&keep);
    rdzv_buf_free(&recs);
    rdzv__node_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  rs->nj = nj;
  rs->l = l;
  rs->gen = m->a;
  rs->recs = recs;
  snprintf(rs->round, sizeof(rs->round), "%s", jr->name);
  struct rdzv_msg f = *m;
  f.vals.n = nkeep + 1;
  f.vals.v = NULL;
  f.vals.raw = keep.data;
  f.vals.raw_len = keep.len;
  int rc = rdzv__upstream_send(nj->up, &f, on_resume_reply, rs);
  rdzv_buf_free(&keep);
  if (rc < 0) {
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, rc);
    on_resume_reply(nj->d, &r, rs);
  }
}

/* An abort of generation gen (0: the pending one) of round (n bytes) went
 * up: the collectives of the round that this node holds follow it at
 * once, and those of generations up to gen no longer wait for members
 * (their members hear of the abort from the root, not after
 * --flush-max-ms). */
static void abort_passed(struct node_job *nj, const uint8_t *round, size_t n,
                         int64_t gen) {
  struct njround *jr = NULL;
  HASH_FIND(hh, nj->jrounds, round, n, jr);
  if (jr != NULL && gen > jr->aborted_gen)
    jr->aborted_gen = gen;
  rdzv__node_colls_flush_round(nj, round, n);
}

/* ABORT (or, with RDZV_F_LEAVE, a leave) of generation gen of round to
 * the parent. claim: a leaving rank's (b). claims (nclaims u64 LE, may be
 * NULL): the members the abort is about, as vals, so that a daemon above
 * that holds them on another live path refuses it as stale. */
static void send_abort(struct node_job *nj, const char *round, int64_t gen,
                       uint64_t claim, uint16_t flags, const char *why,
                       const struct rdzv_buf *claims, uint32_t nclaims) {
  struct rdzv_slice keys[2] = {
      {(const uint8_t *)round, (uint32_t)strlen(round)},
      {(const uint8_t *)why, (uint32_t)strlen(why)}};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_ABORT;
  m.flags = flags;
  m.a = gen;
  m.b = (int64_t)claim;
  m.keys.n = 2;
  m.keys.v = keys;
  if (claims != NULL && nclaims > 0) {
    m.vals.n = nclaims;
    m.vals.raw = claims->data;
    m.vals.raw_len = claims->len;
  }
  rdzv__upstream_send(nj->up, &m, NULL, NULL);
  if (!(flags & RDZV_F_LEAVE))
    abort_passed(nj, (const uint8_t *)round, strlen(round), gen);
}

/* Whether claim, which an abort from the connection of via is about, is
 * held by another live connection here (a member that came back another
 * way, or a join sent again through another child or by the rank). */
static bool held_elsewhere(struct njround *jr, uint64_t claim,
                           const struct joined *via, const struct conn *c) {
  struct cbind *b = NULL;
  HASH_FIND(hh, jr->binds, &claim, sizeof(claim), b);
  if (b != NULL)
    return b->jn != NULL && b->jn != via && !b->jn->lost &&
           rdzv__conn_alive(b->jn->c);
  struct claimref *cr = NULL;
  HASH_FIND(hh, jr->claims, &claim, sizeof(claim), cr);
  return cr != NULL && cr->w->c != c && rdzv__conn_alive(cr->w->c);
}

void rdzv__node_abort(struct node_job *nj, struct conn *c,
                      const struct rdzv_msg *m) {
  if ((m->flags & RDZV_F_LEAVE) && c->role == RDZV_ROLE_NODE && m->b != 0) {
    /* A rank further down left: the root must hear of it (it frees the
     * rank's slot), whatever the depth; here it is no member any more
     * (its child's loss must not count it). */
    struct rdzv_slice name;
    struct njround *jr = NULL;
    if (rdzv_items_get(&m->keys, 0, &name) == 0 && name.n > 0)
      HASH_FIND(hh, nj->jrounds, name.p, name.n, jr);
    struct cbind *b = NULL;
    uint64_t claim = (uint64_t)m->b;
    if (jr != NULL)
      HASH_FIND(hh, jr->binds, &claim, sizeof(claim), b);
    if (b != NULL) {
      HASH_DEL(jr->binds, b);
      free(b);
      jr->binds_ver++; /* collectives count the subtree again */
    }
    rdzv__node_forward(nj, c, m);
    return;
  }
  if (m->flags & RDZV_F_LEAVE) {
    /* A clean leave of a rank here, or of a child node whose job ended
     * (no claim: every rank below it left or was reported dead): this
     * connection's end is no failure. */
    struct joined *jn = NULL;
    HASH_FIND(hh, nj->joined, &c, sizeof(c), jn);
    if (jn != NULL) {
      /* The root frees a rank's slot for a later job with this id (a
       * child node's record has no claim). */
      if (jn->gen > 0 && jn->claim != 0)
        send_abort(nj, jn->round, jn->gen, jn->claim, RDZV_F_LEAVE, "left",
                   NULL, 0);
      rdzv__nj_joined_free(nj, jn);
    }
    nj->d->stats.ops[RDZV_MSG_ABORT].local++;
    rdzv__node_reply_status(c, m, 0);
    return;
  }
  struct rdzv_slice name;
  struct njround *jr = NULL;
  if (c->role == RDZV_ROLE_NODE && m->vals.n > 0 &&
      rdzv_items_get(&m->keys, 0, &name) == 0 && name.n > 0)
    HASH_FIND(hh, nj->jrounds, name.p, name.n, jr);
  if (jr != NULL) {
    /* A child's word on members lost below it: stale if every one of
     * them is back here on another live connection (that child was
     * itself declared lost, and has just come back). */
    struct joined *via = NULL;
    HASH_FIND(hh, nj->joined, &c, sizeof(c), via);
    struct rdzv_slice v;
    size_t pos = 0;
    bool stale = true;
    while (stale && rdzv_items_next(&m->vals, &pos, &v))
      stale = v.n == 8 && held_elsewhere(jr, rdzv_load_u64le(v.p), via, c);
    if (stale) {
      char text[600];
      nj->d->stats.fenced++;
      snprintf(text, sizeof(text),
               "node %s: an abort from %s about %u "
               "members of round %s that are back on live connections here: "
               "stale, refused",
               nj->d->cfg.name, c->name, m->vals.n, jr->name);
      rdzv__log_event(nj->d, "%s", text);
      rdzv__conn_reply_text(c, m, RDZV_EFENCED, text);
      return;
    }
  }
  rdzv__node_forward(nj, c, m);
  if (rdzv_items_get(&m->keys, 0, &name) == 0 && name.n > 0)
    abort_passed(nj, name.p, name.n, m->a);
}

void rdzv__nj_on_lost_closed(uv_handle_t *h) { free(h); }

/* Whether process pid (in this daemon's pid namespace) has exited: gone,
 * or a zombie not reaped yet. 0 (unknown) is never gone. */
static bool process_gone(int pid) {
  if (pid <= 0)
    return false;
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return kill(pid, 0) < 0 && errno == ESRCH;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* "pid (comm) S ...": the state follows the last ')'. */
  char *rp = strrchr(buf, ')');
  return rp != NULL && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* How often a lost rank's process is looked at, while its grace runs. */
#define PID_CHECK_MS 50u

/* Appends one member to held_by's lists (names grows by doubling; out of
 * memory, the names go and the count and claims go on). */
static void held_add(struct rdzv_member_name **names, uint32_t *cap,
                     uint32_t *count, struct rdzv_buf *claims,
                     const struct rdzv_join_full *j, int32_t rank,
                     uint64_t claim) {
  if (*names != NULL && *count == *cap) {
    struct rdzv_member_name *g = realloc(*names, 2 * *cap * sizeof(*g));
    if (g == NULL) {
      free(*names);
      *names = NULL;
    } else {
      *names = g;
      *cap *= 2;
    }
  }
  if (*names != NULL)
    (*names)[*count] =
        (struct rdzv_member_name){j->rec.host, j->rec.host_len, rank};
  uint8_t item[8];
  rdzv_store_u64le(item, claim);
  rdzv_items_append(claims, item, sizeof(item));
  (*count)++;
}

/* The members still bound to jn's connection (completed ones, and joins
 * pending through it): their claims (u64 LE items) into claims and their
 * description into who (n bytes). Returns how many. */
static uint32_t held_by(struct njround *jr, const struct joined *jn,
                        struct rdzv_buf *claims, char *who, size_t n) {
  uint32_t count = 0, cap = 16;
  struct rdzv_member_name *names = malloc(cap * sizeof(*names));
  struct cbind *b, *bt;
  struct claimref *cr, *ct;
  struct rdzv_join_full j;
  who[0] = '\0';
  HASH_ITER (hh, jr->binds, b, bt)
    if (b->jn == jn && rdzv_join_rec_decode(b->rec, b->rec_len, &j) == 0)
      held_add(&names, &cap, &count, claims, &j, b->rank, b->claim);
  HASH_ITER (hh, jr->claims, cr, ct)
    if (cr->w->c == jn->c && cr->rec != NULL &&
        rdzv_join_rec_decode(cr->rec, cr->rec_len, &j) == 0)
      held_add(&names, &cap, &count, claims, &j, -1, cr->claim);
  if (names != NULL)
    rdzv_members_describe(names, count, "ranks", who, n);
  free(names);
  return count;
}

/* jn's connection was lost and its grace ended (or its process is gone,
 * or there is no grace): the members it still holds abort their
 * generation, named; if none, they all came back another way. Frees jn. */
static void lost_expire(struct node_job *nj, struct joined *jn, bool gone) {
  struct njround *jr = rdzv__nj_jround_find(nj, jn->round);
  struct rdzv_buf claims = {0};
  char who[400];
  uint32_t held = jr != NULL ? held_by(jr, jn, &claims, who, sizeof(who)) : 0;
  struct conn *c = jn->c;
  uint32_t grace = nj->d->cfg.session_grace_ms;
  if (held == 0) {
    if (jn->lost)
      rdzv__log(nj->d, 2,
                "round %s: %s %s lost, but all its members came "
                "back",
                jn->round, c->role == RDZV_ROLE_NODE ? "node" : "rank",
                c->name);
    rdzv_buf_free(&claims);
    rdzv__nj_joined_free(nj, jn);
    return;
  }
  char why[1400], after[400];
  if (gone)
    snprintf(after, sizeof(after), "the process exited");
  else
    snprintf(after, sizeof(after), "%s%s disconnected from node %s%s",
             c->role == RDZV_ROLE_NODE ? "node " : "its connection",
             c->role == RDZV_ROLE_NODE ? c->name : "", nj->d->cfg.name,
             grace > 0 ? " and did not come back within --session-grace-ms"
                       : "");
  if (!gone && grace > 0) {
    size_t w = strlen(after);
    snprintf(after + w, sizeof(after) - w, " %u", grace);
  }
  if (c->role == RDZV_ROLE_NODE || jn->rank < 0)
    snprintf(why, sizeof(why), "%s lost%s%s: %s", who,
             c->role == RDZV_ROLE_NODE ? "" : " a joining rank, process ",
             c->role == RDZV_ROLE_NODE ? "" : c->name, after);
  else
    snprintf(why, sizeof(why),
             "host %s lost rank %d (local rank %d, "
             "process %s): %s",
             jn->host, jn->rank, jn->local_rank, c->name, after);
  if (c->role != RDZV_ROLE_NODE)
    nj->d->stats.sessions_lost++;
  rdzv__log_event(nj->d, "round %s generation %" PRId64 ": %s", jn->round,
                  jn->gen, why);
  send_abort(nj, jn->round, jn->gen, 0, 0, why, held ? &claims : NULL, held);
  rdzv_buf_free(&claims);
  rdzv__nj_joined_free(nj, jn);
}

/* Lost connections whose grace ended, or ranks whose process is gone:
 * lost_expire; then the timer is set for the next due. */
static void on_lost_timer(uv_timer_t *t) {
  struct node_job *nj = t->data;
  uint64_t now = uv_now(nj->d->loop), grace = nj->d->cfg.session_grace_ms;
  uint64_t next = 0;
  struct joined *jn, *tmp;
  HASH_ITER (hh, nj->joined, jn, tmp) {
    if (!jn->lost)
      continue;
    bool watch = jn->c->role != RDZV_ROLE_NODE && jn->c->peer_pid > 0;
    bool gone = watch && process_gone(jn->c->peer_pid);
    if (!gone && jn->lost_ms + grace > now) {
      uint64_t due = jn->lost_ms + grace - now;
      if (watch && due > PID_CHECK_MS)
        due = PID_CHECK_MS;
      next = next == 0 || due < next ? due : next;
      continue;
    }
    lost_expire(nj, jn, gone);
  }
  if (next > 0)
    uv_timer_start(t, on_lost_timer, next, 0);
}

void rdzv__node_conn_closed(struct node_job *nj, struct conn *c) {
  if (c->role == RDZV_ROLE_NODE) {
    struct njround *jr, *t;
    HASH_ITER (hh, nj->jrounds, jr, t)
      rdzv__nj_complete_set(jr, c, false);
  }
  struct joined *jn = NULL;
  HASH_FIND(hh, nj->joined, &c, sizeof(c), jn);
  if (jn == NULL)
    return;
  bool watch = c->role != RDZV_ROLE_NODE && c->peer_pid > 0;
  bool gone = watch && process_gone(c->peer_pid);
  uint32_t grace = nj->d->cfg.session_grace_ms;
  jn->lost = true;
  jn->lost_ms = uv_now(nj->d->loop);
  if (grace > 0 && !gone && nj->lost_timer == NULL &&
      (nj->lost_timer = malloc(sizeof(*nj->lost_timer))) != NULL) {
    uv_timer_init(nj->d->loop, nj->lost_timer);
    nj->lost_timer->data = nj;
  }
  if (grace == 0 || gone || nj->lost_timer == NULL) {
    lost_expire(nj, jn, gone);
    return;
  }
  uint64_t want = watch && grace > PID_CHECK_MS ? PID_CHECK_MS : grace;
  if (!uv_is_active((uv_handle_t *)nj->lost_timer) ||
      uv_timer_get_due_in(nj->lost_timer) > want)
    uv_timer_start(nj->lost_timer, on_lost_timer, want, 0);
}

void rdzv__nj_on_jround_closed(uv_handle_t *h) {
  struct njround *jr = h->data;
  rdzv_buf_free(&jr->pending);
  rdzv__nj_binds_clear(jr);
  free(jr);
}

void rdzv__node_joins_leave(struct node_job *nj) {
  char why[200];
  snprintf(why, sizeof(why), "node %s: the job ended", nj->d->cfg.name);
  struct njround *jr, *t;
  HASH_ITER (hh, nj->jrounds, jr, t)
    send_abort(nj, jr->name, 0, 0, RDZV_F_LEAVE, why, NULL, 0);
}

void rdzv__node_joins_lost(struct node_job *nj) {
  struct njround *jr, *t;
  HASH_ITER (hh, nj->jrounds, jr, t) {
    jr->lost_gen = jr->last_gen;
    /* The members bound for a generation of the old parent are gone with
     * it: a new root that numbers a generation like that one (a node told
     * it nothing higher) must not find them here. */
    rdzv__nj_binds_clear(jr);
    jr->done_gen = 0;
    if (jr->lost_gen != 0)
      nj->joins_lost = true; /* for good: the full check from now on */
  }
}

bool rdzv__node_lost_generation(struct node_job *nj, struct conn *c,
                                const struct rdzv_msg *m) {
  struct rdzv_slice k;
  const uint8_t *name;
  size_t nlen;
  int64_t g;
  if (!nj->joins_lost || nj->jrounds == NULL ||
      rdzv_items_get(&m->keys, 0, &k) < 0 ||
      rdzv_gen_key_parse(k.p, k.n, &name, &nlen, &g) < 0)
    return false;
  struct njround *jr = NULL;
  HASH_FIND(hh, nj->jrounds, name, nlen, jr);
  if (jr == NULL || jr->lost_gen == 0 || g == 0 || g > jr->lost_gen)
    return false;
  nj->d->stats.ops[m->type].local++;
  rdzv__conn_reply_textf(c, m, RDZV_EABORTED,
                         "generation %" PRId64 " of round %s is lost: the "
                         "root restarted (seen by node %s); rejoin",
                         g, jr->name, nj->d->cfg.name);
  return true;
}
