/* rdzvd configuration: one table of options (name, environment variable,
 * default, help), read in one place. */
#ifndef RDZV_STORE_CONFIG_H
#define RDZV_STORE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum rdzv_daemon_role {
  RDZV_DAEMON_ROOT = 0,
  RDZV_DAEMON_NODE = 1,
};

/* --children auto: a node does not know how many child nodes it has. */
#define RDZV_CHILDREN_UNKNOWN UINT32_MAX

/* The most entries --allow-uids may list (the daemon's own uid and root
 * are allowed besides). */
#define RDZV_MAX_ALLOW_UIDS 64

/* The longest value of each string option, in bytes without the NUL (a
 * longer one is refused at parse time and by rdzv_config_set). */
#define RDZV_CONFIG_STR_MAX 255   /* addresses, paths, names, ids */
#define RDZV_CONFIG_NAME_MAX 127  /* --name */
#define RDZV_CONFIG_LIST_MAX 2047 /* --parent, --etcd: lists of addresses */
#define RDZV_CONFIG_UIDS_MAX 1023 /* --allow-uids */

/* A daemon's configuration. Every string member is NUL-terminated and
 * owned by the config: a heap copy, or a shared "" (never NULL once
 * rdzv_config_parse or rdzv_config_copy has filled it). Change one only
 * with rdzv_config_set; release them with rdzv_config_free. A config
 * holds its strings at their own lengths, so a process that runs
 * thousands of daemons (rdzv-bench) keeps about 600 bytes a daemon here,
 * not the 11.5 KB of fixed arrays it once was. */
struct rdzv_daemon_config {
  enum rdzv_daemon_role role;
  const char *listen;    /* "HOST:PORT" for TCP (ranks and child nodes), or
                          "HOST:FIRST-LAST": the first free port of the
                          range */
  const char *unix_path; /* Unix socket for local ranks, "" for none */
  /* --allow-uids as given (comma-separated uids or user names), and the
   * uids it names, resolved once at parse time: with the daemon's own
   * (effective) uid and root, the peers the Unix socket accepts
   * (SO_PEERCRED). allow_uid[0..nallow_uids). */
  const char *allow_uids;
  uint32_t allow_uid[RDZV_MAX_ALLOW_UIDS];
  uint32_t nallow_uids;
  const char *parent;    /* node: the parent's address (rdzv client syntax);
                           given as "PARENT,GRANDPARENT,...,ROOT" the rest
                           goes to ancestors at parse time */
  const char *ancestors; /* node: the ancestors above the parent, comma-
                           separated, nearest first ("" : learned) */
  const char *port_file; /* after bind, the TCP port is written here */
  const char *name;      /* this daemon's name in logs and stats */
  uint32_t max_key_bytes;
  uint32_t max_value_bytes;
  uint32_t max_frame_bytes;
  uint32_t max_hello_bytes; /* a frame before the hello is admitted */
  uint32_t max_job_bytes;   /* root: one job's keys, values, records and
                               pending contributions; 0 = no cap */
  uint32_t max_outstanding;
  uint32_t max_connections;
  uint32_t backlog;
  uint32_t flush_ms;     /* collective/add combining quiet interval */
  uint32_t flush_max_ms; /* ... and the longest a contribution is held */
  uint32_t children;     /* node: child nodes each job has below this one
                            (RDZV_CHILDREN_UNKNOWN: not told) */
  uint32_t local_ranks;  /* node: ranks each job has on this node
                            (RDZV_CHILDREN_UNKNOWN: not told) */
  uint32_t hello_timeout_ms;
  uint32_t job_linger_ms; /* free a job this long after its last connection */
  uint32_t upstream_timeout_ms;  /* node: fail what waits this long for a
                                    parent that cannot be reached */
  uint32_t upstream_wait_max_ms; /* node: longest wait asked of the parent
                                    at once (asked again while needed) */
  uint32_t dedup_window_ms;      /* root: how long a mutation's answer is
                                    kept for a re-send of it */
  uint32_t session_grace_ms;     /* how long a lost child node's members
                                    wait for a re-send (0: abort at once) */
  uint32_t spare_wait_ms;        /* root: how long a generation waits for
                                    its previous hosts before spares take
                                    their places */
  const char *health_cmd;        /* node: the host health gate's command,
                                    run by /bin/sh -c ("": none) */
  uint32_t health_timeout_ms;    /* node: ... killed and failed after this
                                    long */
  uint32_t heartbeat_ms;         /* node: ping the parent after this long
                                    without a frame from it */
  uint32_t liveness_timeout_ms;  /* a parent or child node silent this long
                                    is lost (> heartbeat_ms) */
  /* Copies of mutable keys (store/daemon/keys/copies.h): whether nodes
   * keep them and parents grant them; how long a parent's lease on them
   * lasts (0: half of --liveness-timeout-ms; less than it); how long a key
   * written while copies of it were held is not granted again. */
  bool cache_mutable;
  uint32_t copy_lease_ms; /* read through rdzv_config_copy_lease_ms */
  uint32_t copy_cooldown_ms;
  uint32_t max_copies;    /* keys one job's copies may cover: a node's copies
                             kept, a parent's keys with holders registered */
  uint32_t log_level;     /* 0 errors, 1 info, 2 debug */
  const char *log_format; /* "text" or "json" (one object a line) */
  /* PyTorch c10d TCPStore front end (store/daemon/tcpstore/tcpstore.c):
   * HOST:PORT, "" for none; the job its clients' keys live in; where to write
   * its port. */
  /* A durable root on etcd (store/daemon/durable): the endpoints
   * ("" = the in-memory root), the key prefix, a file with "user:password"
   * ("" none), TLS files ("" none), the address this root tells nodes and
   * standbys ("" = its --listen address as bound), the lease TTL of the
   * leader and of a job's state, and the limits a transaction keeps
   * below. */
  const char *etcd;
  const char *etcd_prefix;
  const char *etcd_credentials;
  const char *etcd_ca;
  const char *etcd_cert;
  const char *etcd_key;
  const char *advertise;
  uint32_t etcd_lease_ttl_s;
  uint32_t etcd_job_ttl_s;
  uint32_t etcd_timeout_ms;
  uint32_t etcd_max_txn_ops;
  uint32_t etcd_max_request_bytes;
  const char *tcpstore_listen;
  const char *tcpstore_job;
  const char *tcpstore_port_file;
  uint32_t tcpstore_spaces; /* --tcpstore-spaces: key spaces open at once
                               (0: none served) */
  bool tcpstore_remote;     /* --tcpstore-remote: a non-loopback
                               --tcpstore-listen host is served (warned) */
  const char *job;          /* child nodes of this job only ("": any): a child's
                             hello naming another is refused (RDZV_EJOB_MISMATCH) */
  /* The job secret (store/auth): a file that holds the secret of every
   * job this daemon serves (with job: of that job), or a directory with
   * one file per job id; "" for none (at most one of them is set). */
  const char *secret_file;
  const char *secret_dir;
  /* TLS (store/tls): a directory of tls.crt, tls.key and ca.crt, and
   * files that override its; all "": plain TCP. */
  const char *tls_dir, *tls_cert, *tls_key, *tls_ca;
  uint32_t connect_timeout_ms; /* node: one attempt (connect and hello) at
                                  one address and port of the parent */
  uint32_t home_after_ms;      /* node: a job's link on an ancestor returns to
                                  the parent once that one answered probes
                                  this long without a failure; 0: it stays */
  /* --http-listen: operators' HTTP (store/daemon/http; "": none), and its
   * limits: connections at once, idle time, a connection's memory. */
  const char *http_listen;
  const char *http_port_file; /* "": none */
  uint32_t http_max_connections;
  uint32_t http_max_connections_per_ip; /* 0: no limit of its own */
  uint32_t http_timeout_ms;
  uint32_t http_max_request_bytes;
  uint32_t share_min_bytes; /* values of at least this many bytes are
                               written from their shared buffer, not
                               copied per connection */
};

