/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What follows from the facts: bus id helpers, NVLink groups, GPU x GPU path classes and fccl's own decisions.
 * Pure computation on topoSystem_t; no hwloc, CUDA or NVML here, so the unit tests reach every branch.
 */
#include "topo.h"

#include "algo.h"
#include "device_state.h"
#include "param.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- bus ids ------------------------------------------------------------------------------------------------------
 */

int topoBusIdParse(const char* text, topoBusId_t* id) {
  if (text == NULL) return -1;
  while (isspace((unsigned char)*text)) text++;
  size_t len = strlen(text);
  while (len > 0 && isspace((unsigned char)text[len - 1])) len--;
  if (len == 0 || len > 24) return -1;
  char copy[32];
  memcpy(copy, text, len);
  copy[len] = '\0';
  int colons = 0;
  for (size_t i = 0; i < len; i++) {
    char c = copy[i];
    if (c == ':')
      colons++;
    else if (c != '.' && !isxdigit((unsigned char)c))
      return -1;
  }
  unsigned domain = 0, bus, dev, func;
  int consumed = 0;
  if (colons == 2) {
    if (sscanf(copy, "%x:%x:%x.%x%n", &domain, &bus, &dev, &func, &consumed) != 4) return -1;
  } else if (colons == 1) {
    if (sscanf(copy, "%x:%x.%x%n", &bus, &dev, &func, &consumed) != 3) return -1;
  } else {
    return -1;
  }
  if ((size_t)consumed != len || bus > 0xff || dev > 0x1f || func > 7) return -1;
  id->valid = 1;
  id->domain = domain;
  id->bus = bus;
  id->dev = dev;
  id->func = func;
  return 0;
}

void topoBusIdFormat(const topoBusId_t* id, char* buf, size_t len) {
  if (!id->valid)
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%04x:%02x:%02x.%x", id->domain, id->bus, id->dev, id->func);
}

int topoBusIdEqual(const topoBusId_t* a, const topoBusId_t* b) {
  return a->valid && b->valid && a->domain == b->domain && a->bus == b->bus && a->dev == b->dev && a->func == b->func;
}

int topoBusIdCompare(const topoBusId_t* a, const topoBusId_t* b) {
  if (a->valid != b->valid) return a->valid ? -1 : 1;
  unsigned av[4] = {a->domain, a->bus, a->dev, a->func}, bv[4] = {b->domain, b->bus, b->dev, b->func};
  for (int i = 0; i < 4; i++)
    if (av[i] != bv[i]) return av[i] < bv[i] ? -1 : 1;
  return 0;
}

/* ---- the system
 * ------------------------------------------------------------------------------------------------------ */

void topoInit(topoSystem_t* sys) {
  memset(sys, 0, sizeof(*sys));
  sys->nranks = -1;
}

/* The per-GPU arrays, sized by the GPU count. */
static void freeGpuArrays(topoSystem_t* sys) {
  free(sys->gpus);
  free(sys->peers);
  free(sys->paths);
  sys->gpus = NULL;
  sys->peers = NULL;
  sys->paths = NULL;
  sys->ngpus = 0;
}

void topoFree(topoSystem_t* sys) {
  free(sys->pci);
  sys->pci = NULL;
  sys->npci = sys->pciCapacity = 0;
  freeGpuArrays(sys);
}

void topoNote(topoSystem_t* sys, const char* fmt, ...) {
  if (sys->nnotes == TOPO_MAX_NOTES) return;
  va_list args;
  va_start(args, fmt);
  vsnprintf(sys->notes[sys->nnotes], sizeof(sys->notes[0]), fmt, args);
  va_end(args);
  sys->nnotes++;
}

int topoSetGpuCount(topoSystem_t* sys, int ngpus, char* err, size_t errLen) {
  if (ngpus < 0 || ngpus > TOPO_MAX_GPUS) {
    snprintf(err, errLen, "%d GPUs: fccl-topo handles at most %d", ngpus, TOPO_MAX_GPUS);
    return -1;
  }
  freeGpuArrays(sys);
  if (ngpus == 0) return 0;
  sys->gpus = calloc((size_t)ngpus, sizeof(topoGpu_t));
  sys->peers = calloc((size_t)ngpus * (size_t)ngpus, sizeof(topoPeer_t));
  if (sys->gpus == NULL || sys->peers == NULL) {
    snprintf(err, errLen, "out of memory for %d GPUs", ngpus);
    return -1;
  }
  for (int g = 0; g < ngpus; g++) {
    topoGpu_t* gpu = &sys->gpus[g];
    gpu->index = g;
    gpu->vmm = gpu->posixFd = gpu->gdr = -1;
    gpu->pciNode = -1;
  }
  sys->ngpus = ngpus;
  return 0;
}

