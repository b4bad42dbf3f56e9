/* rdzv communicators: NCCL communicators created lazily over a rendezvous.
 *
 * A handle (rdzv_comm_t) names a communicator: the world of a rendezvous
 * generation, or a sub-group of another handle (an explicit rank list, or
 * a split by color the way device meshes describe tensor/data/pipeline
 * groups). Creating a handle costs no network traffic and no NCCL call:
 * every rank computes every group's members locally. NCCL init runs on
 * first use (rdzv_comm_nccl) or, when prefetched, in the background on
 * the world's worker thread (rdzv_comm_prefetch, then rdzv_comm_poll). A
 * sub-group nobody uses is never initialized, and only its members take
 * part in its init.
 *
 * Names. A handle's name is its parent's name, a dot and the name given at
 * creation, plus ".<color>" for a split ("world", "world.tp.3"); together
 * with the rendezvous round and generation it names the store key of the
 * communicator's NCCL unique ids, "rdzv/<round>/g<gen>/uid/<name>" (see
 * rdzv_rendezvous_group_unique_ids). Names never come from a counter, so
 * every member computes the same key whatever order it created handles
 * in. Two different groups of one parent need two different names, and a
 * name is initialized once per generation: NCCL unique ids are single-use
 * (NVIDIA/nccl#1038), so a new handle with the name of a destroyed one
 * gets RDZV_ENAME_USED at init instead of the old, spent ids.
 *
 * Init paths (rdzv_comm_init_path):
 *   "config"    ncclCommInitRankConfig with one unique id, for a group of
 *               at most ranks_per_root ranks (128 by default);
 *   "scalable"  ncclCommInitRankScalable with ceil(size / ranks_per_root)
 *               ids, one per block of ranks (NCCL's block rule over the
 *               group's own ranks 0 .. size-1, rendezvous/topo.h);
 *   "split"     ncclCommSplit of the initialized parent, only through the
 *               collective rdzv_comm_init_split;
 *   "shrink"    ncclCommShrink of an initialized communicator without the
 *               ranks its survivors agreed to exclude (rdzv_comm_shrink);
 *   "grow"      ncclCommGrow: an initialized communicator and new members
 *               (rdzv_comm_grow, rdzv_comm_grow_in, rdzv_comm_grow_join).
 * The ids are made by the first member of each block (ncclGetUniqueId
 * unless opts.make_id says otherwise) and exchanged through the rdzv tree.
 *
 * NCCL is loaded with dlopen on the first init, not at handle creation
 * (comm/nccl_api.h); rdzv links neither CUDA nor NCCL.
 *
 * Threads. Every function may be called from any thread. Each handle has a
 * mutex: concurrent first use of one handle from several threads
 * initializes it once (the others wait and get the same communicator).
 * The store connection of the rendezvous is shared by all handles of a
 * world and used under one lock, so the id exchanges of different handles
 * run one at a time within a process: initialize different groups in the
 * same order on every rank (as NCCL requires of collective calls anyway),
 * or a rank can wait on an exchange whose peers wait on another until the
 * deadline. While any handle of a world may be in use (a prefetched init
 * included, until it has finished), the application must not call
 * rendezvous functions on the same rdzv_rendezvous_t from another thread
 * (that handle allows one thread at a time).
 * The library starts threads only when rdzv_comm_prefetch is used: the
 * first prefetch of a world starts that world's one worker thread (all
 * signals blocked), which runs prefetched inits one at a time in prefetch
 * order and is stopped and joined when the world's last handle is
 * destroyed. A process that never prefetches starts no thread. The worker
 * calls opts.make_id and NCCL's init. NCCL creates the communicator on the
 * CUDA device current on the thread that calls its init, so
 * rdzv_comm_prefetch records the CUDA context current on the calling
 * thread (cuCtxGetCurrent) and the worker makes it current
 * (cuCtxSetCurrent) for that handle's id exchange and init, then makes no
 * context current again: call cudaSetDevice (or make your context
 * current) before rdzv_comm_prefetch, and keep that context alive until
 * the handle is ready. This uses the CUDA driver only if the process has
 * it loaded already (libcuda.so.1, or RDZV_CUDA_DRIVER_LIBRARY; rdzv
 * never loads it): without it, or with no context current at prefetch,
 * the worker runs the init with no context current (NCCL then uses the
 * CUDA runtime's default device, as it would on a thread that never set
 * one). A queued handle taken over by rdzv_comm_nccl or
 * rdzv_comm_init_split runs on, and in the context of, that caller's
 * thread.
 * rdzv_comm_destroy must not race with any other call on the same handle.
 *
 * Ownership: as rdzv/rdzv.h. The rendezvous handle given to
 * rdzv_comm_world is borrowed for the whole life of the world and of every
 * handle derived from it: destroy them all before rdzv_rendezvous_destroy.
 * Make one world per rendezvous handle (two would not share the store
 * lock, and would name the same communicator "world").
 */
