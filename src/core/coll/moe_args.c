/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The checks of the mixture-of-experts calls that need neither the GPU nor the peers (moe.h): a layout's
 * configuration, a dispatch's and a combine's arguments. Each failure is described once, naming the argument.
 */
#include "moe.h"

#include "check.h"
#include "datatype.h"
#include "debug.h"

#include <stdint.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

fcclResult_t fcclMoeConfigCheck(const fcclMoeConfig_t* config, int nranks, fcclMoeShape* shape) {
  const char* caller = "fcclMoeLayoutCreate";
  FCCL_REQUIRE(config != NULL, "%s: config is NULL", caller);
  FCCL_REQUIRE(config->magic == FCCL_MOE_CONFIG_MAGIC && config->size >= sizeof(fcclMoeConfig_t),
               "%s: config was not made from FCCL_MOE_CONFIG_INITIALIZER (magic 0x%x, size %zu)", caller, config->magic,
               config->size);
  FCCL_REQUIRE(config->numExperts >= 1 && config->numExperts <= FCCL_MOE_MAX_EXPERTS,
               "%s: numExperts %d outside [1, %d]", caller, config->numExperts, FCCL_MOE_MAX_EXPERTS);
  FCCL_REQUIRE(nranks >= 1 && config->numExperts % nranks == 0, "%s: numExperts %d is not a multiple of the %d ranks",
               caller, config->numExperts, nranks);
  FCCL_REQUIRE(config->topk >= 1 && config->topk <= FCCL_MOE_MAX_TOPK && config->topk <= config->numExperts,
               "%s: topk %d outside [1, min(%d, numExperts %d)]", caller, config->topk, FCCL_MOE_MAX_TOPK,
               config->numExperts);
  FCCL_REQUIRE(config->hidden >= 8 && config->hidden <= FCCL_MOE_MAX_HIDDEN && config->hidden % 8 == 0,
               "%s: hidden %zu is not a multiple of 8 in [8, %u] (rows of 16-bit elements move in 16-byte units)",
               caller, config->hidden, FCCL_MOE_MAX_HIDDEN);
  FCCL_REQUIRE(config->maxTokensPerRank >= 1 && config->maxTokensPerRank <= FCCL_MOE_MAX_TOKENS,
               "%s: maxTokensPerRank %zu outside [1, %u]", caller, config->maxTokensPerRank, FCCL_MOE_MAX_TOKENS);
  FCCL_REQUIRE(config->recvLayout == fcclMoePacked || config->recvLayout == fcclMoePadded, "%s: unknown recvLayout %d",
               caller, (int)config->recvLayout);
  FCCL_REQUIRE(config->recvLayout == fcclMoePadded ||
                   (config->expertAlignment >= 1 && config->expertAlignment <= FCCL_MOE_MAX_ALIGNMENT),
               "%s: expertAlignment %d outside [1, %d]", caller, config->expertAlignment, FCCL_MOE_MAX_ALIGNMENT);
  FCCL_REQUIRE(config->blocks >= 0 && config->blocks <= FCCL_DEVICE_MAX_BLOCKS, "%s: blocks %d outside [0, %d]", caller,
               config->blocks, FCCL_DEVICE_MAX_BLOCKS);
  fcclMoeShape s;
  if (!fcclMoeShapeCompute(nranks, config->numExperts, config->topk, config->hidden, config->maxTokensPerRank,
                           config->recvLayout == fcclMoePadded, config->expertAlignment, &s))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: the configuration has no shape on %d ranks", caller,
                      nranks);
  *shape = s;
  return fcclSuccess;
}

uint64_t fcclMoeConfigHash(const fcclMoeConfig_t* config) {
  const uint64_t fields[] = {(uint64_t)config->numExperts,
                             (uint64_t)config->topk,
                             config->hidden,
                             config->maxTokensPerRank,
                             (uint64_t)config->recvLayout,
                             config->recvLayout == fcclMoePadded ? 1u : (uint64_t)config->expertAlignment};
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    hash ^= fields[i];
    hash *= 0x100000001b3ull;
    hash ^= hash >> 31;
  }
  return hash;
}

