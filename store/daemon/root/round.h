/* A rendezvous round at the root, shared by round.c (its life: records,
 * generations, completion, failure) and root_join.c (joining). Private. */
#ifndef RDZV_STORE_DAEMON_ROOT_ROUND_H
#define RDZV_STORE_DAEMON_ROOT_ROUND_H

#include <uthash.h>

#include "rendezvous/assign.h"
#include "rdzv/rendezvous.h"
#include "rendezvous/join_wire.h"
#include "store/daemon/root/root_int.h"

enum round_state { ROUND_OPEN, ROUND_DONE, ROUND_FAILED };

/* A generation's timeline (round_timeline.c), for operators: `rdzvctl
 * rounds`, the root's /status. Sizes are fixed: a 100,000-rank round
 * costs what a 4-rank one does. */
#define TL_SAMPLES 16 /* joined-over-time points: at each 16th of max */
#define TL_LAST 10    /* the last joins kept (the stragglers) */
#define TL_HISTORY 8  /* earlier generations kept, summarized */
/* the generation's first collectives kept (its unique ids, barriers) */
#define TL_PHASES 8
struct tl_join {
  char host[64]; /* cut to 63 bytes */
  int32_t local_rank;
  uint32_t ms; /* since the generation opened */
};
struct tl_past {
  int64_t gen;
  enum round_state outcome;
  uint32_t ms; /* from opening to completion or failure */
  uint32_t ranks;
  char reason[160];
};
/* A collective of the generation, as the rendezvous library names it
 * ("rdzv/ROUND/gGEN/uid/COMM", ".../uid/COMM/arrive" (the members'
 * check-in beside the ids), ".../barrier/NAME"): when its first and last
 * contributions came and how it ended, in ms since the generation
 * opened. */
enum tl_phase_state { TL_PHASE_OPEN, TL_PHASE_DONE, TL_PHASE_FAILED };
struct tl_phase {
  char kind[8];    /* "ids" or "barrier" */
  char name[56];   /* COMM, COMM/arrive or NAME, cut to 55 bytes, each
                      byte that is not printable ASCII as '?' */
  uint64_t id;     /* the whole name's FNV-1a hash and length: which */
  uint32_t id_len; /* collective it is (names may share 55 bytes) */
  uint32_t first_ms, last_ms, ended_ms;
  uint64_t arrived, count;
  enum tl_phase_state state;
};
#define TL_SWAPS 8 /* the previous world's places that changed hands */
/* A place of the previous world whose host did not rejoin: who took it
 * (a spare, a new active host) or that it closed up. */
enum tl_swap_how { TL_SWAP_SPARE, TL_SWAP_ACTIVE, TL_SWAP_CLOSED };
struct tl_swap {
  char lost[64];             /* the host that did not rejoin, cut to 63 bytes */
  char by[64];               /* the host that took its place ("" when closed) */
  int32_t node_rank;         /* the place (in the previous world) */
  int32_t first_rank, ranks; /* the taker's rank range now */
  enum tl_swap_how how;
  bool released; /* the lost host came back, but its segment was given up
                    (rendezvous/place.h) */
};
struct timeline {
  struct {
    uint32_t ms, ranks, hosts;
  } samples[TL_SAMPLES];
  uint32_t nsamples;
  struct tl_join last[TL_LAST]; /* a ring: last[(nlast - 1) % TL_LAST] is
                                   the latest */
  uint32_t nlast;
  uint64_t ended_ms;               /* when it completed or failed (0: open) */
  struct tl_past past[TL_HISTORY]; /* a ring, as last */
  uint32_t npast;
  struct tl_phase phases[TL_PHASES]; /* in the order they began */
  uint32_t nphases;
  uint32_t phases_left_out; /* began after the first TL_PHASES */
  /* Membership at completion (rendezvous/place.h): the previous world's
   * places that changed hands (the first TL_SWAPS), spares promoted, and
   * hosts parked. */
  struct tl_swap swaps[TL_SWAPS];
  uint32_t nswaps;
  uint32_t swaps_left_out;
  uint32_t promoted_hosts; /* spares taken into the world */
  uint32_t parked_hosts, parked_ranks;
  /* The domains the world used, in node-rank order ("nvl0 (node ranks
   * 0-3), ..."; cut short; empty when no host gave one). */
  char domains[256];
};

