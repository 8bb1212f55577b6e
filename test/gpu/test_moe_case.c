/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One mixture-of-experts case against the host reference (test_moe.h): the layout and its buffers, the inputs of a
 * rank, the dispatch's outputs checked row by row (every delivered row's bits, scale, weight and source; counts and
 * offsets; every row the dispatch must not write still poisoned), the expert outputs made from the delivered rows,
 * and the combine's output checked bit for bit.
 */
#include "test_moe.h"

#include <stdlib.h>
#include <string.h>

#define MOE_MESSAGES 4 /* mismatches described per check; the rest are counted */

struct moeRefCase moeShape(int nranks, int experts, int topk, size_t hidden, size_t maxTokens, int padded,
                           int alignment) {
  struct moeRefCase c;
  memset(&c, 0, sizeof(c));
  c.nranks = nranks;
  c.experts = experts;
  c.topk = topk;
  c.hidden = hidden;
  c.maxTokens = maxTokens;
  c.padded = padded;
  c.alignment = padded ? 1 : alignment;
  c.type = fcclBfloat16;
  c.outType = fcclBfloat16;
  c.emptyRank = -1;
  return c;
}

static size_t elemBytes(fcclDataType_t type) { return type == fcclFloat8e4m3 ? 1 : 2; }

static int hostAlloc(void** p, size_t bytes) { return cudaMallocHost(p, bytes > 0 ? bytes : 16) == cudaSuccess; }
static int deviceAlloc(void** p, size_t bytes) { return cudaMalloc(p, bytes > 0 ? bytes : 16) == cudaSuccess; }

int moeBenchInit(struct moeBench* b, struct collShared* shared, fcclComm_t comm, int rank, int nranks,
                 const struct moeRefCase* shape, int blocks) {
  memset(b, 0, sizeof(*b));
  b->shared = shared;
  b->comm = comm;
  b->rank = rank;
  b->nranks = nranks;
  b->shape = *shape;
  fcclMoeConfig_t config = FCCL_MOE_CONFIG_INITIALIZER;
  config.numExperts = shape->experts;
  config.topk = shape->topk;
  config.hidden = shape->hidden;
  config.maxTokensPerRank = shape->maxTokens;
  config.recvLayout = shape->padded ? fcclMoePadded : fcclMoePacked;
  config.expertAlignment = shape->alignment;
  config.blocks = blocks;
  fcclResult_t res = fcclMoeLayoutCreate(comm, &config, &b->layout);
  if (res != fcclSuccess) {
    testFail(__FILE__, __LINE__, "rank %d: fcclMoeLayoutCreate: %s: %s", rank, fcclGetErrorString(res),
             fcclGetLastError(NULL));
    return 0;
  }
  EXPECT_EQ_INT(fcclMoeLayoutRecvRows(b->layout, &b->recvRows), fcclSuccess);
  EXPECT_EQ_INT(b->recvRows,
                moeRefRecvRows(nranks, shape->experts, shape->topk, shape->maxTokens, shape->padded, shape->alignment));
  const size_t hidden = shape->hidden, tokens = shape->maxTokens, k = (size_t)shape->topk;
  const size_t local = (size_t)(shape->experts / nranks), scales = hidden / 128 * sizeof(float);
  b->maxRow = hidden * 2;
  const struct {
    void** device;
    void** host;
    size_t bytes;
  } buffers[] = {{&b->x, &b->hX, tokens * b->maxRow},
                 {&b->xScales, &b->hXScales, tokens * scales},
                 {&b->topk, &b->hTopk, tokens * k * sizeof(int64_t)},
                 {&b->weights, &b->hWeights, tokens * k * sizeof(float)},
                 {&b->recvX, &b->hRecvX, b->recvRows * b->maxRow},
                 {&b->recvScales, &b->hRecvScales, b->recvRows * scales},
                 {&b->recvWeights, &b->hRecvWeights, b->recvRows * sizeof(float)},
                 {&b->recvSources, &b->hRecvSources, b->recvRows * sizeof(int32_t)},
                 {&b->recvCounts, &b->hRecvCounts, local * sizeof(int32_t)},
                 {&b->recvOffsets, &b->hRecvOffsets, (local + 1) * sizeof(int32_t)},
                 {&b->y, &b->hY, b->recvRows * b->maxRow},
                 {&b->out, &b->hOut, tokens * b->maxRow}};
  for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
    if (!deviceAlloc(buffers[i].device, buffers[i].bytes) || !hostAlloc(buffers[i].host, buffers[i].bytes)) {
      testFail(__FILE__, __LINE__, "rank %d: %zu bytes of buffers", rank, buffers[i].bytes);
      return 0;
    }
  b->routings = malloc((size_t)nranks * tokens * k * sizeof(int64_t));
  if (!b->routings || cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking) != cudaSuccess) {
    testFail(__FILE__, __LINE__, "rank %d: routings or stream", rank);
    return 0;
  }
  return 1;
}

