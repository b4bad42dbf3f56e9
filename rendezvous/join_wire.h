/* Encodings of the rendezvous JOIN exchange, carried in the values of a
 * RDZV_MSG_JOIN frame (store/wire/wire.h). Pure: bytes in, structs out; decoded
 * structs point into the input. All integers little-endian.
 *
 *   round params (vals[0] of a JOIN request), 16 or 20 bytes:
 *     u32 min_size   smallest world that may start (elastic), >= 1
 *     u32 max_size   expected world size, >= min_size
 *     u32 last_call_ms  elastic: wait this long after min_size joined
 *     u32 timeout_ms    the whole join's deadline
 *     then, only when the job places whole domains:
 *     u32 segment_hosts  hosts of one domain that make a segment, >= 1
 *     (rendezvous/place.h). A daemon older than it refuses 20 bytes as
 *     malformed (RDZV_EPROTO); a 0 there is refused (the shortest form
 *     is the only one).
 *   join record (vals[1..] of a JOIN request):
 *     u64 claim       identity of the joining process (random)
 *     i32 local_rank  the launcher's local rank, >= 0
 *     i32 local_size  the launcher's local world size, 0 if unknown
 *     u16 host_len, host bytes (1..255)
 *     u16 location_len, location bytes (0..255)
 *     u32 topo_len, topo bytes (0..65535): the topology record text
 *     then, only when the role is not active, a domain is given or the
 *     host failed its health check:
 *     u8 role (0 active, 1 spare), u16 domain_len, domain bytes (0..255):
 *     the host's NVLink (or other) domain, e.g. the ClusterUUID that
 *     `nvidia-smi -q` reports; then, only when the host's node found it
 *     unhealthy (its --health-cmd failed), u16 reason_len, the reason
 *     (1..255 bytes): the root quarantines the host and refuses the
 *     record (RDZV_EQUARANTINED). A daemon older than the tail refuses
 *     such a record as malformed (RDZV_EPROTO); records without it are
 *     unchanged. The shortest form is the only one: a tail that says
 *     nothing (active, no domain, no reason) is refused.
 *   assignment (vals of a JOIN reply), 32 bytes:
 *     u64 claim, i32 rank, i32 world_size, i32 local_rank, i32 local_size,
 *     i32 node_rank, i32 node_count
 *   or, for a join that was refused (e.g. a duplicate claim), 12 bytes:
 *     u64 claim, i32 status (negative)
 * The reply's a is the generation, b the world size. */
#ifndef RDZV_RENDEZVOUS_JOIN_WIRE_H
#define RDZV_RENDEZVOUS_JOIN_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "rendezvous/assign.h"

#define RDZV_JOIN_PARAMS_BYTES 16u     /* without segment_hosts */
#define RDZV_JOIN_PARAMS_MAX_BYTES 20u /* with it */
#define RDZV_JOIN_ASSIGN_BYTES 32u
/* A JOIN's b (a = 0): the newest generation of the round that the sender
 * (a node) has known, a floor for the number of the generation the root
 * opens next. Floors at or past this bound are ignored: a bogus one must
 * not use up the generation space. */
/* generation keys parse up to INT32_MAX */
#define RDZV_JOIN_GEN_FLOOR_MAX ((int64_t)1 << 30)
#define RDZV_JOIN_ERROR_BYTES 12u
#define RDZV_JOIN_MAX_TOPO 65535u

struct rdzv_join_params {
  uint32_t min_size;
  uint32_t max_size;
  uint32_t last_call_ms;
  uint32_t timeout_ms;
  uint32_t segment_hosts; /* 0: no segments (16 bytes on the wire) */
};

/* A join's role: an active member is in the generation's world when the
 * round completes; a spare is kept parked (not in the world, not counted
 * as waiting) until the root needs it in place of a lost active host. */
enum rdzv_join_role { RDZV_JOIN_ACTIVE = 0, RDZV_JOIN_SPARE = 1 };

