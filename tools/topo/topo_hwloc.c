/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host side of the model from hwloc: CPU packages, NUMA nodes and the PCI tree with each host bridge's locality.
 * Live (this machine) or from a recorded hwloc XML (lstopo --of xml, or fccl-topo --record), so tests can replay
 * machines they do not run on. The only file that includes hwloc.h.
 */
#include "topo.h"

#include <hwloc.h>
#include <hwloc/export.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  hwloc_topology_t topology;
  topoSystem_t* sys;
  char* err;
  size_t errLen;
} hwlocWalk_t;

static void bitmapList(hwloc_const_bitmap_t set, char* buf, size_t len) {
  if (set == NULL || hwloc_bitmap_iszero(set)) {
    snprintf(buf, len, "%s", "");
    return;
  }
  if (hwloc_bitmap_list_snprintf(buf, len, set) >= (int)len) snprintf(buf, len, "%s", "(too many to list)");
}

static const char* info(hwloc_obj_t obj, const char* name) {
  const char* value = hwloc_obj_get_info_by_name(obj, name);
  return value ? value : "";
}

static void copyText(char* dst, size_t len, const char* src) { snprintf(dst, len, "%s", src ? src : ""); }

static void loadPackages(hwlocWalk_t* walk) {
  topoSystem_t* sys = walk->sys;
  int count = hwloc_get_nbobjs_by_type(walk->topology, HWLOC_OBJ_PACKAGE);
  for (int i = 0; i < count && sys->npackages < TOPO_MAX_PACKAGES; i++) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(walk->topology, HWLOC_OBJ_PACKAGE, (unsigned)i);
    topoPackage_t* pkg = &sys->packages[sys->npackages++];
    pkg->osIndex = obj->os_index == HWLOC_UNKNOWN_INDEX ? i : (int)obj->os_index;
    bitmapList(obj->cpuset, pkg->cpus, sizeof(pkg->cpus));
    bitmapList(obj->nodeset, pkg->numaNodes, sizeof(pkg->numaNodes));
    copyText(pkg->model, sizeof(pkg->model), info(obj, "CPUModel"));
    copyText(pkg->vendor, sizeof(pkg->vendor), info(obj, "CPUVendor"));
    if (pkg->vendor[0] == '\0') {
      /* Older recordings carry only the model string. */
      if (strstr(pkg->model, "Intel"))
        copyText(pkg->vendor, sizeof(pkg->vendor), "GenuineIntel");
      else if (strstr(pkg->model, "AMD"))
        copyText(pkg->vendor, sizeof(pkg->vendor), "AuthenticAMD");
    }
    const char* family = info(obj, "CPUFamilyNumber");
    const char* model = info(obj, "CPUModelNumber");
    pkg->family = family[0] ? atoi(family) : -1;
    pkg->modelNumber = model[0] ? atoi(model) : -1;
    pkg->cores = hwloc_get_nbobjs_inside_cpuset_by_type(walk->topology, obj->cpuset, HWLOC_OBJ_CORE);
    pkg->pus = hwloc_get_nbobjs_inside_cpuset_by_type(walk->topology, obj->cpuset, HWLOC_OBJ_PU);
  }
}

static void loadNuma(hwlocWalk_t* walk) {
  topoSystem_t* sys = walk->sys;
  int count = hwloc_get_nbobjs_by_type(walk->topology, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < count && sys->nnuma < TOPO_MAX_NUMA; i++) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(walk->topology, HWLOC_OBJ_NUMANODE, (unsigned)i);
    topoNuma_t* numa = &sys->numa[sys->nnuma++];
    numa->osIndex = obj->os_index == HWLOC_UNKNOWN_INDEX ? i : (int)obj->os_index;
    bitmapList(obj->cpuset, numa->cpus, sizeof(numa->cpus));
    if (topoCpuListToCpumap(numa->cpus, numa->ncclAffinity, sizeof(numa->ncclAffinity)) != 0)
      numa->ncclAffinity[0] = '\0';
    numa->memoryBytes = obj->attr->numanode.local_memory;
  }
}

static int isHostBridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