int topoAddPciNode(topoSystem_t* sys) {
  if (sys->npci == sys->pciCapacity) {
    int capacity = sys->pciCapacity ? 2 * sys->pciCapacity : 64;
    topoPciNode_t* grown = realloc(sys->pci, (size_t)capacity * sizeof(topoPciNode_t));
    if (grown == NULL) return -1;
    sys->pci = grown;
    sys->pciCapacity = capacity;
  }
  topoPciNode_t* node = &sys->pci[sys->npci];
  memset(node, 0, sizeof(*node));
  node->gpu = -1;
  node->numaNode = -1;
  node->parent = node->firstChild = node->nextSibling = -1;
  return sys->npci++;
}

/* ---- NVLink -------------------------------------------------------------------------------------------------------
 */

const char* topoNvLinkVersionName(unsigned v) {
  static const char* names[] = {"?", "1.0", "2.0", "2.2", "3.0", "3.1", "4.0", "5.0"};
  return v < sizeof(names) / sizeof(names[0]) ? names[v] : "?";
}

double topoNvLinkNominalGBs(unsigned v) {
  /* Per link and direction: NVLink 1 (P100) 20, NVLink 2/3/4 (V100, A100, H100) 25, NVLink 5 (B200) 50. */
  static const double gbs[] = {0, 20.0, 25.0, 25.0, 25.0, 25.0, 25.0, 50.0};
  return v < sizeof(gbs) / sizeof(gbs[0]) ? gbs[v] : 0.0;
}

const char* topoRemoteTypeName(topoRemoteType_t type) {
  switch (type) {
    case TOPO_REMOTE_GPU: return "gpu";
    case TOPO_REMOTE_SWITCH: return "switch";
    case TOPO_REMOTE_CPU: return "cpu";
    default: return "unknown";
  }
}

static int gpuByBusId(const topoSystem_t* sys, const topoBusId_t* id) {
  for (int g = 0; g < sys->ngpus; g++)
    if (topoBusIdEqual(&sys->gpus[g].busId, id)) return g;
  return -1;
}

/* Groups active links by remote end, in order of first appearance (NVML's link order, like NCCL's XML). */
static void groupNvLinks(const topoSystem_t* sys, topoGpu_t* gpu) {
  gpu->ngroups = 0;
  for (int l = 0; l < gpu->nlinks; l++) {
    const topoNvLink_t* link = &gpu->links[l];
    if (!link->active) continue;
    topoRemoteType_t type = link->remoteType;
    int peer = gpuByBusId(sys, &link->remote);
    /* NCCL's rule for an unknown remote: a GPU when the bus id is one, else an NVSwitch (the remote of a link that
     * is not a GPU and not visible is a switch the VM does not show). */
    if (type == TOPO_REMOTE_UNKNOWN) type = peer >= 0 ? TOPO_REMOTE_GPU : TOPO_REMOTE_SWITCH;
    if (type != TOPO_REMOTE_GPU) peer = -1;
    int found = -1;
    for (int k = 0; k < gpu->ngroups; k++) {
      topoNvGroup_t* group = &gpu->groups[k];
      int sameRemote = (!group->remote.valid && !link->remote.valid) || topoBusIdEqual(&group->remote, &link->remote);
      if (group->remoteType == type && sameRemote) found = k;
    }
    if (found < 0) {
      found = gpu->ngroups++;
      topoNvGroup_t* group = &gpu->groups[found];
      memset(group, 0, sizeof(*group));
      group->remoteType = type;
      group->remote = link->remote;
      group->peerGpu = peer;
      group->version = link->version;
    }
    gpu->groups[found].count++;
    if (link->version > gpu->groups[found].version) gpu->groups[found].version = link->version;
  }
}

