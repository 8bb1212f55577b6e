/*
 * fccl-info: what this build of fccl is and what it sees. Runs without a GPU (it says so and prints the rest).
 *   fccl-info            version, build configuration, CUDA driver/runtime, visible GPUs
 *   fccl-info --params   also every environment parameter with its current value and default
 */
#include "fccl.h"
#include "fccl_build_config.h"
#include "param.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

static void printVersion(int code) { printf("%d.%d.%d", code / 10000, (code / 100) % 100, code % 100); }

static void printBuild(void) {
  int libraryVersion = 0;
  fcclGetVersion(&libraryVersion);
  printf("fccl version      : ");
  printVersion(libraryVersion);
  printf(" (header ");
  printVersion(FCCL_VERSION_CODE);
  printf(")\n");
  printf("build type        : %s\n", FCCL_BUILD_TYPE);
  printf("built with CUDA   : %s, gpu_archs '%s'\n", FCCL_BUILD_CUDA_VERSION, FCCL_BUILD_GPU_ARCHS);
  printf("NCCL support      : %s\n", FCCL_HAVE_NCCL ? "yes" : "no");
  printf("hwloc support     : %s\n", FCCL_HAVE_HWLOC ? "yes" : "no");
  printf("MPI support       : %s\n", FCCL_HAVE_MPI ? "yes" : "no");
}

static void printCudaVersion(const char* label, cudaError_t status, int version) {
  if (status != cudaSuccess)
    printf("%-18s: unavailable (%s)\n", label, cudaGetErrorString(status));
  else if (version == 0)
    printf("%-18s: none (no CUDA driver installed)\n", label);
  else
    printf("%-18s: %d.%d\n", label, version / 1000, (version % 1000) / 10);
}

/* Returns the number of GPUs listed. */
static int printDevices(void) {
  int driverVersion = 0, runtimeVersion = 0;
  /* Separate statements: the version must be read after the call fills it. */
  cudaError_t driverStatus = cudaDriverGetVersion(&driverVersion);
  cudaError_t runtimeStatus = cudaRuntimeGetVersion(&runtimeVersion);
  printCudaVersion("CUDA driver", driverStatus, driverVersion);
  printCudaVersion("CUDA runtime", runtimeStatus, runtimeVersion);
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    printf("GPUs              : none found (%s)\n",
           status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device visible");
    return 0;
  }
  printf("GPUs              : %d\n", count);
  for (int dev = 0; dev < count; dev++) {
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      printf("  [%d] properties unavailable\n", dev);
      continue;
    }
    char busId[32] = "?";
    cudaDeviceGetPCIBusId(busId, sizeof(busId), dev);
    printf("  [%d] %s  cc %d.%d  %d SMs  %.1f GiB  pci %s  uuid ", dev, prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), busId);
    for (int i = 0; i < 16; i++) printf("%02x%s", (unsigned char)prop.uuid.bytes[i], (i == 3 || i == 5 || i == 7 || i == 9) ? "-" : "");
    printf("\n");
    for (int peer = 0; peer < count; peer++) {
      if (peer == dev) continue;
      int canAccess = 0;
      cudaDeviceCanAccessPeer(&canAccess, dev, peer);
      printf("      peer access to [%d]: %s\n", peer, canAccess ? "yes" : "no");
    }
  }
  return count;
}

static void printParams(void) {
  printf("\nEnvironment parameters (value / default):\n");
  for (int id = 0; id < FCCL_PARAM_COUNT; id++) {
    const fcclParamInfo_t* info = fcclParamInfo((fcclParamId_t)id);
    printf("  %-24s = %-16s (default \"%s\"%s)\n      %s\n", info->name, fcclParamString((fcclParamId_t)id),
           info->defaultValue, fcclParamIsSet((fcclParamId_t)id) ? ", set" : "", info->doc);
  }
}

int main(int argc, char** argv) {
  int showParams = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--params") == 0) {
      showParams = 1;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: %s [--params]\n", argv[0]);
      return 0;
    } else {
      fprintf(stderr, "%s: unknown option %s (try --help)\n", argv[0], argv[i]);
      return 2;
    }
  }
  fcclParamWarnUnknown();
  printBuild();
  printDevices();
  if (showParams) printParams();
  return 0;
}
