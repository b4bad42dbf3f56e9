/* rdzvd transport: writing. A frame queued on a connection (conn_send.c)
 * marks it dirty; at the end of the loop iteration (rdzv__conn_flush_check,
 * after every read of it) the deferred work runs, then every dirty
 * connection's queue is written, through the write gate of a durable root
 * when one is installed (its frames wait for the batch they depend on).
 * Owns the dirty and held lists and the gate's marks; calls outq.c to
 * write and conn.c to close a connection whose write failed. */
#include <stdlib.h>

#include "store/daemon/transport/transport.h"
#include "store/daemon/transport/transport_int.h"

static void on_write(void *arg, int status) {
  struct conn *c = arg;
  c->write_active = false;
  if (status < 0) {
    rdzv__log(c->d, 2, "conn %s: write failed: %s", c->name,
              uv_strerror(status));
    rdzv__conn_close_now(c);
  } else if (c->state == CONN_CLOSING && c->out.buf.len == 0) {
    rdzv__conn_close_now(c);
  } else if (c->state != CONN_CLOSED && c->out.buf.len > 0) {
    rdzv__conn_start_write(c); /* what was queued (or released) meanwhile */
    if (!c->write_active && c->state == CONN_CLOSING && c->out.buf.len == 0)
      rdzv__conn_close_now(c); /* that went at once: the last frame */
  }
  if (c->out.buf.len == 0)
    rdzv__outq_release(&c->out); /* an idle connection holds no buffer */
  rdzv__conn_unref(c);
}

void rdzv__conn_start_write(struct conn *c) {
again:;
  /* Under a gate only the released bytes go (see rdzv__gate_install). */
  size_t n = c->d->gate != NULL ? c->gate_rel : c->out.buf.len;
  if (c->write_active || n == 0 || c->state == CONN_CLOSED)
    return;
  /* Over TLS a write seals a bounded span (a burst of reads of a big
   * value must not be encrypted into one buffer); the rest follows. */
  if (c->tls != NULL)
    n = rdzv__outq_span(&c->out, n, RDZV_TLS_WRITE_BYTES);
  struct stats *st = &c->d->stats;
  int rc = rdzv__outq_write(&c->out, n, &c->h.stream, c->tls, on_write, c,
                            &st->bytes_out, &st->bytes_shared);
  if (rc < 0) {
    if (rc == RDZV_ENOMEM)
      rdzv__log(c->d, 0, "conn %s: out of memory; closing", c->name);
    rdzv__conn_close_now(c);
    return;
  }
  if (c->d->gate != NULL) {
    c->gate_rel -= n;
    c->gate_seal -= n;
  }
  if (rc == RDZV_OUTQ_WRITTEN) { /* all of it went at once */
    if (c->out.buf.len == 0)
      rdzv__outq_release(&c->out);
    else if (c->tls != NULL)
      goto again; /* the next span */
    return;
  }
  c->write_active = true;
  rdzv__conn_ref(c);
}

static void on_idle(uv_idle_t *h) { (void)h; }

void rdzv__conn_mark_dirty(struct conn *c) {
  struct daemon *d = c->d;
  if (c->dirty)
    return;
  c->dirty = true;
  TAILQ_INSERT_TAIL(&d->dirty, c, dirty_link);
  /* An active idle handle keeps the next poll from blocking, so the check
   * callback below flushes within this loop iteration. */
  uv_idle_start(&d->flush_idle, on_idle);
}

void rdzv__conn_unlist(struct conn *c) {
  struct daemon *d = c->d;
  if (c->dirty) {
    TAILQ_REMOVE(&d->dirty, c, dirty_link);
    c->dirty = false;
  }
  if (c->held) {
    TAILQ_REMOVE(&d->held, c, held_link);
    c->held = false;
  }
}

/* ---- the write gate ---------------------------------------------------------- */

void rdzv__gate_install(struct daemon *d, const struct rdzv_gate *g,
                        void *arg) {
  d->gate = g;
  d->gate_arg = arg;
}

/* Seals (a batch starts: what is queued waits for it) or releases (no
 * batch: everything goes), then writes what is released. */
static void gate_step(struct daemon *d) {
  struct conn *c, *next;
  while ((c = TAILQ_FIRST(&d->dirty)) != NULL) {
    TAILQ_REMOVE(&d->dirty, c, dirty_link);
    c->dirty = false;
    if (!c->held && !c->inproc) {
      c->held = true;
      TAILQ_INSERT_TAIL(&d->held, c, held_link);
    }
  }
  if (!d->gate_busy) {
    bool seal = d->gate->pending(d->gate_arg);
    TAILQ_FOREACH (c, &d->held, held_link) {
      c->gate_seal = c->out.buf.len;
      if (!seal)
        c->gate_rel = c->out.buf.len;
    }
    if (seal) {
      d->gate_busy = true;
      d->gate->start(d->gate_arg); /* may call rdzv__gate_done later only */
    }
  }
  for (c = TAILQ_FIRST(&d->held); c != NULL; c = next) {
    next = TAILQ_NEXT(c, held_link);
    rdzv__conn_start_write(c);
    if (c->held && c->out.buf.len <= c->gate_rel) {
      TAILQ_REMOVE(&d->held, c, held_link);
      c->held = false;
    }
  }
}

void rdzv__gate_done(struct daemon *d) {
  if (!d->gate_busy)
    return;
  d->gate_busy = false;
  struct conn *c;
  TAILQ_FOREACH (c, &d->held, held_link)
    c->gate_rel = c->gate_seal;
  gate_step(d);
}

void rdzv__gate_drop(struct daemon *d) {
  d->gate_busy = false;
  struct conn *c;
  while ((c = TAILQ_FIRST(&d->held)) != NULL) {
    TAILQ_REMOVE(&d->held, c, held_link);
    c->held = false;
    rdzv__outq_truncate(&c->out, c->gate_rel);
    c->gate_seal = c->gate_rel;
  }
}

void rdzv__gate_release(struct daemon *d) {
  struct conn *c;
  TAILQ_FOREACH (c, &d->conns, link)
    c->gate_rel = c->gate_seal = c->out.buf.len;
}

void rdzv__defer(struct daemon *d, struct rdzv_deferred *x) {
  if (x->queued)
    return;
  x->queued = true;
  TAILQ_INSERT_TAIL(&d->deferred, x, link);
  uv_idle_start(&d->flush_idle, on_idle); /* this iteration's check runs it */
}

void rdzv__defer_cancel(struct daemon *d, struct rdzv_deferred *x) {
  if (!x->queued)
    return;
  TAILQ_REMOVE(&d->deferred, x, link);
  x->queued = false;
}

void rdzv__conn_flush_check(uv_check_t *h) {
  struct daemon *d = h->data;
  struct conn *c;
  struct rdzv_deferred *x;
  size_t n = 0;
  TAILQ_FOREACH (x, &d->deferred, link)
    n++;
  /* Those deferred now; one a callback defers again runs next time. */
  while (n-- > 0 && (x = TAILQ_FIRST(&d->deferred)) != NULL) {
    TAILQ_REMOVE(&d->deferred, x, link);
    x->queued = false;
    x->cb(x); /* may queue frames: written below */
  }
  if (d->gate != NULL) {
    gate_step(d);
    uv_idle_stop(&d->flush_idle);
    return;
  }
  while ((c = TAILQ_FIRST(&d->dirty)) != NULL) {
    TAILQ_REMOVE(&d->dirty, c, dirty_link);
    c->dirty = false;
    rdzv__conn_start_write(c);
  }
  uv_idle_stop(&d->flush_idle);
}