#ifndef RDZV_COMM_H
#define RDZV_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv/error.h"
#include "rdzv/rendezvous.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rdzv_comm rdzv_comm_t;

/* NCCL's communicator: nccl.h declares `typedef struct ncclComm *
 * ncclComm_t`, so an ncclComm_t variable's address is a struct ncclComm **.
 * This header does not need nccl.h. */
struct ncclComm;

#define RDZV_COMM_OPTS_VERSION 1u
/* Ranks per NCCL root by default, as PyTorch's TORCH_NCCL_RANKS_PER_ROOT. */
#define RDZV_COMM_RANKS_PER_ROOT 128
/* Longest full handle name (the rendezvous' id-key limit). */
#define RDZV_COMM_NAME_MAX 100
/* Most dimensions rdzv_comm_split_mesh accepts. */
#define RDZV_COMM_MESH_MAX_DIMS 8
/* How long rdzv_comm_destroy lets a non-blocking ncclCommFinalize run
 * before it aborts the communicator instead, seconds. */
#define RDZV_COMM_FINALIZE_TIMEOUT_S 30.0

/* Options of a world and of every handle derived from it. Fill with
 * rdzv_comm_opts_init, then set what you need; new fields are appended. */
struct rdzv_comm_opts {
  size_t size;      /* set by rdzv_comm_opts_init */
  uint32_t version; /* set by rdzv_comm_opts_init */
  /* The NCCL library to dlopen; NULL or "": "libnccl.so.2" through the
   * loader's search, then /usr/local/cuda/lib64 (rdzv_comm_opts_from_env
   * sets it from RDZV_NCCL_LIBRARY). */
  const char *nccl_path;
  /* Most ranks per NCCL root (per unique id), >= 1. Default
   * RDZV_COMM_RANKS_PER_ROOT. A group larger than this uses
   * ncclCommInitRankScalable. */
  int64_t ranks_per_root;
  /* 0 (default): rdzv_comm_nccl runs a blocking NCCL init, so its
   * deadline bounds the id exchange but not NCCL's own init. 1: every init
   * is non-blocking (config.blocking = 0) and polled, so the deadline
   * bounds NCCL init too; the communicator is then a non-blocking NCCL
   * communicator (its NCCL calls may return ncclInProgress). */
  int nonblocking;
  /* Makes a unique id (rdzv/rendezvous.h). NULL: ncclGetUniqueId of the
   * loaded library. Called on the thread that runs the init (for a
   * prefetched handle, the world's worker thread), with make_id_arg. */
  rdzv_make_id_fn make_id;
  void *make_id_arg;
  /* 1: use ncclCommInitRankScalable even when one id suffices (a group of
   * at most ranks_per_root ranks), e.g. to exercise that path on a one-GPU
   * machine. Default 0. */
  int always_scalable;
};

/* rdzv_comm_opts_init - fill *o with defaults.
 * Reads nothing from the environment. o must not be NULL. Thread: any. */
void rdzv_comm_opts_init(struct rdzv_comm_opts *o);

/* rdzv_comm_opts_from_env - fill unset options from the environment.
 *
 * nccl_path (when NULL) from RDZV_NCCL_LIBRARY; ranks_per_root (when still
 * the default) from RDZV_RANKS_PER_ROOT, else TORCH_NCCL_RANKS_PER_ROOT.
 * Strings point into the environment (valid while it is unchanged).
 * Returns 0, or -EINVAL when a variable that is set does not parse (err,
 * when non-NULL, names it). Thread: like getenv. */
int rdzv_comm_opts_from_env(struct rdzv_comm_opts *o, char *err, size_t errlen);

/* rdzv_comm_world - the handle of the world communicator.
 *
 * Its name is "world", its members are the rendezvous' ranks in rank
 * order, its generation the rendezvous'. No network traffic, no NCCL call.
 * Ownership: r is borrowed for the life of the world and of every handle
 * derived from it (see the header comment); o (NULL: defaults) is copied,
 * including the nccl_path string. On success *out belongs to the caller
 * (rdzv_comm_destroy).
 * Returns 0, -EINVAL (r or out NULL, o of another size or version,
 * ranks_per_root < 1), RDZV_ENOMEM. Blocks: no. Thread: any. */
int rdzv_comm_world(rdzv_rendezvous_t *r, const struct rdzv_comm_opts *o,
                    rdzv_comm_t **out);

