/* rdzvd's /metrics (http.h): the daemon's statistics in the Prometheus
 * text exposition format, version 0.0.4 ("# HELP", "# TYPE", then
 * "name{label="value"} number" lines; counters end in _total, sizes are
 * bytes, times seconds). Labels are bounded: role, op (the wire's message
 * types), result, how, reason, check; never a job, host or key. Owns
 * nothing past the call. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/rdzv.h"
#include "store/daemon/http/http.h"
#include "store/etcd/etcd.h"

struct text {
  char *p;
  size_t n, cap;
  bool oom;
};

static void put(struct text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...) {
  if (t->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    if (k < 0) {
      t->oom = true;
      return;
    }
    if ((size_t)k < t->cap - t->n) {
      t->n += (size_t)k;
      return;
    }
    size_t cap = t->cap * 2 + (size_t)k;
    char *p = realloc(t->p, cap);
    if (p == NULL) {
      t->oom = true;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
}

/* A family's HELP and TYPE lines. */
static void head(struct text *t, const char *name, const char *type,
                 const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample without labels, as an unsigned integer. */
static void one(struct text *t, const char *name, const char *type,
                const char *help, uint64_t v) {
  head(t, name, type, help);
  put(t, "%s %llu\n", name, (unsigned long long)v);
}

/* A histogram: hist[i] counts values up to bounds[i] (the last bound
 * UINT64_MAX, le="+Inf"), in units of 1/per_s seconds; sum in those
 * units, count the values. Buckets are written cumulative. */
static void histogram(struct text *t, const char *name, const char *help,
                      const uint64_t *hist, const uint64_t *bounds, int n,
                      double per_s, uint64_t sum, uint64_t count) {
  head(t, name, "histogram", help);
  uint64_t cum = 0;
  for (int i = 0; i < n; i++) {
    cum += hist[i];
    if (bounds[i] == UINT64_MAX)
      put(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    else
      put(t, "%s_bucket{le=\"%g\"} %llu\n", name, (double)bounds[i] / per_s,
          (unsigned long long)cum);
  }
  put(t, "%s_sum %.6f\n%s_count %llu\n", name, (double)sum / per_s, name,
      (unsigned long long)count);
}

/* A label value as the format wants it: \, " and newline escaped. The
 * values here are the daemon's own words, at most 63 bytes. */
static const char *esc(const char *s, char *buf, size_t n) {
  size_t j = 0;
  for (; *s != '\0' && j + 3 < n; s++) {
    if (*s == '\\' || *s == '"') {
      buf[j++] = '\\';
      buf[j++] = *s;
    } else if (*s == '\n') {
      buf[j++] = '\\';
      buf[j++] = 'n';
    } else {
      buf[j++] = *s;
    }
  }
  buf[j] = '\0';
  return buf;
}

static void requests(struct text *t, const struct stats *s) {
  head(t, "rdzv_requests_total", "counter",
       "Requests received from ranks and child nodes, by message type and "
       "result (error: answered with a non-zero status).");
  for (int op = RDZV_MSG_HELLO; op <= RDZV_MSG_TYPE_MAX; op++) {
    if (op == RDZV_MSG_ERROR)
      continue;
    const struct op_stats *o = &s->ops[op];
    uint64_t err = o->errors < o->received ? o->errors : o->received;
    put(t, "rdzv_requests_total{op=\"%s\",result=\"ok\"} %llu\n",
        rdzv_msg_type_name(op), (unsigned long long)(o->received - err));
    put(t, "rdzv_requests_total{op=\"%s\",result=\"error\"} %llu\n",
        rdzv_msg_type_name(op), (unsigned long long)err);
  }
  head(t, "rdzv_upstream_requests_total", "counter",
       "Requests this node sent to its parent, by message type: what the "
       "tree let through (a root sends none).");
  for (int op = RDZV_MSG_HELLO; op <= RDZV_MSG_TYPE_MAX; op++)
    if (op != RDZV_MSG_ERROR)
      put(t, "rdzv_upstream_requests_total{op=\"%s\"} %llu\n",
          rdzv_msg_type_name(op), (unsigned long long)s->ops[op].forwarded);
  head(t, "rdzv_local_answers_total", "counter",
       "Requests answered here without the parent (a node's cache, or the "
       "root), by message type.");
  for (int op = RDZV_MSG_HELLO; op <= RDZV_MSG_TYPE_MAX; op++)
    if (op != RDZV_MSG_ERROR)
      put(t, "rdzv_local_answers_total{op=\"%s\"} %llu\n",
          rdzv_msg_type_name(op), (unsigned long long)s->ops[op].local);
  head(t, "rdzv_saved_requests_total", "counter",
       "Requests the tree kept from the parent, by how: cache_hit "
       "(write-once value cached), copy_hit (mutable key's copy under "
       "lease), coalesced (joined an identical read or wait in flight), "
       "read_combined (answered by a later identical read), combined "
       "(add, barrier, gather or join merged with others).");
  static const char *const how[] = {"cache_hit", "copy_hit", "coalesced",
                                    "read_combined", "combined"};
  const uint64_t v[] = {s->cache_hits, s->copy_hits, s->coalesced,
                        s->reads_combined, s->combined};
  for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
    put(t, "rdzv_saved_requests_total{how=\"%s\"} %llu\n", how[i],
        (unsigned long long)v[i]);
}

static void auth(struct text *t, const struct stats *s) {
  head(t, "rdzv_auth_hellos_total", "counter",
       "Hellos that had to prove the job's secret, by result.");
  put(t, "rdzv_auth_hellos_total{result=\"accepted\"} %llu\n",
      (unsigned long long)s->auth_accepted);
  put(t, "rdzv_auth_hellos_total{result=\"refused\"} %llu\n",
      (unsigned long long)s->auth_refused);
  head(t, "rdzv_auth_refusals_total", "counter",
       "Peers refused, by reason: no_secret (a hello without a proof), "
       "bad_proof (a wrong secret or another job's), uid (a Unix-socket "
       "peer not in --allow-uids), parent (this node's parent could not "
       "prove the secret).");
  uint64_t none =
      s->auth_no_nonce < s->auth_refused ? s->auth_no_nonce : s->auth_refused;
  put(t, "rdzv_auth_refusals_total{reason=\"no_secret\"} %llu\n",
      (unsigned long long)none);
  put(t, "rdzv_auth_refusals_total{reason=\"bad_proof\"} %llu\n",
      (unsigned long long)(s->auth_refused - none));
  put(t, "rdzv_auth_refusals_total{reason=\"uid\"} %llu\n",
      (unsigned long long)s->auth_peer_refused);
  put(t, "rdzv_auth_refusals_total{reason=\"parent\"} %llu\n",
      (unsigned long long)s->auth_parent_refused);
  head(t, "rdzv_tls_handshakes_total", "counter",
       "TLS handshakes on this daemon's TCP links (--tls-*), by result: "
       "ok, failed (a certificate not trusted, expired or missing), plain "
       "(plain bytes on the TLS port), no_cert (a daemon peer without a "
       "certificate).");
  put(t, "rdzv_tls_handshakes_total{result=\"ok\"} %llu\n",
      (unsigned long long)s->tls_handshakes);
  put(t, "rdzv_tls_handshakes_total{result=\"failed\"} %llu\n",
      (unsigned long long)s->tls_failed);
  put(t, "rdzv_tls_handshakes_total{result=\"plain\"} %llu\n",
      (unsigned long long)s->tls_plain_refused);
  put(t, "rdzv_tls_handshakes_total{result=\"no_cert\"} %llu\n",
      (unsigned long long)s->tls_no_cert);
}

static void etcd(struct text *t, const struct stats *s) {
  if (s->etcd_role == NULL)
    return;
  char b[80];
  head(t, "rdzv_etcd_role", "gauge",
       "An etcd-backed root's role: 1 for the one it holds.");
  static const char *const roles[] = {"idle",    "campaigning", "standby",
                                      "loading", "leader",      "stopped"};
  for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
    put(t, "rdzv_etcd_role{role=\"%s\"} %d\n", esc(roles[i], b, sizeof(b)),
        strcmp(roles[i], s->etcd_role) == 0);
  one(t, "rdzv_etcd_leader", "gauge",
      "1 while this root leads (holds the leader key), else 0.",
      strcmp(s->etcd_role, "leader") == 0);
  one(t, "rdzv_etcd_requests_total", "counter", "Requests sent to etcd.",
      s->etcd_requests);
  one(t, "rdzv_etcd_errors_total", "counter",
      "etcd requests that failed or were refused (each retried).",
      s->etcd_errors);
  one(t, "rdzv_etcd_transactions_total", "counter",
      "Transactions that persisted changes.", s->etcd_txns);
  one(t, "rdzv_etcd_sent_bytes_total", "counter",
      "Bytes of requests sent to etcd.", s->etcd_bytes_out);
  one(t, "rdzv_etcd_received_bytes_total", "counter",
      "Bytes of etcd's answers.", s->etcd_bytes_in);
  one(t, "rdzv_etcd_elections_won_total", "counter", "Elections this root won.",
      s->etcd_elections_won);
  one(t, "rdzv_etcd_stand_downs_total", "counter",
      "Times this root stopped leading (lease lost, etcd unreachable).",
      s->etcd_stand_downs);
  histogram(t, "rdzv_etcd_request_duration_seconds",
            "etcd requests' latency (libcurl's total time), watches aside.",
            s->etcd_lat_hist, rdzv_etcd_latency_bounds_us,
            RDZV_ETCD_LAT_BUCKETS, 1e6, s->etcd_lat_us_sum, s->etcd_lat_count);
  one(t, "rdzv_etcd_lease_renewals_total", "counter",
      "Keepalives of this root's etcd lease that etcd answered.",
      s->etcd_lease_renewals);
  one(t, "rdzv_etcd_lease_renewal_failures_total", "counter",
      "Keepalives of this root's etcd lease that failed.",
      s->etcd_lease_failures);
}

char *rdzv__http_metrics(const struct daemon *d, const struct rdzv_checks *cs) {
  const struct stats *s = &d->stats;
  struct text t = {malloc(16384), 0, 16384, false};
  if (t.p == NULL)
    return NULL;
  char b[80];
  head(&t, "rdzv_build_info", "gauge",
       "rdzvd's release, wire protocol version and role (always 1).");
  put(&t, "rdzv_build_info{version=\"%s\",protocol=\"%u\",role=\"%s\"} 1\n",
      RDZV_VERSION_STRING, (unsigned)RDZV_WIRE_VERSION,
      esc(d->role->name, b, sizeof(b)));
  head(&t, "rdzv_uptime_seconds", "gauge", "Seconds since rdzvd started.");
  put(&t, "rdzv_uptime_seconds %.3f\n",
      (double)(uv_now(d->loop) - d->start_ms) / 1000.0);
  int jobs = 0;
  for (const struct job *j = d->jobs; j != NULL; j = j->next)
    jobs += j->role_data != NULL;
  one(&t, "rdzv_jobs", "gauge", "Jobs this daemon holds state for.",
      (uint64_t)jobs);
  one(&t, "rdzv_connections", "gauge",
      "Connections open (ranks, child nodes, in-process peers).",
      s->conns_open);
  one(&t, "rdzv_connections_accepted_total", "counter", "Connections accepted.",
      s->conns_total);
  one(&t, "rdzv_connections_rejected_total", "counter",
      "Connections refused at --max-connections.", s->conns_rejected);
  one(&t, "rdzv_received_bytes_total", "counter",
      "Bytes read from connections.", s->bytes_in);
  one(&t, "rdzv_sent_bytes_total", "counter", "Bytes written to connections.",
      s->bytes_out);
  one(&t, "rdzv_received_frames_total", "counter",
      "Frames read from connections.", s->frames_in);
  one(&t, "rdzv_sent_frames_total", "counter", "Frames written to connections.",
      s->frames_out);
  one(&t, "rdzv_protocol_errors_total", "counter",
      "Peers dropped for malformed input or a limit.", s->proto_errors);
  requests(&t, s);
  one(&t, "rdzv_upstream_reconnects_total", "counter",
      "Connections a node made to its parent after the first.",
      s->upstream_reconnects);
  one(&t, "rdzv_reattachments_total", "counter",
      "Connections a node made to an ancestor above its lost parent.",
      s->reattached);
  one(&t, "rdzv_parent_restarts_total", "counter",
      "A parent met again with a new incarnation (it restarted).",
      s->parent_restarts);
  one(&t, "rdzv_parent_silent_total", "counter",
      "Parents lost to --liveness-timeout-ms.", s->parent_silent);
  one(&t, "rdzv_children_silent_total", "counter",
      "Child nodes lost to --liveness-timeout-ms.", s->children_silent);
  one(&t, "rdzv_resent_requests_total", "counter",
      "Requests sent again after a lost connection.", s->resent);
  one(&t, "rdzv_dedup_hits_total", "counter",
      "Re-sent mutations the root answered without applying them again.",
      s->dedup_hits);
  one(&t, "rdzv_fenced_total", "counter",
      "Stale aborts and re-binds of a lost daemon refused.", s->fenced);
  one(&t, "rdzv_fenced_by_parent_total", "counter",
      "Times this node's parent declared it lost or refused a request of "
      "it as stale (each job's link counts its own).",
      s->fenced_here);
  one(&t, "rdzv_sessions_resumed_total", "counter",
      "Ranks' sessions resumed on a new connection.", s->sessions_resumed);
  one(&t, "rdzv_sessions_lost_total", "counter",
      "Ranks' sessions that expired (their generation aborted).",
      s->sessions_lost);
  one(&t, "rdzv_health_checks_total", "counter",
      "Node: host health checks run before forwarding a join.",
      s->health_checks);
  one(&t, "rdzv_health_failed_total", "counter",
      "Node: host health checks that failed (the host quarantined).",
      s->health_failed);
  one(&t, "rdzv_quarantine_refused_total", "counter",
      "Root: join records of quarantined hosts refused.",
      s->quarantine_refused);
  auth(&t, s);
  etcd(&t, s);
  histogram(&t, "rdzv_round_duration_seconds",
            "Root: how long each rendezvous generation that completed was "
            "open, from its first join to its assignment.",
            s->round_ms_hist, rdzv__round_bounds_ms, RDZV_ROUND_BUCKETS, 1e3,
            s->round_ms_sum, s->rounds_completed);
  one(&t, "rdzv_rounds_failed_total", "counter",
      "Root: rendezvous generations that failed (deadline, a lost host, a "
      "duplicate claim).",
      s->rounds_failed);
  head(&t, "rdzv_ready", "gauge",
       "Each readiness check of /readyz: 1 passed, 0 failed.");
  for (int i = 0; i < cs->n; i++)
    put(&t, "rdzv_ready{check=\"%s\"} %d\n", esc(cs->c[i].name, b, sizeof(b)),
        cs->c[i].ok);
  if (t.oom) {
    free(t.p);
    return NULL;
  }
  return t.p;
}