/* Whether [a, a + aBytes) and [b, b + bBytes) share a byte (NULL or empty ranges share none). */
static int overlaps(const void* a, uint64_t aBytes, const void* b, uint64_t bBytes) {
  if (a == NULL || b == NULL || aBytes == 0 || bBytes == 0) return 0;
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bBytes && y < x + aBytes;
}

struct moeBuffer {
  const void* p;
  uint64_t bytes;
  const char* name;
  int written;
};

/* No buffer the call writes may share a byte with another of its buffers. */
static fcclResult_t checkOverlaps(const char* caller, const struct moeBuffer* buffers, int n) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if ((buffers[i].written || buffers[j].written) &&
          overlaps(buffers[i].p, buffers[i].bytes, buffers[j].p, buffers[j].bytes))
        return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p overlaps %s %p", caller, buffers[i].name,
                          buffers[i].p, buffers[j].name, buffers[j].p);
  return fcclSuccess;
}

static fcclResult_t checkAligned(const char* caller, const void* p, size_t align, const char* name) {
  if ((uintptr_t)p % align == 0) return fcclSuccess;
  return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p is not %zu-byte aligned", caller, name, p, align);
}

static fcclResult_t checkBlocks(const char* caller, const struct fcclMoeLayout* layout, int blocks) {
  if (blocks >= 0 && blocks <= layout->maxBlocks) return fcclSuccess;
  return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                    "%s: blocks %d outside [0, %d] (0: the layout's budget; at most one per SM of the GPU)", caller,
                    blocks, layout->maxBlocks);
}

fcclResult_t fcclMoeCheckDispatch(const struct fcclMoeLayout* layout, const struct fcclMoeDispatchCall* call) {
  const char* caller = "fcclMoeDispatch";
  const fcclMoeShape* s = &layout->shape;
  const fcclDataType_t dt = call->datatype;
  if (dt != fcclBfloat16 && dt != fcclFloat16 && dt != fcclFloat8e4m3)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: datatype %s (%d): a dispatch moves bfloat16, float16 or float8e4m3", caller,
                      (int)dt >= 0 && dt < fcclNumTypes ? fcclTypeName(dt) : "unknown", (int)dt);
  if (call->idxType != fcclInt32 && call->idxType != fcclInt64)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: idxType %d: topkIdx holds int32 or int64", caller,
                      (int)call->idxType);
  const int fp8 = dt == fcclFloat8e4m3;
  if (call->tokens > s->maxTokens)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: tokens %zu is more than the layout's worst case, "
                      "maxTokensPerRank %llu",
                      caller, call->tokens, (unsigned long long)s->maxTokens);
  if (fp8 && s->hidden % FCCL_MOE_SCALE_BLOCK != 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: hidden %llu is not a multiple of %d, as an FP8 dispatch's per-%d-element scales need",
                      caller, (unsigned long long)s->hidden, FCCL_MOE_SCALE_BLOCK, FCCL_MOE_SCALE_BLOCK);
  const fcclMoeRecv_t* r = &call->recv;
  if (r->x == NULL || r->expertCounts == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: recv->%s is NULL", caller,
                      r->x == NULL ? "x" : "expertCounts");
  if (fp8 && r->scales == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: recv->scales is NULL with an FP8 dispatch", caller);
  if (!fp8 && (r->scales != NULL || call->xScales != NULL))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s given with datatype %s: scales go with FP8 only",
                      caller, call->xScales != NULL ? "xScales" : "recv->scales", fcclTypeName(dt));
  if (r->weights != NULL && call->topkWeights == NULL && call->tokens > 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: recv->weights asked for without topkWeights", caller);
  if (call->tokens > 0 && (call->x == NULL || call->topkIdx == NULL || (fp8 && call->xScales == NULL)))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s is NULL with %zu tokens", caller,
                      call->x == NULL         ? "x"
                      : call->topkIdx == NULL ? "topkIdx"
                                              : "xScales",
                      call->tokens);
  FCCLCHECK(checkBlocks(caller, layout, call->blocks));
  const size_t idxSize = call->idxType == fcclInt64 ? 8 : 4;
  FCCLCHECK(checkAligned(caller, call->x, FCCL_UNIT_BYTES, "x"));
  FCCLCHECK(checkAligned(caller, r->x, FCCL_UNIT_BYTES, "recv->x"));
  FCCLCHECK(checkAligned(caller, call->topkIdx, idxSize, "topkIdx"));
  FCCLCHECK(checkAligned(caller, call->xScales, 4, "xScales"));
  FCCLCHECK(checkAligned(caller, call->topkWeights, 4, "topkWeights"));
  FCCLCHECK(checkAligned(caller, r->scales, 4, "recv->scales"));
  FCCLCHECK(checkAligned(caller, r->weights, 4, "recv->weights"));
  FCCLCHECK(checkAligned(caller, r->sourceTokens, 4, "recv->sourceTokens"));
  FCCLCHECK(checkAligned(caller, r->expertCounts, 4, "recv->expertCounts"));
  FCCLCHECK(checkAligned(caller, r->expertOffsets, 4, "recv->expertOffsets"));
  const uint64_t tokens = call->tokens, k = (uint64_t)s->topk, rows = s->recvRows;
  const uint64_t rowBytes = s->hidden * (fp8 ? 1u : 2u), scales = s->hidden / FCCL_MOE_SCALE_BLOCK * 4;
  const uint64_t local = (uint64_t)s->localExperts;
  const struct moeBuffer buffers[] = {{call->x, tokens * rowBytes, "x", 0},
                                      {call->xScales, fp8 ? tokens * scales : 0, "xScales", 0},
                                      {call->topkIdx, tokens * k * idxSize, "topkIdx", 0},
                                      {call->topkWeights, tokens * k * 4, "topkWeights", 0},
                                      {r->x, rows * rowBytes, "recv->x", 1},
                                      {r->scales, fp8 ? rows * scales : 0, "recv->scales", 1},
                                      {r->weights, rows * 4, "recv->weights", 1},
                                      {r->sourceTokens, rows * 4, "recv->sourceTokens", 1},
                                      {r->expertCounts, local * 4, "recv->expertCounts", 1},
                                      {r->expertOffsets, (local + 1) * 4, "recv->expertOffsets", 1}};
  return checkOverlaps(caller, buffers, (int)(sizeof(buffers) / sizeof(buffers[0])));
}