/* rdzv_comm_group - a sub-group of parent by explicit rank list.
 *
 * ranks[0 .. n-1] are ranks of parent (world ranks when parent is the
 * world), distinct, in the order that becomes the group's rank order.
 * Every rank of parent may create the handle, member or not; a non-member
 * gets a handle whose rank is -1, and its init calls return
 * RDZV_ENOT_MEMBER (except rdzv_comm_init_split, which a non-member must
 * join). name: 1 .. 100 bytes of [A-Za-z0-9_-]; the handle is named
 * "<parent's name>.<name>".
 * Ownership: parent, name and ranks are borrowed (the list is copied); the
 * new handle keeps parent's memory alive (not its NCCL communicator) until
 * the handle is destroyed. *out belongs to the caller.
 * Returns 0, -EINVAL (NULL argument, bad name, n < 1, a rank out of range
 * or repeated), -ENAMETOOLONG (full name over RDZV_COMM_NAME_MAX),
 * RDZV_ENOMEM. No network traffic. Thread: any. */
int rdzv_comm_group(rdzv_comm_t *parent, const char *name, const int32_t *ranks,
                    int32_t n, rdzv_comm_t **out);

/* The color and key of a parent rank for rdzv_comm_split. Must be a pure
 * function of rank (and arg): every rank calls it for every rank of the
 * parent and must get the same answers, since creation exchanges nothing.
 * *color >= 0 puts the rank in group "color"; a negative color puts it in
 * no group. Within a group, ranks are ordered by key, then parent rank.
 * Returns 0, or a negative status that rdzv_comm_split returns. */
typedef int (*rdzv_comm_color_fn)(void *arg, int32_t rank, int32_t *color,
                                  int32_t *key);

/* rdzv_comm_split - this rank's group of a split of parent by color.
 *
 * Calls color_of(arg, r, ...) for every rank r of parent (O(parent size),
 * local) and returns the handle of the group with this rank's color,
 * named "<parent's name>.<name>.<color>". A rank whose color is negative
 * gets a handle with rank -1 and size 0 (a non-member, as for
 * rdzv_comm_group). Ownership, errors and threads as rdzv_comm_group, plus
 * color_of's own error; color_of runs on the calling thread before the
 * call returns. */
int rdzv_comm_split(rdzv_comm_t *parent, const char *name,
                    rdzv_comm_color_fn color_of, void *arg, rdzv_comm_t **out);

/* rdzv_comm_split_mesh - the device-mesh form of rdzv_comm_split.
 *
 * parent's ranks are laid out row-major over dims[0 .. ndims-1] (the last
 * dimension varies fastest; the product must equal parent's size). The
 * group of a rank is every rank whose coordinates equal its own in each
 * dimension NOT in group_dims (bit i set: dimension i varies within the
 * group), ordered by parent rank. E.g. dims {pp, dp, tp} = {2, 4, 8}:
 * group_dims 1 << 2 gives the 8-rank tensor-parallel groups, 1 << 1 the
 * 4-rank data-parallel ones. The color is the row-major index of the fixed
 * coordinates. ndims 1 .. RDZV_COMM_MESH_MAX_DIMS, each dim >= 1,
 * group_dims < 1 << ndims; else -EINVAL. Otherwise as rdzv_comm_split. */
int rdzv_comm_split_mesh(rdzv_comm_t *parent, const char *name, int32_t ndims,
                         const int32_t *dims, uint32_t group_dims,
                         rdzv_comm_t **out);

/* rdzv_comm_nccl - the NCCL communicator, initialized on first use.
 *
 * On a handle not yet initialized: exchanges the unique ids among the
 * members through the rdzv tree, then runs NCCL's init ("config" or
 * "scalable", see above): blocking, or non-blocking and polled when
 * opts.nonblocking. On a prefetched handle: if it is still queued for the
 * world's worker, takes it out of the queue and starts its init on this
 * thread (non-blocking, with the prefetch's deadline); if the worker is
 * exchanging its ids, waits for that; then polls its init to completion.
 * On an initialized handle: returns at once. Init is attempted once per
 * handle: a failure is final, and every later call returns the same
 * status (make a new handle, e.g. in a new generation, to try again).
 * timeout_s bounds the whole init that this call starts: the id exchange,
 * and NCCL's init when it is non-blocking; a prefetched init keeps the
 * deadline its rdzv_comm_prefetch set.
 *
 * Ownership: *out is owned by the handle: valid until rdzv_comm_abort or
 * rdzv_comm_destroy; never pass it to ncclCommDestroy yourself.
 * Returns 0, or:
 *   -EINVAL            c or out NULL, or timeout_s not > 0;
 *   RDZV_ENOT_MEMBER   this rank is not a member (nothing was exchanged);
 *   RDZV_EDEADLINE     a member did not come in time: last_error names the
 *                      missing ranks and their hosts (every member checks
 *                      in during the id exchange, so NCCL's init is not
 *                      started while one is missing); or NCCL's init
 *                      itself did not finish (last_error says so; the
 *                      NCCL communicator has been aborted);
 *   RDZV_ENCCL         an NCCL call failed (last_error has NCCL's text);
 *   RDZV_ENCCL_MISSING, RDZV_ENCCL_SYMBOL, RDZV_ENCCL_VERSION  loading
 *                      NCCL failed (last_error says which path, symbol or
 *                      version);
 *   RDZV_EABORTED      the handle was aborted, or the generation was;
 *   -ENODEV            (prefetched handles) the worker could not make the
 *                      prefetching thread's CUDA context current;
 *   RDZV_ENAME_USED    another handle of this world already initialized
 *                      (or tried to) a communicator of this name in this
 *                      generation (nothing was exchanged);
 *   RDZV_ESTALE_GENERATION, RDZV_ENOMEM, make_id's error, store errors.
 * Blocks: yes, up to the deadline (and through a blocking NCCL init).
 * Thread: any; see the header comment. */
