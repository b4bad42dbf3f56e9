/* rdzv store operations: blocking calls with deadlines.
 *
 * Each call drives the client's poll-driven core (rdzv/client.h) until its
 * reply arrives or timeout_s seconds pass; timeout_s <= 0 means "one
 * attempt, no waiting" for nothing but an already-connected handle, so pass
 * a real deadline. Keys are NUL-terminated strings (1 .. server's
 * max key bytes, 4096 by default); values are byte strings (server's max
 * value bytes, 16 MiB by default). Keys live in the job's namespace given
 * to rdzv_client_create.
 *
 * Every call returns 0 or a negative status. Besides those listed, each
 * may return: RDZV_EDEADLINE (timeout_s passed; rdzv_client_last_error
 * says what was missing), RDZV_ECONN_CLOSED (connection lost while the
 * request was in flight; it may or may not have been applied),
 * RDZV_EPROTO_VERSION / RDZV_EJOB_MISMATCH / RDZV_EHELLO (server refused
 * the hello), RDZV_EKEY_TOO_LONG / RDZV_EVALUE_TOO_BIG (over a limit; the
 * server closes the connection), RDZV_EFRAME_TOO_BIG (the request's frame
 * is over the handle's max_frame_bytes: refused before it is sent),
 * RDZV_EWOULDBLOCK_CB (called from inside a
 * callback of this handle), -EINVAL (NULL or empty argument),
 * RDZV_ENOMEM. */
#ifndef RDZV_STORE_H
#define RDZV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A value returned to the caller: data is malloc'd, owned by the caller,
 * NUL-terminated for convenience (the NUL is not counted in len). member is
 * the contributor id for gather results, 0 otherwise. */
struct rdzv_value {
  uint64_t member;
  void *data;
  size_t len;
};

/* Frees an array of n values returned by this library and their data.
 * NULL is a no-op. */
void rdzv_values_free(struct rdzv_value *vals, size_t n);

/* Frees memory returned by this library (values, JSON text). NULL is a
 * no-op. */
void rdzv_free(void *p);

/* Sets key to val[0..len). flags: 0, or RDZV_STORE_WRITE_ONCE to make the
 * key immutable; write-once keys are cached by every node on the way.
 * Setting a write-once key again with the same bytes succeeds; with other
 * bytes returns RDZV_EWRITE_ONCE. */
int rdzv_store_set(rdzv_client_t *c, const char *key, const void *val,
                   size_t len, unsigned flags, double timeout_s);

/* Reads key. On success *val (malloc'd, NUL-terminated, caller frees with
 * rdzv_free) and *len are set. Returns RDZV_ENOKEY if the key is absent
 * (does not wait; see rdzv_store_wait). */
int rdzv_store_get(rdzv_client_t *c, const char *key, void **val, size_t *len,
                   double timeout_s);

/* Waits until each of the nkeys keys (1 .. 65536) has existed since the
 * wait began: a key that appears and is deleted again before the others
 * appear still counts (as in PyTorch's TCPStore, whose wait behaves the
 * same). Blocks up to timeout_s seconds. Returns 0; RDZV_EDEADLINE, with
 * rdzv_client_last_error listing the keys not seen; RDZV_EUNREACHABLE
 * when a node on the way could not reach its parent (the error names it);
 * RDZV_EABORTED or RDZV_ESTALE_GENERATION for a key of a failed or older
 * rendezvous generation; connection errors as for every call. */
int rdzv_store_wait(rdzv_client_t *c, const char *const *keys, size_t nkeys,
                    double timeout_s);

/* Atomically adds delta to the int64 counter at key (a missing key counts
 * as 0; the value is stored as decimal text, as in PyTorch's TCPStore).
 * *out (may be NULL) receives the value right after this add. Returns
 * RDZV_ENOT_NUMBER if the key holds something else. */
int rdzv_store_add(rdzv_client_t *c, const char *key, int64_t delta,
                   int64_t *out, double timeout_s);

/* Compare-and-set: if key's value equals expected (an empty expected value
 * matches a missing key), set it to desired. *cur/*cur_len (may be NULL;
 * caller frees with rdzv_free) receive the value after the call. Returns 0
 * when swapped, RDZV_ECAS_FAILED when not. */
int rdzv_store_cas(rdzv_client_t *c, const char *key, const void *expected,
                   size_t expected_len, const void *desired, size_t desired_len,
                   void **cur, size_t *cur_len, double timeout_s);

