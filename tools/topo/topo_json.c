/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --json: the same report as data. The schema is test/data/topo/schema.json and docs/topo.md explains each field;
 * "schema": "fccl-topo/1" changes only when a field changes meaning or disappears (new fields may be added).
 */
#include "json.h"
#include "topo.h"
#include "topo_text.h"

#include <stdlib.h>
#include <string.h>

/* A string member that is null when empty. */
static void jsonStrOrNull(toolJson_t* w, const char* key, const char* value) {
  toolJsonString(w, key, value && value[0] ? value : NULL);
}

static void jsonIntOrNull(toolJson_t* w, const char* key, long long value, int isNull) {
  if (isNull)
    toolJsonNull(w, key);
  else
    toolJsonInt(w, key, value);
}

/* -1 (unknown) as null. */
static void jsonTristate(toolJson_t* w, const char* key, int value) {
  if (value < 0)
    toolJsonNull(w, key);
  else
    toolJsonBool(w, key, value);
}

static void hex(char* buf, size_t len, const char* fmt, unsigned value) { snprintf(buf, len, fmt, value); }

static void writeSource(toolJson_t* w, const topoSystem_t* sys) {
  toolJsonBeginObject(w, "source");
  toolJsonString(w, "host", sys->hostSource == TOPO_SRC_FILE ? "hwloc_xml" : "this_machine");
  jsonStrOrNull(w, "host_file", sys->hostSource == TOPO_SRC_FILE ? sys->hostSourceName : NULL);
  toolJsonString(w, "gpus",
                 sys->gpuSource == TOPO_SRC_FILE   ? "facts_file"
                 : sys->gpuSource == TOPO_SRC_LIVE ? "this_machine"
                                                   : "not_queried");
  jsonStrOrNull(w, "gpu_file", sys->gpuSource == TOPO_SRC_FILE ? sys->gpuSourceName : NULL);
  toolJsonEnd(w);
}

static void writeNumaList(toolJson_t* w, const char* key, const char* list) {
  /* "0-1,3" -> [0, 1, 3] */
  toolJsonBeginInlineArray(w, key);
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
    for (long n = first; n <= last; n++) toolJsonInt(w, NULL, n);
    if (*p == ',') p++;
  }
  toolJsonEnd(w);
}

static void writePci(toolJson_t* w, const topoSystem_t* sys, int index) {
  const topoPciNode_t* node = &sys->pci[index];
  char bus[32], text[32];
  toolJsonBeginObject(w, NULL);
  toolJsonString(w, "kind",
                 node->kind == TOPO_PCI_HOSTBRIDGE ? "host_bridge"
                 : node->kind == TOPO_PCI_BRIDGE   ? "bridge"
                                                   : "device");
  topoBusIdFormat(&node->busId, bus, sizeof(bus));
  jsonStrOrNull(w, "busid", node->busId.valid ? bus : NULL);
  if (node->kind != TOPO_PCI_DEVICE && !node->implied) {
    snprintf(text, sizeof(text), "%04x:[%02x-%02x]", node->domain, node->secondaryBus, node->subordinateBus);
    toolJsonString(w, "bus_range", text);
  } else {
    toolJsonString(w, "bus_range", NULL);
  }
  if (node->kind == TOPO_PCI_HOSTBRIDGE) {
    toolJsonString(w, "class", NULL);
    toolJsonString(w, "class_name", "host bridge");
    toolJsonString(w, "vendor", NULL);
    toolJsonString(w, "device", NULL);
    toolJsonString(w, "link_gbs", NULL);
  } else {
    hex(text, sizeof(text), "0x%04x", node->classId);
    toolJsonString(w, "class", text);
    toolJsonString(w, "class_name", topoPciClassName(node->classId));
    hex(text, sizeof(text), "0x%04x", node->vendor);
    toolJsonString(w, "vendor", text);
    hex(text, sizeof(text), "0x%04x", node->device);
    toolJsonString(w, "device", text);
    if (node->linkGBs > 0)
      toolJsonFixed(w, "link_gbs", node->linkGBs, 2);
    else
      toolJsonString(w, "link_gbs", NULL);
  }
  jsonStrOrNull(w, "label", node->label);
  jsonIntOrNull(w, "gpu", node->gpu, node->gpu < 0);
  jsonIntOrNull(w, "numa_node", node->numaNode, node->numaNode < 0);
  toolJsonBeginArray(w, "children");
  for (int child = node->firstChild; child >= 0; child = sys->pci[child].nextSibling) writePci(w, sys, child);
  toolJsonEnd(w);
  toolJsonEnd(w);
}