int rdzv_comm_nccl(rdzv_comm_t *c, struct ncclComm **out, double timeout_s);

/* rdzv_comm_prefetch - start NCCL init in the background.
 *
 * Returns at once: queues the handle for its world's worker thread
 * (started by the world's first prefetch, see Threads above) and marks it
 * PENDING. The worker takes queued handles one at a time in prefetch
 * order; for each it exchanges the unique ids through the tree, then
 * starts a non-blocking NCCL init (config.blocking = 0) and goes on to the
 * next handle. Progress the init with rdzv_comm_poll (which also says
 * -EAGAIN while the handle is queued or its ids are being exchanged) or
 * rdzv_comm_nccl (which takes a still queued handle out of the queue and
 * runs its init on the calling thread, or waits for the worker's
 * exchange, then polls NCCL's init to completion). A prefetched
 * communicator is a non-blocking NCCL communicator (its NCCL calls may
 * return ncclInProgress). timeout_s sets the deadline of the whole init,
 * time in the queue, the exchange and NCCL's part included: a handle
 * still queued at the deadline fails with RDZV_EDEADLINE (last_error says
 * it was queued), and a poll after it aborts a running NCCL init and
 * reports RDZV_EDEADLINE.
 *
 * Order: every member must prefetch (and first-use) the groups it shares
 * in the same order. A rank whose worker is exchanging the ids of one
 * group holds the world's store lock, so its own blocking first use of
 * another group (rdzv_comm_nccl on a handle that was not prefetched)
 * waits behind it; if ranks differ in order, that can last until the
 * deadline.
 *
 * The worker runs the init in the CUDA context current on the calling
 * thread now (see Threads above); if it cannot make that context current
 * (cuCtxSetCurrent fails, e.g. the context was destroyed meanwhile), the
 * init fails with -ENODEV before its id exchange (last_error has the
 * CUresult; the other members then reach their deadline naming this
 * rank, as for any member that does not come).
 *
 * Calling it again is a no-op that returns the current status: 0 while
 * queued, running or ready, the init's error once it failed.
 * Returns 0, -EINVAL (c NULL, timeout_s not > 0), RDZV_ENOT_MEMBER, the
 * error of a failed earlier init, or RDZV_ENOMEM (or another -errno) when
 * the worker thread cannot be started (the handle then stays IDLE).
 * Blocks: no (only while another thread is inside a blocking init of c,
 * which it waits for). Thread: any. */
int rdzv_comm_prefetch(rdzv_comm_t *c, double timeout_s);

/* rdzv_comm_poll - progress a started init without blocking.
 *
 * Returns 0 when the communicator is ready, -EAGAIN while its init runs
 * (also while it is queued for the world's worker, and while another
 * thread or the worker holds the handle, e.g. during its id exchange or
 * a blocking init), -EINVAL when no init was started (last_error says
 * so), RDZV_ENOT_MEMBER, or the init's final error (see rdzv_comm_nccl; a
 * passed deadline aborts the NCCL communicator and returns
 * RDZV_EDEADLINE, and fails a handle still queued with RDZV_EDEADLINE).
 * Each call asks NCCL at most once (ncclCommGetAsyncError), and not at
 * all before NCCL's init has been started.
 * Blocks: no. Thread: any. */
int rdzv_comm_poll(rdzv_comm_t *c);

/* rdzv_comm_init_split - initialize a sub-group with ncclCommSplit.
 *
 * Collective over the parent: every rank of parent calls it on its handle
 * from the same rdzv_comm_group / rdzv_comm_split call, members and
 * non-members alike (a non-member passes NCCL_SPLIT_NOCOLOR, gets no
 * communicator, and 0 back). The parent is initialized first if it is not
 * (rdzv_comm_nccl on it, with this timeout). The child gets color 0 (a
 * group) or its split color, and its group rank as key, so NCCL's rank
 * order is the handle's. No unique id is exchanged; the path is "split".
 * Use it when the whole parent can take part at the same point (cheaper
 * than a new id exchange and bootstrap); a lazily used sub-group keeps
 * using rdzv_comm_nccl. Returns 0 (also when already initialized), -EINVAL
 * (c is a world), or the errors of rdzv_comm_nccl (the parent's included).
 * A non-blocking split (opts.nonblocking) is polled up to the deadline.
 * Blocks: yes. Thread: any. */
