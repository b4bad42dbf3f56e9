/* rdzvd transport: the reply family. Everything that puts a frame on a
 * connection's queue goes through here: a message encoded (its large
 * items referring to shared blobs rather than copied), a reply (its
 * request's outstanding count ended, its errors counted), a reply with a
 * text, a reply ahead of a durable root's gate, and a connection's last
 * frame (an ERROR, then the close). Queuing marks the connection dirty;
 * flush.c writes it at the end of the loop iteration. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/daemon/transport/transport.h"
#include "store/daemon/transport/transport_int.h"

/* Bytes the frame of m takes on the wire (for in-process peers' stats). */
static size_t frame_size(const struct rdzv_msg *m) {
  size_t n = RDZV_WIRE_HEADER_BYTES + RDZV_WIRE_MIN_BODY_BYTES, pos = 0;
  struct rdzv_slice s;
  while (rdzv_items_next(&m->keys, &pos, &s))
    n += 4 + s.n;
  pos = 0;
  while (rdzv_items_next(&m->vals, &pos, &s))
    n += 4 + s.n;
  return n;
}

/* Bytes of m's items (slice lists) and raw list bodies of at least min
 * bytes: what a send would write from shared buffers if it could. */
static uint64_t large_bytes(const struct rdzv_msg *m, uint32_t min) {
  const struct rdzv_items *lists[2] = {&m->keys, &m->vals};
  uint64_t n = 0;
  for (int l = 0; l < 2; l++) {
    const struct rdzv_items *it = lists[l];
    if (it->v == NULL) {
      n += it->raw_len >= min && it->raw_len > 0 ? it->raw_len : 0;
      continue;
    }
    for (uint32_t i = 0; i < it->n; i++)
      n += it->v[i].n >= min && it->v[i].n > 0 ? it->v[i].n : 0;
  }
  return n;
}

/* Encodes m into c->out, referring to blobs (and the daemon's frame blob)
 * for what lies in them. 0 or the encoder's error (c->out unchanged). */
static int encode_shared(struct conn *c, const struct rdzv_msg *m,
                         struct rdzv_blob *const *blobs, uint32_t nblobs) {
  struct daemon *d = c->d;
  struct rdzv_blob *bl[RDZV_SEND_MAX_BLOBS + 1];
  struct rdzv_slice spans[RDZV_SEND_MAX_BLOBS + 1];
  uint32_t ns = 0;
  for (uint32_t i = 0; i < nblobs && ns < RDZV_SEND_MAX_BLOBS; i++)
    if (blobs[i] != NULL && blobs[i]->len > 0)
      bl[ns++] = blobs[i];
  if (d->frame_blob != NULL && d->frame_blob->len > 0)
    bl[ns++] = d->frame_blob;
  for (uint32_t i = 0; i < ns; i++) {
    spans[i].p = bl[i]->data;
    spans[i].n = bl[i]->len;
  }
  uint32_t min = d->cfg.share_min_bytes;
  uint64_t large = large_bytes(m, min);
  if (ns == 0 || large == 0) {
    int rc = rdzv_msg_encode(m, &c->out.buf);
    if (rc == 0)
      d->stats.bytes_copied_large += large;
    return rc;
  }
  struct rdzv_wire_ref refs[RDZV_SEND_MAX_BLOBS];
  uint32_t nrefs = 0;
  size_t before = c->out.buf.len;
  int rc = rdzv_msg_encode_refs(m, &c->out.buf, spans, ns, min, refs,
                                RDZV_SEND_MAX_BLOBS, &nrefs);
  if (rc < 0)
    return rc;
  uint64_t shared = 0;
  for (uint32_t i = 0; i < nrefs; i++) {
    /* The references are queued at the offsets the encoder gave. */
    size_t end = c->out.buf.len;
    c->out.buf.len = refs[i].at;
    rc = rdzv__outq_ref(&c->out, bl[refs[i].span], refs[i].p, refs[i].n);
    c->out.buf.len = end;
    if (rc < 0) { /* out of memory: copy the whole frame instead */
      rdzv__outq_truncate(&c->out, before);
      rc = rdzv_msg_encode(m, &c->out.buf);
      if (rc == 0)
        d->stats.bytes_copied_large += large;
      return rc;
    }
    shared += refs[i].n;
  }
  d->stats.bytes_copied_large += large - shared;
  return 0;
}

/* Encodes m onto c's queue, whatever c's state (a socket peer). */
static void queue_frame(struct conn *c, const struct rdzv_msg *m,
                        struct rdzv_blob *const *blobs, uint32_t nblobs) {
  if (encode_shared(c, m, blobs, nblobs) < 0) {
    rdzv__log(c->d, 0, "conn %s: cannot encode a reply; closing", c->name);
    rdzv__conn_close_now(c);
    return;
  }
  c->d->stats.frames_out++;
  rdzv__conn_mark_dirty(c);
}

void rdzv__conn_send_shared(struct conn *c, const struct rdzv_msg *m,
                            struct rdzv_blob *const *blobs, uint32_t nblobs) {
  if (c->inproc) {
    /* No socket, no encoding: the peer sees the message now (it must not
     * call back into the daemon from deliver; see serve.c). */
    if (c->state == CONN_READY) {
      c->d->stats.frames_out++;
      c->d->stats.bytes_out += frame_size(m);
      c->deliver_blobs = blobs;
      c->deliver_nblobs = nblobs;
      c->deliver(c->deliver_arg, m);
      c->deliver_blobs = NULL;
      c->deliver_nblobs = 0;
    }
    return;
  }
  if (c->state == CONN_READY || c->state == CONN_HELLO_WAIT ||
      c->state == CONN_AUTH_WAIT)
    queue_frame(c, m, blobs, nblobs);
}