static void writeHost(toolJson_t* w, const topoSystem_t* sys) {
  toolJsonBeginObject(w, "host");
  jsonStrOrNull(w, "arch", sys->arch);
  jsonStrOrNull(w, "model", sys->hostModel);
  toolJsonInt(w, "pus", sys->npus);
  toolJsonInt(w, "cores", sys->ncores);
  toolJsonBeginArray(w, "packages");
  for (int p = 0; p < sys->npackages; p++) {
    const topoPackage_t* pkg = &sys->packages[p];
    toolJsonBeginObject(w, NULL);
    toolJsonInt(w, "os_index", pkg->osIndex);
    jsonStrOrNull(w, "model", pkg->model);
    jsonStrOrNull(w, "vendor", pkg->vendor);
    jsonIntOrNull(w, "family", pkg->family, pkg->family < 0);
    jsonIntOrNull(w, "model_number", pkg->modelNumber, pkg->modelNumber < 0);
    toolJsonInt(w, "cores", pkg->cores);
    toolJsonInt(w, "pus", pkg->pus);
    toolJsonString(w, "cpus", pkg->cpus);
    writeNumaList(w, "numa_nodes", pkg->numaNodes);
    toolJsonEnd(w);
  }
  toolJsonEnd(w);
  toolJsonBeginArray(w, "numa_nodes");
  for (int n = 0; n < sys->nnuma; n++) {
    toolJsonBeginObject(w, NULL);
    toolJsonInt(w, "os_index", sys->numa[n].osIndex);
    toolJsonString(w, "cpus", sys->numa[n].cpus);
    toolJsonInt(w, "memory_bytes", (long long)sys->numa[n].memoryBytes);
    toolJsonEnd(w);
  }
  toolJsonEnd(w);
  toolJsonBeginArray(w, "pci");
  for (int n = 0; n < sys->npci; n++)
    if (sys->pci[n].parent < 0) writePci(w, sys, n);
  toolJsonEnd(w);
  toolJsonEnd(w);
}

static void writeNvLink(toolJson_t* w, const topoSystem_t* sys, const topoGpu_t* gpu) {
  if (!sys->nvmlAvailable || !gpu->nvlinkQueried) {
    toolJsonString(w, "nvlink", NULL);
    return;
  }
  char bus[32];
  int active = 0;
  for (int l = 0; l < gpu->nlinks; l++) active += gpu->links[l].active;
  toolJsonBeginObject(w, "nvlink");
  toolJsonInt(w, "active", active);
  jsonIntOrNull(w, "speed_mbps", gpu->nvlinkMBps, gpu->nvlinkMBps == 0);
  double gbs = topoNvLinkGBs(gpu);
  if (gbs > 0)
    toolJsonFixed(w, "gbs_per_link", gbs, 3);
  else
    toolJsonString(w, "gbs_per_link", NULL);
  toolJsonBeginArray(w, "links");
  for (int l = 0; l < gpu->nlinks; l++) {
    const topoNvLink_t* link = &gpu->links[l];
    toolJsonBeginObject(w, NULL);
    toolJsonInt(w, "link", link->link);
    toolJsonBool(w, "active", link->active);
    toolJsonInt(w, "version_enum", link->version);
    jsonStrOrNull(w, "version", link->version ? topoNvLinkVersionName(link->version) : NULL);
    toolJsonString(w, "remote_type", topoRemoteTypeName(link->remoteType));
    topoBusIdFormat(&link->remote, bus, sizeof(bus));
    jsonStrOrNull(w, "remote_busid", link->remote.valid ? bus : NULL);
    toolJsonEnd(w);
  }
  toolJsonEnd(w);
  toolJsonBeginArray(w, "groups");
  for (int k = 0; k < gpu->ngroups; k++) {
    const topoNvGroup_t* group = &gpu->groups[k];
    toolJsonBeginObject(w, NULL);
    toolJsonString(w, "remote_type", topoRemoteTypeName(group->remoteType));
    topoBusIdFormat(&group->remote, bus, sizeof(bus));
    jsonStrOrNull(w, "remote_busid", group->remote.valid ? bus : NULL);
    toolJsonInt(w, "count", group->count);
    jsonIntOrNull(w, "peer_gpu", group->peerGpu, group->peerGpu < 0);
    jsonStrOrNull(w, "version", group->version ? topoNvLinkVersionName(group->version) : NULL);
    toolJsonEnd(w);
  }
  toolJsonEnd(w);
  toolJsonEnd(w);
}