int rdzv_comm_init_split(rdzv_comm_t *c, double timeout_s);

/* ---- Shrink and grow (NCCL 2.27 / 2.29) ----------------------------------
 *
 * A communicator that lost a member shrinks to its survivors; one that
 * gains members grows. Both make a NEW handle (the old one stays valid and
 * must still be destroyed) named "<name>.shrink<n>" / "<name>.grow<n>",
 * where n is 1 + the number of shrinks (grows) of this handle that
 * succeeded in this process: the survivors of one loss all call shrink
 * once, so they agree on n, and a call that failed does not use its
 * number up (a retry agrees with the earlier attempt's list or id).
 *
 * Agreement goes through the store, under the keys of the handle's
 * rendezvous generation (its round's "rdzv/<round>/w<gen>/"), or, for a
 * grow into a later generation (rdzv_comm_grow_in), of that generation:
 *   shrink/<name>/<n>  the exclude list: the first survivor's proposal
 *                      wins (compare-and-set from absent), every survivor
 *                      reads back that one list and shrinks with exactly
 *                      it (text, ascending ranks of the handle: "3,5");
 *   grow/<name>/<n>    written once by rank 0 of the handle: the unique
 *                      id of ncclCommGetUniqueId and the new membership
 *                      (world ranks in new-rank order); existing and new
 *                      members read it. <gen> is the generation of the
 *                      world the new members joined: the handle's own
 *                      (rdzv_comm_grow), or the later one whose world
 *                      handle the existing members pass to
 *                      rdzv_comm_grow_in.
 * The keys are the generation's workers' keys ("rdzv/<round>/w<gen>/"),
 * which the root does not refuse after the generation aborts: a member
 * whose process died aborts it (rdzv_rendezvous_join), and the survivors
 * still shrink the communicator they hold. They go when a later
 * generation of the round completes.
 *
 * A loss, then a replacement: a member of generation G dies (G aborts);
 * the survivors shrink (under G's keys); a spare takes the lost host's
 * place in generation G+1 (the survivors, joining again, keep their world
 * ranks: the rendezvous keeps the node ranks of the previous hosts and
 * gives the replacement the lost ranks); each survivor makes G+1's world
 * handle and grows its shrunk communicator with rdzv_comm_grow_in(shrunk,
 * world G+1, replacement's ranks), while the replacement calls
 * rdzv_comm_grow_join(world G+1, shrunk's name, n). The grown handle
 * belongs to G+1's world, so a later shrink or grow of it agrees under
 * G+1's keys. Keep G's rendezvous handle and world until the handles made
 * from them are destroyed (see Ownership above).
 *
 * NCCL's entry points are optional (looked up with dlsym): with an NCCL
 * older than the release that added them the calls fail with
 * RDZV_ENCCL_VERSION, naming the version found and the one needed; with a
 * library new enough that lacks the symbol, RDZV_ENCCL_SYMBOL. Nothing is
 * exchanged then. */

/* rdzv_comm_shrink's flags: terminate the communicator's ongoing
 * operations before shrinking (NCCL_SHRINK_ABORT); use it when a member
 * died. The old handle's communicator is then aborted, not finalized, by
 * rdzv_comm_destroy. */
#define RDZV_COMM_SHRINK_ABORT 1

/* rdzv_comm_shrink - the communicator without its lost ranks.
 *
 * Collective over the survivors of c (every member of c that is not on the
 * agreed list calls it, once per loss). lost[0 .. nlost-1] are ranks of c
 * (0 .. size-1, distinct, fewer than all; any order) this rank knows are
 * lost: its proposal. nlost 0 proposes nothing and waits for another
 * survivor's. The first proposal to reach the store becomes the agreed
 * exclude list of this shrink (one per handle name and number, whatever
 * the others proposed); every survivor reads it back and calls
 * ncclCommShrink with exactly it (flags: 0 or RDZV_COMM_SHRINK_ABORT), so
 * all survivors get the same list, or all fail. The new handle's members
 * are c's in order without the excluded (rdzv_comm_rank, rdzv_comm_size
 * and rdzv_comm_world_rank say so, and rdzv_comm_excluded gives the list);
 * its path is "shrink"; it is READY on return (a non-blocking NCCL shrink,
 * opts.nonblocking, is polled to its end within the deadline).
 *
 * c must be initialized and READY (rdzv_comm_nccl). The call holds c's
 * lock and the world's store lock while it agrees (as an init does).
 * Ownership: lost is borrowed; *out belongs to the caller
 * (rdzv_comm_destroy); it keeps c's memory, not c's communicator, alive.
 * Returns 0, or:
 *   -EINVAL            c or out NULL, timeout_s not > 0, other flags, a bad
 *                      lost list, or c not initialized (last_error says);
 *   -ENAMETOOLONG      the new name is over RDZV_COMM_NAME_MAX;
 *   RDZV_ENOT_MEMBER   this rank is not a member of c;
 *   RDZV_EEXCLUDED     this rank is on the agreed list (another survivor
 *                      declared it lost): last_error gives the list; no
 *                      NCCL call was made;
 *   RDZV_ENCCL_VERSION, RDZV_ENCCL_SYMBOL  NCCL older than 2.27, or
 *                      without ncclCommShrink (nothing was exchanged);
 *   RDZV_ENCCL         ncclCommShrink failed (last_error has NCCL's text);
 *   RDZV_EDEADLINE     no proposal came (nlost 0), or a non-blocking shrink
 *                      did not finish, by the deadline;
 *   RDZV_EPROTO        the key holds something that is not an exclude
 *                      list of c;
 *   RDZV_EABORTED, RDZV_ESTALE_GENERATION, RDZV_ENOMEM, store errors.
 * Blocks: yes, up to timeout_s (and through a blocking NCCL shrink).
 * Thread: any; not concurrently with rdzv_comm_destroy of c. */
