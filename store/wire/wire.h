/* rdzv native wire protocol: a pure codec (bytes in, structs out).
 *
 * Nothing here touches a socket, a clock or a global. Encoding appends to a
 * caller-owned growable buffer (struct rdzv_buf); decoding never allocates:
 * the decoded message points into the caller's input bytes.
 *
 * Frame (all integers little-endian, fixed width):
 *
 *   offset size field
 *   0      4    magic      0x565A4452 ("RDZV" as bytes 52 44 5A 56)
 *   4      1    version    RDZV_WIRE_VERSION
 *   5      1    type       enum rdzv_msg_type
 *   6      2    flags      RDZV_F_*
 *   8      4    req_id     chosen by the requester, echoed in the reply
 *   12     4    body_len   bytes that follow; checked against a limit
 *   16     ...  body
 *
 * Body (the same layout for every type; each type uses the fields it needs,
 * see enum rdzv_msg_type):
 *
 *   i32 status                 0 in requests; the result in replies
 *   i64 a                      type-specific number
 *   i64 b                      type-specific number
 *   u32 nkeys, then nkeys x { u32 len, len bytes }
 *   u32 nvals, then nvals x { u32 len, len bytes }
 *
 * The body must be consumed exactly: trailing bytes are RDZV_EPROTO. No
 * struct is ever sent as raw memory. */
#ifndef RDZV_STORE_WIRE_H
#define RDZV_STORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RDZV_WIRE_MAGIC 0x565A4452u
#define RDZV_WIRE_VERSION 1u
#define RDZV_WIRE_HEADER_BYTES 16u
/* Smallest body: status + a + b + nkeys + nvals. */
#define RDZV_WIRE_MIN_BODY_BYTES 28u

/* Frame flags. */
#define RDZV_F_REPLY 0x0001u      /* this frame answers req_id */
#define RDZV_F_WRITE_ONCE 0x0002u /* set/mset: the key(s) are write-once */
/* collective reply: a newer request of the same peer carries the result */
#define RDZV_F_SUPERSEDED 0x0004u
/* join reply: some items now, the request stays open for the rest */
#define RDZV_F_PARTIAL 0x0008u
#define RDZV_F_LEAVE 0x0010u /* abort: a clean leave, abort nothing */
/* coll_status: fail the collective for every member unless it completed */
#define RDZV_F_GIVE_UP 0x0020u
/* set, cas, delete, mset, append: b is an op id (nonzero, unique per sending
 * node); the root applies a re-sent one once and answers it as the first
 * time (a node sends again what a lost connection carried). add: its parts
 * carry op ids (see RDZV_MSG_ADD) */
#define RDZV_F_OPID 0x0040u
/* join from a node: with these records the sender's whole subtree has joined
 * the round (its ranks and every child node's subtree, as far as it was told
 * how many: rdzvd --children), so its parent need not wait for more from it */
#define RDZV_F_COMPLETE 0x0100u
/* hello reply: vals[0] = the daemon's nonce, vals[1] = its proof of the
 * job's secret; the peer answers with RDZV_MSG_AUTH */
#define RDZV_F_CHALLENGE 0x0200u
/* get, mget, wait from a node: keep a copy of the key(s) (value or absence)
 * and register it with me; in the reply: granted, the parent holds this node
 * registered and invalidates the copy before any write to the key is
 * acknowledged (RDZV_MSG_INVAL). What it covers: GET, OK or ENOKEY: the key;
 * MGET OK and WAIT OK: every key; MGET ENOKEY: the missing keys (keys), as
 * absent */
#define RDZV_F_COPY 0x0400u
#define RDZV_F_ALL 0x0800u /* inval reply: every copy goes */
/* ping reply from a node: its own link toward the root for the job is down
 * (not attached, or its parent said so); absent: reachable as far as it
 * knows (a root never sets it). Also on a probe's reply (RDZV_ROLE_PROBE):
 * the same of the job probed for, or (a job it holds nothing of) of all its
 * links: no place to return to */
