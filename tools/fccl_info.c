/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fccl-info: what this build of fccl is and what it sees. Runs without a GPU (it says so and prints the rest).
 *   fccl-info            version, build configuration, CUDA driver/runtime, visible GPUs (the driver and the reason
 *                        for no GPU worded as fccl-topo words them: tools/common/cuda_status.h)
 *                        and the path (fccl's kernels or NCCL) a communicator of one rank per visible GPU takes
 *   fccl-info --params   also every environment parameter with its current value and default
 *   fccl-info --memory   also what a communicator costs in device memory: its slot for 2 to 8 ranks, and on the
 *                        first GPU a communicator of one rank, then a second beside it, as fcclCommGetMemStats
 *                        reports them (docs/ipc.md)
 *   fccl-info --algo N [--collective NAME] [--sms S] [--min-ctas M] [--max-ctas M]
 *                        which algorithm and grid a call of N ranks gets at each size from 8 B to 1 GiB (the
 *                        all-reduce, or the collective NAME: allgather, reducescatter, broadcast, reduce, gather,
 *                        scatter), plain and registered, under the current FCCL_ALGO and FCCL_STAGING_BYTES (S SMs:
 *                        the first GPU's, or 132 without one) and the SM budget (--min-ctas and --max-ctas as a
 *                        config's minCTAs and maxCTAs, which FCCL_MIN_CTAS and FCCL_MAX_CTAS override as they do in
 *                        the library). Nothing else is printed; contrib/gpu-lab/gpu-tune reads it.
 */
#include "algo.h"
#include "cuda_status.h"
#include "device_state.h"
#include "fccl.h"
#include "fccl_build_config.h"
#include "ncclwrap.h"
#include "options.h"
#include "param.h"
#include "path.h"

#include <cuda_runtime.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Returns the number of GPUs listed. */
static int printDevices(void) {
  toolCudaStatus_t cuda;
  toolCudaQuery(&cuda);
  char runtime[32] = "unknown";
  if (cuda.runtimeVersion > 0)
    snprintf(runtime, sizeof(runtime), "%d.%d", cuda.runtimeVersion / 1000, (cuda.runtimeVersion % 1000) / 10);
  printf("%-18s: %s\n", "CUDA driver", cuda.driver);
  printf("%-18s: %s\n", "CUDA runtime", runtime);
  const int count = cuda.deviceCount;
  if (count == 0) {
    printf("GPUs              : none found (%s)\n", cuda.noGpu);
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
    for (int i = 0; i < 16; i++)
      printf("%02x%s", (unsigned char)prop.uuid.bytes[i], (i == 3 || i == 5 || i == 7 || i == 9) ? "-" : "");
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

/* The NCCL library fccl would load at run time. */
static void printNccl(void) {
  const char* why = NULL;
  if (!fcclNcclLoaded(&why)) {
    printf("NCCL at run time  : none: %s\n", why);
    return;
  }
#if FCCL_HAVE_NCCL
  int version = 0;
  (void)pfn_ncclGetVersion(&version);
  printf("NCCL at run time  : libnccl.so.2, version %d.%d.%d\n", version / 10000, version / 100 % 100,
         version % 100);
#endif
}

/* The path decision (path.c) for a communicator of one rank per visible GPU of this host, under the environment's
 * FCCL_PATH, FCCL_P2P_DISABLE and FCCL_NCCL_COMM (the init-time write/read-back check is not run here). */
static void printPath(int count) {
  if (count < 1) {
    printf("path (local GPUs) : none (no GPU)\n");
    return;
  }
  struct fcclPeerInfo* infos = calloc((size_t)count, sizeof(*infos));
  struct fcclPathRecord* records = calloc((size_t)count, sizeof(*records));
  if (!infos || !records) {
    free(infos);
    free(records);
    printf("path (local GPUs) : unknown (out of memory)\n");
    return;
  }
  for (int dev = 0; dev < count; dev++) {
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
      memcpy(infos[dev].gpuUuid, prop.uuid.bytes, 16);
      infos[dev].computeCapability = prop.major * 10 + prop.minor;
    }
    (void)cudaGetLastError();
    infos[dev].rank = dev;
    infos[dev].nranks = count;
    infos[dev].hostHash = 1;
    records[dev].peerAccess = 1;
    for (int peer = 0; peer < count; peer++) {
      int canAccess = 0;
      if (peer != dev && (cudaDeviceCanAccessPeer(&canAccess, dev, peer) != cudaSuccess || !canAccess))
        records[dev].peerAccess = 0;
    }
    (void)cudaGetLastError();
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, dev) != cudaSuccess) mps = 0;
    (void)cudaGetLastError();
    records[dev].mps = mps != 0;
    records[dev].ncclLoaded = fcclNcclLoaded(NULL);
    records[dev].ncclHost = 1;
  }
  struct fcclPathInput in = {.infos = infos, .records = records, .nranks = count,
                             .p2pDisable = fcclParamInt(FCCL_PARAM_P2P_DISABLE) != 0,
                             .sassArchs = FCCL_BUILD_SASS_ARCHS, .ptxArch = FCCL_BUILD_PTX_ARCH};
  struct fcclPathDecision d;
  if (fcclPathParseRequest(fcclParamString(FCCL_PARAM_PATH), &in.request) != fcclSuccess ||
      fcclPathParseNcclComm(fcclParamString(FCCL_PARAM_NCCL_COMM), &in.ncclComm) != fcclSuccess ||
      fcclPathDecide(&in, &d) != fcclSuccess) {
    printf("path (local GPUs) : init would fail: %s\n", fcclGetLastError(NULL));
  } else {
    printf("path (local GPUs) : %s (%s)\n", fcclGetPathName(d.path), d.reason);
    printf("send/recv/alltoall: %s%s\n", d.ncclComm ? "NCCL" : "unavailable: ", d.ncclComm ? "" : d.p2pReason);
  }
  free(infos);
  free(records);
}

