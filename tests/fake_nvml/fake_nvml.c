/* A FAKE NVML library (libnvidia-ml): a test double, never shipped. It
 * exports only what rdzv_domain_detect uses (nvmlInit_v2, nvmlShutdown,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetGpuFabricInfo) and answers
 * from the environment, read at each call:
 *   FAKE_NVML_INIT=N        nvmlInit_v2 returns N (default 0, success);
 *   FAKE_NVML_GPUS=N        GPUs present (default 8); a larger index
 *                           gets NVML_ERROR_INVALID_ARGUMENT (2);
 *   FAKE_NVML_FABRIC=N      nvmlDeviceGetGpuFabricInfo returns N (default
 *                           0; 3 is NVML_ERROR_NOT_SUPPORTED: a GPU
 *                           outside any NVLink fabric);
 *   FAKE_NVML_CLUSTER=HEX   the cluster UUID, 32 hex digits (default all
 *                           zero);
 *   FAKE_NVML_CLIQUE=N      the clique id (default 0);
 *   FAKE_NVML_STATE=N       the registration state (default 3, completed);
 *   FAKE_NVML_STATUS=N      the registration's status (default 0).
 * The record's layout is NVML's version-1 nvmlGpuFabricInfo_t. */
#include <stdlib.h>
#include <string.h>

struct fabric_v1 {
  unsigned char cluster_uuid[16];
  int status;
  unsigned int clique_id;
  unsigned char state;
};

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? atoi(v) : def;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return 0;
}

int nvmlInit_v2(void) { return env_int("FAKE_NVML_INIT", 0); }

int nvmlShutdown(void) { return 0; }

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
  static int gpus[64];
  if (index >= (unsigned)env_int("FAKE_NVML_GPUS", 8) || index >= 64)
    return 2;
  *device = &gpus[index];
  return 0;
}

int nvmlDeviceGetGpuFabricInfo(void *device, struct fabric_v1 *info) {
  const char *hex = getenv("FAKE_NVML_CLUSTER");
  int rc = env_int("FAKE_NVML_FABRIC", 0);
  (void)device;
  if (rc != 0)
    return rc;
  memset(info, 0, sizeof(*info));
  for (int i = 0; hex != NULL && i < 16 && hex[2 * i] && hex[2 * i + 1]; i++)
    info->cluster_uuid[i] =
        (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
  info->clique_id = (unsigned)env_int("FAKE_NVML_CLIQUE", 0);
  info->state = (unsigned char)env_int("FAKE_NVML_STATE", 3);
  info->status = env_int("FAKE_NVML_STATUS", 0);
  return 0;
}
