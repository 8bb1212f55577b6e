/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NVLink facts from NVML, reached through dlopen("libnvidia-ml.so.1") so the tool runs (and says "NVML
 * unavailable") where the driver's management library is missing. There is no nvml.h on build machines: the few
 * declarations below follow NVML's documented C API (NVML API Reference Guide, "NvLink Methods", "Device Structs",
 * "Field Value Queries"), including the layout of the structures passed by pointer.
 */
#include "topo.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* ---- the subset of nvml.h we use ------------------------------------------------------------------------------- */

typedef int nvmlReturn_t; /* an enum in nvml.h: int-sized */
#define NVML_SUCCESS 0

typedef struct nvmlDevice_st* nvmlDevice_t;

typedef enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

typedef enum {
  NVML_NVLINK_CAP_P2P_SUPPORTED = 0,
  NVML_NVLINK_CAP_SYSMEM_ACCESS = 1,
  NVML_NVLINK_CAP_P2P_ATOMICS = 2,
  NVML_NVLINK_CAP_SYSMEM_ATOMICS = 3,
  NVML_NVLINK_CAP_SLI_BRIDGE = 4,
  NVML_NVLINK_CAP_VALID = 5
} nvmlNvLinkCapability_t;

typedef enum {
  NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
  NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
  NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
  NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} nvmlIntNvLinkDeviceType_t;

/* nvmlPciInfo_t as the _v2 entry points fill it (NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16, _BUFFER_SIZE 32). */
typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

typedef enum {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
} nvmlValueType_t;

typedef union {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
} nvmlValue_t;

typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  nvmlValueType_t valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;

#define NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON 90 /* common NVLink speed of active links, MBps */
#define NVML_FI_DEV_NVLINK_GET_SPEED 164        /* per link (scopeId): speed in MBps */
#define NVML_FI_DEV_NVLINK_GET_STATE 165        /* per link (scopeId): NVML_FEATURE_ENABLED or _DISABLED */

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t layout");

/* ---- loading ----------------------------------------------------------------------------------------------------- */

typedef struct {
  void* handle;
  nvmlReturn_t (*init)(void);
  nvmlReturn_t (*shutdown)(void);
  const char* (*errorString)(nvmlReturn_t);
  nvmlReturn_t (*getHandleByPciBusId)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*getNvLinkState)(nvmlDevice_t, unsigned int, nvmlEnableState_t*);
  nvmlReturn_t (*getNvLinkVersion)(nvmlDevice_t, unsigned int, unsigned int*);
  nvmlReturn_t (*getNvLinkRemotePciInfo)(nvmlDevice_t, unsigned int, nvmlPciInfo_t*);
  nvmlReturn_t (*getNvLinkCapability)(nvmlDevice_t, unsigned int, nvmlNvLinkCapability_t, unsigned int*);
  /* optional: older drivers lack them */
  nvmlReturn_t (*getNvLinkRemoteDeviceType)(nvmlDevice_t, unsigned int, nvmlIntNvLinkDeviceType_t*);
  nvmlReturn_t (*getFieldValues)(nvmlDevice_t, int, nvmlFieldValue_t*);
} nvmlApi_t;

static int loadSymbol(nvmlApi_t* api, const char* name, void** target, int required, topoSystem_t* sys) {
  *target = dlsym(api->handle, name);
  if (*target == NULL && required) {
    snprintf(sys->nvmlStatus, sizeof(sys->nvmlStatus), "libnvidia-ml.so.1 has no %s", name);
    return -1;
  }
  return 0;
}

static int loadNvml(nvmlApi_t* api, topoSystem_t* sys) {
  memset(api, 0, sizeof(*api));
  api->handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (api->handle == NULL) {
    const char* why = dlerror();
    snprintf(sys->nvmlStatus, sizeof(sys->nvmlStatus), "cannot load libnvidia-ml.so.1 (%s)", why ? why : "not found");
    return -1;
  }
  struct {
    const char* name;
    void** target;
    int required;
  } symbols[] = {
      {"nvmlInit_v2", (void**)&api->init, 1},
      {"nvmlShutdown", (void**)&api->shutdown, 1},
      {"nvmlErrorString", (void**)&api->errorString, 1},
      {"nvmlDeviceGetHandleByPciBusId_v2", (void**)&api->getHandleByPciBusId, 1},
      {"nvmlDeviceGetNvLinkState", (void**)&api->getNvLinkState, 1},
      {"nvmlDeviceGetNvLinkVersion", (void**)&api->getNvLinkVersion, 1},
      {"nvmlDeviceGetNvLinkRemotePciInfo_v2", (void**)&api->getNvLinkRemotePciInfo, 1},
      {"nvmlDeviceGetNvLinkCapability", (void**)&api->getNvLinkCapability, 1},
      {"nvmlDeviceGetNvLinkRemoteDeviceType", (void**)&api->getNvLinkRemoteDeviceType, 0},
      {"nvmlDeviceGetFieldValues", (void**)&api->getFieldValues, 0},
  };
  for (size_t s = 0; s < sizeof(symbols) / sizeof(symbols[0]); s++) {
    if (loadSymbol(api, symbols[s].name, symbols[s].target, symbols[s].required, sys) != 0) {
      dlclose(api->handle);
      api->handle = NULL;
      return -1;
    }
  }
  nvmlReturn_t ret = api->init();
  if (ret != NVML_SUCCESS) {
    snprintf(sys->nvmlStatus, sizeof(sys->nvmlStatus), "nvmlInit_v2 failed: %s", api->errorString(ret));
    dlclose(api->handle);
    api->handle = NULL;
    return -1;
  }
  return 0;
}

