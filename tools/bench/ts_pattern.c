/* rdzv-bench --pytorch: the traffic torch 2.x itself sends through its
 * store, as ts_drive.c's header describes (the ids of NCCL's scalable
 * init, the one-root id, torchrun's state reads, the heartbeat checks),
 * each reply checked. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench/incumbents.h"
#include "tools/bench/rank.h"
#include "tools/bench/ts_drive.h"

#define PT_BLOCK 128      /* TORCH_NCCL_RANKS_PER_ROOT's default */
#define PT_STATE_GETS 5   /* an agent's reads of the rendezvous state */
#define PT_CHECKS 60      /* the heartbeat monitor's checks of "dump" */
#define PT_AGENT_STATE 97 /* bytes of pickled state per agent */

/* The block whose first rank is r (blocks balanced: the first N mod B one
 * rank larger), or -1. */
static int64_t block_led(int64_t n, int64_t nb, int64_t r) {
  int64_t base = n / nb, extra = n % nb, big = extra * (base + 1);
  if (r < big)
    return r % (base + 1) == 0 ? r / (base + 1) : -1;
  return (r - big) % base == 0 ? extra + (r - big) / base : -1;
}

static uint8_t id_byte(int64_t b, int64_t i) {
  return (uint8_t)(b * 131 + i * 7 + 13);
}

static int64_t state_bytes(const struct ts_driver *dv) {
  return PT_AGENT_STATE * bench_hosts(dv->o);
}

/* Queues op on keys[0..n) (WAIT, MULTI_GET, CHECK). */
static int put_keys(struct ts_rank *r, enum rdzv_ts_op op,
                    const struct rdzv_slice *keys, uint32_t n) {
  struct rdzv_ts_req q = {
      .op = op, .nkeys = n, .keys = (struct rdzv_slice *)keys};
  r->expect = op;
  return rdzv_ts_encode(RDZV_TS_V2, &q, &r->out);
}

static struct rdzv_slice *pt_keys;
static char *pt_key_bytes;

int ts_pt_prepare(struct ts_driver *dv) {
  int64_t nb = (dv->o->ranks + PT_BLOCK - 1) / PT_BLOCK;
  dv->nblocks = nb;
  pt_keys = calloc((size_t)nb, sizeof(*pt_keys));
  pt_key_bytes = calloc((size_t)nb, 48);
  if (pt_keys == NULL || pt_key_bytes == NULL)
    return -1;
  for (int64_t b = 0; b < nb; b++) {
    char *k = pt_key_bytes + 48 * b;
    int len = snprintf(k, 48, "/UniqueNCCLID:%" PRId64, b);
    pt_keys[b].p = (const uint8_t *)k;
    pt_keys[b].n = (uint32_t)len;
  }
  return 0;
}

/* A reply of nblobs blobs, read as it comes (GET, MULTI_GET). */
static void stream_start(struct ts_rank *r, enum ts_step step, int64_t nblobs) {
  r->step = step;
  r->expect = 0; /* readable() streams it */
  r->mg_left = nblobs;
  r->mg_nhdr = 0;
  r->mg_body = 0;
  r->mg_pos = 0;
  r->mg_ok = true;
}

static int pt_after_ids(struct ts_driver *dv, struct ts_rank *r);
static int pt_state(struct ts_driver *dv, struct ts_rank *r);

/* --pt-keepalive: after each read of the state, the agent rewrites it
 * with a compare_set that matches (the same bytes: a write all the same),
 * as torchrun's c10d handler does every 5 s; its reply is the value. */
static int pt_state_cas(struct ts_driver *dv, struct ts_rank *r) {
  size_t sn = (size_t)state_bytes(dv);
  uint8_t *st = malloc(sn ? sn : 1);
  if (st == NULL)
    return RDZV_ENOMEM;
  memset(st, 'S', sn);
  struct rdzv_slice key = {(const uint8_t *)"/torchelastic/state", 19};
  struct rdzv_slice vals[2] = {{st, (uint32_t)sn}, {st, (uint32_t)sn}};
  struct rdzv_ts_req q = {.op = RDZV_TS_COMPARE_SET,
                          .nkeys = 1,
                          .keys = &key,
                          .nvals = 2,
                          .vals = vals};
  int rc = rdzv_ts_encode(RDZV_TS_V2, &q, &r->out);
  free(st);
  stream_start(r, T_STATE_CAS, 1);
  return rc;
}