/* Whether host (an address without its port or brackets) means this host
 * only: an IPv4 address in 127.0.0.0/8, ::1 (or ::ffff:127.x.y.z), or the
 * name "localhost". Any other name, and the wildcards, are not. */
bool rdzv_config_host_loopback(const char *host);

/* Fills *cfg (uninitialized: its old contents are not freed) from
 * defaults, then the environment (RDZVD_* variables), then
 * argv (--name=value or --name value; a flag such as --tcpstore-remote
 * alone, or --flag=yes|no). A variable whose value is refused is an error
 * only if argv does not give that option (named in the message with the
 * variable). Resolves the user names of --allow-uids (the
 * system's user database, getpwnam_r: may block on NSS). Returns 0, 1
 * when --help was printed to out, -EINVAL with a message in
 * err[0..errlen), or -ENOMEM. Whatever it returns, the caller frees the
 * strings with rdzv_config_free. */
int rdzv_config_parse(struct rdzv_daemon_config *cfg, int argc, char **argv,
                      FILE *out, char *err, size_t errlen);

/* Sets the string member *field of cfg (field must point to one of cfg's
 * string members) to the printf-style fmt's text, freeing what it held.
 * Returns 0; -EINVAL when the text is over RDZV_CONFIG_LIST_MAX bytes (the
 * member is left as it was); -ENOMEM. */
int rdzv_config_set(struct rdzv_daemon_config *cfg, const char **field,
                    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fills *dst with a copy of *src whose strings dst owns (dst's own are not
 * freed first: dst is uninitialized or freed). Returns 0, or -ENOMEM with
 * dst's strings all "" (nothing to free). */
int rdzv_config_copy(struct rdzv_daemon_config *dst,
                     const struct rdzv_daemon_config *src);

/* Frees the strings cfg owns and sets every string member to "" (a config
 * of zeros, or one already freed, is fine). Does not free cfg itself. */
void rdzv_config_free(struct rdzv_daemon_config *cfg);

/* Prints the option table (name, env var, default, help) to out. */
void rdzv_config_usage(FILE *out);

/* The lease on copies a parent grants, ms: --copy-lease-ms, or half of
 * --liveness-timeout-ms when that is 0 (at least 1). */
static inline uint32_t
rdzv_config_copy_lease_ms(const struct rdzv_daemon_config *cfg) {
  uint32_t l =
      cfg->copy_lease_ms ? cfg->copy_lease_ms : cfg->liveness_timeout_ms / 2;
  return l > 0 ? l : 1;
}

#endif /* RDZV_STORE_CONFIG_H */
