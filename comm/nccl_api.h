/* comm/nccl_api.h: NCCL loaded at run time, behind a function table.
 *
 * Private to comm/ (and its tests); never installed.
 *
 * No part of rdzv links CUDA or NCCL at build time: rdzvd and the store run
 * on machines without either, and a rank may choose its libnccl at run time.
 * So comm/ reaches NCCL only through `struct rdzv_nccl_api`, filled by
 * dlopen/dlsym in rdzv_nccl_load(). Tests load a fake library
 * (tests/fake_nccl) through the very same call, so the production seam is
 * the test seam.
 *
 * This header therefore does not include <nccl.h>. The types below mirror
 * NCCL's ABI instead: they are copied from /usr/local/cuda/include/nccl.h of
 * NCCL 2.28.9 (NCCL_VERSION_CODE 22809). tests/unit/nccl_api_test.c includes
 * the real nccl.h where one is installed and static-asserts that every size,
 * offset and constant here equals NCCL's. When NCCL changes its ABI, that
 * test fails to compile, and this mirror is updated from the new header.
 *
 * Threads: after rdzv_nccl_load() returns, the table is immutable and any
 * thread may read it; whether an NCCL call may be made concurrently with
 * another is NCCL's rule, not ours. */
#ifndef RDZV_COMM_NCCL_API_H
#define RDZV_COMM_NCCL_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Mirror of NCCL 2.28.9's ABI (nccl.h), see the header comment. ---- */

/* NCCL_UNIQUE_ID_BYTES and ncclUniqueId: passed by value to
 * ncclCommInitRankConfig, so size and alignment both matter. */
#define RDZV_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[RDZV_NCCL_UNIQUE_ID_BYTES];
} rdzv_nccl_unique_id;

/* ncclComm_t: an opaque pointer. The struct is never defined. */
typedef struct rdzv_nccl_comm *rdzv_nccl_comm_t;

/* cudaStream_t (a pointer to the opaque struct CUstream_st). NULL is the
 * legacy default stream. */
typedef struct rdzv_cuda_stream *rdzv_cuda_stream_t;

/* ncclResult_t. Same enumerators and values, hence the same underlying
 * integer type. */
typedef enum {
  RDZV_NCCL_SUCCESS = 0,
  RDZV_NCCL_UNHANDLED_CUDA_ERROR = 1,
  RDZV_NCCL_SYSTEM_ERROR = 2,
  RDZV_NCCL_INTERNAL_ERROR = 3,
  RDZV_NCCL_INVALID_ARGUMENT = 4,
  RDZV_NCCL_INVALID_USAGE = 5,
  RDZV_NCCL_REMOTE_ERROR = 6,
  RDZV_NCCL_IN_PROGRESS = 7,
  RDZV_NCCL_NUM_RESULTS = 8
} rdzv_nccl_result;

/* ncclDataType_t and ncclRedOp_t are int-sized enums in NCCL. We keep them
 * as plain int (same size and calling convention) and name only the values
 * comm/ uses. */
typedef int rdzv_nccl_datatype;
#define RDZV_NCCL_INT32 2   /* ncclInt32 */
#define RDZV_NCCL_INT64 4   /* ncclInt64 */
#define RDZV_NCCL_FLOAT32 7 /* ncclFloat32 */
typedef int rdzv_nccl_redop;
#define RDZV_NCCL_SUM 0 /* ncclSum */
#define RDZV_NCCL_MAX 2 /* ncclMax */

/* NCCL_SPLIT_NOCOLOR: the color of a rank that joins no child comm. */
#define RDZV_NCCL_SPLIT_NOCOLOR (-1)

/* ncclCommShrink's flags (NCCL 2.27): NCCL_SHRINK_DEFAULT shrinks a healthy
 * parent; NCCL_SHRINK_ABORT first terminates the parent's ongoing
 * operations (use it when a member died). */
#define RDZV_NCCL_SHRINK_DEFAULT 0x00
#define RDZV_NCCL_SHRINK_ABORT 0x01

/* NCCL_VERSION(X, Y, Z) for X.Y >= 2.9; older releases used
 * X * 1000 + Y * 100 + Z, which is always smaller. */
#define RDZV_NCCL_VERSION(x, y, z) ((x)*10000 + (y)*100 + (z))

