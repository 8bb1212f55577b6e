/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fccl-call-cost: the host time of an eager collective call, step by step, on one GPU. A communicator of one rank
 * makes the GPU side trivial, so what is timed is what the calling thread spends: the CUDA queries a call makes
 * (device, stream, pointer checks), an empty kernel's launch (the floor: a one-line PTX kernel taking as many
 * parameter bytes as fccl's all-reduce kernels), and fcclBarrier / fcclAllReduce as a whole, beside
 * ncclAllReduce on a one-rank NCCL communicator when NCCL is built in. Calls are timed in batches of BATCH without
 * waiting for the GPU (the stream's queue holds them), then the stream is drained outside the timing. Run with
 * FCCL_PATH=nccl, the fccl steps are the NCCL path's: beside ncclAllReduce (also in batches alternating with it, so
 * that the machine's drift cancels) they give what fccl's wrapper costs.
 *   fccl-call-cost [-n batches] [-b bytes] [-d device] [-h]
 * Prints one line per step: median and minimum nanoseconds per call over the batches. FCCL_ALGO is set to ll
 * unless given: a one-rank all-reduce would otherwise be a plain copy, not the kernel launch of a real call.
 */
#include "cuda_status.h"
#include "fccl.h"
#include "fccl_build_config.h"

#include "options.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if FCCL_HAVE_NCCL
#include <nccl.h>
#endif

#define BATCH 256
#define MAX_BATCHES 1000
#define EMPTY_PARAM_BYTES 352 /* sizeof(fcclDevComm) + sizeof(fcclDevArgs) */

/* JIT-compiled by the driver: no nvcc in a C tool. */
static const char kEmptyKernelPtx[] =
    ".version 7.8\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry fcclCallCostEmpty(.param .align 8 .b8 args[352])\n"
    "{\n"
    "  ret;\n"
    "}\n";

struct driverApi {
  CUresult (*pointerGetAttributes)(unsigned count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr);
  CUresult (*moduleLoadData)(CUmodule* module, const void* image);
  CUresult (*moduleGetFunction)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*moduleUnload)(CUmodule module);
  CUresult (*launchKernel)(CUfunction f, unsigned gridX, unsigned gridY, unsigned gridZ, unsigned blockX,
                           unsigned blockY, unsigned blockZ, unsigned sharedBytes, CUstream stream, void** params,
                           void** extra);
};

struct context {
  cudaStream_t stream;
  void* send;
  void* recv;
  void* registered;
  size_t bytes;
  fcclComm_t comm;
  struct driverApi cu;
  CUmodule module;
  CUfunction empty;
  unsigned char emptyArgs[EMPTY_PARAM_BYTES];
#if FCCL_HAVE_NCCL
  ncclComm_t nccl;
#endif
  int failed;
};

typedef int (*stepFn)(struct context* ctx);

static double nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Times `batches` batches of BATCH calls of step; the stream is synchronised after each batch, untimed. */
static void measure(const char* name, stepFn step, struct context* ctx, int batches) {
  static double perCall[MAX_BATCHES];
  for (int b = 0; b < batches; b++) {
    double start = nowNs();
    for (int i = 0; i < BATCH; i++) {
      if (step(ctx) != 0) {
        printf("%-44s failed\n", name);
        ctx->failed = 1;
        (void)cudaStreamSynchronize(ctx->stream);
        return;
      }
    }
    perCall[b] = (nowNs() - start) / BATCH;
    if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
      printf("%-44s stream failed\n", name);
      ctx->failed = 1;
      return;
    }
  }
  qsort(perCall, (size_t)batches, sizeof(double), compareDoubles);
  printf("%-44s %9.0f %9.0f\n", name, perCall[batches / 2], perCall[0]);
}

#if FCCL_HAVE_NCCL
/* Times step a and step b in alternating batches, so that drift of the machine falls on both alike, and prints
 * each one's median and minimum and the median of the per-pair differences (a's batch less the b batch after it):
 * with a an fccl call on the NCCL path and b the same NCCL call, that difference is what fccl's wrapper adds. */
