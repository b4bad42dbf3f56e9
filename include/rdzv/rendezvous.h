/* rdzv rendezvous: what a rank calls at start-up to join its job, learn
 * its rank, get NCCL unique id(s) and read the topology.
 *
 * Every rank of a job joins one named round (default "world") through its
 * host's node agent. The root completes the round at the expected world
 * size (or, for an elastic job, between min_size and world_size after a
 * last call), assigns ranks (hosts ordered by network location, then
 * name, both in natural order: digit runs compare as numbers, so n2 comes
 * before n10 and pod-9 before pod-10; ranks contiguous per host by local
 * rank) and answers every rank,
 * down the tree, with its rank, sizes and the round's generation. Keys of a
 * generation are named "rdzv/<round>/g<generation>/..." (never from a
 * counter a process keeps): a request for an older generation fails with
 * RDZV_ESTALE_GENERATION, and an aborted generation's with RDZV_EABORTED.
 *
 * Threads: as rdzv/client.h (no thread is started; one thread at a time
 * per handle). Ownership: as rdzv/rdzv.h. */
#ifndef RDZV_RENDEZVOUS_H
#define RDZV_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv/client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rdzv_rendezvous rdzv_rendezvous_t;

#define RDZV_RENDEZVOUS_OPTS_VERSION 3u

/* A join's membership role (rdzv_rendezvous_opts.role). */
#define RDZV_MEMBER_ACTIVE 0     /* in the world when the round completes */
#define RDZV_MEMBER_SPARE 1      /* parked until a place opens (see join) */
#define RDZV_UNIQUE_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES, nccl.h */
/* A host quarantined for a job is a key of the job: this prefix, then the
 * host's name; its value is the reason. The root writes it when the host's
 * node finds it unhealthy (rdzvd --health-cmd) and refuses every join of
 * the host while it exists (RDZV_EQUARANTINED); deleting it (`rdzvctl
 * quarantine clear HOST`) lets the host join again, writing it (`rdzvctl
 * quarantine add HOST REASON`) keeps a host out by hand. */
#define RDZV_QUARANTINE_KEY_PREFIX "rdzv-quarantine/"

struct rdzv_rendezvous_opts {
  size_t size;          /* set by rdzv_rendezvous_opts_init */
  uint32_t version;     /* set by rdzv_rendezvous_opts_init */
  const char *addr;     /* the node's address (rdzv_client_opts syntax) */
  const char *job_id;   /* required, non-empty, <= 255 bytes */
  const char *round;    /* round name, 1..127 bytes, no '/'; "world" */
  const char *host;     /* host identity, 1..255 bytes; NULL: hostname */
  const char *location; /* network location labels, e.g. "pod1/rack7",
                           <= 255 bytes; NULL: none */
  int32_t local_rank;   /* the launcher's local rank (>= 0); -1 unset */
  int32_t local_size;   /* ranks the launcher starts on this host; 0 unset */
  int32_t world_size;   /* expected world size (elastic: the maximum) */
  int32_t min_size;     /* elastic minimum; 0: world_size (not elastic) */
  double last_call_s;   /* elastic: wait this long once min_size joined;
                           default 5 */
  double timeout_s;     /* deadline of the join, seconds; default 60 */
  const char *topology; /* this rank's topology record, "key=value" lines
                           (<= 64 KiB); NULL: detected (rdzv_topology_detect) */
  /* The job's secret file (rdzv_client_opts.secret_file: proved in the
   * hello, never sent); NULL: the client library's own default, the file
   * RDZV_SECRET_FILE names, else RDZV_SECRET, else none. */
  const char *secret_file;
  /* Version 2 (a caller built against version 1 passes the smaller size
   * and gets these defaults): */
  int32_t role;       /* RDZV_MEMBER_ACTIVE (default) or RDZV_MEMBER_SPARE:
                         a spare host is kept out of the world (and not
                         counted as waiting) until the root needs it in
                         place of a lost host; rdzv_rendezvous_join then
                         returns with its place */
  const char *domain; /* the host's NVLink (or other) domain, <= 255
                         bytes: a lost host's place goes to a spare of its
                         domain first; NULL: none; "auto": read from NVML
                         (rdzv_domain_detect), none where it finds none */
  /* Version 3: */
  int32_t segment_hosts; /* whole domains: the world is made of segments
                            of this many hosts of one domain each, node
                            ranks filling a domain's segments in turn; a
                            segment that loses a host is repaired by a
                            host of its domain, else given up whole (its
                            other hosts parked) for a whole segment of
                            spares; a domain's hosts past its last whole
                            segment join only while the minimum needs
                            them. 0 (default): hosts placed one by one.
                            The round's first join sets it for the
                            generation. The domains used are published in
                            "rdzv/<round>/g<gen>/domains". */
};

