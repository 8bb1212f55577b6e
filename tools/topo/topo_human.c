/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The human report: host, GPUs, a GPU x GPU matrix in the spirit of `nvidia-smi topo -m` (with CPU and NUMA
 * affinity columns), NVLink, peer access, the PCI tree, and what fccl will do. Deterministic for recorded inputs.
 */
#include "topo.h"
#include "topo_text.h"

#include <string.h>

static void printHost(const topoSystem_t* sys, FILE* out) {
  fprintf(out, "Host\n");
  if (sys->hostModel[0]) fprintf(out, "  %-11s %s\n", "Machine", sys->hostModel);
  fprintf(out, "  %-11s %d package%s, %d cores, %d hardware threads%s%s%s\n", "CPUs", sys->npackages,
          sys->npackages == 1 ? "" : "s", sys->ncores, sys->npus, sys->arch[0] ? " (" : "", sys->arch,
          sys->arch[0] ? ")" : "");
  for (int p = 0; p < sys->npackages; p++) {
    const topoPackage_t* pkg = &sys->packages[p];
    char label[32];
    snprintf(label, sizeof(label), "Package %d", pkg->osIndex);
    fprintf(out, "  %-11s %s  cpus %s  NUMA %s\n", label, pkg->model[0] ? pkg->model : "(model unknown)", pkg->cpus,
            pkg->numaNodes[0] ? pkg->numaNodes : "-");
  }
  for (int n = 0; n < sys->nnuma; n++) {
    const topoNuma_t* numa = &sys->numa[n];
    char label[32], memory[32];
    snprintf(label, sizeof(label), "NUMA %d", numa->osIndex);
    topoFormatBytes(numa->memoryBytes, memory, sizeof(memory));
    fprintf(out, "  %-11s cpus %s  memory %s\n", label, numa->cpus, memory);
  }
}

static void printGpus(const topoSystem_t* sys, FILE* out) {
  char driver[32], runtime[32];
  topoFormatCudaVersion(sys->driverVersion, driver, sizeof(driver));
  if (sys->noDriver) snprintf(driver, sizeof(driver), "none"); /* cudaStatus says why: fccl-info's words */
  topoFormatCudaVersion(sys->runtimeVersion, runtime, sizeof(runtime));
  fprintf(out, "\nGPUs\n");
  if (!sys->cudaQueried) {
    fprintf(out, "  not queried (--no-cuda)\n");
    return;
  }
  fprintf(out, "  %-11s driver %s, runtime %s; NVML %s\n", "CUDA", driver, runtime,
          sys->nvmlAvailable                                 ? "available"
          : strncmp(sys->nvmlStatus, "not queried", 11) == 0 ? "not queried"
                                                             : "unavailable");
  if (sys->ngpus == 0) {
    fprintf(out, "  no GPU found (%s)\n", sys->cudaStatus[0] ? sys->cudaStatus : "no CUDA device visible");
    return;
  }
  for (int g = 0; g < sys->ngpus; g++) {
    const topoGpu_t* gpu = &sys->gpus[g];
    char bus[32], memory[32], numa[64];
    topoBusIdFormat(&gpu->busId, bus, sizeof(bus));
    topoFormatBytes(gpu->memoryBytes, memory, sizeof(memory));
    topoGpuNuma(sys, gpu, numa, sizeof(numa));
    fprintf(out, "  GPU%-8d %s  sm_%d%d  %d SMs  %s  %s  NUMA %s\n", g, gpu->name, gpu->ccMajor, gpu->ccMinor,
            gpu->smCount, memory, bus, numa);
  }
}

#define TOPO_MAX_MATRIX_NICS 64

/* The cell between row device r and column device c of the matrix: GPUs first (0 .. ngpus - 1), then the NICs. */
static void matrixCell(const topoSystem_t* sys, const int* nics, int r, int c, char* cell, size_t len) {
  const int n = sys->ngpus;
  if (r < n && c < n) {
    topoPathName(&sys->paths[r * n + c], cell, len);
    return;
  }
  /* A GPU-NIC or NIC-NIC cell: the PCI tree between them (symmetric). */
  const int gpuSide = r < n ? r : c < n ? c : -1;
  const int nic = r < n ? nics[c - n] : nics[r - n];
  const int other = gpuSide >= 0 ? -1 : nics[c - n];
  topoPath_t path = topoNicPath(sys, gpuSide, other, nic);
  topoPathName(&path, cell, len);
}

/* The matrix of nvidia-smi topo -m: GPUs and NICs (the RDMA devices) in rows and columns, each GPU's CPU and NUMA
 * affinity, the legend and the NIC legend naming each NIC. */
