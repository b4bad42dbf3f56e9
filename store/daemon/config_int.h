/* rdzvd options: what config.c (reading them) and config_check.c
 * (checking them) offer each other. Private to store/daemon's config. */
#ifndef RDZV_STORE_DAEMON_CONFIG_INT_H
#define RDZV_STORE_DAEMON_CONFIG_INT_H

#include <stddef.h>

#include "store/daemon/config.h"

/* ---- config.c ---- */
/* *field = a copy of the n bytes at v (empty for n 0), freeing what it
 * held. 0 or -ENOMEM (the field unchanged). */
int rdzv__config_str_set(const char **field, const char *v, size_t n);

/* ---- config_check.c: each 0, or -EINVAL with why in err (errlen
 * bytes), but where said ---- */
/* cfg->allow_uids ("U1,U2,...", "" none) into cfg->allow_uid. Every entry
 * must be one (no empty ones), at most RDZV_MAX_ALLOW_UIDS, naming the
 * bad entry. */
int rdzv__config_resolve_allow_uids(struct rdzv_daemon_config *cfg, char *err,
                                    size_t errlen);
/* --tcpstore-listen PORT means 127.0.0.1:PORT. 0 or -ENOMEM. */
int rdzv__config_tcpstore_default_host(struct rdzv_daemon_config *cfg);
/* "--parent P,A1,A2": P stays the parent, A1,A2 become the ancestors;
 * each must be an address, the parent at most 255 bytes, at most 16
 * ancestors (-ENOMEM too). */
int rdzv__config_split_parent(struct rdzv_daemon_config *cfg, char *err,
                              size_t errlen);
/* Checks the values together, once all are read. */
int rdzv__config_check(const struct rdzv_daemon_config *cfg, char *err,
                       size_t errlen);

#endif /* RDZV_STORE_DAEMON_CONFIG_INT_H */