static double mib(uint64_t bytes) { return (double)bytes / 1048576.0; }

/* One communicator of one rank on the current device, with its statistics; NULL (and why, printed) on failure. */
static fcclComm_t memoryComm(const char* name, fcclMemStats_t* stats) {
  fcclUniqueId id;
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.commName = name;
  fcclComm_t comm = NULL;
  if (fcclGetUniqueId(&id) != fcclSuccess || fcclCommInitRankConfig(&comm, 1, id, 0, &config) != fcclSuccess) {
    printf("  %s: no communicator: %s\n", name, fcclGetLastError(NULL));
    return NULL;
  }
  memset(stats, 0, sizeof(*stats));
  stats->size = sizeof(*stats);
  if (fcclCommGetMemStats(comm, stats) != fcclSuccess) {
    printf("  %s: no statistics: %s\n", name, fcclGetLastError(NULL));
    (void)fcclCommDestroy(comm);
    return NULL;
  }
  return comm;
}

/* --memory: each communicator takes one slot of fccl's shared buffers on its GPU (one chunk, by default) and maps
 * its peers' (docs/ipc.md); measured on the first GPU with communicators of one rank, whose slot has no LL128 area. */
static void printMemory(int count) {
  printf(
      "\nMemory per rank (slot: fccl's shared buffers of one communicator; its chunk adds 4 KiB of check words and "
      "is rounded up to the allocation granularity, 2 MiB; each peer's chunk is mapped too):\n");
  for (int nranks = 2; nranks <= FCCL_DEVICE_MAX_RANKS; nranks++)
    printf("  %d ranks: slot %.1f MiB\n", nranks, mib(fcclDeviceSlotBytes(nranks)));
  if (count < 1) {
    printf("memory (measured) : no GPU\n");
    return;
  }
  if (cudaSetDevice(0) != cudaSuccess) {
    (void)cudaGetLastError();
    printf("memory (measured) : GPU 0 cannot be used\n");
    return;
  }
  fcclMemStats_t first, second;
  fcclComm_t a = memoryComm("fccl-info-first", &first);
  if (!a) return;
  printf(
      "memory (measured) : GPU 0, a first communicator of 1 rank (slot %.1f MiB): %.1f MiB of its own; the process's "
      "arenas %.1f MiB in %llu chunk(s)\n",
      mib(fcclDeviceSlotBytes(1)), mib(first.commDeviceBytes), mib(first.arenaBytes),
      (unsigned long long)first.arenaChunks);
  fcclComm_t b = memoryComm("fccl-info-second", &second);
  if (b) {
    printf(
        "memory (measured) : GPU 0, a second beside it: %.1f MiB of its own; the process's arenas %.1f MiB in %llu "
        "chunk(s)\n",
        mib(second.commDeviceBytes), mib(second.arenaBytes), (unsigned long long)second.arenaChunks);
    (void)fcclCommDestroy(b);
  }
  (void)fcclCommDestroy(a);
}