struct jpend { /* a requester (connection) waiting in the open round */
  struct conn *c;
  uint32_t req_id;
  uint32_t nmembers;
  struct rdzv_buf out; /* its assignments, built at completion */
  uint32_t nout;
  uint32_t nparked; /* of them RDZV_EPARKED (spares left out) */
  struct jpend *next;
};

struct jmember {
  UT_hash_handle hh;      /* by claim */
  UT_hash_handle hh_slot; /* by host + local rank */
  UT_hash_handle hh_host; /* the first member of each host, by host */
  bool in_host;
  /* Joined as a spare (declared, or past the maximum) and not of the
   * previous world: kept out of the world unless placement needs it
   * (rendezvous/place.h); its death or leave aborts nothing. */
  bool spare;
  bool gone; /* a spare whose process or path went away while open */
  struct jpend *via;
  struct conn *c; /* the connection it came through (last re-sent on) */
  bool left;      /* left cleanly: its slot is free for another process */
  struct rdzv_join_full j; /* points into data */
  int32_t rank; /* once the generation completed (its assignment is the
                 * state's RDZV_STATE_REC_ASSIGN record) */
  uint32_t slot_len;
  uint8_t *slot;
  uint32_t len;
  uint8_t data[]; /* the encoded record, then the slot key */
};

struct round {
  UT_hash_handle hh;
  char name[128];
  struct root_job *s;
  int64_t gen;
  enum round_state state;
  struct rdzv_join_params params;
  struct jmember *by_claim, *by_slot, *by_host;
  uint32_t n;          /* members (actives and spares) */
  uint32_t nspare;     /* of them spares, not gone */
  uint32_t nextra;     /* of those, active hosts held back (not declared
                          spares): they may start a world without actives */
  uint32_t nspare_all; /* of them spares, gone or not */
  /* Spares parked by the complete generation (not in its world), by
   * claim (their hh): answered RDZV_EPARKED again if they re-send. */
  struct jmember *parked;
  /* The last complete generation's world, by node rank: the previous
   * world of the next one's placement, and what `rdzvctl members`
   * lists. */
  struct world_host {
    UT_hash_handle hh; /* in world_by_key, by host, NUL, location */
    uint8_t *host, *location, *domain; /* one allocation: host, NUL,
                                          location, domain */
    uint32_t host_len, location_len, domain_len;
    int32_t local_size, first_rank;
    bool spare;    /* joined as a spare */
    bool released; /* a member left cleanly while it stood: the host is
                      done, its place not held for it */
  } * world, *world_by_key;
  uint32_t nworld_hosts;
  uint32_t held; /* the open generation: ranks of the last world's hosts
                    not back yet (counted down as each comes), whose
                    places new hosts may not take */
  uint64_t first_active_ms; /* the open generation's first active join
                               (0: none yet): --spare-wait-ms counts from
                               it */
  int64_t world_gen;        /* the generation it is of */
  uv_timer_t spare_wait;    /* --spare-wait-ms from the opening */
  struct jpend *pend;
  uv_timer_t deadline, last_call;
  uv_timer_t grace; /* the first lost child node's --session-grace-ms */
  int open_timers;
  /* Connections whose joins are in the current generation: one closing
   * (a node or a directly connected rank dying) aborts the generation. */
  struct contrib {
    UT_hash_handle hh; /* by c: one lookup per join and per close */
    struct conn *c;
    bool left; /* a rank that left cleanly, or a node whose job ended */
    /* A child node whose connection closed: its members wait
     * --session-grace-ms for their subtree to send them again through
     * another connection (it reattached), else the generation aborts. */
    bool lost;
    uint64_t lost_ms;
  } * contribs;
  uint64_t opened_ms;
  struct timeline tl;
  char reason[512];
  /* A generation that superseded a complete one: the slots (host, local
   * rank) of the members that were live in it. Until each is back (or
   * one more last call has passed) the last call does not complete the
   * round, so a late joiner cannot close it before the running members
   * have stopped and rejoined (torchrun's agents restart their workers
   * first). */
  struct prevslot {
    UT_hash_handle hh;
    bool back;
    uint32_t len;
    uint8_t slot[];
  } * prev;
  uint32_t prev_pending;
  bool prev_held; /* the last call was held once for them */
};

/* The round named name (no '/' or NUL, under 128 bytes), created (no generation
 * open yet, or what the state's record says) if new. NULL for a bad name
 * or on ENOMEM. */
struct round *rdzv__round_get(struct root_job *s,
                              const struct rdzv_slice *name);
