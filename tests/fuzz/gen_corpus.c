/* Writes the seed corpus for the wire fuzz target (tests/fuzz/corpus/).
 *
 * Usage: gen_corpus DIR
 *
 * Each seed is one or more frames made with the real encoder, so seeds
 * follow the codec; rerun after a wire change and commit the result. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rendezvous/join_wire.h"
#include "store/wire/wire.h"

#define S(str)                                                                 \
  { (const uint8_t *)(str), (uint32_t)(sizeof(str) - 1) }

static int write_seed(const char *dir, const char *name,
                      const struct rdzv_buf *b) {
  char path[4096];
  FILE *f;
  int ok;

  snprintf(path, sizeof(path), "%s/%s", dir, name);
  f = fopen(path, "wb");
  if (f == NULL) {
    perror(path);
    return -1;
  }
  ok = fwrite(b->data, 1, b->len, f) == b->len;
  ok = fclose(f) == 0 && ok;
  return ok ? 0 : -1;
}

static int add(struct rdzv_buf *b, uint8_t type, uint16_t flags, int64_t a,
               int64_t bb, uint32_t nk, const struct rdzv_slice *k, uint32_t nv,
               const struct rdzv_slice *v) {
  struct rdzv_msg m;

  memset(&m, 0, sizeof(m));
  m.type = type;
  m.flags = flags;
  m.req_id = (uint32_t)b->len + 1;
  m.a = a;
  m.b = bb;
  m.keys.n = nk;
  m.keys.v = k;
  m.vals.n = nv;
  m.vals.v = v;
  return rdzv_msg_encode(&m, b);
}

int main(int argc, char **argv) {
  const struct rdzv_slice hello[] = {S("job-1"), S("rank0")};
  const struct rdzv_slice kv[] = {S("key"), S("value")};
  const struct rdzv_slice three[] = {S("a"), S("bb"), S("ccc")};
  const struct rdzv_slice cas[] = {S(""), S("desired")};
  const struct rdzv_slice gather[] = {S("\x00\0\0\0\0\0\0\0uid-0"),
                                      S("\x01\0\0\0\0\0\0\0"),
                                      S("\x02\0\0\0\0\0\0\0uid-2")};
  const struct rdzv_slice name = S("coll");
  struct rdzv_buf b = {0};
  int err = 0;

  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  err |= add(&b, RDZV_MSG_HELLO, 0, RDZV_ROLE_CLIENT, 0, 2, hello, 0, NULL);
  err |= write_seed(argv[1], "hello", &b);
  b.len = 0;
  err |= add(&b, RDZV_MSG_SET, RDZV_F_WRITE_ONCE, 0, 0, 1, kv, 1, kv + 1);
  err |= write_seed(argv[1], "set", &b);
  b.len = 0;
  err |= add(&b, RDZV_MSG_WAIT, 0, 5000, 0, 3, three, 0, NULL);
  err |= write_seed(argv[1], "wait", &b);
  b.len = 0;
  err |= add(&b, RDZV_MSG_CAS, 0, 0, 0, 1, kv, 2, cas);
  err |= write_seed(argv[1], "cas", &b);
  b.len = 0;
  err |= add(&b, RDZV_MSG_MSET, 0, 0, 0, 3, three, 3, three);
  err |= write_seed(argv[1], "mset", &b);
  b.len = 0;
  err |= add(&b, RDZV_MSG_GATHER, 0, 0, 3, 1, &name, 3, gather);
  err |= write_seed(argv[1], "gather", &b);
  b.len = 0;
  err |= add(&b, RDZV_MSG_ERROR, RDZV_F_REPLY, 0, 0, 1, kv, 0, NULL);
  err |= write_seed(argv[1], "error-reply", &b);
  /* A stream: hello, barrier, nkeys, stats in one input. */
  b.len = 0;
  err |= add(&b, RDZV_MSG_HELLO, 0, RDZV_ROLE_NODE, 0, 1, hello, 0, NULL);
  err |= add(&b, RDZV_MSG_BARRIER, 0, 0, 2, 1, &name, 1, gather + 1);
  err |= add(&b, RDZV_MSG_NKEYS, 0, 0, 0, 0, NULL, 0, NULL);
  err |= add(&b, RDZV_MSG_STATS, 0, 0, 0, 0, NULL, 0, NULL);
  err |= write_seed(argv[1], "stream", &b);
  /* Authentication: a hello with a nonce, the daemon's challenge, the
   * peer's proof (store/auth/auth.h), as one exchange's frames. */
  {
    static const uint8_t n32[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                    12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                    23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
    const struct rdzv_slice nonce[] = {{n32, 32}, {n32, 32}};
    b.len = 0;
    err |= add(&b, RDZV_MSG_HELLO, 0, RDZV_ROLE_NODE, 7, 2, hello, 1, nonce);
    err |= write_seed(argv[1], "hello-nonce", &b);
    b.len = 0;
    err |= add(&b, RDZV_MSG_HELLO, RDZV_F_REPLY | RDZV_F_CHALLENGE, 0, 0, 0,
               NULL, 2, nonce);
    err |= write_seed(argv[1], "challenge", &b);
    b.len = 0;
    err |= add(&b, RDZV_MSG_AUTH, 0, 0, 0, 0, NULL, 1, nonce);
    err |= write_seed(argv[1], "auth", &b);
  }
  /* A JOIN: the round's parameters (with a segment size), an active record, a
   * spare's with its domain (the optional tail) and an active one its node's
   * health check failed (the tail's reason), then its reply: an assignment and
   * a parked spare's refusal (rendezvous/join_wire.h). */
  {
    struct rdzv_join_params jp = {2, 4, 500, 60000, 2}; /* segments of 2 */
    uint8_t params[RDZV_JOIN_PARAMS_MAX_BYTES], r1[64], r2[64], r3[96];
    uint8_t asg[RDZV_JOIN_ASSIGN_BYTES], ref[RDZV_JOIN_ERROR_BYTES];
    struct rdzv_join_full j;
    memset(&j, 0, sizeof(j));
    j.rec.claim = 7;
    j.rec.host = (const uint8_t *)"h0";
    j.rec.host_len = 2;
    j.local_size = 1;
    j.topo = (const uint8_t *)"gpu=0\n";
    j.topo_len = 6;
    rdzv_join_params_encode(&jp, params);
    size_t n1 = rdzv_join_rec_size(&j);
    err |= rdzv_join_rec_encode(&j, r1) != 0;
    j.rec.claim = 8;
    j.rec.host = (const uint8_t *)"s0";
    j.role = RDZV_JOIN_SPARE;
    j.rec.domain = (const uint8_t *)"nvl-1";
    j.rec.domain_len = 5;
    size_t n2 = rdzv_join_rec_size(&j);
    err |= rdzv_join_rec_encode(&j, r2) != 0;
    j.rec.claim = 9;
    j.rec.host = (const uint8_t *)"h1";
    j.role = RDZV_JOIN_ACTIVE;
    j.rec.domain_len = 0;
    j.unhealthy = (const uint8_t *)"node n0: health check exit status 1";
    j.unhealthy_len = 35;
    size_t n3 = rdzv_join_rec_size(&j);
    err |= n3 > sizeof(r3) || rdzv_join_rec_encode(&j, r3) != 0;
    struct rdzv_assignment a = {0, 1, 0, 1, 0, 1};
    rdzv_join_assign_encode(7, &a, asg);
    rdzv_join_error_encode(8, -1046, ref); /* RDZV_EPARKED */
    const struct rdzv_slice round = S("world");
    const struct rdzv_slice vals[] = {
        {params, (uint32_t)rdzv_join_params_size(&jp)},
        {r1, (uint32_t)n1},
        {r2, (uint32_t)n2},
        {r3, (uint32_t)n3}};
    const struct rdzv_slice reply[] = {{asg, sizeof(asg)}, {ref, sizeof(ref)}};
    b.len = 0;
    err |= add(&b, RDZV_MSG_JOIN, 0, 0, 0, 1, &round, 4, vals);
    err |= add(&b, RDZV_MSG_JOIN, RDZV_F_REPLY, 1, 1, 0, NULL, 2, reply);
    err |= write_seed(argv[1], "join", &b);
  }
  rdzv_buf_free(&b);
  return err != 0 ? 1 : 0;
}
