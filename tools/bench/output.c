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
  int version = agent->engines[BENCH_FCCL].version;
  printf("# fccl %d.%d.%d %s (nccl-tests layout)", version / 10000, (version / 100) % 100, version % 100,
         agent->test->program);
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
  if (args->blocking) printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
  printf("# Launch: %s, %d rank%s | buffers: %s%s%s | compare: %s\n", agent->launchText, agent->nranks,
         agent->nranks == 1 ? "" : "s", agent->buffersText[0], agent->nEngines > 1 ? ", nccl " : "",
         agent->nEngines > 1 ? agent->buffersText[1] : "",
         agent->nEngines > 1 ? "nccl" : (agent->compareSkipped ? "nccl skipped (see above)" : "none"));
  printf("#\n# Using devices\n");
  for (int i = 0; i < agent->nDeviceLines; i++) printf("%s\n", agent->deviceLines[i]);
  printf("#\n");
  char label[64];
  for (int engine = 0; engine < agent->nEngines; engine++) {
    snprintf(label, sizeof(label), "%s comm init", agent->engineNames[engine]);
    printBytesLine(label, &agent->engines[engine].init);
  }
}

/* The preamble common to both programs (config, devices, communicator creation). */
static void jsonPreamble(benchAgent_t* agent, toolJson_t* json) {
  const benchArgs_t* args = &agent->args;
  int version = agent->engines[BENCH_FCCL].version;
  char text[64];
  toolJsonString(json, "tool", agent->test->program);
  toolJsonInt(json, "json_version", 1);
  snprintf(text, sizeof(text), "%d.%d.%d", version / 10000, (version / 100) % 100, version % 100);
  toolJsonString(json, "fccl_version", text);
  if (agent->engines[BENCH_NCCL].version)
    toolJsonInt(json, "nccl_version", agent->engines[BENCH_NCCL].version);
  else
    toolJsonNull(json, "nccl_version");
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  toolJsonString(json, "time", text);
  toolJsonBeginArray(json, "args");
  for (int i = 0; i < agent->argc; i++) toolJsonString(json, NULL, agent->argv[i]);
  toolJsonEnd(json);
  toolJsonBeginObject(json, "config");
  toolJsonInt(json, "nranks", agent->nranks);
  toolJsonString(json, "launch", agent->launchText);
  toolJsonInt(json, "nthreads", args->nThreads);
  toolJsonInt(json, "ngpus", args->nGpus);
  toolJsonInt(json, "minimum_bytes", (long long)args->minBytes);
  toolJsonInt(json, "maximum_bytes", (long long)args->maxBytes);
  toolJsonInt(json, args->stepFactor > 1 ? "step_factor" : "step_bytes",
              (long long)(args->stepFactor > 1 ? args->stepFactor : args->stepBytes));
  toolJsonInt(json, "warmup_iters", args->warmupIters);
  toolJsonInt(json, "iterations", args->iters);
  toolJsonInt(json, "validation", args->check);
  toolJsonInt(json, "graph", args->graphLaunches);
  toolJsonBool(json, "blocking_collectives", args->blocking);
  toolJsonInt(json, "unalign", args->unalign);
  toolJsonBeginObject(json, "buffers");
  for (int engine = 0; engine < agent->nEngines; engine++)
    toolJsonString(json, agent->engineNames[engine], agent->buffersText[engine]);
  toolJsonEnd(json);
  toolJsonBool(json, "shared_gpus", agent->sharedGpus);
  toolJsonString(json, "compare", agent->nEngines > 1 ? agent->engineNames[1] : NULL);
  toolJsonEnd(json);
  toolJsonBeginArray(json, "devices");
  for (int i = 0; i < agent->nDeviceLines; i++) toolJsonString(json, NULL, agent->deviceLines[i] + 3);
  toolJsonEnd(json);
  toolJsonBeginObject(json, "comm_init");
  for (int engine = 0; engine < agent->nEngines; engine++) {
    toolJsonBeginObject(json, agent->engineNames[engine]);
    const benchInitStats_t* init = &agent->engines[engine].init;
    toolJsonDouble(json, "time_ms", init->timeMs);
    toolJsonDouble(json, "device_bytes", init->deviceBytes);
    if (init->selfBytes >= 0)
      toolJsonDouble(json, "self_reported_bytes", init->selfBytes);
    else
      toolJsonNull(json, "self_reported_bytes");
    toolJsonEnd(json);
  }
  toolJsonEnd(json);
}

FILE* benchOpenOutput(benchAgent_t* agent, const char* path) {
  FILE* file = fopen(path, "w");
  if (!file) benchFail(agent, "cannot write %s: %s", path, strerror(errno));
  return file;
}

FILE* benchJsonStart(benchAgent_t* agent, toolJson_t* json) {
  FILE* file = benchOpenOutput(agent, agent->args.jsonPath);
  if (!file) return NULL;
  toolJsonInit(json, file, BENCH_JSON_WRAP_DEPTH);
  toolJsonBeginObject(json, NULL);
  jsonPreamble(agent, json);
  toolJsonBeginArray(json, "results");
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


void benchProgress(benchAgent_t* agent, const char* text) {
  if (!agent->showProgress) return;
  if (text)
    fprintf(stderr, "\r%s\033[K", text);
  else
    fprintf(stderr, "\r\033[K");
  fflush(stderr);
}