/* The heartbeat monitor's checks, then done. With --pt-check-ms the
 * checks after the first wait that long apart (the monitor checks once a
 * second): the steady state, in which a tree's root should see none. */
static int pt_checks(struct ts_driver *dv, struct ts_rank *r) {
  static const struct rdzv_slice dump = {(const uint8_t *)"/dump", 5};
  if (r->step != T_CHECK) {
    r->step = T_CHECK;
    r->reps = 0;
    r->check_at = 0;
  }
  if (r->reps < PT_CHECKS) {
    if (dv->check_s > 0 && r->reps > 0 && r->check_at == 0) {
      r->check_at = bench_now() + dv->check_s;
      dv->npaced++;
      return 0; /* nothing awaited until then */
    }
    r->check_at = 0;
    r->reps++;
    return put_keys(r, RDZV_TS_CHECK, &dump, 1);
  }
  r->step = T_DONE;
  r->expect = 0;
  r->t_done = bench_now();
  dv->ndone++;
  return 0;
}

int ts_pt_check_due(struct ts_driver *dv, struct ts_rank *r) {
  dv->npaced--;
  return pt_checks(dv, r);
}

/* A streamed reply's blob i is complete (len bytes, content checked as
 * it came): the next step when it was the last. */
static int pt_blob_done(struct ts_driver *dv, struct ts_rank *r) {
  if (r->mg_left > 0)
    return 0;
  switch (r->step) {
  case T_IDS_MGET:
    r->uid_ok = r->mg_ok;
    r->t_phase[2] = bench_now();
    return r->mg_ok ? pt_after_ids(dv, r) : RDZV_EPROTO;
  case T_SINGLE_GET:
    if (!r->mg_ok)
      return RDZV_EPROTO;
    return pt_state(dv, r);
  case T_STATE_GET:
    if (!r->mg_ok)
      return RDZV_EPROTO;
    if (dv->keepalive) /* torchrun's keep-alive: rewrite the state */
      return pt_state_cas(dv, r);
    /* fall through */
  case T_STATE_CAS:
    if (!r->mg_ok)
      return RDZV_EPROTO;
    if (++r->reps < PT_STATE_GETS) {
      int rc = ts_put_req(r, RDZV_TS_GET, "/torchelastic/state", NULL, 0, 0);
      stream_start(r, T_STATE_GET, 1);
      return rc;
    }
    return pt_checks(dv, r);
  default:
    return RDZV_EPROTO;
  }
}

/* Whether byte v at offset pos of the current blob is what it should be. */
static bool pt_byte_ok(const struct ts_driver *dv, const struct ts_rank *r,
                       int64_t pos, uint8_t v) {
  uint8_t uid[BENCH_INC_UID_BYTES];
  switch (r->step) {
  case T_IDS_MGET:
    return v == id_byte(dv->nblocks - r->mg_left, pos);
  case T_SINGLE_GET:
    ts_uid_bytes(uid);
    return v == uid[pos];
  default:
    return true; /* the state: its length is checked */
  }
}

static int64_t pt_blob_len(const struct ts_driver *dv,
                           const struct ts_rank *r) {
  return r->step == T_STATE_GET || r->step == T_STATE_CAS ? state_bytes(dv)
                                                          : BENCH_INC_UID_BYTES;
}

/* Consumes p[0..n) of a streamed reply, up to its end: *used bytes. */
int ts_pt_stream_buf(struct ts_driver *dv, struct ts_rank *r, const uint8_t *p,
                     size_t n, size_t *used) {
  size_t off = 0;
  int rc = 0;
  while (rc == 0 && off < n && r->mg_left > 0) {
    if (r->mg_nhdr < 8) {
      r->mg_hdr[r->mg_nhdr++] = p[off++];
      if (r->mg_nhdr == 8) {
        r->mg_body = (int64_t)rdzv_load_u64le(r->mg_hdr);
        r->mg_pos = 0;
        if (r->mg_body != pt_blob_len(dv, r))
          r->mg_ok = false;
      }
    } else {
      size_t k = n - off;
      if ((int64_t)k > r->mg_body - r->mg_pos)
        k = (size_t)(r->mg_body - r->mg_pos);
      for (size_t i = 0; i < k && r->mg_ok; i++)
        r->mg_ok = pt_byte_ok(dv, r, r->mg_pos + (int64_t)i, p[off + i]);
      off += k;
      r->mg_pos += (int64_t)k;
    }
    if (r->mg_nhdr == 8 && r->mg_pos == r->mg_body) {
      r->mg_left--;
      r->mg_nhdr = 0;
      rc = pt_blob_done(dv, r);
    }
  }
  *used = off;
  return rc;
}

