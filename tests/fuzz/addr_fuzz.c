/* libFuzzer target: rdzv's address syntax (store/wire/addr.h) on
 * arbitrary bytes: the first byte's low 4 bits are the flags, the rest
 * (up to a NUL) the address.
 *
 * Properties, for any input:
 *  - nothing crashes or reads outside the string (ASan);
 *  - the status is 0 or RDZV_EBAD_ADDR;
 *  - on success, a Unix address: the input starts with "unix:", the path
 *    is what follows, not empty and not "@" alone, and RDZV_ADDR_NO_UNIX
 *    was not given; a TCP one: the host lies inside the string, 1..255
 *    bytes, the ports are 0..65535 with first <= last, 0 only with
 *    RDZV_ADDR_PORT0 and no range, a range only with RDZV_ADDR_RANGE and
 *    of at most RDZV_ADDR_MAX_PORT_RANGE ports, a host with a colon only
 *    in brackets or with RDZV_ADDR_BARE_V6;
 *  - a TCP address written back in the canonical form (tcp:HOST:PORT,
 *    the tcp: so that a host "unix" or "tcp" stays one; [HOST] when HOST
 *    has a colon or starts with '['; FIRST-LAST for a range)
 *    parses to the same host and ports (such hosts that also hold a ']'
 *    cannot be written back and are skipped);
 *  - rdzv_addr_host copies the host when it fits and refuses when not.
 * A failed property aborts, which libFuzzer and the regression driver
 * (fuzz_main.c) report as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "store/wire/addr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "addr_fuzz: property failed: %s\n", what);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0 || size > 2048)
    return 0;
  unsigned flags = data[0] & 0xfu;
  size_t n = size - 1;
  char *s = malloc(n + 1);
  if (s == NULL)
    return 0;
  memcpy(s, data + 1, n);
  s[n] = '\0';
  size_t len = strlen(s);
  struct rdzv_addr_parts p;
  int rc = rdzv_addr_split(s, flags, &p);
  require(rc == 0 || rc == RDZV_EBAD_ADDR, "status is 0 or RDZV_EBAD_ADDR");
  if (rc == 0 && p.is_unix) {
    require(strncmp(s, "unix:", 5) == 0 && p.path == s + 5,
            "a Unix path follows unix:");
    require(p.path[0] != '\0' && strcmp(p.path, "@") != 0,
            "a Unix path is not empty nor @ alone");
    require((flags & RDZV_ADDR_NO_UNIX) == 0, "unix: refused when asked");
  } else if (rc == 0) {
    require(p.host >= s && p.host + p.host_len <= s + len,
            "the host lies inside the string");
    require(p.host_len >= 1 && p.host_len <= RDZV_ADDR_HOST_MAX,
            "the host is 1..255 bytes");
    require(p.port_first >= 0 && p.port_first <= p.port_last &&
                p.port_last <= 65535,
            "ports in 0..65535, first <= last");
    require(p.port_first > 0 ||
                ((flags & RDZV_ADDR_PORT0) != 0 && p.port_last == 0),
            "port 0 only with RDZV_ADDR_PORT0, never in a range");
    require(p.port_first == p.port_last || (flags & RDZV_ADDR_RANGE) != 0,
            "a range only with RDZV_ADDR_RANGE");
    require(p.port_last - p.port_first < RDZV_ADDR_MAX_PORT_RANGE,
            "a range holds at most RDZV_ADDR_MAX_PORT_RANGE ports");
    int colon = memchr(p.host, ':', p.host_len) != NULL;
    int bracket = p.host > s && p.host[-1] == '[';
    require(!colon || bracket || (flags & RDZV_ADDR_BARE_V6) != 0,
            "a host with a colon comes in brackets or with BARE_V6");
    char host[RDZV_ADDR_HOST_MAX + 1];
    require(rdzv_addr_host(&p, host, sizeof(host)) == 0 &&
                strlen(host) == p.host_len &&
                memcmp(host, p.host, p.host_len) == 0,
            "rdzv_addr_host copies the host");
    char small[4];
    require((rdzv_addr_host(&p, small, sizeof(small)) == 0) ==
                (p.host_len < sizeof(small)),
            "rdzv_addr_host refuses a host that does not fit");
    /* A host with a colon, or that starts with '[', goes in brackets
     * (it cannot when it holds a ']'). */
    int brackets = colon || p.host[0] == '[';
    if (!(brackets && memchr(p.host, ']', p.host_len) != NULL)) {
      char back[300], ports[16];
      if (p.port_first == p.port_last)
        snprintf(ports, sizeof(ports), "%d", p.port_first);
      else
        snprintf(ports, sizeof(ports), "%d-%d", p.port_first, p.port_last);
      snprintf(back, sizeof(back), brackets ? "tcp:[%s]:%s" : "tcp:%s:%s", host,
               ports);
      struct rdzv_addr_parts q;
      require(rdzv_addr_split(back, flags, &q) == 0 && !q.is_unix &&
                  q.host_len == p.host_len &&
                  memcmp(q.host, host, p.host_len) == 0 &&
                  q.port_first == p.port_first && q.port_last == p.port_last,
              "the canonical form parses to the same host and ports");
    }
  }
  free(s);
  return 0;
}