void moeBenchFini(struct moeBench* b) {
  if (b->layout) EXPECT_EQ_INT(fcclMoeLayoutDestroy(b->layout), fcclSuccess);
  void* device[] = {b->x,           b->xScales,     b->topk,       b->weights,     b->recvX, b->recvScales,
                    b->recvWeights, b->recvSources, b->recvCounts, b->recvOffsets, b->y,     b->out};
  void* host[] = {b->hX,           b->hXScales,     b->hTopk,       b->hWeights,     b->hRecvX, b->hRecvScales,
                  b->hRecvWeights, b->hRecvSources, b->hRecvCounts, b->hRecvOffsets, b->hY,     b->hOut};
  for (size_t i = 0; i < sizeof(device) / sizeof(device[0]); i++) {
    if (device[i]) cudaFree(device[i]);
    if (host[i]) cudaFreeHost(host[i]);
  }
  if (b->stream) cudaStreamDestroy(b->stream);
  free(b->routings);
  memset(b, 0, sizeof(*b));
}

void moeDescribe(const struct moeCase* c, char* out, size_t size) {
  const struct moeRefCase* r = &c->ref;
  snprintf(out, size,
           "call %llu: %d ranks, %d experts, top-%d, hidden %zu, %zu tokens at most, %s%s%d, %s -> %s, %s routing%s, "
           "%s indices, blocks %d, outputs %d, %s",
           (unsigned long long)r->call, r->nranks, r->experts, r->topk, r->hidden, r->maxTokens,
           r->padded ? "padded" : "packed", r->padded ? "" : " by ", r->padded ? 0 : r->alignment, refTypeName(r->type),
           refTypeName(r->outType), moeRefRouteName(r->route), r->emptyRank >= 0 ? ", a rank without tokens" : "",
           c->idxType == fcclInt64 ? "int64" : "int32", c->blocks, c->outputs, c->weighted ? "weighted" : "unweighted");
}

/* Every rank's routing of the case (the bad entry put in), into b->routings. */
static void makeRoutings(struct moeBench* b, const struct moeCase* c) {
  const size_t per = c->ref.maxTokens * (size_t)c->ref.topk;
  for (int r = 0; r < b->nranks; r++) {
    int64_t* routing = b->routings + (size_t)r * per;
    moeRefFillRouting(&c->ref, r, routing);
    if (r == c->badRank && c->badToken < moeRefTokens(&c->ref, r))
      routing[c->badToken * (size_t)c->ref.topk + (size_t)c->badEntry] = c->badValue;
  }
}

