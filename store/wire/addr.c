/* rdzv's address syntax (addr.h): one pure parser. */
#include "store/wire/addr.h"

#include <string.h>

#include "store/wire/wire.h"

/* Decimal digits s[0..n) as a number, at most 65535; -1 if they are not
 * all digits (at least one), or exceed it. Leading zeros are taken
 * ("007000" is 7000, as the daemon's options always read it). */
static int port_of(const char *s, size_t n) {
  while (n > 1 && s[0] == '0') {
    s++;
    n--;
  }
  if (n == 0 || n > 5)
    return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v <= 65535 ? v : -1;
}

/* PORT or FIRST-LAST (s, NUL-terminated) into p by flags. */
static int ports(const char *s, unsigned flags, struct rdzv_addr_parts *p) {
  const char *dash = strchr(s, '-');
  if (dash == NULL) {
    p->port_first = p->port_last = port_of(s, strlen(s));
    if (p->port_first < 0 ||
        (p->port_first == 0 && (flags & RDZV_ADDR_PORT0) == 0))
      return RDZV_EBAD_ADDR;
    return 0;
  }
  if ((flags & RDZV_ADDR_RANGE) == 0)
    return RDZV_EBAD_ADDR;
  p->port_first = port_of(s, (size_t)(dash - s));
  p->port_last = port_of(dash + 1, strlen(dash + 1));
  if (p->port_first < 1 || p->port_last < p->port_first ||
      p->port_last - p->port_first >= RDZV_ADDR_MAX_PORT_RANGE)
    return RDZV_EBAD_ADDR;
  return 0;
}

int rdzv_addr_split(const char *s, unsigned flags,
                    struct rdzv_addr_parts *out) {
  memset(out, 0, sizeof(*out));
  if (s == NULL || s[0] == '\0')
    return RDZV_EBAD_ADDR;
  if (strncmp(s, "unix:", 5) == 0) {
    const char *path = s + 5;
    if ((flags & RDZV_ADDR_NO_UNIX) != 0 || path[0] == '\0' ||
        strcmp(path, "@") == 0)
      return RDZV_EBAD_ADDR;
    out->is_unix = true;
    out->path = path;
    return 0;
  }
  if (strncmp(s, "tcp:", 4) == 0)
    s += 4;
  const char *colon;
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (close == NULL || close[1] != ':')
      return RDZV_EBAD_ADDR;
    out->host = s + 1;
    out->host_len = (size_t)(close - out->host);
    colon = close + 1;
  } else {
    colon = strrchr(s, ':');
    if (colon == NULL)
      return RDZV_EBAD_ADDR;
    out->host = s;
    out->host_len = (size_t)(colon - s);
    if ((flags & RDZV_ADDR_BARE_V6) == 0 &&
        memchr(s, ':', out->host_len) != NULL)
      return RDZV_EBAD_ADDR; /* ambiguous: which colon is the port's? */
  }
  if (out->host_len == 0 || out->host_len > RDZV_ADDR_HOST_MAX)
    return RDZV_EBAD_ADDR;
  return ports(colon + 1, flags, out);
}

int rdzv_addr_host(const struct rdzv_addr_parts *p, char *buf, size_t n) {
  if (p->is_unix || p->host_len >= n)
    return RDZV_EBAD_ADDR;
  memcpy(buf, p->host, p->host_len);
  buf[p->host_len] = '\0';
  return 0;
}