int rdzv_comm_shrink(rdzv_comm_t *c, const int32_t *lost, int32_t nlost,
                     int flags, rdzv_comm_t **out, double timeout_s);

/* rdzv_comm_excluded - the agreed exclude list a handle was shrunk with:
 * returns its length (0 for a handle not made by rdzv_comm_shrink) and
 * points *ranks (when ranks is non-NULL) at its ranks of the parent,
 * ascending (NULL when none), owned by the handle and fixed at creation.
 * c must not be NULL. Blocks: no. Thread: any. */
int32_t rdzv_comm_excluded(const rdzv_comm_t *c, const int32_t **ranks);

/* rdzv_comm_grow - an existing member's part of a grow of c.
 *
 * Collective over c's members (each calls it with the same added list)
 * and the new members (rdzv_comm_grow_join). added[0 .. nadded-1] are the
 * world ranks of the new members (distinct, none a member of c), which
 * take new ranks size .. size+nadded-1 in that order; existing members
 * keep their ranks. Rank 0 of c makes the grow's unique id with
 * ncclCommGetUniqueId and writes it, with the new membership, once to the
 * write-once key grow/<name>/<n> (a retry of the same number finds the
 * record there and makes no new id); the others wait for it and check
 * that it names the same members. Then every existing member calls
 * ncclCommGrow(comm, new size, id for rank 0 / NULL for the others, -1).
 * The new handle has c's members then added (rdzv_comm_world_rank), path
 * "grow", and is READY on return.
 *
 * c must be initialized and READY. Holds c's lock and the world's store
 * lock while it waits for the record. Ownership: added is borrowed; *out
 * belongs to the caller and keeps c's memory alive.
 * Returns 0, or:
 *   -EINVAL            NULL c or out, timeout_s not > 0, a bad added
 *                      list, c not initialized, or rank 0 published other
 *                      members than this rank was given (last_error says);
 *   -ENAMETOOLONG      the new name is over RDZV_COMM_NAME_MAX;
 *   RDZV_ENOT_MEMBER   this rank is not a member of c;
 *   RDZV_ENCCL_VERSION, RDZV_ENCCL_SYMBOL  NCCL older than 2.29, or
 *                      without ncclCommGrow / ncclCommGetUniqueId;
 *   RDZV_ENCCL         an NCCL call failed;
 *   RDZV_EDEADLINE     rank 0's record did not come, or a non-blocking grow
 *                      did not finish, by the deadline;
 *   RDZV_EPROTO        the key holds no grow record;
 *   RDZV_EABORTED, RDZV_ESTALE_GENERATION, RDZV_ENOMEM, store errors.
 * Blocks: yes, up to timeout_s (and through a blocking NCCL grow).
 * Thread: any; not concurrently with rdzv_comm_destroy of c. */
int rdzv_comm_grow(rdzv_comm_t *c, const int32_t *added, int32_t nadded,
                   rdzv_comm_t **out, double timeout_s);

