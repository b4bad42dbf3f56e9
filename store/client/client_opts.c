/* librdzv: a handle's settings from its options: checking the options
 * (their version and size, the limits), parsing addresses, the default
 * name, the job's secret (opts, its file, RDZV_SECRET_FILE, RDZV_SECRET),
 * and the TLS settings through client_tls.c. Called by client.c's
 * rdzv_client_create; calls nothing of the connection. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "store/auth/auth.h"
#include "store/client/client_int.h"
#include "store/wire/addr.h"

#define DEFAULT_MAX_FRAME (64u << 20)
#define DEFAULT_BACKOFF_INITIAL 0.01
#define DEFAULT_BACKOFF_MAX 2.0
#define DEFAULT_ATTEMPT_TIMEOUT 5.0
#define DEFAULT_HEARTBEAT 1.0
#define DEFAULT_LIVENESS 5.0
#define MAX_JOB_ID 255

/* ---- options and addresses ---------------------------------------------- */

void rdzv_client_opts_init(struct rdzv_client_opts *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->size = sizeof(*opts);
  opts->version = RDZV_CLIENT_OPTS_VERSION;
  opts->max_frame_bytes = DEFAULT_MAX_FRAME;
  opts->backoff_initial_s = DEFAULT_BACKOFF_INITIAL;
  opts->backoff_max_s = DEFAULT_BACKOFF_MAX;
  opts->attempt_timeout_s = DEFAULT_ATTEMPT_TIMEOUT;
  opts->heartbeat_s = DEFAULT_HEARTBEAT;
  opts->liveness_timeout_s = DEFAULT_LIVENESS;
}

static int parse_unix(const char *path, struct rdzv__addr *a) {
  size_t n = strlen(path);

  /* "unix:@name" is a Linux abstract socket: sun_path starts with NUL. */
  if (n == 0 || (path[0] == '@' && n == 1) || n >= sizeof(a->sun.sun_path))
    return RDZV_EBAD_ADDR;
  a->is_unix = true;
  a->sun.sun_family = AF_UNIX;
  memcpy(a->sun.sun_path, path, n);
  if (path[0] == '@') {
    a->sun.sun_path[0] = '\0';
    a->sun_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  } else {
    a->sun_len = (socklen_t)sizeof(a->sun);
  }
  return 0;
}

/* The syntax is store/wire/addr.h's (an unbracketed IPv6 host refused as
 * ambiguous, no port range, port 1..65535). */
int rdzv__parse_addr(const char *s, struct rdzv__addr *a) {
  struct rdzv_addr_parts p;
  memset(a, 0, sizeof(*a));
  if (rdzv_addr_split(s, 0, &p) < 0)
    return RDZV_EBAD_ADDR;
  if (p.is_unix)
    return parse_unix(p.path, a);
  snprintf(a->port, sizeof(a->port), "%d", p.port_first);
  a->host = strndup(p.host, p.host_len);
  return a->host != NULL ? 0 : RDZV_ENOMEM;
}

/* Checks the options and fills the numeric fields of c (0 means default). */
/* The options' size in version 1 (up to secret_len); version 2 adds
 * TLS. */
#define OPTS_V1 (offsetof(struct rdzv_client_opts, secret_len) + sizeof(size_t))

int rdzv__opts_ok(const struct rdzv_client_opts *o) {
  return (o->version == 1 && o->size == OPTS_V1) ||
         (o->version == 2 && o->size == sizeof(*o));
}

static int opts_check(const struct rdzv_client_opts *o, struct rdzv_client *c) {
  c->max_frame =
      o->max_frame_bytes != 0 ? o->max_frame_bytes : DEFAULT_MAX_FRAME;
  c->backoff_initial = o->backoff_initial_s != 0 ? o->backoff_initial_s
                                                 : DEFAULT_BACKOFF_INITIAL;
  c->backoff_max =
      o->backoff_max_s != 0 ? o->backoff_max_s : DEFAULT_BACKOFF_MAX;
  c->attempt_timeout = o->attempt_timeout_s != 0 ? o->attempt_timeout_s
                                                 : DEFAULT_ATTEMPT_TIMEOUT;
  double hb = o->heartbeat_s != 0 ? o->heartbeat_s : DEFAULT_HEARTBEAT;
  double live =
      o->liveness_timeout_s != 0 ? o->liveness_timeout_s : DEFAULT_LIVENESS;
  /* The negations also reject NaN. */
  if (!(c->backoff_initial > 0) || !(c->backoff_max >= c->backoff_initial) ||
      !(c->attempt_timeout > 0) || isinf(c->backoff_max) ||
      c->max_frame < RDZV_WIRE_MIN_BODY_BYTES || !(hb > 0) || isinf(hb) ||
      !(live > hb))
    return -EINVAL;
  c->heartbeat_ns = (int64_t)(hb * 1e9);
  c->liveness_ns = isinf(live) ? RDZV__NO_DEADLINE : (int64_t)(live * 1e9);
  c->heartbeat_cfg_ns = c->heartbeat_ns;
  c->liveness_cfg_ns = c->liveness_ns;
  return 0;
}

static char *default_name(void) {
  char host[256];
  char buf[300];

  if (gethostname(host, sizeof(host)) != 0)
    snprintf(host, sizeof(host), "unknown");
  host[sizeof(host) - 1] = '\0';
  snprintf(buf, sizeof(buf), "%s:%ld", host, (long)getpid());
  return strdup(buf);
}