static void writeGpus(toolJson_t* w, const topoSystem_t* sys) {
  toolJsonBeginObject(w, "cuda");
  toolJsonBool(w, "queried", sys->cudaQueried);
  jsonStrOrNull(w, "status", sys->ngpus == 0 ? sys->cudaStatus : NULL);
  jsonIntOrNull(w, "driver_version", sys->driverVersion, sys->driverVersion <= 0);
  jsonIntOrNull(w, "runtime_version", sys->runtimeVersion, sys->runtimeVersion <= 0);
  toolJsonEnd(w);
  toolJsonBeginObject(w, "nvml");
  toolJsonBool(w, "available", sys->nvmlAvailable);
  jsonStrOrNull(w, "status", sys->nvmlAvailable ? NULL : sys->nvmlStatus);
  toolJsonEnd(w);
  toolJsonBeginArray(w, "gpus");
  for (int g = 0; g < sys->ngpus; g++) {
    const topoGpu_t* gpu = &sys->gpus[g];
    char bus[32], text[32];
    const topoPciNode_t* node = gpu->pciNode >= 0 ? &sys->pci[gpu->pciNode] : NULL;
    toolJsonBeginObject(w, NULL);
    toolJsonInt(w, "index", g);
    toolJsonString(w, "name", gpu->name);
    jsonStrOrNull(w, "uuid", gpu->uuid);
    topoBusIdFormat(&gpu->busId, bus, sizeof(bus));
    toolJsonString(w, "busid", bus);
    snprintf(text, sizeof(text), "%d.%d", gpu->ccMajor, gpu->ccMinor);
    toolJsonString(w, "compute_capability", text);
    toolJsonInt(w, "sms", gpu->smCount);
    toolJsonInt(w, "memory_bytes", (long long)gpu->memoryBytes);
    jsonIntOrNull(w, "numa_node", node ? node->numaNode : -1, node == NULL || node->numaNode < 0);
    jsonStrOrNull(w, "numa_affinity", node ? node->numaNodes : NULL);
    jsonStrOrNull(w, "cpu_affinity", node ? node->cpus : NULL);
    jsonTristate(w, "vmm", gpu->vmm);
    jsonTristate(w, "posix_fd", gpu->posixFd);
    jsonTristate(w, "gdr", gpu->gdr);
    topoIpc_t ipc = topoGpuIpc(gpu);
    toolJsonString(w, "ipc", ipc == TOPO_IPC_CUMEM ? "cumem" : ipc == TOPO_IPC_LEGACY ? "legacy" : "unknown");
    toolJsonBool(w, "kernels", topoGpuHasKernels(sys, gpu));
    writeNvLink(w, sys, gpu);
    toolJsonEnd(w);
  }
  toolJsonEnd(w);
}

static void writeMatrix(toolJson_t* w, const topoSystem_t* sys) {
  char cell[16];
  toolJsonBeginObject(w, "matrix");
  toolJsonBeginInlineArray(w, "labels");
  for (int g = 0; g < sys->ngpus; g++) {
    snprintf(cell, sizeof(cell), "GPU%d", g);
    toolJsonString(w, NULL, cell);
  }
  toolJsonEnd(w);
  toolJsonBeginArray(w, "rows");
  for (int i = 0; i < sys->ngpus; i++) {
    toolJsonBeginInlineArray(w, NULL);
    for (int j = 0; j < sys->ngpus; j++) {
      topoPathName(&sys->paths[i * sys->ngpus + j], cell, sizeof(cell));
      toolJsonString(w, NULL, cell);
    }
    toolJsonEnd(w);
  }
  toolJsonEnd(w);
  /* The NICs of nvidia-smi topo -m's matrix (the RDMA devices): each with its cells against the GPUs and the NICs. */
  int nics[64];
  int nnics = topoMatrixNics(sys, nics, 64);
  if (nnics > 64) nnics = 64;
  toolJsonBeginArray(w, "nics");
  for (int k = 0; k < nnics; k++) {
    const topoPciNode_t* node = &sys->pci[nics[k]];
    char bus[32];
    toolJsonBeginObject(w, NULL);
    snprintf(cell, sizeof(cell), "NIC%d", k);
    toolJsonString(w, "label", cell);
    toolJsonString(w, "name", node->label);
    topoBusIdFormat(&node->busId, bus, sizeof(bus));
    toolJsonString(w, "busid", bus);
    toolJsonBeginInlineArray(w, "gpus");
    for (int g = 0; g < sys->ngpus; g++) {
      topoPath_t path = topoNicPath(sys, g, -1, nics[k]);
      topoPathName(&path, cell, sizeof(cell));
      toolJsonString(w, NULL, cell);
    }
    toolJsonEnd(w);
    toolJsonBeginInlineArray(w, "nics");
    for (int m = 0; m < nnics; m++) {
      topoPath_t path = topoNicPath(sys, -1, nics[m], nics[k]);
      topoPathName(&path, cell, sizeof(cell));
      toolJsonString(w, NULL, cell);
    }
    toolJsonEnd(w);
    toolJsonEnd(w);
  }
  toolJsonEnd(w);
  toolJsonEnd(w);
  toolJsonBeginArray(w, "peers");
  for (int i = 0; i < sys->ngpus; i++) {
    for (int j = 0; j < sys->ngpus; j++) {
      if (i == j) continue;
      const topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
      toolJsonBeginObject(w, NULL);
      toolJsonInt(w, "from", i);
      toolJsonInt(w, "to", j);
      topoPathName(&sys->paths[i * sys->ngpus + j], cell, sizeof(cell));
      toolJsonString(w, "path", cell);
      toolJsonBool(w, "known", peer->known);
      toolJsonBool(w, "can_access", peer->canAccess);
      toolJsonBool(w, "access_supported", peer->access);
      toolJsonBool(w, "native_atomics", peer->atomics);
      toolJsonInt(w, "performance_rank", peer->rank);
      toolJsonString(w, "p2p", topoPeerP2pText(sys, i, j));
      toolJsonString(w, "verified",
                     peer->verified == TOPO_VERIFY_OK       ? "ok"
                     : peer->verified == TOPO_VERIFY_FAILED ? "failed"
                                                            : "not_run");
      jsonStrOrNull(w, "verify_error", peer->verified == TOPO_VERIFY_FAILED ? peer->verifyError : NULL);
      toolJsonEnd(w);
    }
  }
  toolJsonEnd(w);
}

