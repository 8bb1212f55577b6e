/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fused_norm_perf: fcclAllReduceAddRMSNorm against fcclAllReduce followed by a separate add + RMSNorm kernel
 * (fused_norm_ref.cu), bf16, in CUDA-graph mode: for each hidden size and token count, -n calls of each are captured
 * into one graph, the graph is replayed -i times after -w warm-up replays, and the time per call (cudaEvent over
 * the replays, divided by calls) is printed for both with the speedup. Both paths run on the same data; the fused
 * output is compared with the baseline's bit for bit (their arithmetic is the same, docs/fused.md), and the
 * "same" column says whether they agree. One forked process per rank, GPU rank % GPUs (ranks share GPUs when there
 * are fewer GPUs than -g). -F runs the sweep once per form of the fused call (auto, oneshot, twoshot: FCCL_FUSED_ALGO
 * set in each rank before its first call), so that one run records both forms side by side.
 *
 *   fused_norm_perf                       every GPU, hidden 4096 and 8192, tokens 1, 2, 4, ... 8192
 *   fused_norm_perf -F oneshot,twoshot    the same sweep in each form
 *   fused_norm_perf -g 8 -H 4096 -t 1:512 -R 1     8 ranks, registered input
 */
#include "cuda_status.h"
#include "fccl.h"
#include "fused_norm_ref.h"
#include "options.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 8
#define MAX_HIDDEN 8
#define MAX_FORMS 3

/* The fused call's forms, as FCCL_FUSED_ALGO names them (docs/env.md). */
static const char* const kForms[MAX_FORMS] = {"auto", "oneshot", "twoshot"};

struct options {
  int nranks;
  size_t hidden[MAX_HIDDEN];
  int hiddens;
  size_t minTokens, maxTokens;
  int calls, warmup, iters, registered;
  int forms[MAX_FORMS]; /* indices into kForms, in the order asked for */
  int nforms;
};

/* Shared with the forked ranks: the unique id (rank 0 creates it) and a flag that it is there. */
struct shared {
  volatile int idReady;
  fcclUniqueId id;
};

#define CHECK_CUDA(call)                                                                                         \
  do {                                                                                                           \
    cudaError_t e_ = (call);                                                                                     \
    if (e_ != cudaSuccess) {                                                                                     \
      fprintf(stderr, "rank %d: %s:%d: %s: %s\n", rank, __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
      return 1;                                                                                                  \
    }                                                                                                            \
  } while (0)
#define CHECK_FCCL(call)                                                                                         \
  do {                                                                                                           \
    fcclResult_t r_ = (call);                                                                                    \
    if (r_ != fcclSuccess) {                                                                                     \
      fprintf(stderr, "rank %d: %s:%d: %s: %s: %s\n", rank, __FILE__, __LINE__, #call, fcclGetErrorString(r_),   \
              fcclGetLastError(NULL));                                                                           \
      return 1;                                                                                                  \
    }                                                                                                            \
  } while (0)

static uint16_t bf16Of(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof(b));
  return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* Per-rank buffers for the largest case. */
struct buffers {
  void *input, *residual, *pristine, *weight, *output, *reduced, *refOutput;
  fcclRegHandle_t handle;
};

/* Times `calls` captured calls of one path, replayed; returns microseconds per call (negative on failure). */
static double timeGraph(int rank, fcclComm_t comm, cudaStream_t stream, const struct options* o, struct buffers* b,
                        size_t tokens, size_t hidden, int fused) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  double us = -1.0;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) return -1.0;
  fcclResult_t res = fcclSuccess;
  int ref = 0;
  for (int k = 0; k < o->calls && res == fcclSuccess && ref == 0; k++) {
    if (fused) {
      res = fcclAllReduceAddRMSNorm(b->input, b->residual, b->weight, b->output, tokens, hidden, 1e-6f, fcclBfloat16,
                                    fcclBfloat16, fcclScaleNone, NULL, comm, stream);
    } else {
      res = fcclAllReduce(b->input, b->reduced, tokens * hidden, fcclBfloat16, fcclSum, comm, stream);
      if (res == fcclSuccess)
        ref = fusedNormRefLaunch(b->reduced, b->residual, b->weight, b->refOutput, tokens, hidden, 1e-6f, stream);
    }
  }
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (res != fcclSuccess || ref != 0 || end != cudaSuccess) {
    fprintf(stderr, "rank %d: capture failed: %s %s\n", rank, fcclGetErrorString(res), fcclGetLastError(NULL));
    if (graph) cudaGraphDestroy(graph);
    return -1.0;
  }
  cudaEvent_t start, stop;
  if (cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess && cudaEventCreate(&start) == cudaSuccess &&
      cudaEventCreate(&stop) == cudaSuccess) {
    int ok = 1;
    for (int w = 0; w < o->warmup && ok; w++) ok = cudaGraphLaunch(exec, stream) == cudaSuccess;
    ok = ok && fcclBarrier(comm, stream) == fcclSuccess && cudaStreamSynchronize(stream) == cudaSuccess;
    ok = ok && cudaEventRecord(start, stream) == cudaSuccess;
    for (int i = 0; i < o->iters && ok; i++) ok = cudaGraphLaunch(exec, stream) == cudaSuccess;
    ok = ok && cudaEventRecord(stop, stream) == cudaSuccess && cudaStreamSynchronize(stream) == cudaSuccess;
    float ms = 0;
    if (ok && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess)
      us = (double)ms * 1000.0 / ((double)o->iters * o->calls);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return us;
}