static void measurePair(const char* nameA, stepFn a, const char* nameB, stepFn b, struct context* ctx, int batches) {
  static double perCallA[MAX_BATCHES], perCallB[MAX_BATCHES], difference[MAX_BATCHES];
  for (int n = 0; n < batches; n++) {
    for (int which = 0; which < 2; which++) {
      const stepFn step = which == 0 ? a : b;
      double start = nowNs();
      for (int i = 0; i < BATCH; i++) {
        if (step(ctx) != 0) {
          printf("%-44s failed\n", which == 0 ? nameA : nameB);
          ctx->failed = 1;
          (void)cudaStreamSynchronize(ctx->stream);
          return;
        }
      }
      (which == 0 ? perCallA : perCallB)[n] = (nowNs() - start) / BATCH;
      if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
        printf("%-44s stream failed\n", which == 0 ? nameA : nameB);
        ctx->failed = 1;
        return;
      }
    }
    difference[n] = perCallA[n] - perCallB[n];
  }
  qsort(perCallA, (size_t)batches, sizeof(double), compareDoubles);
  qsort(perCallB, (size_t)batches, sizeof(double), compareDoubles);
  qsort(difference, (size_t)batches, sizeof(double), compareDoubles);
  printf("%-44s %9.0f %9.0f\n", nameA, perCallA[batches / 2], perCallA[0]);
  printf("%-44s %9.0f %9.0f\n", nameB, perCallB[batches / 2], perCallB[0]);
  printf("%-44s %9.0f %9.0f\n", "  difference, batch by batch", difference[batches / 2], difference[0]);
}
#endif

static int stepGetDevice(struct context* ctx) {
  (void)ctx;
  int dev = -1;
  return cudaGetDevice(&dev) != cudaSuccess;
}

static int stepStreamChecks(struct context* ctx) {
  enum cudaStreamCaptureStatus capture;
  int dev = -1;
  return cudaStreamIsCapturing(ctx->stream, &capture) != cudaSuccess ||
         cudaStreamGetDevice(ctx->stream, &dev) != cudaSuccess;
}

static int stepRuntimePointer(struct context* ctx) {
  struct cudaPointerAttributes attr;
  return cudaPointerGetAttributes(&attr, ctx->send) != cudaSuccess || attr.type != cudaMemoryTypeDevice;
}

