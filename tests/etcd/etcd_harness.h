/* Test harness: throwaway etcd instances (a single member or a cluster of
 * up to ETCDH_MAX_MEMBERS) on 127.0.0.1, for tests of code that talks to
 * etcd.
 *
 * Each member is the `etcd` binary found on PATH, run with its data under
 * a fresh mktemp directory in /dev/shm (DIR/data, its output in DIR/log),
 * its own free client and peer ports (bound to port 0 to pick them; a
 * member that loses the race for a port is started again on new ones),
 * and the flags --heartbeat-interval 10 --election-timeout 100 --logger
 * zap --log-level error, then the caller's extra flags. A start returns
 * once every member answers GET /health with {"health":"true"}.
 *
 * Members die with the test process (PR_SET_PDEATHSIG SIGKILL), so a
 * crashed test leaves none behind; still, call etcdh_stop_all in every
 * teardown: it stops them by pid and removes their directories.
 *
 * Single-threaded use; not async-signal-safe. Every function that returns
 * int returns 0 or -1 (with a line on stderr saying why). */
#ifndef RDZV_TESTS_ETCD_HARNESS_H
#define RDZV_TESTS_ETCD_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#define ETCDH_MAX_MEMBERS 5

/* TLS for the client URLs (every field NULL: plain http). With cert_file
 * and key_file the members serve https:// with that server certificate
 * (PEM paths, copied); with ca_file too they get --trusted-ca-file and
 * --client-cert-auth, and the harness's own /health polls and etcdh_post
 * present client_cert/client_key. Peer URLs stay http. */
struct etcdh_tls {
  const char *cert_file, *key_file; /* server */
  const char *ca_file;
  const char *client_cert, *client_key;
};

struct etcdh_member {
  pid_t pid; /* 0 when not running */
  int client_port, peer_port;
  char dir[64];  /* /dev/shm/rdzv-etcd.XXXXXX */
  char url[64];  /* "http://127.0.0.1:PORT" (or https://) */
  char name[16]; /* "m0", "m1", ... */
};

struct etcdh {
  int n; /* members */
  struct etcdh_member m[ETCDH_MAX_MEMBERS];
  char endpoints[ETCDH_MAX_MEMBERS * 64]; /* the urls, comma-separated */
  /* private: */
  char **extra;     /* copied extra flags, NULL-terminated */
  char tls[5][256]; /* copied etcdh_tls paths ("" when unset) */
  char initial_cluster[ETCDH_MAX_MEMBERS * 96];
  char cluster_token[48];
};

/* Starts one member. extra: NULL or a NULL-terminated list of flags added
 * after the harness's own (e.g. {"--max-txn-ops", "8", NULL}); tls: NULL
 * or as above. Fills *h (zeroed first). 0 once healthy (at most ~60 s),
 * else -1 with nothing left running. */
int etcdh_start(struct etcdh *h, const char *const *extra,
                const struct etcdh_tls *tls);

/* Starts an n-member cluster (1 <= n <= ETCDH_MAX_MEMBERS) the same way;
 * 0 once every member is healthy. */
int etcdh_start_cluster(struct etcdh *h, int n, const char *const *extra,
                        const struct etcdh_tls *tls);

/* Member i's client URL (borrowed, valid until etcdh_stop_all). */
const char *etcdh_url(const struct etcdh *h, int i);
/* Every member's client URL, comma-separated, in member order. */
const char *etcdh_endpoints(const struct etcdh *h);
/* Member i's pid, 0 when it is not running. */
pid_t etcdh_pid(const struct etcdh *h, int i);

/* kill -9 member i and reap it (pid 0 after). */
int etcdh_kill(struct etcdh *h, int i);
/* SIGTERM member i and wait for it to exit (SIGKILL after 10 s). */
int etcdh_term(struct etcdh *h, int i);
/* SIGSTOP / SIGCONT member i (it stays running: pid unchanged). */
int etcdh_stop(struct etcdh *h, int i);
int etcdh_cont(struct etcdh *h, int i);
/* Starts a stopped (killed or terminated) member i again on its data
 * dir and ports; 0 once the process runs (not waiting for health: a
 * lone member of a cluster without quorum is never healthy). */
int etcdh_restart(struct etcdh *h, int i);
/* Polls member i's /health until it says true; 0, or -1 after timeout_s
 * seconds or if the member exited. */
int etcdh_wait_healthy(struct etcdh *h, int i, double timeout_s);

/* POSTs body (a JSON text) to member i's URL + path (e.g.
 * "/v3/kv/compaction") with libcurl easy, blocking, 10 s timeout, with
 * "Authorization: token" when token is not NULL. Returns the HTTP status
 * (0 if none came) and, when resp is not NULL, the response body in a
 * malloc'd NUL-terminated string the caller frees (NULL on failure). */
int etcdh_post(const struct etcdh *h, int i, const char *path, const char *body,
               const char *token, char **resp);

/* Stops every member (SIGTERM, wait, SIGKILL after 10 s), removes their
 * directories and frees what the harness allocated. Safe to call twice
 * and on a zeroed or failed *h. */
void etcdh_stop_all(struct etcdh *h);

/* Base64 of n bytes into a malloc'd NUL-terminated string (for building
 * etcdh_post bodies); NULL on ENOMEM. */
char *etcdh_b64(const void *p, size_t n);

#endif /* RDZV_TESTS_ETCD_HARNESS_H */
