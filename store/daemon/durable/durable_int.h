/* The durable root's parts (store/daemon/durable), shared by its files
 * and private to them: the structs, and what each file offers the others.
 *   durable.c           the life cycle (new, attach, stop, free), the
 *                       statistics and readiness checks, logs;
 *   durable_jobs.c      jobs, their keys in etcd, the state backend over
 *                       the in-memory one (what changed is marked);
 *   durable_batch.c     batches: the marked changes persisted behind the
 *                       transport's write gate, values too large for one
 *                       request in parts;
 *   durable_lease.c     admission of peers, standing down, the leader
 *                       lease's keepalives (the tick);
 *   durable_election.c  campaigning, standing by, loading the state when
 *                       elected, watching the leader key.
 * Calls between them (not yet one way): durable.c starts and frees
 * through every file; the jobs file drops a job's values in parts
 * (batch); the batch file marks and clears jobs' changes (jobs) and
 * stands down when etcd refuses (lease); the lease file ends batches and
 * jobs and campaigns again (election); the election loads jobs, their
 * values in parts and op records (jobs, batch) and stands down (lease).
 * Everything runs on the daemon's loop thread. */
#ifndef RDZV_STORE_DAEMON_DURABLE_DURABLE_INT_H
#define RDZV_STORE_DAEMON_DURABLE_DURABLE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uthash.h>
#include <uv.h>

#include "store/daemon/durable/durable.h"
#include "store/daemon/state/mem.h"
#include "store/daemon/transport/transport.h"
#include "store/etcd/etcd.h"

enum dur_role {
  DUR_IDLE = 0, /* not attached yet */
  DUR_CAMPAIGN, /* getting a lease, registering, asking for the leader key */
  DUR_STANDBY,  /* another root leads: watching its key */
  DUR_LOADING,  /* won: reading the state before serving */
  DUR_LEADER,
  DUR_STOPPED,
};

/* Each role's name in logs, stats and /readyz (durable.c). */
extern const char *const rdzv__du_role_names[];

/* A key of a job changed since the last batch: its tag ('k' for a key,
 * '0' + kind for a record) and name are the hash key. */
struct dirty {
  UT_hash_handle hh;
  /* The answers (RDZV_STATE_REC_OP records) of the mutations that
   * changed this key: persisted in the same transaction as the key, so
   * that a failover never finds one without the other. Each: op id (8
   * bytes), length (4, little-endian), the record. */
  struct rdzv_buf ops;
  size_t len;
  uint8_t id[]; /* tag, then the name */
};

/* A value over half of --etcd-max-request-bytes is persisted in parts:
 * "P/j/JOB/p/ID/NNNNNN" (ID unique per write), and under its key's name
 * with the tag in upper case ("K/", "R/N/", "O/") the text "ID:N:BYTES".
 * bigs maps each such key (its lower-case form) to its ID, so that a later
 * write or delete removes the old parts. */
struct bigval {
  UT_hash_handle hh;
  char id[25];
  size_t klen;
  uint8_t key[];
};

struct loadpart {
  UT_hash_handle hh;
  char name[40]; /* "ID/NNNNNN" */
  size_t len;
  uint8_t *data;
};

struct loadbig {
  struct loadbig *next;
  char id[25];
  uint32_t n;
  uint64_t total;
  size_t klen;
  int64_t lease;
  uint8_t key[]; /* the lower-case form */
};

/* A persisted group of op records ("P/j/JOB/o/HEX"): deleted once the
 * root's --dedup-window-ms has passed. */
struct opkey {
  uint8_t *key;
  size_t klen;
  uint64_t expire_ms;
  struct opkey *next;
};

/* A job: its state in memory (open or loaded), its lease, what changed. */
struct djob {
  UT_hash_handle hh;
  char *id;
  char *ekey; /* "P/j/JOB/" */
  size_t eklen;
  int64_t lease;      /* 0: none yet */
  bool lease_granted; /* etcd has it */
  bool lease_put;     /* P/j/JOB/lease is persisted */
  struct rdzv_state *mem;
  struct dstate *open; /* the root's handle, NULL when not open */
  struct dirty *dirty;
  uint64_t ndirty;
  uint64_t loaded_ms;       /* loaded at an election; 0: opened since */
  struct dirty *last;       /* the key the latest mutation changed */
  struct rdzv_buf lone_ops; /* op records of mutations that changed no key */
  struct opkey *opkeys, **opkeys_tail; /* oldest first */
};

/* The root's handle on a job's state. */
struct dstate {
  struct rdzv_state base;
  struct rdzv_durable *du;
  struct djob *job;
};