static int switchLinks(const topoGpu_t* gpu) {
  int count = 0;
  for (int k = 0; k < gpu->ngroups; k++)
    if (gpu->groups[k].remoteType == TOPO_REMOTE_SWITCH) count += gpu->groups[k].count;
  return count;
}

/* ---- PCI paths ------------------------------------------------------------------------------------------------------
 */

/*
 * NCCL (and nvidia-smi) see a PCIe switch as one node where the PCI tree has two bridges (upstream port, downstream
 * ports). NCCL's topology walks up sysfs and keeps every second bridge above a device: the grandparent, then every
 * other one up to the root port. Doing the same here makes PIX/PXB agree with theirs: PIX when both devices sit right
 * below the same switch, PXB when more switches are in the way.
 */
static int switchChain(const topoSystem_t* sys, int node, int* chain, int max, int* hostBridge) {
  int ancestors[64], count = 0;
  *hostBridge = -1;
  for (int p = sys->pci[node].parent; p >= 0; p = sys->pci[p].parent) {
    if (sys->pci[p].kind == TOPO_PCI_HOSTBRIDGE) {
      *hostBridge = p;
      break;
    }
    if (count < 64) ancestors[count++] = p;
  }
  int n = 0;
  for (int i = 1; i < count && n < max; i += 2) chain[n++] = ancestors[i];
  return n;
}

topoPathClass_t topoPciPathClass(const topoSystem_t* sys, int a, int b) {
  if (a < 0 || b < 0 || a >= sys->npci || b >= sys->npci) return TOPO_PATH_UNKNOWN;
  if (a == b) return TOPO_PATH_SELF;
  int chainA[32], chainB[32], hostA, hostB;
  int na = switchChain(sys, a, chainA, 32, &hostA);
  int nb = switchChain(sys, b, chainB, 32, &hostB);
  for (int i = 0; i < na; i++) {
    for (int j = 0; j < nb; j++) {
      if (chainA[i] != chainB[j]) continue;
      return (i == 0 && j == 0) ? TOPO_PATH_PIX : TOPO_PATH_PXB;
    }
  }
  if (hostA < 0 || hostB < 0) return TOPO_PATH_UNKNOWN;
  if (hostA == hostB) return TOPO_PATH_PHB;
  int numaA = sys->pci[hostA].numaNode, numaB = sys->pci[hostB].numaNode;
  if (numaA >= 0 && numaA == numaB) return TOPO_PATH_NODE;
  return TOPO_PATH_SYS;
}

const char* topoPathClassName(topoPathClass_t cls) {
  switch (cls) {
    case TOPO_PATH_SELF: return "X";
    case TOPO_PATH_NVLINK: return "NV";
    case TOPO_PATH_PIX: return "PIX";
    case TOPO_PATH_PXB: return "PXB";
    case TOPO_PATH_PHB: return "PHB";
    case TOPO_PATH_NODE: return "NODE";
    case TOPO_PATH_SYS: return "SYS";
    default: return "?";
  }
}

int topoMatrixNics(const topoSystem_t* sys, int* nodes, int max) {
  int count = 0;
  for (int i = 0; i < sys->npci; i++) {
    if (sys->pci[i].kind != TOPO_PCI_DEVICE || !sys->pci[i].rdma) continue;
    if (count < max) nodes[count] = i;
    count++;
  }
  return count;
}

topoPath_t topoNicPath(const topoSystem_t* sys, int gpu, int fromNode, int nic) {
  /* No NVLink between a GPU and a NIC: the PCI tree alone, as nvidia-smi's PIX ... SYS. */
  const int from = gpu >= 0 ? sys->gpus[gpu].pciNode : fromNode;
  topoPath_t path = {topoPciPathClass(sys, from, nic), 0, 0};
  return path;
}

void topoPathName(const topoPath_t* path, char* buf, size_t len) {
  if (path->cls == TOPO_PATH_NVLINK)
    snprintf(buf, len, "NV%d", path->nvlinks);
  else
    snprintf(buf, len, "%s", topoPathClassName(path->cls));
}

