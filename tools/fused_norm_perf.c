/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fused_norm_perf: fcclAllReduceAddRMSNorm against the unfused pair a server would run instead, fcclAllReduce followed
 * by fccl's own add + RMSNorm kernel (fused_norm_ref.cu: the library's row kernel, which reaches memory speed), bf16,
 * in CUDA-graph mode: for each hidden size and token count, -n calls of each are captured into one graph, the graph is
 * replayed -i times after -w warm-up replays, and the time per call (cudaEvent over the replays, divided by calls) is
 * printed with the speedup (pair / fused). The norm kernel alone is timed too, and the achieved memory bandwidth of
 * the fused call and of the norm alone: the bytes of the local part (input read, residual read and written, output
 * written: 4 x tokens x hidden x 2 bytes, plus the weight read once) over the time. Both paths run on the same
 * data; the "same" column compares the fused call's output and residual with the norm's: "yes" bit for bit (the
 * arithmetic is the same, docs/fused.md), "ulp" residual equal and outputs within one bf16 ulp (another reduction
 * order: FCCL_FUSED_KERNEL=legacy), "NO" otherwise. One forked process per rank, GPU rank % GPUs (ranks share GPUs
 * when there are fewer GPUs than -g). -F and -K run the sweep once per form of the fused call and per one-shot
 * kernel (FCCL_FUSED_ALGO and FCCL_FUSED_KERNEL set in each rank before its first call). -C also times the norm
 * kernel in each candidate shape of the row (threads per row x per block, fused_norm_shape.h) around the library's,
 * with the same check against the library's shape.
 *
 *   fused_norm_perf                       every GPU, hidden 4096 and 8192, tokens 1, 2, 4, ... 8192
 *   fused_norm_perf -F oneshot,twoshot    the same sweep in each form
 *   fused_norm_perf -g 1 -t 1,64,4096 -K row,legacy -C --csv out.csv
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
#define MAX_TOKENS 32
#define MAX_FORMS 3
#define MAX_KERNELS 2
#define MAX_CANDIDATES 12

/* The fused call's forms and one-shot kernels, as FCCL_FUSED_ALGO and FCCL_FUSED_KERNEL name them (docs/env.md). */
static const char* const kForms[MAX_FORMS] = {"auto", "oneshot", "twoshot"};
static const char* const kKernels[MAX_KERNELS] = {"row", "legacy"};