/* One operation of a batch (owned copies). */
struct bop {
  bool glue;   /* in the same transaction as the operation before it */
  bool prefix; /* a delete of every key starting with key */
  uint8_t *key;
  size_t klen;
  uint8_t *val; /* NULL for a delete */
  size_t vlen;
  int64_t lease;
};

struct batch;
/* A request of a batch: a lease grant or a transaction over ops
 * [from, to). */
struct breq {
  struct batch *b;
  bool grant;
  bool parts; /* over b->pops, not b->ops */
  bool sent;  /* sent once (retries go from its timer) */
  int64_t lease, ttl;
  size_t from, to;
  uv_timer_t retry;
  bool timer_open;
  struct breq *next;
};

struct batch {
  struct rdzv_durable *du;
  /* The parts of values too large for one request (see emit): written
   * first, each under a fresh name, before the operations that point at
   * them. */
  struct bop *pops;
  size_t npops, pcap;
  struct bop *ops;
  size_t nops, cap;
  struct breq *reqs;
  uint32_t left; /* requests not yet done in this phase */
  int phase;     /* 0 grants, 1 the parts, 2 the transactions, 3 done */
  uint32_t ntxn;
  uint32_t inflight; /* requests sent whose callback has not run */
  uint32_t timers;   /* retry timers not yet closed */
  bool finished;     /* done, or dropped (stood down, stopping) */
};

struct rdzv_durable {
  struct rdzv_state_backend backend; /* first: the role's context */
  uv_loop_t *loop;
  struct daemon *d;
  struct rdzv_daemon_config cfg;
  struct rdzv_etcd *e;
  char user[600], password[600];
  char prefix[256];
  char self[300];     /* this root's address as nodes reach it */
  enum dur_role role; /* moved only by rdzv__du_set_role */
  uint64_t gen; /* bumped at every stand-down: older callbacks are stale */
  int64_t lease;
  uint64_t lease_deadline_ms; /* loop time the lease would expire by */
  bool keepalive_inflight;
  int64_t leader_rev; /* the leader key's create revision while leading */
  char leader[300];   /* the leader's address ("" unknown) */
  struct rdzv_etcd_watch *watch;
  uv_timer_t tick;     /* keepalives, deadline checks */
  uv_timer_t campaign; /* the next campaign step */
  struct djob *jobs;
  uint64_t ndirty;
  struct batch *batch; /* being persisted */
  uint64_t load_rev;
  uint64_t opbase, opseq;      /* names of op-record groups and of value parts:
                                  unique per leader */
  struct bigval *bigs;         /* keys whose value is persisted in parts */
  struct loadpart *load_parts; /* while loading: parts met */
  struct loadbig *load_bigs;   /* while loading: values in parts met */
  int handles_open;            /* du's timers and the batches' retry timers */
  bool client_closed;          /* the etcd client is closed: du goes with its
                                  last handle */
  bool broken;                 /* out of memory marking a change: stand down at
                                  the end of the iteration */
  /* Campaign steps that failed in a row, and why the last did (told to
   * peers a standby refuses, and logged at the default level on the
   * first and every 20th). */
  uint32_t campaign_fails;
  char last_err[300];
  /* /readyz's not_fenced: this root led and a write of it was refused by
   * the leader key's compare (another root leads), why in fence_why;
   * until it won again or stands by knowing the leader. */
  bool fenced;
  char fence_why[300];
  bool own_key_unwatched; /* leading without a watch of its key: the tick
                             reads it again */
  /* Counters for logs and stats. */
  uint64_t batches, txns, ops_persisted, stand_downs, elections_won, errors;
  uint64_t lease_renewals, lease_failures; /* keepalives answered, failed */
  uint32_t lease_fails_in_row;             /* since the last answered */
};

static inline uint64_t rdzv__du_now_ms(struct rdzv_durable *du) {
  return uv_now(du->loop);
}

/* ---- durable.c: life cycle, statistics, readiness, logs ---- */
/* The only move between roles: du->role becomes r (why: the cause, for
 * the log), the statistics' etcd role its name; a change is logged at the
 * debug level once attached. */
void rdzv__du_set_role(struct rdzv_durable *du, enum dur_role r,
                       const char *why);
/* A random positive int64 (the kernel's generator), never 0. */
int64_t rdzv__du_random_i63(void);
/* The statistics rdzvctl stats shows under "etcd". */
void rdzv__du_stats_update(struct rdzv_durable *du);
/* A log line "etcd: ..." at level (the daemon's, or stderr before it is
 * attached). */
