/* rdzv-bench --serve: one process of the benchmark's tree. It runs the
 * root daemon and/or the node daemons of a range of hosts on one libuv
 * loop and, with the in-process rank transport, the simulated ranks of
 * those hosts. It talks to the orchestrator over stdin/stdout lines:
 *   -> "ready"           all daemons listen
 *   <- "go"              start the in-process ranks (if any)
 *   -> "done OK FAIL"    all of them finished (only with ranks)
 *   <- "stats"           -> "stats <json>" (busiest daemon, totals, RSS)
 *   <- "exit"            stop and exit */
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rendezvous/topo.h"
#include "store/daemon/daemon.h"
#include "store/wire/wire.h"
#include "tools/bench/bench.h"
#include "tools/bench/rank.h"

struct inproc_rank {
  struct bench_rank r;
  struct conn *c;
  uint32_t next_id;
  struct serve *sv;
};

struct queued;

struct serve {
  const struct bench_opts *o;
  uv_loop_t *loop;
  struct daemon **d;
  int nd;
  struct daemon *ranks_daemon_flat; /* flat: every rank on the root */
  struct inproc_rank *ranks;
  int64_t nranks, ndone, nfail;
  double t_go;
  uv_pipe_t in;
  char line[128];
  size_t line_len;
  struct bench_params params;
  struct queued *q; /* replies waiting for their ranks */
  size_t qn, qcap;
  uv_idle_t idle;
  int64_t *last_msgs; /* each daemon's frames at the previous "stats" */
  /* The id table as the first host here got it, in each form (0: a
   * gather's contributions, 1: the key's value), and how many hosts got
   * other bytes: every host must get the same table (ids_check). */
  struct rdzv_buf ids[2];
  uint64_t ids_hash[2];
  int64_t ids_checked, ids_mismatch;
};

/* A reply waiting for its rank: the fields the rank looks at, copied
 * (values only when small: a rank checks the size of a big id table, not
 * its bytes). */
struct queued {
  struct inproc_rank *ir;
  struct rdzv_result res;
  size_t nvals;
  uint32_t len[4];
  int16_t off[4]; /* into data, -1: not copied */
  uint8_t data[256];
};

static void on_idle(uv_idle_t *h);