/* The job's secret: opts' bytes, opts' file, $RDZV_SECRET_FILE,
 * $RDZV_SECRET, or none. One that cannot be read fails the handle (every
 * request gets RDZV_EAUTH; last_error says why). 0 or RDZV_ENOMEM. */
static int secret_init(struct rdzv_client *c,
                       const struct rdzv_client_opts *opts) {
  const char *file = opts->secret_file, *env = NULL;
  uint8_t buf[RDZV_AUTH_SECRET_MAX_BYTES];
  size_t n = 0;
  char err[400];

  err[0] = '\0';
  if (opts->secret == NULL && (file == NULL || file[0] == '\0')) {
    file = getenv("RDZV_SECRET_FILE");
    if (file == NULL || file[0] == '\0') {
      file = NULL;
      env = getenv("RDZV_SECRET");
      if (env == NULL || env[0] == '\0')
        return 0; /* no secret */
    }
  }
  if (opts->secret != NULL)
    snprintf(c->secret_src, sizeof(c->secret_src), "opts.secret");
  else if (env != NULL)
    snprintf(c->secret_src, sizeof(c->secret_src), "RDZV_SECRET");
  else
    snprintf(c->secret_src, sizeof(c->secret_src), "%s=%s",
             opts->secret_file != NULL && opts->secret_file[0] != '\0'
                 ? "opts.secret_file"
                 : "RDZV_SECRET_FILE",
             file);
  if (opts->secret != NULL || env != NULL) {
    const uint8_t *p =
        opts->secret != NULL ? opts->secret : (const uint8_t *)env;
    n = opts->secret != NULL ? opts->secret_len : strlen(env);
    /* RDZV_SECRET as a file's text: without trailing whitespace (a value
     * taken from a secret file keeps its newline). */
    while (env != NULL && opts->secret == NULL && n > 0 &&
           (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\n' ||
            p[n - 1] == '\r'))
      n--;
    if (n < RDZV_AUTH_SECRET_MIN_BYTES || n > RDZV_AUTH_SECRET_MAX_BYTES)
      snprintf(err, sizeof(err), "the job secret (%s) must be %u to %u bytes",
               opts->secret != NULL ? "opts.secret" : "RDZV_SECRET",
               RDZV_AUTH_SECRET_MIN_BYTES, RDZV_AUTH_SECRET_MAX_BYTES);
    else
      memcpy(buf, p, n);
  } else if (rdzv_auth_secret_load(file, buf, sizeof(buf), &n, err,
                                   sizeof(err)) < 0) {
    n = 0;
  }
  if (err[0] != '\0') {
    rdzv_auth_wipe(buf, sizeof(buf));
    c->fatal = RDZV_EAUTH;
    c->state = RDZV__CS_FAILED;
    rdzv__set_error(c, "no job secret: %s", err);
    return 0;
  }
  c->secret = malloc(n);
  if (c->secret == NULL) {
    rdzv_auth_wipe(buf, sizeof(buf));
    return RDZV_ENOMEM;
  }
  memcpy(c->secret, buf, n);
  c->secret_len = n;
  rdzv_auth_wipe(buf, sizeof(buf));
  return 0;
}

int rdzv__client_init(struct rdzv_client *c,
                      const struct rdzv_client_opts *opts) {
  const char *dbg = getenv("RDZV_CLIENT_DEBUG");
  int err;

  err = opts_check(opts, c);
  if (err < 0)
    return err;
  if (opts->job_id == NULL || opts->job_id[0] == '\0' ||
      strlen(opts->job_id) > MAX_JOB_ID)
    return RDZV_EJOB_ID_MISSING;
  err = rdzv__parse_addr(opts->addr, &c->addr);
  if (err < 0)
    return err;
  c->addr_str = strdup(opts->addr);
  c->job_id = strdup(opts->job_id);
  c->name = opts->name != NULL ? strdup(opts->name) : default_name();
  if (c->addr_str == NULL || c->job_id == NULL || c->name == NULL)
    return RDZV_ENOMEM;
  c->debug = dbg != NULL && dbg[0] != '\0' && strcmp(dbg, "0") != 0;
  c->fd = -1;
  c->state = RDZV__CS_IDLE;
  c->timer = RDZV__NO_DEADLINE;
  c->backoff_cur = c->backoff_initial;
  c->next_id = 1;
  c->rng = (uint64_t)getpid() ^ (uint64_t)time(NULL) << 20 ^
           (uint64_t)rdzv__now_ns() ^ (uint64_t)(uintptr_t)c;
  if (c->rng == 0)
    c->rng = 0x9E3779B97F4A7C15u;
  /* Op ids must not collide across the job's ranks: from the kernel's
   * random source where it answers. */
  if (getrandom(&c->opid_base, sizeof(c->opid_base), GRND_NONBLOCK) !=
      (ssize_t)sizeof(c->opid_base))
    c->opid_base = c->rng * 0xD1342543DE82EF95u;
  c->magic = RDZV__CLIENT_MAGIC;
  rdzv__home_init(c);
  err = secret_init(c, opts);
  if (err < 0 || c->state == RDZV__CS_FAILED)
    return err;
  return rdzv__ctls_init(c, opts->version >= 2 ? opts : NULL);
}