void rdzv__du_dlog(struct rdzv_durable *du, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Frees du once its etcd client is closed and its last handle too. */
void rdzv__du_maybe_free_du(struct rdzv_durable *du);

/* ---- durable_jobs.c: jobs, their etcd keys, the state backend ---- */
/* The backend's open (rdzv_state_backend): job's state, leading only
 * (RDZV_ENOT_LEADER otherwise). */
int rdzv__du_d_open(const struct rdzv_state_backend *b, const char *job,
                    struct rdzv_state **out);
/* Forgets what of j changed since the last batch. */
void rdzv__du_job_clear_dirty(struct rdzv_durable *du, struct djob *j);
/* The job id of an encoded one (n bytes) into out (outlen bytes). false
 * if it is not one. */
bool rdzv__du_job_decode(const uint8_t *p, size_t n, char *out, size_t outlen);
/* Frees j and what it holds (not what etcd holds of it). */
void rdzv__du_job_free(struct rdzv_durable *du, struct djob *j);
/* The job named id, created when absent (NULL when out of memory). */
struct djob *rdzv__du_job_get(struct rdzv_durable *du, const char *id);
/* Job j ended: its etcd keys go (fenced by the leader key), then its
 * lease; memory goes now. */
void rdzv__du_job_remove(struct rdzv_durable *du, struct djob *j);
/* Frees every job (standing down, stopping). */
void rdzv__du_jobs_free(struct rdzv_durable *du);
/* Marks (tag, name) of j dirty, while leading. Out of memory is a failed
 * change: the caller's change already happened in memory, so the root
 * stands down (at the end of the loop iteration) rather than acknowledge
 * what etcd will not get. */
void rdzv__du_mark(struct rdzv_durable *du, struct djob *j, uint8_t tag,
                   const uint8_t *name, uint32_t nlen);

/* ---- durable_batch.c: batches of changes to etcd, values in parts ---- */
/* The transport's write gate (transport.h): a batch of what the requests
 * of an iteration changed is persisted before their replies go. */
extern const struct rdzv_gate rdzv__du_gate;
/* The batch is done or dropped: its retry timers close (b is freed
 * once they and its requests are). */
void rdzv__du_batch_finish(struct batch *b);
/* Phase 0: the leases of jobs new to etcd (sent by gate_start); 1: the
 * parts of large values; 2: the transactions; then the gate opens. */
void rdzv__du_batch_step(struct batch *b);
/* Remembers that key k (klen bytes, lower-case form) is persisted in
 * parts named id. 0 or RDZV_ENOMEM. */
int rdzv__du_big_set(struct rdzv_durable *du, const uint8_t *k, size_t klen,
                     const char *id);
/* The job's entries go with it (what etcd holds of it is removed or
 * expires with its lease; a later job of that id starts afresh). */
void rdzv__du_bigs_drop_job(struct rdzv_durable *du, const struct djob *j);
/* Forgets every value in parts. */
void rdzv__du_bigs_free(struct rdzv_durable *du);
/* Remembers a persisted group of op records for its expiry. */
int rdzv__du_opkey_add(struct djob *j, const uint8_t *k, size_t klen,
                       uint64_t expire_ms);

/* ---- durable_lease.c: admission, standing down, the lease ---- */
/* The transport's admission of a peer's hello (d->admit): 1 while
 * leading; else 0 with why in text and the leader's address (if known)
 * in leader. */
int rdzv__du_admit(void *arg, char *text, size_t textlen, char *leader,
                   size_t leaderlen);
/* Every quarter of the lease's TTL: keepalives, the jobs' leases,
 * deadlines. */
void rdzv__du_on_tick(uv_timer_t *t);
/* Reads the roots registered under the prefix (the peers a node may
 * reattach to). */
void rdzv__du_peers_refresh(struct rdzv_durable *du);
/* Leadership ends (status, why): the batch dropped, the write gate
 * released, waiting callers told when the lease was lost, peers'
 * connections closed; it campaigns again. */
void rdzv__du_stand_down(struct rdzv_durable *du, int status, const char *why);

/* ---- durable_election.c: the election and loading the state ---- */
/* The next campaign step in ms. */
void rdzv__du_campaign_later(struct rdzv_durable *du, uint64_t ms);
/* One step: a lease if none, this root's address under it, then the
 * leader key if absent. */
void rdzv__du_campaign_step(struct rdzv_durable *du);
/* What a load left half done (a stand-down meanwhile) goes. */
void rdzv__du_load_bigs_finish_drop(struct rdzv_durable *du);
/* Reads the leader key (a watch of it ended: compacted, or etcd lost). */
void rdzv__du_check_own_key(struct rdzv_durable *du);

#endif /* RDZV_STORE_DAEMON_DURABLE_DURABLE_INT_H */