/* FNV-1a over a value list's bytes, 8 bytes a step. */
static uint64_t hash_bytes(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    memcpy(&x, p + i, 8);
    h = (h ^ x) * 1099511628211ull;
  }
  for (; i < n; i++)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* The id table that local rank 0 of a host got (a gather's answer or the
 * key's value): the same bytes as the first host here got, in the same
 * form. Catches a node that hands its ranks the wrong bytes of a big
 * frame (blob.h's interning refers ranks to another daemon's copy). */
static void ids_check(struct serve *sv, struct inproc_rank *ir,
                      const struct rdzv_msg *m) {
  enum bench_step st = ir->r.step;
  int form = st == STEP_IDS_GATHER ? 0 : 1;
  if (ir->r.local_rank != 0 || m->status != 0 ||
      (st != STEP_IDS_GATHER && st != STEP_IDS_WAIT && st != STEP_IDS_GET))
    return;
  struct rdzv_buf b = {0};
  size_t pos = 0;
  struct rdzv_slice s;
  while (rdzv_items_next(&m->vals, &pos, &s)) {
    uint8_t len[4] = {(uint8_t)s.n, (uint8_t)(s.n >> 8), (uint8_t)(s.n >> 16),
                      (uint8_t)(s.n >> 24)};
    if (rdzv_buf_append(&b, len, 4) < 0 || rdzv_buf_append(&b, s.p, s.n) < 0)
      break;
  }
  if (st == STEP_IDS_WAIT && b.len <= 4) { /* no value: a get follows */
    rdzv_buf_free(&b);
    return;
  }
  sv->ids_checked++;
  if (sv->ids[form].data == NULL) {
    sv->ids[form] = b;
    sv->ids_hash[form] = hash_bytes(b.data, b.len);
    return;
  }
  if (b.len != sv->ids[form].len ||
      memcmp(b.data, sv->ids[form].data, b.len) != 0)
    sv->ids_mismatch++;
  rdzv_buf_free(&b);
}

static void queue_push(struct serve *sv, struct inproc_rank *ir,
                       const struct rdzv_msg *m) {
  if (sv->qn == sv->qcap) {
    size_t cap = sv->qcap ? sv->qcap * 2 : 1024;
    struct queued *q = realloc(sv->q, cap * sizeof(*q));
    if (q == NULL)
      return; /* the rank times out */
    sv->q = q;
    sv->qcap = cap;
  }
  struct queued *e = &sv->q[sv->qn++];
  memset(&e->res, 0, sizeof(e->res));
  e->ir = ir;
  e->res.status = m->status;
  e->res.flags = m->flags;
  e->res.a = m->a;
  e->res.b = m->b;
  e->nvals = m->vals.n;
  size_t pos = 0, used = 0;
  struct rdzv_slice s;
  for (size_t i = 0; i < 4; i++) {
    e->off[i] = -1;
    e->len[i] = 0;
    if (!rdzv_items_next(&m->vals, &pos, &s))
      continue;
    e->len[i] = s.n;
    if (used + s.n <= sizeof(e->data)) {
      memcpy(e->data + used, s.p, s.n);
      e->off[i] = (int16_t)used;
      used += s.n;
    }
  }
  uv_idle_start(&sv->idle, on_idle);
}

/* Runs queued replies; a rank's next request may queue more (and move
 * the queue, hence the copy). */
static void run_queue(struct serve *sv) {
  for (size_t i = 0; i < sv->qn; i++) {
    struct queued e = sv->q[i];
    struct rdzv_bytes vals[4];
    for (size_t k = 0; k < 4; k++) {
      vals[k].len = e.len[k];
      vals[k].data = e.off[k] >= 0 ? e.data + e.off[k] : NULL;
    }
    e.res.vals = vals;
    e.res.nvals = e.nvals; /* a rank reads at most the first 4 values */
    struct inproc_rank *ir = e.ir;
    enum bench_step before = ir->r.step;
    bench_rank_on_result(&ir->r, &e.res);
    if (before == ir->r.step ||
        (ir->r.step != STEP_DONE && ir->r.step != STEP_FAILED))
      continue;
    sv->ndone++;
    if (ir->r.step == STEP_FAILED)
      sv->nfail++;
    if (sv->ndone == sv->nranks) {
      printf("done %" PRId64 " %" PRId64 "\n", sv->nranks - sv->nfail,
             sv->nfail);
      fflush(stdout);
      bench_write_durations(sv->o, sv->ranks, sizeof(*sv->ranks), sv->nranks,
                            sv->t_go);
    }
  }
  sv->qn = 0;
  uv_idle_stop(&sv->idle);
}

static void on_idle(uv_idle_t *h) { run_queue(h->data); }

static void on_deliver(void *arg, const struct rdzv_msg *m) {
  struct inproc_rank *ir = arg;
  if (m->flags & (RDZV_F_SUPERSEDED | RDZV_F_PARTIAL))
    return;
  ids_check(ir->sv, ir, m);
  queue_push(ir->sv, ir, m);
}

static int inproc_submit(struct bench_rank *r, const struct rdzv_request *req,
                         double timeout_s) {
  struct inproc_rank *ir = r->transport;
  struct rdzv_slice ks[2], vs[2];
  for (size_t i = 0; i < req->nkeys && i < 2; i++) {
    ks[i].p = req->keys[i].data;
    ks[i].n = (uint32_t)req->keys[i].len;
  }
  for (size_t i = 0; i < req->nvals && i < 2; i++) {
    vs[i].p = req->vals[i].data;
    vs[i].n = (uint32_t)req->vals[i].len;
  }
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = (uint8_t)req->op;
  m.flags = (uint16_t)req->flags;
  m.req_id = ++ir->next_id;
  m.a = req->op == RDZV_OP_WAIT ? (int64_t)(timeout_s * 1000) : req->a;
  m.b = req->b;
  m.keys.n = (uint32_t)req->nkeys;
  m.keys.v = ks;
  m.vals.n = (uint32_t)req->nvals;
  m.vals.v = vs;
  struct rdzv_buf b = {0};
  int rc = rdzv_msg_encode(&m, &b);
  if (rc == 0)
    rc = rdzv_daemon_inproc_send(ir->c, b.data, b.len);
  rdzv_buf_free(&b);
  return rc;
}

static int start_ranks(struct serve *sv) {
  const struct bench_opts *o = sv->o;
  int64_t first = o->flat ? 0 : o->first;
  int64_t count = o->flat ? bench_hosts(o) : o->count;
  int64_t n = 0;
  for (int64_t pos = first; pos < first + count; pos++)
    n += bench_host_ranks(o, o->flat ? pos : bench_host_at(o, pos));
  sv->ranks = calloc((size_t)n, sizeof(*sv->ranks));
  if (sv->ranks == NULL)
    return -1;
  sv->params.round = "world";
  sv->params.world_size = (int32_t)o->ranks;
  sv->params.ranks_per_root = o->ranks_per_root;
  sv->params.timeout_s = o->timeout_s;
  sv->params.submit = inproc_submit;
  int64_t k = 0;
  for (int64_t pos = first; pos < first + count; pos++) {
    int64_t h = o->flat ? pos : bench_host_at(o, pos);
    struct daemon *d =
        o->flat ? sv->d[0] : sv->d[(o->root ? 1 : 0) + pos - first];
    for (int64_t l = 0; l < bench_host_ranks(o, h); l++, k++) {
      struct inproc_rank *ir = &sv->ranks[k];
      ir->sv = sv;
      ir->r.p = &sv->params;
      ir->r.transport = ir;
      snprintf(ir->r.host, sizeof(ir->r.host), "h%06" PRId64, h);
      ir->r.local_rank = (int32_t)l;
      ir->r.local_size = (int32_t)bench_host_ranks(o, h);
      ir->r.claim = ((uint64_t)getpid() << 40) ^ ((uint64_t)k + 1);
      ir->c = rdzv_daemon_inproc_connect(d, o->job, on_deliver, ir);
      if (ir->c == NULL)
        return -1;
    }
  }
  sv->nranks = n;
  sv->t_go = bench_now();
  for (k = 0; k < n; k++)
    if (bench_rank_start(&sv->ranks[k].r) < 0)
      return -1;
  return 0;
}

static void print_stats(struct serve *sv) {
  int64_t max_msgs = 0, max_bytes = 0, sum_msgs = 0, root_msgs = 0,
          root_bytes = 0, root_delta = 0, max_delta = 0, interned = 0;
  /* Frames without the heartbeats (pings and their replies): the
   * rendezvous's own work, which the projection counts. */
  int64_t root_work = 0, max_work = 0, sum_work = 0;
  char etcd_json[600] = "", ops_json[600] = "";
  /* Frames since the previous "stats" (the idle heartbeat traffic when
   * the ranks are done): at the root, and at the busiest node. */
  bool have_last = sv->last_msgs != NULL;
  if (!have_last)
    sv->last_msgs = calloc((size_t)sv->nd, sizeof(*sv->last_msgs));
  /* The CPU first: what follows is the benchmark's, not the daemons'. */
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  for (int i = 0; i < sv->nd; i++) {
    struct rdzv_daemon_traffic t;
    rdzv_daemon_traffic(sv->d[i], &t);
    int64_t msgs = (int64_t)(t.frames_in + t.frames_out),
            bytes = (int64_t)(t.bytes_in + t.bytes_out);
    interned += (int64_t)t.bytes_interned;
    int64_t work = msgs - (int64_t)t.heartbeat_frames;
    sum_work += work;
    int64_t delta = have_last ? msgs - sv->last_msgs[i] : 0;
    if (sv->last_msgs != NULL)
      sv->last_msgs[i] = msgs;
    if (sv->o->root && i == 0) {
      char *js = rdzv_daemon_stats_json(sv->d[i]);
      json_t *j = js != NULL ? json_loads(js, 0, NULL) : NULL;
      /* The root's requests by operation (what the tree saved it). */
      json_t *ops = json_object_get(j, "ops");
      static const char *const names[] = {"wait", "get",   "mget", "set",
                                          "add",  "inval", "ping", "cas"};
      size_t off =
          (size_t)snprintf(ops_json, sizeof(ops_json), ",\"root_ops\":{");
      for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        off +=
            (size_t)snprintf(ops_json + off, sizeof(ops_json) - off,
                             "%s\"%s\":%" PRId64, k ? "," : "", names[k],
                             (int64_t)json_integer_value(json_object_get(
                                 json_object_get(ops, names[k]), "received")));
      json_t *cp = json_object_get(j, "copies");
      off += (size_t)snprintf(ops_json + off, sizeof(ops_json) - off, "}");
      snprintf(ops_json + off, sizeof(ops_json) - off,
               ",\"root_invalidations_sent\":%" PRId64
               ",\"root_write_waits\":%" PRId64,
               (int64_t)json_integer_value(
                   json_object_get(cp, "invalidations_sent")),
               (int64_t)json_integer_value(json_object_get(cp, "write_waits")));
      json_t *e = json_object_get(j, "etcd");
      if (e != NULL) { /* an etcd-backed root (--etcd): its requests */
        char *et = json_dumps(e, JSON_COMPACT);
        if (et != NULL)
          snprintf(etcd_json, sizeof(etcd_json), ",\"etcd\":%s", et);
        free(et);
      }
      json_decref(j);
      free(js);
      root_msgs = msgs;
      root_work = work;
      root_bytes = bytes;
      root_delta = delta;
    } else {
      max_delta = delta > max_delta ? delta : max_delta;
      sum_msgs += msgs;
      if (msgs > max_msgs) {
        max_msgs = msgs;
        max_bytes = bytes;
      }
      max_work = work > max_work ? work : max_work;
    }
  }
  printf("stats {\"root\":%d,\"root_msgs\":%" PRId64 ",\"root_bytes\":%" PRId64
         ",\"max_node_msgs\":%" PRId64 ",\"max_node_bytes\":%" PRId64
         ",\"node_msgs\":%" PRId64 ",\"nodes\":%d,\"rss\":%" PRId64
         ",\"cpu_s\":%.3f,\"root_delta\":%" PRId64
         ",\"max_node_delta\":%" PRId64 ",\"interned\":%" PRId64
         ",\"ids_checked\":%" PRId64 ",\"ids_mismatch\":%" PRId64
         ",\"ids_hash\":[\"%016" PRIx64 "\",\"%016" PRIx64 "\"]"
         ",\"root_work_msgs\":%" PRId64 ",\"max_node_work_msgs\":%" PRId64
         ",\"work_msgs\":%" PRId64 "%s%s}\n",
         sv->o->root, root_msgs, root_bytes, max_msgs, max_bytes, sum_msgs,
         sv->nd - (sv->o->root ? 1 : 0), bench_peak_rss(), cpu, root_delta,
         max_delta, interned, sv->ids_checked, sv->ids_mismatch,
         sv->ids_hash[0], sv->ids_hash[1], root_work, max_work, sum_work,
         etcd_json, ops_json);
  fflush(stdout);
}

static void stop_all(struct serve *sv) {
  for (int i = 0; i < sv->nd; i++)
    rdzv_daemon_stop(sv->d[i]);
  uv_close((uv_handle_t *)&sv->in, NULL);
  uv_close((uv_handle_t *)&sv->idle, NULL);
}

static void on_line(struct serve *sv, const char *line) {
  if (strcmp(line, "go") == 0) {
    if (sv->o->inproc && start_ranks(sv) < 0) {
      printf("done 0 -1\n");
      fflush(stdout);
    }
  } else if (strcmp(line, "stats") == 0) {
    print_stats(sv);
  } else if (strcmp(line, "exit") == 0) {
    stop_all(sv);
  }
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  struct serve *sv = h->data;
  (void)sz;
  b->base = sv->line + sv->line_len;
  b->len = sizeof(sv->line) - 1 - sv->line_len;
}

static void on_stdin(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  struct serve *sv = s->data;
  (void)b;
  if (n < 0) {
    stop_all(sv); /* the orchestrator went away */
    return;
  }
  sv->line_len += (size_t)n;
  sv->line[sv->line_len] = '\0';
  char *nl;
  while ((nl = strchr(sv->line, '\n')) != NULL) {
    *nl = '\0';
    on_line(sv, sv->line);
    size_t rest = sv->line_len - (size_t)(nl + 1 - sv->line);
    memmove(sv->line, nl + 1, rest + 1);
    sv->line_len = rest;
  }
}

static int start_daemon(struct serve *sv, int is_root, int64_t h) {
  const struct bench_opts *o = sv->o;
  struct rdzv_daemon_config cfg;
  char err[256];
  char *argv[] = {"rdzv-bench", NULL};
  if (rdzv_config_parse(&cfg, 1, argv, stdout, err, sizeof(err)) != 0) {
    rdzv_config_free(&cfg);
    return -1;
  }
  /* Unix sockets only: one fd per listener. Each rdzv_config_set below
   * fails only out of memory (or for a text over 2 KB), which fails the
   * start. */
  int rc = rdzv_config_set(&cfg, &cfg.listen, "%s", "");
  cfg.log_level = 0;
  cfg.flush_ms = o->flush_ms;
  cfg.flush_max_ms = o->flush_max_ms;
  cfg.max_connections = 1u << 20;
  /* Hundreds of daemons share this process's loop: one iteration may
   * carry a whole subtree's join answer through all of them, seconds on a
   * loaded machine, during which none of them pings. A real node is a
   * process of its own. */
  cfg.liveness_timeout_ms = 60000;
  /* Pings at a third of it, the least the daemon's own rule allows (three
   * within the parent's timeout), unless --heartbeat-ms says otherwise:
   * at the daemons' default 1 s, 12,500 nodes each ping every second of a
   * rendezvous that takes seconds here, and milliseconds on a cluster. */
  cfg.heartbeat_ms =
      o->heartbeat_ms > 0 ? o->heartbeat_ms : cfg.liveness_timeout_ms / 3;
  /* For the same reason a parent may take seconds to accept and answer a
   * hello, and a node seconds to get its turn: the run's own deadline
   * bounds the wait instead. */
  cfg.connect_timeout_ms = 30000;
  cfg.hello_timeout_ms = 30000;
  cfg.upstream_timeout_ms = (uint32_t)(o->timeout_s * 1000);
  if (o->tcpstore) { /* the incumbents' mode: PyTorch's protocol too */
    char pf[256];
    bench_ts_port_path(o, is_root ? -1 : h, pf, sizeof(pf));
    rc |= rdzv_config_set(&cfg, &cfg.tcpstore_listen, "127.0.0.1:0");
    rc |= rdzv_config_set(&cfg, &cfg.tcpstore_job, "%s", o->job);
    rc |= rdzv_config_set(&cfg, &cfg.tcpstore_port_file, "%s", pf);
  }
  if (is_root) {
    cfg.role = RDZV_DAEMON_ROOT;
    /* rdzv-bench --etcd URL: an etcd-backed root, under a prefix of its
     * own per run. */
    const char *etcd = getenv("RDZV_BENCH_ETCD");
    if (etcd != NULL && etcd[0] != '\0') {
      rc |= rdzv_config_set(&cfg, &cfg.etcd, "%s", etcd);
      const char *pre = getenv("RDZV_BENCH_ETCD_PREFIX");
      if (pre != NULL && pre[0] != '\0')
        rc |= rdzv_config_set(&cfg, &cfg.etcd_prefix, "%s", pre);
      else
        rc |= rdzv_config_set(&cfg, &cfg.etcd_prefix, "rdzv-bench/%d",
                              (int)getpid());
    }
    char up[256];
    bench_root_path(o, up, sizeof(up));
    rc |= rdzv_config_set(&cfg, &cfg.unix_path, "%s", up);
    rc |= rdzv_config_set(&cfg, &cfg.name, "root");
  } else {
    cfg.role = RDZV_DAEMON_NODE;
    char up[256];
    bench_node_path(o, h, up, sizeof(up));
    rc |= rdzv_config_set(&cfg, &cfg.unix_path, "%s", up);
    int64_t p = rdzv_tree_parent(h, bench_hosts(o), o->fanout);
    char path[200];
    if (getenv("RDZV_BENCH_UPLINK") != NULL)
      bench_uplink_path(o, h, path, sizeof(path)); /* via delay-relay */
    else if (p == RDZV_TREE_ROOT)
      bench_root_path(o, path, sizeof(path));
    else
      bench_node_path(o, p, path, sizeof(path));
    rc |= rdzv_config_set(&cfg, &cfg.parent, "unix:%s", path);
    rc |= rdzv_config_set(&cfg, &cfg.name, "h%06" PRId64, h);
    /* The tree's shape is known here, as a launcher knows it: the node
     * forwards its subtree's joins once they are all in. */
    int64_t first;
    cfg.children =
        (uint32_t)rdzv_tree_children(h, bench_hosts(o), o->fanout, &first);
    /* --incumbent-servers tree-nocopies: no copies of mutable keys. */
    cfg.cache_mutable = !o->no_copies;
    cfg.local_ranks = (uint32_t)bench_host_ranks(o, h);
  }
  /* --delay-tree's lone sets of a key every node holds: copies granted
   * again right after each write (no --copy-cooldown-ms). */
  if (getenv("RDZV_BENCH_UPLINK") != NULL)
    cfg.copy_cooldown_ms = 0;
  if (rc == 0)
    rc = rdzv_daemon_start(sv->loop, &cfg, &sv->d[sv->nd++]);
  rdzv_config_free(&cfg);
  return rc;
}

int bench_serve_main(struct bench_opts *o) {
  struct serve sv;
  memset(&sv, 0, sizeof(sv));
  sv.o = o;
  sv.loop = uv_default_loop();
  sv.d = calloc((size_t)o->count + 1, sizeof(*sv.d));
  int rc = sv.d ? 0 : -1;
  if (rc == 0 && o->root)
    rc = start_daemon(&sv, 1, 0);
  for (int64_t pos = o->first; rc == 0 && pos < o->first + o->count; pos++)
    rc = start_daemon(&sv, 0, bench_host_at(o, pos));
  if (rc < 0) {
    fprintf(stderr, "rdzv-bench: a daemon failed to start\n");
    for (int i = 0; i < sv.nd; i++)
      rdzv_daemon_stop(sv.d[i]);
  } else {
    uv_idle_init(sv.loop, &sv.idle);
    sv.idle.data = &sv;
    uv_pipe_init(sv.loop, &sv.in, 0);
    uv_pipe_open(&sv.in, 0);
    sv.in.data = &sv;
    uv_read_start((uv_stream_t *)&sv.in, on_alloc, on_stdin);
    printf("ready\n");
    fflush(stdout);
  }
  uv_run(sv.loop, UV_RUN_DEFAULT);
  for (int i = 0; i < sv.nd; i++)
    rdzv_daemon_free(sv.d[i]);
  free(sv.d);
  free(sv.ranks);
  free(sv.q);
  free(sv.last_msgs);
  rdzv_buf_free(&sv.ids[0]);
  rdzv_buf_free(&sv.ids[1]);
  return rc < 0 ? 1 : 0;
}