/* A sort key for I/O children so the PCI tree prints in bus order whatever hwloc's order was. */
static uint64_t ioSortKey(hwloc_obj_t obj) {
  if (obj->type == HWLOC_OBJ_PCI_DEVICE)
    return ((uint64_t)obj->attr->pcidev.domain << 24) | ((uint64_t)obj->attr->pcidev.bus << 16) |
           ((uint64_t)obj->attr->pcidev.dev << 8) | obj->attr->pcidev.func;
  if (obj->type == HWLOC_OBJ_BRIDGE) {
    if (isHostBridge(obj))
      return ((uint64_t)obj->attr->bridge.downstream.pci.domain << 24) |
             ((uint64_t)obj->attr->bridge.downstream.pci.secondary_bus << 16);
    const struct hwloc_pcidev_attr_s* pci = &obj->attr->bridge.upstream.pci;
    return ((uint64_t)pci->domain << 24) | ((uint64_t)pci->bus << 16) | ((uint64_t)pci->dev << 8) | pci->func;
  }
  return UINT64_MAX;
}

static int compareIo(const void* a, const void* b) {
  uint64_t ka = ioSortKey(*(hwloc_obj_t const*)a), kb = ioSortKey(*(hwloc_obj_t const*)b);
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

/* OS devices below a PCI device, as a short label: the RDMA device name for NICs, else network, else block. Returns
 * whether the label is an RDMA device's. */
static int osdevLabel(hwloc_obj_t pcidev, char* buf, size_t len) {
  static const hwloc_obj_osdev_type_t preference[] = {HWLOC_OBJ_OSDEV_OPENFABRICS, HWLOC_OBJ_OSDEV_NETWORK,
                                                      HWLOC_OBJ_OSDEV_BLOCK};
  buf[0] = '\0';
  size_t p = 0;
  for (; p < sizeof(preference) / sizeof(preference[0]) && buf[0] == '\0'; p++) {
    size_t used = 0;
    for (hwloc_obj_t child = pcidev->io_first_child; child; child = child->next_sibling) {
      if (child->type != HWLOC_OBJ_OS_DEVICE || child->attr->osdev.type != preference[p] || !child->name) continue;
      int wrote = snprintf(buf + used, len - used, "%s%s", used ? "," : "", child->name);
      if (wrote < 0 || (size_t)wrote >= len - used) break;
      used += (size_t)wrote;
    }
  }
  return buf[0] != '\0' && p == 1; /* found in the first pass: OpenFabrics */
}

static void setPciIds(topoPciNode_t* node, const struct hwloc_pcidev_attr_s* pci) {
  node->busId.valid = 1;
  node->busId.domain = pci->domain;
  node->busId.bus = pci->bus;
  node->busId.dev = pci->dev;
  node->busId.func = pci->func;
  node->classId = pci->class_id;
  node->vendor = pci->vendor_id;
  node->device = pci->device_id;
  node->subVendor = pci->subvendor_id;
  node->subDevice = pci->subdevice_id;
  node->linkGBs = pci->linkspeed;
}

static int addIoSubtree(hwlocWalk_t* walk, hwloc_obj_t obj, int parent, int hostBridge);

static int addIoChildren(hwlocWalk_t* walk, hwloc_obj_t obj, int parent, int hostBridge) {
  int count = 0;
  for (hwloc_obj_t child = obj->io_first_child; child; child = child->next_sibling)
    if (child->type == HWLOC_OBJ_BRIDGE || child->type == HWLOC_OBJ_PCI_DEVICE) count++;
  if (count == 0) return 0;
  hwloc_obj_t* children = malloc((size_t)count * sizeof(hwloc_obj_t));
  if (children == NULL) {
    snprintf(walk->err, walk->errLen, "out of memory while reading the PCI tree");
    return -1;
  }
  int n = 0;
  for (hwloc_obj_t child = obj->io_first_child; child; child = child->next_sibling)
    if (child->type == HWLOC_OBJ_BRIDGE || child->type == HWLOC_OBJ_PCI_DEVICE) children[n++] = child;
  qsort(children, (size_t)n, sizeof(hwloc_obj_t), compareIo);
  int status = 0;
  for (int i = 0; i < n && status == 0; i++) status = addIoSubtree(walk, children[i], parent, hostBridge);
  free(children);
  return status;
}

static void linkChild(topoSystem_t* sys, int parent, int child) {
  sys->pci[child].parent = parent;
  if (parent < 0) return;
  if (sys->pci[parent].firstChild < 0) {
    sys->pci[parent].firstChild = child;
    return;
  }
  int last = sys->pci[parent].firstChild;
  while (sys->pci[last].nextSibling >= 0) last = sys->pci[last].nextSibling;
  sys->pci[last].nextSibling = child;
}

static int newHostBridge(hwlocWalk_t* walk, hwloc_obj_t obj) {
  topoSystem_t* sys = walk->sys;
  int index = topoAddPciNode(sys);
  if (index < 0) {
    snprintf(walk->err, walk->errLen, "out of memory while reading the PCI tree");
    return -1;
  }
  topoPciNode_t* node = &sys->pci[index];
  node->kind = TOPO_PCI_HOSTBRIDGE;
  node->implied = !isHostBridge(obj);
  if (isHostBridge(obj)) {
    node->domain = obj->attr->bridge.downstream.pci.domain;
    node->secondaryBus = obj->attr->bridge.downstream.pci.secondary_bus;
    node->subordinateBus = obj->attr->bridge.downstream.pci.subordinate_bus;
  }
  hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(walk->topology, obj);
  if (local) {
    bitmapList(local->cpuset, node->cpus, sizeof(node->cpus));
    bitmapList(local->nodeset, node->numaNodes, sizeof(node->numaNodes));
    if (local->nodeset && hwloc_bitmap_weight(local->nodeset) == 1) node->numaNode = hwloc_bitmap_first(local->nodeset);
  }
  linkChild(sys, -1, index);
  return index;
}

static int addIoSubtree(hwlocWalk_t* walk, hwloc_obj_t obj, int parent, int hostBridge) {
  topoSystem_t* sys = walk->sys;
  if (isHostBridge(obj)) {
    int index = newHostBridge(walk, obj);
    if (index < 0) return -1;
    return addIoChildren(walk, obj, index, index);
  }
  int index = topoAddPciNode(sys);
  if (index < 0) {
    snprintf(walk->err, walk->errLen, "out of memory while reading the PCI tree");
    return -1;
  }
  topoPciNode_t* node = &sys->pci[index];
  if (obj->type == HWLOC_OBJ_BRIDGE) {
    node->kind = TOPO_PCI_BRIDGE;
    if (obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) setPciIds(node, &obj->attr->bridge.upstream.pci);
    if (obj->attr->bridge.downstream_type == HWLOC_OBJ_BRIDGE_PCI) {
      node->domain = obj->attr->bridge.downstream.pci.domain;
      node->secondaryBus = obj->attr->bridge.downstream.pci.secondary_bus;
      node->subordinateBus = obj->attr->bridge.downstream.pci.subordinate_bus;
    }
  } else {
    node->kind = TOPO_PCI_DEVICE;
    setPciIds(node, &obj->attr->pcidev);
    node->rdma = osdevLabel(obj, node->label, sizeof(node->label));
  }
  const topoPciNode_t* host = &sys->pci[hostBridge];
  copyText(node->cpus, sizeof(node->cpus), host->cpus);
  copyText(node->numaNodes, sizeof(node->numaNodes), host->numaNodes);
  node->numaNode = host->numaNode;
  linkChild(sys, parent, index);
  return addIoChildren(walk, obj, index, hostBridge);
}

/* Every I/O tree hangs off a normal object (a package, a group, the machine). */
static int loadPci(hwlocWalk_t* walk, hwloc_obj_t obj) {
  for (hwloc_obj_t io = obj->io_first_child; io; io = io->next_sibling) {
    if (io->type != HWLOC_OBJ_BRIDGE && io->type != HWLOC_OBJ_PCI_DEVICE) continue;
    if (isHostBridge(io)) {
      if (addIoSubtree(walk, io, -1, -1) != 0) return -1;
    } else {
      /* A PCI object without a host bridge above it (hand-written XML): give it one so the tree stays a forest of
       * host bridges. */
      int host = newHostBridge(walk, io);
      if (host < 0 || addIoSubtree(walk, io, host, host) != 0) return -1;
    }
  }
  for (hwloc_obj_t child = obj->first_child; child; child = child->next_sibling)
    if (loadPci(walk, child) != 0) return -1;
  for (hwloc_obj_t child = obj->memory_first_child; child; child = child->next_sibling)
    if (loadPci(walk, child) != 0) return -1;
  return 0;
}

static void attachGpus(topoSystem_t* sys) {
  for (int g = 0; g < sys->ngpus; g++) {
    topoGpu_t* gpu = &sys->gpus[g];
    gpu->pciNode = -1;
    for (int n = 0; n < sys->npci && gpu->busId.valid; n++) {
      if (sys->pci[n].kind == TOPO_PCI_DEVICE && topoBusIdEqual(&sys->pci[n].busId, &gpu->busId)) {
        gpu->pciNode = n;
        sys->pci[n].gpu = g;
        break;
      }
    }
    if (gpu->pciNode < 0) {
      char bus[32];
      topoBusIdFormat(&gpu->busId, bus, sizeof(bus));
      topoNote(sys, "GPU%d (%s) is not in the hwloc topology: its CPU/NUMA affinity and PCI path are unknown", g, bus);
    }
  }
}

static const char* baseName(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

int topoHwlocLoad(topoSystem_t* sys, const char* xmlPath, const char* recordPath, char* err, size_t errLen) {
  hwlocWalk_t walk = {NULL, sys, err, errLen};
  unsigned version = hwloc_get_api_version();
  snprintf(sys->hwlocVersion, sizeof(sys->hwlocVersion), "%u.%u.%u", version >> 16, (version >> 8) & 0xff,
           version & 0xff);
  if (hwloc_topology_init(&walk.topology) != 0) {
    snprintf(err, errLen, "hwloc_topology_init failed");
    return -1;
  }
  int status = -1;
  /* GPUs, NICs, storage and the bridges above them; not every PCI function of the chipset. */
  hwloc_topology_set_io_types_filter(walk.topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  /* On Linux the core's sysfs discovery already finds the PCI tree: the libpciaccess plugin adds nothing (and leaks),
   * and the OpenCL and OpenGL plugins would initialise those stacks for devices this report does not show. */
  static const char* const skipped[] = {"pci", "opencl", "gl"};
  for (size_t c = 0; c < sizeof(skipped) / sizeof(skipped[0]); c++)
    (void)hwloc_topology_set_components(walk.topology, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skipped[c]);
  if (xmlPath) {
    if (hwloc_topology_set_xml(walk.topology, xmlPath) != 0) {
      snprintf(err, errLen, "cannot use %s as an hwloc XML topology", xmlPath);
      goto destroy;
    }
  }
  if (hwloc_topology_load(walk.topology) != 0) {
    snprintf(err, errLen, "hwloc could not load the topology%s%s", xmlPath ? " from " : "", xmlPath ? xmlPath : "");
    goto destroy;
  }
  if (recordPath && hwloc_topology_export_xml(walk.topology, recordPath, 0) != 0) {
    snprintf(err, errLen, "cannot write the hwloc topology to %s", recordPath);
    goto destroy;
  }
  sys->hostSource = xmlPath ? TOPO_SRC_FILE : TOPO_SRC_LIVE;
  copyText(sys->hostSourceName, sizeof(sys->hostSourceName), xmlPath ? baseName(xmlPath) : "");
  hwloc_obj_t root = hwloc_get_root_obj(walk.topology);
  copyText(sys->arch, sizeof(sys->arch), info(root, "Architecture"));
  copyText(sys->hostModel, sizeof(sys->hostModel), info(root, "DMIProductName"));
  sys->npus = hwloc_get_nbobjs_by_type(walk.topology, HWLOC_OBJ_PU);
  sys->ncores = hwloc_get_nbobjs_by_type(walk.topology, HWLOC_OBJ_CORE);
  loadPackages(&walk);
  loadNuma(&walk);
  if (loadPci(&walk, root) != 0) goto destroy;
  attachGpus(sys);
  status = 0;
destroy:
  hwloc_topology_destroy(walk.topology);
  return status;
}