int moeUpload(struct moeBench* b, const struct moeCase* c) {
  struct moeBench* ctx = b;
  const struct moeRefCase* r = &c->ref;
  const size_t tokens = moeRefTokens(r, b->rank), k = (size_t)r->topk, hidden = r->hidden;
  const size_t es = elemBytes(r->type), scales = hidden / 128;
  makeRoutings(b, c);
  const int64_t* mine = b->routings + (size_t)b->rank * r->maxTokens * k;
  for (size_t e = 0; e < tokens * k; e++) {
    if (c->idxType == fcclInt64)
      ((int64_t*)b->hTopk)[e] = mine[e];
    else
      ((int32_t*)b->hTopk)[e] = (int32_t)mine[e];
    ((float*)b->hWeights)[e] = moeRefWeight(r, b->rank, e / k, (int)(e % k));
  }
  for (size_t t = 0; t < tokens; t++) {
    for (size_t i = 0; i < hidden; i++) {
      const uint16_t bits = moeRefX(r, b->rank, t, i);
      if (es == 1)
        ((uint8_t*)b->hX)[t * hidden + i] = (uint8_t)bits;
      else
        ((uint16_t*)b->hX)[t * hidden + i] = bits;
    }
    if (r->type == fcclFloat8e4m3)
      for (size_t s = 0; s < scales; s++) ((float*)b->hXScales)[t * scales + s] = moeRefXScale(r, b->rank, t, s);
  }
  const size_t idxBytes = c->idxType == fcclInt64 ? 8 : 4;
  cudaStream_t s = b->stream;
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(b->topk, b->hTopk, tokens * k * idxBytes, cudaMemcpyHostToDevice, s));
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(b->weights, b->hWeights, tokens * k * 4, cudaMemcpyHostToDevice, s));
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(b->x, b->hX, tokens * hidden * es, cudaMemcpyHostToDevice, s));
  if (r->type == fcclFloat8e4m3)
    COLL_CHECK_CUDA("upload", cudaMemcpyAsync(b->xScales, b->hXScales, tokens * scales * 4, cudaMemcpyHostToDevice, s));
  const size_t local = (size_t)(r->experts / b->nranks);
  const struct {
    void* p;
    size_t bytes;
  } poisoned[] = {{b->recvX, b->recvRows * hidden * es},
                  {b->recvScales, b->recvRows * scales * 4},
                  {b->recvWeights, b->recvRows * 4},
                  {b->recvSources, b->recvRows * 4},
                  {b->recvCounts, local * 4},
                  {b->recvOffsets, (local + 1) * 4},
                  {b->out, r->maxTokens * hidden * 2}};
  for (size_t i = 0; i < sizeof(poisoned) / sizeof(poisoned[0]); i++)
    COLL_CHECK_CUDA("poison", cudaMemsetAsync(poisoned[i].p, COLL_POISON, poisoned[i].bytes, s));
  /* The expert outputs of rows the dispatch does not deliver are NaN: a combine that read one would show it. */
  COLL_CHECK_CUDA("poison", cudaMemsetAsync(b->y, 0xff, b->recvRows * hidden * 2, s));
  return 0;
}

fcclResult_t moeDispatch(struct moeBench* b, const struct moeCase* c, cudaStream_t stream) {
  const int fp8 = c->ref.type == fcclFloat8e4m3;
  const fcclMoeRecv_t recv = {b->recvX,
                              fp8 ? (float*)b->recvScales : NULL,
                              (c->outputs & MOE_OUT_WEIGHTS) ? (float*)b->recvWeights : NULL,
                              (c->outputs & MOE_OUT_SOURCES) ? (int32_t*)b->recvSources : NULL,
                              (int32_t*)b->recvCounts,
                              (c->outputs & MOE_OUT_OFFSETS) ? (int32_t*)b->recvOffsets : NULL};
  return fcclMoeDispatch(b->x, fp8 ? (const float*)b->xScales : NULL, b->topk, c->idxType, (const float*)b->weights,
                         moeRefTokens(&c->ref, b->rank), c->ref.type, &recv, c->blocks, b->layout, stream);
}

fcclResult_t moeCombine(struct moeBench* b, const struct moeCase* c, cudaStream_t stream) {
  return fcclMoeCombine(b->y, b->out, c->weighted ? (const float*)b->weights : NULL, moeRefTokens(&c->ref, b->rank),
                        c->ref.outType, c->blocks, b->layout, stream);
}

/* Whether bytes of p all hold the poison. */
static int poisoned(const void* p, size_t bytes) {
  const unsigned char* q = p;
  for (size_t i = 0; i < bytes; i++)
    if (q[i] != COLL_POISON) return 0;
  return 1;
}