static void printMatrix(const topoSystem_t* sys, FILE* out) {
  int nics[TOPO_MAX_MATRIX_NICS];
  int nnics = topoMatrixNics(sys, nics, TOPO_MAX_MATRIX_NICS);
  if (nnics > TOPO_MAX_MATRIX_NICS) nnics = TOPO_MAX_MATRIX_NICS;
  const int n = sys->ngpus, devices = n + nnics;
  int width = 6;
  for (int r = 0; r < devices; r++) {
    for (int c = 0; c < devices; c++) {
      char cell[16];
      matrixCell(sys, nics, r, c, cell, sizeof(cell));
      if ((int)strlen(cell) + 2 > width) width = (int)strlen(cell) + 2;
    }
    char label[16];
    snprintf(label, sizeof(label), r < n ? "GPU%d" : "NIC%d", r < n ? r : r - n);
    if ((int)strlen(label) + 2 > width) width = (int)strlen(label) + 2;
  }
  fprintf(out, "\nTopology (nvidia-smi topo -m)\n");
  fprintf(out, "  %-7s", "");
  for (int c = 0; c < devices; c++) {
    char label[16];
    snprintf(label, sizeof(label), c < n ? "GPU%d" : "NIC%d", c < n ? c : c - n);
    fprintf(out, "%-*s", width, label);
  }
  fprintf(out, "%-20s%s\n", "CPU Affinity", "NUMA Affinity");
  for (int r = 0; r < devices; r++) {
    char label[16];
    snprintf(label, sizeof(label), r < n ? "GPU%d" : "NIC%d", r < n ? r : r - n);
    fprintf(out, "  %-7s", label);
    for (int c = 0; c < devices; c++) {
      char cell[16];
      matrixCell(sys, nics, r, c, cell, sizeof(cell));
      /* A NIC's row has no affinity columns (as in nvidia-smi): its last cell ends the line. */
      fprintf(out, "%-*s", r >= n && c == devices - 1 ? 0 : width, cell);
    }
    if (r >= n) {
      fprintf(out, "\n");
      continue;
    }
    const topoGpu_t* gpu = &sys->gpus[r];
    char numa[64];
    topoGpuNuma(sys, gpu, numa, sizeof(numa));
    const char* cpus = gpu->pciNode >= 0 && sys->pci[gpu->pciNode].cpus[0] ? sys->pci[gpu->pciNode].cpus : "N/A";
    fprintf(out, "%-20s%s\n", cpus, numa);
  }
  fprintf(out, "  Legend:\n");
  for (int l = 0; topoLegend[l][0][0]; l++) fprintf(out, "    %-5s= %s\n", topoLegend[l][0], topoLegend[l][1]);
  if (nnics == 0) return;
  fprintf(out, "  NIC Legend:\n");
  for (int k = 0; k < nnics; k++) {
    char bus[32];
    topoBusIdFormat(&sys->pci[nics[k]].busId, bus, sizeof(bus));
    fprintf(out, "    NIC%d: %s (%s)\n", k, sys->pci[nics[k]].label, bus);
  }
}

static void printNvLink(const topoSystem_t* sys, FILE* out) {
  fprintf(out, "\nNVLink (NVML)\n");
  if (!sys->nvmlAvailable) {
    fprintf(out, "  unknown: NVML unavailable (%s)\n", sys->nvmlStatus);
    return;
  }
  for (int g = 0; g < sys->ngpus; g++) {
    const topoGpu_t* gpu = &sys->gpus[g];
    char label[16];
    snprintf(label, sizeof(label), "GPU%d", g);
    if (!gpu->nvlinkQueried) {
      fprintf(out, "  %-11s not found by NVML\n", label);
      continue;
    }
    if (gpu->nlinks == 0) {
      fprintf(out, "  %-11s no NVLink\n", label);
      continue;
    }
    char summary[160];
    topoNvLinkSummary(gpu, summary, sizeof(summary));
    fprintf(out, "  %-11s %s\n", label, summary);
    for (int k = 0; k < gpu->ngroups; k++) {
      char remote[64];
      topoNvGroupRemote(sys, &gpu->groups[k], remote, sizeof(remote));
      fprintf(out, "  %-11s   %2d link%s to %s\n", "", gpu->groups[k].count, gpu->groups[k].count == 1 ? " " : "s",
              remote);
    }
  }
}

