/* SPDX-License-Identifier: Apache-2.0 */
#include "topo_text.h"

#include <string.h>

const char* const topoLegend[][2] = {
    {"X", "the device itself"},
    {"SYS", "PCIe and the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)"},
    {"NODE", "PCIe and the interconnect between PCIe host bridges of one NUMA node"},
    {"PHB", "PCIe through a PCIe host bridge (the CPU)"},
    {"PXB", "PCIe through several PCIe switches, no host bridge"},
    {"PIX", "PCIe through at most one PCIe switch"},
    {"NV#", "a bonded set of # NVLinks (direct, or through NVSwitches)"},
    {"", ""},
};

void topoFormatBytes(uint64_t bytes, char* buf, size_t len) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = (double)bytes;
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    unit++;
  }
  if (unit == 0)
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
  else
    snprintf(buf, len, "%.1f %s", value, units[unit]);
}

void topoFormatSize(size_t bytes, char* buf, size_t len) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && bytes % 1024 == 0 && unit < 4) {
    bytes /= 1024;
    unit++;
  }
  snprintf(buf, len, "%zu %s", bytes, units[unit]);
}

void topoFormatCudaVersion(int version, char* buf, size_t len) {
  if (version <= 0)
    snprintf(buf, len, "unknown");
  else
    snprintf(buf, len, "%d.%d", version / 1000, (version % 1000) / 10);
}

const char* topoPciClassName(unsigned classId) {
  switch (classId) {
    case 0x0104: return "RAID";
    case 0x0106: return "SATA";
    case 0x0107: return "SAS";
    case 0x0108: return "NVMe";
    case 0x0200: return "Ethernet";
    case 0x0207: return "InfiniBand";
    case 0x0300: return "VGA";
    case 0x0302: return "3D controller";
    case 0x0604: return "PCI bridge";
    case 0x0680: return "bridge";
    case 0x0b40: return "co-processor";
    case 0x1200: return "accelerator";
    default: break;
  }
  switch (classId >> 8) {
    case 0x01: return "storage";
    case 0x02: return "network";
    case 0x03: return "display";
    case 0x06: return "bridge";
    case 0x12: return "accelerator";
    default: return "device";
  }
}

void topoSourceText(const topoSystem_t* sys, char* buf, size_t len) {
  const char* host = sys->hostSource == TOPO_SRC_FILE ? sys->hostSourceName : "this machine (hwloc)";
  if (sys->gpuSource == TOPO_SRC_FILE)
    snprintf(buf, len, "host from %s, GPUs from %s", host, sys->gpuSourceName);
  else if (sys->gpuSource == TOPO_SRC_LIVE)
    snprintf(buf, len, "host from %s, GPUs from this machine (CUDA, NVML)", host);
  else
    snprintf(buf, len, "host from %s, GPUs not queried (--no-cuda)", host);
}

void topoGpuNuma(const topoSystem_t* sys, const topoGpu_t* gpu, char* buf, size_t len) {
  const char* numa = gpu->pciNode >= 0 ? sys->pci[gpu->pciNode].numaNodes : "";
  snprintf(buf, len, "%s", numa[0] ? numa : "N/A");
}

double topoNvLinkGBs(const topoGpu_t* gpu) {
  if (gpu->nvlinkMBps) return gpu->nvlinkMBps / 1000.0;
  unsigned version = 0;
  for (int l = 0; l < gpu->nlinks; l++)
    if (gpu->links[l].active && gpu->links[l].version > version) version = gpu->links[l].version;
  return topoNvLinkNominalGBs(version);
}

void topoNvLinkSummary(const topoGpu_t* gpu, char* buf, size_t len) {
  int active = 0;
  unsigned version = 0;
  for (int l = 0; l < gpu->nlinks; l++) {
    if (!gpu->links[l].active) continue;
    active++;
    if (gpu->links[l].version > version) version = gpu->links[l].version;
  }
  double gbs = topoNvLinkGBs(gpu);
  size_t used = (size_t)snprintf(buf, len, "%d/%d links up", active, gpu->nlinks);
  if (active > 0 && used < len)
    used += (size_t)snprintf(buf + used, len - used, ", NVLink %s", topoNvLinkVersionName(version));
  if (active > 0 && gbs > 0 && used < len)
    snprintf(buf + used, len - used, ", %.3f GB/s per link each way%s (%.1f GB/s)", gbs,
             gpu->nvlinkMBps ? "" : " nominal", gbs * active);
}

void topoNvGroupRemote(const topoSystem_t* sys, const topoNvGroup_t* group, char* buf, size_t len) {
  char bus[32];
  topoBusIdFormat(&group->remote, bus, sizeof(bus));
  switch (group->remoteType) {
    case TOPO_REMOTE_GPU:
      if (group->peerGpu >= 0)
        snprintf(buf, len, "GPU%d (%s)", group->peerGpu, bus);
      else
        snprintf(buf, len, "GPU %s (not in this process)", bus);
      break;
    case TOPO_REMOTE_SWITCH:
      if (group->remote.valid)
        snprintf(buf, len, "NVSwitch %s", bus);
      else
        snprintf(buf, len, "an NVSwitch the OS does not show");
      break;
    case TOPO_REMOTE_CPU: snprintf(buf, len, "CPU %s", bus); break;
    default: snprintf(buf, len, "unknown device %s", bus); break;
  }
  (void)sys;
}

