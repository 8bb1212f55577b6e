/* SPDX-License-Identifier: Apache-2.0 */
/*
 * moe_perf: fcclMoeDispatch and fcclMoeCombine timed in the nccl-tests shape (docs/moe.md#what-is-measured-and-what-
 * waits), one line per token count: each rank routes its tokens to top-k distinct experts drawn uniformly (a seeded
 * generator, so every rank knows every rank's routing), -n calls are captured into one CUDA graph (-G 1, the
 * default) or enqueued eagerly (-G 0), run -w times to warm up and -i times timed with CUDA events; the time per
 * call is printed with the bandwidth as DeepEP counts it: the bytes of the token rows this rank receives in the
 * dispatch (each token once per receiving rank, its own tokens included; FP8 rows with their scales), and sends back
 * in the combine (bf16), over the call's time. Beside them, as a server would carry the same exchange otherwise:
 * NCCL's grouped send/recv of exactly those rows (dispatch-shaped and combine-shaped; when built with NCCL, -N 1),
 * and fccl's all-gather of every rank's tokens + reduce-scatter of the outputs (vLLM's default expert-parallel path
 * on one node). Rank 0's numbers are printed. One forked process per rank, GPU rank % GPUs; with more ranks than
 * GPUs the ranks share them and the times say nothing of the links.
 *
 *   moe_perf                                every GPU, hidden 7168, top-8, 32 experts per rank, bf16
 *   moe_perf -g 8 -t 128,4096 -f 1 -b 24    FP8 dispatch, an SM budget of 24 blocks
 */
#include "cuda_status.h"
#include "fccl.h"
#include "fccl_build_config.h"

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

#if FCCL_HAVE_NCCL
#include <nccl.h>
#endif

#define MAX_RANKS 8
#define MAX_TOKEN_COUNTS 16

struct options {
  int nranks, topk, perRank, fp8, blocks, graph, calls, warmup, iters, nccl;
  size_t hidden;
  size_t tokens[MAX_TOKEN_COUNTS];
  int ntokens;
};

/* Shared with the forked ranks: the unique ids, rank 0's, and the flags that they are there. */
struct shared {
  volatile int idReady, ncclIdReady;
  fcclUniqueId id;
  unsigned char ncclId[128];
};

