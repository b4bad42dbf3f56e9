/* Rendezvous joins at a node (node_join.c says how they are combined and
 * how sessions work): the structs its two files share, and what each
 * offers the other. Private to store/daemon/node:
 *   node_join.c      combining joins, forwarding them, handing the root's
 *                    assignments back, the bindings of completed members;
 *   node_sessions.c  sessions: resumed joins, aborts (stale ones fenced),
 *                    lost connections and their grace, leaving.
 * Everything runs on the daemon's loop thread. */
#ifndef RDZV_STORE_DAEMON_NODE_NODE_JOIN_INT_H
#define RDZV_STORE_DAEMON_NODE_NODE_JOIN_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <uthash.h>

#include "rendezvous/join_wire.h"
#include "rendezvous/members.h"
#include "store/daemon/node/node_int.h"

struct jwait { /* a local request (rank or child node) */
  struct conn *c;
  uint32_t req_id;
  uint32_t nleft; /* its claims not answered yet */
  struct rdzv_buf out;
  uint32_t nout;
  int status; /* last refusal among its items */
  struct jwait *next;
};

struct claimref {
  UT_hash_handle hh;
  uint64_t claim;
  struct jwait *w;
  uint8_t *rec; /* the encoded join record (NULL: out of memory) */
  uint32_t rec_len;
  bool local; /* a local rank's (else it came through a child node) */
};

/* A local rank's assignment, kept while the host records are built. */
struct local_asg {
  struct rdzv_assignment a;
  struct rdzv_join_full j; /* points into rec */
  uint8_t *rec;
};

struct njround {
  UT_hash_handle hh;
  char name[128];
  struct node_job *nj;
  uint8_t params[RDZV_JOIN_PARAMS_MAX_BYTES];
  uint32_t params_len; /* bytes of params the round's opener sent */
  uint32_t max_size;
  struct rdzv_buf pending; /* encoded records not yet forwarded */
  uint32_t npending;
  uint64_t seen;
  uint64_t first_ms;
  struct jwait *waiters;
  struct claimref *claims;
  uv_timer_t timer;
  int64_t last_gen; /* the newest generation a reply brought */
  int64_t lost_gen; /* generations up to this one died with the parent */
  /* The highest generation a child node said it knew (a JOIN's b): with
   * last_gen, the floor sent up for the next generation's number. */
  int64_t child_gen;
  /* The members of generation done_gen that completed through this node
   * (its ranks and its subtree's), by claim: where each is bound now, and
   * its join record, sent again after a lost connection to the parent so
   * that the root binds them to the new path (sessions of nodes). */
  struct cbind *binds;
  int64_t done_gen;
  uint64_t binds_ver; /* changes whenever binds does */
  /* The child nodes that said their subtree has joined this round's
   * pending generation (RDZV_F_COMPLETE), each holding a reference: per
   * round, as one child's connection carries every round of the job. */
  struct ccomplete *complete;
  /* The guard ran out on the pending generation (a host or child that
   * was expected has not come, or the subtree is slow to start): what
   * this node held went up, and what comes later is combined over the
   * quiet interval as where the shape is not known (still at once when
   * the subtree completes). */
  bool gave_up;
  /* The newest generation an abort of which went up through this node:
   * its collectives no longer wait for members (one will not come). */
  int64_t aborted_gen;
  /* health.c: the hosts' health checks for the pending generation (with
   * --health-cmd), by host. */
  struct hcheck *checks;
};

struct ccomplete {
  UT_hash_handle hh;
  struct conn *c;
};

struct cbind {
  UT_hash_handle hh;
  uint64_t claim;
  struct joined *jn; /* the connection it is bound to */
  int32_t rank;      /* -1 until known */
  uint32_t rec_len;
  uint8_t rec[]; /* its join record */
};

/* One per rank connection: about 120 bytes and its names' lengths. */
struct joined { /* a connection that has joined a generation */
  UT_hash_handle hh;
  struct conn *c;
  int64_t gen;              /* 0 while its join is pending */
  uint64_t claim;           /* a rank's claim (0 for a child node) */
  int32_t rank, local_rank; /* a rank's assignment, -1 until known */
  const char *host;         /* a rank's host (its join record): heap, or
                               no_host until known */
  int32_t local_size;       /* ... and its host's rank count (0: unknown) */
  /* Closed without a clean leave: its members have --session-grace-ms to
   * come back through another connection before the generation aborts. */
  bool lost;
  uint64_t lost_ms;
  char round[]; /* the round's name, NUL-terminated */
};

/* ---- node_join.c ---- */
/* Child node c has (on) or has not (off) said that its subtree joined
 * jr's pending generation. */
void rdzv__nj_complete_set(struct njround *jr, struct conn *c, bool on);
/* The round of nj named name, or NULL. */
struct njround *rdzv__nj_jround_find(struct node_job *nj, const char *name);
/* Drops every binding of jr. */
void rdzv__nj_binds_clear(struct njround *jr);
/* Unbinds and frees jn (a connection that joined). */
void rdzv__nj_joined_free(struct node_job *nj, struct joined *jn);
/* Records that connection c is in generation gen of this round (0 while
 * its join is pending); for a rank, its claim (when not 0), its
 * assignment (when known) and its host (rec, when not NULL). Returns the
 * record, or NULL out of memory. */
struct joined *rdzv__nj_mark_joined(struct njround *jr, struct conn *c,
                                    int64_t gen, uint64_t claim,
                                    const struct rdzv_assignment *a,
                                    const struct rdzv_join_full *rec);
/* A new generation's members replace the old one's. */
void rdzv__nj_binds_for_gen(struct njround *jr, int64_t gen);
/* Whether jn is a live rank's own connection (not lost): the freshest
 * word on where that rank is. */
bool rdzv__nj_live_rank(const struct joined *jn);
/* Binds member claim (join record rec) of generation done_gen to jn. A
 * child node does not take a member from another live rank connection
 * (a stale re-send: counted as fenced). rank < 0 keeps what is known.
 * Returns the binding, or NULL (fenced, or out of memory). */
struct cbind *rdzv__nj_bind_claim(struct njround *jr, uint64_t claim,
                                  struct joined *jn, int32_t rank,
                                  const uint8_t *rec, uint32_t rec_len);

/* ---- node_sessions.c ---- */
/* A lost member's timer closed: freed. */
void rdzv__nj_on_lost_closed(uv_handle_t *h);
/* A round's timer closed: the round and its bindings are freed. */
void rdzv__nj_on_jround_closed(uv_handle_t *h);
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
                          struct conn *c, const struct rdzv_msg *m);

#endif /* RDZV_STORE_DAEMON_NODE_NODE_JOIN_INT_H */