struct rdzv_join_full {
  struct rdzv_join_rec rec;
  int32_t local_size;
  const uint8_t *topo;
  uint32_t topo_len;
  uint8_t role; /* enum rdzv_join_role; the domain is rec.domain */
  /* Set by the host's node when its health check failed: why (not
   * NUL-terminated, 0..255 bytes; 0: healthy or not checked). */
  const uint8_t *unhealthy;
  uint32_t unhealthy_len;
};

/* Bytes rdzv_join_params_encode writes for p: RDZV_JOIN_PARAMS_BYTES, or
 * RDZV_JOIN_PARAMS_MAX_BYTES when p->segment_hosts > 0. */
size_t rdzv_join_params_size(const struct rdzv_join_params *p);
/* Writes p into out[rdzv_join_params_size(p)]. */
void rdzv_join_params_encode(const struct rdzv_join_params *p, uint8_t *out);
/* Returns 0, or RDZV_EPROTO (wrong size, min 0, min > max, a segment of 0
 * hosts written out). */
int rdzv_join_params_decode(const uint8_t *p, size_t n,
                            struct rdzv_join_params *out);

/* Bytes rdzv_join_rec_encode writes for j. */
size_t rdzv_join_rec_size(const struct rdzv_join_full *j);
/* Writes j into out[rdzv_join_rec_size(j)]. Returns 0, or RDZV_EPROTO if
 * a field is out of range (empty or long host, negative local rank). */
int rdzv_join_rec_encode(const struct rdzv_join_full *j, uint8_t *out);
/* Returns 0 or RDZV_EPROTO (bad lengths, trailing bytes, bad fields). */
int rdzv_join_rec_decode(const uint8_t *p, size_t n,
                         struct rdzv_join_full *out);

void rdzv_join_assign_encode(uint64_t claim, const struct rdzv_assignment *a,
                             uint8_t *out);
void rdzv_join_error_encode(uint64_t claim, int status, uint8_t *out);
/* Decodes an assignment or a refusal: returns 0 (assignment in *out), the
 * refusal's negative status (a status other than RDZV_EPROTO; *out
 * unset), or RDZV_EPROTO (wrong size, values out of range). */
int rdzv_join_assign_decode(const uint8_t *p, size_t n, uint64_t *claim,
                            struct rdzv_assignment *out);

/* The per-host topology value ("rdzv/<round>/g<gen>/topo/<node_rank>"):
 * one line per rank of the host, in rank order: "<rank> <local_rank>
 * <record>\n", the record's newlines written as ';'. The root and (for
 * its own host) a node build it with this one function, so both hold the
 * same bytes. Returns 0 or RDZV_ENOMEM. */
struct rdzv_buf;
int rdzv_topo_append_line(struct rdzv_buf *b, int32_t rank, int32_t local_rank,
                          const uint8_t *topo, uint32_t topo_len);

/* A member to name in an error: its host and its rank (or local rank),
 * -1 when not known. host points into the caller's memory. */
struct rdzv_member_name {
  const uint8_t *host;
  uint32_t host_len;
  int32_t rank;
};

/* Formats members as "host h17 (ranks 136-143), host h18 (ranks 2,5-6)"
 * (what = "ranks" or "local ranks"; a host whose ranks are unknown is
 * named alone), hosts in name order, into out (n >= 4 bytes, always
 * NUL-terminated; "..." ends a text cut short). Sorts m in place by host,
 * then rank. Returns the number of hosts. Pure. */
size_t rdzv_members_describe(struct rdzv_member_name *m, size_t count,
                             const char *what, char *out, size_t n);

/* A generation's key, "rdzv/<round>/g<N>/<rest>" (N decimal, at least
 * one digit, below INT32_MAX; rest may be empty): 0 with *round pointing
 * into key (its bytes between "rdzv/" and "/g") and *gen = N, or -1 for
 * any other key. Pure. */
int rdzv_gen_key_parse(const uint8_t *key, size_t n, const uint8_t **round,
                       size_t *round_len, int64_t *gen);

#endif /* RDZV_RENDEZVOUS_JOIN_WIRE_H */
