/* rdzvd: the rdzv daemon, role root or node. See `rdzvd --help`. */
#include <stdio.h>
#include <string.h>

#include "rdzv/rdzv.h"
#include "store/daemon/config.h"
#include "store/daemon/daemon.h"
#include "store/wire/wire.h"

int main(int argc, char **argv) {
  struct rdzv_daemon_config cfg;
  char err[512];
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--version") == 0) {
      printf("rdzvd %s (wire protocol %u)\n", RDZV_VERSION_STRING,
             RDZV_WIRE_VERSION);
      return 0;
    }
  int rc = rdzv_config_parse(&cfg, argc, argv, stdout, err, sizeof(err));
  if (rc == 1) {
    rdzv_config_free(&cfg);
    return 0;
  }
  if (rc < 0) {
    fprintf(stderr, "rdzvd: %s\n", err);
    rdzv_config_free(&cfg);
    return 2;
  }
  rc = rdzv_daemon_run(&cfg);
  rdzv_config_free(&cfg);
  return rc == 0 ? 0 : 1;
}