static void printParams(void) {
  printf("\nEnvironment parameters (value / default):\n");
  for (int id = 0; id < FCCL_PARAM_COUNT; id++) {
    const fcclParamInfo_t* info = fcclParamInfo((fcclParamId_t)id);
    const char* value = fcclParamIsSecret((fcclParamId_t)id) && fcclParamIsSet((fcclParamId_t)id)
                            ? "(hidden)"
                            : fcclParamString((fcclParamId_t)id);
    printf("  %-24s = %-16s (default \"%s\"%s)\n      %s\n", info->name, value, info->defaultValue,
           fcclParamIsSet((fcclParamId_t)id) ? ", set" : "", info->doc);
  }
}

/* One cell of the --algo table: "name BxT" (out of place; "push-scatter" or "copy-scatter" after it when the
 * registered two-shot scatters by push or by the copy engines), "copy" (no kernel), or "error" when the call
 * cannot run. */
/* The SM budget the tables decide under (fcclDeviceCtaBound: the variables over the --min-ctas / --max-ctas
 * "config"); 0: none. */
static int budgetMin, budgetMax;

static void describeChoice(int nranks, int registered, uint64_t bytes, int request, int smCount,
                           const fcclSlotLayout* layout, char* text, size_t size) {
  if (fcclAlgoIsCopy(nranks, fcclAlgoResolveRequest(request, registered))) {
    snprintf(text, size, "copy");
    return;
  }
  fcclAlgoQuery query = fcclAlgoQueryMake(bytes, nranks, registered, 0, smCount, layout, fcclDeviceLL128Auto(),
                                          fcclDeviceCopyScatterMin());
  query.forced = fcclAlgoResolveRequest(request, registered);
  query.minCtas = budgetMin;
  query.maxCtas = budgetMax;
  fcclAlgoChoice choice;
  if (fcclAlgoSelect(&query, &choice) != fcclSuccess)
    snprintf(text, size, "error");
  else if (choice.scatter == FCCL_SCATTER_PULL)
    snprintf(text, size, "%s %dx%d", fcclAlgoName(choice.algo), choice.blocks, choice.threads);
  else
    snprintf(text, size, "%s %dx%d %s-scatter", fcclAlgoName(choice.algo), choice.blocks, choice.threads,
             fcclScatterName(choice.scatter));
}

static int defaultSmCount(void) {
  int smCount = 132, count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0)
    (void)cudaDeviceGetAttribute(&smCount, cudaDevAttrMultiProcessorCount, 0);
  (void)cudaGetLastError();
  return smCount;
}

static void printBudget(void) {
  if (budgetMin == 0 && budgetMax == 0)
    printf("# SM budget: none (blocks up to one per SM)\n");
  else
    printf(
        "# SM budget: %d..%d blocks per kernel (0: no bound; FCCL_MIN_CTAS, FCCL_MAX_CTAS, config minCTAs, "
        "maxCTAs)\n",
        budgetMin, budgetMax);
}

static int printAlgoTable(int nranks, int smCount) {
  const char* requestText = fcclParamString(FCCL_PARAM_ALGO);
  const int request = fcclAlgoParseRequest(requestText);
  if (request < 0) {
    fprintf(stderr, "fccl-info: FCCL_ALGO=%s is not one of %s\n", requestText, fcclAllReduceAlgos.requestNames);
    return 2;
  }
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  printf("# all-reduce choice: %d ranks, %d SMs, FCCL_ALGO=%s, LL area %llu B, staging chunk %llu B per peer\n",
         nranks, smCount, requestText[0] ? requestText : "auto", (unsigned long long)layout.llBytes,
         (unsigned long long)layout.chunkBytes);
  printf("# out of place; push-scatter: the registered two-shot's reduce-scatter by push (2 ranks)\n");
  printBudget();
  printf("# %12s  %-24s  %s\n", "bytes", "plain", "registered");
  for (uint64_t bytes = 8; bytes <= (1ull << 30); bytes *= 2) {
    char plain[64], registered[64];
    describeChoice(nranks, 0, bytes, request, smCount, &layout, plain, sizeof(plain));
    describeChoice(nranks, 1, bytes, request, smCount, &layout, registered, sizeof(registered));
    printf("  %12llu  %-24s  %s\n", (unsigned long long)bytes, plain, registered);
  }
  return 0;
}

/* The --algo table of the other collectives: the form and grid for each block size. */
static const struct {
  const fcclAlgoSet* set; /* its forms; set->collective is --collective's name */
  int param;              /* the fcclParamId_t of its FCCL_*_ALGO; -1: it has none (the automatic choice) */
} moveCollectives[] = {
    {&fcclAllGatherAlgos, FCCL_PARAM_ALLGATHER_ALGO},
    {&fcclReduceScatterAlgos, FCCL_PARAM_REDUCESCATTER_ALGO},
    {&fcclBroadcastAlgos, FCCL_PARAM_BROADCAST_ALGO},
    {&fcclReduceAlgos, -1},
    {&fcclGatherAlgos, -1},
    {&fcclScatterAlgos, -1},
};

