/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --xml: the machine in NCCL's topology XML (what NCCL_TOPO_DUMP_FILE writes and NCCL_TOPO_FILE reads):
 *
 *   <system version="1">
 *     <cpu numaid="0" affinity="0000ffff,..." arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
 *       <pci busid="0000:16:00.0" class="0x060400" vendor=... link_speed="32.0 GT/s PCIe" link_width="16">
 *         <pci busid="0000:18:00.0" class="0x030200" ...>
 *           <gpu dev="0" sm="90" rank="0" gdr="1">
 *             <nvlink target="0000:05:00.0" count="4" tclass="0x068000"/>
 *
 * NCCL's reader is strict in ways a generic XML reader is not: no <?xml?> prolog, attributes separated by one space,
 * "/>" right after the last attribute, every <pci> with busid, class, link_speed and link_width, every <gpu> with
 * dev, sm, rank and gdr. Like NCCL's own dump, a PCI switch appears as one <pci> (its upstream port): of the bridges
 * above a device we keep every second one, starting with its grandparent.
 */
#include "topo.h"

#include <stdlib.h>
#include <string.h>

/* PCIe generations: NCCL's spelling of the per-lane rate, and the per-lane GB/s hwloc folds into its link speed. */
static const struct {
  const char* name;
  double laneGBs;
} pcieGens[] = {
    {"2.5 GT/s PCIe", 0.25},      {"5.0 GT/s PCIe", 0.5},       {"8.0 GT/s PCIe", 0.984615},
    {"16.0 GT/s PCIe", 1.969231}, {"32.0 GT/s PCIe", 3.938462}, {"64.0 GT/s PCIe", 7.876923},
};

/* hwloc keeps only lanes x rate; NCCL only uses lanes x rate too (its bandwidth is width * speed), so any split with
 * the right product reads the same. Prefer x16. Unknown stays "" as in NCCL's own dumps. */
static void linkAttributes(float linkGBs, char* speed, size_t speedLen, char* width, size_t widthLen) {
  static const int widths[] = {16, 8, 4, 2, 1, 32};
  snprintf(speed, speedLen, "%s", "");
  snprintf(width, widthLen, "%s", "");
  if (linkGBs <= 0) return;
  for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
    for (size_t g = 0; g < sizeof(pcieGens) / sizeof(pcieGens[0]); g++) {
      double expected = widths[w] * pcieGens[g].laneGBs;
      if (linkGBs > expected * 0.97 && linkGBs < expected * 1.03) {
        snprintf(speed, speedLen, "%s", pcieGens[g].name);
        snprintf(width, widthLen, "%d", widths[w]);
        return;
      }
    }
  }
}

static const char* ncclArch(const char* hwlocArch) {
  if (strcmp(hwlocArch, "x86_64") == 0) return "x86_64";
  if (strcmp(hwlocArch, "aarch64") == 0 || strcmp(hwlocArch, "arm64") == 0) return "arm64";
  if (strncmp(hwlocArch, "ppc64", 5) == 0) return "ppc64";
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "arm64";
#else
  return "ppc64";
#endif
}

/* Whether NCCL cares about this device: a GPU CUDA listed, or a NIC (NCCL attaches its <nic> by bus id). */
static int relevant(const topoPciNode_t* node) {
  return node->kind == TOPO_PCI_DEVICE && (node->gpu >= 0 || (node->classId >> 8) == 0x02);
}

/* The NCCL-visible ancestors of a device, top first: every second bridge from the grandparent up. */
static int ncclChain(const topoSystem_t* sys, int node, int* chain, int max) {
  int ancestors[64], count = 0;
  for (int p = sys->pci[node].parent; p >= 0 && sys->pci[p].kind != TOPO_PCI_HOSTBRIDGE && count < 64;
       p = sys->pci[p].parent)
    ancestors[count++] = p;
  int n = 0;
  int kept[32];
  for (int i = 1; i < count && n < 32; i += 2) kept[n++] = ancestors[i];
  int m = 0;
  for (int i = n - 1; i >= 0 && m < max; i--) chain[m++] = kept[i];
  if (m < max) chain[m++] = node;
  return m;
}

static int hostBridgeOf(const topoSystem_t* sys, int node) {
  int p = node;
  while (p >= 0 && sys->pci[p].kind != TOPO_PCI_HOSTBRIDGE) p = sys->pci[p].parent;
  return p;
}

typedef struct {
  int node;   /* index into sys->pci */
  int parent; /* index into the emitted tree, -1 for children of the <cpu> */
  int numa;   /* the <cpu> it hangs from */
} xmlNode_t;