/* One eager call of each path on the same residual, then whether the outputs agree bit for bit (1), not (0), or
 * the calls failed (-1). */
static int sameBits(int rank, fcclComm_t comm, cudaStream_t stream, struct buffers* b, size_t tokens, size_t hidden,
                    void* hostA, void* hostB) {
  const size_t bytes = tokens * hidden * 2;
  CHECK_CUDA(cudaMemcpyAsync(b->residual, b->pristine, bytes, cudaMemcpyDeviceToDevice, stream));
  CHECK_FCCL(fcclAllReduceAddRMSNorm(b->input, b->residual, b->weight, b->output, tokens, hidden, 1e-6f, fcclBfloat16,
                                     fcclBfloat16, fcclScaleNone, NULL, comm, stream));
  CHECK_CUDA(cudaMemcpyAsync(b->residual, b->pristine, bytes, cudaMemcpyDeviceToDevice, stream));
  CHECK_FCCL(fcclAllReduce(b->input, b->reduced, tokens * hidden, fcclBfloat16, fcclSum, comm, stream));
  if (fusedNormRefLaunch(b->reduced, b->residual, b->weight, b->refOutput, tokens, hidden, 1e-6f, stream) != 0)
    return -1;
  CHECK_CUDA(cudaMemcpyAsync(hostA, b->output, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(hostB, b->refOutput, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return memcmp(hostA, hostB, bytes) == 0;
}

static int rankMain(int rank, int gpus, const struct options* o, struct shared* sh, const char* form) {
  /* Read once by the library, at this process's first call: set before any. */
  if (setenv("FCCL_FUSED_ALGO", form, 1) != 0) {
    fprintf(stderr, "rank %d: setenv: %s\n", rank, strerror(errno));
    return 1;
  }
  CHECK_CUDA(cudaSetDevice(rank % gpus));
  if (rank == 0) {
    CHECK_FCCL(fcclGetUniqueId((fcclUniqueId*)&sh->id));
    __atomic_store_n(&sh->idReady, 1, __ATOMIC_RELEASE);
  } else {
    const time_t until = time(NULL) + 60;
    while (!__atomic_load_n(&sh->idReady, __ATOMIC_ACQUIRE)) {
      if (time(NULL) > until) {
        fprintf(stderr, "rank %d: no unique id from rank 0 in 60 s\n", rank);
        return 1;
      }
      usleep(1000);
    }
  }
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = o->nranks > gpus;
  fcclComm_t comm = NULL;
  CHECK_FCCL(fcclCommInitRankConfig(&comm, o->nranks, *(fcclUniqueId*)&sh->id, rank, &config));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  size_t maxHidden = 0;
  for (int h = 0; h < o->hiddens; h++) maxHidden = o->hidden[h] > maxHidden ? o->hidden[h] : maxHidden;
  const size_t maxBytes = o->maxTokens * maxHidden * 2;
  struct buffers b;
  memset(&b, 0, sizeof(b));
  if (o->registered) {
    CHECK_FCCL(fcclMemAlloc(&b.input, maxBytes));
    CHECK_FCCL(fcclCommRegister(comm, b.input, maxBytes, &b.handle));
  } else {
    CHECK_CUDA(cudaMalloc(&b.input, maxBytes));
  }
  void** plain[] = {&b.residual, &b.pristine, &b.output, &b.reduced, &b.refOutput};
  for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) CHECK_CUDA(cudaMalloc(plain[i], maxBytes));
  CHECK_CUDA(cudaMalloc(&b.weight, maxHidden * 2));
  uint16_t* host = NULL;
  void* hostB = NULL;
  CHECK_CUDA(cudaMallocHost((void**)&host, maxBytes));
  CHECK_CUDA(cudaMallocHost(&hostB, maxBytes));
  /* Data: small values of both signs, different per rank and tensor. */
  uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
  const void* targets[] = {b.input, b.pristine};
  for (int t = 0; t < 2; t++) {
    for (size_t i = 0; i < maxBytes / 2; i++) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      host[i] = bf16Of(((float)(state >> 40) / 16777216.0f - 0.5f) * (t ? 2.0f : 0.5f));
    }
    CHECK_CUDA(cudaMemcpy((void*)targets[t], host, maxBytes, cudaMemcpyHostToDevice));
  }
  for (size_t i = 0; i < maxHidden; i++) host[i] = bf16Of(0.75f + (float)(i % 7) * 0.0625f);
  CHECK_CUDA(cudaMemcpy(b.weight, host, maxHidden * 2, cudaMemcpyHostToDevice));

  if (rank == 0) {
    printf("# fused_norm_perf: %d ranks, %d GPUs%s, bf16, %s input, CUDA graphs of %d calls, %d replays (%d "
           "warm-up), fused form %s (FCCL_FUSED_ALGO)\n",
           o->nranks, gpus, o->nranks > gpus ? " (ranks share GPUs)" : "", o->registered ? "registered" : "plain",
           o->calls, o->iters, o->warmup, form);
    printf("# baseline: fcclAllReduce + a separate add + RMSNorm kernel; same: fused output == baseline bit for bit\n");
    printf("%8s %8s %8s %12s %12s %12s %8s %5s\n", "form", "hidden", "tokens", "bytes", "fused(us)", "baseline(us)",
           "speedup", "same");
  }
  int status = 0;
  for (int h = 0; h < o->hiddens && status == 0; h++) {
    for (size_t tokens = o->minTokens; tokens <= o->maxTokens && status == 0; tokens *= 2) {
      const size_t hidden = o->hidden[h];
      const int same = sameBits(rank, comm, stream, &b, tokens, hidden, host, hostB);
      CHECK_CUDA(cudaMemcpyAsync(b.residual, b.pristine, tokens * hidden * 2, cudaMemcpyDeviceToDevice, stream));
      const double fused = timeGraph(rank, comm, stream, o, &b, tokens, hidden, 1);
      const double base = timeGraph(rank, comm, stream, o, &b, tokens, hidden, 0);
      if (same < 0 || fused < 0 || base < 0) {
        status = 1;
        break;
      }
      if (rank == 0)
        printf("%8s %8zu %8zu %12zu %12.2f %12.2f %8.2f %5s\n", form, hidden, tokens, tokens * hidden * 2, fused,
               base, base / fused, same ? "yes" : "NO");
      fflush(stdout);
    }
  }
  fcclResult_t async = fcclSuccess;
  if (fcclCommGetAsyncError(comm, &async) != fcclSuccess || async != fcclSuccess) status = 1;
  if (o->registered) {
    CHECK_FCCL(fcclCommDeregister(comm, b.handle));
    CHECK_FCCL(fcclMemFree(b.input));
  } else {
    cudaFree(b.input);
  }
  for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) cudaFree(*plain[i]);
  cudaFree(b.weight);
  cudaFreeHost(host);
  cudaFreeHost(hostB);
  cudaStreamDestroy(stream);
  if (fcclCommDestroy(comm) != fcclSuccess) status = 1;
  return status;
}