static int printMoveTable(int which, int nranks, int smCount) {
  const fcclAlgoSet* set = moveCollectives[which].set;
  const int param = moveCollectives[which].param;
  const char* variable = param >= 0 ? fcclParamInfo((fcclParamId_t)param)->name : "no variable";
  const char* requestText = param >= 0 ? fcclParamString((fcclParamId_t)param) : "";
  const int request = fcclMoveParseRequest(requestText, set);
  if (request < 0) {
    fprintf(stderr, "fccl-info: %s=%s is not one of %s\n", variable, requestText, set->requestNames);
    return 2;
  }
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  printf("# %s choice: %d ranks, %d SMs, %s=%s, LL area %llu B, staging chunk %llu B per peer\n", set->collective,
         nranks, smCount, variable, requestText[0] ? requestText : "auto", (unsigned long long)layout.llBytes,
         (unsigned long long)layout.chunkBytes);
  printf(
      "# bytes: one block (a rank's contribution, a rank's result, the broadcast or reduce message); "
      "FCCL_COPY_MOVE_MIN=%llu (0: the copy form only when forced)\n",
      (unsigned long long)fcclDeviceCopyMoveMin());
  printBudget();
  printf("# %12s  %-24s  %s\n", "bytes", "plain", "registered");
  for (uint64_t bytes = 8; bytes <= (1ull << 30); bytes *= 2) {
    char cells[2][64];
    for (int registered = 0; registered < 2; registered++) {
      if (fcclAlgoIsCopy(nranks, fcclMoveResolveRequest(request, set))) {
        snprintf(cells[registered], sizeof(cells[registered]), "copy");
        continue;
      }
      fcclAlgoQuery query = fcclAlgoQueryMake(bytes, nranks, registered, 0, smCount, &layout, fcclDeviceLL128Auto(),
                                              fcclDeviceCopyScatterMin());
      query.copyMoveMin = fcclDeviceCopyMoveMin();
      query.forced = fcclMoveResolveRequest(request, set);
      query.minCtas = budgetMin;
      query.maxCtas = budgetMax;
      fcclAlgoChoice choice;
      if (fcclMoveSelect(&query, set, &choice) != fcclSuccess)
        snprintf(cells[registered], sizeof(cells[registered]), "error");
      else
        snprintf(cells[registered], sizeof(cells[registered]), "%s %dx%d", fcclAlgoName(choice.algo),
                 choice.blocks, choice.threads);
    }
    printf("  %12llu  %-24s  %s\n", (unsigned long long)bytes, cells[0], cells[1]);
  }
  return 0;
}

static int parseCount(const char* text, int lo, int hi) {
  char* end = NULL;
  long value = text ? strtol(text, &end, 10) : 0;
  return text && *text && *end == '\0' && value >= lo && value <= hi ? (int)value : -1;
}

static void usage(FILE* out, const char* program) {
  fprintf(out,
          "usage: %s [--params] [--memory] | --algo NRANKS [--collective NAME] [--sms N] [--min-ctas M] "
          "[--max-ctas M]\n"
          "  (none)          version, build configuration, CUDA driver and runtime, the GPUs and their peer access\n"
          "  -p, --params    also every environment parameter: value, default, what it does\n"
          "  -m, --memory    also the device memory of a communicator: its slot for 2..8 ranks, and measured on the\n"
          "                  first GPU (a communicator of one rank, then a second beside it)\n"
          "  -a, --algo N    the all-reduce algorithm and grid a call of N ranks gets at each size (only that)\n"
          "  -c, --collective NAME  with --algo: allreduce (default), allgather, reducescatter, broadcast, reduce,\n"
          "                  gather or scatter\n"
          "  -s, --sms S     with --algo: decide for S SMs (default: the first GPU's, or 132 without one)\n"
          "  --min-ctas M, --max-ctas M  with --algo: the SM budget a config's minCTAs and maxCTAs would set\n"
          "                  (FCCL_MIN_CTAS and FCCL_MAX_CTAS override them, as in the library)\n"
          "  -h, --help      this text\n",
          program);
}

