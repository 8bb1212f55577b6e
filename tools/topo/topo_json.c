/*
 * --json: the same report as data. The schema is test/data/topo/schema.json and docs/topo.md explains each field;
 * "schema": "fccl-topo/1" changes only when a field changes meaning or disappears (new fields may be added).
 */
#include "topo.h"
#include "topo_text.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  FILE* out;
  int depth;
  int needComma[32];
  int inline_[32]; /* arrays of scalars print on one line: [0, 1] */
} jsonWriter_t;

static void jsonString(FILE* out, const char* s) {
  fputc('"', out);
  for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", out);
    else if (*p == '\t')
      fputs("\\t", out);
    else if (*p < 0x20)
      fprintf(out, "\\u%04x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

/* Starts a member (key != NULL, inside an object) or an element (key == NULL, inside an array). */
static void jsonKey(jsonWriter_t* w, const char* key) {
  if (w->depth > 0 && w->inline_[w->depth]) {
    if (w->needComma[w->depth]) fputs(", ", w->out);
    w->needComma[w->depth] = 1;
  } else if (w->depth > 0) {
    fputs(w->needComma[w->depth] ? ",\n" : "\n", w->out);
    w->needComma[w->depth] = 1;
    fprintf(w->out, "%*s", 2 * w->depth, "");
  }
  if (key) {
    jsonString(w->out, key);
    fputs(": ", w->out);
  }
}

static void jsonOpen(jsonWriter_t* w, const char* key, char bracket) {
  jsonKey(w, key);
  fputc(bracket, w->out);
  w->depth++;
  w->needComma[w->depth] = 0;
  w->inline_[w->depth] = 0;
}

/* An array whose elements are all scalars, written on one line. */
static void jsonOpenInline(jsonWriter_t* w, const char* key) {
  jsonOpen(w, key, '[');
  w->inline_[w->depth] = 1;
}

static void jsonClose(jsonWriter_t* w, char bracket) {
  int hadMembers = w->needComma[w->depth] && !w->inline_[w->depth];
  w->depth--;
  if (hadMembers) fprintf(w->out, "\n%*s", 2 * w->depth, "");
  fputc(bracket, w->out);
}

static void jsonStr(jsonWriter_t* w, const char* key, const char* value) {
  jsonKey(w, key);
  if (value)
    jsonString(w->out, value);
  else
    fputs("null", w->out);
}

/* A string member that is null when empty. */
static void jsonStrOrNull(jsonWriter_t* w, const char* key, const char* value) {
  jsonStr(w, key, value && value[0] ? value : NULL);
}

static void jsonInt(jsonWriter_t* w, const char* key, long long value) {
  jsonKey(w, key);
  fprintf(w->out, "%lld", value);
}

static void jsonIntOrNull(jsonWriter_t* w, const char* key, long long value, int isNull) {
  jsonKey(w, key);
  if (isNull)
    fputs("null", w->out);
  else
    fprintf(w->out, "%lld", value);
}

static void jsonBool(jsonWriter_t* w, const char* key, int value) {
  jsonKey(w, key);
  fputs(value ? "true" : "false", w->out);
}

/* -1 (unknown) as null. */
static void jsonTristate(jsonWriter_t* w, const char* key, int value) {
  jsonKey(w, key);
  fputs(value < 0 ? "null" : value ? "true" : "false", w->out);
}

static void jsonNumber(jsonWriter_t* w, const char* key, double value, int decimals) {
  jsonKey(w, key);
  fprintf(w->out, "%.*f", decimals, value);
}

static void hex(char* buf, size_t len, const char* fmt, unsigned value) { snprintf(buf, len, fmt, value); }

static void writeSource(jsonWriter_t* w, const topoSystem_t* sys) {
  jsonOpen(w, "source", '{');
  jsonStr(w, "host", sys->hostSource == TOPO_SRC_FILE ? "hwloc_xml" : "this_machine");
  jsonStrOrNull(w, "host_file", sys->hostSource == TOPO_SRC_FILE ? sys->hostSourceName : NULL);
  jsonStr(w, "gpus",
          sys->gpuSource == TOPO_SRC_FILE   ? "facts_file"
          : sys->gpuSource == TOPO_SRC_LIVE ? "this_machine"
                                            : "not_queried");
  jsonStrOrNull(w, "gpu_file", sys->gpuSource == TOPO_SRC_FILE ? sys->gpuSourceName : NULL);
  jsonClose(w, '}');
}

static void writeNumaList(jsonWriter_t* w, const char* key, const char* list) {
  /* "0-1,3" -> [0, 1, 3] */
  jsonOpenInline(w, key);
  const char* p = list;
  while (*p) {
    char* end = NULL;
    long first = strtol(p, &end, 10);
    if (end == p) break;
    long last = first;
    p = end;
    if (*p == '-') {
      last = strtol(p + 1, &end, 10);
      p = end;
    }
    for (long n = first; n <= last; n++) jsonInt(w, NULL, n);
    if (*p == ',') p++;
  }
  jsonClose(w, ']');
}

static void writePci(jsonWriter_t* w, const topoSystem_t* sys, int index) {
  const topoPciNode_t* node = &sys->pci[index];
  char bus[32], text[32];
  jsonOpen(w, NULL, '{');
  jsonStr(w, "kind",
          node->kind == TOPO_PCI_HOSTBRIDGE ? "host_bridge"
          : node->kind == TOPO_PCI_BRIDGE   ? "bridge"
                                            : "device");
  topoBusIdFormat(&node->busId, bus, sizeof(bus));
  jsonStrOrNull(w, "busid", node->busId.valid ? bus : NULL);
  if (node->kind != TOPO_PCI_DEVICE && !node->implied) {
    snprintf(text, sizeof(text), "%04x:[%02x-%02x]", node->domain, node->secondaryBus, node->subordinateBus);
    jsonStr(w, "bus_range", text);
  } else {
    jsonStr(w, "bus_range", NULL);
  }
  if (node->kind == TOPO_PCI_HOSTBRIDGE) {
    jsonStr(w, "class", NULL);
    jsonStr(w, "class_name", "host bridge");
    jsonStr(w, "vendor", NULL);
    jsonStr(w, "device", NULL);
    jsonStr(w, "link_gbs", NULL);
  } else {
    hex(text, sizeof(text), "0x%04x", node->classId);
    jsonStr(w, "class", text);
    jsonStr(w, "class_name", topoPciClassName(node->classId));
    hex(text, sizeof(text), "0x%04x", node->vendor);
    jsonStr(w, "vendor", text);
    hex(text, sizeof(text), "0x%04x", node->device);
    jsonStr(w, "device", text);
    if (node->linkGBs > 0)
      jsonNumber(w, "link_gbs", node->linkGBs, 2);
    else
      jsonStr(w, "link_gbs", NULL);
  }
  jsonStrOrNull(w, "label", node->label);
  jsonIntOrNull(w, "gpu", node->gpu, node->gpu < 0);
  jsonIntOrNull(w, "numa_node", node->numaNode, node->numaNode < 0);
  jsonOpen(w, "children", '[');
  for (int child = node->firstChild; child >= 0; child = sys->pci[child].nextSibling) writePci(w, sys, child);
  jsonClose(w, ']');
  jsonClose(w, '}');
}

static void writeHost(jsonWriter_t* w, const topoSystem_t* sys) {
  jsonOpen(w, "host", '{');
  jsonStrOrNull(w, "arch", sys->arch);
  jsonStrOrNull(w, "model", sys->hostModel);
  jsonInt(w, "pus", sys->npus);
  jsonInt(w, "cores", sys->ncores);
  jsonOpen(w, "packages", '[');
  for (int p = 0; p < sys->npackages; p++) {
    const topoPackage_t* pkg = &sys->packages[p];
    jsonOpen(w, NULL, '{');
    jsonInt(w, "os_index", pkg->osIndex);
    jsonStrOrNull(w, "model", pkg->model);
    jsonStrOrNull(w, "vendor", pkg->vendor);
    jsonIntOrNull(w, "family", pkg->family, pkg->family < 0);
    jsonIntOrNull(w, "model_number", pkg->modelNumber, pkg->modelNumber < 0);
    jsonInt(w, "cores", pkg->cores);
    jsonInt(w, "pus", pkg->pus);
    jsonStr(w, "cpus", pkg->cpus);
    writeNumaList(w, "numa_nodes", pkg->numaNodes);
    jsonClose(w, '}');
  }
  jsonClose(w, ']');
  jsonOpen(w, "numa_nodes", '[');
  for (int n = 0; n < sys->nnuma; n++) {
    jsonOpen(w, NULL, '{');
    jsonInt(w, "os_index", sys->numa[n].osIndex);
    jsonStr(w, "cpus", sys->numa[n].cpus);
    jsonInt(w, "memory_bytes", (long long)sys->numa[n].memoryBytes);
    jsonClose(w, '}');
  }
  jsonClose(w, ']');
  jsonOpen(w, "pci", '[');
  for (int n = 0; n < sys->npci; n++)
    if (sys->pci[n].parent < 0) writePci(w, sys, n);
  jsonClose(w, ']');
  jsonClose(w, '}');
}

static void writeNvLink(jsonWriter_t* w, const topoSystem_t* sys, const topoGpu_t* gpu) {
  if (!sys->nvmlAvailable || !gpu->nvlinkQueried) {
    jsonStr(w, "nvlink", NULL);
    return;
  }
  char bus[32];
  int active = 0;
  for (int l = 0; l < gpu->nlinks; l++) active += gpu->links[l].active;
  jsonOpen(w, "nvlink", '{');
  jsonInt(w, "active", active);
  jsonIntOrNull(w, "speed_mbps", gpu->nvlinkMBps, gpu->nvlinkMBps == 0);
  double gbs = topoNvLinkGBs(gpu);
  if (gbs > 0)
    jsonNumber(w, "gbs_per_link", gbs, 3);
  else
    jsonStr(w, "gbs_per_link", NULL);
  jsonOpen(w, "links", '[');
  for (int l = 0; l < gpu->nlinks; l++) {
    const topoNvLink_t* link = &gpu->links[l];
    jsonOpen(w, NULL, '{');
    jsonInt(w, "link", link->link);
    jsonBool(w, "active", link->active);
    jsonInt(w, "version_enum", link->version);
    jsonStrOrNull(w, "version", link->version ? topoNvLinkVersionName(link->version) : NULL);
    jsonStr(w, "remote_type", topoRemoteTypeName(link->remoteType));
    topoBusIdFormat(&link->remote, bus, sizeof(bus));
    jsonStrOrNull(w, "remote_busid", link->remote.valid ? bus : NULL);
    jsonClose(w, '}');
  }
  jsonClose(w, ']');
  jsonOpen(w, "groups", '[');
  for (int k = 0; k < gpu->ngroups; k++) {
    const topoNvGroup_t* group = &gpu->groups[k];
    jsonOpen(w, NULL, '{');
    jsonStr(w, "remote_type", topoRemoteTypeName(group->remoteType));
    topoBusIdFormat(&group->remote, bus, sizeof(bus));
    jsonStrOrNull(w, "remote_busid", group->remote.valid ? bus : NULL);
    jsonInt(w, "count", group->count);
    jsonIntOrNull(w, "peer_gpu", group->peerGpu, group->peerGpu < 0);
    jsonStrOrNull(w, "version", group->version ? topoNvLinkVersionName(group->version) : NULL);
    jsonClose(w, '}');
  }
  jsonClose(w, ']');
  jsonClose(w, '}');
}

static void writeGpus(jsonWriter_t* w, const topoSystem_t* sys) {
  jsonOpen(w, "cuda", '{');
  jsonBool(w, "queried", sys->cudaQueried);
  jsonStrOrNull(w, "status", sys->ngpus == 0 ? sys->cudaStatus : NULL);
  jsonIntOrNull(w, "driver_version", sys->driverVersion, sys->driverVersion <= 0);
  jsonIntOrNull(w, "runtime_version", sys->runtimeVersion, sys->runtimeVersion <= 0);
  jsonClose(w, '}');
  jsonOpen(w, "nvml", '{');
  jsonBool(w, "available", sys->nvmlAvailable);
  jsonStrOrNull(w, "status", sys->nvmlAvailable ? NULL : sys->nvmlStatus);
  jsonClose(w, '}');
  jsonOpen(w, "gpus", '[');
  for (int g = 0; g < sys->ngpus; g++) {
    const topoGpu_t* gpu = &sys->gpus[g];
    char bus[32], text[32];
    const topoPciNode_t* node = gpu->pciNode >= 0 ? &sys->pci[gpu->pciNode] : NULL;
    jsonOpen(w, NULL, '{');
    jsonInt(w, "index", g);
    jsonStr(w, "name", gpu->name);
    jsonStrOrNull(w, "uuid", gpu->uuid);
    topoBusIdFormat(&gpu->busId, bus, sizeof(bus));
    jsonStr(w, "busid", bus);
    snprintf(text, sizeof(text), "%d.%d", gpu->ccMajor, gpu->ccMinor);
    jsonStr(w, "compute_capability", text);
    jsonInt(w, "sms", gpu->smCount);
    jsonInt(w, "memory_bytes", (long long)gpu->memoryBytes);
    jsonIntOrNull(w, "numa_node", node ? node->numaNode : -1, node == NULL || node->numaNode < 0);
    jsonStrOrNull(w, "numa_affinity", node ? node->numaNodes : NULL);
    jsonStrOrNull(w, "cpu_affinity", node ? node->cpus : NULL);
    jsonTristate(w, "vmm", gpu->vmm);
    jsonTristate(w, "posix_fd", gpu->posixFd);
    jsonTristate(w, "gdr", gpu->gdr);
    topoIpc_t ipc = topoGpuIpc(gpu);
    jsonStr(w, "ipc", ipc == TOPO_IPC_CUMEM ? "cumem" : ipc == TOPO_IPC_LEGACY ? "legacy" : "unknown");
    jsonBool(w, "kernels", topoGpuHasKernels(sys, gpu));
    writeNvLink(w, sys, gpu);
    jsonClose(w, '}');
  }
  jsonClose(w, ']');
}

static void writeMatrix(jsonWriter_t* w, const topoSystem_t* sys) {
  char cell[16];
  jsonOpen(w, "matrix", '{');
  jsonOpenInline(w, "labels");
  for (int g = 0; g < sys->ngpus; g++) {
    snprintf(cell, sizeof(cell), "GPU%d", g);
    jsonStr(w, NULL, cell);
  }
  jsonClose(w, ']');
  jsonOpen(w, "rows", '[');
  for (int i = 0; i < sys->ngpus; i++) {
    jsonOpenInline(w, NULL);
    for (int j = 0; j < sys->ngpus; j++) {
      topoPathName(&sys->paths[i * sys->ngpus + j], cell, sizeof(cell));
      jsonStr(w, NULL, cell);
    }
    jsonClose(w, ']');
  }
  jsonClose(w, ']');
  jsonClose(w, '}');
  jsonOpen(w, "peers", '[');
  for (int i = 0; i < sys->ngpus; i++) {
    for (int j = 0; j < sys->ngpus; j++) {
      if (i == j) continue;
      const topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
      jsonOpen(w, NULL, '{');
      jsonInt(w, "from", i);
      jsonInt(w, "to", j);
      topoPathName(&sys->paths[i * sys->ngpus + j], cell, sizeof(cell));
      jsonStr(w, "path", cell);
      jsonBool(w, "known", peer->known);
      jsonBool(w, "can_access", peer->canAccess);
      jsonBool(w, "access_supported", peer->access);
      jsonBool(w, "native_atomics", peer->atomics);
      jsonInt(w, "performance_rank", peer->rank);
      jsonStr(w, "p2p", topoPeerP2pText(sys, i, j));
      jsonStr(w, "verified",
              peer->verified == TOPO_VERIFY_OK       ? "ok"
              : peer->verified == TOPO_VERIFY_FAILED ? "failed"
                                                     : "not_run");
      jsonStrOrNull(w, "verify_error", peer->verified == TOPO_VERIFY_FAILED ? peer->verifyError : NULL);
      jsonClose(w, '}');
    }
  }
  jsonClose(w, ']');
}

static void writeFccl(jsonWriter_t* w, const topoSystem_t* sys) {
  char text[512];
  jsonOpen(w, "fccl", '{');
  jsonStr(w, "gpu_archs", sys->gpuArchs);
  jsonStr(w, "ipc", topoIpcOverall(sys));
  int pairs = 0, capable = 0;
  for (int i = 0; i < sys->ngpus; i++)
    for (int j = 0; j < sys->ngpus; j++) {
      if (i == j) continue;
      pairs++;
      const topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
      capable += peer->known && peer->canAccess && peer->access;
    }
  jsonOpen(w, "p2p", '{');
  jsonInt(w, "pairs", pairs);
  jsonInt(w, "capable_pairs", capable);
  jsonBool(w, "verify_ran", sys->verifyRan);
  topoP2pSummary(sys, text, sizeof(text));
  jsonStr(w, "summary", text);
  jsonClose(w, '}');
  jsonOpen(w, "collectives", '{');
  jsonInt(w, "nranks", sys->nranks);
  int ok = sys->ngpus > 0 && topoCollectivesSupported(sys, text, sizeof(text));
  if (sys->ngpus == 0) snprintf(text, sizeof(text), "no GPU found");
  jsonBool(w, "supported", ok);
  jsonStr(w, "reason", text);
  jsonClose(w, '}');
  jsonOpen(w, "algorithms", '{');
  jsonStr(w, "collective", "all_reduce");
  int available = topoAlgoAvailable(sys, text, sizeof(text));
  jsonBool(w, "available", available);
  jsonStrOrNull(w, "reason", available ? NULL : text);
  jsonStrOrNull(w, "fccl_algo", topoAlgoRequest());
  jsonOpen(w, "entries", '[');
  for (int s = 0; available && s < topoAlgoSizeCount; s++) {
    jsonOpen(w, NULL, '{');
    jsonInt(w, "bytes", (long long)topoAlgoSizes[s]);
    static const char* const kinds[2] = {"staged", "registered"};
    for (int registered = 0; registered < 2; registered++) {
      topoAlgo_t algo;
      if (topoAlgoFor(sys, topoAlgoSizes[s], registered, &algo) != 0) {
        jsonStr(w, kinds[registered], NULL);
        continue;
      }
      jsonOpen(w, kinds[registered], '{');
      jsonStr(w, "algorithm", algo.name);
      jsonInt(w, "blocks", algo.blocks);
      jsonInt(w, "threads", algo.threads);
      jsonClose(w, '}');
    }
    jsonClose(w, '}');
  }
  jsonClose(w, ']');
  jsonClose(w, '}');
  jsonClose(w, '}');
}

int topoWriteJson(const topoSystem_t* sys, FILE* out) {
  jsonWriter_t w;
  memset(&w, 0, sizeof(w));
  w.out = out;
  jsonOpen(&w, NULL, '{');
  jsonStr(&w, "schema", "fccl-topo/1");
  writeSource(&w, sys);
  writeHost(&w, sys);
  writeGpus(&w, sys);
  writeMatrix(&w, sys);
  writeFccl(&w, sys);
  jsonOpen(&w, "notes", '[');
  for (int n = 0; n < sys->nnotes; n++) jsonStr(&w, NULL, sys->notes[n]);
  jsonClose(&w, ']');
  jsonClose(&w, '}');
  fputc('\n', out);
  return ferror(out) ? -1 : 0;
}