void rdzv__conn_send(struct conn *c, const struct rdzv_msg *m) {
  rdzv__conn_send_shared(c, m, NULL, 0);
}

void rdzv__conn_reply_shared(struct conn *c, struct rdzv_msg *reply,
                             struct rdzv_blob *const *blobs, uint32_t nblobs) {
  struct daemon *d = c->d;
  reply->flags |= RDZV_F_REPLY;
  if (reply->status != 0 && reply->type <= RDZV_MSG_TYPE_MAX)
    d->stats.ops[reply->type].errors++;
  if (c->outstanding > 0)
    c->outstanding--;
  if (c->state == CONN_READY)
    rdzv__conn_send_shared(c, reply, blobs, nblobs);
}

void rdzv__conn_reply(struct conn *c, struct rdzv_msg *reply) {
  rdzv__conn_reply_shared(c, reply, NULL, 0);
}

void rdzv__conn_fail(struct conn *c, int status, const char *text) {
  rdzv__conn_fail_req(c, 0, status, text);
}

void rdzv__conn_fail_req(struct conn *c, uint32_t req_id, int status,
                         const char *text) {
  if (c->state == CONN_CLOSING || c->state == CONN_REFUSED ||
      c->state == CONN_CLOSED)
    return;
  c->d->stats.proto_errors++;
  rdzv__log_drop(c->d, "conn %s: dropped: %s (%s)", c->name,
                 rdzv_strerror(status), text);
  rdzv__conn_fail_sent(c, req_id, status, text, CONN_CLOSING);
}

void rdzv__conn_last_frame(struct conn *c, const struct rdzv_msg *m,
                           enum conn_state then) {
  struct daemon *d = c->d;
  rdzv__conn_set_state(c, then);
  if (!c->inproc) { /* an in-process peer is told nothing more */
    uv_read_stop(&c->h.stream);
    if (d->gate != NULL) {
      /* Answers not yet persisted are dropped (the peer sends them again
       * elsewhere); the last frame goes after those already released. */
      rdzv__outq_truncate(&c->out, c->gate_rel);
      queue_frame(c, m, NULL, 0);
      c->gate_rel = c->gate_seal = c->out.buf.len;
    } else {
      queue_frame(c, m, NULL, 0);
    }
  }
  rdzv__conn_unlist(c); /* written now, not at the iteration's end */
  rdzv__conn_start_write(c);
  if (!c->write_active && c->state == CONN_CLOSING)
    rdzv__conn_close_now(c);
}

void rdzv__conn_fail_sent(struct conn *c, uint32_t req_id, int status,
                          const char *text, enum conn_state then) {
  struct rdzv_slice s = {(const uint8_t *)text, (uint32_t)strlen(text)};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_ERROR;
  m.flags = RDZV_F_REPLY;
  m.req_id = req_id;
  m.status = status;
  m.keys.n = 1;
  m.keys.v = &s;
  rdzv__conn_last_frame(c, &m, then);
}

/* Under a gate: a reply that depends on no state (a ping's) goes before
 * the frames the gate holds, so that a peer hears from this daemon while
 * etcd is slow (its liveness check must not declare it lost). */
void rdzv__conn_send_ungated(struct conn *c, const struct rdzv_msg *r) {
  struct daemon *d = c->d;
  if (c->state != CONN_READY && c->state != CONN_HELLO_WAIT &&
      c->state != CONN_AUTH_WAIT)
    return;
  size_t at = c->gate_rel, before = c->out.buf.len;
  if (rdzv_msg_encode(r, &c->out.buf) < 0) {
    rdzv__conn_close_now(c);
    return;
  }
  size_t n = c->out.buf.len - before;
  if (before > at) { /* move the new frame in front of the held bytes */
    uint8_t *tmp = malloc(n);
    if (tmp == NULL) {
      c->out.buf.len = before; /* dropped: the peer pings again */
      return;
    }
    uint8_t *o = c->out.buf.data;
    memcpy(tmp, o + before, n);
    memmove(o + at + n, o + at, before - at);
    memcpy(o + at, tmp, n);
    free(tmp);
    rdzv__outq_insert(&c->out, at, n); /* held references move along */
  }
  c->gate_rel += n;
  c->gate_seal += n;
  d->stats.frames_out++;
  rdzv__conn_mark_dirty(c);
}

void rdzv__reply_init(struct rdzv_msg *r, const struct rdzv_msg *m,
                      int status) {
  memset(r, 0, sizeof(*r));
  r->type = m->type;
  r->req_id = m->req_id;
  r->status = status;
}

void rdzv__conn_answer_text(struct conn *c, uint8_t type, uint32_t req_id,
                            int status, const char *text, size_t len) {
  struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)len};
  struct rdzv_msg r;
  memset(&r, 0, sizeof(r));
  r.type = type;
  r.req_id = req_id;
  r.status = status;
  r.keys.n = len > 0 ? 1 : 0;
  r.keys.v = &t;
  rdzv__conn_reply(c, &r);
}

void rdzv__conn_reply_text(struct conn *c, const struct rdzv_msg *m, int status,
                           const char *text) {
  rdzv__conn_answer_text(c, m->type, m->req_id, status, text, strlen(text));
}

void rdzv__conn_reply_textf(struct conn *c, const struct rdzv_msg *m,
                            int status, const char *fmt, ...) {
  char text[RDZV_REPLY_TEXT_MAX];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  if (n < 0)
    text[0] = '\0';
  rdzv__conn_reply_text(c, m, status, text);
}