static void usage(FILE* out) {
  fprintf(out,
          "usage: fused_norm_perf [-g ranks] [-H hidden[,hidden...]] [-t min:max tokens, doubling]\n"
          "          [-n calls per graph] [-w warm-up replays] [-i timed replays] [-R 0|1 registered input]\n"
          "          [-F form[,form...]] [-h]\n"
          "  -g, --ngpus N      ranks, one process each (default: every GPU; more than the GPUs share them)\n"
          "  -H, --hidden LIST  hidden sizes, comma separated (default 4096,8192)\n"
          "  -t, --tokens A:B   tokens from A to B, doubling (default 1:8192)\n"
          "  -n, --calls N      calls per CUDA graph (default 20)\n"
          "  -w, --warmup N     warm-up replays (default 5)\n"
          "  -i, --iters N      timed replays (default 20)\n"
          "  -R, --registered B 1: the input in registered memory (default 0)\n"
          "  -F, --form LIST    forms of the fused call, comma separated, one sweep each: auto, oneshot, twoshot\n"
          "                     (default auto; the automatic choice is docs/fused.md's)\n"
          "  -h, --help         this text\n");
}

int main(int argc, char** argv) {
  struct options o = {0, {4096, 8192}, 2, 1, 8192, 20, 5, 20, 0, {0}, 1};
  int badForm = 0;
  static const struct option longOptions[] = {
      {"ngpus", required_argument, NULL, 'g'}, {"hidden", required_argument, NULL, 'H'},
      {"tokens", required_argument, NULL, 't'}, {"calls", required_argument, NULL, 'n'},
      {"warmup", required_argument, NULL, 'w'}, {"iters", required_argument, NULL, 'i'},
      {"registered", required_argument, NULL, 'R'}, {"form", required_argument, NULL, 'F'},
      {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int opt;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":g:H:t:n:w:i:R:F:h", longOptions, NULL)) != -1) {
    switch (opt) {
      case 'g': o.nranks = atoi(optarg); break;
      case 'H': {
        o.hiddens = 0;
        for (char* s = strtok(optarg, ","); s && o.hiddens < MAX_HIDDEN; s = strtok(NULL, ","))
          o.hidden[o.hiddens++] = strtoull(s, NULL, 10);
        break;
      }
      case 't':
        if (sscanf(optarg, "%zu:%zu", &o.minTokens, &o.maxTokens) != 2) o.minTokens = 0;
        break;
      case 'n': o.calls = atoi(optarg); break;
      case 'w': o.warmup = atoi(optarg); break;
      case 'i': o.iters = atoi(optarg); break;
      case 'R': o.registered = atoi(optarg); break;
      case 'F': {
        o.nforms = 0;
        for (char* f = strtok(optarg, ","); f; f = strtok(NULL, ",")) {
          int known = -1;
          for (int k = 0; k < MAX_FORMS; k++)
            if (strcmp(f, kForms[k]) == 0) known = k;
          if (known < 0 || o.nforms == MAX_FORMS) {
            badForm = 1;
            break;
          }
          o.forms[o.nforms++] = known;
        }
        badForm |= o.nforms == 0;
        break;
      }
      case 'h': usage(stdout); return 0;
      default: {
        char problem[128];
        toolOptionProblem(opt, argv, problem, sizeof(problem));
        fprintf(stderr, "fused_norm_perf: %s\n", problem);
        usage(stderr);
        return 2;
      }
    }
  }
  int bad = o.hiddens < 1 || o.minTokens < 1 || o.maxTokens < o.minTokens || o.calls < 1 || o.iters < 1 ||
            o.warmup < 0 || o.nranks < 0 || o.nranks > MAX_RANKS;
  for (int h = 0; h < o.hiddens; h++) bad |= o.hidden[h] < 1 || o.hidden[h] > 32768;
  if (bad || badForm || optind < argc) {
    fprintf(stderr, "fused_norm_perf: %s\n",
            optind < argc ? "unexpected argument"
            : badForm     ? "-F takes auto, oneshot and twoshot, comma separated, at most 3"
                          : "a value is out of range");
    usage(stderr);
    return 2;
  }
  /* Asked in a child: this process forks the ranks and must not initialise CUDA itself. */
  toolCudaStatus_t cuda;
  toolCudaQueryInChild(&cuda, 60);
  const int gpus = cuda.deviceCount;
  if (gpus < 1) return toolReportNoGpu("fused_norm_perf", cuda.noGpu);
  if (o.nranks == 0) o.nranks = gpus < MAX_RANKS ? gpus : MAX_RANKS;
  struct shared* sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    fprintf(stderr, "fused_norm_perf: mmap: %s\n", strerror(errno));
    return 1;
  }
  int failed = 0;
  /* One set of ranks per form: the library reads FCCL_FUSED_ALGO once per process. */
  for (int f = 0; f < o.nforms && failed == 0; f++) {
    memset(sh, 0, sizeof(*sh));
    fflush(stdout);
    pid_t pids[MAX_RANKS];
    int started = 0;
    for (int r = 0; r < o.nranks; r++) {
      pids[r] = fork();
      if (pids[r] == 0) _exit(rankMain(r, gpus, &o, sh, kForms[o.forms[f]]));
      if (pids[r] < 0) {
        fprintf(stderr, "fused_norm_perf: fork: %s\n", strerror(errno));
        failed++;
        break;
      }
      started++;
    }
    for (int r = 0; r < started; r++) {
      int status = 0;
      if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    }
  }
  munmap(sh, sizeof(*sh));
  if (failed) fprintf(stderr, "fused_norm_perf: %d ranks failed\n", failed);
  return failed ? 1 : 0;
}
