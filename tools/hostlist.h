/* Slurm host lists ("nodeA,nodeB[001,003],rack[0-1]_blade[0-1]"),
 * expanded in-process exactly as `scontrol show hostnames` (Slurm 22.05)
 * does, so that the Slurm Prolog never calls a Slurm command (field
 * failures B22 and B42).
 *
 * A pure codec: no I/O, no clock, no allocation, no globals. Each call
 * needs a few KiB of stack (one name buffer and RDZV_HOSTLIST_MAX_GROUPS
 * group states) whatever the size of the list, and reads the list twice:
 * once to check all of it, once to expand it. A callback therefore never
 * sees a name of a list that turns out to be malformed.
 *
 * The language (what scontrol accepts, found by experiment and from
 * Slurm's src/common/hostlist.c; tests/unit/hostlist_vectors.txt holds
 * scontrol's answers):
 *   - Names are separated by ',', ' ' or '\t' outside brackets; empty
 *     names between separators are skipped ("a,,b" is a, b).
 *   - "[...]" holds comma-separated numbers and ranges LO-HI (LO <= HI, at
 *     most 65536 values each). Each value is printed at least as wide as
 *     LO was written, zero-padded: "n[08-10]" is n08 n09 n10, "n[8-10]"
 *     is n8 n9 n10. Input order and duplicates are kept.
 *   - A name may hold several bracket groups but must end with its last
 *     ']' ("a[1-2]b" is rejected). The last group varies fastest, then
 *     the first, the second, ..., and the second-to-last slowest: for two
 *     groups that is plain nesting (rack0_blade0, rack0_blade1,
 *     rack1_blade0, ...); "a[1-2]b[3-4]c[5-6]" gives a1b3c5 a1b3c6 a2b3c5
 *     a2b3c6 a1b4c5 ... (scontrol's order). Each group but the last has
 *     at most 65536 values.
 *   - Slurm's number parsing (strtoul) is kept: blanks and a '+' before a
 *     number, and text after LO when a HI follows, count toward the width
 *     ("n[ 1]" is n01, "n[1y-3]" is n01 n02 n03); anything after HI, a
 *     'x', an empty range, "--" are errors.
 * Stricter than scontrol, which accepts these but prints names that are
 * not in the list or drops hosts (see the header of hostlist.c): an
 * unmatched '[' or ']', a '[' inside brackets, control characters and NUL
 * bytes, numbers of 2^64-1 or more, a bracket group that expands to more
 * than 65536 values anywhere before the last group, more than
 * RDZV_HOSTLIST_MAX_GROUPS groups in one name, a name longer than
 * RDZV_HOSTLIST_NAME_MAX bytes.
 *
 * Every function may be called from any thread; they share nothing. */
#ifndef RDZV_TOOLS_HOSTLIST_H
#define RDZV_TOOLS_HOSTLIST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A limit callers may pass as max_hosts: 2^20 hosts (Slurm's largest
 * systems have some 10^4-10^5 nodes). */
#define RDZV_HOSTLIST_MAX_HOSTS ((size_t)1 << 20)

/* Longest host name produced, in bytes, without its terminating NUL. */
#define RDZV_HOSTLIST_NAME_MAX 255

/* Most bracket groups in one name. */
#define RDZV_HOSTLIST_MAX_GROUPS 64

/* Where and why a list was rejected. */
struct rdzv_hostlist_error {
  size_t pos;         /* 0-based byte offset into the list */
  const char *reason; /* static text, e.g. "'[' without ']'" */
};

/* Called once per host, in scontrol's order. name[0..len) is the name,
 * name[len] is '\0'; len is 1 .. RDZV_HOSTLIST_NAME_MAX and the name
 * holds no ',', '[', ']', blank or control character. name is valid only
 * until the callback returns. Return 0 to go on; any other value stops the
 * expansion, which then returns that value. */
typedef int (*rdzv_hostlist_cb)(const char *name, size_t len, void *arg);

/* Checks list[0..len) (no terminating NUL needed; list may be NULL when
 * len is 0) and sets *count to its number of hosts, duplicates included.
 * Returns:
 *   0                  success (an empty list, or one of separators only,
 *                      has 0 hosts)
 *   RDZV_EBAD_ADDR     malformed list
 *   -E2BIG             more than max_hosts hosts
 *   -ENAMETOOLONG      a name longer than RDZV_HOSTLIST_NAME_MAX bytes
 *   -EINVAL            count is NULL, or list is NULL with len > 0
 * On the first three, *err (when err is not NULL) receives the offset of
 * the error (for -E2BIG and -ENAMETOOLONG: of the name that passed the
 * limit) and a reason; *count is left alone on any error. */
int rdzv_hostlist_count(const char *list, size_t len, size_t max_hosts,
                        size_t *count, struct rdzv_hostlist_error *err);

/* Checks list[0..len) as rdzv_hostlist_count does, then calls cb(name,
 * namelen, arg) for each host in order. Returns 0 after the last host, the
 * callback's value if it stopped early, or the errors of
 * rdzv_hostlist_count (then cb was never called); -EINVAL also for a NULL
 * cb. arg is passed through untouched. */
int rdzv_hostlist_expand(const char *list, size_t len, size_t max_hosts,
                         rdzv_hostlist_cb cb, void *arg,
                         struct rdzv_hostlist_error *err);

/* Sets *index to the 0-based position of the first occurrence of host
 * (a NUL-terminated name) in the expanded list. Returns 0, RDZV_ETOPOLOGY
 * if host is not in the list (*index untouched), -EINVAL for a NULL host
 * or index, or the errors of rdzv_hostlist_count. */
int rdzv_hostlist_find(const char *list, size_t len, size_t max_hosts,
                       const char *host, size_t *index,
                       struct rdzv_hostlist_error *err);

/* Where a host sits in the job's tree (rdzv_tree_parent in
 * rendezvous/topo.h): host i > 0 hangs off host (i - 1) / fanout, host 0
 * off the root. */
struct rdzv_hostlist_pos {
  size_t index;      /* first occurrence of the host in the list */
  size_t nancestors; /* hosts from its parent up to host 0; 0 for host 0 */
  size_t names_len;  /* bytes of names used (or needed, on -ENOBUFS) */
};

/* Finds host as rdzv_hostlist_find does, then writes the names of its
 * ancestors to names[0..cap), nearest first (its parent, the parent's
 * parent, ..., host 0), each followed by '\0', and fills *pos. fanout is
 * >= 1; with fanout 1 the ancestors are all the hosts before it, so names
 * may need up to index * (RDZV_HOSTLIST_NAME_MAX + 1) bytes. names may be
 * NULL when cap is 0. Returns 0; -ENOBUFS if cap is too small (then *pos
 * is filled, names_len giving the bytes needed, and names[0..cap) holds
 * nothing usable); -EINVAL for fanout 0 or a NULL pos; or the errors of
 * rdzv_hostlist_find. */
int rdzv_hostlist_tree_position(const char *list, size_t len, size_t max_hosts,
                                const char *host, size_t fanout, char *names,
                                size_t cap, struct rdzv_hostlist_pos *pos,
                                struct rdzv_hostlist_error *err);

#ifdef __cplusplus
}
#endif
#endif /* RDZV_TOOLS_HOSTLIST_H */
