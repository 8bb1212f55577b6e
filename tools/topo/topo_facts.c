/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU facts as text: what CUDA and NVML said about a machine, so a recorded machine can be replayed with its hwloc
 * XML (fccl-topo --input-xml M.xml --gpu-facts M.facts) and `fccl-topo --record M` can capture both. docs/topo.md
 * describes the format; every malformed line is an error naming the file and line.
 */
#include "topo.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SECTION_NONE, SECTION_SYSTEM, SECTION_GPU, SECTION_PEERS } section_t;

typedef struct {
  const char* path;
  int line;
  char* err;
  size_t errLen;
} factsCtx_t;

/* Staging area: GPUs are defined by index in any order and copied into sys once the file is read. */
typedef struct {
  int defined;
  topoGpu_t gpu;
} stagedGpu_t;

typedef struct {
  int from, to; /* -1 = every GPU */
  int canAccess, access, atomics, rank;
} stagedPeer_t;

static int fail(factsCtx_t* ctx, const char* fmt, const char* detail) {
  char message[256];
  snprintf(message, sizeof(message), fmt, detail);
  snprintf(ctx->err, ctx->errLen, "%s:%d: %s", ctx->path, ctx->line, message);
  return -1;
}

static char* trim(char* s) {
  while (isspace((unsigned char)*s)) s++;
  size_t len = strlen(s);
  while (len > 0 && isspace((unsigned char)s[len - 1])) s[--len] = '\0';
  return s;
}

static int parseInt(const char* text, long long min, long long max, long long* value) {
  char* end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || end == text || *trim(end) != '\0' || v < min || v > max) return -1;
  *value = v;
  return 0;
}

/* "1", "0" or "unknown" (-1). */
static int parseFlag(const char* text, int* value) {
  if (strcmp(text, "1") == 0 || strcmp(text, "yes") == 0)
    *value = 1;
  else if (strcmp(text, "0") == 0 || strcmp(text, "no") == 0)
    *value = 0;
  else if (strcmp(text, "unknown") == 0)
    *value = -1;
  else
    return -1;
  return 0;
}

static int parseRemoteType(const char* text, topoRemoteType_t* type) {
  static const char* names[] = {"unknown", "gpu", "switch", "cpu"};
  for (int t = 0; t < 4; t++) {
    if (strcmp(text, names[t]) == 0) {
      *type = (topoRemoteType_t)t;
      return 0;
    }
  }
  return -1;
}

/* nvlink = LINKS STATE VERSION REMOTE TYPE, e.g. "0-3 up 6 0000:05:00.0 switch". */
static int parseNvLink(factsCtx_t* ctx, topoGpu_t* gpu, char* value) {
  char* fields[6];
  int n = 0;
  for (char* tok = strtok(value, " \t"); tok && n < 6; tok = strtok(NULL, " \t")) fields[n++] = tok;
  if (n != 5) return fail(ctx, "%s", "nvlink needs LINKS STATE VERSION REMOTE TYPE");
  long long first, last;
  char* dash = strchr(fields[0], '-');
  if (dash) {
    *dash = '\0';
    if (parseInt(fields[0], 0, TOPO_MAX_LINKS - 1, &first) != 0 ||
        parseInt(dash + 1, 0, TOPO_MAX_LINKS - 1, &last) != 0 || last < first)
      return fail(ctx, "%s", "bad link range");
  } else {
    if (parseInt(fields[0], 0, TOPO_MAX_LINKS - 1, &first) != 0) return fail(ctx, "bad link number '%s'", fields[0]);
    last = first;
  }
  int active;
  if (strcmp(fields[1], "up") == 0)
    active = 1;
  else if (strcmp(fields[1], "down") == 0)
    active = 0;
  else
    return fail(ctx, "link state '%s' is neither up nor down", fields[1]);
  long long version;
  if (parseInt(fields[2], 0, 255, &version) != 0) return fail(ctx, "bad NVML NVLink version '%s'", fields[2]);
  topoBusId_t remote = {0, 0, 0, 0, 0};
  if (strcmp(fields[3], "-") != 0 && topoBusIdParse(fields[3], &remote) != 0)
    return fail(ctx, "bad remote bus id '%s'", fields[3]);
  topoRemoteType_t type;
  if (parseRemoteType(fields[4], &type) != 0)
    return fail(ctx, "remote type '%s' is not gpu, switch, cpu or unknown", fields[4]);
  for (long long l = first; l <= last; l++) {
    for (int k = 0; k < gpu->nlinks; k++)
      if (gpu->links[k].link == (int)l) return fail(ctx, "%s", "link listed twice");
    if (gpu->nlinks == TOPO_MAX_LINKS) return fail(ctx, "%s", "too many links");
    topoNvLink_t* link = &gpu->links[gpu->nlinks++];
    link->link = (int)l;
    link->active = active;
    link->version = (unsigned)version;
    link->remote = remote;
    link->remoteType = type;
  }
  return 0;
}

