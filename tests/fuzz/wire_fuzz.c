/* Fuzz target for the wire decoder (store/wire/wire.c).
 *
 * The input is a byte stream. Frames are decoded from its start one after
 * another until the decoder stops with an error or needs more bytes. For
 * every frame that decodes, the target checks properties that must hold
 * for any input:
 *  - the result code is one the header documents;
 *  - iterating the key and value lists yields exactly n items, all inside
 *    the frame, and rdzv_items_get agrees with rdzv_items_next;
 *  - validation returns a documented code, and never a limit error when
 *    there are no limits;
 *  - re-encoding the decoded message (raw lists, and again as slice
 *    arrays) gives back the frame's exact bytes, and decoding those gives
 *    the same fields (round trip);
 *  - encoding by reference (rdzv_msg_encode_refs, the frame's own bytes
 *    as the span, several minimum sizes and reference caps) refers only
 *    to bytes inside the span, at ascending offsets within what it wrote,
 *    and the bytes it wrote with the referred bytes put back are the
 *    frame's exact bytes;
 *  - every proper prefix of the frame decodes to RDZV_ENEEDMORE, and a
 *    limit one byte under the body length gives RDZV_EFRAME_TOO_BIG;
 *  - a BARRIER's or GATHER's keys[1] (who the members are,
 *    rendezvous/members.h) decodes or is refused with -EINVAL; one that
 *    decodes maps ranks to member indices in range, and the ranks it lists
 *    (when few), encoded again, decode to a spec that lists the same ranks
 *    in the same order;
 *  - a JOIN's values (rendezvous/join_wire.h): vals[0] as the round's
 *    parameters, every value as a join record (with its optional role and
 *    domain tail) and as an assignment or refusal: each decodes or is
 *    refused with RDZV_EPROTO (an assignment: a negative status), and a
 *    record that decodes encodes again to its exact bytes (one encoding);
 *  - the hello's authentication (store/auth/auth.h): for a HELLO with a
 *    nonce, a challenge (HELLO reply with RDZV_F_CHALLENGE) and an AUTH
 *    frame, the proofs over the frame's own job id and nonces are computed
 *    exactly when every length is in range (else -EINVAL and a zeroed
 *    proof), are the same when computed twice, differ between the two
 *    sides and from the frame's proof unless that is the one the secret
 *    gives, and the constant-time compare agrees with memcmp.
 * A failed property aborts, which libFuzzer and the regression driver
 * (fuzz_main.c) report as a crash.
 *
 * In ASan builds each prefix is decoded from a heap copy whose tail is
 * poisoned, so reading one byte past the prefix is caught. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "rendezvous/join_wire.h"
#include "rendezvous/members.h"
#include "store/auth/auth.h"
#include "store/wire/wire.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WIRE_FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(WIRE_FUZZ_ASAN)
#define WIRE_FUZZ_ASAN 1
#endif
#ifdef WIRE_FUZZ_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define FUZZ_MAX_BODY 65536u
#define FUZZ_MAX_FRAMES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "wire_fuzz: property failed: %s\n", what);
    abort();
  }
}

static int is_decode_code(int rc) {
  return rc == 0 || rc == RDZV_ENEEDMORE || rc == RDZV_EPROTO ||
         rc == RDZV_EPROTO_VERSION || rc == RDZV_EFRAME_TOO_BIG;
}

/* Walks one list; every item must lie inside f[0..used). Returns the
 * items as a malloc'ed slice array (for the slice-form re-encode). */
static struct rdzv_slice *list_check(const struct rdzv_items *it,
                                     const uint8_t *f, size_t used) {
  struct rdzv_slice *v = malloc(sizeof(*v) * (it->n != 0 ? it->n : 1));
  struct rdzv_slice s, g;
  size_t pos = 0;
  uint32_t i = 0;

  require(v != NULL, "malloc");
  while (rdzv_items_next(it, &pos, &s)) {
    require(i < it->n, "more items than the count");
    require(s.p >= f && s.n <= used && s.p - f <= (ptrdiff_t)(used - s.n),
            "item outside the frame");
    require(rdzv_items_get(it, i, &g) == 0, "items_get failed");
    require(g.p == s.p && g.n == s.n, "items_get differs from items_next");
    v[i++] = s;
  }
  require(i == it->n, "fewer items than the count");
  require(rdzv_items_get(it, it->n, &g) == RDZV_EPROTO,
          "items_get past the end");
  return v;
}