/* A child node's connection c, which carried joins of r's generation,
 * closed: its members are kept --session-grace-ms for a re-send through
 * another connection (see rdzv__round_rebind); those not back by then
 * abort the generation, naming their hosts and ranks. */
void rdzv__round_node_lost(struct round *r, struct contrib *ct);
/* Member m came again through connection c (a re-send after its subtree
 * reattached, or the rank resuming its session): it belongs to c from now
 * on, unless c is a node and the rank is here on its own live connection
 * (then the re-send is stale: counted as fenced, false returned). */
bool rdzv__round_rebind(struct round *r, struct jmember *m, struct conn *c);
/* Whether any member (not left) is bound to ct's connection. */
bool rdzv__round_holds(struct round *r, const struct contrib *ct);
/* Opens the next generation with params p (members, requesters and
 * contributing connections of the last one are dropped). */
void rdzv__round_open(struct round *r, const struct rdzv_join_params *p);
/* Assigns ranks to the members, publishes the generation's keys and
 * answers every requester; a failed assignment fails the round. Returns
 * 0, or 1 when the placement would fall short of min_size (spares that do
 * not fit): nothing changed then. */
int rdzv__round_complete(struct round *r);
/* The current generation fails: every requester and waiter of its keys
 * gets status with why, and its pending collectives fail too. */
void rdzv__round_fail(struct round *r, int status, const char *why);
/* Member m (just added) may be one the round waits for (r->prev). */
void rdzv__round_prev_back(struct round *r, const struct jmember *m);
/* The last-call timer's callback (elastic rounds). */
void rdzv__round_on_last_call(uv_timer_t *t);
/* A JOIN answer to c: status, flags (RDZV_F_PARTIAL: not the last), the
 * nitems encoded items, text (may be ""), the generation and world size. */
void rdzv__round_reply(struct conn *c, uint32_t req_id, int status,
                       uint16_t flags, const struct rdzv_buf *items,
                       uint32_t nitems, const char *text, int64_t gen,
                       int64_t world);
/* What the open generation lacks, in out (n bytes): "round 'R'
 * generation G: N of MAX ranks joined; host H lacks K of L; host X never
 * joined" (the expected hosts of "rdzv/<round>/expected-hosts"). */
void rdzv__round_describe_missing(struct round *r, char *out, size_t n);

/* round.c, for round_complete.c: the round's record saved in the job's
 * state; the previous generation's slots forgotten; the requesters
 * freed (unanswered). */
void rdzv__round_save(struct round *r);
void rdzv__round_prev_clear(struct round *r);
void rdzv__round_pend_free_all(struct round *r);

/* round_timeline.c. Member m joined the open generation (after r->n++). */
void rdzv__round_tl_join(struct round *r, const struct jmember *m);
/* The open generation completed or failed (r->state says which): its
 * time is kept, and counted in the daemon's round statistics. */
void rdzv__round_tl_end(struct round *r);
/* The next generation opens: the last one becomes history. */
void rdzv__round_tl_open(struct round *r);
/* A collective of job s named name (nlen bytes) progressed: arrived of
 * count members have contributed (first: its first contribution), and
 * state says whether it is still open, completed or failed. Kept in its
 * round's timeline when the name is one of a generation's phases (see
 * struct tl_phase) of the round's current generation (counted in
 * phases_left_out when the timeline is full); any other name is
 * ignored. */
void rdzv__round_tl_coll(struct root_job *s, const uint8_t *name, uint32_t nlen,
                         uint64_t arrived, uint64_t count,
                         enum tl_phase_state state, bool first);
/* r's timeline as a JSON object (see rdzv__root_status), at loop time
 * now; NULL when out of memory. */
struct json_t;
struct json_t *rdzv__round_tl_json(struct round *r, uint64_t now);

/* round_members.c: who is in the world, who is parked, and when spares
 * are taken. */
struct rdzv_place_host;
struct rdzv_place_swap;
struct rdzv_assignment;
/* m's host (host and location) in the last complete world, or NULL. */
const struct world_host *rdzv__round_world_find(const struct round *r,
                                                const struct jmember *m);
/* The ranks of the last complete world's hosts not released (what
 * r->held starts from). */
uint32_t rdzv__round_world_ranks(const struct round *r);
/* Member m left cleanly: if its generation stands (complete), its host
 * of the world is released (its place is not held in the next). */