#define RDZV_F_ROOT_AWAY 0x1000u
/* hello reply: b is the incarnation of a service whose roots share it (an
 * etcd-backed root): a peer compares it with the one any of those roots
 * gave, not only this address */
#define RDZV_F_SHARED_INC 0x0080u

/* Message types. "keys"/"vals" name the body's two item lists.
 * Requests and replies share a type; replies carry RDZV_F_REPLY. */
enum rdzv_msg_type {
  /* keys[0] = job id, keys[1] = peer name (for logs), a = role
   * (enum rdzv_peer_role), b = a node's own incarnation (0: not told; a
   * daemon refuses a hello with its own: it reached itself). Reply:
   * status, a = the replier's largest frame
   * body (a node splits what it combines to fit), b = its incarnation
   * (changes when it restarts), keys[0] = its liveness timeout in ms (u32
   * LE: a child node pings at least three times within it), vals = its
   * chain of ancestors (its parent first; none at the root). Must be the
   * first frame.
   * Authentication (store/auth/auth.h has the proofs): a peer that holds
   * the job's secret sends vals[0] = its fresh nonce (32 bytes). A daemon
   * that holds secrets answers every hello with a nonce (whether it serves
   * that job or not: it reveals nothing) with a challenge: flag
   * CHALLENGE, status 0, vals[0] = its fresh nonce, vals[1] = its proof
   * (32 bytes; random when it holds no secret of that job), no other
   * field; and a hello without a nonce with RDZV_EAUTH. The peer checks
   * the proof (a daemon that cannot prove the secret is not its job's:
   * the peer refuses it, RDZV_EAUTH) and sends RDZV_MSG_AUTH. A peer with
   * a secret refuses a reply without a challenge. A daemon's own hellos
   * to its parent carry nonces it can recognize (rdzv_auth_own_nonce),
   * and it answers a hello carrying one with RDZV_EAUTH, not a challenge
   * (its proof would be what it takes, as a child, for its parent's: a
   * fake parent reflecting the hello). Until the hello is admitted, rdzvd
   * holds a frame to --max-hello-bytes (RDZV_EFRAME_TOO_BIG). */
  RDZV_MSG_HELLO = 1,
  /* keys[0], vals[0]; flag WRITE_ONCE. Reply: status. */
  RDZV_MSG_SET = 2,
  /* keys[0]; flag WRITE_ONCE = the reader knows the key is write-once, so
   * a node may join it to an identical read in flight. Reply: vals[0];
   * a bit 0 = key is write-once; or ENOKEY. */
  RDZV_MSG_GET = 3,
  /* keys[0..n), a = timeout in milliseconds (relative; clocks of hosts
   * differ). Reply: OK with vals = values of the keys (may be empty when
   * the replier is a node), a bit i = key i is write-once (i < 63); or
   * EDEADLINE with keys = the keys still missing. */
  RDZV_MSG_WAIT = 4,
  /* keys[0], a = delta. Reply: a = value after this add.
   * From a node (flag OPID): vals = the parts it combined, each 16 bytes
   * { u64 op id, i64 delta } (LE), applied in order, each once however
   * often it is sent (a is unused). Reply: a = the value after the last,
   * vals = one 8-byte i64 (LE) per part, the value after that part. */
  RDZV_MSG_ADD = 5,
  /* keys[0], vals[0] = expected, vals[1] = desired. An empty expected
   * value matches a missing key. Reply: vals[0] = current value after the
   * call; status OK when swapped, ECAS_FAILED otherwise. */
  RDZV_MSG_CAS = 6,
  /* keys[0]. Reply: a = 1 if a key was deleted, else 0. */
  RDZV_MSG_DELETE = 7,
  /* keys[0..n). Reply: vals[0..n); or ENOKEY with keys = missing keys. */
  RDZV_MSG_MGET = 8,
  /* keys[0..n), vals[0..n); flag WRITE_ONCE. Reply: status. */
  RDZV_MSG_MSET = 9,
  /* keys[0], vals[0]: appended to the key, created if missing. */
  RDZV_MSG_APPEND = 10,
  /* no fields. Reply: a = number of keys in the job's namespace. */
  RDZV_MSG_NKEYS = 11,
  /* keys[0] = collective name, b = member count. vals = contributions,
   * each { u64 member id (LE) in 0 .. b-1, data bytes } (barrier: no
   * data). A rank
   * sends one; a node sends what its subtree gathered. keys[1]
   * (optional) = who the members are (rendezvous/members.h: their ranks
   * and how member ids map to them), passed on unchanged: a node whose
   * subtree's ranks of that generation it knows (keys[0] begins
   * "rdzv/<round>/g<N>/" and that join went through it) forwards at the
   * subtree's last contribution. Reply (when all
   * b members contributed): OK, a = b, and for GATHER vals = every
   * contribution in member-id order. */
  RDZV_MSG_BARRIER = 12,
  RDZV_MSG_GATHER = 13,
  /* no fields. Reply: vals[0] = the replier's statistics, one JSON
   * object. */
  RDZV_MSG_STATS = 14,
  /* Reply-only: the peer broke a rule; status says which, keys[0] may
   * hold a message, req_id names the offending request (0 when the rule
   * concerns the connection: hello, framing, limits on connections). The
   * connection is closed after it. */
  RDZV_MSG_ERROR = 15,
  /* Rendezvous join (rendezvous/join_wire.h has the value encodings):
   * keys[0] = round name, vals[0] = round params, vals[1..] = join
   * records (a rank sends one; a node what its subtree gathered); a = 0,
   * or a generation: a node re-sending, after it reconnected, members that
   * completed that generation (bound to the new path if the generation
   * still stands, else EABORTED; never a new generation). b (with a = 0,
   * from a node; 0 otherwise) = the newest generation of the round the
   * node has known: a root opening the next generation numbers it above
   * b, so that after a root restarted without its state (in memory) no
   * generation number, and no key under rdzv/<round>/g<N>/, names two
   * worlds (older roots ignore b). Reply when the round completes: a =
   * generation, b = world size, vals = one
   * assignment per join record the requester sent; or an error with
   * keys[0] = a message naming what is missing or duplicated. */
  RDZV_MSG_JOIN = 16,
  /* keys[0] = round name, keys[1] = reason (optional), a = generation.
   * Aborts that generation for every rank: pending joins and waits on its
   * keys fail with RDZV_EABORTED and the reason. vals (optional, from a
   * node that lost them) = the claims (u64 LE) of the members the abort is
   * about: a daemon that holds every one of them on another live
   * connection refuses it as stale (RDZV_EFENCED). Flag LEAVE: b = the
   * leaving rank's claim (0: a node whose job ended). Reply: status. */
  RDZV_MSG_ABORT = 17,
  /* Who is still missing from a barrier or gather (asked after a
   * deadline, to name them). keys[0] = collective name, a = its type
   * (RDZV_MSG_BARRIER or RDZV_MSG_GATHER), b = the most missing member ids
   * wanted, 1 .. RDZV_COLL_STATUS_MAX_IDS; keys[1] (optional) = why.
   * Flag GIVE_UP (a member whose deadline passed): unless the collective
   * has completed, the root fails it for good: every member waiting, and
   * every later one, gets RDZV_EDEADLINE with keys[0] = why and who was
   * missing. A node first forwards what it holds of that collective, then
   * the question, on the same ordered link. Reply from the root: a =
   * members that contributed, b = member count (0: no contribution seen,
   * the count is unknown), vals = the missing member ids in ascending
   * order, each a u64 (LE), at most the number asked for; a == b > 0 means
   * it completed (with GIVE_UP: the giver arrived in time after all). */
  RDZV_MSG_COLL_STATUS = 18,
  /* Liveness (a heartbeat): no fields, needs no job state. Reply: status
   * 0. A node sends one to its parent when it has heard nothing for
   * --heartbeat-ms, and a parent closes a child node that sent nothing for
   * --liveness-timeout-ms; a client library may ping its daemon the same
   * way while it waits. */
  RDZV_MSG_PING = 19,
  /* keys[0] (optional) = a prefix. Reply: keys = every key of the job
   * that starts with it (every key without one), in no particular order,
   * a = how many; or RDZV_EFRAME_TOO_BIG when they would not fit in one
   * frame. A node forwards it (the root holds the truth). Used by the
   * TCPStore front end's LIST_KEYS. */
  RDZV_MSG_KEYS = 20,
  /* The second frame after a hello that was challenged (flag CHALLENGE):
   * vals[0] = the peer's proof (32 bytes). Wrong, missing, or sent when
   * no challenge was: RDZV_EAUTH (an ERROR frame, the connection closed;
   * it says nothing of whether the job exists). Otherwise its reply is
   * what the hello's would have been without authentication (a refusal,
   * or status 0 with a, b, keys[0], vals and flags as a hello reply
   * has them). */
  RDZV_MSG_AUTH = 21,
  /* A child node's invalidation stream (store/daemon/keys/copies.h):
   * b = the last invalidation sequence number it has applied, each copy
   * it named dropped here and below (0 at first; per connection). The
   * parent takes that as the acknowledgment of every invalidation up to
   * b and holds the request until it has more for this child. Reply: a =
   * the sequence number of the newest invalidation it carries, keys = the
   * keys whose copies go (flag ALL: every copy). A node keeps one in
   * flight while its connection is ready. PING replies to a node tell
   * its lease: a = milliseconds from when the PING was sent during which
   * its copies may be served (0: none, given while the node has not
   * acknowledged every invalidation issued to it), b = the newest
   * invalidation sequence number issued to it, which it must have
   * acknowledged before that PING for the lease to count. */
  RDZV_MSG_INVAL = 22,
  /* A TCPStore key space at the daemon the client is connected to (never
   * forwarded): keys[0] = a prefix (1..200 bytes). Reply: a = the port of
   * a listener on 127.0.0.1 whose PyTorch TCPStore clients' keys live in
   * the connection's job under that prefix (the same port for the same
   * job and prefix while any connection that asked for it is open); or
   * RDZV_EBAD_ROLE (none served here), RDZV_ETOO_MANY_CONNECTIONS (at
   * --tcpstore-spaces), -EINVAL, with keys[0] = why. */
  RDZV_MSG_TS_SPACE = 23,
};
#define RDZV_MSG_TYPE_MAX 23
/* Most member ids one COLL_STATUS reply names. */
#define RDZV_COLL_STATUS_MAX_IDS 4096