static int slices_equal(const struct rdzv_items *x,
                        const struct rdzv_items *y) {
  struct rdzv_slice a, b;
  size_t px = 0, py = 0;

  if (x->n != y->n)
    return 0;
  while (rdzv_items_next(x, &px, &a)) {
    if (!rdzv_items_next(y, &py, &b) || a.n != b.n ||
        (a.n != 0 && memcmp(a.p, b.p, a.n) != 0))
      return 0;
  }
  return !rdzv_items_next(y, &py, &b);
}

static int msg_equal(const struct rdzv_msg *x, const struct rdzv_msg *y) {
  return x->type == y->type && x->flags == y->flags && x->req_id == y->req_id &&
         x->status == y->status && x->a == y->a && x->b == y->b &&
         slices_equal(&x->keys, &y->keys) && slices_equal(&x->vals, &y->vals);
}

static void validate_check(const struct rdzv_msg *m) {
  const struct rdzv_wire_limits lim = {64, 1024};
  int rc = rdzv_msg_validate_request(m, &lim);
  int rc_free = rdzv_msg_validate_request(m, NULL);

  require(rc == 0 || rc == RDZV_EPROTO || rc == RDZV_EKEY_TOO_LONG ||
              rc == RDZV_EVALUE_TOO_BIG,
          "validate returned an undocumented code");
  require(rc_free == 0 || rc_free == RDZV_EPROTO,
          "validate without limits returned a limit error");
  require(rc != 0 || rc_free == 0, "limits made a request valid");
  require(strcmp(rdzv_msg_type_name(m->type), "unknown") != 0,
          "decoded type has no name");
}

/* Encodes m and requires the exact bytes f[0..used); then decodes them. */
static void reencode_check(const struct rdzv_msg *m, const uint8_t *f,
                           size_t used) {
  struct rdzv_buf b = {0};
  struct rdzv_msg again;
  size_t used2 = 0;

  require(rdzv_msg_encode(m, &b) == 0, "re-encode failed");
  require(b.len == used && memcmp(b.data, f, used) == 0,
          "re-encode differs from the input frame");
  require(rdzv_msg_decode(b.data, b.len, FUZZ_MAX_BODY, &again, &used2) == 0,
          "re-decode failed");
  require(used2 == used && msg_equal(m, &again), "round trip differs");
  rdzv_buf_free(&b);
}

/* Encodes m by reference to f[0..used) (m points into it) and requires
 * that the written bytes with the references' bytes put back are f. */
static void refs_check(const struct rdzv_msg *m, const uint8_t *f, size_t used,
                       uint32_t min_ref, uint32_t max_refs) {
  struct rdzv_slice span = {f, (uint32_t)used};
  struct rdzv_wire_ref refs[8];
  struct rdzv_buf b = {0};
  uint32_t nrefs = 99, k;
  size_t copied = 0, total;
  const uint8_t pre[3] = {1, 2, 3}; /* refs' offsets count from out's start */

  require(max_refs <= 8, "refs_check: cap");
  require(rdzv_buf_append(&b, pre, sizeof(pre)) == 0, "malloc");
  require(rdzv_msg_encode_refs(m, &b, &span, 1, min_ref, refs, max_refs,
                               &nrefs) == 0,
          "encode by reference failed");
  require(nrefs <= max_refs, "more references than allowed");
  total = b.len - sizeof(pre);
  for (k = 0; k < nrefs; k++) {
    require(refs[k].span == 0, "a reference to an unknown span");
    require(refs[k].n >= min_ref && refs[k].n > 0, "a reference too small");
    require(refs[k].p >= f && refs[k].p - f <= (ptrdiff_t)(used - refs[k].n),
            "a reference outside its span");
    require(refs[k].at >= sizeof(pre) && refs[k].at <= b.len,
            "a reference outside what was written");
    require(k == 0 || refs[k].at >= refs[k - 1].at, "references out of order");
    total += refs[k].n;
  }
  require(total == used, "written and referred bytes do not add up");
  /* Put the frame back together and compare. */
  size_t pos = sizeof(pre);
  for (k = 0; k <= nrefs; k++) {
    size_t end = k < nrefs ? refs[k].at : b.len;
    require(memcmp(b.data + pos, f + copied, end - pos) == 0,
            "written bytes differ from the frame");
    copied += end - pos;
    pos = end;
    if (k < nrefs) {
      require(memcmp(refs[k].p, f + copied, refs[k].n) == 0,
              "referred bytes differ from the frame");
      copied += refs[k].n;
    }
  }
  require(copied == used, "the frame put back has another length");
  rdzv_buf_free(&b);
}