/* Fills *o with defaults (nothing read from the environment). */
void rdzv_rendezvous_opts_init(struct rdzv_rendezvous_opts *o);

/* Fills the fields still unset from the launcher's environment, the one
 * place rdzv reads it: addr from RDZV_ADDR; role from RDZV_ROLE ("active"
 * or "spare"); domain from RDZV_DOMAIN; segment_hosts from
 * RDZV_SEGMENT_HOSTS; job_id from RDZV_JOB, else
 * TORCHELASTIC_RUN_ID (if not "none"), else SLURM_JOB_ID; host from
 * RDZV_HOST; location from RDZV_LOCATION; local_rank from LOCAL_RANK
 * (torchrun), else SLURM_LOCALID; local_size from LOCAL_WORLD_SIZE, else
 * SLURM_NTASKS_PER_NODE (its first number); world_size from WORLD_SIZE,
 * else SLURM_NTASKS; on Kubernetes, JOB_COMPLETION_INDEX (an Indexed Job's
 * pod index) becomes the host identity "pod-<index>" when host is unset.
 * (The job's secret, RDZV_SECRET_FILE or RDZV_SECRET, is read by the
 * client library when the round's handle is created.) Strings point into the
 * environment (valid while it is unchanged). Returns 0, or -EINVAL when a
 * variable that is set does not parse (err names it). */
int rdzv_rendezvous_opts_from_env(struct rdzv_rendezvous_opts *o, char *err,
                                  size_t errlen);

/* Joins the round: blocks until the root answers or timeout_s passes.
 * On success *out owns the handle (rdzv_rendezvous_destroy).
 * Returns 0 or:
 *   RDZV_EJOB_ID_MISSING   job id NULL, empty or too long;
 *   -EINVAL                another option out of range (err says which);
 *   RDZV_EDEADLINE         the round did not complete in time: err names
 *                          the hosts that lack ranks and how many, and the
 *                          expected hosts that never joined (when the
 *                          launcher set "rdzv/<round>/expected-hosts");
 *   RDZV_EDUPLICATE_CLAIM  another process holds this host and local rank
 *                          (err names both);
 *   RDZV_EABORTED          a rank or node of this generation died or
 *                          aborted (err says which);
 *   RDZV_EPARKED           not in the world: an active host past the
 *                          maximum of a complete round (err names the
 *                          generation whose end, "rdzv/<round>/g<gen>/next"
 *                          or its abort, opens a place), or a spare still
 *                          parked when timeout_s passed;
 *   errors of the store calls (rdzv/store.h).
 * A spare (role RDZV_MEMBER_SPARE) waits parked: each time the root parks
 * it, it waits for the generation's end and joins again, until it is
 * placed (the call returns 0, its rank that of the host it replaced) or
 * timeout_s passes; a spare that was placed is active in the generations
 * after (joining again as a spare keeps its place).
 * err (may be NULL) receives the detail on failure. */
int rdzv_rendezvous_join(const struct rdzv_rendezvous_opts *o,
                         rdzv_rendezvous_t **out, char *err, size_t errlen);

/* Leaves cleanly (so closing the connection aborts nothing) and frees the
 * handle. NULL is a no-op. */
void rdzv_rendezvous_destroy(rdzv_rendezvous_t *r);

/* This rank's assignment. */
int32_t rdzv_rendezvous_rank(const rdzv_rendezvous_t *r);
int32_t rdzv_rendezvous_world_size(const rdzv_rendezvous_t *r);
int32_t rdzv_rendezvous_local_rank(const rdzv_rendezvous_t *r);
int32_t rdzv_rendezvous_local_size(const rdzv_rendezvous_t *r);
int32_t rdzv_rendezvous_node_rank(const rdzv_rendezvous_t *r);
int32_t rdzv_rendezvous_node_count(const rdzv_rendezvous_t *r);
int64_t rdzv_rendezvous_generation(const rdzv_rendezvous_t *r);
/* The round's name (opts.round, "world" by default), owned by the handle:
 * the "<round>" of the generation's keys "rdzv/<round>/g<gen>/...". */
const char *rdzv_rendezvous_round(const rdzv_rendezvous_t *r);
/* The store client under the handle (owned by it), for store calls. */
rdzv_client_t *rdzv_rendezvous_client(rdzv_rendezvous_t *r);
/* Detail of the last failure on this handle; never NULL. */
const char *rdzv_rendezvous_last_error(const rdzv_rendezvous_t *r);

/* Makes one unique id: writes RDZV_UNIQUE_ID_BYTES bytes to id. Returns 0
 * or a negative status. E.g. ncclGetUniqueId through comm/'s loader. */
