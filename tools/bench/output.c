/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the output agent writes besides a program's results: the header above the table (versions, flags,
 * launch, every rank's device, communicator creation), the progress line on a terminal, the -J preamble both
 * programs share, and the -J / --csv files themselves.
 */
#include "runtime_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

void benchNowText(char* out, size_t len) { benchFormatTime((long long)time(NULL), out, len); }

static void formatVersion(int version, char* out, size_t len) {
  snprintf(out, len, "%d.%d.%d", version / 10000, (version / 100) % 100, version % 100);
}

int benchGatherDevices(benchAgent_t* agent) {
  char host[64] = "?";
  gethostname(host, sizeof(host));
  host[sizeof(host) - 1] = '\0';
  if (agent->output) {
    agent->deviceLines = calloc((size_t)agent->nranks, BENCH_DEVICE_LINE);
    if (!agent->deviceLines) {
      benchFail(agent, "out of memory");
      return -1;
    }
  }
  char(*lines)[BENCH_DEVICE_LINE] = malloc((size_t)agent->nAgents * BENCH_DEVICE_LINE);
  if (!lines) {
    benchFail(agent, "out of memory");
    return -1;
  }
  int status = 0;
  for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
    struct cudaDeviceProp prop;
    char line[BENCH_DEVICE_LINE];
    memset(line, 0, sizeof(line));
    if (cudaGetDeviceProperties(&prop, agent->devices[gpu]) != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(prop.name, sizeof(prop.name), "?");
      prop.pciDomainID = prop.pciBusID = prop.pciDeviceID = 0;
    }
    snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10.64s device %2d [%04x:%02x:%02x] %.96s",
             agent->firstRank + gpu, 0, (int)getpid(), host, agent->devices[gpu], prop.pciDomainID, prop.pciBusID,
             prop.pciDeviceID, prop.name);
    if (agent->oob->allgather(agent->oob, line, BENCH_DEVICE_LINE, lines) != 0) {
      benchFail(agent, "exchange with the other ranks failed: %s", agent->oob->error);
      status = -1;
      break;
    }
    if (agent->output) {
      /* Agent a's gpu-th rank is rank a * nLocal + gpu in every launch mode. */
      for (int a = 0; a < agent->nAgents; a++)
        memcpy(agent->deviceLines[a * agent->nLocal + gpu], lines[a], BENCH_DEVICE_LINE);
      agent->nDeviceLines = agent->nranks;
    }
  }
  free(lines);
  return status;
}

static void printBytesLine(const char* label, const benchInitStats_t* stats) {
  char used[32], self[32];
  benchFormatBytes(stats->deviceBytes, used, sizeof(used));
  printf("# %-20s : %.2f ms, %s device memory per rank", label, stats->timeMs, used);
  if (stats->selfBytes >= 0) {
    benchFormatBytes(stats->selfBytes, self, sizeof(self));
    printf(" (%s allocated by the library itself)", self);
  }
  printf("\n");
}

void benchPrintHeader(benchAgent_t* agent) {
  const benchArgs_t* args = &agent->args;
  char version[32];
  formatVersion(agent->engines[BENCH_FCCL].version, version, sizeof(version));
  /* The build type is part of what the numbers are of (docs/benchmark.md#build-type). */
  printf("# fccl %s %s (nccl-tests layout) build=%s", version, agent->test->program, FCCL_BUILD_TYPE);
  /* The other libraries this build has, whether or not this run compares with them. */
  for (int engine = 1; engine < BENCH_MAX_ENGINES; engine++) {
    const benchEngine_t* e = &agent->engines[engine];
    if (e->ops) printf(" %s-headers=%d %s-library=%d", e->ops->name, e->ops->headersVersion, e->ops->name, e->version);
  }
  printf("\n# Collective test starting: %s\n", agent->test->program);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
         "validation: %d graph: %d unalign: %d\n",
         args->nThreads, args->nGpus, args->minBytes, args->maxBytes,
         args->stepFactor > 1 ? args->stepFactor : args->stepBytes, args->stepFactor > 1 ? "factor" : "bytes",
         args->warmupIters, args->iters, args->check, args->graphLaunches, args->unalign);
  if (args->blocking != BENCH_BLOCKING_OFF) printf("# %s\n", benchBlockingText(args->blocking));
  if (args->perIterTiming) {
    /* nccl-tests' line, with its trailing space. */
    printf("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows");
    if (args->perIterSkip) printf("; summary skips first %d iterations", args->perIterSkip);
    printf(" \n");
  }
  if (args->runCycles == 0)
    printf("# Run cycles: until SIGINT or SIGTERM (-N 0), which stop the run after the measurement in flight\n");
  if (strcmp(FCCL_BUILD_TYPE, "debug") == 0)
    printf("# Warning: a debug build (-O0): these are not the times of an optimised fccl; ./scripts/bench measures "
           "a release build\n");
  printf("# Launch: %s, %d rank%s | buffers: %s%s%s | compare: %s\n", agent->launchText, agent->nranks,
         agent->nranks == 1 ? "" : "s", agent->buffersText[0], agent->nEngines > 1 ? ", nccl " : "",
         agent->nEngines > 1 ? agent->buffersText[1] : "",
         agent->nEngines > 1 ? "nccl" : (agent->compareSkipped ? "nccl skipped (see above)" : "none"));
  for (int engine = 0; engine < agent->nEngines; engine++) {
    const benchEngine_t* e = &agent->engines[engine];
    char text[384];
    if (e->ops && e->ops->describe && e->comms[0] &&
        e->ops->describe(agent, engine, 0, text, sizeof(text)) == 0)
      printf("# %s communicator: %s\n", agent->engineNames[engine], text);
  }
  printf("#\n# Using devices\n");
  for (int i = 0; i < agent->nDeviceLines; i++) printf("%s\n", agent->deviceLines[i]);
  printf("#\n");
  char label[64];
  for (int engine = 0; engine < agent->nEngines; engine++) {
    snprintf(label, sizeof(label), "%s comm init", agent->engineNames[engine]);
    printBytesLine(label, &agent->engines[engine].init);
  }
}