int topoModelAnalyse(topoSystem_t* sys, char* err, size_t errLen) {
  free(sys->paths);
  sys->paths = NULL;
  for (int g = 0; g < sys->ngpus; g++) groupNvLinks(sys, &sys->gpus[g]);
  if (sys->ngpus == 0) return 0;
  sys->paths = calloc((size_t)sys->ngpus * (size_t)sys->ngpus, sizeof(topoPath_t));
  if (sys->paths == NULL) {
    snprintf(err, errLen, "out of memory for the path matrix");
    return -1;
  }
  for (int i = 0; i < sys->ngpus; i++) {
    const topoGpu_t* gi = &sys->gpus[i];
    for (int j = 0; j < sys->ngpus; j++) {
      const topoGpu_t* gj = &sys->gpus[j];
      topoPath_t* path = &sys->paths[i * sys->ngpus + j];
      if (i == j) {
        path->cls = TOPO_PATH_SELF;
        continue;
      }
      int direct = 0;
      for (int k = 0; k < gi->ngroups; k++)
        if (gi->groups[k].peerGpu == j) direct += gi->groups[k].count;
      int si = switchLinks(gi), sj = switchLinks(gj);
      if (direct > 0) {
        path->cls = TOPO_PATH_NVLINK;
        path->nvlinks = direct;
      } else if (si > 0 && sj > 0) {
        path->cls = TOPO_PATH_NVLINK;
        path->nvlinks = si < sj ? si : sj;
        path->viaSwitch = 1;
      } else {
        path->cls = topoPciPathClass(sys, gi->pciNode, gj->pciNode);
      }
    }
  }
  return 0;
}

/* ---- fccl's decisions ---------------------------------------------------------------------------------------------
 */

topoIpc_t topoGpuIpc(const topoGpu_t* gpu) {
  if (gpu->vmm == 1 && gpu->posixFd == 1) return TOPO_IPC_CUMEM;
  if (gpu->vmm == 0 || gpu->posixFd == 0) return TOPO_IPC_LEGACY;
  return TOPO_IPC_UNKNOWN;
}

const char* topoIpcName(topoIpc_t ipc) {
  switch (ipc) {
    case TOPO_IPC_CUMEM: return "cuMem (POSIX file descriptors)";
    case TOPO_IPC_LEGACY: return "legacy CUDA IPC (cudaIpcGetMemHandle)";
    default: return "unknown";
  }
}

int topoGpuHasKernels(const topoSystem_t* sys, const topoGpu_t* gpu) {
  /* A cubin for sm_XY runs on sm_XZ with Z >= Y: same major, same or later minor. */
  const char* p = sys->gpuArchs;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    char* end = NULL;
    long major = strtol(p, &end, 10);
    long minor = 0;
    if (end && *end == '.') minor = strtol(end + 1, &end, 10);
    if (end == p) break;
    if (major == gpu->ccMajor && minor <= gpu->ccMinor) return 1;
    p = end;
    while (*p && *p != ' ' && *p != ',') p++;
  }
  return 0;
}

const char* topoPeerP2pText(const topoSystem_t* sys, int i, int j) {
  const topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
  if (!peer->known) return "unknown (CUDA not asked)";
  if (!peer->canAccess || !peer->access) return "no peer access";
  if (peer->verified == TOPO_VERIFY_OK) return "verified (cudaMemcpyPeer write + read-back)";
  if (peer->verified == TOPO_VERIFY_FAILED) return "FAILED the cudaMemcpyPeer write + read-back";
  return "capable (verified at communicator init)";
}

int topoCollectivesSupported(const topoSystem_t* sys, char* reason, size_t len) {
  int n = sys->nranks;
  if (n < 2) {
    snprintf(reason, len, "%d rank%s: collectives need at least 2", n, n == 1 ? "" : "s");
    return 0;
  }
  if (n > FCCL_DEVICE_MAX_RANKS) {
    snprintf(reason, len, "fccl supports 2 to %d ranks, not %d", FCCL_DEVICE_MAX_RANKS, n);
    return 0;
  }
  if (n > sys->ngpus) {
    snprintf(reason, len, "%d ranks need %d GPUs (one per rank), %d found", n, n, sys->ngpus);
    return 0;
  }
  for (int i = 0; i < n; i++) {
    if (!topoGpuHasKernels(sys, &sys->gpus[i])) {
      snprintf(reason, len, "GPU%d (sm_%d%d) has no kernels in this build (gpu_archs '%s')", i, sys->gpus[i].ccMajor,
               sys->gpus[i].ccMinor, sys->gpuArchs);
      return 0;
    }
    for (int j = 0; j < n; j++) {
      if (i == j) continue;
      const topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
      if (!peer->known) {
        snprintf(reason, len, "peer access GPU%d -> GPU%d unknown", i, j);
        return 0;
      }
      if (!peer->canAccess || !peer->access) {
        snprintf(reason, len, "GPU%d cannot access GPU%d's memory (no P2P)", i, j);
        return 0;
      }
      if (peer->verified == TOPO_VERIFY_FAILED) {
        snprintf(reason, len, "the P2P check GPU%d -> GPU%d failed", i, j);
        return 0;
      }
    }
  }
  snprintf(reason, len, "GPU0..GPU%d, one rank each, every pair with P2P", n - 1);
  return 1;
}

