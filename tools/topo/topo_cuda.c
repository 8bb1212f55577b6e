/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPUs as CUDA sees them: properties, peer capabilities (cudaDeviceCanAccessPeer, cudaDeviceGetP2PAttribute) and
 * what fccl's peer-memory layer keys on (cuMem with POSIX file descriptors, through the driver entry points that
 * src/include/cudawrap.h resolves). No GPU is not an error: the report says so and shows the host.
 */
#include "cuda_status.h"
#include "cudawrap.h"
#include "fccl.h"
#include "topo.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

static void formatUuid(const unsigned char* bytes, char* buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "GPU-");
  for (int i = 0; i < 16 && used < len; i++)
    used +=
        (size_t)snprintf(buf + used, len - used, "%02x%s", bytes[i], (i == 3 || i == 5 || i == 7 || i == 9) ? "-" : "");
}

static int driverAttribute(CUdevice device, CUdevice_attribute attribute) {
  int value = 0;
  if (pfn_cuDeviceGetAttribute(&value, attribute, device) != CUDA_SUCCESS) return -1;
  return value != 0;
}

static void queryPeers(topoSystem_t* sys) {
  for (int i = 0; i < sys->ngpus; i++) {
    for (int j = 0; j < sys->ngpus; j++) {
      if (i == j) continue;
      topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
      int value = 0;
      peer->known = 1;
      if (cudaDeviceCanAccessPeer(&value, i, j) == cudaSuccess) peer->canAccess = value != 0;
      if (cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, i, j) == cudaSuccess)
        peer->access = value != 0;
      if (cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrNativeAtomicSupported, i, j) == cudaSuccess)
        peer->atomics = value != 0;
      if (cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrPerformanceRank, i, j) == cudaSuccess) peer->rank = value;
      (void)cudaGetLastError();
    }
  }
}

