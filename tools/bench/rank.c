/* The benchmark's simulated rank: see rank.h. */
#include "tools/bench/rank.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rendezvous/join_wire.h"
#include "rendezvous/members.h"
#include "rendezvous/topo.h"

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void gen_key(const struct bench_rank *r, char *out, size_t n,
                    const char *rest) {
  snprintf(out, n, "rdzv/%s/g%" PRId64 "/%s", r->p->round, r->gen, rest);
}

static int submit(struct bench_rank *r, enum rdzv_op op, const char *key,
                  unsigned flags, int64_t a, int64_t b, size_t nvals,
                  const struct rdzv_bytes *vals) {
  struct rdzv_bytes k = {key, strlen(key)};
  struct rdzv_request req = {.op = op,
                             .flags = flags,
                             .a = a,
                             .b = b,
                             .nkeys = 1,
                             .keys = &k,
                             .nvals = nvals,
                             .vals = vals};
  return r->p->submit(r, &req, r->p->timeout_s);
}

/* A collective of the whole world, telling the nodes who its members are
 * (kind: rendezvous/members.h), as rdzv/rendezvous.h does. */
static int submit_coll(struct bench_rank *r, enum rdzv_op op, const char *key,
                       int kind, int64_t count, const struct rdzv_bytes *v) {
  uint8_t spec[RDZV_MEMBERS_MAX_BYTES];
  int sl = rdzv_members_encode(NULL, r->a.world_size, kind, spec, sizeof(spec));
  struct rdzv_bytes k[2] = {{key, strlen(key)}, {spec, sl > 0 ? sl : 0}};
  struct rdzv_request req = {.op = op,
                             .b = count,
                             .nkeys = sl > 0 ? 2 : 1,
                             .keys = k,
                             .nvals = 1,
                             .vals = v};
  return r->p->submit(r, &req, r->p->timeout_s);
}

int bench_rank_start(struct bench_rank *r) {
  const struct bench_params *p = r->p;
  struct rdzv_join_params jp = {.min_size = (uint32_t)p->world_size,
                                .max_size = (uint32_t)p->world_size,
                                .timeout_ms = (uint32_t)(p->timeout_s * 1000)};
  static const char topo[] = "gpu_pci=simulated\n";
  struct rdzv_join_full j = {.rec = {.host = (const uint8_t *)r->host,
                                     .host_len = (uint32_t)strlen(r->host),
                                     .location = (const uint8_t *)"",
                                     .local_rank = r->local_rank,
                                     .claim = r->claim},
                             .local_size = r->local_size,
                             .topo = (const uint8_t *)topo,
                             .topo_len = sizeof(topo) - 1};
  uint8_t params[RDZV_JOIN_PARAMS_BYTES], rec[128];
  rdzv_join_params_encode(&jp, params);
  if (rdzv_join_rec_size(&j) > sizeof(rec) || rdzv_join_rec_encode(&j, rec) < 0)
    return RDZV_EPROTO;
  struct rdzv_bytes vals[2] = {{params, sizeof(params)},
                               {rec, rdzv_join_rec_size(&j)}};
  r->step = STEP_JOIN;
  r->t_start = bench_now();
  return submit(r, RDZV_OP_JOIN, p->round, 0, 0, 0, 2, vals);
}

static int after_join(struct bench_rank *r, const struct rdzv_result *res) {
  for (size_t i = 0; i < res->nvals; i++) {
    uint64_t claim = 0;
    struct rdzv_assignment a;
    int st = rdzv_join_assign_decode(res->vals[i].data, res->vals[i].len,
                                     &claim, &a);
    if (claim != r->claim)
      continue;
    if (st < 0)
      return st;
    r->a = a;
    r->gen = res->a;
    int64_t w = a.world_size;
    r->nids = rdzv_nccl_nids(w, r->p->ranks_per_root);
    int64_t b = rdzv_nccl_block_of(a.rank, w, r->nids);
    char key[256];
    gen_key(r, key, sizeof(key), "uid/world");
    if (rdzv_nccl_block_first(b, w, r->nids) == a.rank) {
      /* A stand-in id (the benchmark measures the service, not NCCL). */
      uint8_t id[8 + 128];
      memset(id, 0, sizeof(id));
      for (int k = 0; k < 8; k++)
        id[k] = (uint8_t)((uint64_t)b >> (8 * k));
      memcpy(id + 8, &r->claim, sizeof(r->claim));
      struct rdzv_bytes v = {id, sizeof(id)};
      r->step = STEP_IDS_GATHER;
      return submit_coll(r, RDZV_OP_GATHER, key, RDZV_MEMBERS_BLOCKS, r->nids,
                         &v);
    }
    r->step = STEP_IDS_WAIT;
    return submit(r, RDZV_OP_WAIT, key, 0, 0, 0, 0, NULL);
  }
  return RDZV_EPROTO;
}

static int next(struct bench_rank *r, const struct rdzv_result *res) {
  char key[256];
  switch (r->step) {
  case STEP_JOIN:
    return after_join(r, res);
  case STEP_IDS_WAIT:
    /* A wait's answer carries the value of a write-once key; read it
     * separately only when it did not. */
    if (res->nvals == 1 && res->vals[0].len > 0) {
      r->step = STEP_IDS_GET;
      return next(r, res);
    }
    r->step = STEP_IDS_GET;
    gen_key(r, key, sizeof(key), "uid/world");
    return submit(r, RDZV_OP_GET, key, RDZV_STORE_WRITE_ONCE, 0, 0, 0, NULL);
  case STEP_IDS_GET:
  case STEP_IDS_GATHER:
    if ((r->step == STEP_IDS_GATHER && res->nvals != (size_t)r->nids) ||
        (r->step == STEP_IDS_GET && res->nvals != 1))
      return RDZV_EPROTO;
    /* The topology read: this rank's host record (the 8 ranks of a host
     * read one cached key). */
    r->step = STEP_HOSTS;
    char rest[64];
    snprintf(rest, sizeof(rest), "topo/%d", r->a.node_rank);
    gen_key(r, key, sizeof(key), rest);
    return submit(r, RDZV_OP_GET, key, RDZV_STORE_WRITE_ONCE, 0, 0, 0, NULL);
  case STEP_HOSTS: {
    uint8_t member[8];
    for (int k = 0; k < 8; k++)
      member[k] = (uint8_t)((uint64_t)r->a.rank >> (8 * k));
    struct rdzv_bytes v = {member, 8};
    r->step = STEP_BARRIER;
    gen_key(r, key, sizeof(key), "barrier/final");
    return submit_coll(r, RDZV_OP_BARRIER, key, RDZV_MEMBERS_EACH,
                       r->a.world_size, &v);
  }
  case STEP_BARRIER:
    r->step = STEP_DONE;
    r->t_done = bench_now();
    return 0;
  default:
    return RDZV_EPROTO;
  }
}

void bench_rank_on_result(struct bench_rank *r, const struct rdzv_result *res) {
  int rc = res->status;
  if (rc == 0)
    rc = next(r, res);
  if (rc < 0) {
    r->status = rc;
    r->step = STEP_FAILED;
    r->t_done = bench_now();
  }
}