/* ncclConfig_t as of NCCL 2.28 (`struct ncclConfig_v22800` in nccl.h of
 * NCCL 2.28.9). Field names are NCCL's, so that the mapping is obvious.
 * Initialize with rdzv_nccl_config_init(), the equivalent of
 * NCCL_CONFIG_INITIALIZER: NCCL rejects a config whose magic is wrong, and
 * uses `version` to decide which fields the caller knew about (a library
 * older than 2.28 reads only the prefix it knows). */
#define RDZV_NCCL_CONFIG_MAGIC 0xcafebeefu
/* The version NCCL_CONFIG_INITIALIZER of the mirrored header writes. */
#define RDZV_NCCL_CONFIG_VERSION RDZV_NCCL_VERSION(2, 28, 9)
/* NCCL_CONFIG_UNDEF_INT is INT_MIN; NCCL_CONFIG_UNDEF_PTR is NULL. */
#define RDZV_NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)
struct rdzv_nccl_config {
  /* Attributes NCCL says users should never touch. */
  size_t size;
  unsigned int magic;
  unsigned int version;
  /* Attributes users may set. */
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
};

/* ---- The function table. ---- */

/* The oldest NCCL rdzv accepts: 2.23.0 added ncclCommInitRankScalable. */
#define RDZV_NCCL_MIN_VERSION RDZV_NCCL_VERSION(2, 23, 0)
/* The releases that added the optional entry points (see the table):
 * ncclCommShrink in 2.27.0, ncclCommGetUniqueId and ncclCommGrow in
 * 2.29.0. */
#define RDZV_NCCL_SHRINK_VERSION RDZV_NCCL_VERSION(2, 27, 0)
#define RDZV_NCCL_GROW_VERSION RDZV_NCCL_VERSION(2, 29, 0)

/* The library rdzv_nccl_load() tries when the caller names none: first
 * through the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache),
 * then at the usual CUDA install path. */
#define RDZV_NCCL_DEFAULT_SONAME "libnccl.so.2"
#define RDZV_NCCL_DEFAULT_CUDA_PATH "/usr/local/cuda/lib64/libnccl.so.2"

/* One member per NCCL entry point comm/ uses, each with NCCL's signature in
 * mirrored types; the comment names the symbol. All are non-NULL in a table
 * returned by rdzv_nccl_load(), except the optional ones at the end, which
 * are NULL when the library lacks them (check with rdzv_nccl_optional()
 * before a call). */
struct rdzv_nccl_api {
  /* The NCCL_VERSION code ncclGetVersion reported at load time. */
  int version;
  /* The path or name that was passed to dlopen (owned by the table). */
  char *path;
  /* The dlopen handle (owned by the table). */
  void *dl;

  /* ncclGetVersion */
  rdzv_nccl_result (*get_version)(int *version);
  /* ncclGetUniqueId */
  rdzv_nccl_result (*get_unique_id)(rdzv_nccl_unique_id *id);
  /* ncclCommInitRankConfig */
  rdzv_nccl_result (*comm_init_rank_config)(rdzv_nccl_comm_t *comm, int nranks,
                                            rdzv_nccl_unique_id id, int rank,
                                            struct rdzv_nccl_config *config);
  /* ncclCommInitRankScalable */
  rdzv_nccl_result (*comm_init_rank_scalable)(rdzv_nccl_comm_t *comm,
                                              int nranks, int rank, int n_ids,
                                              rdzv_nccl_unique_id *ids,
                                              struct rdzv_nccl_config *config);
  /* ncclCommSplit */
  rdzv_nccl_result (*comm_split)(rdzv_nccl_comm_t comm, int color, int key,
                                 rdzv_nccl_comm_t *child,
                                 struct rdzv_nccl_config *config);
  /* ncclCommGetAsyncError */
  rdzv_nccl_result (*comm_get_async_error)(rdzv_nccl_comm_t comm,
                                           rdzv_nccl_result *async_error);
  /* ncclCommFinalize */
  rdzv_nccl_result (*comm_finalize)(rdzv_nccl_comm_t comm);
  /* ncclCommDestroy */
  rdzv_nccl_result (*comm_destroy)(rdzv_nccl_comm_t comm);
  /* ncclCommAbort */
  rdzv_nccl_result (*comm_abort)(rdzv_nccl_comm_t comm);
  /* ncclGetErrorString */
  const char *(*get_error_string)(rdzv_nccl_result result);
  /* ncclGetLastError */
  const char *(*get_last_error)(rdzv_nccl_comm_t comm);
  /* ncclAllReduce */
  rdzv_nccl_result (*all_reduce)(const void *sendbuf, void *recvbuf,
                                 size_t count, rdzv_nccl_datatype datatype,
                                 rdzv_nccl_redop op, rdzv_nccl_comm_t comm,
                                 rdzv_cuda_stream_t stream);
  /* ncclCommCount */
  rdzv_nccl_result (*comm_count)(const rdzv_nccl_comm_t comm, int *count);
  /* ncclCommUserRank */
  rdzv_nccl_result (*comm_user_rank)(const rdzv_nccl_comm_t comm, int *rank);