typedef int (*rdzv_make_id_fn)(void *arg, uint8_t *id);

/* The unique ids of communicator comm (1..100 bytes, no '/') in this
 * generation, for NCCL's scalable init: nids = ceil(world / ranks_per_root)
 * ids (1 when ranks_per_root >= world size), in block order; the first rank
 * of each block (NCCL's block rule, rendezvous/topo.h) makes its block's id
 * with make_id and publishes it, every other rank waits for them through
 * the tree. On success *ids (malloc'd, *nids * 128 bytes; rdzv_free) is
 * identical on every rank. Returns 0, -EINVAL, RDZV_EDEADLINE (last_error
 * names the ranks whose ids never came, with their hosts: "unique ids of
 * 'world' (2 ranks, 1 ids): deadline passed; 1 of 1 missing: rank 0
 * (block 0 of 1) (host a)"), RDZV_ESTALE_GENERATION, RDZV_EABORTED, make_id's
 * error, or a store error. */
int rdzv_rendezvous_unique_ids(rdzv_rendezvous_t *r, const char *comm,
                               int64_t ranks_per_root, rdzv_make_id_fn make_id,
                               void *arg, uint8_t **ids, int64_t *nids,
                               double timeout_s);

/* The unique ids of a sub-group's communicator comm (1..100 bytes, no '/')
 * in this generation: rdzv_rendezvous_unique_ids restricted to the
 * group's members. members[0 .. nmembers-1] are the group's world ranks in
 * group-rank order (distinct, each in 0 .. world size - 1); NULL means the
 * whole world in rank order (then nmembers must equal the world size).
 * This rank must be a member. NCCL's block rule applies to the group's own
 * ranks 0 .. nmembers-1: nids = ceil(nmembers / ranks_per_root), and the
 * member that is first in block b makes block b's id. Only members take
 * part: the block-first members contribute to a gather of nids members
 * named "rdzv/<round>/g<gen>/uid/<comm>" (the same key and value layout as
 * rdzv_rendezvous_unique_ids, so both agree for a whole-world group), and
 * the other members wait for that key. Alongside, every member checks in
 * (a barrier "rdzv/<round>/g<gen>/uid/<comm>/arrive" of nmembers, run
 * concurrently with the exchange on the same connection, so it adds no
 * round trip): the call returns 0 only once every member has come, so a
 * communicator init that follows it never waits for an absent member.
 *
 * On success *ids (malloc'd, *nids * 128 bytes, block order; rdzv_free) is
 * identical on every member. On RDZV_EDEADLINE, rdzv_rendezvous_last_error
 * names the missing world ranks and their hosts, publishers of ids or not,
 * asked of the root (rdzv_store_collective_missing): "unique ids of 'x' (4
 * members, 2 ids): deadline passed; 1 of 4 missing: rank 2 (host b)" (at
 * most 8 named, then "and N more"). Other returns: -EINVAL (bad
 * argument, or this rank is not a member), RDZV_ENOMEM, RDZV_ESTALE_GENERATION,
 * RDZV_EABORTED, RDZV_ECOUNT_MISMATCH (members disagree on nids: a group name
 * reused with another size or ranks_per_root), make_id's error, or a store
 * error. Blocks up to timeout_s. Thread: as the handle (one at a time). */
int rdzv_rendezvous_group_unique_ids(rdzv_rendezvous_t *r, const char *comm,
                                     const int32_t *members, int64_t nmembers,
                                     int64_t ranks_per_root,
                                     rdzv_make_id_fn make_id, void *arg,
                                     uint8_t **ids, int64_t *nids,
                                     double timeout_s);

/* The host table of this generation, one line per host in node-rank order:
 * "node_rank first_rank local_size host location\n". Fetched once per
 * handle (a write-once key, served from the node's cache); *text is owned
 * by the handle and valid until it is destroyed. */
int rdzv_rendezvous_hosts(rdzv_rendezvous_t *r, const char **text, size_t *len,
                          double timeout_s);
/* The host (node rank) holding rank, from the host table; its first rank
 * and local size in *first and *count (may be NULL). host and location (may
 * be NULL) receive NUL-terminated copies, truncated to their sizes.
 * Returns 0, -EINVAL (rank out of range), or the errors of
 * rdzv_rendezvous_hosts. */
int rdzv_rendezvous_host_of(rdzv_rendezvous_t *r, int32_t rank,
                            int32_t *node_rank, int32_t *first, int32_t *count,
                            char *host, size_t hostlen, char *location,
                            size_t loclen, double timeout_s);
