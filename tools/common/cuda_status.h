/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What CUDA says about this machine's driver and GPUs, in one wording for every tool (fccl-info, fccl-topo, the
 * benchmark), so that they agree. Without any NVIDIA driver the CUDA runtime answers cudaErrorInsufficientDriver,
 * "CUDA driver version is insufficient for CUDA runtime version", which sends people to upgrade a driver they do not
 * have: when no /dev/nvidia* device node exists or libcuda.so.1 cannot be loaded, the tools say "no NVIDIA driver
 * found" and what is missing instead.
 */
#ifndef FCCL_TOOL_CUDA_STATUS_H_
#define FCCL_TOOL_CUDA_STATUS_H_

#include <cuda_runtime.h>
#include <stddef.h>

typedef struct {
  int driverVersion;  /* the CUDA version the driver supports (cudaDriverGetVersion: 13000); 0: none */
  int runtimeVersion; /* cudaRuntimeGetVersion; 0: unknown */
  int deviceCount;    /* GPUs CUDA lists (0 on an error) */
  int noDriver;       /* no NVIDIA driver on this machine */
  char driver[96];    /* the driver in words: "13.0", "none (no NVIDIA driver found)", "unknown (...)" */
  char noGpu[256];    /* why no GPU is listed; "" when deviceCount > 0 */
} toolCudaStatus_t;

/* Asks CUDA (cudaDriverGetVersion, cudaRuntimeGetVersion, cudaGetDeviceCount) and this machine (device nodes,
 * libcuda), and clears CUDA's sticky error. */
void toolCudaQuery(toolCudaStatus_t* status);

/* toolCudaQuery's conclusions from what it saw: status's three versions and count filled in, countError what
 * cudaGetDeviceCount returned, deviceNodes and libcuda whether /dev/nvidia* (or WSL's /dev/dxg) exists and
 * libcuda.so.1 loads, visibleDevices CUDA_VISIBLE_DEVICES (NULL: unset). */
void toolCudaDescribe(toolCudaStatus_t* status, cudaError_t countError, int deviceNodes, int libcuda,
                      const char* visibleDevices);

/* Every tool that needs a GPU and finds none (the benchmarks, fccl-call-cost, fccl-faultbench, fused_norm_perf)
 * exits with this status, the one of a command line it cannot run, after toolReportNoGpu's one line. A test harness
 * that wants meson's skip (77) maps it: test/gpu/skip_without_gpu.sh. */
#define TOOL_EXIT_NO_GPU 2

/* "PROGRAM: no GPU to run on: REASON" on stderr (REASON: toolCudaStatus_t.noGpu); returns TOOL_EXIT_NO_GPU. */
int toolReportNoGpu(const char* program, const char* reason);

/* toolCudaQuery in a child process, for programs that fork ranks afterwards (a CUDA context does not survive fork,
 * so the parent must never create one). A child that fails or gives no answer within timeoutSec (it is killed)
 * leaves deviceCount 0 and noGpu saying so. */
void toolCudaQueryInChild(toolCudaStatus_t* status, int timeoutSec);

#endif /* FCCL_TOOL_CUDA_STATUS_H_ */
