/* SPDX-License-Identifier: Apache-2.0 */
/*
 * moe_perf's inputs and its result check (tools/moe_perf.h). The rows are normal bf16 values (2^-7 .. 2, either
 * sign) or FP8 e4m3 bytes of exponent 0..7 (never NaN) with scales 0.5 .. 1.375, the weights 0.25 .. 1.25: all exact
 * in fp32, so that the reference's fp32 fma chain is the kernel's, bit for bit, and its order shows.
 */
#include "moe_perf.h"

#include "bench/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t moePerfMix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull ^ b * 0xc2b2ae3d27d4eb4full ^ c * 0x165667b19e3779f9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void moePerfRoute(int rank, size_t t, int topk, int experts, int32_t* row) {
  for (int j = 0; j < topk; j++) {
    for (uint64_t draw = 0;; draw++) {
      const int32_t e = (int32_t)(moePerfMix((uint64_t)rank, t, (uint64_t)j * 1024 + draw) % (uint64_t)experts);
      int taken = 0;
      for (int i = 0; i < j; i++) taken |= row[i] == e;
      if (!taken) {
        row[j] = e;
        break;
      }
    }
  }
}

int moePerfGoesTo(int source, size_t t, const struct moePerfOptions* o, int rank) {
  int32_t row[8];
  moePerfRoute(source, t, o->topk, o->perRank * o->nranks, row);
  for (int j = 0; j < o->topk; j++)
    if (row[j] / o->perRank == rank) return 1;
  return 0;
}

/* Element i of token t of rank (hidden <= 65536, so t x 65536 + i names it). */
static uint16_t bf16Element(int rank, size_t t, size_t i) {
  const uint64_t r = moePerfMix((uint64_t)rank, t * 65536 + i, 7);
  return (uint16_t)((((r >> 20) & 1) << 15) | ((120 + (r & 7)) << 7) | ((r >> 3) & 0x7f));
}
static uint8_t fp8Element(int rank, size_t t, size_t i) {
  return (uint8_t)(moePerfMix((uint64_t)rank, t * 65536 + i, 7) & 0xbb); /* bit 6 clear: exponent 0..7 */
}
static float scaleOf(int rank, size_t t, size_t s) {
  return 0.5f + (float)(moePerfMix((uint64_t)rank, t * 1024 + s, 11) & 7) / 8.0f;
}
static float weightOf(int rank, size_t t, int j) {
  return 0.25f + (float)(moePerfMix((uint64_t)rank, t, 100 + (uint64_t)j) & 1023) / 1024.0f;
}
static float fp8Value(uint8_t b) {
  const int exponent = (b >> 3) & 0xf, mantissa = b & 7;
  const float magnitude = exponent ? ldexpf(1.0f + (float)mantissa / 8.0f, exponent - 7)
                                   : ldexpf((float)mantissa / 8.0f, -6);
  return (b & 0x80) ? -magnitude : magnitude;
}
/* What the check's expert returns for element i of token t of source: the row itself, FP8 dequantised to bf16. */
static uint16_t expertOut(const struct moePerfOptions* o, int source, size_t t, size_t i) {
  if (!o->fp8) return bf16Element(source, t, i);
  return benchFloatToBf16(fp8Value(fp8Element(source, t, i)) * scaleOf(source, t, i / 128));
}