void topoPciNodeText(const topoSystem_t* sys, const topoPciNode_t* node, char* buf, size_t len) {
  char bus[32];
  topoBusIdFormat(&node->busId, bus, sizeof(bus));
  if (node->kind == TOPO_PCI_HOSTBRIDGE) {
    if (!node->implied)
      snprintf(buf, len, "host bridge %04x:[%02x-%02x]  NUMA %s", node->domain, node->secondaryBus,
               node->subordinateBus, node->numaNodes[0] ? node->numaNodes : "-");
    else
      snprintf(buf, len, "host bridge (implied)  NUMA %s", node->numaNodes[0] ? node->numaNodes : "-");
    return;
  }
  char speed[32] = "";
  if (node->linkGBs > 0) snprintf(speed, sizeof(speed), "  %.1f GB/s", node->linkGBs);
  if (node->kind == TOPO_PCI_BRIDGE) {
    snprintf(buf, len, "bridge %s [%02x-%02x]  %04x:%04x%s", bus, node->secondaryBus, node->subordinateBus,
             node->vendor, node->device, speed);
    return;
  }
  char what[80] = "";
  if (node->gpu >= 0)
    snprintf(what, sizeof(what), "  GPU%d", node->gpu);
  else if (node->label[0])
    snprintf(what, sizeof(what), "  %s", node->label);
  snprintf(buf, len, "%s  %s  %04x:%04x%s%s", bus, topoPciClassName(node->classId), node->vendor, node->device, speed,
           what);
  (void)sys;
}

void topoIpcSummary(const topoSystem_t* sys, char* buf, size_t len) {
  const char* overall = topoIpcOverall(sys);
  if (strcmp(overall, "mixed") != 0) {
    topoIpc_t ipc = strcmp(overall, "cumem") == 0    ? TOPO_IPC_CUMEM
                    : strcmp(overall, "legacy") == 0 ? TOPO_IPC_LEGACY
                                                     : TOPO_IPC_UNKNOWN;
    snprintf(buf, len, "%s on every GPU", topoIpcName(ipc));
    return;
  }
  size_t used = (size_t)snprintf(buf, len, "differs between GPUs:");
  for (int g = 0; g < sys->ngpus && used < len; g++)
    used += (size_t)snprintf(buf + used, len - used, " GPU%d %s%s", g,
                             topoGpuIpc(&sys->gpus[g]) == TOPO_IPC_CUMEM    ? "cuMem"
                             : topoGpuIpc(&sys->gpus[g]) == TOPO_IPC_LEGACY ? "legacy"
                                                                            : "unknown",
                             g + 1 < sys->ngpus ? "," : "");
}

const char* topoIpcOverall(const topoSystem_t* sys) {
  if (sys->ngpus == 0) return "unknown";
  topoIpc_t first = topoGpuIpc(&sys->gpus[0]);
  for (int g = 1; g < sys->ngpus; g++)
    if (topoGpuIpc(&sys->gpus[g]) != first) return "mixed";
  return first == TOPO_IPC_CUMEM ? "cumem" : first == TOPO_IPC_LEGACY ? "legacy" : "unknown";
}

void topoP2pSummary(const topoSystem_t* sys, char* buf, size_t len) {
  int pairs = 0, capable = 0, verified = 0, failed = 0, unknown = 0;
  for (int i = 0; i < sys->ngpus; i++) {
    for (int j = 0; j < sys->ngpus; j++) {
      if (i == j) continue;
      const topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
      pairs++;
      if (!peer->known)
        unknown++;
      else if (peer->canAccess && peer->access)
        capable++;
      if (peer->verified == TOPO_VERIFY_OK) verified++;
      if (peer->verified == TOPO_VERIFY_FAILED) failed++;
    }
  }
  if (pairs == 0) {
    snprintf(buf, len, "%s", sys->ngpus == 0 ? "no GPU found" : "one GPU: no peers");
  } else if (sys->verifyRan) {
    snprintf(buf, len, "%d of %d GPU pairs capable; --verify-p2p: %d verified, %d failed", capable, pairs, verified,
             failed);
  } else if (unknown == pairs) {
    snprintf(buf, len, "unknown: CUDA did not report peer access");
  } else {
    snprintf(buf, len, "%d of %d GPU pairs capable (verified at communicator init; --verify-p2p checks now)", capable,
             pairs);
  }
}

void topoKernelSummary(const topoSystem_t* sys, char* buf, size_t len) {
  int missing = 0;
  for (int g = 0; g < sys->ngpus; g++)
    if (!topoGpuHasKernels(sys, &sys->gpus[g])) missing++;
  if (missing == 0) {
    snprintf(buf, len, "built for gpu_archs '%s': every GPU has them", sys->gpuArchs);
    return;
  }
  size_t used = (size_t)snprintf(buf, len, "built for gpu_archs '%s': none for", sys->gpuArchs);
  for (int g = 0; g < sys->ngpus && used < len; g++)
    if (!topoGpuHasKernels(sys, &sys->gpus[g]))
      used +=
          (size_t)snprintf(buf + used, len - used, " GPU%d (sm_%d%d)", g, sys->gpus[g].ccMajor, sys->gpus[g].ccMinor);
}
