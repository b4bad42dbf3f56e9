/* rdzvd transport: in-process peers, the benchmark's in-process rank
 * transport and the TCPStore front end's bridge (store/daemon/daemon.h).
 * Such a connection has no socket: frames sent to it are handed to its
 * deliver callback without encoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/daemon/transport/transport.h"
#include "store/daemon/transport/transport_int.h"

struct conn *
rdzv_daemon_inproc_connect(struct daemon *d, const char *job,
                           void (*deliver)(void *, const struct rdzv_msg *),
                           void *arg) {
  struct conn *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return NULL;
  c->d = d;
  c->refs = 1;
  c->inproc = true;
  c->deliver = deliver;
  c->deliver_arg = arg;
  c->role = RDZV_ROLE_CLIENT;
  struct job *j = rdzv__job_get(d, (const uint8_t *)job, strlen(job));
  if (j == NULL) { /* never listed: nothing to close */
    free(c);
    return NULL;
  }
  rdzv__job_attach(c, j);
  snprintf(c->name, sizeof(c->name), "inproc#%llu",
           (unsigned long long)d->stats.conns_total + 1);
  c->state = CONN_READY;
  TAILQ_INSERT_TAIL(&d->conns, c, link);
  d->nconns++;
  d->stats.conns_open++;
  d->stats.conns_total++;
  return c;
}

int rdzv_daemon_inproc_send(struct conn *c, const uint8_t *frame, size_t len) {
  if (c->state != CONN_READY)
    return RDZV_ECONN_CLOSED;
  c->d->stats.bytes_in += len;
  struct rdzv_msg m;
  size_t used;
  int rc = rdzv_msg_decode(frame, len, c->d->cfg.max_frame_bytes, &m, &used);
  if (rc < 0 || used != len)
    return rc < 0 ? rc : RDZV_EPROTO;
  rdzv__conn_ref(c);
  rdzv__conn_handle_frame(c, &m);
  rdzv__conn_unref(c);
  return 0;
}

void rdzv_daemon_inproc_close(struct conn *c) { rdzv__conn_close_now(c); }

struct rdzv_blob *rdzv_daemon_inproc_blob(struct conn *c, const uint8_t *p,
                                          size_t n) {
  for (uint32_t i = 0; i < c->deliver_nblobs; i++)
    if (c->deliver_blobs[i] != NULL &&
        rdzv__blob_holds(c->deliver_blobs[i], p, n))
      return rdzv__blob_ref(c->deliver_blobs[i]);
  struct rdzv_blob *f = c->d->frame_blob;
  if (f != NULL && rdzv__blob_holds(f, p, n))
    return rdzv__blob_ref(f);
  return NULL;
}