int moeCheckDispatch(struct moeBench* b, const struct moeCase* c) {
  struct moeBench* ctx = b;
  const struct moeRefCase* r = &c->ref;
  const int n = b->nranks, k = r->topk, local = r->experts / n, fp8 = r->type == fcclFloat8e4m3;
  const size_t hidden = r->hidden, es = elemBytes(r->type), rowBytes = hidden * es, scales = hidden / 128;
  cudaStream_t s = b->stream;
  COLL_CHECK_CUDA("download", cudaMemcpyAsync(b->hRecvX, b->recvX, b->recvRows * rowBytes, cudaMemcpyDeviceToHost, s));
  COLL_CHECK_CUDA("download",
                  cudaMemcpyAsync(b->hRecvCounts, b->recvCounts, (size_t)local * 4, cudaMemcpyDeviceToHost, s));
  COLL_CHECK_CUDA("download",
                  cudaMemcpyAsync(b->hRecvOffsets, b->recvOffsets, ((size_t)local + 1) * 4, cudaMemcpyDeviceToHost, s));
  COLL_CHECK_CUDA("download",
                  cudaMemcpyAsync(b->hRecvWeights, b->recvWeights, b->recvRows * 4, cudaMemcpyDeviceToHost, s));
  COLL_CHECK_CUDA("download",
                  cudaMemcpyAsync(b->hRecvSources, b->recvSources, b->recvRows * 4, cudaMemcpyDeviceToHost, s));
  if (fp8)
    COLL_CHECK_CUDA("download", cudaMemcpyAsync(b->hRecvScales, b->recvScales, b->recvRows * scales * 4,
                                                cudaMemcpyDeviceToHost, s));
  COLL_CHECK_CUDA("download", cudaStreamSynchronize(s));

  char what[384];
  moeDescribe(c, what, sizeof(what));
  struct moeRefRouting routings[MOE_REF_MAX_RANKS];
  for (int q = 0; q < n; q++)
    routings[q] = (struct moeRefRouting){moeRefTokens(r, q), b->routings + (size_t)q * r->maxTokens * (size_t)k};
  struct moeRefRecv want;
  if (!moeRefRecvBuild(n, r->experts, k, r->maxTokens, r->padded, r->alignment, b->rank, routings, &want)) {
    testFail(__FILE__, __LINE__, "rank %d: %s: the reference cannot place the rows", b->rank, what);
    return 1;
  }
  int bad = 0;
  const int32_t* counts = b->hRecvCounts;
  const int32_t* offsets = b->hRecvOffsets;
  for (int e = 0; e < local; e++) {
    if (counts[e] != want.counts[e] && bad++ < MOE_MESSAGES)
      testFail(__FILE__, __LINE__, "rank %d: %s: local expert %d got %d rows, want %d", b->rank, what, e, counts[e],
               want.counts[e]);
    if ((c->outputs & MOE_OUT_OFFSETS) && offsets[e] != want.offsets[e] && bad++ < MOE_MESSAGES)
      testFail(__FILE__, __LINE__, "rank %d: %s: local expert %d starts at row %d, want %d", b->rank, what, e,
               offsets[e], want.offsets[e]);
  }
  if ((c->outputs & MOE_OUT_OFFSETS) && offsets[local] != want.offsets[local] && bad++ < MOE_MESSAGES)
    testFail(__FILE__, __LINE__, "rank %d: %s: the rows end at %d, want %d", b->rank, what, offsets[local],
             want.offsets[local]);
  if (!(c->outputs & MOE_OUT_OFFSETS))
    EXPECT_MSG(poisoned(offsets, ((size_t)local + 1) * 4), "rank %d: %s: offsets written though not asked for", b->rank,
               what);

  /* Every row: delivered ones hold their token's bits, the others were not written. y follows the rows. */
  unsigned char* expected = malloc(rowBytes);
  uint16_t* y = b->hY;
  const float* weights = b->hRecvWeights;
  const int32_t* sources = b->hRecvSources;
  const float* gotScales = b->hRecvScales;
  size_t wrongRows = 0, writtenRows = 0;
  for (size_t row = 0; row < b->recvRows; row++) {
    const struct moeRefRow* w = &want.rows[row];
    const unsigned char* got = (const unsigned char*)b->hRecvX + row * rowBytes;
    if (w->source < 0) {
      const int clean = poisoned(got, rowBytes) && (!(c->outputs & MOE_OUT_WEIGHTS) || poisoned(&weights[row], 4)) &&
                        (!(c->outputs & MOE_OUT_SOURCES) || poisoned(&sources[row], 4));
      writtenRows += !clean;
      for (size_t i = 0; i < hidden; i++) y[row * hidden + i] = 0xffff;
      continue;
    }
    for (size_t i = 0; i < hidden; i++) {
      const uint16_t bits = moeRefX(r, w->source, (size_t)w->token, i);
      if (es == 1)
        expected[i] = (uint8_t)bits;
      else
        memcpy(expected + 2 * i, &bits, 2);
      y[row * hidden + i] = moeRefExpertOut(r, b->rank * local + w->expert, w->source, (size_t)w->token, i);
    }
    int same = memcmp(got, expected, rowBytes) == 0;
    for (size_t q = 0; fp8 && q < scales; q++)
      same &= gotScales[row * scales + q] == moeRefXScale(r, w->source, (size_t)w->token, q);
    if (c->outputs & MOE_OUT_WEIGHTS) same &= weights[row] == moeRefWeight(r, w->source, (size_t)w->token, w->entry);
    if (c->outputs & MOE_OUT_SOURCES) same &= sources[row] == (int32_t)((size_t)w->source * r->maxTokens + w->token);
    if (!same && wrongRows++ < MOE_MESSAGES)
      testFail(__FILE__, __LINE__,
               "rank %d: %s: row %zu (local expert %d) should be rank %d's token %d (entry %d); its data, scales, "
               "weight or source differ",
               b->rank, what, row, w->expert, w->source, w->token, w->entry);
  }
  if (wrongRows > 0 || writtenRows > 0)
    testFail(__FILE__, __LINE__, "rank %d: %s: %zu rows wrong, %zu rows written that no token goes to", b->rank, what,
             wrongRows, writtenRows);
  bad += wrongRows > 0 || writtenRows > 0;
  free(expected);
  moeRefRecvFree(&want);
  if (collVerbose()) printf("rank %d: %s: dispatch %s\n", b->rank, what, bad ? "WRONG" : "ok");
  COLL_CHECK_CUDA("upload y", cudaMemcpyAsync(b->y, b->hY, b->recvRows * hidden * 2, cudaMemcpyHostToDevice, s));
  return bad;
}