/* rdzv_comm_grow_in - rdzv_comm_grow, with new members of a later
 * generation.
 *
 * world: this process's world handle (rdzv_comm_world) of the generation
 * the new members joined: c's round, a generation >= c's, in which this
 * process kept the world rank it has in c (a survivor that joined again).
 * added[0 .. nadded-1] are world ranks of that generation (distinct, none
 * a member of c; every member of c must be < its world size too). As
 * rdzv_comm_grow, except that the record is written to and read from the
 * write-once key "rdzv/<round>/w<world's gen>/grow/<c's name>/<n>"
 * through world's store connection (under world's store lock), which the
 * new members read with rdzv_comm_grow_join(world of that generation,
 * c's name, n, ...); and that the new handle, "<c's name>.grow<n>",
 * belongs to world: rdzv_comm_generation gives world's generation, its
 * own later shrink or grow agrees under that generation's keys, and it
 * keeps world's memory (not c's) alive. n is c's number (1 + c's grows
 * that succeeded, in any generation). Rank 0 of c makes the id with
 * ncclCommGetUniqueId on c's communicator; every member calls
 * ncclCommGrow on it. NCCL is loaded into world if it was not yet; it must
 * be the library c uses. world NULL, or c's own world (the same context):
 * exactly rdzv_comm_grow (its keys, a child of c).
 *
 * A member whose world rank moved cannot take part (the record names
 * members by world rank, and NCCL keeps its old rank): it gets -EINVAL
 * before anything is exchanged, and the others wait for it (for rank 0's
 * record, up to the deadline, or in NCCL's grow); initialize a new
 * communicator in the new generation instead.
 *
 * c must be initialized and READY. Holds c's lock throughout, world's lock
 * briefly (to load NCCL into world; lock order c, then world), and world's
 * store lock (not c's) while it waits for the record; world's lock is not
 * held while it waits. Ownership: c, world and added are borrowed; *out
 * belongs to the caller (rdzv_comm_destroy): destroy it before world's
 * rendezvous handle; c's and world's handles may be destroyed before it.
 * Returns 0, or the errors of rdzv_comm_grow (last_error in c), and:
 *   -EINVAL            world is not a world handle (a sub-group's name is
 *                      given), of another round, or of a generation older
 *                      than c's; this process's world rank in world is
 *                      not its world rank in c ("its rank moved between
 *                      generations": both ranks and generations given); a
 *                      member of c has no place in world's world; world
 *                      loaded another NCCL library than c;
 *   RDZV_ENCCL_MISSING, RDZV_ENCCL_SYMBOL, RDZV_ENCCL_VERSION  loading NCCL
 *                      into world failed (world's error, copied);
 *   RDZV_EABORTED, RDZV_ESTALE_GENERATION  world's generation was aborted
 *                      or is no longer current (its store refused the key).
 * Blocks: yes, up to timeout_s (and through a blocking NCCL grow).
 * Thread: any; not concurrently with rdzv_comm_destroy of c or world. */
int rdzv_comm_grow_in(rdzv_comm_t *c, rdzv_comm_t *world, const int32_t *added,
                      int32_t nadded, rdzv_comm_t **out, double timeout_s);

/* rdzv_comm_grow_join - a new member's part of a grow.
 *
 * world: this process's world handle (rdzv_comm_world) in the rendezvous
 * round and generation where the existing members agree: the generation
 * of their communicator (rdzv_comm_grow; e.g. a hot spare that joined the
 * world but is not a member of the communicator "world.train" that
 * grows), or the generation of the world they passed to
 * rdzv_comm_grow_in (e.g. a spare that replaced a lost host in the
 * generation after the loss). name: the full name of the communicator that
 * grows ("world.train"); grow: its grow number (1 for the first grow of
 * that handle; the existing members' n). Waits for the record rank 0 of
 * the existing members writes (see rdzv_comm_grow), takes the rank the
 * record gives this world rank (key "rdzv/<round>/w<world's gen>/grow/
 * <name>/<n>"), and calls ncclCommGrow(NULL, new size, id, rank). The
 * new handle belongs to world, is named "<name>.grow<n>", has the record's
 * members, path "grow", and is READY on return. NCCL is loaded if this
 * world had not loaded it yet.
 *
 * Holds world's lock and its store lock while it waits. Ownership: name is
 * borrowed; *out belongs to the caller and keeps world's memory alive.
 * Returns 0, or:
 *   -EINVAL            NULL world or out, world not a world handle, a bad
 *                      name or grow number, timeout_s not > 0, or this
 *                      rank is an existing member (it calls
 *                      rdzv_comm_grow or rdzv_comm_grow_in);
 *   RDZV_ENOT_MEMBER   the record does not add this world rank;
 *   RDZV_ENCCL_VERSION, RDZV_ENCCL_SYMBOL, RDZV_ENCCL_MISSING  as above,
 *                      or NCCL could not be loaded;
 *   RDZV_ENCCL, RDZV_EDEADLINE, RDZV_EPROTO, RDZV_EABORTED,
 *   RDZV_ESTALE_GENERATION, RDZV_ENOMEM, store errors: as rdzv_comm_grow.
 * Blocks: yes, up to timeout_s. Thread: any. */
int rdzv_comm_grow_join(rdzv_comm_t *world, const char *name, int32_t grow,
                        rdzv_comm_t **out, double timeout_s);