enum rdzv_peer_role {
  RDZV_ROLE_CLIENT = 0, /* a rank or an operator tool */
  RDZV_ROLE_NODE = 1,   /* a child node agent */
  /* A node's probe at its start, before any job (a HELLO with a = 2,
   * keys[0] = its --job or empty, keys[1] = its name, b = its
   * incarnation; no nonce, no proof): the daemon answers the chain of
   * daemons above it (vals, nearest first, as a hello reply's; a = 1 from
   * a standby root, which would refuse a job's hello; b = the incarnation
   * a job's hello reply would give now, 0 from older daemons; flag
   * ROOT_AWAY: not ready to take the job's links back) and closes
   * the connection; it refuses a probe from itself (RDZV_EHELLO) and, with
   * --job, one naming another job (RDZV_EJOB_MISMATCH). Older daemons
   * refuse the role (RDZV_EBAD_ROLE; an empty job: RDZV_EJOB_ID_MISSING). The
   * chain is the daemons' addresses a launcher passes in --parent; it is told
   * without authentication, and a node replaces it with what its first
   * authenticated hello tells. */
  RDZV_ROLE_PROBE = 2,
};

/* A borrowed byte string. */
struct rdzv_slice {
  const uint8_t *p;
  uint32_t n;
};

/* A list of byte strings. For encoding set either v (an array of n slices)
 * or raw/raw_len (the already-encoded list body: n x {u32 len, bytes},
 * e.g. taken from a decoded message to forward it unchanged). Decoding
 * sets raw/raw_len and leaves v NULL; read items with rdzv_items_next. */