void rdzv__round_world_release(struct round *r, const struct jmember *m);
/* Takes member m (a spare gone) out of the open generation and frees it. */
void rdzv__round_member_drop(struct round *r, struct jmember *m);
/* prev (room for r->nworld_hosts) gets the last complete world, by node
 * rank, borrowing r's bytes. */
void rdzv__round_world_prev(const struct round *r,
                            struct rdzv_place_host *prev);
/* A root that found round r's last generation complete in its state (a
 * durable backend that outlived an earlier root): that world again, from
 * the generation's published "rdzv/<round>/g<gen>/hosts" and ".../domains"
 * (round_complete.c), so the next generation keeps its node ranks. A
 * record that does not parse leaves no world (the next generation is
 * placed as a first one), logged. */
void rdzv__round_world_load(struct round *r);
/* The generation completing: its world (members ms[idx[k]] of rank k,
 * assignments asg[idx[k]], r->n of them) becomes r->world. */
void rdzv__round_world_save(struct round *r, struct jmember *const *ms,
                            const struct rdzv_assignment *asg,
                            const size_t *idx);
/* Member m (out of the tables) is parked by the complete generation; it
 * is owned by r->parked from now on (a re-send of its claim replaces
 * it). */
void rdzv__round_park(struct round *r, struct jmember *m);
/* Frees the parked members and (all: true) the saved world too. */
void rdzv__round_members_free(struct round *r, bool all);
/* The placement's outcome in the timeline, and an event line per place
 * that changed hands: ms[0..live) placed with asg (rank -1 parked), the
 * previous world prev, its swaps. */
void rdzv__round_tl_membership(struct round *r, struct jmember *const *ms,
                               const struct rdzv_assignment *asg, size_t live,
                               const struct rdzv_place_swap *swaps,
                               size_t nswaps,
                               const struct rdzv_place_host *prev);
/* The open generation gained members (or lost spares): completes it when
 * its active ranks reach the maximum; starts the last call (elastic) or
 * the --spare-wait-ms wait when spares could fill it. */
void rdzv__round_progress(struct round *r);
/* Spares of r bound to connection c (closed) go: an open generation's
 * are marked gone, parked ones freed. Returns how many. */
uint32_t rdzv__round_spares_drop_conn(struct round *r, const struct conn *c);
/* The spares named by claims (n u64 LE values in vals) go, if every claim
 * is a spare of r (open or parked). true when so (nothing else done). */
bool rdzv__round_spares_drop_claims(struct round *r,
                                    const struct rdzv_items *vals);
/* The world and parked hosts as JSON arrays in o ("world", "parked",
 * "replaced"), at most ROUND_MEMBERS_LISTED hosts each. */
void rdzv__round_members_json(struct round *r, struct json_t *o);
#define ROUND_MEMBERS_LISTED 256

/* quarantine.c: hosts quarantined for the job, each a mutable key
 * RDZV_QUARANTINE_PREFIX "<host>" whose value is the reason. */
#define RDZV_QUARANTINE_PREFIX RDZV_QUARANTINE_KEY_PREFIX
/* Join request m of r from c (not a resumed one): records that carry a
 * failed health check quarantine their host; records of quarantined hosts
 * are refused (RDZV_EQUARANTINED, naming the host and the reason) and
 * their hosts' places in the last world released. Returns 1 when every
 * record was refused (answered; nothing else to do); else 0 with *out
 * unchanged when nothing was refused, or, when some were (answered in a
 * partial reply), *out a copy of m whose values (the params and the
 * records left) are in kept (the caller frees it; *out points into it
 * and into m). */
struct json_t;
int rdzv__quarantine_filter(struct round *r, struct conn *c,
                            const struct rdzv_msg *m, struct rdzv_msg *out,
                            struct rdzv_buf *kept);
/* The job's quarantined hosts in o: "quarantined" (the first 64 as
 * {"host", "reason"}) and "quarantined_hosts" (how many). */
void rdzv__quarantine_json(struct root_job *s, struct json_t *o);
/* Appends "; host H quarantined: REASON" (the first 4, then a count) to
 * the NUL-terminated text in out (n bytes). */
void rdzv__quarantine_describe(struct root_job *s, char *out, size_t n);

/* The connections whose joins are in the current generation. */
struct contrib *rdzv__round_contrib_find(struct round *r, const struct conn *c);
void rdzv__round_contrib_add(struct round *r, struct conn *c);

#endif /* RDZV_STORE_DAEMON_ROOT_ROUND_H */