static void printPeers(const topoSystem_t* sys, FILE* out) {
  fprintf(out, "\nPeer access (CUDA)\n");
  fprintf(out, "  %-16s%-7s%-8s%-9s%-6s%s\n", "pair", "path", "access", "atomics", "rank", "fccl P2P");
  for (int i = 0; i < sys->ngpus; i++) {
    for (int j = 0; j < sys->ngpus; j++) {
      if (i == j) continue;
      const topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
      char pair[32], path[16];
      snprintf(pair, sizeof(pair), "GPU%d -> GPU%d", i, j);
      topoPathName(&sys->paths[i * sys->ngpus + j], path, sizeof(path));
      if (!peer->known) {
        fprintf(out, "  %-16s%-7s%s\n", pair, path, topoPeerP2pText(sys, i, j));
        continue;
      }
      char rank[16];
      snprintf(rank, sizeof(rank), "%d", peer->rank);
      fprintf(out, "  %-16s%-7s%-8s%-9s%-6s%s\n", pair, path, peer->canAccess && peer->access ? "yes" : "no",
              peer->atomics ? "yes" : "no", rank, topoPeerP2pText(sys, i, j));
      if (peer->verified == TOPO_VERIFY_FAILED) fprintf(out, "  %-16s  %s\n", "", peer->verifyError);
    }
  }
}

static void printPciNode(const topoSystem_t* sys, int index, int depth, FILE* out) {
  const topoPciNode_t* node = &sys->pci[index];
  char line[256];
  topoPciNodeText(sys, node, line, sizeof(line));
  fprintf(out, "  %*s%s\n", 2 * depth, "", line);
  for (int child = node->firstChild; child >= 0; child = sys->pci[child].nextSibling)
    printPciNode(sys, child, depth + 1, out);
}

static void printPci(const topoSystem_t* sys, FILE* out) {
  fprintf(out, "\nPCI (GPUs, NICs, storage and the bridges above them)\n");
  int any = 0;
  for (int n = 0; n < sys->npci; n++) {
    if (sys->pci[n].parent >= 0) continue;
    printPciNode(sys, n, 0, out);
    any = 1;
  }
  if (!any) fprintf(out, "  none shown by hwloc\n");
}

static void printFccl(const topoSystem_t* sys, FILE* out) {
  fprintf(out, "\nfccl\n");
  if (sys->ngpus == 0) {
    fprintf(out, "  no GPU found: nothing to decide\n");
    return;
  }
  char text[512];
  topoIpcSummary(sys, text, sizeof(text));
  fprintf(out, "  %-13s %s\n", "Peer memory", text);
  topoP2pSummary(sys, text, sizeof(text));
  fprintf(out, "  %-13s %s\n", "P2P", text);
  topoKernelSummary(sys, text, sizeof(text));
  fprintf(out, "  %-13s %s\n", "Kernels", text);
  char reason[256];
  int ok = topoCollectivesSupported(sys, reason, sizeof(reason));
  fprintf(out, "  %-13s %d ranks: %s (%s)\n", "Collectives", sys->nranks, ok ? "supported" : "not supported", reason);
  if (!topoAlgoAvailable(sys, reason, sizeof(reason))) {
    fprintf(out, "  %-13s none: %s\n", "Algorithms", reason);
    return;
  }
  const char* request = topoAlgoRequest();
  fprintf(out, "  %-13s all-reduce on %d ranks, %d SMs each%s%s%s (algorithm, blocks x threads):\n", "Algorithms",
          sys->nranks, sys->gpus[0].smCount, request[0] ? ", FCCL_ALGO=" : "", request,
          request[0] ? " where it can" : "");
  fprintf(out, "  %-13s   %8s  %-26s%s\n", "", "bytes", "staged buffers", "registered buffers");
  for (int s = 0; s < topoAlgoSizeCount; s++) {
    char bytes[32], cells[2][64];
    topoFormatSize(topoAlgoSizes[s], bytes, sizeof(bytes));
    for (int registered = 0; registered < 2; registered++) {
      topoAlgo_t algo;
      if (topoAlgoFor(sys, topoAlgoSizes[s], registered, &algo) == 0)
        snprintf(cells[registered], sizeof(cells[registered]), "%s %dx%d", algo.name, algo.blocks, algo.threads);
      else
        snprintf(cells[registered], sizeof(cells[registered]), "cannot run");
    }
    fprintf(out, "  %-13s   %8s  %-26s%s\n", "", bytes, cells[0], cells[1]);
  }
}

int topoWriteHuman(const topoSystem_t* sys, FILE* out) {
  char source[512];
  topoSourceText(sys, source, sizeof(source));
  fprintf(out, "fccl-topo: %s\n\n", source);
  printHost(sys, out);
  printGpus(sys, out);
  if (sys->ngpus > 0) {
    printMatrix(sys, out);
    printNvLink(sys, out);
    printPeers(sys, out);
  }
  printPci(sys, out);
  printFccl(sys, out);
  if (sys->nnotes > 0) {
    fprintf(out, "\nNotes\n");
    for (int n = 0; n < sys->nnotes; n++) fprintf(out, "  - %s\n", sys->notes[n]);
  }
  return ferror(out) ? -1 : 0;
}