/* Every proper prefix must ask for more bytes. */
static void prefix_check(const uint8_t *f, size_t used) {
  uint8_t *q = malloc(used);
  struct rdzv_msg m;
  size_t k, u;

  require(q != NULL, "malloc");
  memcpy(q, f, used);
#ifdef WIRE_FUZZ_ASAN
  ASAN_POISON_MEMORY_REGION(q, used);
#endif
  for (k = 0; k < used; k++) {
    require(rdzv_msg_decode(q, k, FUZZ_MAX_BODY, &m, &u) == RDZV_ENEEDMORE,
            "a proper prefix did not return ENEEDMORE");
#ifdef WIRE_FUZZ_ASAN
    ASAN_UNPOISON_MEMORY_REGION(q + k, 1);
#endif
  }
  require(rdzv_msg_decode(q, used, FUZZ_MAX_BODY, &m, &u) == 0 && u == used,
          "the whole frame did not decode from a copy");
  free(q);
}

/* The ranks spec lists, in member order, into out (n slots); how many. */
static size_t members_expand(const struct rdzv_members *sp, int32_t *out,
                             size_t n) {
  size_t k = 0;
  for (uint32_t r = 0; r < sp->nruns; r++)
    for (uint32_t i = 0; i < sp->runs[r].len && k < n; i++)
      out[k++] =
          (int32_t)(sp->runs[r].first + (uint64_t)i * sp->runs[r].stride);
  return k;
}

static void members_check(const struct rdzv_msg *m) {
  struct rdzv_slice k;
  struct rdzv_members sp, again;
  if ((m->type != RDZV_MSG_BARRIER && m->type != RDZV_MSG_GATHER) ||
      m->keys.n < 2 || rdzv_items_get(&m->keys, 1, &k) != 0)
    return;
  int rc = rdzv_members_decode(k.p, k.n, &sp);
  require(rc == 0 || rc == -EINVAL, "members decode: undocumented code");
  if (rc != 0)
    return;
  for (uint32_t r = 0; r < sp.nruns; r++) {
    int64_t i = rdzv_members_index(&sp, sp.runs[r].first);
    require(i >= 0 && i < sp.nmembers, "a run's first rank is no member");
  }
  require(rdzv_members_index(&sp, -1) == -1, "rank -1 is a member");
  (void)rdzv_members_contributes(&sp, (uint64_t)m->b, sp.runs[0].first);
  enum { FEW = 4096 };
  if (sp.nmembers > FEW)
    return;
  int32_t *a = malloc(FEW * sizeof(*a)), *b = malloc(FEW * sizeof(*b));
  uint8_t enc[RDZV_MEMBERS_MAX_BYTES];
  require(a != NULL && b != NULL, "out of memory");
  size_t n = members_expand(&sp, a, FEW);
  require(n == sp.nmembers, "runs do not add up to nmembers");
  int el = rdzv_members_encode(a, (int64_t)n, sp.kind, enc, sizeof(enc));
  require(el > 0 || el == -E2BIG, "members encode: undocumented code");
  if (el > 0) {
    require(rdzv_members_decode(enc, (size_t)el, &again) == 0,
            "an encoding does not decode");
    require(members_expand(&again, b, FEW) == n &&
                memcmp(a, b, n * sizeof(*a)) == 0 && again.kind == sp.kind,
            "members round trip changed the ranks");
  }
  free(a);
  free(b);
}

static void auth_check(const struct rdzv_msg *m) {
  static const uint8_t key[] = "fuzz-secret-of-a-job";
  struct rdzv_slice job = {(const uint8_t *)"fuzz-job", 8}, a = {NULL, 0},
                    b = {NULL, 0};
  uint8_t pad[RDZV_AUTH_NONCE_BYTES] = {0}, s1[32], s2[32], c1[32];
  static const uint8_t zero[32];
  if (m->type == RDZV_MSG_HELLO && (m->flags & RDZV_F_REPLY) == 0) {
    rdzv_items_get(&m->keys, 0, &job);
    rdzv_items_get(&m->vals, 0, &a); /* the peer's nonce */
  } else if (m->type == RDZV_MSG_HELLO && (m->flags & RDZV_F_CHALLENGE)) {
    rdzv_items_get(&m->vals, 0, &a); /* the daemon's nonce, and proof */
    rdzv_items_get(&m->vals, 1, &b);
  } else if (m->type == RDZV_MSG_AUTH) {
    rdzv_items_get(&m->vals, 0, &b); /* the peer's proof */
  } else {
    return;
  }
  /* A nonce shorter than the protocol's is not a nonce: the proof is
   * computed over a padded copy only when it has the right length. */
  const uint8_t *n1 = a.p != NULL && a.n == RDZV_AUTH_NONCE_BYTES ? a.p : pad;
  int ok = job.n >= 1 && job.n <= RDZV_AUTH_JOB_MAX_BYTES;
  int r1 = rdzv_auth_proof(key, sizeof(key) - 1, RDZV_AUTH_SERVER, job.p, job.n,
                           0, n1, pad, s1);
  int r2 = rdzv_auth_proof(key, sizeof(key) - 1, RDZV_AUTH_SERVER, job.p, job.n,
                           0, n1, pad, s2);
  int r3 = rdzv_auth_proof(key, sizeof(key) - 1, RDZV_AUTH_CLIENT, job.p, job.n,
                           0, n1, pad, c1);
  require(r1 == (ok ? 0 : -EINVAL) && r2 == r1 && r3 == r1,
          "auth proof: wrong code for the lengths");
  if (!ok) {
    require(memcmp(s1, zero, 32) == 0 && memcmp(c1, zero, 32) == 0,
            "auth proof: a refused proof is not zeroed");
    return;
  }
  require(memcmp(s1, s2, 32) == 0, "auth proof: not deterministic");
  require(memcmp(s1, c1, 32) != 0, "auth proof: both sides give one proof");
  if (b.p != NULL && b.n == RDZV_AUTH_PROOF_BYTES) {
    require(rdzv_auth_equal(b.p, s1, 32) == (memcmp(b.p, s1, 32) == 0) &&
                rdzv_auth_equal(b.p, c1, 32) == (memcmp(b.p, c1, 32) == 0),
            "auth compare disagrees with memcmp");
  }
}