static int stepDriverPointer(struct context* ctx) {
  CUpointer_attribute attributes[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                       CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned memoryType = 0, managed = 0;
  int ordinal = -1;
  void* data[3] = {&memoryType, &ordinal, &managed};
  return ctx->cu.pointerGetAttributes(3, attributes, data, (CUdeviceptr)(uintptr_t)ctx->send) != CUDA_SUCCESS ||
         memoryType != CU_MEMORYTYPE_DEVICE;
}

static int stepMemset(struct context* ctx) { return cudaMemsetAsync(ctx->recv, 0, 4, ctx->stream) != cudaSuccess; }

static int stepEmptyKernel(struct context* ctx) {
  void* params[] = {ctx->emptyArgs};
  return ctx->cu.launchKernel(ctx->empty, 1, 1, 1, 32, 1, 1, 0, (CUstream)ctx->stream, params, NULL) != CUDA_SUCCESS;
}

static int stepBarrier(struct context* ctx) { return fcclBarrier(ctx->comm, ctx->stream) != fcclSuccess; }

static int stepAllReduce(struct context* ctx) {
  return fcclAllReduce(ctx->send, ctx->recv, ctx->bytes / 2, fcclBfloat16, fcclSum, ctx->comm, ctx->stream) !=
         fcclSuccess;
}

static int stepAllReduceInPlace(struct context* ctx) {
  return fcclAllReduce(ctx->recv, ctx->recv, ctx->bytes / 2, fcclBfloat16, fcclSum, ctx->comm, ctx->stream) !=
         fcclSuccess;
}

static int stepAllReduceRegistered(struct context* ctx) {
  return fcclAllReduce(ctx->registered, ctx->registered, ctx->bytes / 2, fcclBfloat16, fcclSum, ctx->comm,
                       ctx->stream) != fcclSuccess;
}

#if FCCL_HAVE_NCCL
static int stepNcclAllReduce(struct context* ctx) {
  return ncclAllReduce(ctx->send, ctx->recv, ctx->bytes / 2, ncclBfloat16, ncclSum, ctx->nccl, ctx->stream) !=
         ncclSuccess;
}

static int stepNcclAllReduceInPlace(struct context* ctx) {
  return ncclAllReduce(ctx->recv, ctx->recv, ctx->bytes / 2, ncclBfloat16, ncclSum, ctx->nccl, ctx->stream) !=
         ncclSuccess;
}
#endif

static int loadSymbol(const char* name, void** target) {
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  return cudaGetDriverEntryPointByVersion(name, target, 12000, cudaEnableDefault, &found) == cudaSuccess &&
         found == cudaDriverEntryPointSuccess && *target != NULL;
}

static int loadDriver(struct driverApi* cu) {
  return loadSymbol("cuPointerGetAttributes", (void**)&cu->pointerGetAttributes) &&
         loadSymbol("cuModuleLoadData", (void**)&cu->moduleLoadData) &&
         loadSymbol("cuModuleGetFunction", (void**)&cu->moduleGetFunction) &&
         loadSymbol("cuModuleUnload", (void**)&cu->moduleUnload) &&
         loadSymbol("cuLaunchKernel", (void**)&cu->launchKernel);
}

static void usage(FILE* out, const char* program) {
  fprintf(out,
          "usage: %s [-n batches] [-b bytes] [-d device]\n"
          "  -n, --batches N   batches of %d calls per step (1..%d, default 200)\n"
          "  -b, --bytes B     bytes per call, even (2..1048576, default 1024)\n"
          "  -d, --device D    the GPU (default 0)\n"
          "  -h, --help        this text\n",
          program, BATCH, MAX_BATCHES);
}

/* A bad command line: what is wrong, then the usage, on stderr; exit status 2. */
static int refuse(const char* program, const char* problem) {
  fprintf(stderr, "fccl-call-cost: %s\n", problem);
  usage(stderr, program);
  return 2;
}

int main(int argc, char** argv) {
  static const struct option longOptions[] = {{"batches", required_argument, NULL, 'n'},
                                              {"bytes", required_argument, NULL, 'b'},
                                              {"device", required_argument, NULL, 'd'},
                                              {"help", no_argument, NULL, 'h'},
                                              {NULL, 0, NULL, 0}};
  int batches = 200, device = 0;
  long bytes = 1024;
  char problem[256];
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":n:b:d:h", longOptions, NULL)) != -1;) {
    if (c == 'h') {
      usage(stdout, argv[0]);
      return 0;
    }
    if (c == '?' || c == ':') {
      toolOptionProblem(c, argv, problem, sizeof(problem));
      return refuse(argv[0], problem);
    }
    char* end = NULL;
    long value = strtol(optarg, &end, 10);
    int ok = end != optarg && *end == '\0';
    if (c == 'n' && ok && value >= 1 && value <= MAX_BATCHES)
      batches = (int)value;
    else if (c == 'b' && ok && value >= 2 && value <= (1 << 20) && value % 2 == 0)
      bytes = value;
    else if (c == 'd' && ok && value >= 0 && value <= 1024)
      device = (int)value;
    else {
      snprintf(problem, sizeof(problem), "-%c: '%s' is out of range or not a number", c, optarg);
      return refuse(argv[0], problem);
    }
  }
  if (optind < argc) {
    snprintf(problem, sizeof(problem), "unexpected argument '%s'", argv[optind]);
    return refuse(argv[0], problem);
  }
  setenv("FCCL_ALGO", "ll", 0);
  toolCudaStatus_t cuda;
  toolCudaQuery(&cuda);
  const int count = cuda.deviceCount;
  if (count < 1) return toolReportNoGpu("fccl-call-cost", cuda.noGpu);
  if (device >= count) {
    fprintf(stderr, "fccl-call-cost: device %d is not one of the %d visible\n", device, count);
    return 2;
  }
  struct context ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.bytes = (size_t)bytes;
  if (cudaSetDevice(device) != cudaSuccess ||
      cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(&ctx.send, ctx.bytes) != cudaSuccess || cudaMalloc(&ctx.recv, ctx.bytes) != cudaSuccess ||
      cudaMemset(ctx.send, 0, ctx.bytes) != cudaSuccess) {
    fprintf(stderr, "fccl-call-cost: CUDA setup failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  if (!loadDriver(&ctx.cu)) {
    fprintf(stderr, "fccl-call-cost: the CUDA driver lacks an entry point this tool needs\n");
    return 1;
  }
  if (ctx.cu.moduleLoadData(&ctx.module, kEmptyKernelPtx) != CUDA_SUCCESS ||
      ctx.cu.moduleGetFunction(&ctx.empty, ctx.module, "fcclCallCostEmpty") != CUDA_SUCCESS) {
    fprintf(stderr, "fccl-call-cost: the driver could not load the empty kernel's PTX\n");
    return 1;
  }
  int devlist[1] = {device};
  if (fcclCommInitAll(&ctx.comm, 1, devlist) != fcclSuccess) {
    fprintf(stderr, "fccl-call-cost: fcclCommInitAll: %s\n", fcclGetLastError(NULL));
    return 1;
  }
  fcclRegHandle_t handle = NULL;
  if (fcclMemAlloc(&ctx.registered, ctx.bytes) != fcclSuccess ||
      fcclCommRegister(ctx.comm, ctx.registered, ctx.bytes, &handle) != fcclSuccess) {
    fprintf(stderr, "fccl-call-cost: registering a buffer: %s\n", fcclGetLastError(ctx.comm));
    return 1;
  }
#if FCCL_HAVE_NCCL
  if (ncclCommInitAll(&ctx.nccl, 1, devlist) != ncclSuccess) {
    fprintf(stderr, "fccl-call-cost: ncclCommInitAll failed\n");
    return 1;
  }
#endif
  printf("# fccl-call-cost: host time per call, device %d, %d batches of %d calls, %ld-byte bf16 sum, 1 rank, "
         "FCCL_ALGO=%s\n", device, batches, BATCH, bytes, getenv("FCCL_ALGO"));
  /* FCCL_PATH=nccl: the fccl steps run on the NCCL path; beside ncclAllReduce they give the wrapper's cost. */
  fcclPath_t path;
  const char* reason = NULL;
  if (fcclCommGetPath(ctx.comm, &path, &reason) == fcclSuccess)
    printf("# fccl path: %s (%s)\n", fcclGetPathName(path), reason);
  printf("%-44s %9s %9s\n", "# step", "median ns", "min ns");
  measure("cudaGetDevice", stepGetDevice, &ctx, batches);
  measure("cudaStreamIsCapturing + cudaStreamGetDevice", stepStreamChecks, &ctx, batches);
  measure("cudaPointerGetAttributes", stepRuntimePointer, &ctx, batches);
  measure("cuPointerGetAttributes (3 attributes)", stepDriverPointer, &ctx, batches);
  measure("cudaMemsetAsync (4 bytes)", stepMemset, &ctx, batches);
  measure("cuLaunchKernel (empty, 352 B of parameters)", stepEmptyKernel, &ctx, batches);
  measure("fcclBarrier (1 rank: checks, no launch)", stepBarrier, &ctx, batches);
  measure("fcclAllReduce out of place", stepAllReduce, &ctx, batches);
  measure("fcclAllReduce in place", stepAllReduceInPlace, &ctx, batches);
  measure("fcclAllReduce registered", stepAllReduceRegistered, &ctx, batches);
#if FCCL_HAVE_NCCL
  measure("ncclAllReduce out of place", stepNcclAllReduce, &ctx, batches);
  measure("ncclAllReduce in place", stepNcclAllReduceInPlace, &ctx, batches);
  /* The same two calls again in alternating batches: the wrapper's cost without the drift between rows. */
  measurePair("fcclAllReduce out of place, paired", stepAllReduce, "ncclAllReduce out of place, paired",
              stepNcclAllReduce, &ctx, batches);
  measurePair("fcclAllReduce in place, paired", stepAllReduceInPlace, "ncclAllReduce in place, paired",
              stepNcclAllReduceInPlace, &ctx, batches);
  (void)ncclCommDestroy(ctx.nccl);
#endif
  (void)fcclCommDeregister(ctx.comm, handle);
  (void)fcclMemFree(ctx.registered);
  if (fcclCommDestroy(ctx.comm) != fcclSuccess) ctx.failed = 1;
  (void)cudaFree(ctx.send);
  (void)cudaFree(ctx.recv);
  (void)cudaStreamDestroy(ctx.stream);
  (void)ctx.cu.moduleUnload(ctx.module);
  return ctx.failed;
}