static int parseGpuKey(factsCtx_t* ctx, topoGpu_t* gpu, const char* key, char* value) {
  long long v;
  if (strcmp(key, "name") == 0) {
    snprintf(gpu->name, sizeof(gpu->name), "%s", value);
  } else if (strcmp(key, "uuid") == 0) {
    snprintf(gpu->uuid, sizeof(gpu->uuid), "%s", value);
  } else if (strcmp(key, "busid") == 0) {
    if (topoBusIdParse(value, &gpu->busId) != 0) return fail(ctx, "bad bus id '%s'", value);
  } else if (strcmp(key, "cc") == 0) {
    int major, minor, used = 0;
    if (sscanf(value, "%d.%d%n", &major, &minor, &used) != 2 || value[used] != '\0' || major < 1 || minor < 0)
      return fail(ctx, "compute capability '%s' is not MAJOR.MINOR", value);
    gpu->ccMajor = major;
    gpu->ccMinor = minor;
  } else if (strcmp(key, "sms") == 0) {
    if (parseInt(value, 1, 100000, &v) != 0) return fail(ctx, "bad SM count '%s'", value);
    gpu->smCount = (int)v;
  } else if (strcmp(key, "memory") == 0) {
    if (parseInt(value, 0, INT64_MAX, &v) != 0) return fail(ctx, "bad memory size '%s'", value);
    gpu->memoryBytes = (uint64_t)v;
  } else if (strcmp(key, "vmm") == 0) {
    if (parseFlag(value, &gpu->vmm) != 0) return fail(ctx, "vmm is 1, 0 or unknown, not '%s'", value);
  } else if (strcmp(key, "posix_fd") == 0) {
    if (parseFlag(value, &gpu->posixFd) != 0) return fail(ctx, "posix_fd is 1, 0 or unknown, not '%s'", value);
  } else if (strcmp(key, "gdr") == 0) {
    if (parseFlag(value, &gpu->gdr) != 0) return fail(ctx, "gdr is 1, 0 or unknown, not '%s'", value);
  } else if (strcmp(key, "nvlink_mbps") == 0) {
    if (parseInt(value, 0, UINT32_MAX, &v) != 0) return fail(ctx, "bad NVLink speed '%s'", value);
    gpu->nvlinkMBps = (unsigned)v;
  } else if (strcmp(key, "nvlink") == 0) {
    return parseNvLink(ctx, gpu, value);
  } else {
    return fail(ctx, "unknown GPU key '%s'", key);
  }
  return 0;
}