struct rdzv_items {
  uint32_t n;
  const struct rdzv_slice *v;
  const uint8_t *raw;
  size_t raw_len;
};

struct rdzv_msg {
  uint8_t type;   /* enum rdzv_msg_type */
  uint16_t flags; /* RDZV_F_* */
  uint32_t req_id;
  int32_t status;
  int64_t a;
  int64_t b;
  struct rdzv_items keys;
  struct rdzv_items vals;
};

/* Growable output buffer, owned by the caller. Zero-initialize it; free the
 * memory with rdzv_buf_free. */
struct rdzv_buf {
  uint8_t *data;
  size_t len;
  size_t cap;
};

/* Ensures room for `more` bytes beyond len. Returns 0 or RDZV_ENOMEM. */
int rdzv_buf_reserve(struct rdzv_buf *b, size_t more);
/* Appends n bytes. Returns 0 or RDZV_ENOMEM. */
int rdzv_buf_append(struct rdzv_buf *b, const void *p, size_t n);
/* Drops the first n bytes (n <= len), keeping the rest. */
void rdzv_buf_consume(struct rdzv_buf *b, size_t n);
/* Frees the memory and zeroes the struct. NULL-safe. */
void rdzv_buf_free(struct rdzv_buf *b);

/* Appends one encoded frame of msg to out. Returns 0, RDZV_ENOMEM,
 * RDZV_EFRAME_TOO_BIG if the body would not fit in the u32 length, or
 * RDZV_EPROTO for an item list that cannot be encoded (raw list not
 * matching its count, n > 0 with neither v nor raw). On error out is
 * unchanged. */