#define CHECK_CUDA(call)                                                                                    \
  do {                                                                                                      \
    cudaError_t e_ = (call);                                                                                \
    if (e_ != cudaSuccess) {                                                                                \
      fprintf(stderr, "rank %d: %s:%d: %s: %s\n", rank, __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      return 1;                                                                                             \
    }                                                                                                       \
  } while (0)
#define CHECK_FCCL(call)                                                                                       \
  do {                                                                                                         \
    fcclResult_t r_ = (call);                                                                                  \
    if (r_ != fcclSuccess) {                                                                                   \
      fprintf(stderr, "rank %d: %s:%d: %s: %s: %s\n", rank, __FILE__, __LINE__, #call, fcclGetErrorString(r_), \
              fcclGetLastError(NULL));                                                                         \
      return 1;                                                                                                \
    }                                                                                                          \
  } while (0)

/* splitmix64: the routing and data are pure functions of (rank, token, draw). */
static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull ^ b * 0xc2b2ae3d27d4eb4full ^ c * 0x165667b19e3779f9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Token t of rank: topk distinct experts of experts, uniform. */
static void route(int rank, size_t t, int topk, int experts, int32_t* row) {
  for (int j = 0; j < topk; j++) {
    for (uint64_t draw = 0;; draw++) {
      const int32_t e = (int32_t)(mix((uint64_t)rank, t, (uint64_t)j * 1024 + draw) % (uint64_t)experts);
      int taken = 0;
      for (int i = 0; i < j; i++) taken |= row[i] == e;
      if (!taken) {
        row[j] = e;
        break;
      }
    }
  }
}

/* Token t of source goes to rank (one of its experts is rank's). */
static int goesTo(int source, size_t t, const struct options* o, int rank) {
  int32_t row[8];
  route(source, t, o->topk, o->perRank * o->nranks, row);
  for (int j = 0; j < o->topk; j++)
    if (row[j] / o->perRank == rank) return 1;
  return 0;
}

/* One rank's buffers, for the largest token count. */
struct ctx {
  int rank;
  const struct options* o;
  fcclComm_t comm;
  fcclMoeLayout_t layout;
  cudaStream_t stream;
  size_t recvRows, rowBytes;
  void *x, *xScales, *topk, *weights, *recvX, *recvScales, *recvCounts, *y, *out, *gathered, *partial;
  size_t tokens;                                     /* of the case being timed */
  size_t sendBytes[MAX_RANKS], recvBytes[MAX_RANKS]; /* dispatch-shaped NCCL exchange of the case, per peer */
  void *ncclSend, *ncclRecv;
#if FCCL_HAVE_NCCL
  ncclComm_t nccl;
#endif
};

enum op { OP_DISPATCH, OP_COMBINE, OP_NCCL_DISPATCH, OP_NCCL_COMBINE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_KINDS };
static const char* const kOpNames[OP_KINDS] = {"dispatch",     "combine",    "nccl dispatch",
                                               "nccl combine", "all-gather", "reduce-scatter"};

/* Enqueues one call of op on the rank's stream; 0 on success. */
static int enqueue(struct ctx* c, enum op op) {
  const struct options* o = c->o;
  const int fp8 = o->fp8;
  const size_t count = c->tokens * o->hidden;
  switch (op) {
    case OP_DISPATCH: {
      const fcclMoeRecv_t recv = {c->recvX, fp8 ? c->recvScales : NULL, NULL, NULL, c->recvCounts, NULL};
      return fcclMoeDispatch(c->x, fp8 ? c->xScales : NULL, c->topk, fcclInt32, c->weights, c->tokens,
                             fp8 ? fcclFloat8e4m3 : fcclBfloat16, &recv, o->blocks, c->layout,
                             c->stream) != fcclSuccess;
    }
    case OP_COMBINE:
      return fcclMoeCombine(c->y, c->out, c->weights, c->tokens, fcclBfloat16, o->blocks, c->layout, c->stream) !=
             fcclSuccess;
    case OP_ALL_GATHER: return fcclAllGather(c->y, c->gathered, count, fcclBfloat16, c->comm, c->stream) != fcclSuccess;
    case OP_REDUCE_SCATTER:
      return fcclReduceScatter(c->gathered, c->partial, count, fcclBfloat16, fcclSum, c->comm, c->stream) !=
             fcclSuccess;
    case OP_NCCL_DISPATCH:
    case OP_NCCL_COMBINE: {
#if FCCL_HAVE_NCCL
      /* The combine sends back what the dispatch received, as bf16 rows. */
      const int back = op == OP_NCCL_COMBINE;
      size_t sendOffset = 0, recvOffset = 0;
      if (ncclGroupStart() != ncclSuccess) return 1;
      for (int peer = 0; peer < o->nranks; peer++) {
        size_t sendBytes = back ? c->recvBytes[peer] : c->sendBytes[peer];
        size_t recvBytes = back ? c->sendBytes[peer] : c->recvBytes[peer];
        if (back) { /* rows of hidden bf16 (the dispatch's may be FP8 rows with their scales) */
          sendBytes = sendBytes / c->rowBytes * o->hidden * 2;
          recvBytes = recvBytes / c->rowBytes * o->hidden * 2;
        }
        if (ncclSend((char*)c->ncclSend + sendOffset, sendBytes, ncclUint8, peer, c->nccl, c->stream) != ncclSuccess ||
            ncclRecv((char*)c->ncclRecv + recvOffset, recvBytes, ncclUint8, peer, c->nccl, c->stream) != ncclSuccess) {
          (void)ncclGroupEnd();
          return 1;
        }
        sendOffset += sendBytes;
        recvOffset += recvBytes;
      }
      return ncclGroupEnd() != ncclSuccess;
#else
      return 1;
#endif
    }
    default: return 1;
  }
}

/* Microseconds per call of op: -n calls per graph (or eagerly), -w warm-up rounds, -i timed ones; < 0 on failure. */
static double timeOp(struct ctx* c, enum op op) {
  const struct options* o = c->o;
  const int rank = c->rank;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  if (o->graph) {
    int failed = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess;
    for (int k = 0; k < o->calls && !failed; k++) failed = enqueue(c, op);
    const cudaError_t end = cudaStreamEndCapture(c->stream, &graph);
    if (failed || end != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
      fprintf(stderr, "rank %d: %s: capture failed: %s\n", rank, kOpNames[op], fcclGetLastError(NULL));
      if (graph) cudaGraphDestroy(graph);
      return -1.0;
    }
  }
  cudaEvent_t start = NULL, stop = NULL;
  double us = -1.0;
  int ok = cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess;
  for (int round = 0; round < o->warmup + o->iters && ok; round++) {
    if (round == o->warmup)
      ok = fcclBarrier(c->comm, c->stream) == fcclSuccess && cudaEventRecord(start, c->stream) == cudaSuccess;
    if (o->graph)
      ok = ok && cudaGraphLaunch(exec, c->stream) == cudaSuccess;
    else
      for (int k = 0; k < o->calls && ok; k++) ok = enqueue(c, op) == 0;
  }
  ok = ok && cudaEventRecord(stop, c->stream) == cudaSuccess && cudaStreamSynchronize(c->stream) == cudaSuccess;
  float ms = 0;
  if (ok && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess)
    us = (double)ms * 1000.0 / ((double)o->iters * o->calls);
  else
    fprintf(stderr, "rank %d: %s failed: %s\n", rank, kOpNames[op], fcclGetLastError(c->comm));
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  return us;
}

static int deviceAlloc(void** p, size_t bytes) { return cudaMalloc(p, bytes ? bytes : 16) != cudaSuccess; }

/* This rank's inputs for tokens: routing, rows (never NaN), weights, scales; and the NCCL exchange's sizes. */
static int upload(struct ctx* c) {
  const struct options* o = c->o;
  const int rank = c->rank, k = o->topk;
  const size_t tokens = c->tokens, hidden = o->hidden, elem = o->fp8 ? 1 : 2, scales = hidden / 128;
  int32_t* topk = malloc(tokens * (size_t)k * sizeof(int32_t) + 16);
  float* weights = malloc(tokens * (size_t)k * sizeof(float) + 16);
  uint8_t* x = malloc(tokens * hidden * elem + 16);
  float* xScales = malloc(tokens * scales * sizeof(float) + 16);
  int failed = !topk || !weights || !x || !xScales;
  for (size_t t = 0; t < tokens && !failed; t++) {
    route(rank, t, k, o->perRank * o->nranks, topk + t * (size_t)k);
    for (int j = 0; j < k; j++) weights[t * (size_t)k + (size_t)j] = 1.0f / (float)(j + 1);
    for (size_t s = 0; s < scales; s++) xScales[t * scales + s] = 0.5f;
  }
  for (size_t i = 0; i < tokens * hidden * elem && !failed; i++)
    x[i] = (uint8_t)(mix((uint64_t)rank, i, 7) & 0x3b); /* small finite values in bf16 and FP8 alike */
  for (int peer = 0; peer < o->nranks && !failed; peer++) {
    size_t to = 0, from = 0;
    for (size_t t = 0; t < tokens; t++) to += (size_t)goesTo(rank, t, o, peer);
    for (size_t t = 0; t < tokens; t++) from += (size_t)goesTo(peer, t, o, rank);
    c->sendBytes[peer] = to * c->rowBytes;
    c->recvBytes[peer] = from * c->rowBytes;
  }
  if (!failed)
    failed = cudaMemcpy(c->topk, topk, tokens * (size_t)k * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
             cudaMemcpy(c->weights, weights, tokens * (size_t)k * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
             cudaMemcpy(c->x, x, tokens * hidden * elem, cudaMemcpyHostToDevice) != cudaSuccess ||
             cudaMemcpy(c->xScales, xScales, tokens * scales * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
             cudaMemset(c->y, 0x3c, c->recvRows * hidden * 2) != cudaSuccess; /* bf16 ~1.0 */
  if (failed) fprintf(stderr, "rank %d: the inputs of %zu tokens could not be made\n", rank, tokens);
  free(topk);
  free(weights);
  free(x);
  free(xScales);
  return failed;
}

static int rankMain(int rank, int gpus, const struct options* o, struct shared* sh) {
  if (o->nranks > gpus) { /* NCCL takes ranks that share a GPU as hosts of their own */
    char host[32];
    snprintf(host, sizeof(host), "moe-perf-rank-%d", rank);
    setenv("NCCL_HOSTID", host, 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  }
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  CHECK_CUDA(cudaSetDevice(rank % gpus));
  if (rank == 0) {
    CHECK_FCCL(fcclGetUniqueId((fcclUniqueId*)&sh->id));
    __atomic_store_n(&sh->idReady, 1, __ATOMIC_RELEASE);
  } else {
    for (const time_t until = time(NULL) + 60; !__atomic_load_n(&sh->idReady, __ATOMIC_ACQUIRE); usleep(1000))
      if (time(NULL) > until) {
        fprintf(stderr, "rank %d: no unique id from rank 0 in 60 s\n", rank);
        return 1;
      }
  }
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = o->nranks > gpus;
  struct ctx c;
  memset(&c, 0, sizeof(c));
  c.rank = rank;
  c.o = o;
  CHECK_FCCL(fcclCommInitRankConfig(&c.comm, o->nranks, *(fcclUniqueId*)&sh->id, rank, &config));
  CHECK_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  size_t maxTokens = 0;
  for (int i = 0; i < o->ntokens; i++) maxTokens = o->tokens[i] > maxTokens ? o->tokens[i] : maxTokens;
  fcclMoeConfig_t moe = FCCL_MOE_CONFIG_INITIALIZER;
  moe.numExperts = o->perRank * o->nranks;
  moe.topk = o->topk;
  moe.hidden = o->hidden;
  moe.maxTokensPerRank = maxTokens;
  moe.blocks = o->blocks;
  CHECK_FCCL(fcclMoeLayoutCreate(c.comm, &moe, &c.layout));
  CHECK_FCCL(fcclMoeLayoutRecvRows(c.layout, &c.recvRows));
  const size_t hidden = o->hidden, rowBf16 = hidden * 2;
  c.rowBytes = o->fp8 ? hidden + hidden / 128 * 4 : rowBf16;
  const size_t nrows = (size_t)o->nranks * maxTokens;
  int failed = deviceAlloc(&c.x, maxTokens * rowBf16) || deviceAlloc(&c.xScales, maxTokens * hidden / 128 * 4) ||
               deviceAlloc(&c.topk, maxTokens * (size_t)o->topk * 4) ||
               deviceAlloc(&c.weights, maxTokens * (size_t)o->topk * 4) ||
               deviceAlloc(&c.recvX, c.recvRows * rowBf16) ||
               deviceAlloc(&c.recvScales, c.recvRows * hidden / 128 * 4) ||
               deviceAlloc(&c.recvCounts, (size_t)o->perRank * 4) || deviceAlloc(&c.y, c.recvRows * rowBf16) ||
               deviceAlloc(&c.out, maxTokens * rowBf16) || deviceAlloc(&c.gathered, nrows * rowBf16) ||
               deviceAlloc(&c.partial, maxTokens * rowBf16) || deviceAlloc(&c.ncclSend, nrows * rowBf16) ||
               deviceAlloc(&c.ncclRecv, nrows * rowBf16);
  if (failed) {
    fprintf(stderr, "rank %d: out of device memory for %zu tokens x hidden %zu\n", rank, maxTokens, hidden);
    return 1;
  }
  int nccl = 0;
#if FCCL_HAVE_NCCL
  if (o->nccl) {
    if (rank == 0) {
      if (ncclGetUniqueId((ncclUniqueId*)sh->ncclId) != ncclSuccess) return 1;
      __atomic_store_n(&sh->ncclIdReady, 1, __ATOMIC_RELEASE);
    }
    for (const time_t until = time(NULL) + 60; !__atomic_load_n(&sh->ncclIdReady, __ATOMIC_ACQUIRE); usleep(1000))
      if (time(NULL) > until) return 1;
    ncclUniqueId id;
    memcpy(&id, sh->ncclId, sizeof(id));
    if (ncclCommInitRank(&c.nccl, o->nranks, id, rank) != ncclSuccess) {
      fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
      return 1;
    }
    nccl = 1;
  }
#endif
  if (rank == 0) {
    printf(
        "# moe_perf: %d ranks on %d GPUs%s, hidden %zu, top-%d of %d experts (%d per rank), %s dispatch, bf16 "
        "combine, blocks %d (0: the layout's default), %s, %d calls x %d iterations after %d warm-up\n",
        o->nranks, gpus, o->nranks > gpus ? " (shared: not link speeds)" : "", hidden, o->topk, o->perRank * o->nranks,
        o->perRank, o->fp8 ? "FP8 e4m3" : "bf16", o->blocks, o->graph ? "CUDA graphs" : "eager", o->calls, o->iters,
        o->warmup);
    printf(
        "# bandwidth: the bytes of the token rows rank 0 receives (dispatch) or sends back (combine), each token "
        "once per rank, over the time (DeepEP's count)\n");
    printf("%8s %10s %11s %9s %11s %9s %11s %11s %11s %11s\n", "tokens", "recv_tok", "dispatch_us", "disp_GB/s",
           "combine_us", "comb_GB/s", "nccl_d_us", "nccl_c_us", "ag_us", "rs_us");
  }
  for (int i = 0; i < o->ntokens && !failed; i++) {
    c.tokens = o->tokens[i];
    failed = upload(&c);
    double us[OP_KINDS];
    for (int op = 0; op < OP_KINDS; op++) us[op] = 0.0;
    for (int op = 0; op < OP_KINDS && !failed; op++) {
      if ((op == OP_NCCL_DISPATCH || op == OP_NCCL_COMBINE) && !nccl) continue;
      /* The combines return the rows of a dispatch: one, eagerly, before they are timed. */
      if (op == OP_COMBINE && (enqueue(&c, OP_DISPATCH) || cudaStreamSynchronize(c.stream) != cudaSuccess)) {
        failed = 1;
        break;
      }
      us[op] = timeOp(&c, (enum op)op);
      failed = us[op] < 0;
    }
    if (failed || rank != 0) continue;
    size_t received = 0;
    for (int peer = 0; peer < o->nranks; peer++) received += c.recvBytes[peer] / c.rowBytes;
    const double dispatchBytes = (double)received * (double)c.rowBytes, combineBytes = (double)received * rowBf16;
    printf("%8zu %10zu %11.2f %9.2f %11.2f %9.2f ", c.tokens, received, us[OP_DISPATCH],
           dispatchBytes / us[OP_DISPATCH] / 1e3, us[OP_COMBINE], combineBytes / us[OP_COMBINE] / 1e3);
    if (nccl)
      printf("%11.2f %11.2f ", us[OP_NCCL_DISPATCH], us[OP_NCCL_COMBINE]);
    else
      printf("%11s %11s ", "-", "-");
    printf("%11.2f %11.2f\n", us[OP_ALL_GATHER], us[OP_REDUCE_SCATTER]);
    fflush(stdout);
  }
  fcclResult_t async = fcclSuccess;
  if (fcclCommGetAsyncError(c.comm, &async) != fcclSuccess || async != fcclSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, fcclGetLastError(c.comm));
    failed = 1;
  }
  void* buffers[] = {c.x, c.xScales, c.topk,     c.weights, c.recvX,    c.recvScales, c.recvCounts,
                     c.y, c.out,     c.gathered, c.partial, c.ncclSend, c.ncclRecv};
  for (size_t b = 0; b < sizeof(buffers) / sizeof(buffers[0]); b++) cudaFree(buffers[b]);
  if (fcclMoeLayoutDestroy(c.layout) != fcclSuccess) failed = 1;
#if FCCL_HAVE_NCCL
  if (nccl) ncclCommDestroy(c.nccl);
#endif
  if (fcclCommDestroy(c.comm) != fcclSuccess) failed = 1;
  cudaStreamDestroy(c.stream);
  return failed;
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: moe_perf [-g ranks] [-t tokens,...] [-H hidden] [-k topk] [-e experts per rank] [-f 0|1 (FP8)]\n"
          "                [-b blocks] [-G 0|1 (graph)] [-n calls] [-w warmup] [-i iters] [-N 0|1 (NCCL beside)]\n");
}

/* "a,b,c" into out; the count, 0 when malformed. */
static int parseList(const char* text, size_t* out, int max) {
  int n = 0;
  for (const char* p = text; *p && n < max;) {
    char* end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(p, &end, 10);
    if (errno || end == p || v == 0) return 0;
    out[n++] = (size_t)v;
    if (*end == ',')
      end++;
    else if (*end)
      return 0;
    p = end;
  }
  return n;
}

int main(int argc, char** argv) {
  struct options o = {0, 8, 32, 0, 0, 1, 10, 5, 20, 1, 7168, {128, 512, 1024, 4096}, 4};
  int opt;
  while ((opt = getopt(argc, argv, "g:t:H:k:e:f:b:G:n:w:i:N:h")) != -1) {
    switch (opt) {
      case 'g': o.nranks = atoi(optarg); break;
      case 't': o.ntokens = parseList(optarg, o.tokens, MAX_TOKEN_COUNTS); break;
      case 'H': o.hidden = (size_t)strtoull(optarg, NULL, 10); break;
      case 'k': o.topk = atoi(optarg); break;
      case 'e': o.perRank = atoi(optarg); break;
      case 'f': o.fp8 = atoi(optarg); break;
      case 'b': o.blocks = atoi(optarg); break;
      case 'G': o.graph = atoi(optarg); break;
      case 'n': o.calls = atoi(optarg); break;
      case 'w': o.warmup = atoi(optarg); break;
      case 'i': o.iters = atoi(optarg); break;
      case 'N': o.nccl = atoi(optarg); break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  const int bad = o.nranks < 0 || o.nranks > MAX_RANKS || o.ntokens < 1 || o.hidden < 128 || o.hidden % 128 ||
                  o.hidden > 65536 || o.topk < 1 || o.topk > 8 || o.perRank < 1 || (o.fp8 != 0 && o.fp8 != 1) ||
                  o.blocks < 0 || (o.graph != 0 && o.graph != 1) || o.calls < 1 || o.warmup < 0 || o.iters < 1 ||
                  (o.nccl != 0 && o.nccl != 1) || optind < argc;
  if (bad) {
    fprintf(stderr,
            "moe_perf: a value is out of range (hidden: a multiple of 128 up to 65536; top-k 1..8; -t a list "
            "of token counts)\n");
    usage(stderr);
    return 2;
  }
#if !FCCL_HAVE_NCCL
  o.nccl = 0;
#endif
  /* Asked in a child: this process forks the ranks and must not initialise CUDA itself. */
  toolCudaStatus_t cuda;
  toolCudaQueryInChild(&cuda, 60);
  const int gpus = cuda.deviceCount;
  if (gpus < 1) return toolReportNoGpu("moe_perf", cuda.noGpu);
  if (o.nranks == 0) o.nranks = gpus < MAX_RANKS ? gpus : MAX_RANKS;
  if (o.topk > o.perRank * o.nranks) {
    fprintf(stderr, "moe_perf: top-%d of %d experts\n", o.topk, o.perRank * o.nranks);
    return 2;
  }
  struct shared* sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    fprintf(stderr, "moe_perf: mmap: %s\n", strerror(errno));
    return 1;
  }
  memset(sh, 0, sizeof(*sh));
  fflush(stdout);
  pid_t pids[MAX_RANKS];
  int started = 0, failed = 0;
  for (int r = 0; r < o.nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rankMain(r, gpus, &o, sh));
    if (pids[r] < 0) {
      fprintf(stderr, "moe_perf: fork: %s\n", strerror(errno));
      failed++;
      break;
    }
    started++;
  }
  for (int r = 0; r < started; r++) {
    int status = 0;
    if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
  }
  munmap(sh, sizeof(*sh));
  if (failed) fprintf(stderr, "moe_perf: %d ranks failed\n", failed);
  return failed ? 1 : 0;
}
