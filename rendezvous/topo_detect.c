/* Topology record detection from sysfs and the environment: see
 * rdzv_topology_detect in rdzv/rendezvous.h. Linux sysfs layout:
 * /sys/bus/pci/devices/<bdf>/{vendor,class,numa_node} (NVIDIA vendor id
 * 0x10de, display/3D controller classes 0x03xxxx), /sys/class/infiniband,
 * /sys/class/net; the NVIDIA driver's
 * /proc/driver/nvidia/gpus/<bdf>/information holds "GPU UUID:". */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/rendezvous.h"

static int read_line(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  char *ok = fgets(buf, (int)n, f);
  fclose(f);
  if (ok == NULL)
    return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The idx-th NVIDIA GPU's PCI address (sorted), or -1. */
static int nth_gpu(int32_t idx, char *bdf, size_t n) {
  DIR *d = opendir("/sys/bus/pci/devices");
  if (d == NULL)
    return -1;
  char *names[256];
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && count < 256) {
    char path[512], v[32], c[32];
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", e->d_name);
    if (read_line(path, v, sizeof(v)) < 0 || strcmp(v, "0x10de") != 0)
      continue;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
    if (read_line(path, c, sizeof(c)) < 0 || strncmp(c, "0x03", 4) != 0)
      continue;
    names[count++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)count, sizeof(names[0]), cmp_str);
  int rc = -1;
  if (idx >= 0 && idx < count && names[idx] != NULL) {
    snprintf(bdf, n, "%s", names[idx]);
    rc = 0;
  }
  for (int i = 0; i < count; i++)
    free(names[i]);
  return rc;
}

static void gpu_uuid(const char *bdf, char *out, size_t n) {
  char path[512], line[256];
  out[0] = '\0';
  snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information", bdf);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  while (fgets(line, sizeof(line), f) != NULL) {
    const char *p = strstr(line, "GPU UUID:");
    if (p == NULL)
      continue;
    p += 9;
    while (*p == ' ' || *p == '\t')
      p++;
    snprintf(out, n, "%.*s", (int)strcspn(p, "\n"), p);
    break;
  }
  fclose(f);
}

/* Comma-separated entries of dir (InfiniBand devices, else network
 * interfaces other than lo). */
static void list_nics(char *out, size_t n) {
  const char *dirs[2] = {"/sys/class/infiniband", "/sys/class/net"};
  out[0] = '\0';
  for (int k = 0; k < 2 && out[0] == '\0'; k++) {
    DIR *d = opendir(dirs[k]);
    if (d == NULL)
      continue;
    struct dirent *e;
    size_t off = 0;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.' || strcmp(e->d_name, "lo") == 0)
        continue;
      int w = snprintf(out + off, n - off, "%s%s", off ? "," : "", e->d_name);
      if (w < 0 || (size_t)w >= n - off)
        break;
      off += (size_t)w;
    }
    closedir(d);
  }
}

static int put(char *out, size_t n, size_t *off, const char *k, const char *v) {
  if (v == NULL || *v == '\0')
    return 0;
  int w = snprintf(out + *off, n - *off, "%s=%s\n", k, v);
  if (w < 0 || (size_t)w >= n - *off)
    return -ENOSPC;
  *off += (size_t)w;
  return 0;
}

int rdzv_topology_detect(const char *host, int32_t local_rank,
                         const char *location, char *out, size_t n) {
  char lr[16], bdf[64] = "", uuid[128] = "", numa[16] = "", nics[512];
  const char *env_pci = getenv("RDZV_GPU_PCI");
  const char *env_uuid = getenv("RDZV_GPU_UUID");
  if (n == 0)
    return -ENOSPC;
  out[0] = '\0';
  snprintf(lr, sizeof(lr), "%d", local_rank);
  if (env_pci != NULL)
    snprintf(bdf, sizeof(bdf), "%s", env_pci);
  else if (nth_gpu(local_rank, bdf, sizeof(bdf)) < 0)
    bdf[0] = '\0';
  if (env_uuid != NULL)
    snprintf(uuid, sizeof(uuid), "%s", env_uuid);
  else if (bdf[0] != '\0')
    gpu_uuid(bdf, uuid, sizeof(uuid));
  if (bdf[0] != '\0') {
    char path[512];
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bdf);
    if (read_line(path, numa, sizeof(numa)) < 0)
      numa[0] = '\0';
  }
  list_nics(nics, sizeof(nics));
  size_t off = 0;
  int rc = put(out, n, &off, "host", host);
  if (rc == 0)
    rc = put(out, n, &off, "local_rank", lr);
  if (rc == 0)
    rc = put(out, n, &off, "gpu_pci", bdf);
  if (rc == 0)
    rc = put(out, n, &off, "gpu_uuid", uuid);
  if (rc == 0)
    rc = put(out, n, &off, "numa", numa);
  if (rc == 0)
    rc = put(out, n, &off, "nics", nics);
  if (rc == 0)
    rc = put(out, n, &off, "location", location);
  return rc < 0 ? rc : (int)off;
}