int rdzv_msg_encode(const struct rdzv_msg *msg, struct rdzv_buf *out);

/* Bytes an encoded frame refers to instead of holding a copy: they belong
 * in the frame right before out->data[at] (at == the frame's end: after
 * its last byte in out), in the order the references are listed. */
struct rdzv_wire_ref {
  size_t at;        /* offset in out->data (the buffer given to encode) */
  uint32_t span;    /* index of the span that holds them */
  const uint8_t *p; /* the caller's bytes: p[0..n) */
  uint32_t n;
};

/* Encodes msg as rdzv_msg_encode does, except that bytes lying wholly
 * inside one of spans[0..nspans) (caller-owned memory, e.g. reference-
 * counted values) are not copied when there are at least min_ref of them
 * (and at least 1): an item's bytes (slice lists) or a raw list's whole
 * body (after its count). For each, refs[k] (k < max_refs; later ones are
 * copied) says where they go; *nrefs gets the number used (0..max_refs),
 * in ascending order of at. out then holds the frame without those bytes:
 * writing out's new bytes with each reference's bytes inserted at its
 * offset gives exactly the bytes rdzv_msg_encode would append. The
 * caller keeps the spans' bytes alive and unchanged until those are
 * written. Pure: reads only msg, the spans' bounds and the bytes it
 * copies. refs may be NULL only with max_refs 0. Returns what
 * rdzv_msg_encode returns; on error out is unchanged and *nrefs is 0. */
int rdzv_msg_encode_refs(const struct rdzv_msg *msg, struct rdzv_buf *out,
                         const struct rdzv_slice *spans, uint32_t nspans,
                         uint32_t min_ref, struct rdzv_wire_ref *refs,
                         uint32_t max_refs, uint32_t *nrefs);