fcclResult_t fcclMoeCheckCombine(const struct fcclMoeLayout* layout, const struct fcclMoeCombineCall* call) {
  const char* caller = "fcclMoeCombine";
  const fcclMoeShape* s = &layout->shape;
  const fcclDataType_t dt = call->datatype;
  if (dt != fcclBfloat16 && dt != fcclFloat16)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: datatype %s (%d): a combine sums bfloat16 or float16",
                      caller, (int)dt >= 0 && dt < fcclNumTypes ? fcclTypeName(dt) : "unknown", (int)dt);
  if (call->y == NULL) return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: y is NULL", caller);
  if (call->tokens > 0 && call->out == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: out is NULL with %zu tokens", caller, call->tokens);
  FCCLCHECK(checkBlocks(caller, layout, call->blocks));
  FCCLCHECK(checkAligned(caller, call->y, FCCL_UNIT_BYTES, "y"));
  FCCLCHECK(checkAligned(caller, call->out, FCCL_UNIT_BYTES, "out"));
  FCCLCHECK(checkAligned(caller, call->topkWeights, 4, "topkWeights"));
  const uint64_t rowBytes = s->hidden * 2;
  const struct moeBuffer buffers[] = {{call->y, s->recvRows * rowBytes, "y", 0},
                                      {call->out, call->tokens * rowBytes, "out", 1},
                                      {call->topkWeights, call->tokens * (uint64_t)s->topk * 4, "topkWeights", 0}};
  FCCLCHECK(checkOverlaps(caller, buffers, (int)(sizeof(buffers) / sizeof(buffers[0]))));
  if (layout->dispatchTokens < 0)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "%s: no dispatch on this layout yet: a combine returns the rows of the layout's last dispatch",
                      caller);
  if ((long long)call->tokens != layout->dispatchTokens)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "%s: tokens %zu, but the layout's last dispatch had %lld on this rank: a combine returns that "
                      "dispatch's tokens",
                      caller, call->tokens, layout->dispatchTokens);
  return fcclSuccess;
}