/* rdzv_comm_abort - abort the communicator (ncclCommAbort).
 *
 * Aborts the NCCL communicator if one exists (ready or still
 * initializing) and releases it; the handle stays valid, and every later
 * init call returns RDZV_EABORTED. A prefetched handle still queued is
 * taken out of the queue (its ids are never exchanged). Another thread
 * waiting on a non-blocking init of the handle returns RDZV_EABORTED; one
 * inside a blocking NCCL init or an id exchange (the worker's included)
 * is waited for first (use opts.nonblocking for an init that abort can
 * interrupt). Children are not aborted. Returns 0 or -EINVAL (NULL).
 * Thread: any. */
int rdzv_comm_abort(rdzv_comm_t *c);

/* rdzv_comm_destroy - release the handle and its NCCL communicator.
 *
 * An initialized communicator is finalized (ncclCommFinalize, bounded by
 * RDZV_COMM_FINALIZE_TIMEOUT_S when non-blocking, then aborted) and
 * destroyed (ncclCommDestroy); one still initializing is aborted. A
 * prefetched handle still queued is taken out of the queue; if the
 * world's worker is working on it (its id exchange), destroy waits for
 * that step to end (at the latest at the prefetch's deadline). The NCCL
 * library is unloaded, and the world's worker thread (if any) stopped and
 * joined, when the last handle of the world is gone.
 * Children may outlive their parent: they keep its memory, not its NCCL
 * communicator (so rdzv_comm_init_split of a child fails after its parent
 * was destroyed). NULL is a no-op. Ownership: takes c. Blocks: while NCCL
 * finalizes, and while the worker works on c. Thread: any, never
 * concurrently with another call on c. */
void rdzv_comm_destroy(rdzv_comm_t *c);

/* States, see rdzv_comm_state. */
enum rdzv_comm_state {
  RDZV_COMM_IDLE = 0, /* not initialized (never, for an unused group) */
  RDZV_COMM_PENDING,  /* init running: id exchange or non-blocking NCCL
                         init, or queued for it (rdzv_comm_prefetch) */
  RDZV_COMM_READY,    /* NCCL communicator usable */
  RDZV_COMM_FAILED,   /* init failed (final) */
  RDZV_COMM_ABORTED   /* rdzv_comm_abort was called */
};

/* rdzv_comm_state - the handle's state; a snapshot (other threads may
 * change it). Blocks: no, not even while another thread initializes the
 * handle. Thread: any. */
enum rdzv_comm_state rdzv_comm_state(rdzv_comm_t *c);

/* rdzv_comm_rank / rdzv_comm_size - this rank in the communicator (-1 for
 * a non-member) and the number of members (0 for a non-member of a
 * split). Fixed at creation. Thread: any. */
int32_t rdzv_comm_rank(const rdzv_comm_t *c);
int32_t rdzv_comm_size(const rdzv_comm_t *c);

/* rdzv_comm_world_rank - the world rank of member `rank` (0 .. size-1), or
 * -1 when out of range. Thread: any. */
int32_t rdzv_comm_world_rank(const rdzv_comm_t *c, int32_t rank);

/* rdzv_comm_name - the full name ("world.tp.3"), owned by the handle and
 * fixed at creation. rdzv_comm_generation - the rendezvous generation it
 * belongs to. Thread: any. */
const char *rdzv_comm_name(const rdzv_comm_t *c);
int64_t rdzv_comm_generation(const rdzv_comm_t *c);

/* rdzv_comm_init_path - "config", "scalable" or "split" once an init has
 * been started (whether it succeeded or not), "shrink" or "grow" for a
 * handle made by those calls, else NULL. Static strings.
 * Thread: any; waits while another thread (or the world's worker) is
 * inside an init step of the handle (as rdzv_comm_timings does). */
const char *rdzv_comm_init_path(rdzv_comm_t *c);

/* Per-phase timings of the handle's init, seconds (monotonic clock). */
struct rdzv_comm_timings {
  double ids_s;  /* id exchange through the tree (0 for "split"; for
                    "shrink" and "grow", the agreement through the
                    store) */
  double init_s; /* NCCL init: the init call until NCCL reported success
                    (for a non-blocking init, the poll that saw it) */
  int64_t nids;  /* unique ids used (0 for "split" and "shrink", 1 for
                    "grow") */
};

/* rdzv_comm_timings - copy the timings into *t. Fields are 0 until the
 * phase has finished. Returns 0 or -EINVAL (NULL). Thread: any. */
int rdzv_comm_timings(rdzv_comm_t *c, struct rdzv_comm_timings *t);

/* rdzv_comm_last_error - detail of the last failure on this handle; never
 * NULL, "" when none. Owned by the handle and rewritten by the next
 * failing call: read it on the thread that saw the failure while no other
 * thread calls into the handle. */
const char *rdzv_comm_last_error(const rdzv_comm_t *c);

#ifdef __cplusplus
}
#endif
#endif /* RDZV_COMM_H */