static void writeFccl(toolJson_t* w, const topoSystem_t* sys) {
  char text[512];
  toolJsonBeginObject(w, "fccl");
  toolJsonString(w, "gpu_archs", sys->gpuArchs);
  toolJsonString(w, "ipc", topoIpcOverall(sys));
  int pairs = 0, capable = 0;
  for (int i = 0; i < sys->ngpus; i++)
    for (int j = 0; j < sys->ngpus; j++) {
      if (i == j) continue;
      pairs++;
      const topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
      capable += peer->known && peer->canAccess && peer->access;
    }
  toolJsonBeginObject(w, "p2p");
  toolJsonInt(w, "pairs", pairs);
  toolJsonInt(w, "capable_pairs", capable);
  toolJsonBool(w, "verify_ran", sys->verifyRan);
  topoP2pSummary(sys, text, sizeof(text));
  toolJsonString(w, "summary", text);
  toolJsonEnd(w);
  toolJsonBeginObject(w, "collectives");
  toolJsonInt(w, "nranks", sys->nranks);
  int ok = sys->ngpus > 0 && topoCollectivesSupported(sys, text, sizeof(text));
  if (sys->ngpus == 0) snprintf(text, sizeof(text), "no GPU found");
  toolJsonBool(w, "supported", ok);
  toolJsonString(w, "reason", text);
  toolJsonEnd(w);
  toolJsonBeginObject(w, "algorithms");
  toolJsonString(w, "collective", "all_reduce");
  int available = topoAlgoAvailable(sys, text, sizeof(text));
  toolJsonBool(w, "available", available);
  jsonStrOrNull(w, "reason", available ? NULL : text);
  jsonStrOrNull(w, "fccl_algo", topoAlgoRequest());
  toolJsonBeginArray(w, "entries");
  for (int s = 0; available && s < topoAlgoSizeCount; s++) {
    toolJsonBeginObject(w, NULL);
    toolJsonInt(w, "bytes", (long long)topoAlgoSizes[s]);
    static const char* const kinds[2] = {"staged", "registered"};
    for (int registered = 0; registered < 2; registered++) {
      topoAlgo_t algo;
      if (topoAlgoFor(sys, topoAlgoSizes[s], registered, &algo) != 0) {
        toolJsonString(w, kinds[registered], NULL);
        continue;
      }
      toolJsonBeginObject(w, kinds[registered]);
      toolJsonString(w, "algorithm", algo.name);
      toolJsonInt(w, "blocks", algo.blocks);
      toolJsonInt(w, "threads", algo.threads);
      toolJsonEnd(w);
    }
    toolJsonEnd(w);
  }
  toolJsonEnd(w);
  toolJsonEnd(w);
  toolJsonEnd(w);
}

int topoWriteJson(const topoSystem_t* sys, FILE* out) {
  toolJson_t w;
  toolJsonInit(&w, out, TOOL_JSON_WRAP_ALL);
  toolJsonBeginObject(&w, NULL);
  toolJsonString(&w, "schema", "fccl-topo/1");
  writeSource(&w, sys);
  writeHost(&w, sys);
  writeGpus(&w, sys);
  writeMatrix(&w, sys);
  writeFccl(&w, sys);
  toolJsonBeginArray(&w, "notes");
  for (int n = 0; n < sys->nnotes; n++) toolJsonString(&w, NULL, sys->notes[n]);
  toolJsonEnd(&w);
  toolJsonEnd(&w);
  return ferror(out) ? -1 : 0;
}