const size_t topoAlgoSizes[] = {1024,    4096,     16384,    65536,     262144,    1048576,
                                4194304, 16777216, 67108864, 268435456, 1073741824};
const int topoAlgoSizeCount = (int)(sizeof(topoAlgoSizes) / sizeof(topoAlgoSizes[0]));

int topoAlgoAvailable(const topoSystem_t* sys, char* reason, size_t len) {
  if (sys->ngpus == 0) {
    snprintf(reason, len, "no GPU found");
    return 0;
  }
  char why[256];
  if (!topoCollectivesSupported(sys, why, sizeof(why)) || sys->nranks > FCCL_DEVICE_MAX_RANKS) {
    snprintf(reason, len, "collectives cannot run here: %s", why);
    return 0;
  }
  snprintf(reason, len, "%s", "");
  return 1;
}

const char* topoAlgoRequest(void) { return fcclParamString(FCCL_PARAM_ALGO); }

int topoAlgoFor(const topoSystem_t* sys, size_t bytes, int registered, topoAlgo_t* algo) {
  char reason[128];
  if (!topoAlgoAvailable(sys, reason, sizeof(reason)) || bytes == 0) return -1;
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(sys->nranks, fcclDeviceStagingBytes(), &layout);
  fcclAlgoQuery query =
      fcclAlgoQueryMake(bytes, sys->nranks, registered, 0, sys->gpus[0].smCount, &layout, fcclDeviceLL128Auto(),
                        fcclDeviceCopyScatterMin());
  /* As fcclAllReduce: a forced algorithm that cannot run falls back to the table (strict 0). */
  query.forced = fcclAlgoResolveRequest(fcclAlgoParseRequest(topoAlgoRequest()), registered);
  fcclAlgoChoice choice;
  if (fcclAlgoSelect(&query, &choice) != fcclSuccess) return -1;
  snprintf(algo->name, sizeof(algo->name), "%s", fcclAlgoName(choice.algo));
  algo->blocks = choice.blocks;
  algo->threads = choice.threads;
  return 0;
}

/* ---- CPU sets ------------------------------------------------------------------------------------------------------
 */

int topoCpuListToCpumap(const char* list, char* buf, size_t len) {
  enum { MAX_WORDS = 64 };
  uint32_t words[MAX_WORDS];
  memset(words, 0, sizeof(words));
  int last = -1;
  const char* p = list;
  while (*p) {
    char* end = NULL;
    long first = strtol(p, &end, 10);
    if (end == p || first < 0) return -1;
    long stop = first;
    p = end;
    if (*p == '-') {
      stop = strtol(p + 1, &end, 10);
      if (end == p + 1 || stop < first) return -1;
      p = end;
    }
    if (stop >= MAX_WORDS * 32) return -1;
    for (long cpu = first; cpu <= stop; cpu++) words[cpu / 32] |= 1u << (cpu % 32);
    if (stop > last) last = (int)stop;
    if (*p == ',')
      p++;
    else if (*p)
      return -1;
  }
  int nwords = last < 0 ? 1 : last / 32 + 1;
  size_t used = 0;
  buf[0] = '\0';
  for (int w = nwords - 1; w >= 0; w--) {
    int wrote = snprintf(buf + used, len - used, "%08x%s", words[w], w ? "," : "");
    if (wrote < 0 || (size_t)wrote >= len - used) return -1;
    used += (size_t)wrote;
  }
  return 0;
}