int moeCheckCombine(struct moeBench* b, const struct moeCase* c, uint64_t call) {
  struct moeBench* ctx = b;
  const struct moeRefCase* r = &c->ref;
  const size_t tokens = moeRefTokens(r, b->rank), hidden = r->hidden, k = (size_t)r->topk;
  COLL_CHECK_CUDA("download",
                  cudaMemcpyAsync(b->hOut, b->out, r->maxTokens * hidden * 2, cudaMemcpyDeviceToHost, b->stream));
  COLL_CHECK_CUDA("download", cudaStreamSynchronize(b->stream));
  char what[384];
  moeDescribe(c, what, sizeof(what));
  const uint16_t* out = b->hOut;
  const int64_t* mine = b->routings + (size_t)b->rank * r->maxTokens * k;
  size_t wrong = 0;
  for (size_t t = 0; t < tokens; t++)
    for (size_t i = 0; i < hidden; i++) {
      const uint16_t want = moeRefCombine(r, b->rank, t, i, c->weighted, mine + t * k);
      if (out[t * hidden + i] != want && wrong++ < MOE_MESSAGES)
        testFail(__FILE__, __LINE__, "rank %d: %s: token %zu element %zu is 0x%04x, want 0x%04x", b->rank, what, t, i,
                 out[t * hidden + i], want);
    }
  const int untouched = poisoned(out + tokens * hidden, (r->maxTokens - tokens) * hidden * 2);
  EXPECT_MSG(untouched, "rank %d: %s: the combine wrote past its %zu tokens", b->rank, what, tokens);
  if (wrong > 0) testFail(__FILE__, __LINE__, "rank %d: %s: %zu elements wrong", b->rank, what, wrong);
  if (collVerbose())
    printf("rank %d: call %llu: %s: combine %s\n", b->rank, (unsigned long long)call, what, wrong ? "WRONG" : "ok");
  return wrong > 0 || !untouched;
}

int moeRunCase(struct moeBench* b, const struct moeCase* c, uint64_t call) {
  struct moeBench* ctx = b;
  if (moeUpload(b, c)) return 1;
  COLL_CHECK_FCCL("dispatch", moeDispatch(b, c, b->stream));
  COLL_CHECK_CUDA("dispatch", cudaStreamSynchronize(b->stream));
  int bad = moeCheckDispatch(b, c);
  COLL_CHECK_FCCL("combine", moeCombine(b, c, b->stream));
  bad += moeCheckCombine(b, c, call);
  return bad;
}