struct options {
  int nranks;
  size_t hidden[MAX_HIDDEN];
  int hiddens;
  size_t tokens[MAX_TOKENS];
  int ntokens;
  int calls, warmup, iters, registered, baseline, candidates;
  int forms[MAX_FORMS]; /* indices into kForms, in the order asked for */
  int nforms;
  int kernels[MAX_KERNELS]; /* indices into kKernels */
  int nkernels;
  const char* csv;
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

/* Per-rank buffers for the largest case; host: the fused call's (or a candidate's) output and residual, and the
 * norm's in the library's shape, which the others are checked against. */
struct buffers {
  void *input, *residual, *pristine, *weight, *output, *reduced, *refOutput;
  void *hostOut, *hostRes, *refOut, *refRes;
  fcclRegHandle_t handle;
};

/* What one timed graph runs: the fused call, fcclAllReduce + the norm, or the norm alone in a shape (0 x 0: the
 * library's). */
enum path { PATH_FUSED, PATH_PAIR, PATH_NORM };
struct shapeChoice {
  unsigned rowThreads, blockThreads;
};

/* Times `calls` captured calls of one path, replayed; returns microseconds per call (negative on failure). */
static double timeGraph(int rank, fcclComm_t comm, cudaStream_t stream, const struct options* o, struct buffers* b,
                        size_t tokens, size_t hidden, enum path path, struct shapeChoice shape) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  double us = -1.0;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) return -1.0;
  fcclResult_t res = fcclSuccess;
  int ref = 0;
  for (int k = 0; k < o->calls && res == fcclSuccess && ref == 0; k++) {
    if (path == PATH_FUSED) {
      res = fcclAllReduceAddRMSNorm(b->input, b->residual, b->weight, b->output, tokens, hidden, 1e-6f, fcclBfloat16,
                                    fcclBfloat16, fcclScaleNone, NULL, comm, stream);
      continue;
    }
    if (path == PATH_PAIR)
      res = fcclAllReduce(b->input, b->reduced, tokens * hidden, fcclBfloat16, fcclSum, comm, stream);
    if (res == fcclSuccess)
      ref = fusedNormRefLaunch(b->reduced, b->residual, b->weight, b->refOutput, tokens, hidden, 1e-6f,
                               shape.rowThreads, shape.blockThreads, stream);
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

/* "yes" when output and residual equal the reference bit for bit, "ulp" when the residuals do and the outputs are
 * within one bf16 ulp of each other (same sign), else "NO". */
static const char* compareRows(const uint16_t* out, const uint16_t* res, const uint16_t* refOut, const uint16_t* refRes,
                               size_t count) {
  if (memcmp(res, refRes, count * 2) != 0) return "NO";
  if (memcmp(out, refOut, count * 2) == 0) return "yes";
  for (size_t i = 0; i < count; i++) {
    const int a = out[i], b = refOut[i];
    if (a != b && (((a ^ b) & 0x8000) != 0 || abs(a - b) > 1)) return "NO";
  }
  return "ulp";
}

/* The norm in the library's shape, eagerly, from the pristine residual: the reference rows on the host. */
static int referenceRows(int rank, fcclComm_t comm, cudaStream_t stream, struct buffers* b, size_t tokens,
                         size_t hidden) {
  const size_t bytes = tokens * hidden * 2;
  CHECK_CUDA(cudaMemcpyAsync(b->residual, b->pristine, bytes, cudaMemcpyDeviceToDevice, stream));
  CHECK_FCCL(fcclAllReduce(b->input, b->reduced, tokens * hidden, fcclBfloat16, fcclSum, comm, stream));
  if (fusedNormRefLaunch(b->reduced, b->residual, b->weight, b->refOutput, tokens, hidden, 1e-6f, 0, 0, stream) != 0)
    return 1;
  CHECK_CUDA(cudaMemcpyAsync(b->refOut, b->refOutput, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(b->refRes, b->residual, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return 0;
}

/* One eager call of the fused call (shape NULL) or of the norm in a shape, from the pristine residual, compared with
 * the reference rows; *verdict as compareRows. */
static int checkRows(int rank, fcclComm_t comm, cudaStream_t stream, struct buffers* b, size_t tokens, size_t hidden,
                     const struct shapeChoice* shape, const char** verdict) {
  const size_t bytes = tokens * hidden * 2;
  CHECK_CUDA(cudaMemcpyAsync(b->residual, b->pristine, bytes, cudaMemcpyDeviceToDevice, stream));
  if (shape == NULL) {
    CHECK_FCCL(fcclAllReduceAddRMSNorm(b->input, b->residual, b->weight, b->output, tokens, hidden, 1e-6f, fcclBfloat16,
                                       fcclBfloat16, fcclScaleNone, NULL, comm, stream));
  } else if (fusedNormRefLaunch(b->reduced, b->residual, b->weight, b->output, tokens, hidden, 1e-6f, shape->rowThreads,
                                shape->blockThreads, stream) != 0) {
    return 1;
  }
  CHECK_CUDA(cudaMemcpyAsync(b->hostOut, b->output, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(b->hostRes, b->residual, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  *verdict = compareRows(b->hostOut, b->hostRes, b->refOut, b->refRes, tokens * hidden);
  return 0;
}

/* The candidate shapes of bf16 rows of hidden: half, the library's and twice its threads per row, each in blocks of
 * that many threads, 256 and 512, where the kernel runs them. */
static int candidates(size_t hidden, struct shapeChoice* out) {
  const int base = fusedNormRefShape(hidden, 0, 0, NULL);
  int n = 0;
  for (int scale = 0; scale < 3 && base > 0; scale++) {
    const unsigned rowThreads = scale == 0 ? (unsigned)base / 2 : scale == 1 ? (unsigned)base : (unsigned)base * 2;
    const unsigned blocks[] = {rowThreads, 256, 512};
    for (int k = 0; k < 3 && n < MAX_CANDIDATES; k++) {
      int seen = 0;
      for (int j = 0; j < k; j++) seen |= blocks[j] == blocks[k];
      if (!seen && blocks[k] >= rowThreads && fusedNormRefShape(hidden, rowThreads, blocks[k], NULL) > 0)
        out[n++] = (struct shapeChoice){rowThreads, blocks[k]};
    }
  }
  return n;
}

/* Bytes of the local part of a call: input read, residual read and written, output written, the weight once. */
static double localBytes(size_t tokens, size_t hidden) { return 4.0 * (double)tokens * hidden * 2 + hidden * 2.0; }

static void csvRow(FILE* csv, const char* kind, const char* form, const char* kernel, size_t hidden, size_t tokens,
                   unsigned rowThreads, unsigned blockThreads, double us, const char* check) {
  if (!csv) return;
  fprintf(csv, "%s,%s,%s,%zu,%zu,%u,%u,%.3f,%.1f,%s\n", kind, form, kernel, hidden, tokens, rowThreads, blockThreads,
          us, localBytes(tokens, hidden) / (us * 1e3), check);
  fflush(csv);
}

/* One size: the check, then the fused call, the pair and the norm alone, then the candidates. */
static int runSize(int rank, fcclComm_t comm, cudaStream_t stream, const struct options* o, struct buffers* b,
                   size_t tokens, size_t hidden, const char* form, const char* kernel, FILE* csv) {
  const size_t bytes = tokens * hidden * 2;
  const double gb = localBytes(tokens, hidden) / 1e3; /* GB/s from microseconds */
  const struct shapeChoice library = {0, 0};
  const char* same = "-";
  if (referenceRows(rank, comm, stream, b, tokens, hidden) ||
      checkRows(rank, comm, stream, b, tokens, hidden, NULL, &same))
    return 1;
  CHECK_CUDA(cudaMemcpyAsync(b->residual, b->pristine, bytes, cudaMemcpyDeviceToDevice, stream));
  const double fused = timeGraph(rank, comm, stream, o, b, tokens, hidden, PATH_FUSED, library);
  double pair = 0, norm = 0;
  if (o->baseline) {
    pair = timeGraph(rank, comm, stream, o, b, tokens, hidden, PATH_PAIR, library);
    norm = timeGraph(rank, comm, stream, o, b, tokens, hidden, PATH_NORM, library);
  }
  if (fused < 0 || pair < 0 || norm < 0) return 1;
  unsigned rowsPerBlock = 0;
  const int rowThreads = fusedNormRefShape(hidden, 0, 0, &rowsPerBlock);
  if (rank == 0) {
    if (o->baseline)
      printf("%8s %7s %7zu %7zu %11zu %10.2f %8.0f %10.2f %10.2f %8.0f %8.2f %5s\n", form, kernel, hidden, tokens,
             bytes, fused, gb / fused, pair, norm, gb / norm, pair / fused, same);
    else
      printf("%8s %7s %7zu %7zu %11zu %10.2f %8.0f %10s %10s %8s %8s %5s\n", form, kernel, hidden, tokens, bytes, fused,
             gb / fused, "-", "-", "-", "-", same);
    csvRow(csv, "fused", form, kernel, hidden, tokens, 0, 0, fused, same);
    if (o->baseline) {
      csvRow(csv, "pair", form, kernel, hidden, tokens, (unsigned)rowThreads, rowThreads * rowsPerBlock, pair, "-");
      csvRow(csv, "norm", form, kernel, hidden, tokens, (unsigned)rowThreads, rowThreads * rowsPerBlock, norm, "yes");
    }
  }
  if (!o->candidates) return 0;
  struct shapeChoice shapes[MAX_CANDIDATES];
  const int n = candidates(hidden, shapes);
  for (int c = 0; c < n; c++) {
    const char* check = "-";
    if (checkRows(rank, comm, stream, b, tokens, hidden, &shapes[c], &check)) return 1;
    const double us = timeGraph(rank, comm, stream, o, b, tokens, hidden, PATH_NORM, shapes[c]);
    if (us < 0) return 1;
    if (rank == 0) {
      printf("%8s %7s %7zu %7zu   norm in %4u threads per row, blocks of %4u: %10.2f us %8.0f GB/s %5s\n", "cand",
             kernel, hidden, tokens, shapes[c].rowThreads, shapes[c].blockThreads, us, gb / us, check);
      csvRow(csv, "cand", form, kernel, hidden, tokens, shapes[c].rowThreads, shapes[c].blockThreads, us, check);
    }
  }
  return 0;
}

static int rankMain(int rank, int gpus, const struct options* o, struct shared* sh, const char* form,
                    const char* kernel) {
  /* Read once by the library, at this process's first call: set before any. */
  if (setenv("FCCL_FUSED_ALGO", form, 1) != 0 || setenv("FCCL_FUSED_KERNEL", kernel, 1) != 0) {
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

  size_t maxHidden = 0, maxTokens = 0;
  for (int h = 0; h < o->hiddens; h++) maxHidden = o->hidden[h] > maxHidden ? o->hidden[h] : maxHidden;
  for (int t = 0; t < o->ntokens; t++) maxTokens = o->tokens[t] > maxTokens ? o->tokens[t] : maxTokens;
  const size_t maxBytes = maxTokens * maxHidden * 2;
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
  void** host[] = {&b.hostOut, &b.hostRes, &b.refOut, &b.refRes};
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) CHECK_CUDA(cudaMallocHost(host[i], maxBytes));
  /* Data: small values of both signs, different per rank and tensor. */
  uint16_t* fill = b.hostOut;
  uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
  const void* targets[] = {b.input, b.pristine};
  for (int t = 0; t < 2; t++) {
    for (size_t i = 0; i < maxBytes / 2; i++) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      fill[i] = bf16Of(((float)(state >> 40) / 16777216.0f - 0.5f) * (t ? 2.0f : 0.5f));
    }
    CHECK_CUDA(cudaMemcpy((void*)targets[t], fill, maxBytes, cudaMemcpyHostToDevice));
  }
  for (size_t i = 0; i < maxHidden; i++) fill[i] = bf16Of(0.75f + (float)(i % 7) * 0.0625f);
  CHECK_CUDA(cudaMemcpy(b.weight, fill, maxHidden * 2, cudaMemcpyHostToDevice));

  FILE* csv = NULL;
  if (rank == 0 && o->csv) {
    csv = fopen(o->csv, "a");
    if (!csv) {
      fprintf(stderr, "fused_norm_perf: %s: %s\n", o->csv, strerror(errno));
      return 1;
    }
    if (ftell(csv) == 0) fprintf(csv, "kind,form,kernel,hidden,tokens,row_threads,block_threads,us,GBps,check\n");
  }
  if (rank == 0) {
    printf(
        "# fused_norm_perf: %d ranks, %d GPUs%s, bf16, %s input, CUDA graphs of %d calls, %d replays (%d "
        "warm-up), fused form %s (FCCL_FUSED_ALGO), one-shot kernel %s (FCCL_FUSED_KERNEL)\n",
        o->nranks, gpus, o->nranks > gpus ? " (ranks share GPUs)" : "", o->registered ? "registered" : "plain",
        o->calls, o->iters, o->warmup, form, kernel);
    printf(
        "# pair: fcclAllReduce + fccl's add + RMSNorm kernel; norm: that kernel alone; GB/s: bytes of the local "
        "part (input read, residual read and written, output written, weight once) / time\n");
    printf(
        "# same: fused output and residual against the norm's: yes (bitwise), ulp (residual bitwise, output within "
        "one ulp), NO\n");
    printf("%8s %7s %7s %7s %11s %10s %8s %10s %10s %8s %8s %5s\n", "form", "kernel", "hidden", "tokens", "bytes",
           "fused(us)", "GB/s", "pair(us)", "norm(us)", "GB/s", "speedup", "same");
  }
  int status = 0;
  for (int h = 0; h < o->hiddens && status == 0; h++)
    for (int t = 0; t < o->ntokens && status == 0; t++) {
      status = runSize(rank, comm, stream, o, &b, o->tokens[t], o->hidden[h], form, kernel, csv);
      fflush(stdout);
    }
  if (csv) fclose(csv);
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
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) cudaFreeHost(*host[i]);
  cudaStreamDestroy(stream);
  if (fcclCommDestroy(comm) != fcclSuccess) status = 1;
  return status;
}

static void usage(FILE* out) {
  fprintf(out,
          "usage: fused_norm_perf [-g ranks] [-H hidden[,hidden...]] [-t min:max | -t tokens[,tokens...]]\n"
          "          [-n calls per graph] [-w warm-up replays] [-i timed replays] [-R 0|1 registered input]\n"
          "          [-F form[,form...]] [-K kernel[,kernel...]] [-b 0|1] [-C] [--csv FILE] [-h]\n"
          "  -g, --ngpus N      ranks, one process each (default: every GPU; more than the GPUs share them)\n"
          "  -H, --hidden LIST  hidden sizes, comma separated, 1..32768 (default 4096,8192)\n"
          "  -t, --tokens A:B   tokens from A to B, doubling (default 1:8192), or a list, comma separated\n"
          "  -n, --calls N      calls per CUDA graph (default 20)\n"
          "  -w, --warmup N     warm-up replays (default 5)\n"
          "  -i, --iters N      timed replays (default 20)\n"
          "  -R, --registered B 1: the input in registered memory (default 0)\n"
          "  -F, --form LIST    forms of the fused call, comma separated, one sweep each: auto, oneshot, twoshot\n"
          "                     (default auto; the automatic choice is docs/fused.md's)\n"
          "  -K, --kernel LIST  the one-shot form's kernel, one sweep each: row, legacy (default row)\n"
          "  -b, --baseline B   0: time the fused call only (default 1: also the pair and the norm alone)\n"
          "  -C, --candidates   also time the norm in the candidate shapes of the row (threads per row, per block)\n"
          "      --csv FILE     append every timing as a CSV row (kind,form,kernel,hidden,tokens,row_threads,\n"
          "                     block_threads,us,GBps,check)\n"
          "  -h, --help         this text\n");
}

/* Indices of the comma-separated names of `arg` in names[count], into out; their number, or -1 for an unknown one. */
static int parseNames(char* arg, const char* const* names, int count, int* out) {
  int n = 0;
  for (char* f = strtok(arg, ","); f; f = strtok(NULL, ",")) {
    int known = -1;
    for (int k = 0; k < count; k++)
      if (strcmp(f, names[k]) == 0) known = k;
    if (known < 0 || n == count) return -1;
    out[n++] = known;
  }
  return n > 0 ? n : -1;
}

/* -t: "A:B" doubling from A to B, or a comma list. 0 when malformed. */
static int parseTokens(const char* arg, struct options* o) {
  size_t lo = 0, hi = 0;
  char tail = 0;
  o->ntokens = 0;
  if (strchr(arg, ':')) {
    if (sscanf(arg, "%zu:%zu%c", &lo, &hi, &tail) != 2 || lo < 1 || hi < lo) return 0;
    for (size_t t = lo; t <= hi && o->ntokens < MAX_TOKENS; t *= 2) o->tokens[o->ntokens++] = t;
    return 1;
  }
  char copy[512];
  snprintf(copy, sizeof(copy), "%s", arg);
  for (char* s = strtok(copy, ","); s; s = strtok(NULL, ",")) {
    char* end = NULL;
    const unsigned long long t = strtoull(s, &end, 10);
    if (*end != '\0' || t < 1 || o->ntokens == MAX_TOKENS) return 0;
    o->tokens[o->ntokens++] = (size_t)t;
  }
  return o->ntokens > 0;
}

int main(int argc, char** argv) {
  struct options o = {0, {4096, 8192}, 2, {0}, 0, 20, 5, 20, 0, 1, 0, {0}, 1, {0}, 1, NULL};
  parseTokens("1:8192", &o);
  int badList = 0;
  static const struct option longOptions[] = {{"ngpus", required_argument, NULL, 'g'},
                                              {"hidden", required_argument, NULL, 'H'},
                                              {"tokens", required_argument, NULL, 't'},
                                              {"calls", required_argument, NULL, 'n'},
                                              {"warmup", required_argument, NULL, 'w'},
                                              {"iters", required_argument, NULL, 'i'},
                                              {"registered", required_argument, NULL, 'R'},
                                              {"form", required_argument, NULL, 'F'},
                                              {"kernel", required_argument, NULL, 'K'},
                                              {"baseline", required_argument, NULL, 'b'},
                                              {"candidates", no_argument, NULL, 'C'},
                                              {"csv", required_argument, NULL, 'c'},
                                              {"help", no_argument, NULL, 'h'},
                                              {NULL, 0, NULL, 0}};
  int opt;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":g:H:t:n:w:i:R:F:K:b:Ch", longOptions, NULL)) != -1) {
    switch (opt) {
      case 'g': o.nranks = atoi(optarg); break;
      case 'H': {
        o.hiddens = 0;
        for (char* s = strtok(optarg, ","); s && o.hiddens < MAX_HIDDEN; s = strtok(NULL, ","))
          o.hidden[o.hiddens++] = strtoull(s, NULL, 10);
        break;
      }
      case 't': badList |= !parseTokens(optarg, &o); break;
      case 'n': o.calls = atoi(optarg); break;
      case 'w': o.warmup = atoi(optarg); break;
      case 'i': o.iters = atoi(optarg); break;
      case 'R': o.registered = atoi(optarg); break;
      case 'F': badList |= (o.nforms = parseNames(optarg, kForms, MAX_FORMS, o.forms)) < 0; break;
      case 'K': badList |= (o.nkernels = parseNames(optarg, kKernels, MAX_KERNELS, o.kernels)) < 0; break;
      case 'b': o.baseline = atoi(optarg); break;
      case 'C': o.candidates = 1; break;
      case 'c': o.csv = optarg; break;
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
  int bad = o.hiddens < 1 || o.ntokens < 1 || o.calls < 1 || o.iters < 1 || o.warmup < 0 || o.nranks < 0 ||
            o.nranks > MAX_RANKS || (o.baseline != 0 && o.baseline != 1) || (o.candidates && !o.baseline);
  for (int h = 0; h < o.hiddens; h++) bad |= o.hidden[h] < 1 || o.hidden[h] > 32768;
  if (bad || badList || optind < argc) {
    fprintf(stderr, "fused_norm_perf: %s\n",
            optind < argc ? "unexpected argument"
            : badList     ? "-t takes A:B or a list of token counts; -F auto, oneshot, twoshot; -K row, legacy"
                          : "a value is out of range (-C needs -b 1)");
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
  /* One set of ranks per form and kernel: the library reads FCCL_FUSED_ALGO and FCCL_FUSED_KERNEL once per process. */
  for (int f = 0; f < o.nforms && failed == 0; f++) {
    for (int k = 0; k < o.nkernels && failed == 0; k++) {
      memset(sh, 0, sizeof(*sh));
      fflush(stdout);
      pid_t pids[MAX_RANKS];
      int started = 0;
      for (int r = 0; r < o.nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) _exit(rankMain(r, gpus, &o, sh, kForms[o.forms[f]], kKernels[o.kernels[k]]));
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
  }
  munmap(sh, sizeof(*sh));
  if (failed) fprintf(stderr, "fused_norm_perf: %d ranks failed\n", failed);
  return failed ? 1 : 0;
}
