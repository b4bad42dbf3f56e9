/* rdzv's address syntax, one parser for every place that reads one: the
 * client library's --addr and fallbacks, the daemon's --listen,
 * --parent, --http-listen and --tcpstore-listen, and the ancestors a
 * parent names. A pure codec (a string in, offsets out): no allocation,
 * no resolver, no socket. Fuzzed (tests/fuzz/addr_fuzz.c).
 *
 *   unix:PATH              a Unix socket; PATH not empty, "@NAME" an
 *                          abstract one ("@" alone is not)
 *   [tcp:]HOST:PORT        HOST a name, an IPv4 address or [IPv6] in
 *                          brackets; PORT 1..65535 in decimal digits
 *                          (leading zeros taken)
 *   [tcp:]HOST:FIRST-LAST  a range of at most RDZV_ADDR_MAX_PORT_RANGE
 *                          ports (with RDZV_ADDR_RANGE)
 */
#ifndef RDZV_STORE_WIRE_ADDR_H
#define RDZV_STORE_WIRE_ADDR_H

#include <stdbool.h>
#include <stddef.h>

/* Flags of rdzv_addr_split. */
#define RDZV_ADDR_RANGE 1u   /* FIRST-LAST accepted (a node's --parent) */
#define RDZV_ADDR_PORT0 2u   /* port 0 accepted (a listener: any port) */
#define RDZV_ADDR_NO_UNIX 4u /* unix:PATH refused (a TCP listener) */
/* An unbracketed IPv6 host accepted, the last colon taken as the port's
 * ("::1:7000"); without it such a host is refused as ambiguous. The
 * daemon's options have always taken it. */
#define RDZV_ADDR_BARE_V6 8u

/* The most ports a FIRST-LAST range may hold. */
#define RDZV_ADDR_MAX_PORT_RANGE 64

/* Longest HOST (without brackets) a split gives; longer is refused. */
#define RDZV_ADDR_HOST_MAX 255

struct rdzv_addr_parts {
  bool is_unix;
  /* is_unix: the path, after "unix:" (points into the input string). */
  const char *path;
  /* TCP: the host, brackets dropped: host_len bytes into the input
   * string, not NUL-terminated (rdzv_addr_host copies it out). */
  const char *host;
  size_t host_len;
  /* TCP: the port, or the range's first and last (equal without one). */
  int port_first, port_last;
};

/* Splits address s (NUL-terminated) by the syntax above and flags
 * (RDZV_ADDR_*) into *out, which points into s. Returns 0, or
 * RDZV_EBAD_ADDR (store/wire/wire.h's status space) for anything else:
 * NULL or empty, a missing or empty host, path or port, a port that is
 * not all digits or outside 1..65535 (0 with RDZV_ADDR_PORT0), a range
 * without RDZV_ADDR_RANGE, one whose first is 0 or above its last or
 * that holds more than RDZV_ADDR_MAX_PORT_RANGE ports, an unbracketed
 * IPv6 host without RDZV_ADDR_BARE_V6, a host over RDZV_ADDR_HOST_MAX
 * bytes, unix: with RDZV_ADDR_NO_UNIX. *out is unspecified on error. */
int rdzv_addr_split(const char *s, unsigned flags, struct rdzv_addr_parts *out);

/* Copies p's host into buf (n bytes, NUL-terminated). Returns 0, or
 * RDZV_EBAD_ADDR when it does not fit (or p is a Unix address). */
int rdzv_addr_host(const struct rdzv_addr_parts *p, char *buf, size_t n);

#endif /* RDZV_STORE_WIRE_ADDR_H */
