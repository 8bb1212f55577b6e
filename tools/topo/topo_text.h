/* SPDX-License-Identifier: Apache-2.0 */
/* Wording shared by the human and JSON outputs, so both say the same thing in the same words. */
#ifndef FCCL_TOPO_TEXT_H_
#define FCCL_TOPO_TEXT_H_

#include "topo.h"

/* { name, meaning } rows of the matrix legend, ending with { "", "" }. */
extern const char* const topoLegend[][2];

void topoFormatBytes(uint64_t bytes, char* buf, size_t len);    /* "79.6 GiB" */
void topoFormatSize(size_t bytes, char* buf, size_t len);       /* "64 KiB" (powers of two) */
void topoFormatCudaVersion(int version, char* buf, size_t len); /* 13000 -> "13.0", 0 -> "unknown" */
const char* topoPciClassName(unsigned classId);                 /* "3D controller", "InfiniBand", ... */

/* Where the host and GPU facts came from: "this machine (hwloc, CUDA, NVML)", "host from X.xml, GPUs from X.facts". */
void topoSourceText(const topoSystem_t* sys, char* buf, size_t len);
/* A GPU's local NUMA nodes ("0", "0-1") or "N/A" when hwloc does not place it. */
void topoGpuNuma(const topoSystem_t* sys, const topoGpu_t* gpu, char* buf, size_t len);
/* "18/18 links up, NVLink 4.0, 26.562 GB/s per link each way (478.1 GB/s)". */
void topoNvLinkSummary(const topoGpu_t* gpu, char* buf, size_t len);
/* Per-link speed in GB/s each way: NVML's when recorded, else the version's nominal speed (0: unknown). */
double topoNvLinkGBs(const topoGpu_t* gpu);
/* "GPU1 (0000:43:00.0)", "NVSwitch 0000:05:00.0", "an NVSwitch the OS does not show". */
void topoNvGroupRemote(const topoSystem_t* sys, const topoNvGroup_t* group, char* buf, size_t len);
/* One line of the PCI tree. */
void topoPciNodeText(const topoSystem_t* sys, const topoPciNode_t* node, char* buf, size_t len);

/* fccl's decisions in words. */
void topoIpcSummary(const topoSystem_t* sys, char* buf, size_t len);
void topoP2pSummary(const topoSystem_t* sys, char* buf, size_t len);
void topoKernelSummary(const topoSystem_t* sys, char* buf, size_t len);
/* The IPC mechanism every GPU agrees on ("cumem", "legacy"), "mixed" or "unknown". */
const char* topoIpcOverall(const topoSystem_t* sys);

#endif /* FCCL_TOPO_TEXT_H_ */