/* Consumes what r->in holds of a streamed reply. */
int ts_pt_stream(struct ts_driver *dv, struct ts_rank *r) {
  size_t off = 0;
  int rc = ts_pt_stream_buf(dv, r, r->in, r->in_len, &off);
  memmove(r->in, r->in + off, r->in_len - off);
  r->in_len -= off;
  return rc;
}

/* After init/: a block's first rank sets its id; then every rank waits
 * for all ids. */
static int pt_start(struct ts_driver *dv, struct ts_rank *r) {
  int64_t b = block_led(dv->o->ranks, dv->nblocks, r->rank);
  if (b >= 0) {
    uint8_t id[BENCH_INC_UID_BYTES];
    char key[48];
    for (int i = 0; i < BENCH_INC_UID_BYTES; i++)
      id[i] = id_byte(b, i);
    snprintf(key, sizeof(key), "/UniqueNCCLID:%" PRId64, b);
    int rc = ts_put_req(r, RDZV_TS_SET, key, id, sizeof(id), 0);
    if (rc < 0)
      return rc;
  }
  r->step = T_IDS_WAIT;
  return put_keys(r, RDZV_TS_WAIT, pt_keys, (uint32_t)dv->nblocks);
}

/* Every id read: rank 0 sets the one-root id and torchrun's state;
 * every rank reads the one-root id. */
static int pt_after_ids(struct ts_driver *dv, struct ts_rank *r) {
  if (r->rank == 0) {
    uint8_t uid[BENCH_INC_UID_BYTES];
    ts_uid_bytes(uid);
    int rc = ts_put_req(r, RDZV_TS_SET, "/single_uid", uid, sizeof(uid), 0);
    size_t sn = (size_t)state_bytes(dv);
    uint8_t *st = malloc(sn ? sn : 1);
    if (st == NULL)
      return RDZV_ENOMEM;
    memset(st, 'S', sn);
    if (rc == 0)
      rc = ts_put_req(r, RDZV_TS_SET, "/torchelastic/state", st, sn, 0);
    free(st);
    if (rc < 0)
      return rc;
  }
  r->step = T_SINGLE_WAIT;
  return ts_put_req(r, RDZV_TS_WAIT, "/single_uid", NULL, 0, 0);
}

/* A host's agent reads the state; then the checks. */
static int pt_state(struct ts_driver *dv, struct ts_rank *r) {
  if (r->rank % dv->o->ranks_per_host != 0)
    return pt_checks(dv, r);
  r->step = T_STATE_WAIT;
  return ts_put_req(r, RDZV_TS_WAIT, "/torchelastic/state", NULL, 0, 0);
}

/* The reply to a --pattern pytorch request (not a streamed one). */
int ts_pt_advance(struct ts_driver *dv, struct ts_rank *r,
                  const struct rdzv_ts_reply *rep) {
  int rc;
  switch (r->step) {
  case T_INIT:
    r->t_phase[1] = bench_now();
    r->init_reply = rep->i64;
    return pt_start(dv, r);
  case T_IDS_WAIT:
    if (rep->u8 != RDZV_TS_STOP_WAITING)
      return RDZV_EPROTO;
    rc = put_keys(r, RDZV_TS_MULTI_GET, pt_keys, (uint32_t)dv->nblocks);
    stream_start(r, T_IDS_MGET, dv->nblocks);
    return rc;
  case T_SINGLE_WAIT:
    if (rep->u8 != RDZV_TS_STOP_WAITING)
      return RDZV_EPROTO;
    rc = ts_put_req(r, RDZV_TS_GET, "/single_uid", NULL, 0, 0);
    stream_start(r, T_SINGLE_GET, 1);
    return rc;
  case T_STATE_WAIT:
    if (rep->u8 != RDZV_TS_STOP_WAITING)
      return RDZV_EPROTO;
    r->reps = 0;
    rc = ts_put_req(r, RDZV_TS_GET, "/torchelastic/state", NULL, 0, 0);
    stream_start(r, T_STATE_GET, 1);
    return rc;
  case T_CHECK:
    if (rep->u8 != RDZV_TS_NOT_READY)
      return RDZV_EPROTO; /* "dump" was never set */
    return pt_checks(dv, r);
  default:
    return RDZV_EPROTO;
  }
}