int main(int argc, char** argv) {
  static const struct option longOptions[] = {{"params", no_argument, NULL, 'p'},
                                              {"memory", no_argument, NULL, 'm'},
                                              {"algo", required_argument, NULL, 'a'},
                                              {"sms", required_argument, NULL, 's'},
                                              {"collective", required_argument, NULL, 'c'},
                                              {"min-ctas", required_argument, NULL, 'n'},
                                              {"max-ctas", required_argument, NULL, 'x'},
                                              {"help", no_argument, NULL, 'h'},
                                              {NULL, 0, NULL, 0}};
  int showParams = 0, showMemory = 0, algoRanks = 0, smCount = 0, collective = -1; /* -1: the all-reduce */
  int configMin = -1, configMax = -1; /* --min-ctas, --max-ctas: as a config's fields (-1: not set) */
  const char* collectiveName = NULL;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":pma:s:c:n:x:h", longOptions, NULL)) != -1;) {
    switch (c) {
      case 'p': showParams = 1; break;
      case 'm': showMemory = 1; break;
      case 'c':
        collectiveName = optarg;
        collective = -2;
        if (strcmp(optarg, fcclAllReduceAlgos.collective) == 0) collective = -1;
        for (int i = 0; i < (int)(sizeof(moveCollectives) / sizeof(moveCollectives[0])); i++)
          if (strcmp(optarg, moveCollectives[i].set->collective) == 0) collective = i;
        if (collective == -2) {
          fprintf(stderr,
                  "%s: --collective '%s' is not allreduce, allgather, reducescatter, broadcast, reduce, gather or "
                  "scatter\n",
                  argv[0], optarg);
          return 2;
        }
        break;
      case 'n':
      case 'x': {
        int* target = c == 'n' ? &configMin : &configMax;
        *target = parseCount(optarg, 1, FCCL_DEVICE_MAX_BLOCKS);
        if (*target < 0) {
          fprintf(stderr, "%s: --%s-ctas needs a number in 1..%d, not '%s'\n", argv[0], c == 'n' ? "min" : "max",
                  FCCL_DEVICE_MAX_BLOCKS, optarg);
          return 2;
        }
        break;
      }
      case 'a':
      case 's': {
        const int max = c == 'a' ? FCCL_DEVICE_MAX_RANKS : 100000;
        int* target = c == 'a' ? &algoRanks : &smCount;
        *target = parseCount(optarg, 1, max);
        if (*target < 0) {
          fprintf(stderr, "%s: %s needs a number in 1..%d, not '%s'\n", argv[0], c == 'a' ? "--algo" : "--sms", max,
                  optarg);
          return 2;
        }
        break;
      }
      case 'h': usage(stdout, argv[0]); return 0;
      default: {
        char problem[256];
        toolOptionProblem(c, argv, problem, sizeof(problem));
        fprintf(stderr, "%s: %s (try --help)\n", argv[0], problem);
        return 2;
      }
    }
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s' (try --help)\n", argv[0], argv[optind]);
    return 2;
  }
  fcclParamWarnUnknown();
  if (algoRanks > 0 && showParams) {
    /* --algo prints its table and nothing else: --params beside it would be ignored, so it is refused. */
    fprintf(stderr, "%s: --params and --algo are alternatives (try --help)\n", argv[0]);
    return 2;
  }
  if ((configMin > 0 || configMax > 0) && algoRanks == 0) {
    fprintf(stderr, "%s: --min-ctas and --max-ctas go with --algo\n", argv[0]);
    return 2;
  }
  if (configMin > 0 && configMax > 0 && configMin > configMax) {
    fprintf(stderr, "%s: --min-ctas %d is above --max-ctas %d\n", argv[0], configMin, configMax);
    return 2;
  }
  budgetMin = fcclDeviceCtaBound(configMin, FCCL_PARAM_MIN_CTAS);
  budgetMax = fcclDeviceCtaBound(configMax, FCCL_PARAM_MAX_CTAS);
  if (algoRanks > 0) {
    if (smCount <= 0) smCount = defaultSmCount();
    return collective >= 0 ? printMoveTable(collective, algoRanks, smCount) : printAlgoTable(algoRanks, smCount);
  }
  if (collectiveName) {
    fprintf(stderr, "%s: --collective goes with --algo\n", argv[0]);
    return 2;
  }
  if (smCount > 0) {
    fprintf(stderr, "%s: --sms goes with --algo\n", argv[0]);
    return 2;
  }
  printBuild();
  const int gpus = printDevices();
  printNccl();
  printPath(gpus);
  if (showMemory) printMemory(gpus);
  if (showParams) printParams();
  return 0;
}