static int parseSystemKey(factsCtx_t* ctx, topoSystem_t* sys, const char* key, const char* value) {
  long long v;
  if (strcmp(key, "cuda_driver") == 0 && strcmp(value, "none") == 0) {
    sys->driverVersion = 0; /* no NVIDIA driver on the machine recorded */
    sys->noDriver = 1;
  } else if (strcmp(key, "cuda_driver") == 0 || strcmp(key, "cuda_runtime") == 0) {
    if (parseInt(value, 0, 1000000, &v) != 0) return fail(ctx, "bad CUDA version '%s'", value);
    if (key[5] == 'd')
      sys->driverVersion = (int)v;
    else
      sys->runtimeVersion = (int)v;
  } else if (strcmp(key, "cuda_status") == 0) {
    snprintf(sys->cudaStatus, sizeof(sys->cudaStatus), "%s", value);
  } else if (strcmp(key, "nvml") == 0) {
    if (strcmp(value, "available") == 0) {
      sys->nvmlAvailable = 1;
    } else if (strncmp(value, "unavailable", 11) == 0) {
      const char* why = value + 11;
      while (*why == ':' || *why == ' ') why++;
      sys->nvmlAvailable = 0;
      snprintf(sys->nvmlStatus, sizeof(sys->nvmlStatus), "%s", *why ? why : "not recorded");
    } else {
      return fail(ctx, "nvml is 'available' or 'unavailable: WHY', not '%s'", value);
    }
  } else {
    return fail(ctx, "unknown system key '%s'", key);
  }
  return 0;
}

/* FROM TO CAN_ACCESS ACCESS ATOMICS RANK, '*' for every GPU. */
static int parsePeerLine(factsCtx_t* ctx, char* line, stagedPeer_t* peer) {
  char* fields[7];
  int n = 0;
  for (char* tok = strtok(line, " \t"); tok && n < 7; tok = strtok(NULL, " \t")) fields[n++] = tok;
  if (n != 6) return fail(ctx, "%s", "peer lines are FROM TO CAN_ACCESS ACCESS ATOMICS RANK");
  long long v;
  int* ends[2] = {&peer->from, &peer->to};
  for (int e = 0; e < 2; e++) {
    if (strcmp(fields[e], "*") == 0)
      *ends[e] = -1;
    else if (parseInt(fields[e], 0, TOPO_MAX_GPUS - 1, &v) == 0)
      *ends[e] = (int)v;
    else
      return fail(ctx, "bad GPU index '%s'", fields[e]);
  }
  int* flags[3] = {&peer->canAccess, &peer->access, &peer->atomics};
  for (int f = 0; f < 3; f++)
    if (parseFlag(fields[2 + f], flags[f]) != 0 || *flags[f] < 0) return fail(ctx, "'%s' is not 0 or 1", fields[2 + f]);
  if (parseInt(fields[5], -1000, 1000, &v) != 0) return fail(ctx, "bad performance rank '%s'", fields[5]);
  peer->rank = (int)v;
  return 0;
}