  /* Optional: NULL when the library does not export them (a library older
   * than the release that added them loads all the same). */
  /* ncclCommShrink (2.27): survivors pass the same exclude list (ranks of
   * comm); the new ranks are the old ones in order, excluded ones left
   * out. */
  rdzv_nccl_result (*comm_shrink)(rdzv_nccl_comm_t comm, int *exclude_ranks,
                                  int exclude_count, rdzv_nccl_comm_t *newcomm,
                                  struct rdzv_nccl_config *config, int flags);
  /* ncclCommGetUniqueId (2.29): the id of a grow of comm. */
  rdzv_nccl_result (*comm_get_unique_id)(rdzv_nccl_comm_t comm,
                                         rdzv_nccl_unique_id *id);
  /* ncclCommGrow (2.29): existing members pass their comm and rank -1 (the
   * one that made the id passes it, the others NULL); new members pass a
   * NULL comm, the id and their new rank. */
  rdzv_nccl_result (*comm_grow)(rdzv_nccl_comm_t comm, int nranks,
                                const rdzv_nccl_unique_id *id, int rank,
                                rdzv_nccl_comm_t *newcomm,
                                struct rdzv_nccl_config *config);
};

/* rdzv_nccl_default_path - the NCCL library the environment asks for.
 *
 * Returns the value of the environment variable RDZV_NCCL_LIBRARY, or NULL
 * when it is unset or empty. This is the one place rdzv reads that
 * variable: configuration code calls it once and passes the result to
 * rdzv_nccl_load(); nothing deeper reads the environment.
 *
 * Ownership: the string belongs to the environment; copy it before the
 * environment may change.
 * Errors: none. Blocks: no.
 * Thread: like getenv(), not safe against a concurrent setenv(). */
const char *rdzv_nccl_default_path(void);

/* rdzv_nccl_load - open an NCCL library and fill a function table.
 *
 * `path` is the library to open, as the caller's configuration chose it
 * (an option, else rdzv_nccl_default_path()). When `path` is non-NULL and
 * non-empty it is the only library tried: an explicit choice never falls
 * back silently to another NCCL. When it is NULL or empty,
 * RDZV_NCCL_DEFAULT_SONAME is tried through the loader's search, then
 * RDZV_NCCL_DEFAULT_CUDA_PATH.
 *
 * The library is opened with RTLD_NOW | RTLD_LOCAL (all symbols bound now,
 * none leaked into the global namespace) and RTLD_NODELETE: NCCL starts
 * threads of its own (ncclGetUniqueId's bootstrap root, proxy threads) that
 * can outlive our table, and unmapping their code under them would crash
 * the process.
 *
 * ncclGetVersion is resolved and called first, so that a library older than
 * RDZV_NCCL_MIN_VERSION is reported as too old rather than as missing the
 * symbols it predates; then every other entry point is resolved (the
 * optional ones, left NULL when absent, never fail the load).
 *
 * Ownership: `path` is borrowed (copied into the table). On success, *out
 * is a new table owned by the caller and released with rdzv_nccl_unload().
 * On failure *out is NULL and, when `err` is non-NULL and `errlen` > 0, a
 * NUL-terminated message (truncated to fit) is written to `err`.
 *
 * Returns:
 *   0                    success.
 *   -EINVAL              `out` is NULL.
 *   RDZV_ENOMEM          out of memory.
 *   RDZV_ENCCL_MISSING   no library could be opened; `err` lists every path
 *                        tried, each with the dlerror() text.
 *   RDZV_ENCCL_SYMBOL    the library lacks required entry points; `err`
 *                        names each missing symbol.
 *   RDZV_ENCCL_VERSION   the library is older than RDZV_NCCL_MIN_VERSION;
 *                        `err` gives the version found and the one needed.
 *   RDZV_ENCCL           ncclGetVersion itself failed; `err` has NCCL's
 *                        error string.
 *
 * Blocks: yes, while the loader maps the library (libnccl is large) and
 * runs its constructors; never call it on an event-loop thread.
 * Thread: any; concurrent loads are safe (dlopen serializes). */