/* Deletes key. *deleted (may be NULL) is 1 if it existed, else 0. */
int rdzv_store_delete(rdzv_client_t *c, const char *key, int *deleted,
                      double timeout_s);

/* Reads nkeys keys at once. On success *vals is an array of nkeys values
 * in key order (free with rdzv_values_free(*vals, nkeys)). Returns
 * RDZV_ENOKEY if any is missing (last_error names them). */
int rdzv_store_mget(rdzv_client_t *c, const char *const *keys, size_t nkeys,
                    struct rdzv_value **vals, double timeout_s);

/* Sets n keys at once (vals[i].data/len; member ignored). flags as for
 * rdzv_store_set. */
int rdzv_store_mset(rdzv_client_t *c, const char *const *keys,
                    const struct rdzv_value *vals, size_t n, unsigned flags,
                    double timeout_s);

/* Appends val[0..len) to key's value, creating the key if missing. */
int rdzv_store_append(rdzv_client_t *c, const char *key, const void *val,
                      size_t len, double timeout_s);

/* Number of keys in the job's namespace, in *out. */
int rdzv_store_num_keys(rdzv_client_t *c, int64_t *out, double timeout_s);

/* Barrier named name over count members: returns once count distinct
 * member ids have called it with the same name. Member ids are 0 ..
 * count-1 (ranks); another id is refused (-EINVAL before sending). A name
 * completes once; reuse after completion returns at once, so name each
 * barrier (e.g. "epoch/3"). Nodes combine the contributions of their
 * subtree (the root sees one message per child). Returns 0, -EINVAL,
 * RDZV_ECOUNT_MISMATCH if members disagree on count (every member of the
 * collective gets it, with both counts in last_error), RDZV_EDEADLINE after
 * timeout_s seconds, or the errors of any request (connection, aborted or
 * stale generation).
 * Deadlines: every member gets the same outcome. A member whose deadline
 * passes asks the root to fail the collective (rdzv_store_collective_give_up);
 * if it had completed meanwhile, the call returns 0 after all; otherwise
 * it fails for good: this member gets RDZV_EDEADLINE with last_error
 * naming the members still missing (at most 16), and every other member,
 * waiting or still to come, gets RDZV_EDEADLINE at once with the root's
 * text ("barrier 'x' failed: member 1 gave up at its deadline of 5 s; 2 of
 * 8 members missing: 3, 5"). Blocks up to timeout_s + 4 s. */
int rdzv_store_barrier(rdzv_client_t *c, const char *name, uint64_t member,
                       uint64_t count, double timeout_s);

/* rdzv_store_barrier, telling the nodes on the way who the members are:
 * spec[0..spec_len) is an encoding of rdzv_members_encode
 * (rendezvous/members.h: the members' ranks of a generation and how member
 * ids map to them; at most 777 bytes), borrowed for the call (spec_len 0:
 * none, as rdzv_store_barrier). The name must then be a key of that
 * generation, "rdzv/<round>/g<gen>/...". A node through which that
 * generation's join completed knows which of its ranks are below it, so
 * it forwards their contributions the moment the last one arrives instead
 * of after its quiet interval (rdzvd --flush-ms); a wrong spec only costs
 * time (a node waits for a member that does not come, at most
 * --flush-max-ms), never the result. Errors as rdzv_store_barrier, and
 * -EINVAL for spec NULL with spec_len > 0. */
int rdzv_store_barrier_of(rdzv_client_t *c, const char *name, uint64_t member,
                          uint64_t count, const void *spec, size_t spec_len,
                          double timeout_s);

/* Gather named name: each of count members gives data[0..len); every
 * member receives all contributions in member-id order: *out is an array
 * of count values with .member set (free with rdzv_values_free(*out,
 * count)). Completion, reuse and errors as for rdzv_store_barrier;
 * RDZV_EVALUE_TOO_BIG when len exceeds the server's value limit. */
int rdzv_store_gather(rdzv_client_t *c, const char *name, uint64_t member,
                      uint64_t count, const void *data, size_t len,
                      struct rdzv_value **out, double timeout_s);

/* rdzv_store_gather with who the members are, as rdzv_store_barrier_of
 * (spec NULL, spec_len 0: none). */
int rdzv_store_gather_of(rdzv_client_t *c, const char *name, uint64_t member,
                         uint64_t count, const void *data, size_t len,
                         const void *spec, size_t spec_len,
                         struct rdzv_value **out, double timeout_s);

