/* The durable root on etcd (durable.h says the design and the etcd
 * layout): its life cycle, its statistics and readiness checks, and its
 * logs. The other parts are in the files durable_int.h lists. */
#include "store/daemon/durable/durable.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uthash.h>

#include "rdzv/error.h"
#include "store/daemon/durable/durable_int.h"

const char *const rdzv__du_role_names[] = {"idle",    "campaigning", "standby",
                                           "loading", "leader",      "stopped"};

/* The only move between roles (see durable_int.h). */
void rdzv__du_set_role(struct rdzv_durable *du, enum dur_role r,
                       const char *why) {
  if (du->d != NULL && r != du->role)
    rdzv__du_dlog(du, 2, "root %s: %s -> %s (%s)", du->d->cfg.name,
                  rdzv__du_role_names[du->role], rdzv__du_role_names[r], why);
  du->role = r;
  if (du->d != NULL)
    du->d->stats.etcd_role = rdzv__du_role_names[r];
}

/* The statistics rdzvctl stats shows under "etcd" (the role's name is
 * set by rdzv__du_set_role). */
void rdzv__du_stats_update(struct rdzv_durable *du) {
  if (du->d == NULL)
    return;
  struct stats *st = &du->d->stats;
  struct rdzv_etcd_stats es;
  rdzv_etcd_stats(du->e, &es);
  st->etcd_batches = du->batches;
  st->etcd_txns = du->txns;
  st->etcd_ops = du->ops_persisted;
  st->etcd_stand_downs = du->stand_downs;
  st->etcd_elections_won = du->elections_won;
  st->etcd_requests = es.requests;
  st->etcd_bytes_out = es.bytes_out;
  st->etcd_bytes_in = es.bytes_in;
  st->etcd_errors = du->errors;
  _Static_assert(sizeof(st->etcd_lat_hist) == sizeof(es.latency_hist),
                 "the latency histograms differ");
  memcpy(st->etcd_lat_hist, es.latency_hist, sizeof(st->etcd_lat_hist));
  st->etcd_lat_us_sum = es.latency_us_sum;
  st->etcd_lat_count = es.latency_count;
  st->etcd_lease_renewals = du->lease_renewals;
  st->etcd_lease_failures = du->lease_failures;
}

void rdzv__durable_checks(struct rdzv_durable *du, struct rdzv_checks *cs) {
  rdzv__du_stats_update(du);
  const char *name = du->d != NULL ? du->d->cfg.name : "?";
  bool led = du->role == DUR_LEADER ||
             (du->role == DUR_STANDBY && du->leader[0] != '\0');
  rdzv__check_add(cs, "leader_or_standby", led, "root %s is %s%s%s", name,
                  rdzv__du_role_names[du->role], du->last_err[0] ? ": " : "",
                  du->last_err);
  bool etcd_ok = du->campaign_fails == 0 && du->lease_fails_in_row == 0;
  rdzv__check_add(cs, "not_fenced", !du->fenced,
                  "root %s was deposed (%s) and knows no leader yet", name,
                  du->fence_why);
  rdzv__check_add(cs, "etcd", etcd_ok, "root %s: etcd at %s: %s", name,
                  rdzv_etcd_endpoint(du->e),
                  du->lease_fails_in_row > 0 ? "lease keepalives failing"
                  : du->last_err[0]          ? du->last_err
                                             : "campaign failing");
}

void rdzv__du_dlog(struct rdzv_durable *du, int level, const char *fmt, ...) {
  char text[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  if (du->d != NULL)
    rdzv__log(du->d, level, "etcd: %s", text);
  else
    fprintf(stderr, "rdzvd: etcd: %s\n", text);
}

/* A random positive int64 (the kernel's generator), never 0. */
int64_t rdzv__du_random_i63(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
    v = (uint64_t)rand() << 32 ^ (uint64_t)rand() ^ (uint64_t)getpid();
  if (fd >= 0)
    close(fd);
  v &= INT64_MAX;
  return v != 0 ? (int64_t)v : 1;
}

/* ---- life cycle ---------------------------------------------------------------------- */

static int read_credentials(struct rdzv_durable *du, const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    int e = errno;
    fprintf(stderr, "rdzvd: --etcd-credentials %s: %s\n", path, strerror(e));
    return -e;
  }
  char line[600];
  bool ok = fgets(line, sizeof(line), f) != NULL;
  fclose(f);
  char *colon = ok ? strchr(line, ':') : NULL;
  if (colon == NULL || colon == line) {
    fprintf(stderr, "rdzvd: --etcd-credentials %s: no USER:PASSWORD line\n",
            path);
    return RDZV_EPROTO;
  }
  line[strcspn(line, "\r\n")] = '\0';
  *colon = '\0';
  snprintf(du->user, sizeof(du->user), "%s", line);
  snprintf(du->password, sizeof(du->password), "%s", colon + 1);
  return 0;
}