static unsigned long long fieldValue(const nvmlFieldValue_t* field) {
  switch (field->valueType) {
    case NVML_VALUE_TYPE_DOUBLE: return field->value.dVal > 0 ? (unsigned long long)field->value.dVal : 0;
    case NVML_VALUE_TYPE_UNSIGNED_INT: return field->value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: return field->value.ulVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return field->value.ullVal;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return field->value.sllVal > 0 ? (unsigned long long)field->value.sllVal : 0;
    default: return 0;
  }
}

/* 1 when the field could be read (its value in *value). */
static int readField(const nvmlApi_t* api, nvmlDevice_t device, unsigned field, unsigned scope,
                     unsigned long long* value) {
  if (api->getFieldValues == NULL) return 0;
  nvmlFieldValue_t fv;
  memset(&fv, 0, sizeof(fv));
  fv.fieldId = field;
  fv.scopeId = scope;
  if (api->getFieldValues(device, 1, &fv) != NVML_SUCCESS || fv.nvmlReturn != NVML_SUCCESS) return 0;
  *value = fieldValue(&fv);
  return 1;
}

static void remoteBusId(const nvmlPciInfo_t* pci, topoBusId_t* remote) {
  memset(remote, 0, sizeof(*remote));
  char text[33];
  memcpy(text, pci->busId, sizeof(pci->busId));
  text[32] = '\0';
  if (topoBusIdParse(text, remote) != 0) {
    remote->valid = 1;
    remote->domain = pci->domain;
    remote->bus = pci->bus;
    remote->dev = pci->device;
    remote->func = 0;
  }
  /* A remote the OS does not show (an NVSwitch seen from a VM) comes back as all ones. */
  if (remote->domain >= 0xffff0000u || remote->bus > 0xff || remote->dev > 0x1f) remote->valid = 0;
}

static void queryGpu(const nvmlApi_t* api, topoGpu_t* gpu) {
  char bus[32];
  topoBusIdFormat(&gpu->busId, bus, sizeof(bus));
  nvmlDevice_t device;
  if (!gpu->busId.valid || api->getHandleByPciBusId(bus, &device) != NVML_SUCCESS) return;
  gpu->nvlinkQueried = 1;
  /* NCCL's bound: links a GPU of this generation can have. */
  int maxLinks = gpu->ccMajor < 6 ? 0 : gpu->ccMajor < 7 ? 4 : gpu->ccMajor < 8 ? 6 : gpu->ccMajor < 9 ? 12 : 18;
  for (int l = 0; l < maxLinks && gpu->nlinks < TOPO_MAX_LINKS; l++) {
    unsigned int p2p = 0;
    if (api->getNvLinkCapability(device, (unsigned)l, NVML_NVLINK_CAP_P2P_SUPPORTED, &p2p) != NVML_SUCCESS || !p2p)
      continue;
    topoNvLink_t* link = &gpu->links[gpu->nlinks];
    memset(link, 0, sizeof(*link));
    link->link = l;
    /* Hopper and later report link state through field values (as NCCL reads it there); older GPUs through
     * nvmlDeviceGetNvLinkState. Either may be missing: try both. */
    unsigned long long state = 0;
    nvmlEnableState_t enabled = NVML_FEATURE_DISABLED;
    if (gpu->ccMajor >= 9 && readField(api, device, NVML_FI_DEV_NVLINK_GET_STATE, (unsigned)l, &state))
      link->active = state == NVML_FEATURE_ENABLED;
    else if (api->getNvLinkState(device, (unsigned)l, &enabled) == NVML_SUCCESS)
      link->active = enabled == NVML_FEATURE_ENABLED;
    unsigned int version = 0;
    if (api->getNvLinkVersion(device, (unsigned)l, &version) == NVML_SUCCESS) link->version = version;
    nvmlPciInfo_t pci;
    memset(&pci, 0, sizeof(pci));
    if (api->getNvLinkRemotePciInfo(device, (unsigned)l, &pci) == NVML_SUCCESS) remoteBusId(&pci, &link->remote);
    nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    link->remoteType = TOPO_REMOTE_UNKNOWN;
    if (api->getNvLinkRemoteDeviceType && api->getNvLinkRemoteDeviceType(device, (unsigned)l, &type) == NVML_SUCCESS) {
      if (type == NVML_NVLINK_DEVICE_TYPE_GPU)
        link->remoteType = TOPO_REMOTE_GPU;
      else if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH)
        link->remoteType = TOPO_REMOTE_SWITCH;
      else if (type == NVML_NVLINK_DEVICE_TYPE_IBMNPU)
        link->remoteType = TOPO_REMOTE_CPU;
    }
    gpu->nlinks++;
  }
  /* The speed of one link and direction: the common speed of active links where NVML has it, else the first active
   * link's own speed (Hopper answers only the per-link field). */
  unsigned long long mbps = 0;
  int firstActive = -1;
  for (int k = 0; k < gpu->nlinks && firstActive < 0; k++)
    if (gpu->links[k].active) firstActive = gpu->links[k].link;
  if (firstActive >= 0 && (readField(api, device, NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON, 0, &mbps) ||
                           readField(api, device, NVML_FI_DEV_NVLINK_GET_SPEED, (unsigned)firstActive, &mbps)))
    gpu->nvlinkMBps = mbps < UINT32_MAX ? (unsigned)mbps : 0;
}

void topoNvmlQuery(topoSystem_t* sys) {
  nvmlApi_t api;
  if (loadNvml(&api, sys) != 0) {
    sys->nvmlAvailable = 0;
    topoNote(sys, "NVML unavailable: %s; NVLink links are not shown", sys->nvmlStatus);
    return;
  }
  sys->nvmlAvailable = 1;
  for (int g = 0; g < sys->ngpus; g++) queryGpu(&api, &sys->gpus[g]);
  api.shutdown();
  dlclose(api.handle);
}
