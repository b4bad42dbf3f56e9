/* rendezvous/domain_detect.c: a host's NVLink domain from NVML (see
 * rdzv_domain_detect in rdzv/rendezvous.h).
 *
 * NVML, not nvidia-smi's text: the tool's own manual says its output is
 * not guaranteed to stay compatible and points scripts at NVML, which is.
 * The library is opened with dlopen (rdzv links no NVIDIA library), and
 * only these entry points are used: nvmlInit_v2, nvmlShutdown,
 * nvmlDeviceGetHandleByIndex_v2 and nvmlDeviceGetGpuFabricInfo (NVML 12.x,
 * drivers 550 and later; the GB200-era multi-node NVLink fabric). GPUs are
 * in one NVLink domain when their fabric registration completed and they
 * share the cluster UUID and the clique id. The version-1 fabric record,
 * as NVML's header lays it out:
 *   unsigned char clusterUuid[16]; nvmlReturn_t status (int);
 *   unsigned int cliqueId; nvmlGpuFabricState_t state (unsigned char),
 * state 3 being NVML_GPU_FABRIC_STATE_COMPLETED. */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/rendezvous.h"

#define NVML_DEFAULT "libnvidia-ml.so.1"
#define FABRIC_COMPLETED 3

struct fabric_v1 {
  unsigned char cluster_uuid[16];
  int status;
  unsigned int clique_id;
  unsigned char state;
};

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_shutdown_fn)(void);
typedef int (*nvml_handle_fn)(unsigned int, void **);
typedef int (*nvml_fabric_fn)(void *, struct fabric_v1 *);

int rdzv_domain_format(const unsigned char uuid[16], uint32_t clique, char *out,
                       size_t n) {
  static const char digits[] = "0123456789abcdef";
  char hex[37];
  size_t k = 0;
  bool zero = true;

  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      hex[k++] = '-';
    hex[k++] = digits[uuid[i] >> 4];
    hex[k++] = digits[uuid[i] & 15];
    zero &= uuid[i] == 0;
  }
  hex[k] = '\0';
  if (zero)
    return 0;
  int w = snprintf(out, n, "nvl-%s-%u", hex, (unsigned)clique);
  if (w < 0 || (size_t)w >= n)
    return -ENOSPC;
  return w;
}

int rdzv_domain_detect(const char *nvml_path, int32_t device, char *out,
                       size_t n) {
  const char *path = nvml_path;
  struct fabric_v1 info;
  void *lib, *dev = NULL;
  int rc = 0;

  if (out == NULL || n == 0 || device < 0)
    return -EINVAL;
  out[0] = '\0';
  if (path == NULL)
    path = getenv("RDZV_NVML_LIBRARY");
  if (path == NULL || path[0] == '\0')
    path = NVML_DEFAULT;
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL)
    return 0; /* no NVIDIA driver here: no domain */
  nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
  nvml_shutdown_fn shutdown = (nvml_shutdown_fn)dlsym(lib, "nvmlShutdown");
  nvml_handle_fn handle =
      (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  nvml_fabric_fn fabric =
      (nvml_fabric_fn)dlsym(lib, "nvmlDeviceGetGpuFabricInfo");
  if (init == NULL || shutdown == NULL || handle == NULL || fabric == NULL ||
      init() != 0) {
    dlclose(lib);
    return 0; /* a driver without the fabric query, or NVML down */
  }
  memset(&info, 0, sizeof(info));
  if (handle((unsigned int)device, &dev) == 0 && fabric(dev, &info) == 0 &&
      info.state == FABRIC_COMPLETED && info.status == 0)
    rc = rdzv_domain_format(info.cluster_uuid, info.clique_id, out, n);
  shutdown();
  dlclose(lib);
  if (rc <= 0)
    out[0] = '\0';
  return rc;
}
