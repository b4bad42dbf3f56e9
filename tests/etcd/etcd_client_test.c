/* The etcd client (store/etcd/etcd.h) against real etcd members started by
 * the harness: every call, watches (history, events, prev_kv, cancel,
 * progress, compaction, a member gone), limits, failover, auth with token
 * expiry, TLS with client certificates, close. No wall-clock assertions:
 * waits are "until it happens" with a generous guard. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "rdzv/error.h"
#include "store/etcd/etcd.h"
#include "tests/etcd/etcd_harness.h"

static uv_loop_t loop;
static struct etcdh h;
static struct rdzv_etcd *cli;
static bool in_call;  /* set around every client call: no callback inside */
static int cb_inside; /* callbacks seen inside a call */

/* ---- running the loop ---------------------------------------------------- */

static bool guard_fired;
static void on_guard(uv_timer_t *t) {
  (void)t;
  guard_fired = true;
}

/* Runs the loop until *flag, at most ~90 s (then fails). */
static void run_until(const bool *flag) {
  uv_timer_t g;
  guard_fired = false;
  uv_timer_init(&loop, &g);
  uv_timer_start(&g, on_guard, 90000, 0);
  while (!*flag && !guard_fired)
    uv_run(&loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&g, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  assert_false(guard_fired);
}

static void on_nap(uv_timer_t *t) { *(bool *)t->data = true; }
/* Lets the loop run for ms (the client keeps working meanwhile). */
static void nap(unsigned ms) {
  uv_timer_t t;
  bool done = false;
  uv_timer_init(&loop, &t);
  t.data = &done;
  uv_timer_start(&t, on_nap, ms, 0);
  run_until(&done);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
}

/* ---- unary calls --------------------------------------------------------- */

#define MAXKV 16
struct ckv {
  char key[128], value[128];
  size_t klen, vlen;
  int64_t create_revision, mod_revision, version, lease;
};

struct call {
  bool done;
  int status, http, grpc_code;
  char message[512];
  int64_t revision, count, deleted, compact_revision, lease_id, ttl_s,
      granted_ttl_s;
  bool more, succeeded;
  size_t nkvs;
  struct ckv kvs[MAXKV];
  char token[256];
};

static void copy_kv(struct ckv *d, const struct rdzv_etcd_kv *s) {
  memset(d, 0, sizeof(*d));
  d->klen = s->klen;
  d->vlen = s->vlen;
  if (s->klen != 0)
    memcpy(d->key, s->key, s->klen < 127 ? s->klen : 127);
  if (s->vlen != 0)
    memcpy(d->value, s->value, s->vlen < 127 ? s->vlen : 127);
  d->create_revision = s->create_revision;
  d->mod_revision = s->mod_revision;
  d->version = s->version;
  d->lease = s->lease;
}

static void on_result(void *arg, const struct rdzv_etcd_result *r) {
  struct call *c = arg;
  if (in_call)
    cb_inside++;
  c->status = r->status;
  c->http = r->http;
  c->grpc_code = r->grpc_code;
  snprintf(c->message, sizeof(c->message), "%s", r->message);
  c->revision = r->revision;
  c->count = r->count;
  c->more = r->more;
  c->deleted = r->deleted;
  c->succeeded = r->succeeded;
  c->compact_revision = r->compact_revision;
  c->lease_id = r->lease_id;
  c->ttl_s = r->ttl_s;
  c->granted_ttl_s = r->granted_ttl_s;
  c->nkvs = r->nkvs;
  for (size_t i = 0; i < r->nkvs && i < MAXKV; i++)
    copy_kv(&c->kvs[i], &r->kvs[i]);
  if (r->token != NULL)
    snprintf(c->token, sizeof(c->token), "%s", r->token);
  c->done = true;
}

/* Each: starts the call (asserting it was queued), runs the loop until its
 * callback came, returns its status. */
#define CALL(c, expr)                                                          \
  do {                                                                         \
    memset((c), 0, sizeof(*(c)));                                              \
    in_call = true;                                                            \
    int rc_ = (expr);                                                          \
    in_call = false;                                                           \
    assert_int_equal(rc_, 0);                                                  \
    assert_false((c)->done); /* never inside the call */                       \
    run_until(&(c)->done);                                                     \
  } while (0)

static int put_s(struct rdzv_etcd *e, const char *k, const char *v,
                 int64_t lease, struct call *c) {
  CALL(c, rdzv_etcd_put(e, k, strlen(k), v, strlen(v), lease, on_result, c));
  return c->status;
}

static int get_s(struct rdzv_etcd *e, const char *k,
                 const struct rdzv_etcd_range_opts *o, struct call *c) {
  CALL(c, rdzv_etcd_range(e, k, strlen(k), o, on_result, c));
  return c->status;
}

static int del_s(struct rdzv_etcd *e, const char *k, bool prefix,
                 struct call *c) {
  CALL(c, rdzv_etcd_delete(e, k, strlen(k), NULL, 0, prefix, on_result, c));
  return c->status;
}

static int txn_s(struct rdzv_etcd *e, struct rdzv_etcd_txn *t, struct call *c) {
  CALL(c, rdzv_etcd_txn(e, t, on_result, c));
  return c->status;
}

/* ---- watches ------------------------------------------------------------- */

#define MAXEV 64
struct wev {
  enum rdzv_etcd_event_type type;
  struct ckv kv, prev;
};
struct wlog {
  size_t msgs, empty_msgs, nev;
  struct wev ev[MAXEV];
  int64_t last_revision;
  bool ended;
  int status;
  char message[512];
  int64_t compact_revision;
  size_t max_batch; /* most events in one message */
};

static void on_watch(void *arg, int status, const char *message,
                     int64_t revision, int64_t compact_revision,
                     const struct rdzv_etcd_event *ev, size_t n) {
  struct wlog *w = arg;
  if (in_call)
    cb_inside++;
  assert_false(w->ended); /* nothing after the last call */
  if (status < 0) {
    w->ended = true;
    w->status = status;
    w->compact_revision = compact_revision;
    snprintf(w->message, sizeof(w->message), "%s", message);
    return;
  }
  w->msgs++;
  w->last_revision = revision;
  if (n == 0)
    w->empty_msgs++;
  if (n > w->max_batch)
    w->max_batch = n;
  for (size_t i = 0; i < n && w->nev < MAXEV; i++) {
    struct wev *d = &w->ev[w->nev++];
    d->type = ev[i].type;
    copy_kv(&d->kv, &ev[i].kv);
    copy_kv(&d->prev, &ev[i].prev_kv);
  }
}

/* Runs until w has at least n events (or has ended). */
static void wait_events(struct wlog *w, size_t n) {
  while (w->nev < n && !w->ended)
    uv_run(&loop, UV_RUN_ONCE);
  assert_true(w->nev >= n);
}

static void wait_msgs(struct wlog *w, size_t n) {
  while (w->msgs < n && !w->ended)
    uv_run(&loop, UV_RUN_ONCE);
  assert_true(w->msgs >= n);
}

static struct rdzv_etcd_watch *watch_s(struct rdzv_etcd *e, const char *k,
                                       const struct rdzv_etcd_watch_opts *o,
                                       struct wlog *w) {
  struct rdzv_etcd_watch *wh = NULL;
  memset(w, 0, sizeof(*w));
  in_call = true;
  assert_int_equal(rdzv_etcd_watch(e, k, strlen(k), o, on_watch, w, &wh), 0);
  in_call = false;
  assert_non_null(wh);
  /* wait for the "created" message */
  wait_msgs(w, 1);
  assert_false(w->ended);
  return wh;
}

/* ---- client lifecycle ---------------------------------------------------- */

static void on_closed(void *arg) {
  if (in_call)
    cb_inside++;
  *(bool *)arg = true;
}

static struct rdzv_etcd *client(const char *endpoints, const char *user,
                                const char *pw, const char *ca,
                                const char *cert, const char *key) {
  struct rdzv_etcd_config cfg = {.endpoints = endpoints,
                                 .timeout_ms = 10000,
                                 .user = user,
                                 .password = pw,
                                 .ca_file = ca,
                                 .cert_file = cert,
                                 .key_file = key};
  struct rdzv_etcd *e = NULL;
  assert_int_equal(rdzv_etcd_new(&loop, &cfg, &e), 0);
  assert_non_null(e);
  return e;
}

static void close_client(struct rdzv_etcd **e) {
  if (*e == NULL)
    return;
  bool closed = false;
  in_call = true;
  rdzv_etcd_close(*e, on_closed, &closed);
  in_call = false;
  assert_false(closed);
  *e = NULL;
  run_until(&closed);
}

static int setup_loop(void) {
  cb_inside = 0;
  return uv_loop_init(&loop) == 0 ? 0 : -1;
}

static int teardown_all(void **state) {
  (void)state;
  if (cli != NULL)
    close_client(&cli);
  etcdh_stop_all(&h);
  /* every handle of the client is closed: the loop has nothing left */
  uv_run(&loop, UV_RUN_NOWAIT);
  int alive = uv_loop_alive(&loop);
  int rc = uv_loop_close(&loop);
  if (alive || rc != 0) {
    fprintf(stderr, "loop still has handles after close\n");
    return -1;
  }
  if (cb_inside != 0) {
    fprintf(stderr, "%d callbacks ran inside a call\n", cb_inside);
    return -1;
  }
  return 0;
}

static int setup_one(void **state) {
  (void)state;
  if (setup_loop() != 0 || etcdh_start(&h, NULL, NULL) != 0)
    return -1;
  cli = client(etcdh_endpoints(&h), NULL, NULL, NULL, NULL, NULL);
  return 0;
}

/* ---- tests: key-value ---------------------------------------------------- */

static void test_new_bad_endpoints(void **state) {
  (void)state;
  struct rdzv_etcd *e = (struct rdzv_etcd *)1;
  struct rdzv_etcd_config cfg = {0};
  const char *bad[] = {"",
                       "ftp://x:1",
                       "127.0.0.1:2379",
                       "http://",
                       "http://a:1,,http://b:2",
                       "http://a b:1"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    cfg.endpoints = bad[i];
    assert_int_equal(rdzv_etcd_new(&loop, &cfg, &e), RDZV_EBAD_ADDR);
    assert_null(e);
  }
  char many[17 * 24] = "";
  for (int i = 0; i < 17; i++)
    sprintf(many + strlen(many), "%shttp://h%d:1", i ? "," : "", i);
  cfg.endpoints = many;
  assert_int_equal(rdzv_etcd_new(&loop, &cfg, &e), RDZV_EBAD_ADDR);
  many[strlen(many) - strlen(",http://h16:1")] = 0; /* 16 is fine */
  assert_int_equal(rdzv_etcd_new(&loop, &cfg, &e), 0);
  assert_string_equal(rdzv_etcd_endpoint(e), "http://h0:1");
  close_client(&e);
}

static void test_put_range_delete(void **state) {
  (void)state;
  struct call c;
  struct rdzv_etcd_range_opts o;

  assert_int_equal(put_s(cli, "k", "v1", 0, &c), 0);
  assert_int_equal(c.http, 200);
  int64_t rev1 = c.revision;
  assert_true(rev1 > 0);
  assert_int_equal(put_s(cli, "k", "v2", 0, &c), 0);
  assert_int_equal(c.revision, rev1 + 1);

  assert_int_equal(get_s(cli, "k", NULL, &c), 0);
  assert_int_equal(c.nkvs, 1);
  assert_int_equal(c.count, 1);
  assert_false(c.more);
  assert_string_equal(c.kvs[0].key, "k");
  assert_string_equal(c.kvs[0].value, "v2");
  assert_int_equal(c.kvs[0].version, 2);
  assert_int_equal(c.kvs[0].create_revision, rev1);
  assert_int_equal(c.kvs[0].mod_revision, rev1 + 1);
  assert_int_equal(c.revision, rev1 + 1);

  /* at an older revision */
  memset(&o, 0, sizeof(o));
  o.revision = rev1;
  assert_int_equal(get_s(cli, "k", &o, &c), 0);
  assert_int_equal(c.nkvs, 1);
  assert_string_equal(c.kvs[0].value, "v1");
  /* a future revision: etcd's refusal */
  o.revision = rev1 + 1000;
  assert_int_equal(get_s(cli, "k", &o, &c), RDZV_EETCD);
  assert_int_equal(c.http, 400);
  assert_int_equal(c.grpc_code, 11);
  assert_non_null(strstr(c.message, "future revision"));

  /* a missing key: no kvs, count 0 */
  assert_int_equal(get_s(cli, "nope", NULL, &c), 0);
  assert_int_equal(c.nkvs, 0);
  assert_int_equal(c.count, 0);

  /* an empty value */
  assert_int_equal(put_s(cli, "empty", "", 0, &c), 0);
  assert_int_equal(get_s(cli, "empty", NULL, &c), 0);
  assert_int_equal(c.nkvs, 1);
  assert_int_equal(c.kvs[0].vlen, 0);

  /* a prefix of 5 keys, with a neighbour outside it */
  char k[16], v[16];
  for (int i = 0; i < 5; i++) {
    snprintf(k, sizeof(k), "p/%d", i);
    snprintf(v, sizeof(v), "val%d", i);
    assert_int_equal(put_s(cli, k, v, 0, &c), 0);
  }
  assert_int_equal(put_s(cli, "p0", "outside", 0, &c), 0);
  memset(&o, 0, sizeof(o));
  o.prefix = true;
  assert_int_equal(get_s(cli, "p/", &o, &c), 0);
  assert_int_equal(c.nkvs, 5);
  assert_int_equal(c.count, 5);
  for (int i = 0; i < 5; i++) {
    snprintf(k, sizeof(k), "p/%d", i);
    snprintf(v, sizeof(v), "val%d", i);
    assert_string_equal(c.kvs[i].key, k);
    assert_string_equal(c.kvs[i].value, v);
  }
  o.limit = 2;
  assert_int_equal(get_s(cli, "p/", &o, &c), 0);
  assert_int_equal(c.nkvs, 2);
  assert_int_equal(c.count, 5);
  assert_true(c.more);
  assert_string_equal(c.kvs[1].key, "p/1");
  o.limit = 0;
  o.keys_only = true;
  assert_int_equal(get_s(cli, "p/", &o, &c), 0);
  assert_int_equal(c.nkvs, 5);
  assert_int_equal(c.kvs[3].vlen, 0);
  assert_string_equal(c.kvs[3].key, "p/3");
  o.keys_only = false;
  o.count_only = true;
  assert_int_equal(get_s(cli, "p/", &o, &c), 0);
  assert_int_equal(c.nkvs, 0);
  assert_int_equal(c.count, 5);
  o.count_only = false;
  o.serializable = true;
  assert_int_equal(get_s(cli, "p/", &o, &c), 0);
  assert_int_equal(c.nkvs, 5);
  /* an explicit range_end [p/1, p/3) */
  memset(&o, 0, sizeof(o));
  o.range_end = "p/3";
  o.relen = 3;
  assert_int_equal(get_s(cli, "p/1", &o, &c), 0);
  assert_int_equal(c.nkvs, 2);
  assert_string_equal(c.kvs[1].key, "p/2");

  /* binary keys with 0xff bytes: the prefix end carries over */
  const char bk1[] = "b\xff\xff"
                     "1",
             bk2[] = "c";
  struct call c2;
  CALL(&c2, rdzv_etcd_put(cli, bk1, 4, "\0\x01", 2, 0, on_result, &c2));
  assert_int_equal(c2.status, 0);
  CALL(&c2, rdzv_etcd_put(cli, bk2, 1, "x", 1, 0, on_result, &c2));
  memset(&o, 0, sizeof(o));
  o.prefix = true;
  CALL(&c2, rdzv_etcd_range(cli, "b\xff\xff", 3, &o, on_result, &c2));
  assert_int_equal(c2.status, 0);
  assert_int_equal(c2.nkvs, 1);
  assert_int_equal(c2.kvs[0].klen, 4);
  assert_memory_equal(c2.kvs[0].key, bk1, 4);
  assert_int_equal(c2.kvs[0].vlen, 2);
  assert_memory_equal(c2.kvs[0].value, "\0\x01", 2);

  /* delete: one key, a range, a prefix */
  assert_int_equal(del_s(cli, "k", false, &c), 0);
  assert_int_equal(c.deleted, 1);
  assert_int_equal(del_s(cli, "k", false, &c), 0);
  assert_int_equal(c.deleted, 0);
  CALL(&c, rdzv_etcd_delete(cli, "p/0", 3, "p/2", 3, false, on_result, &c));
  assert_int_equal(c.status, 0);
  assert_int_equal(c.deleted, 2);
  assert_int_equal(del_s(cli, "p/", true, &c), 0);
  assert_int_equal(c.deleted, 3);
  assert_int_equal(get_s(cli, "p0", NULL, &c), 0);
  assert_int_equal(c.nkvs, 1); /* outside the prefix */

  struct rdzv_etcd_stats st;
  rdzv_etcd_stats(cli, &st);
  assert_true(st.requests >= 25);
  assert_true(st.bytes_out > 0 && st.bytes_in > 0);
  assert_int_equal(st.failovers, 0);
  assert_int_equal(st.reauths, 0);
  assert_string_equal(rdzv_etcd_endpoint(cli), etcdh_url(&h, 0));
}

static void test_txn(void **state) {
  (void)state;
  struct call c;
  struct rdzv_etcd_txn *t;

  /* create-if-absent: first succeeds, second takes the else branch */
  for (int round = 0; round < 2; round++) {
    t = rdzv_etcd_txn_new();
    assert_non_null(t);
    assert_int_equal(rdzv_etcd_txn_compare(t, "lock", 4, RDZV_ETCD_CREATE,
                                           RDZV_ETCD_EQUAL, 0, NULL, 0),
                     0);
    assert_int_equal(rdzv_etcd_txn_put(t, true, "lock", 4, "owner1", 6, 0), 0);
    assert_int_equal(rdzv_etcd_txn_range(t, false, "lock", 4, false), 0);
    assert_int_equal(rdzv_etcd_txn_ops(t), 1);
    assert_true(rdzv_etcd_txn_bytes(t) >= 4 + 6 + 4);
    assert_int_equal(txn_s(cli, t, &c), 0);
    if (round == 0) {
      assert_true(c.succeeded);
      assert_int_equal(c.nkvs, 0);
    } else {
      assert_false(c.succeeded);
      assert_int_equal(c.nkvs, 1);
      assert_string_equal(c.kvs[0].value, "owner1");
    }
  }
  assert_int_equal(get_s(cli, "lock", NULL, &c), 0);
  int64_t mod = c.kvs[0].mod_revision;

  /* MOD equal, then a stale MOD */
  t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_compare(t, "lock", 4, RDZV_ETCD_MOD, RDZV_ETCD_EQUAL, mod, NULL,
                        0);
  rdzv_etcd_txn_put(t, true, "lock", 4, "owner2", 6, 0);
  assert_int_equal(txn_s(cli, t, &c), 0);
  assert_true(c.succeeded);
  t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_compare(t, "lock", 4, RDZV_ETCD_MOD, RDZV_ETCD_EQUAL, mod, NULL,
                        0);
  rdzv_etcd_txn_put(t, true, "lock", 4, "owner3", 6, 0);
  assert_int_equal(txn_s(cli, t, &c), 0);
  assert_false(c.succeeded);
  t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_compare(t, "lock", 4, RDZV_ETCD_MOD, RDZV_ETCD_GREATER, mod,
                        NULL, 0);
  rdzv_etcd_txn_compare(t, "lock", 4, RDZV_ETCD_VERSION, RDZV_ETCD_EQUAL, 2,
                        NULL, 0);
  assert_int_equal(txn_s(cli, t, &c), 0);
  assert_true(c.succeeded);

  /* VALUE compares; a delete in the success branch, several ranges in the
   * failure branch (in order) */
  t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_compare(t, "lock", 4, RDZV_ETCD_VALUE, RDZV_ETCD_EQUAL, 0,
                        "owner1", 6);
  rdzv_etcd_txn_delete(t, true, "lock", 4, false);
  rdzv_etcd_txn_put(t, false, "tx/a", 4, "A", 1, 0);
  rdzv_etcd_txn_put(t, false, "tx/b", 4, "B", 1, 0);
  rdzv_etcd_txn_range(t, false, "lock", 4, false);
  assert_int_equal(rdzv_etcd_txn_ops(t), 3);
  assert_int_equal(txn_s(cli, t, &c), 0);
  assert_false(c.succeeded);
  assert_int_equal(c.nkvs, 1);
  assert_string_equal(c.kvs[0].value, "owner2");
  t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_compare(t, "lock", 4, RDZV_ETCD_VALUE, RDZV_ETCD_NOT_EQUAL, 0,
                        "owner1", 6);
  rdzv_etcd_txn_range(t, true, "tx/", 3, true);
  rdzv_etcd_txn_range(t, true, "lock", 4, false);
  rdzv_etcd_txn_delete(t, true, "lock", 4, false);
  assert_int_equal(txn_s(cli, t, &c), 0);
  assert_true(c.succeeded);
  assert_int_equal(c.nkvs, 3);
  assert_string_equal(c.kvs[0].key, "tx/a");
  assert_string_equal(c.kvs[1].key, "tx/b");
  assert_string_equal(c.kvs[2].key, "lock");
  assert_int_equal(c.deleted, 1);
  assert_int_equal(get_s(cli, "lock", NULL, &c), 0);
  assert_int_equal(c.nkvs, 0);
  /* a VALUE compare on a missing key is false */
  t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_compare(t, "lock", 4, RDZV_ETCD_VALUE, RDZV_ETCD_EQUAL, 0,
                        "owner2", 6);
  assert_int_equal(txn_s(cli, t, &c), 0);
  assert_false(c.succeeded);
  /* LESS on the version */
  t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_compare(t, "tx/a", 4, RDZV_ETCD_VERSION, RDZV_ETCD_LESS, 2,
                        NULL, 0);
  rdzv_etcd_txn_put(t, true, "tx/c", 4, "C", 1, 0);
  assert_int_equal(txn_s(cli, t, &c), 0);
  assert_true(c.succeeded);

  /* nested: the inner txn's results come after the outer's earlier ones,
   * deletes summed across levels */
  t = rdzv_etcd_txn_new();
  struct rdzv_etcd_txn *in = rdzv_etcd_txn_new();
  rdzv_etcd_txn_compare(in, "tx/c", 4, RDZV_ETCD_CREATE, RDZV_ETCD_GREATER, 0,
                        NULL, 0);
  rdzv_etcd_txn_range(in, true, "tx/c", 4, false);
  rdzv_etcd_txn_delete(in, true, "tx/c", 4, false);
  rdzv_etcd_txn_range(t, true, "tx/a", 4, false);
  assert_int_equal(rdzv_etcd_txn_nest(t, true, in), 0);
  rdzv_etcd_txn_delete(t, true, "tx/b", 4, false);
  rdzv_etcd_txn_range(t, true, "tx/a", 4, false);
  assert_int_equal(rdzv_etcd_txn_ops(t), 4);
  assert_int_equal(txn_s(cli, t, &c), 0);
  assert_true(c.succeeded);
  assert_int_equal(c.nkvs, 3);
  assert_string_equal(c.kvs[0].key, "tx/a");
  assert_string_equal(c.kvs[1].key, "tx/c");
  assert_string_equal(c.kvs[1].value, "C");
  assert_string_equal(c.kvs[2].key, "tx/a");
  assert_int_equal(c.deleted, 2);
  assert_int_equal(
      get_s(cli, "tx/", &(struct rdzv_etcd_range_opts){.prefix = true}, &c), 0);
  assert_int_equal(c.nkvs, 1);

  /* a duplicate key in one txn: etcd's refusal with its message */
  t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_put(t, true, "d", 1, "1", 1, 0);
  rdzv_etcd_txn_put(t, true, "d", 1, "2", 1, 0);
  assert_int_equal(txn_s(cli, t, &c), RDZV_EETCD);
  assert_int_equal(c.http, 400);
  assert_non_null(strstr(c.message, "duplicate key"));

  /* a builder freed unused */
  t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_put(t, true, "x", 1, "1", 1, 0);
  rdzv_etcd_txn_free(t);
}

static void test_lease(void **state) {
  (void)state;
  struct call c;

  CALL(&c, rdzv_etcd_lease_grant(cli, 30, 0, on_result, &c));
  assert_int_equal(c.status, 0);
  int64_t id = c.lease_id;
  assert_true(id > (int64_t)1 << 53 || id > 0); /* large ids survive */
  assert_int_equal(c.ttl_s, 30);
  assert_int_equal(put_s(cli, "leased", "x", id, &c), 0);
  assert_int_equal(get_s(cli, "leased", NULL, &c), 0);
  assert_int_equal(c.kvs[0].lease, id);

  CALL(&c, rdzv_etcd_lease_ttl(cli, id, on_result, &c));
  assert_int_equal(c.status, 0);
  assert_int_equal(c.granted_ttl_s, 30);
  assert_true(c.ttl_s > 0 && c.ttl_s <= 30);
  assert_int_equal(c.lease_id, id);
  CALL(&c, rdzv_etcd_lease_keepalive(cli, id, on_result, &c));
  assert_int_equal(c.status, 0);
  assert_int_equal(c.ttl_s, 30);
  assert_int_equal(c.lease_id, id);

  /* revoke: its key goes; then keepalive and ttl say lost, revoke ENOKEY */
  CALL(&c, rdzv_etcd_lease_revoke(cli, id, on_result, &c));
  assert_int_equal(c.status, 0);
  assert_int_equal(get_s(cli, "leased", NULL, &c), 0);
  assert_int_equal(c.nkvs, 0);
  CALL(&c, rdzv_etcd_lease_keepalive(cli, id, on_result, &c));
  assert_int_equal(c.status, RDZV_ELEASE_LOST);
  CALL(&c, rdzv_etcd_lease_ttl(cli, id, on_result, &c));
  assert_int_equal(c.status, RDZV_ELEASE_LOST);
  CALL(&c, rdzv_etcd_lease_revoke(cli, id, on_result, &c));
  assert_int_equal(c.status, RDZV_ENOKEY);
  assert_int_equal(c.http, 404);
  assert_int_equal(c.grpc_code, 5);
  /* a put on an unknown lease */
  assert_int_equal(put_s(cli, "leased", "x", id, &c), RDZV_ENOKEY);

  /* a chosen id, twice */
  CALL(&c, rdzv_etcd_lease_grant(cli, 30, 424242, on_result, &c));
  assert_int_equal(c.status, 0);
  assert_int_equal(c.lease_id, 424242);
  CALL(&c, rdzv_etcd_lease_grant(cli, 30, 424242, on_result, &c));
  assert_int_equal(c.status, RDZV_EETCD);
  assert_int_equal(c.http, 412);
  assert_int_equal(c.grpc_code, 9);
  assert_non_null(strstr(c.message, "lease already exists"));

  /* a lease left to expire (etcd's minimum TTL): keepalive says lost, and
   * its key is gone */
  CALL(&c, rdzv_etcd_lease_grant(cli, 1, 0, on_result, &c));
  assert_int_equal(c.status, 0);
  id = c.lease_id;
  assert_int_equal(put_s(cli, "short", "x", id, &c), 0);
  int st = 0;
  for (int i = 0; i < 300; i++) {
    nap(100);
    CALL(&c, rdzv_etcd_lease_ttl(cli, id, on_result, &c));
    if ((st = c.status) != 0)
      break;
  }
  assert_int_equal(st, RDZV_ELEASE_LOST);
  CALL(&c, rdzv_etcd_lease_keepalive(cli, id, on_result, &c));
  assert_int_equal(c.status, RDZV_ELEASE_LOST);
  assert_int_equal(get_s(cli, "short", NULL, &c), 0);
  assert_int_equal(c.nkvs, 0);
}

/* ---- tests: watch -------------------------------------------------------- */

static void test_watch(void **state) {
  (void)state;
  struct call c;
  static struct wlog w;
  struct rdzv_etcd_watch_opts o;

  assert_int_equal(put_s(cli, "w/a", "1", 0, &c), 0);
  int64_t r0 = c.revision;
  assert_int_equal(put_s(cli, "w/b", "2", 0, &c), 0);
  assert_int_equal(put_s(cli, "wx", "not in prefix", 0, &c), 0);

  /* history from r0, then live events with prev_kv */
  memset(&o, 0, sizeof(o));
  o.prefix = true;
  o.start_revision = r0;
  o.prev_kv = true;
  struct rdzv_etcd_watch *wh = watch_s(cli, "w/", &o, &w);
  wait_events(&w, 2);
  assert_int_equal(w.ev[0].type, RDZV_ETCD_PUT);
  assert_string_equal(w.ev[0].kv.key, "w/a");
  assert_string_equal(w.ev[0].kv.value, "1");
  assert_int_equal(w.ev[0].kv.mod_revision, r0);
  assert_int_equal(w.ev[0].prev.klen, 0);
  assert_string_equal(w.ev[1].kv.key, "w/b");

  assert_int_equal(put_s(cli, "w/a", "3", 0, &c), 0);
  int64_t r3 = c.revision;
  wait_events(&w, 3);
  assert_string_equal(w.ev[2].kv.value, "3");
  assert_int_equal(w.ev[2].kv.mod_revision, r3);
  assert_int_equal(w.ev[2].kv.version, 2);
  assert_string_equal(w.ev[2].prev.value, "1");
  assert_int_equal(w.ev[2].prev.version, 1);

  /* one txn, one message, two events */
  struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
  rdzv_etcd_txn_put(t, true, "w/c", 3, "4", 1, 0);
  rdzv_etcd_txn_put(t, true, "w/d", 3, "5", 1, 0);
  assert_int_equal(txn_s(cli, t, &c), 0);
  wait_events(&w, 5);
  assert_int_equal(w.max_batch, 2);
  assert_string_equal(w.ev[3].kv.key, "w/c");
  assert_string_equal(w.ev[4].kv.key, "w/d");
  assert_int_equal(w.ev[3].kv.mod_revision, w.ev[4].kv.mod_revision);

  /* deletes: DELETE events with prev_kv */
  assert_int_equal(del_s(cli, "w/", true, &c), 0);
  assert_int_equal(c.deleted, 4);
  wait_events(&w, 9);
  for (int i = 5; i < 9; i++) {
    assert_int_equal(w.ev[i].type, RDZV_ETCD_DELETE);
    assert_int_equal(w.ev[i].kv.mod_revision, c.revision);
    assert_true(w.ev[i].prev.klen > 0);
  }
  assert_string_equal(w.ev[5].prev.value, "3");
  assert_false(w.ended);

  /* cancel: the final call comes from the loop, not inside cancel */
  in_call = true;
  rdzv_etcd_watch_cancel(wh);
  in_call = false;
  assert_false(w.ended);
  while (!w.ended)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(w.status, RDZV_ECANCELED);
  size_t n = w.nev;
  assert_int_equal(put_s(cli, "w/e", "after", 0, &c), 0);
  nap(50);
  assert_int_equal(w.nev, n); /* the on_watch assert checks nothing came */

  /* a watch of one key from now: only that key */
  static struct wlog w2;
  struct rdzv_etcd_watch *wh2 = watch_s(cli, "one", NULL, &w2);
  assert_int_equal(put_s(cli, "one2", "no", 0, &c), 0);
  assert_int_equal(put_s(cli, "one", "yes", 0, &c), 0);
  wait_events(&w2, 1);
  assert_string_equal(w2.ev[0].kv.key, "one");
  assert_int_equal(w2.ev[0].prev.klen, 0);
  nap(50);
  assert_int_equal(w2.nev, 1);
  /* left open: close cancels it */
  close_client(&cli);
  (void)wh2;
  assert_true(w2.ended);
  assert_int_equal(w2.status, RDZV_ECANCELED);
}

static int setup_progress(void **state) {
  (void)state;
  const char *extra[] = {"--experimental-watch-progress-notify-interval", "1s",
                         NULL};
  if (setup_loop() != 0 || etcdh_start(&h, extra, NULL) != 0)
    return -1;
  cli = client(etcdh_endpoints(&h), NULL, NULL, NULL, NULL, NULL);
  return 0;
}

static void test_watch_progress(void **state) {
  (void)state;
  struct call c;
  static struct wlog w;
  struct rdzv_etcd_watch_opts o = {.progress_notify = true};
  assert_int_equal(put_s(cli, "prog", "1", 0, &c), 0);
  watch_s(cli, "quiet", &o, &w);
  assert_int_equal(w.empty_msgs, 1); /* created */
  /* two progress notifications (no events), carrying the revision */
  wait_msgs(&w, 3);
  assert_int_equal(w.nev, 0);
  assert_int_equal(w.empty_msgs, w.msgs);
  assert_int_equal(w.last_revision, c.revision);
  assert_false(w.ended);
}

static void test_watch_compacted(void **state) {
  (void)state;
  struct call c;
  static struct wlog w;
  int64_t first = 0;
  for (int i = 0; i < 5; i++) {
    assert_int_equal(put_s(cli, "cmp", "v", 0, &c), 0);
    if (i == 0)
      first = c.revision;
  }
  int64_t last = c.revision;
  CALL(&c, rdzv_etcd_compact(cli, last - 1, true, on_result, &c));
  assert_int_equal(c.status, 0);
  assert_true(c.revision >= last);
  /* again: already compacted */
  CALL(&c, rdzv_etcd_compact(cli, last - 2, false, on_result, &c));
  assert_int_equal(c.status, RDZV_ECOMPACTED);
  /* a range at a compacted revision */
  struct rdzv_etcd_range_opts ro = {.revision = first};
  assert_int_equal(get_s(cli, "cmp", &ro, &c), RDZV_ECOMPACTED);
  assert_int_equal(c.http, 400);
  assert_int_equal(c.grpc_code, 11);

  /* a watch from before the compaction ends with ECOMPACTED and the
   * compaction's revision */
  struct rdzv_etcd_watch_opts o = {.start_revision = first};
  struct rdzv_etcd_watch *wh = NULL;
  memset(&w, 0, sizeof(w));
  in_call = true;
  assert_int_equal(rdzv_etcd_watch(cli, "cmp", 3, &o, on_watch, &w, &wh), 0);
  in_call = false;
  while (!w.ended)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(w.status, RDZV_ECOMPACTED);
  assert_int_equal(w.compact_revision, last - 1);
  assert_int_equal(w.nev, 0);
  /* from the compaction's revision on: the history is there */
  o.start_revision = last - 1;
  watch_s(cli, "cmp", &o, &w);
  wait_events(&w, 2);
  assert_int_equal(w.ev[0].kv.mod_revision, last - 1);
  assert_int_equal(w.ev[1].kv.mod_revision, last);
}

/* The member goes away under a watch and requests: the watch ends with an
 * error (not ECANCELED), later requests fail with a connection error. */
static void test_member_gone(void **state) {
  (void)state;
  struct call c;
  static struct wlog w;
  watch_s(cli, "gone", NULL, &w);
  assert_int_equal(etcdh_term(&h, 0), 0);
  while (!w.ended)
    uv_run(&loop, UV_RUN_ONCE);
  assert_true(w.status < 0);
  assert_int_not_equal(w.status, RDZV_ECANCELED);
  assert_true(w.message[0] != 0);
  assert_int_equal(put_s(cli, "gone", "x", 0, &c), -ECONNREFUSED);
  assert_int_equal(c.http, 0);
  assert_true(c.message[0] != 0);
}

/* ---- tests: limits ------------------------------------------------------- */

static int setup_limits(void **state) {
  (void)state;
  const char *extra[] = {"--max-txn-ops", "8", NULL};
  if (setup_loop() != 0 || etcdh_start(&h, extra, NULL) != 0)
    return -1;
  cli = client(etcdh_endpoints(&h), NULL, NULL, NULL, NULL, NULL);
  return 0;
}

static void test_limits(void **state) {
  (void)state;
  struct call c;
  char k[16];
  for (int n = 8; n <= 9; n++) {
    struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
    for (int i = 0; i < n; i++) {
      snprintf(k, sizeof(k), "lim/%d", i);
      assert_int_equal(rdzv_etcd_txn_put(t, true, k, strlen(k), "v", 1, 0), 0);
    }
    assert_int_equal(rdzv_etcd_txn_ops(t), (size_t)n);
    txn_s(cli, t, &c);
    if (n == 8) {
      assert_int_equal(c.status, 0);
      assert_true(c.succeeded);
    } else {
      assert_int_equal(c.status, RDZV_ETOO_LARGE);
      assert_int_equal(c.http, 400);
      assert_int_equal(c.grpc_code, 3);
      assert_non_null(strstr(c.message, "too many operations"));
    }
  }
  /* a value over --max-request-bytes (1.5 MiB) */
  size_t big = 1600 * 1024;
  char *v = malloc(3 << 20);
  assert_non_null(v);
  memset(v, 'x', 3 << 20);
  CALL(&c, rdzv_etcd_put(cli, "big", 3, v, big, 0, on_result, &c));
  assert_int_equal(c.status, RDZV_ETOO_LARGE);
  assert_int_equal(c.http, 400);
  assert_non_null(strstr(c.message, "request is too large"));
  /* over the gRPC limit (+512 KiB): 429 */
  CALL(&c, rdzv_etcd_put(cli, "big", 3, v, (size_t)3 << 20, 0, on_result, &c));
  assert_int_equal(c.status, RDZV_ETOO_LARGE);
  assert_int_equal(c.http, 429);
  /* under it is fine, and a large answer comes back whole */
  CALL(&c, rdzv_etcd_put(cli, "big", 3, v, 1400 * 1024, 0, on_result, &c));
  assert_int_equal(c.status, 0);
  free(v);
  assert_int_equal(get_s(cli, "big", NULL, &c), 0);
  assert_int_equal(c.nkvs, 1);
  assert_int_equal(c.kvs[0].vlen, 1400 * 1024);
}

/* ---- tests: failover ----------------------------------------------------- */

static int dead_port(void) {
  /* a port nobody listens on: bind port 0 and close */
  uv_tcp_t s;
  struct sockaddr_in a;
  int len = sizeof(a), port = -1;
  uv_ip4_addr("127.0.0.1", 0, &a);
  uv_tcp_init(&loop, &s);
  if (uv_tcp_bind(&s, (struct sockaddr *)&a, 0) == 0 &&
      uv_tcp_getsockname(&s, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  uv_close((uv_handle_t *)&s, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  return port;
}

static void test_failover_dead_first(void **state) {
  (void)state;
  struct call c;
  char eps[256];
  int dp = dead_port();
  assert_true(dp > 0);
  snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,%s", dp, etcdh_endpoints(&h));
  struct rdzv_etcd *e = client(eps, NULL, NULL, NULL, NULL, NULL);
  assert_int_equal(put_s(e, "fo", "1", 0, &c), 0);
  struct rdzv_etcd_stats st;
  rdzv_etcd_stats(e, &st);
  assert_int_equal(st.failovers, 1);
  assert_int_equal(st.requests, 2);
  assert_string_equal(rdzv_etcd_endpoint(e), etcdh_url(&h, 0));
  /* the next request goes straight to the one that worked */
  assert_int_equal(get_s(e, "fo", NULL, &c), 0);
  assert_string_equal(c.kvs[0].value, "1");
  rdzv_etcd_stats(e, &st);
  assert_int_equal(st.failovers, 1);
  assert_int_equal(st.requests, 3);
  /* a watch fails over too */
  static struct wlog w;
  struct rdzv_etcd *e2 = client(eps, NULL, NULL, NULL, NULL, NULL);
  watch_s(e2, "fo", NULL, &w);
  assert_int_equal(put_s(e, "fo", "2", 0, &c), 0);
  wait_events(&w, 1);
  assert_string_equal(w.ev[0].kv.value, "2");
  close_client(&e2);
  assert_int_equal(w.status, RDZV_ECANCELED);
  close_client(&e);

  /* every endpoint dead: connection refused, each tried once */
  snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,http://127.0.0.1:%d", dp, dp);
  e = client(eps, NULL, NULL, NULL, NULL, NULL);
  assert_int_equal(put_s(e, "fo", "1", 0, &c), -ECONNREFUSED);
  rdzv_etcd_stats(e, &st);
  assert_int_equal(st.requests, 2);
  close_client(&e);
}

static int setup_cluster(void **state) {
  (void)state;
  if (setup_loop() != 0 || etcdh_start_cluster(&h, 3, NULL, NULL) != 0)
    return -1;
  cli = client(etcdh_endpoints(&h), NULL, NULL, NULL, NULL, NULL);
  return 0;
}

static void test_cluster_member_killed(void **state) {
  (void)state;
  struct call c;
  assert_int_equal(put_s(cli, "cl", "1", 0, &c), 0);
  assert_string_equal(rdzv_etcd_endpoint(cli), etcdh_url(&h, 0));
  /* the member in use dies; once the other two have a leader, requests
   * go there */
  assert_int_equal(etcdh_kill(&h, 0), 0);
  assert_int_equal(etcdh_wait_healthy(&h, 1, 60), 0);
  assert_int_equal(etcdh_wait_healthy(&h, 2, 60), 0);
  assert_int_equal(put_s(cli, "cl", "2", 0, &c), 0);
  assert_string_not_equal(rdzv_etcd_endpoint(cli), etcdh_url(&h, 0));
  struct rdzv_etcd_stats st;
  rdzv_etcd_stats(cli, &st);
  assert_true(st.failovers >= 1);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(get_s(cli, "cl", NULL, &c), 0);
    assert_string_equal(c.kvs[0].value, "2");
  }
  /* a stopped member is not a connection failure: the request times out
   * there (no retry elsewhere: a write may have been applied) */
  const char *cur = rdzv_etcd_endpoint(cli);
  int idx = strcmp(cur, etcdh_url(&h, 1)) == 0 ? 1 : 2;
  struct rdzv_etcd_config cfg = {.endpoints = cur, .timeout_ms = 300};
  struct rdzv_etcd *e = NULL;
  assert_int_equal(rdzv_etcd_new(&loop, &cfg, &e), 0);
  assert_int_equal(etcdh_stop(&h, idx), 0);
  assert_int_equal(put_s(e, "cl", "3", 0, &c), -ETIMEDOUT);
  assert_int_equal(etcdh_cont(&h, idx), 0);
  close_client(&e);
}

/* ---- tests: auth --------------------------------------------------------- */

static void post_ok(const char *path, const char *body, const char *token) {
  char *resp = NULL;
  int code = etcdh_post(&h, 0, path, body, token, &resp);
  if (code != 200)
    fprintf(stderr, "%s %s -> %d %s\n", path, body, code,
            resp != NULL ? resp : "");
  free(resp);
  assert_int_equal(code, 200);
}

/* root (with role root), app (role approle: read-write on app/ only),
 * auth enabled. */
static void auth_setup(void) {
  char body[256];
  char *k = etcdh_b64("app/", 4), *e = etcdh_b64("app0", 4);
  post_ok("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"rootpw\"}",
          NULL);
  post_ok("/v3/auth/role/add", "{\"name\":\"root\"}", NULL);
  post_ok("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}", NULL);
  post_ok("/v3/auth/user/add", "{\"name\":\"app\",\"password\":\"apppw\"}",
          NULL);
  post_ok("/v3/auth/role/add", "{\"name\":\"approle\"}", NULL);
  snprintf(body, sizeof(body),
           "{\"name\":\"approle\",\"perm\":{\"permType\":\"READWRITE\","
           "\"key\":\"%s\",\"range_end\":\"%s\"}}",
           k, e);
  post_ok("/v3/auth/role/grant", body, NULL);
  post_ok("/v3/auth/user/grant", "{\"user\":\"app\",\"role\":\"approle\"}",
          NULL);
  post_ok("/v3/auth/enable", "{}", NULL);
  free(k);
  free(e);
}

static int setup_auth(void **state) {
  (void)state;
  const char *extra[] = {"--auth-token-ttl", "1", NULL};
  if (setup_loop() != 0 || etcdh_start(&h, extra, NULL) != 0)
    return -1;
  return 0;
}

static void test_auth(void **state) {
  (void)state;
  struct call c;
  auth_setup();
  /* no user: refused */
  cli = client(etcdh_endpoints(&h), NULL, NULL, NULL, NULL, NULL);
  assert_int_equal(put_s(cli, "app/x", "1", 0, &c), RDZV_EETCD);
  assert_int_equal(c.http, 400);
  assert_non_null(strstr(c.message, "user name is empty"));
  close_client(&cli);

  /* a wrong password: the request fails with the authenticate's error */
  cli = client(etcdh_endpoints(&h), "app", "wrong", NULL, NULL, NULL);
  assert_int_equal(put_s(cli, "app/x", "1", 0, &c), RDZV_EETCD);
  assert_non_null(strstr(c.message, "authentication failed"));
  close_client(&cli);

  cli = client(etcdh_endpoints(&h), "app", "apppw", NULL, NULL, NULL);
  /* two calls at once: one authenticate */
  struct call c1, c2;
  memset(&c1, 0, sizeof(c1));
  memset(&c2, 0, sizeof(c2));
  in_call = true;
  assert_int_equal(rdzv_etcd_put(cli, "app/x", 5, "1", 1, 0, on_result, &c1),
                   0);
  assert_int_equal(rdzv_etcd_put(cli, "app/y", 5, "2", 1, 0, on_result, &c2),
                   0);
  in_call = false;
  run_until(&c1.done);
  run_until(&c2.done);
  assert_int_equal(c1.status, 0);
  assert_int_equal(c2.status, 0);
  struct rdzv_etcd_stats st;
  rdzv_etcd_stats(cli, &st);
  assert_int_equal(st.requests, 3);
  /* permitted: in app/; denied: outside */
  assert_int_equal(
      get_s(cli, "app/", &(struct rdzv_etcd_range_opts){.prefix = true}, &c),
      0);
  assert_int_equal(c.nkvs, 2);
  assert_int_equal(put_s(cli, "other", "1", 0, &c), RDZV_EETCD);
  assert_int_equal(c.http, 403);
  assert_int_equal(c.grpc_code, 7);
  assert_non_null(strstr(c.message, "permission denied"));
  assert_int_equal(get_s(cli, "other", NULL, &c), RDZV_EETCD);
  assert_int_equal(c.http, 403);
  /* a watch: allowed in app/, refused outside */
  static struct wlog w, wd;
  watch_s(cli, "app/", &(struct rdzv_etcd_watch_opts){.prefix = true}, &w);
  assert_int_equal(put_s(cli, "app/z", "3", 0, &c), 0);
  wait_events(&w, 1);
  assert_string_equal(w.ev[0].kv.key, "app/z");
  struct rdzv_etcd_watch *wh = NULL;
  memset(&wd, 0, sizeof(wd));
  assert_int_equal(rdzv_etcd_watch(cli, "other", 5, NULL, on_watch, &wd, &wh),
                   0);
  while (!wd.ended)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(wd.status, RDZV_EETCD);
  assert_non_null(strstr(wd.message, "ermission"));
  /* the token's own call */
  CALL(&c, rdzv_etcd_authenticate(cli, on_result, &c));
  assert_int_equal(c.status, 0);
  assert_true(strlen(c.token) > 0);

  /* the token expires (--auth-token-ttl 1): 401, one re-authentication,
   * the request done */
  rdzv_etcd_stats(cli, &st);
  uint64_t re0 = st.reauths;
  int got = 0;
  /* (a simple token's TTL restarts on each use: stay idle past it) */
  for (int i = 0; i < 10 && got == 0; i++) {
    nap(3000);
    assert_int_equal(put_s(cli, "app/x", "again", 0, &c), 0);
    rdzv_etcd_stats(cli, &st);
    got = st.reauths > re0;
  }
  assert_true(got);
  assert_int_equal(get_s(cli, "app/x", NULL, &c), 0);
  assert_string_equal(c.kvs[0].value, "again");
  /* a watch after the token expired: re-authenticated too */
  nap(3000);
  static struct wlog w3;
  watch_s(cli, "app/", &(struct rdzv_etcd_watch_opts){.prefix = true}, &w3);
  assert_int_equal(put_s(cli, "app/q", "4", 0, &c), 0);
  wait_events(&w3, 1);
  assert_string_equal(w3.ev[0].kv.key, "app/q");
}

/* ---- tests: TLS ---------------------------------------------------------- */

static char tlsdir[64];

static int sh(const char *cmd) {
  int rc = system(cmd);
  if (rc != 0)
    fprintf(stderr, "failed (%d): %s\n", rc, cmd);
  return rc;
}

static int setup_tls(void **state) {
  (void)state;
  char cmd[2048];
  if (setup_loop() != 0)
    return -1;
  snprintf(tlsdir, sizeof(tlsdir), "/tmp/rdzv-etcd-tls.XXXXXX");
  if (mkdtemp(tlsdir) == NULL)
    return -1;
  snprintf(cmd, sizeof(cmd),
           "cd %s && "
           "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=rdzv-ca"
           " -keyout ca.key -out ca.pem 2>/dev/null && "
           "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n"
           "extendedKeyUsage=serverAuth,clientAuth\\n' > ext.cnf && "
           "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1"
           " -keyout server.key -out server.csr 2>/dev/null && "
           "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key"
           " -CAcreateserial -days 2 -extfile ext.cnf -out server.pem"
           " 2>/dev/null && "
           "openssl req -newkey rsa:2048 -nodes -subj /CN=client"
           " -keyout client.key -out client.csr 2>/dev/null && "
           "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key"
           " -CAcreateserial -days 2 -extfile ext.cnf -out client.pem"
           " 2>/dev/null",
           tlsdir);
  if (sh(cmd) != 0)
    return -1;
  char ca[128], sc[128], sk[128], cc[128], ck[128];
  snprintf(ca, sizeof(ca), "%s/ca.pem", tlsdir);
  snprintf(sc, sizeof(sc), "%s/server.pem", tlsdir);
  snprintf(sk, sizeof(sk), "%s/server.key", tlsdir);
  snprintf(cc, sizeof(cc), "%s/client.pem", tlsdir);
  snprintf(ck, sizeof(ck), "%s/client.key", tlsdir);
  struct etcdh_tls tls = {.cert_file = sc,
                          .key_file = sk,
                          .ca_file = ca,
                          .client_cert = cc,
                          .client_key = ck};
  return etcdh_start(&h, NULL, &tls);
}

static int teardown_tls(void **state) {
  int rc = teardown_all(state);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tlsdir);
  if (tlsdir[0] != 0)
    sh(cmd);
  return rc;
}

static void test_tls(void **state) {
  (void)state;
  struct call c;
  char ca[128], cc[128], ck[128];
  snprintf(ca, sizeof(ca), "%s/ca.pem", tlsdir);
  snprintf(cc, sizeof(cc), "%s/client.pem", tlsdir);
  snprintf(ck, sizeof(ck), "%s/client.key", tlsdir);
  assert_true(strncmp(etcdh_url(&h, 0), "https://", 8) == 0);

  cli = client(etcdh_endpoints(&h), NULL, NULL, ca, cc, ck);
  assert_int_equal(put_s(cli, "tls", "secret", 0, &c), 0);
  assert_int_equal(get_s(cli, "tls", NULL, &c), 0);
  assert_string_equal(c.kvs[0].value, "secret");
  static struct wlog w;
  watch_s(cli, "tls", NULL, &w);
  assert_int_equal(put_s(cli, "tls", "2", 0, &c), 0);
  wait_events(&w, 1);
  assert_string_equal(w.ev[0].kv.value, "2");
  close_client(&cli);

  /* without a client certificate: refused at the handshake */
  struct rdzv_etcd *e = client(etcdh_endpoints(&h), NULL, NULL, ca, NULL, NULL);
  assert_true(put_s(e, "tls", "x", 0, &c) < 0);
  assert_int_equal(c.http, 0);
  assert_true(c.message[0] != 0);
  close_client(&e);
  /* without the CA: the server's certificate is not trusted */
  e = client(etcdh_endpoints(&h), NULL, NULL, NULL, cc, ck);
  assert_int_equal(put_s(e, "tls", "x", 0, &c), RDZV_EETCD);
  assert_int_equal(c.http, 0);
  close_client(&e);
}

/* ---- tests: close -------------------------------------------------------- */

static void test_close_cancels(void **state) {
  (void)state;
  struct call c[4];
  static struct wlog w;
  struct rdzv_etcd_watch *wh = NULL;
  bool closed = false;

  watch_s(cli, "cl/", &(struct rdzv_etcd_watch_opts){.prefix = true}, &w);
  memset(c, 0, sizeof(c));
  in_call = true;
  for (int i = 0; i < 4; i++)
    assert_int_equal(rdzv_etcd_put(cli, "cl/a", 4, "v", 1, 0, on_result, &c[i]),
                     0);
  static struct wlog w2;
  memset(&w2, 0, sizeof(w2));
  assert_int_equal(rdzv_etcd_watch(cli, "cl/b", 4, NULL, on_watch, &w2, &wh),
                   0);
  rdzv_etcd_close(cli, on_closed, &closed);
  in_call = false;
  cli = NULL;
  for (int i = 0; i < 4; i++)
    assert_false(c[i].done);
  assert_false(closed);
  run_until(&closed);
  for (int i = 0; i < 4; i++) {
    assert_true(c[i].done);
    assert_int_equal(c[i].status, RDZV_ECANCELED);
  }
  assert_true(w.ended);
  assert_int_equal(w.status, RDZV_ECANCELED);
  assert_true(w2.ended);
  assert_int_equal(w2.status, RDZV_ECANCELED);
  /* close with nothing pending */
  struct rdzv_etcd *e =
      client(etcdh_endpoints(&h), NULL, NULL, NULL, NULL, NULL);
  close_client(&e);
  close_client(&e); /* NULL: nothing */
}

/* A callback that cancels and closes from inside the client's callbacks. */
struct reentry {
  struct rdzv_etcd *e;
  struct rdzv_etcd_watch *w;
  struct wlog log;
  bool closed;
  int puts_done;
};
static void reentry_put_cb(void *arg, const struct rdzv_etcd_result *r) {
  struct reentry *x = arg;
  assert_int_equal(r->status, x->puts_done == 0 ? 0 : RDZV_ECANCELED);
  x->puts_done++;
  if (x->puts_done == 1) {
    /* first answer: cancel the watch, start a put, close */
    rdzv_etcd_watch_cancel(x->w);
    rdzv_etcd_watch_cancel(x->w); /* twice is fine */
    assert_int_equal(rdzv_etcd_put(x->e, "re", 2, "2", 1, 0, reentry_put_cb, x),
                     0);
    rdzv_etcd_close(x->e, on_closed, &x->closed);
  }
}

static void test_reentrant(void **state) {
  (void)state;
  struct reentry x;
  memset(&x, 0, sizeof(x));
  x.e = cli;
  cli = NULL;
  x.w = watch_s(x.e, "re", NULL, &x.log);
  assert_int_equal(rdzv_etcd_put(x.e, "re", 2, "1", 1, 0, reentry_put_cb, &x),
                   0);
  run_until(&x.closed);
  assert_int_equal(x.puts_done, 2);
  assert_true(x.log.ended);
  assert_int_equal(x.log.status, RDZV_ECANCELED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_new_bad_endpoints, setup_one,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_put_range_delete, setup_one,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_txn, setup_one, teardown_all),
      cmocka_unit_test_setup_teardown(test_lease, setup_one, teardown_all),
      cmocka_unit_test_setup_teardown(test_watch, setup_one, teardown_all),
      cmocka_unit_test_setup_teardown(test_watch_progress, setup_progress,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_watch_compacted, setup_one,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_member_gone, setup_one,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_limits, setup_limits, teardown_all),
      cmocka_unit_test_setup_teardown(test_failover_dead_first, setup_one,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_cluster_member_killed, setup_cluster,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_auth, setup_auth, teardown_all),
      cmocka_unit_test_setup_teardown(test_tls, setup_tls, teardown_tls),
      cmocka_unit_test_setup_teardown(test_close_cancels, setup_one,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_reentrant, setup_one, teardown_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