int rdzv_nccl_load(const char *path, struct rdzv_nccl_api **out, char *err,
                   size_t errlen);

/* rdzv_nccl_load_first - rdzv_nccl_load() over an explicit candidate list.
 *
 * Tries `candidates[0 .. n-1]` in order and fills a table from the first
 * one dlopen accepts; rdzv_nccl_load() calls it with its one or two
 * candidates. Exposed so that callers (and tests) with a search list of
 * their own get the same checks and messages. Only dlopen failures move on
 * to the next candidate: a library that opens but lacks a symbol or is too
 * old is an error at once, since a later candidate would be a different
 * NCCL than the one the loader prefers.
 *
 * Ownership, returns, blocking and threads as for rdzv_nccl_load(); n == 0
 * or a NULL `candidates` returns RDZV_ENCCL_MISSING ("no path to try"). */
int rdzv_nccl_load_first(const char *const *candidates, size_t n,
                         struct rdzv_nccl_api **out, char *err, size_t errlen);

/* rdzv_nccl_optional - whether an optional entry point may be called.
 *
 * `symbol` names the entry point (e.g. "ncclCommShrink"), `since` the
 * NCCL_VERSION code of the release that added it, `present` whether the
 * table's member is non-NULL. Returns 0 when the loaded library is at least
 * `since` and exports the symbol; otherwise writes a message that names the
 * library, the version found and the one needed to `err` (when non-NULL and
 * `errlen` > 0) and returns RDZV_ENCCL_VERSION (the library is older than
 * `since`) or RDZV_ENCCL_SYMBOL (new enough, but the symbol is missing).
 * Ownership: all pointers borrowed. Blocks: no. Thread: any. */
int rdzv_nccl_optional(const struct rdzv_nccl_api *api, const char *symbol,
                       int since, int present, char *err, size_t errlen);

/* rdzv_nccl_unload - release a table from rdzv_nccl_load().
 *
 * Drops our reference on the library (dlclose; because of RTLD_NODELETE
 * the code stays mapped) and frees the table. NULL is a no-op.
 * Ownership: takes `api`, which is invalid afterwards, as is every function
 * pointer read from it. Communicators should be destroyed first.
 * Errors: none (a failing dlclose is ignored: nothing can be done).
 * Thread: any, once no other thread uses the table. */
void rdzv_nccl_unload(struct rdzv_nccl_api *api);

/* rdzv_nccl_config_init - the equivalent of NCCL_CONFIG_INITIALIZER.
 *
 * Sets size, magic and version as NCCL 2.28.9's initializer does, every
 * int field to RDZV_NCCL_CONFIG_UNDEF_INT and every pointer to NULL, so
 * NCCL applies its defaults (and its NCCL_* environment overrides) to each
 * field the caller leaves alone.
 * Ownership: `cfg` is borrowed. Errors: none. Thread: any. */
void rdzv_nccl_config_init(struct rdzv_nccl_config *cfg);

/* rdzv_nccl_version_format - write an NCCL_VERSION code as "X.Y.Z".
 *
 * Decodes both encodings NCCL has used: X * 10000 + Y * 100 + Z from 2.9
 * on, X * 1000 + Y * 100 + Z before. Writes at most `n` bytes including the
 * NUL (truncating) and returns `buf`, so it can be used as a printf
 * argument. A negative code is written as "unknown".
 * Ownership: `buf` is borrowed. Errors: none. Thread: any. */
char *rdzv_nccl_version_format(int code, char *buf, size_t n);

/* rdzv_nccl_check - turn an NCCL result into an rdzv status.
 *
 * Returns 0 for RDZV_NCCL_SUCCESS. For any other result, including
 * RDZV_NCCL_IN_PROGRESS (callers that expect it test for it before
 * calling), writes "<what>: <NCCL's error string> (ncclResult <n>)" to
 * `err` (when non-NULL and `errlen` > 0), appending NCCL's last error text
 * for `comm` when `comm` is non-NULL and that text is non-empty, and
 * returns RDZV_ENCCL.
 * Ownership: all pointers borrowed; `comm` may be NULL. `what` is a short
 * description of the call, e.g. "ncclCommInitRankScalable".
 * Thread: any thread that may call ncclGetLastError on `comm`. */
int rdzv_nccl_check(const struct rdzv_nccl_api *api, rdzv_nccl_comm_t comm,
                    rdzv_nccl_result result, const char *what, char *err,
                    size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* RDZV_COMM_NCCL_API_H */