/* Most ids one rdzv_store_collective_missing call returns. */
#define RDZV_STORE_MISSING_MAX 4096

/* Who has not contributed yet to the barrier (gather = 0) or gather
 * (gather != 0) named name. Each node on the way first sends up the
 * contributions it still holds for it, so the answer is the root's whole
 * view. missing: an array of max slots (1 <= max <=
 * RDZV_STORE_MISSING_MAX), filled with up to max missing member ids in
 * ascending order; *nmissing says how many. *arrived and *count (either
 * may be NULL) get the number of members that contributed and the
 * collective's member count; count 0 means the root has seen no
 * contribution to that name at all (its count is unknown). A completed
 * collective reports arrived == count and no missing id. Returns 0,
 * -EINVAL (NULL argument, max out of range), RDZV_EDEADLINE, or the
 * errors of any request. Blocks up to timeout_s seconds. */
int rdzv_store_collective_missing(rdzv_client_t *c, const char *name,
                                  int gather, uint64_t *missing, size_t max,
                                  size_t *nmissing, uint64_t *arrived,
                                  uint64_t *count, double timeout_s);

/* For a member whose own wait on the barrier (gather = 0) or gather named
 * name ended at its deadline (e.g. one submitted with rdzv_client_submit):
 * the root fails the collective for good unless it has completed, so that
 * no member proceeds while another gave up. why (may be NULL) is the
 * reason every member is told, e.g. "rank 3 gave up at its deadline".
 * *completed = 1 when it had completed (the caller arrived in time after
 * all: send the same contribution again to get the result at once), else
 * 0. Returns 0, -EINVAL, RDZV_EDEADLINE, or the errors of any request.
 * rdzv_store_barrier and rdzv_store_gather do this themselves. */
int rdzv_store_collective_give_up(rdzv_client_t *c, const char *name,
                                  int gather, const char *why, int *completed,
                                  double timeout_s);

/* Statistics of the server this handle is connected to: *json is one JSON
 * object (malloc'd, NUL-terminated; free with rdzv_free). Its shape is
 * documented in docs/reference/rdzvd.md ("stats"). */
int rdzv_store_stats(rdzv_client_t *c, char **json, double timeout_s);

/* Opens (or joins) a PyTorch TCPStore key space at the daemon this handle
 * is connected to: a listener on that host's 127.0.0.1 whose TCPStore
 * clients (torch.distributed.TCPStore, protocol as docs/pytorch.md) keep
 * their keys in this handle's job under prefix (1..200 bytes, no NUL): a
 * client's key "k" is the job's key prefix + "k", served through the tree
 * like every key; LIST_KEYS and GETNUMKEYS see the keys under the prefix.
 * The same job and prefix give the same port; the listener closes about
 * a second after the last connection that asked for it closes. *port
 * receives the port. Used by torchrun's rdzv handler for each restart
 * round's workers (MASTER_PORT). Returns 0, -EINVAL (bad prefix),
 * RDZV_EBAD_ROLE (the daemon serves none: --tcpstore-spaces 0, or an
 * etcd-backed root), RDZV_ETOO_MANY_CONNECTIONS (at --tcpstore-spaces),
 * or a store error; the daemon's message is in rdzv_client_last_error. */
int rdzv_store_tcpstore_space(rdzv_client_t *c, const char *prefix,
                              int32_t *port, double timeout_s);

/* rdzv_store_tcpstore_space with another holder: the space stays open
 * while process holder_pid lives (a pid of the daemon's host, watched by
 * the daemon through a pidfd), not while this handle's connection does;
 * 0 is this connection, as rdzv_store_tcpstore_space. Slurm's TaskProlog
 * (deploy/slurm/task-prolog.sh) asks for each step's space on behalf of
 * the task it precedes. A process holder is asked over a Unix socket only.
 * Returns what rdzv_store_tcpstore_space returns, and -EINVAL (holder_pid
 * < 0), RDZV_EBAD_ROLE (a process holder asked over TCP), -ESRCH (no such
 * process), another -errno of pidfd_open(2) (-ENOSYS before Linux 5.3),
 * RDZV_ETOO_MANY_CONNECTIONS (the space has the daemon's --max-connections
 * holders). */
int rdzv_store_tcpstore_space_held(rdzv_client_t *c, const char *prefix,
                                   int32_t holder_pid, int32_t *port,
                                   double timeout_s);

#ifdef __cplusplus
}
#endif
#endif /* RDZV_STORE_H */