static void join_check(const struct rdzv_msg *m) {
  struct rdzv_slice v;
  size_t pos = 0;
  if (m->type != RDZV_MSG_JOIN)
    return;
  if (rdzv_items_get(&m->vals, 0, &v) == 0) {
    struct rdzv_join_params p;
    int rc = rdzv_join_params_decode(v.p, v.n, &p);
    require(rc == 0 || rc == RDZV_EPROTO, "join params: undocumented code");
    require(rc != 0 || (p.min_size >= 1 && p.min_size <= p.max_size),
            "join params: decoded out of range");
  }
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct rdzv_join_full j;
    int rc = rdzv_join_rec_decode(v.p, v.n, &j);
    require(rc == 0 || rc == RDZV_EPROTO, "join record: undocumented code");
    if (rc == 0) {
      require(j.role <= RDZV_JOIN_SPARE, "join record: role out of range");
      require(rdzv_join_rec_size(&j) == v.n, "join record: size differs");
      uint8_t *enc = malloc(v.n ? v.n : 1);
      require(enc != NULL, "out of memory");
      require(rdzv_join_rec_encode(&j, enc) == 0,
              "join record: a decoded record does not encode");
      require(memcmp(enc, v.p, v.n) == 0,
              "join record: round trip changed its bytes");
      free(enc);
    }
    uint64_t claim;
    struct rdzv_assignment a;
    rc = rdzv_join_assign_decode(v.p, v.n, &claim, &a);
    require(rc <= 0, "join assignment: positive code");
  }
}

static void frame_check(const struct rdzv_msg *m, const uint8_t *f,
                        size_t used) {
  struct rdzv_slice *kv = list_check(&m->keys, f, used);
  struct rdzv_slice *vv = list_check(&m->vals, f, used);
  struct rdzv_msg sliced = *m;
  struct rdzv_msg tmp;
  size_t u;

  validate_check(m);
  members_check(m);
  join_check(m);
  auth_check(m);
  reencode_check(m, f, used);
  refs_check(m, f, used, 1, 8);
  sliced.keys.v = kv;
  sliced.vals.v = vv;
  reencode_check(&sliced, f, used);
  refs_check(&sliced, f, used, 1, 8);
  refs_check(&sliced, f, used, 1, 1);
  refs_check(&sliced, f, used, 3, 2);
  refs_check(&sliced, f, used, 64, 8);
  free(kv);
  free(vv);
  prefix_check(f, used);
  require(rdzv_msg_decode(f, used, used - RDZV_WIRE_HEADER_BYTES - 1, &tmp,
                          &u) == RDZV_EFRAME_TOO_BIG,
          "a limit under the body length did not give EFRAME_TOO_BIG");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t off = 0;
  int frames;

  for (frames = 0; frames < FUZZ_MAX_FRAMES; frames++) {
    struct rdzv_msg m;
    size_t used = 0;
    int rc = rdzv_msg_decode(data + off, size - off, FUZZ_MAX_BODY, &m, &used);

    require(is_decode_code(rc), "decode returned an undocumented code");
    if (rc != 0)
      break;
    require(used >= RDZV_WIRE_HEADER_BYTES + RDZV_WIRE_MIN_BODY_BYTES &&
                used <= size - off,
            "used out of range");
    frame_check(&m, data + off, used);
    off += used;
  }
  return 0;
}