/* The topology records of the ranks of host node_rank, one line per rank:
 * "rank local_rank record" (the record's newlines as ';'). *text is
 * malloc'd (rdzv_free). Returns 0, -EINVAL, or a store error. */
int rdzv_rendezvous_topology(rdzv_rendezvous_t *r, int32_t node_rank,
                             char **text, size_t *len, double timeout_s);

/* A barrier of the whole world of this generation, named name (1..200
 * bytes): rdzv_rendezvous_group_barrier with members NULL. */
int rdzv_rendezvous_barrier(rdzv_rendezvous_t *r, const char *name,
                            double timeout_s);

/* A barrier among a group of ranks of this generation, named name (1..200
 * bytes). members[0 .. nmembers-1] are the group's world ranks (distinct,
 * in range); NULL means the whole world (nmembers = world size). This
 * rank must be a member. Store key: "rdzv/<round>/g<gen>/barrier/<name>",
 * with the group index as member id; nodes combine the contributions of
 * their hosts. Every member gets the same outcome: one whose deadline
 * passes fails the barrier for all (see rdzv_store_barrier).
 * Returns 0; RDZV_EDEADLINE after timeout_s seconds, with last_error
 * naming the missing ranks and their hosts, asked of the root ("barrier
 * 'x' of 8 ranks: deadline passed; 2 of 8 missing: rank 3 (host b), rank
 * 7 (host d)", at most 8 named); -EINVAL (bad name or members, or this
 * rank is not a member); RDZV_ENOMEM; RDZV_ECOUNT_MISMATCH (members
 * disagree on the group size); RDZV_EABORTED, RDZV_ESTALE_GENERATION, or
 * a store error. Blocks up to timeout_s (and 2 s more to name the missing
 * after a deadline). */
int rdzv_rendezvous_group_barrier(rdzv_rendezvous_t *r, const char *name,
                                  const int32_t *members, int64_t nmembers,
                                  double timeout_s);

/* Aborts this generation for every rank (each pending or later call of
 * the generation fails with RDZV_EABORTED and reason). */
int rdzv_rendezvous_abort(rdzv_rendezvous_t *r, const char *reason,
                          double timeout_s);

/* Detects this rank's topology record from sysfs and the environment:
 * "host=", "local_rank=", "gpu_pci=" and "gpu_uuid=" (the local_rank-th
 * NVIDIA PCI device, or RDZV_GPU_PCI / RDZV_GPU_UUID), "numa=" (its NUMA
 * node), "nics=" (InfiniBand devices, else non-loopback network
 * interfaces), "location=". Lines without a value are omitted (a CPU
 * machine has no gpu_ lines). Writes at most n bytes, NUL-terminated;
 * returns the length, or -ENOSPC. */
int rdzv_topology_detect(const char *host, int32_t local_rank,
                         const char *location, char *out, size_t n);

/* rdzv_domain_detect - this host's NVLink domain, from NVML.
 *
 * Opens NVML (nvml_path; NULL: RDZV_NVML_LIBRARY, else
 * "libnvidia-ml.so.1") with dlopen and asks GPU `device` (an index, >= 0;
 * the join uses 0: a host's GPUs share a domain) for its fabric record
 * (nvmlDeviceGetGpuFabricInfo). Where the GPU's multi-node NVLink
 * registration completed, writes "nvl-<cluster UUID>-<clique id>" (the
 * UUID as 8-4-4-4-12 lowercase hex, the clique id in decimal; at most 51
 * bytes and the NUL) to out (n bytes) and returns its length. Returns 0
 * with out "" where there is no domain: no NVML library, one without the
 * fabric query (drivers before 550), NVML not initializing, no such GPU,
 * a GPU outside an NVLink fabric (not supported, registration not
 * completed or failed, an all-zero UUID). -EINVAL for a NULL or empty
 * out or a negative device; -ENOSPC when n is too small. A join whose
 * domain is "auto" (opts.domain or RDZV_DOMAIN) calls this and joins with
 * the result, or with no domain when it is 0. Blocks: for NVML's
 * initialization (tens of milliseconds on a GPU host). Thread: any. */
int rdzv_domain_detect(const char *nvml_path, int32_t device, char *out,
                       size_t n);

/* rdzv_domain_format - the domain text of a fabric record: "nvl-" then
 * the 16-byte cluster uuid as 8-4-4-4-12 lowercase hex, "-" and clique in
 * decimal, into out (n bytes). Returns the length, 0 (out untouched) for
 * an all-zero uuid (no fabric), or -ENOSPC. Pure. */
int rdzv_domain_format(const unsigned char uuid[16], uint32_t clique, char *out,
                       size_t n);

#ifdef __cplusplus
}
#endif
#endif /* RDZV_RENDEZVOUS_H */