FILE* benchOpenOutput(benchAgent_t* agent, const char* path) {
  FILE* file = fopen(path, "w");
  if (!file) benchFail(agent, "cannot write %s: %s", path, strerror(errno));
  return file;
}

FILE* benchJsonStart(benchAgent_t* agent, toolJson_t* json) {
  FILE* file = benchOpenOutput(agent, agent->args.jsonPath);
  if (!file) return NULL;
  char version[32];
  formatVersion(agent->engines[BENCH_FCCL].version, version, sizeof(version));
  benchJsonInfo_t info = {
      .program = agent->test->program,
      .fcclVersion = version,
      .buildType = FCCL_BUILD_TYPE,
      .ncclVersion = agent->engines[BENCH_NCCL].version,
      .startTime = agent->startTime,
      .argc = agent->argc,
      .argv = agent->argv,
      .envp = environ,
      .args = &agent->args,
      .nranks = agent->nranks,
      .launch = agent->launchText,
      .sharedGpus = agent->sharedGpus,
      .deviceLines = (const char(*)[BENCH_DEVICE_LINE])agent->deviceLines,
      .nDevices = agent->nDeviceLines,
      .nEngines = agent->nEngines,
  };
  for (int engine = 0; engine < agent->nEngines; engine++) {
    const benchInitStats_t* init = &agent->engines[engine].init;
    info.engineNames[engine] = agent->engineNames[engine];
    info.buffers[engine] = agent->buffersText[engine];
    info.initMs[engine] = init->timeMs;
    info.initBytes[engine] = init->deviceBytes;
    info.initSelfBytes[engine] = init->selfBytes;
  }
  benchJsonBegin(json, file, &info);
  return file;
}

int benchCloseOutput(benchAgent_t* agent, FILE* file, const char* path) {
  int failed = ferror(file);
  errno = 0;
  if (fclose(file) != 0 || failed) {
    benchFail(agent, "writing %s failed%s%s", path, errno ? ": " : "", errno ? strerror(errno) : "");
    return -1;
  }
  return 0;
}

int benchOutputsOpen(benchAgent_t* agent, benchOutputs_t* outputs) {
  memset(outputs, 0, sizeof(*outputs));
  if (!agent->output) return 0;
  if (agent->args.jsonPath && !(outputs->json = benchJsonStart(agent, &outputs->writer))) return -1;
  if (agent->args.csvPath) {
    outputs->csv = benchOpenOutput(agent, agent->args.csvPath);
    if (!outputs->csv) {
      fclose(outputs->json);
      outputs->json = NULL;
      return -1;
    }
    benchCsvHeader(outputs->csv);
  }
  benchOutputsFlush(outputs);
  return 0;
}

void benchOutputsFlush(benchOutputs_t* outputs) {
  if (outputs->json) fflush(outputs->json);
  if (outputs->csv) fflush(outputs->csv);
}

int benchOutputsClose(benchAgent_t* agent, benchOutputs_t* outputs, const benchTable_t* table,
                      const benchSummary_t* summary, const char* failure) {
  int status = 0;
  if (outputs->json) {
    char endTime[32];
    benchNowText(endTime, sizeof(endTime));
    benchJsonEnd(&outputs->writer, table, summary, failure, endTime);
    if (benchCloseOutput(agent, outputs->json, agent->args.jsonPath) != 0) status = -1;
  }
  if (outputs->csv && benchCloseOutput(agent, outputs->csv, agent->args.csvPath) != 0) status = -1;
  memset(outputs, 0, sizeof(*outputs));
  return status;
}

void benchProgress(benchAgent_t* agent, const char* text) {
  if (!agent->showProgress) return;
  if (text)
    fprintf(stderr, "\r%s\033[K", text);
  else
    fprintf(stderr, "\r\033[K");
  fflush(stderr);
}