int rdzv__durable_new(uv_loop_t *loop, const struct rdzv_daemon_config *cfg,
                      struct rdzv_durable **out) {
  *out = NULL;
  struct rdzv_durable *du = calloc(1, sizeof(*du));
  if (du == NULL)
    return RDZV_ENOMEM;
  du->backend.name = "etcd";
  du->backend.durable = true;
  du->backend.open = rdzv__du_d_open;
  du->loop = loop;
  if (rdzv_config_copy(&du->cfg, cfg) < 0) {
    free(du);
    return RDZV_ENOMEM;
  }
  snprintf(du->prefix, sizeof(du->prefix), "%s", cfg->etcd_prefix);
  size_t pl = strlen(du->prefix);
  while (pl > 1 && du->prefix[pl - 1] == '/')
    du->prefix[--pl] = '\0';
  if (cfg->etcd_credentials[0] != '\0') {
    int rc = read_credentials(du, cfg->etcd_credentials);
    if (rc < 0) {
      rdzv_config_free(&du->cfg);
      free(du);
      return rc;
    }
  }
  struct rdzv_etcd_config ec;
  memset(&ec, 0, sizeof(ec));
  ec.endpoints = cfg->etcd;
  ec.timeout_ms = cfg->etcd_timeout_ms;
  ec.user = du->user;
  ec.password = du->password;
  ec.ca_file = cfg->etcd_ca;
  ec.cert_file = cfg->etcd_cert;
  ec.key_file = cfg->etcd_key;
  int rc = rdzv_etcd_new(loop, &ec, &du->e);
  if (rc < 0) {
    fprintf(stderr,
            "rdzvd: --etcd '%s': %s (each endpoint an http:// or https:// "
            "URL, comma-separated)\n",
            cfg->etcd, rdzv_strerror(rc));
    rdzv_config_free(&du->cfg);
    free(du);
    return rc;
  }
  uv_timer_init(loop, &du->tick);
  du->tick.data = du;
  uv_timer_init(loop, &du->campaign);
  du->campaign.data = du;
  du->handles_open = 2;
  *out = du;
  return 0;
}

const struct rdzv_state_backend *
rdzv__durable_backend(struct rdzv_durable *du) {
  return &du->backend;
}

void rdzv__durable_attach(struct rdzv_durable *du, struct daemon *d) {
  du->d = d;
  if (du->cfg.advertise[0] != '\0')
    snprintf(du->self, sizeof(du->self), "%s", du->cfg.advertise);
  else
    snprintf(du->self, sizeof(du->self), "%s", d->bound_addr);
  rdzv__gate_install(d, &rdzv__du_gate, du);
  d->admit = rdzv__du_admit;
  d->admit_arg = du;
  uint64_t every = (uint64_t)du->cfg.etcd_lease_ttl_s * 1000 / 4;
  if (every < 100)
    every = 100;
  uv_timer_start(&du->tick, rdzv__du_on_tick, every, every);
  rdzv__du_dlog(du, 1, "root %s (%s) campaigns at %s/leader on %s", d->cfg.name,
                du->self, du->prefix, du->cfg.etcd);
  rdzv__du_campaign_step(du);
}

void rdzv__du_maybe_free_du(struct rdzv_durable *du) {
  if (du->client_closed && du->handles_open == 0) {
    rdzv__du_bigs_free(du);
    rdzv__du_load_bigs_finish_drop(du);
    rdzv__du_jobs_free(du);
    rdzv_config_free(&du->cfg);
    free(du);
  }
}

static void on_handle_closed(uv_handle_t *h) {
  struct rdzv_durable *du = h->data;
  du->handles_open--;
  rdzv__du_maybe_free_du(du);
}

static void on_client_closed(void *arg) {
  struct rdzv_durable *du = arg;
  du->client_closed = true;
  rdzv__du_maybe_free_du(du);
}

static void on_resigned(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = arg;
  (void)r;
  rdzv_etcd_close(du->e, on_client_closed, du);
}

void rdzv__durable_stop(struct rdzv_durable *du) {
  if (du->role == DUR_STOPPED)
    return;
  bool leading = du->role == DUR_LEADER || du->role == DUR_LOADING;
  rdzv__du_set_role(du, DUR_STOPPED, "stopping");
  du->gen++;
  if (du->d != NULL) {
    du->d->gate = NULL; /* what waits is not persisted: it is not sent */
    du->d->admit = NULL;
  }
  if (du->watch != NULL)
    rdzv_etcd_watch_cancel(du->watch);
  du->watch = NULL;
  uv_close((uv_handle_t *)&du->tick, on_handle_closed);
  uv_close((uv_handle_t *)&du->campaign, on_handle_closed);
  if (du->batch != NULL) {
    struct batch *b = du->batch;
    du->batch = NULL;
    rdzv__du_batch_finish(b);
  }
  /* The lease goes (with the leader key and this root's address on it),
   * so a standby takes over now, not after the TTL. */
  if (du->lease != 0 &&
      rdzv_etcd_lease_revoke(du->e, du->lease, on_resigned, du) == 0) {
    if (leading)
      rdzv__du_dlog(du, 1, "root %s resigns: its lease is revoked",
                    du->d->cfg.name);
    return;
  }
  rdzv_etcd_close(du->e, on_client_closed, du);
}

void rdzv__durable_free(struct rdzv_durable *du) {
  if (du == NULL)
    return;
  if (du->d == NULL) {
    uv_close((uv_handle_t *)&du->tick, on_handle_closed);
    uv_close((uv_handle_t *)&du->campaign, on_handle_closed);
    rdzv__du_set_role(du, DUR_STOPPED, "freed before it was attached");
    rdzv_etcd_close(du->e, on_client_closed, du);
    return;
  }
  rdzv__durable_stop(du);
}
