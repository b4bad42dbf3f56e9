/* rdzvctl rounds (rounds.c). */
#ifndef RDZV_TOOLS_CTL_ROUNDS_H
#define RDZV_TOOLS_CTL_ROUNDS_H

#include <stddef.h>
#include <stdio.h>

/* Prints job's rounds (all, or the one named round when not NULL) from a
 * daemon's statistics JSON (stats, as rdzv_store_stats gives it; the
 * root's carry "rounds") to out. 0, or -1 with why in err (errlen bytes):
 * not JSON, a daemon that is not the root, no such job or round. */
int rdzvctl_print_rounds(const char *stats, const char *job, const char *round,
                         FILE *out, char *err, size_t errlen);

/* As rdzvctl_print_rounds, the members of each round: the last complete
 * world by node rank (host, ranks, role, domain), the parked spares and
 * the places that changed hands (rdzvctl members). */
int rdzvctl_print_members(const char *stats, const char *job, const char *round,
                          FILE *out, char *err, size_t errlen);

/* The job's quarantined hosts (host and reason, one a line; "no host is
 * quarantined" when none) from a root's statistics, as above. */
int rdzvctl_print_quarantine(const char *stats, const char *job, FILE *out,
                             char *err, size_t errlen);

#endif