static int compareByBus(const topoSystem_t* sys, int a, int b) {
  return topoBusIdCompare(&sys->pci[a].busId, &sys->pci[b].busId);
}

static void writePciOpen(const topoSystem_t* sys, const topoPciNode_t* node, FILE* out, int indent, int selfClose) {
  char bus[32], speed[32], width[16];
  topoBusIdFormat(&node->busId, bus, sizeof(bus));
  linkAttributes(node->linkGBs, speed, sizeof(speed), width, sizeof(width));
  fprintf(out,
          "%*s<pci busid=\"%s\" class=\"0x%04x00\" vendor=\"0x%04x\" device=\"0x%04x\" subsystem_vendor=\"0x%04x\" "
          "subsystem_device=\"0x%04x\" link_speed=\"%s\" link_width=\"%s\"%s>\n",
          indent, "", bus, node->classId, node->vendor, node->device, node->subVendor, node->subDevice, speed, width,
          selfClose ? "/" : "");
  (void)sys;
}

static void writeGpu(const topoSystem_t* sys, const topoGpu_t* gpu, FILE* out, int indent) {
  int gdr = gpu->gdr == 1;
  int nvlinks = sys->nvmlAvailable && gpu->nvlinkQueried && gpu->ngroups > 0;
  fprintf(out, "%*s<gpu dev=\"%d\" sm=\"%d\" rank=\"%d\" gdr=\"%d\"%s>\n", indent, "", gpu->index,
          gpu->ccMajor * 10 + gpu->ccMinor, gpu->index, gdr, nvlinks ? "" : "/");
  if (!nvlinks) return;
  for (int k = 0; k < gpu->ngroups; k++) {
    const topoNvGroup_t* group = &gpu->groups[k];
    char target[32];
    const char* tclass = "0x068000"; /* NVSwitch */
    char gpuClass[16];
    if (group->remote.valid)
      topoBusIdFormat(&group->remote, target, sizeof(target));
    else
      snprintf(target, sizeof(target), "%s", "fffffff:ffff:ff"); /* NCCL's name for an NVSwitch the OS hides */
    if (group->remoteType == TOPO_REMOTE_GPU) {
      unsigned cls = 0x0302;
      if (group->peerGpu >= 0 && sys->gpus[group->peerGpu].pciNode >= 0)
        cls = sys->pci[sys->gpus[group->peerGpu].pciNode].classId;
      snprintf(gpuClass, sizeof(gpuClass), "0x%04x00", cls);
      tclass = gpuClass;
    } else if (group->remoteType == TOPO_REMOTE_CPU) {
      tclass = "0x068001";
    }
    fprintf(out, "%*s<nvlink target=\"%s\" count=\"%d\" tclass=\"%s\"/>\n", indent + 2, "", target, group->count,
            tclass);
  }
  fprintf(out, "%*s</gpu>\n", indent, "");
}