int moePerfUpload(struct moePerfRank* c) {
  const struct moePerfOptions* o = c->o;
  const int rank = c->rank, k = o->topk;
  const size_t tokens = c->tokens, hidden = o->hidden, elem = o->fp8 ? 1 : 2, scales = hidden / 128;
  int32_t* topk = malloc(tokens * (size_t)k * sizeof(int32_t) + 16);
  float* weights = malloc(tokens * (size_t)k * sizeof(float) + 16);
  uint8_t* x = malloc(tokens * hidden * elem + 16);
  float* xScales = malloc(tokens * scales * sizeof(float) + 16);
  int failed = !topk || !weights || !x || !xScales;
  for (size_t t = 0; t < tokens && !failed; t++) {
    moePerfRoute(rank, t, k, o->perRank * o->nranks, topk + t * (size_t)k);
    for (int j = 0; j < k; j++) weights[t * (size_t)k + (size_t)j] = weightOf(rank, t, j);
    for (size_t s = 0; s < scales; s++) xScales[t * scales + s] = scaleOf(rank, t, s);
    for (size_t i = 0; i < hidden; i++) {
      if (o->fp8) {
        x[t * hidden + i] = fp8Element(rank, t, i);
      } else {
        const uint16_t bits = bf16Element(rank, t, i);
        memcpy(x + (t * hidden + i) * 2, &bits, 2);
      }
    }
  }
  for (int peer = 0; peer < o->nranks && !failed; peer++) {
    size_t to = 0, from = 0;
    for (size_t t = 0; t < tokens; t++) to += (size_t)moePerfGoesTo(rank, t, o, peer);
    for (size_t t = 0; t < tokens; t++) from += (size_t)moePerfGoesTo(peer, t, o, rank);
    c->sendBytes[peer] = to * c->rowBytes;
    c->recvBytes[peer] = from * c->rowBytes;
  }
  if (!failed)
    failed = cudaMemcpy(c->topk, topk, tokens * (size_t)k * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
             cudaMemcpy(c->weights, weights, tokens * (size_t)k * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
             cudaMemcpy(c->x, x, tokens * hidden * elem, cudaMemcpyHostToDevice) != cudaSuccess ||
             cudaMemcpy(c->xScales, xScales, tokens * scales * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
             cudaMemset(c->y, 0x3c, c->recvRows * hidden * 2) != cudaSuccess || /* bf16 ~0.01 where not checked */
             /* the copies and fills are on the legacy stream, which the non-blocking stream does not wait for */
             cudaDeviceSynchronize() != cudaSuccess;
  if (failed) fprintf(stderr, "rank %d: the inputs of %zu tokens could not be made\n", rank, tokens);
  free(topk);
  free(weights);
  free(x);
  free(xScales);
  return failed;
}

/* The rows of local expert e (global index expert) against the reference, and y's rows for them written to host
 * yRows: every source in rank order, each one's tokens in order (docs/moe.md#dispatch). */
static int64_t checkExpert(const struct moePerfRank* c, const int32_t* routing, int expert, size_t rows,
                           const uint8_t* gotX, const float* gotScales, const float* gotWeights,
                           const int32_t* gotSources, uint16_t* yRows) {
  const struct moePerfOptions* o = c->o;
  const size_t hidden = o->hidden, elem = o->fp8 ? 1 : 2, scales = hidden / 128, k = (size_t)o->topk;
  int64_t wrong = 0;
  size_t row = 0;
  for (int source = 0; source < o->nranks; source++) {
    for (size_t t = 0; t < c->tokens; t++) {
      const int32_t* entries = routing + ((size_t)source * c->tokens + t) * k;
      for (size_t j = 0; j < k; j++) {
        if (entries[j] != expert || row >= rows) continue;
        const uint8_t* x = gotX + row * hidden * elem;
        for (size_t i = 0; i < hidden; i++) {
          if (o->fp8) {
            wrong += x[i] != fp8Element(source, t, i);
          } else {
            const uint16_t want = bf16Element(source, t, i);
            wrong += memcmp(x + i * 2, &want, 2) != 0;
          }
          yRows[row * hidden + i] = expertOut(o, source, t, i);
        }
        for (size_t s = 0; o->fp8 && s < scales; s++) wrong += gotScales[row * scales + s] != scaleOf(source, t, s);
        wrong += gotWeights[row] != weightOf(source, t, (int)j);
        wrong += gotSources[row] != (int32_t)((size_t)source * c->maxTokens + t);
        row++;
      }
    }
  }
  return wrong;
}

#define CHECK_STEP(ok, what)                                                                             \
  do {                                                                                                   \
    if (!(ok)) {                                                                                         \
      fprintf(stderr, "rank %d: the check's %s failed: %s\n", c->rank, what, fcclGetLastError(c->comm)); \
      failed = 1;                                                                                        \
      goto done;                                                                                         \
    }                                                                                                    \
  } while (0)

int moePerfCheck(struct moePerfRank* c, int64_t* wrong) {
  const struct moePerfOptions* o = c->o;
  const int rank = c->rank, local = o->perRank;
  const size_t hidden = o->hidden, elem = o->fp8 ? 1 : 2, scales = hidden / 128, k = (size_t)o->topk;
  const size_t routingLen = (size_t)o->nranks * c->tokens * k;
  int failed = 0;
  *wrong = 0;
  int32_t counts[1024 + 1], offsets[1024 + 1];
  uint8_t* gotX = NULL;
  float *gotScales = NULL, *gotWeights = NULL;
  int32_t* gotSources = NULL;
  uint16_t *yRows = NULL, *out = NULL;
  size_t wants[1024], most = 0; /* each local expert's rows; host buffers for the largest block only */
  int32_t* routing = malloc(routingLen * sizeof(int32_t) + 16);
  CHECK_STEP(routing, "host memory");
  for (int source = 0; source < o->nranks; source++)
    for (size_t t = 0; t < c->tokens; t++)
      moePerfRoute(source, t, o->topk, o->perRank * o->nranks, routing + ((size_t)source * c->tokens + t) * k);
  for (int e = 0; e < local; e++) {
    wants[e] = 0;
    for (size_t n = 0; n < routingLen; n++) wants[e] += routing[n] == rank * local + e;
    most = wants[e] > most ? wants[e] : most;
  }
  gotX = malloc(most * hidden * elem + 16);
  gotScales = malloc(most * scales * sizeof(float) + 16);
  gotWeights = malloc(most * sizeof(float) + 16);
  gotSources = malloc(most * sizeof(int32_t) + 16);
  yRows = malloc(most * hidden * 2 + 16);
  out = malloc(c->tokens * hidden * 2 + 16);
  CHECK_STEP(gotX && gotScales && gotWeights && gotSources && yRows && out, "host memory");
  /* Poisoned first, so that what a call forgot to write shows. */
  CHECK_STEP(cudaMemset(c->recvX, 0x5a, c->recvRows * hidden * elem) == cudaSuccess &&
                 cudaMemset(c->recvWeights, 0x5a, c->recvRows * 4) == cudaSuccess &&
                 cudaMemset(c->recvSources, 0x5a, c->recvRows * 4) == cudaSuccess &&
                 cudaMemset(c->out, 0x5a, c->maxTokens * hidden * 2) == cudaSuccess &&
                 cudaDeviceSynchronize() == cudaSuccess, /* before the rank's non-blocking stream reads them */
             "poisoning");
  const fcclMoeRecv_t recv = {c->recvX,       o->fp8 ? c->recvScales : NULL,
                              c->recvWeights, c->recvSources,
                              c->recvCounts,  c->recvOffsets};
  CHECK_STEP(fcclMoeDispatch(c->x, o->fp8 ? c->xScales : NULL, c->topk, fcclInt32, c->weights, c->tokens,
                             o->fp8 ? fcclFloat8e4m3 : fcclBfloat16, &recv, o->blocks, c->layout,
                             c->stream) == fcclSuccess &&
                 cudaStreamSynchronize(c->stream) == cudaSuccess,
             "dispatch");
  CHECK_STEP(cudaMemcpy(counts, c->recvCounts, (size_t)local * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
                 cudaMemcpy(offsets, c->recvOffsets, (size_t)(local + 1) * 4, cudaMemcpyDeviceToHost) == cudaSuccess,
             "reading of the counts");
  for (int e = 0; e < local; e++) {
    const int expert = rank * local + e;
    const size_t want = wants[e], first = (size_t)offsets[e];
    const int placed = offsets[e] >= 0 && counts[e] >= 0 && first + want <= c->recvRows &&
                       (e == 0 || (size_t)offsets[e] >= (size_t)offsets[e - 1] + (size_t)counts[e - 1]);
    if ((size_t)counts[e] != want || !placed) {
      fprintf(stderr, "rank %d: local expert %d: %d rows at row %d, want %zu\n", rank, e, counts[e], offsets[e], want);
      *wrong += (int64_t)(want * hidden) + 1;
      continue;
    }
    CHECK_STEP(cudaMemcpy(gotX, (char*)c->recvX + first * hidden * elem, want * hidden * elem,
                          cudaMemcpyDeviceToHost) == cudaSuccess &&
                   (!o->fp8 || cudaMemcpy(gotScales, (float*)c->recvScales + first * scales, want * scales * 4,
                                          cudaMemcpyDeviceToHost) == cudaSuccess) &&
                   cudaMemcpy(gotWeights, (float*)c->recvWeights + first, want * 4, cudaMemcpyDeviceToHost) ==
                       cudaSuccess &&
                   cudaMemcpy(gotSources, (int32_t*)c->recvSources + first, want * 4, cudaMemcpyDeviceToHost) ==
                       cudaSuccess,
               "reading of the rows");
    *wrong += checkExpert(c, routing, expert, want, gotX, gotScales, gotWeights, gotSources, yRows);
    /* The experts' outputs, in the rows the combine reads. */
    CHECK_STEP(cudaMemcpy((uint16_t*)c->y + first * hidden, yRows, want * hidden * 2, cudaMemcpyHostToDevice) ==
                   cudaSuccess,
               "writing of the experts' outputs");
  }
  CHECK_STEP(cudaDeviceSynchronize() == cudaSuccess, "writing of the experts' outputs"); /* as the poison above */
  CHECK_STEP(fcclMoeCombine(c->y, c->out, c->weights, c->tokens, fcclBfloat16, o->blocks, c->layout, c->stream) ==
                     fcclSuccess &&
                 cudaStreamSynchronize(c->stream) == cudaSuccess &&
                 cudaMemcpy(out, c->out, c->tokens * hidden * 2, cudaMemcpyDeviceToHost) == cudaSuccess,
             "combine");
  for (size_t t = 0; t < c->tokens; t++) {
    const int32_t* entries = routing + ((size_t)rank * c->tokens + t) * k;
    int order[8];
    for (size_t j = 0; j < k; j++) order[j] = (int)j;
    for (size_t a = 1; a < k; a++) /* ascending expert index: the combine's order */
      for (size_t b = a; b > 0 && entries[order[b - 1]] > entries[order[b]]; b--) {
        const int swap = order[b];
        order[b] = order[b - 1];
        order[b - 1] = swap;
      }
    for (size_t i = 0; i < hidden; i++) {
      const float value = benchBf16ToFloat(expertOut(o, rank, t, i));
      float acc = 0.0f;
      for (size_t a = 0; a < k; a++) acc = fmaf(weightOf(rank, t, order[a]), value, acc);
      *wrong += out[t * hidden + i] != benchFloatToBf16(acc);
    }
  }
done:
  free(routing);
  free(gotX);
  free(gotScales);
  free(gotWeights);
  free(gotSources);
  free(yRows);
  free(out);
  return failed;
}