int topoCudaQuery(topoSystem_t* sys, char* err, size_t errLen) {
  sys->cudaQueried = 1;
  sys->gpuSource = TOPO_SRC_LIVE;
  /* The driver and the reason for no GPU in fccl-info's words (a machine without a driver says so, rather than
   * CUDA's "driver version is insufficient"). */
  toolCudaStatus_t cuda;
  toolCudaQuery(&cuda);
  sys->driverVersion = cuda.driverVersion;
  sys->runtimeVersion = cuda.runtimeVersion;
  sys->noDriver = cuda.noDriver;
  const int count = cuda.deviceCount;
  if (count == 0) {
    snprintf(sys->cudaStatus, sizeof(sys->cudaStatus), "%s", cuda.noGpu);
    return 0;
  }
  if (topoSetGpuCount(sys, count, err, errLen) != 0) return -1;
  int haveDriver = fcclCudaDriverLoad() == fcclSuccess;
  if (!haveDriver)
    topoNote(sys, "CUDA driver entry points unavailable (%s): cuMem support unknown", fcclGetLastError(NULL));
  for (int d = 0; d < count; d++) {
    topoGpu_t* gpu = &sys->gpus[d];
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(gpu->name, sizeof(gpu->name), "%s", "(properties unavailable)");
      continue;
    }
    size_t nameLen = strnlen(prop.name, sizeof(prop.name));
    if (nameLen >= sizeof(gpu->name)) nameLen = sizeof(gpu->name) - 1;
    memcpy(gpu->name, prop.name, nameLen);
    gpu->name[nameLen] = '\0';
    formatUuid((const unsigned char*)prop.uuid.bytes, gpu->uuid, sizeof(gpu->uuid));
    gpu->ccMajor = prop.major;
    gpu->ccMinor = prop.minor;
    gpu->smCount = prop.multiProcessorCount;
    gpu->memoryBytes = prop.totalGlobalMem;
    gpu->busId.valid = 1;
    gpu->busId.domain = (unsigned)prop.pciDomainID;
    gpu->busId.bus = (unsigned)prop.pciBusID;
    gpu->busId.dev = (unsigned)prop.pciDeviceID;
    gpu->busId.func = 0;
    if (haveDriver) {
      CUdevice device;
      if (pfn_cuDeviceGet(&device, d) == CUDA_SUCCESS) {
        gpu->vmm = driverAttribute(device, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
        gpu->posixFd = driverAttribute(device, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
        gpu->gdr = driverAttribute(device, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
      }
    }
  }
  queryPeers(sys);
  return 0;
}

/*
 * --verify-p2p: with peer access enabled, cudaMemcpyPeer moves data over the peer path (without it, the runtime
 * would stage through host memory and prove nothing). A pattern unique to the pair goes from GPU i into GPU j's
 * memory, comes back into a second buffer on GPU i, and both copies are compared on the host.
 */
#define TOPO_VERIFY_BYTES (1u << 20)

static void pairFailed(topoPeer_t* peer, const char* what, cudaError_t status) {
  peer->verified = TOPO_VERIFY_FAILED;
  snprintf(peer->verifyError, sizeof(peer->verifyError), "%s: %s", what, cudaGetErrorString(status));
  (void)cudaGetLastError();
}

static void verifyPair(topoSystem_t* sys, int i, int j, unsigned char** buffers, uint32_t* pattern, uint32_t* check) {
  topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
  const size_t words = TOPO_VERIFY_BYTES / sizeof(uint32_t);
  for (size_t w = 0; w < words; w++)
    pattern[w] = (uint32_t)(0x9e3779b9u * (uint32_t)(w + 1)) ^ (uint32_t)(i << 24 | j << 16);
  cudaError_t status = cudaSetDevice(i);
  if (status != cudaSuccess) {
    pairFailed(peer, "cudaSetDevice", status);
    return;
  }
  int enabledHere = 0;
  status = cudaDeviceEnablePeerAccess(j, 0);
  if (status == cudaSuccess) {
    enabledHere = 1;
  } else if (status == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
  } else {
    pairFailed(peer, "cudaDeviceEnablePeerAccess", status);
    return;
  }
  unsigned char* local = buffers[i];
  unsigned char* localBack = buffers[i] + TOPO_VERIFY_BYTES;
  unsigned char* remote = buffers[j];
  const char* step = "cudaMemcpy to GPU";
  status = cudaMemcpy(local, pattern, TOPO_VERIFY_BYTES, cudaMemcpyHostToDevice);
  if (status == cudaSuccess) {
    step = "cudaMemcpyPeer write";
    status = cudaMemcpyPeer(remote, j, local, i, TOPO_VERIFY_BYTES);
  }
  if (status == cudaSuccess) {
    step = "cudaMemcpyPeer read-back";
    status = cudaMemcpyPeer(localBack, i, remote, j, TOPO_VERIFY_BYTES);
  }
  if (status == cudaSuccess) {
    step = "cudaDeviceSynchronize";
    status = cudaDeviceSynchronize();
  }
  if (status != cudaSuccess) {
    pairFailed(peer, step, status);
  } else {
    peer->verified = TOPO_VERIFY_OK;
    const char* copies[2] = {"the peer's copy", "the copy read back"};
    const unsigned char* sources[2] = {remote, localBack};
    for (int c = 0; c < 2 && peer->verified == TOPO_VERIFY_OK; c++) {
      status = cudaMemcpy(check, sources[c], TOPO_VERIFY_BYTES, cudaMemcpyDeviceToHost);
      if (status != cudaSuccess) {
        pairFailed(peer, "cudaMemcpy to host", status);
      } else if (memcmp(check, pattern, TOPO_VERIFY_BYTES) != 0) {
        peer->verified = TOPO_VERIFY_FAILED;
        snprintf(peer->verifyError, sizeof(peer->verifyError), "%s differs from what GPU%d wrote", copies[c], i);
      }
    }
  }
  if (enabledHere) {
    (void)cudaSetDevice(i);
    (void)cudaDeviceDisablePeerAccess(j);
    (void)cudaGetLastError();
  }
}

int topoCudaVerifyP2p(topoSystem_t* sys, char* err, size_t errLen) {
  sys->verifyRan = 1;
  if (sys->ngpus < 2) return 0;
  int status = -1;
  unsigned char* buffers[TOPO_MAX_GPUS] = {NULL};
  uint32_t* pattern = malloc(TOPO_VERIFY_BYTES);
  uint32_t* check = malloc(TOPO_VERIFY_BYTES);
  if (pattern == NULL || check == NULL) {
    snprintf(err, errLen, "out of host memory for the P2P check");
    goto cleanup;
  }
  for (int g = 0; g < sys->ngpus; g++) {
    cudaError_t e = cudaSetDevice(g);
    if (e == cudaSuccess) e = cudaMalloc((void**)&buffers[g], 2 * TOPO_VERIFY_BYTES);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      buffers[g] = NULL;
      snprintf(err, errLen, "cannot allocate the P2P check buffers on GPU%d: %s", g, cudaGetErrorString(e));
      goto cleanup;
    }
  }
  for (int i = 0; i < sys->ngpus; i++) {
    for (int j = 0; j < sys->ngpus; j++) {
      topoPeer_t* peer = &sys->peers[i * sys->ngpus + j];
      if (i == j || !peer->known || !peer->canAccess || !peer->access) continue;
      verifyPair(sys, i, j, buffers, pattern, check);
    }
  }
  status = 0;
cleanup:
  for (int g = 0; g < sys->ngpus; g++) {
    if (buffers[g] == NULL) continue;
    (void)cudaSetDevice(g);
    (void)cudaFree(buffers[g]);
  }
  (void)cudaGetLastError();
  free(check);
  free(pattern);
  return status;
}