static void writeTree(const topoSystem_t* sys, const xmlNode_t* nodes, int count, int parent, int numa, FILE* out,
                      int indent) {
  /* Children of `parent` in bus id order. */
  int order[512], n = 0;
  for (int i = 0; i < count && n < 512; i++)
    if (nodes[i].parent == parent && nodes[i].numa == numa) order[n++] = i;
  for (int a = 1; a < n; a++)
    for (int b = a; b > 0 && compareByBus(sys, nodes[order[b - 1]].node, nodes[order[b]].node) > 0; b--) {
      int t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  for (int i = 0; i < n; i++) {
    const topoPciNode_t* node = &sys->pci[nodes[order[i]].node];
    int hasChildren = 0;
    for (int c = 0; c < count; c++) hasChildren |= nodes[c].parent == order[i];
    int isGpu = node->gpu >= 0;
    writePciOpen(sys, node, out, indent, !hasChildren && !isGpu);
    if (isGpu) writeGpu(sys, &sys->gpus[node->gpu], out, indent + 2);
    if (hasChildren) writeTree(sys, nodes, count, order[i], numa, out, indent + 2);
    if (hasChildren || isGpu) fprintf(out, "%*s</pci>\n", indent, "");
  }
}

static const topoPackage_t* packageOfNuma(const topoSystem_t* sys, int numa) {
  char id[16];
  snprintf(id, sizeof(id), "%d", numa);
  for (int p = 0; p < sys->npackages; p++) {
    /* numaNodes is a list such as "0" or "0-1,4": check membership by expanding it. */
    const char* s = sys->packages[p].numaNodes;
    while (*s) {
      char* end = NULL;
      long first = strtol(s, &end, 10), last;
      if (end == s) break;
      last = first;
      s = end;
      if (*s == '-') {
        last = strtol(s + 1, &end, 10);
        s = end;
      }
      if (numa >= first && numa <= last) return &sys->packages[p];
      if (*s == ',') s++;
    }
  }
  return sys->npackages > 0 ? &sys->packages[0] : NULL;
}

static void writeCpu(const topoSystem_t* sys, int numa, FILE* out) {
  fprintf(out, "  <cpu numaid=\"%d\"", numa);
  for (int n = 0; n < sys->nnuma; n++)
    if (sys->numa[n].osIndex == numa && sys->numa[n].ncclAffinity[0])
      fprintf(out, " affinity=\"%s\"", sys->numa[n].ncclAffinity);
  const char* arch = ncclArch(sys->arch);
  fprintf(out, " arch=\"%s\"", arch);
  const topoPackage_t* pkg = packageOfNuma(sys, numa);
  if (pkg && pkg->vendor[0] && strcmp(arch, "x86_64") == 0) {
    fprintf(out, " vendor=\"%s\"", pkg->vendor);
    if (pkg->family >= 0 && pkg->modelNumber >= 0)
      fprintf(out, " familyid=\"%d\" modelid=\"%d\"", pkg->family, pkg->modelNumber);
  }
}

int topoWriteNcclXml(const topoSystem_t* sys, FILE* out) {
  /* Collect the NCCL-visible nodes above every relevant device, each once, tagged with its NUMA node. */
  int capacity = sys->npci > 0 ? sys->npci : 1;
  xmlNode_t* nodes = calloc((size_t)capacity, sizeof(xmlNode_t));
  int* emitted = malloc((size_t)capacity * sizeof(int)); /* pci index -> tree index */
  if (nodes == NULL || emitted == NULL) {
    free(nodes);
    free(emitted);
    return -1;
  }
  for (int i = 0; i < capacity; i++) emitted[i] = -1;
  int count = 0;
  for (int d = 0; d < sys->npci; d++) {
    if (!relevant(&sys->pci[d])) continue;
    int host = hostBridgeOf(sys, d);
    int numa = host >= 0 ? sys->pci[host].numaNode : -1;
    int chain[32];
    int n = ncclChain(sys, d, chain, 32);
    int parent = -1;
    for (int c = 0; c < n; c++) {
      int pci = chain[c];
      if (emitted[pci] < 0) {
        emitted[pci] = count;
        nodes[count].node = pci;
        nodes[count].parent = parent;
        nodes[count].numa = numa;
        count++;
      }
      parent = emitted[pci];
    }
  }
  /* One <cpu> per NUMA node (NCCL keeps those with GPUs or NICs), then -1 for devices of unknown locality. */
  fprintf(out, "<system version=\"1\">\n");
  int numaIds[TOPO_MAX_NUMA + 1], nids = 0;
  for (int n = 0; n < sys->nnuma; n++) numaIds[nids++] = sys->numa[n].osIndex;
  /* GPUs hwloc does not show (a GPU hidden from hwloc by a cgroup, or a replay with an unrelated XML) still appear,
   * with what CUDA knows, under the CPU of unknown locality. */
  int unplaced = 0;
  for (int g = 0; g < sys->ngpus; g++) unplaced += sys->gpus[g].pciNode < 0;
  int unknownUsed = unplaced > 0;
  for (int i = 0; i < count; i++) unknownUsed |= nodes[i].numa < 0;
  if (unknownUsed || nids == 0) numaIds[nids++] = -1;
  for (int k = 0; k < nids; k++) {
    int numa = numaIds[k];
    int any = numa < 0 && unplaced > 0;
    for (int i = 0; i < count; i++) any |= nodes[i].numa == numa && nodes[i].parent < 0;
    writeCpu(sys, numa, out);
    if (!any) {
      fprintf(out, "/>\n");
      continue;
    }
    fprintf(out, ">\n");
    writeTree(sys, nodes, count, -1, numa, out, 4);
    for (int g = 0; numa < 0 && g < sys->ngpus; g++) {
      if (sys->gpus[g].pciNode >= 0) continue;
      char bus[32];
      topoBusIdFormat(&sys->gpus[g].busId, bus, sizeof(bus));
      fprintf(out, "    <pci busid=\"%s\" class=\"0x030200\" link_speed=\"\" link_width=\"\">\n", bus);
      writeGpu(sys, &sys->gpus[g], out, 6);
      fprintf(out, "    </pci>\n");
    }
    fprintf(out, "  </cpu>\n");
  }
  fprintf(out, "</system>\n");
  free(nodes);
  free(emitted);
  return ferror(out) ? -1 : 0;
}