/* Decodes the frame at the start of p[0..n).
 * Returns:
 *   0                    *out is filled (pointing into p), *used = frame
 *                        size in bytes;
 *   RDZV_ENEEDMORE       p holds a valid prefix of a frame; read more;
 *   RDZV_EPROTO          bad magic, unknown type, bad lengths, trailing
 *                        bytes in the body;
 *   RDZV_EPROTO_VERSION  the version byte differs from RDZV_WIRE_VERSION;
 *   RDZV_EFRAME_TOO_BIG  body_len > max_body (reported as soon as the
 *                        16-byte header has arrived, before the body).
 * Never reads outside p[0..n). On error *out and *used are unspecified. */
int rdzv_msg_decode(const uint8_t *p, size_t n, size_t max_body,
                    struct rdzv_msg *out, size_t *used);

/* Appends one item (u32 length, then the n bytes) to an encoded item
 * list in b, the form of struct rdzv_items.raw. Returns 0 or RDZV_ENOMEM. */
int rdzv_items_append(struct rdzv_buf *b, const void *p, uint32_t n);

/* Iterates a decoded (raw) or encoding (v) item list. *pos starts at 0 and
 * is advanced; returns 1 and fills *out while items remain, 0 at the end.
 * The list must come from rdzv_msg_decode or be well formed. */
int rdzv_items_next(const struct rdzv_items *it, size_t *pos,
                    struct rdzv_slice *out);

/* Returns item i (0-based) of the list in *out: O(i) for raw lists.
 * Returns 0, or RDZV_EPROTO if i >= it->n. */
int rdzv_items_get(const struct rdzv_items *it, uint32_t i,
                   struct rdzv_slice *out);

/* Limits a server applies to a decoded request. */
struct rdzv_wire_limits {
  uint32_t max_key_bytes;
  uint32_t max_value_bytes;
};

/* Longest members spec (keys[1] of BARRIER and GATHER) that passes
 * validation whatever max_key_bytes is: rendezvous/members.h's
 * RDZV_MEMBERS_MAX_BYTES (9 + 12 * 64). */
#define RDZV_WIRE_MEMBERS_MAX_BYTES 777u
/* Longest reason text (keys[1] of ABORT and COLL_STATUS) that passes
 * validation whatever max_key_bytes is: a reason is no key, and an abort
 * must not be refused (the connection dropped) for explaining itself. */
#define RDZV_WIRE_REASON_MAX_BYTES 1024u

/* Checks that a decoded request has the shape its type requires (numbers
 * of keys and values, non-empty keys, contribution sizes) and that keys
 * and values are within limits (a collective's keys[1], its members
 * spec, within max_key_bytes or RDZV_WIRE_MEMBERS_MAX_BYTES, whichever is
 * larger; an ABORT's or COLL_STATUS's keys[1], a reason, within
 * max_key_bytes or RDZV_WIRE_REASON_MAX_BYTES). Pure.
 * Returns 0, RDZV_EPROTO (wrong shape, reply flag set on a request),
 * RDZV_EKEY_TOO_LONG or RDZV_EVALUE_TOO_BIG. */
int rdzv_msg_validate_request(const struct rdzv_msg *msg,
                              const struct rdzv_wire_limits *lim);

/* Lower-case operation name of a type ("set", "wait", ...), or "unknown".
 * Used for statistics and logs. */
const char *rdzv_msg_type_name(int type);

/* Little-endian helpers for contribution ids (u64 at the start of a
 * BARRIER/GATHER item). */
uint64_t rdzv_load_u64le(const uint8_t *p);
void rdzv_store_u64le(uint8_t *p, uint64_t v);

#ifdef __cplusplus
}
#endif
#endif /* RDZV_STORE_WIRE_H */