int topoFactsRead(topoSystem_t* sys, const char* path, char* err, size_t errLen) {
  factsCtx_t ctx = {path, 0, err, errLen};
  FILE* file = fopen(path, "r");
  if (file == NULL) {
    snprintf(err, errLen, "cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  int status = -1;
  stagedGpu_t* gpus = calloc(TOPO_MAX_GPUS, sizeof(stagedGpu_t));
  stagedPeer_t* peers = NULL;
  int npeers = 0, peerCapacity = 0;
  char* line = NULL;
  size_t lineCap = 0;
  if (gpus == NULL) {
    snprintf(err, errLen, "out of memory reading %s", path);
    goto cleanup;
  }
  section_t section = SECTION_NONE;
  topoGpu_t* current = NULL;
  int sawNvml = 0;
  while (getline(&line, &lineCap, file) >= 0) {
    ctx.line++;
    char* hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char* text = trim(line);
    if (*text == '\0') continue;
    if (*text == '[') {
      char* close = strchr(text, ']');
      if (close == NULL || *trim(close + 1) != '\0') {
        fail(&ctx, "%s", "a section header is [system], [gpu N] or [peers]");
        goto cleanup;
      }
      *close = '\0';
      char* name = trim(text + 1);
      long long index;
      if (strcmp(name, "system") == 0) {
        section = SECTION_SYSTEM;
      } else if (strcmp(name, "peers") == 0) {
        section = SECTION_PEERS;
      } else if (strncmp(name, "gpu", 3) == 0 && isspace((unsigned char)name[3]) &&
                 parseInt(trim(name + 4), 0, TOPO_MAX_GPUS - 1, &index) == 0) {
        if (gpus[index].defined) {
          fail(&ctx, "GPU %s defined twice", trim(name + 4));
          goto cleanup;
        }
        section = SECTION_GPU;
        gpus[index].defined = 1;
        current = &gpus[index].gpu;
        memset(current, 0, sizeof(*current));
        current->index = (int)index;
        current->vmm = current->posixFd = current->gdr = -1;
        current->pciNode = -1;
      } else {
        fail(&ctx, "unknown section [%s]", name);
        goto cleanup;
      }
      continue;
    }
    if (section == SECTION_PEERS) {
      if (npeers == peerCapacity) {
        int capacity = peerCapacity ? 2 * peerCapacity : 64;
        stagedPeer_t* grown = realloc(peers, (size_t)capacity * sizeof(stagedPeer_t));
        if (grown == NULL) {
          snprintf(err, errLen, "out of memory reading %s", path);
          goto cleanup;
        }
        peers = grown;
        peerCapacity = capacity;
      }
      if (parsePeerLine(&ctx, text, &peers[npeers]) != 0) goto cleanup;
      npeers++;
      continue;
    }
    char* equals = strchr(text, '=');
    if (equals == NULL) {
      fail(&ctx, "expected KEY = VALUE, got '%s'", text);
      goto cleanup;
    }
    *equals = '\0';
    char* key = trim(text);
    char* value = trim(equals + 1);
    if (section == SECTION_SYSTEM) {
      if (strcmp(key, "nvml") == 0) sawNvml = 1;
      if (parseSystemKey(&ctx, sys, key, value) != 0) goto cleanup;
    } else if (section == SECTION_GPU) {
      if (parseGpuKey(&ctx, current, key, value) != 0) goto cleanup;
    } else {
      fail(&ctx, "'%s' outside a section", key);
      goto cleanup;
    }
  }
  if (ferror(file)) {
    snprintf(err, errLen, "cannot read %s: %s", path, strerror(errno));
    goto cleanup;
  }
  ctx.line = 0;
  int ngpus = 0;
  while (ngpus < TOPO_MAX_GPUS && gpus[ngpus].defined) ngpus++;
  for (int g = ngpus; g < TOPO_MAX_GPUS; g++) {
    if (gpus[g].defined) {
      snprintf(err, errLen, "%s: GPU %d is defined but GPU %d is not (indexes are CUDA ordinals 0..N-1)", path, g,
               ngpus);
      goto cleanup;
    }
  }
  if (!sawNvml) {
    snprintf(err, errLen, "%s: [system] must say nvml = available or nvml = unavailable: WHY", path);
    goto cleanup;
  }
  for (int g = 0; g < ngpus; g++) {
    if (!gpus[g].gpu.busId.valid || gpus[g].gpu.ccMajor == 0) {
      snprintf(err, errLen, "%s: GPU %d needs at least busid and cc", path, g);
      goto cleanup;
    }
  }
  if (topoSetGpuCount(sys, ngpus, err, errLen) != 0) goto cleanup;
  for (int g = 0; g < ngpus; g++) {
    sys->gpus[g] = gpus[g].gpu;
    sys->gpus[g].nvlinkQueried = sys->nvmlAvailable;
  }
  for (int p = 0; p < npeers; p++) {
    const stagedPeer_t* staged = &peers[p];
    if (staged->from >= ngpus || staged->to >= ngpus) {
      snprintf(err, errLen, "%s: a peer line names GPU %d, but only %d GPUs are defined", path,
               staged->from >= ngpus ? staged->from : staged->to, ngpus);
      goto cleanup;
    }
    for (int i = 0; i < ngpus; i++) {
      for (int j = 0; j < ngpus; j++) {
        if (i == j || (staged->from >= 0 && staged->from != i) || (staged->to >= 0 && staged->to != j)) continue;
        topoPeer_t* peer = &sys->peers[i * ngpus + j];
        peer->known = 1;
        peer->canAccess = staged->canAccess;
        peer->access = staged->access;
        peer->atomics = staged->atomics;
        peer->rank = staged->rank;
      }
    }
  }
  sys->cudaQueried = 1;
  sys->gpuSource = TOPO_SRC_FILE;
  const char* slash = strrchr(path, '/');
  snprintf(sys->gpuSourceName, sizeof(sys->gpuSourceName), "%s", slash ? slash + 1 : path);
  if (ngpus == 0 && sys->cudaStatus[0] == '\0')
    snprintf(sys->cudaStatus, sizeof(sys->cudaStatus), "%s", "no CUDA device visible");
  if (!sys->nvmlAvailable && ngpus > 0)
    topoNote(sys, "NVML unavailable: %s; NVLink links are not shown", sys->nvmlStatus);
  status = 0;
cleanup:
  free(line);
  free(peers);
  free(gpus);
  fclose(file);
  return status;
}

static const char* flagText(int value) { return value < 0 ? "unknown" : value ? "1" : "0"; }

static int sameRun(const topoNvLink_t* a, const topoNvLink_t* b) {
  int sameRemote = (!a->remote.valid && !b->remote.valid) || topoBusIdEqual(&a->remote, &b->remote);
  return b->link == a->link + 1 && a->active == b->active && a->version == b->version &&
         a->remoteType == b->remoteType && sameRemote;
}

int topoFactsWrite(const topoSystem_t* sys, FILE* out) {
  fprintf(out, "# fccl-topo GPU facts: what CUDA and NVML reported (read back with --gpu-facts).\n");
  fprintf(out, "[system]\n");
  if (sys->noDriver)
    fprintf(out, "cuda_driver = none\ncuda_runtime = %d\n", sys->runtimeVersion);
  else
    fprintf(out, "cuda_driver = %d\ncuda_runtime = %d\n", sys->driverVersion, sys->runtimeVersion);
  if (sys->ngpus == 0 && sys->cudaStatus[0]) fprintf(out, "cuda_status = %s\n", sys->cudaStatus);
  if (sys->nvmlAvailable)
    fprintf(out, "nvml = available\n");
  else
    fprintf(out, "nvml = unavailable: %s\n", sys->nvmlStatus[0] ? sys->nvmlStatus : "not queried");
  for (int g = 0; g < sys->ngpus; g++) {
    const topoGpu_t* gpu = &sys->gpus[g];
    char bus[32];
    topoBusIdFormat(&gpu->busId, bus, sizeof(bus));
    fprintf(out, "\n[gpu %d]\nname = %s\nbusid = %s\n", g, gpu->name, bus);
    if (gpu->uuid[0]) fprintf(out, "uuid = %s\n", gpu->uuid);
    fprintf(out, "cc = %d.%d\nsms = %d\nmemory = %llu\n", gpu->ccMajor, gpu->ccMinor, gpu->smCount,
            (unsigned long long)gpu->memoryBytes);
    fprintf(out, "vmm = %s\nposix_fd = %s\ngdr = %s\n", flagText(gpu->vmm), flagText(gpu->posixFd), flagText(gpu->gdr));
    if (gpu->nvlinkMBps) fprintf(out, "nvlink_mbps = %u\n", gpu->nvlinkMBps);
    for (int l = 0; l < gpu->nlinks;) {
      int end = l;
      while (end + 1 < gpu->nlinks && sameRun(&gpu->links[end], &gpu->links[end + 1])) end++;
      const topoNvLink_t* link = &gpu->links[l];
      char remote[32];
      topoBusIdFormat(&link->remote, remote, sizeof(remote));
      if (end > l)
        fprintf(out, "nvlink = %d-%d", link->link, gpu->links[end].link);
      else
        fprintf(out, "nvlink = %d", link->link);
      fprintf(out, " %s %u %s %s\n", link->active ? "up" : "down", link->version, remote,
              topoRemoteTypeName(link->remoteType));
      l = end + 1;
    }
  }
  if (sys->ngpus > 1) {
    fprintf(out, "\n[peers]\n# FROM TO CAN_ACCESS ACCESS ATOMICS RANK\n");
    for (int i = 0; i < sys->ngpus; i++) {
      for (int j = 0; j < sys->ngpus; j++) {
        const topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
        if (i == j || !peer->known) continue;
        fprintf(out, "%d %d %d %d %d %d\n", i, j, peer->canAccess, peer->access, peer->atomics, peer->rank);
      }
    }
  }
  return ferror(out) ? -1 : 0;
}
