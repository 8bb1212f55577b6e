/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The collectives' per-communicator device state: the device communicator (every rank's slot), epoch counters in
 * device memory, the host-mapped error words and the abort page; the knobs every rank must share, checked at init;
 * and the kernels' error report. Nothing here waits for the GPU or for peers except fcclDeviceInit (one bootstrap
 * all-gather) and fcclDeviceFini. docs/collectives.md has the design.
 */
#include "device_state.h"

#include "algo.h"
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "device.h"
#include "fingerprint.h"
#include "param.h"
#include "transport.h"

#include "fccl_build_config.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

#define FCCL_STAGING_MIN_BYTES ((uint64_t)4 * FCCL_DEVICE_MAX_RANKS * FCCL_SLOT_ALIGN)
#define FCCL_STAGING_MAX_BYTES ((uint64_t)1 << 32)
#define FCCL_DEVICE_LAYOUT_VERSION 2

static const char* phaseName(int phase) {
  switch (phase) {
    case FCCL_PHASE_BARRIER: return "barrier";
    case FCCL_PHASE_LL: return "LL packets";
    case FCCL_PHASE_READY: return "the peer to reach the call";
    case FCCL_PHASE_INBOX: return "the peer's staged input";
    case FCCL_PHASE_RESULT: return "the owner's reduced chunk";
    case FCCL_PHASE_DONE: return "the peer to finish with our buffers";
    case FCCL_PHASE_LL128: return "LL128 lines";
    case FCCL_PHASE_CONSUMED: return "the peer to copy a staging round out";
    case FCCL_PHASE_COUNTS: return "nothing (the counts in device memory were read)";
    case FCCL_PHASE_MOE_COUNTS: return "the peer's MoE rows per expert";
    case FCCL_PHASE_MOE_DATA: return "the peer's dispatched tokens";
    case FCCL_PHASE_MOE_RESULT: return "the peer's expert outputs";
    case FCCL_PHASE_MOE_FREE: return "the peer to read its MoE staging of the layout's previous call";
    case FCCL_PHASE_MOE_GRID: return "the kernel's other blocks";
    case FCCL_PHASE_MOE_ROUTING: return "the routing";
    default: return "unknown";
  }
}

/* FCCL_STAGING_BYTES, clamped to what the layout can use; the same value on every rank (checked at init). */
uint64_t fcclDeviceStagingBytes(void) {
  int64_t value = fcclParamInt(FCCL_PARAM_STAGING_BYTES);
  if (value < (int64_t)FCCL_STAGING_MIN_BYTES || (uint64_t)value > FCCL_STAGING_MAX_BYTES) {
    static int warned;
    const uint64_t clamped = value < (int64_t)FCCL_STAGING_MIN_BYTES ? FCCL_STAGING_MIN_BYTES : FCCL_STAGING_MAX_BYTES;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      FCCL_WARN(FCCL_SUBSYS_COLL, "FCCL_STAGING_BYTES=%lld is outside [%llu, %llu]; using %llu", (long long)value,
                (unsigned long long)FCCL_STAGING_MIN_BYTES, (unsigned long long)FCCL_STAGING_MAX_BYTES,
                (unsigned long long)clamped);
    return clamped;
  }
  return (uint64_t)value;
}

int fcclDeviceLL128Auto(void) { return fcclParamInt(FCCL_PARAM_LL128) != 0; }

int fcclDeviceCtaBound(int configured, int id) {
  const int64_t value = fcclParamInt((fcclParamId_t)id);
  if (value > 0) return value > INT32_MAX ? INT32_MAX : (int)value;
  return configured > 0 ? configured : 0;
}

uint64_t fcclDeviceCopyScatterMin(void) {
  const int64_t value = fcclParamInt(FCCL_PARAM_COPY_SCATTER_MIN);
  return value > 0 ? (uint64_t)value : 0;
}

uint64_t fcclDeviceCopyMoveMin(void) {
  const int64_t value = fcclParamInt(FCCL_PARAM_COPY_MOVE_MIN);
  return value > 0 ? (uint64_t)value : 0;
}

size_t fcclDeviceSlotBytes(int nranks) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  return (size_t)layout.totalBytes;
}

int fcclDeviceLayoutIn(int nranks, size_t slotBytes, fcclSlotLayout* layout) {
  const uint64_t staging = fcclDeviceStagingBytes();
  fcclSlotLayoutCompute(nranks, staging, layout);
  if (layout->totalBytes <= slotBytes) return 1;
  /* The slot's size grows with the staging bytes: the most that fits, to within one alignment step. */
  uint64_t fits = FCCL_STAGING_MIN_BYTES, tooMuch = staging;
  fcclSlotLayoutCompute(nranks, fits, layout);
  if (layout->totalBytes > slotBytes) return 0;
  while (tooMuch - fits > FCCL_SLOT_ALIGN) {
    const uint64_t middle = fits + (tooMuch - fits) / 2;
    fcclSlotLayoutCompute(nranks, middle, layout);
    if (layout->totalBytes <= slotBytes)
      fits = middle;
    else
      tooMuch = middle;
  }
  fcclSlotLayoutCompute(nranks, fits, layout);
  return 1;
}

int fcclDeviceSlotHolds(int nranks, size_t slotBytes) {
  fcclSlotLayout full, in;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &full);
  return fcclDeviceLayoutIn(nranks, slotBytes, &in) && in.chunkBytes * 8 >= full.chunkBytes * 7;
}

static uint64_t timeoutNs(void) {
  int64_t ms = fcclParamInt(FCCL_PARAM_TIMEOUT);
  if (ms <= 0) {
    int64_t fallback = 0;
    const fcclParamInfo_t* info = fcclParamInfo(FCCL_PARAM_TIMEOUT);
    fallback = strtoll(info->defaultValue, NULL, 10);
    FCCL_WARN(FCCL_SUBSYS_COLL, "FCCL_TIMEOUT=%lld: a kernel wait must be bounded; using %lld ms", (long long)ms,
              (long long)fallback);
    ms = fallback;
  }
  return (uint64_t)ms * 1000000ull;
}

/* What every rank tells the others at device init. */
struct deviceHello {
  int32_t status; /* fcclResult_t of this rank's local setup: a failed rank still takes part in the exchange */
  int32_t reserved;
  uint64_t lastEpoch;
  uint64_t slotBytes;
  uint64_t chunkBytes;
  uint64_t llBytes;
  int32_t nranks;
  int32_t layoutVersion;
  int32_t ll128Auto;
  int32_t graphRegister;
  uint64_t copyScatterMin;
  int32_t requests[5]; /* FCCL_ALGO, FCCL_ALLGATHER_ALGO, FCCL_REDUCESCATTER_ALGO, FCCL_BROADCAST_ALGO,
                        * FCCL_FUSED_ALGO, parsed */
  uint64_t copyMoveMin;
  int32_t minCtas; /* the SM budget */
  int32_t maxCtas;
};

static fcclResult_t freeState(struct fcclDeviceState* s) {
  fcclResult_t res = fcclSuccess;
  if (!s) return res;
  if (s->state) CUDACHECKKEEP(cudaFree(s->state), res);
  if (s->words) CUDACHECKKEEP(cudaFreeHost(s->words), res);
  if (s->abortPage) CUDACHECKKEEP(cudaHostUnregister(s->abortPage), res);
  free(s);
  return res;
}

/* A synchronous copy on a private stream: never queued behind the application's work on the legacy stream. */
static fcclResult_t copyToDevice(void* dst, const void* src, size_t bytes) {
  fcclResult_t res = fcclSuccess;
  cudaStream_t stream = NULL;
  CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDACHECKGOTO(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), res, out);
  CUDACHECKGOTO(cudaStreamSynchronize(stream), res, out);
out:
  CUDACHECKIGNORE(cudaStreamDestroy(stream));
  return res;
}

/* Reads the epoch our slot recorded and clears signal pads and LL area, on a private stream, synchronously: no
 * clearing can still be pending when a peer's first flag arrives (peers write only after the all-gather). */
static fcclResult_t cleanOwnSlot(char* ownSlot, const fcclSlotLayout* layout, uint64_t* lastEpoch) {
  fcclResult_t res = fcclSuccess;
  cudaStream_t stream = NULL;
  fcclSlotHeader header;
  CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDACHECKGOTO(cudaMemcpyAsync(&header, ownSlot, sizeof(header), cudaMemcpyDeviceToHost, stream), res, out);
  CUDACHECKGOTO(cudaStreamSynchronize(stream), res, out);
  *lastEpoch = header.magic == FCCL_SLOT_MAGIC ? header.lastEpoch : 0;
  /* A slot that never carried our header was zero when allocated; anything else there predates fccl's layout. */
  memset(&header, 0, sizeof(header));
  header.magic = FCCL_SLOT_MAGIC;
  header.lastEpoch = *lastEpoch;
  CUDACHECKGOTO(cudaMemcpyAsync(ownSlot, &header, sizeof(header), cudaMemcpyHostToDevice, stream), res, out);
  /* The call board, the signal pads and the LL areas (the LL128 lines carry 44 bits of epoch: never stale). */
  CUDACHECKGOTO(cudaMemsetAsync(ownSlot + FCCL_SLOT_BOARD_OFFSET, 0,
                                layout->inboxOffset - FCCL_SLOT_BOARD_OFFSET, stream),
                res, out);
  CUDACHECKGOTO(cudaStreamSynchronize(stream), res, out);
out:
  CUDACHECKIGNORE(cudaStreamDestroy(stream));
  return res;
}

/* FCCL_ALGO and the other collectives' algorithm variables, parsed once (an unknown value is warned about and
 * chooses by size). */
static void parseRequests(struct fcclDeviceState* s) {
  const char* algo = fcclParamString(FCCL_PARAM_ALGO);
  s->algoRequest = fcclAlgoParseRequest(algo);
  if (s->algoRequest < 0) {
    FCCL_WARN(FCCL_SUBSYS_COLL, "FCCL_ALGO=%s is not one of %s; choosing by size", algo,
              fcclAllReduceAlgos.requestNames);
    s->algoRequest = FCCL_ALGO_REQUEST_AUTO;
  }
  const struct {
    fcclParamId_t param;
    const fcclAlgoSet* set;
    int* request;
  } moves[] = {{FCCL_PARAM_ALLGATHER_ALGO, &fcclAllGatherAlgos, &s->allGatherRequest},
               {FCCL_PARAM_REDUCESCATTER_ALGO, &fcclReduceScatterAlgos, &s->reduceScatterRequest},
               {FCCL_PARAM_BROADCAST_ALGO, &fcclBroadcastAlgos, &s->broadcastRequest}};
  for (size_t m = 0; m < sizeof(moves) / sizeof(moves[0]); m++) {
    const char* name = fcclParamString(moves[m].param);
    *moves[m].request = fcclMoveParseRequest(name, moves[m].set);
    if (*moves[m].request < 0) {
      FCCL_WARN(FCCL_SUBSYS_COLL, "%s=%s is not one of %s; choosing by size", fcclParamInfo(moves[m].param)->name, name,
                moves[m].set->requestNames);
      *moves[m].request = FCCL_MOVE_REQUEST_AUTO;
    }
  }
  const char* fused = fcclParamString(FCCL_PARAM_FUSED_ALGO);
  s->fusedRequest = fcclFusedParseRequest(fused);
  if (s->fusedRequest < 0) {
    FCCL_WARN(FCCL_SUBSYS_COLL, "FCCL_FUSED_ALGO=%s is not one of auto, oneshot, twoshot; choosing by size", fused);
    s->fusedRequest = FCCL_FUSED_REQUEST_AUTO;
  }
}

int fcclDeviceArchRunnable(int cc, const char* sassArchs, int ptxArch, char* why, size_t whySize) {
  const char* p = sassArchs ? sassArchs : "";
  while (*p) {
    char* end = NULL;
    long sm = strtol(p, &end, 10);
    if (end == p) break;
    if (sm / 10 == cc / 10 && sm % 10 <= cc % 10) return 1;
    p = end;
    while (*p == ' ' || *p == ',') p++;
  }
  if (ptxArch > 0 && ptxArch <= cc) return 1;
  if (why)
    snprintf(why, whySize,
             "this build has SASS for compute capabilities %s and %s; a GPU of compute capability %d.%d can run none "
             "of it (rebuild with -Dgpu_archs='%d.%d')",
             sassArchs && sassArchs[0] ? sassArchs : "none", ptxArch > 0 ? "PTX of the newest" : "no PTX", cc / 10,
             cc % 10, cc / 10, cc % 10);
  return 0;
}

/* This rank's part: pointers, words, a clean slot. */
static fcclResult_t deviceSetupLocal(struct fcclComm* comm, struct fcclDeviceState* s, uint64_t* lastEpoch) {
  const int nranks = comm->nranks;
  fcclSlotLayout* layout = &s->dev.layout;
  size_t slotBytes = fcclTransportSlotBytes(comm->transport);
  if (slotBytes < layout->totalBytes)
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_COLL,
                      "the transport's slot has %zu bytes, the collectives need %llu",
                      slotBytes, (unsigned long long)layout->totalBytes);
  for (int r = 0; r < nranks; r++) {
    void* slot = fcclTransportPeerSlot(comm->transport, r);
    if (slot == NULL)
      return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_COLL, "no slot mapping for rank %d", r);
    if ((uintptr_t)slot % FCCL_SLOT_ALIGN != 0)
      return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_COLL, "rank %d's slot %p is not %d-byte aligned", r, slot,
                        FCCL_SLOT_ALIGN);
    s->dev.slots[r] = (uint64_t)(uintptr_t)slot;
  }
  s->dev.rank = comm->rank;
  s->dev.nranks = nranks;
  s->dev.timeoutNs = timeoutNs();
  CUDACHECK(cudaDeviceGetAttribute(&s->smCount, cudaDevAttrMultiProcessorCount, comm->cudaDev));
  int ccMajor = 0, ccMinor = 0;
  CUDACHECK(cudaDeviceGetAttribute(&ccMajor, cudaDevAttrComputeCapabilityMajor, comm->cudaDev));
  CUDACHECK(cudaDeviceGetAttribute(&ccMinor, cudaDevAttrComputeCapabilityMinor, comm->cudaDev));
  char why[256];
  if (!fcclDeviceArchRunnable(ccMajor * 10 + ccMinor, FCCL_BUILD_SASS_ARCHS, FCCL_BUILD_PTX_ARCH, why, sizeof(why)))
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL, "device %d cannot run fccl's kernels: %s", comm->cudaDev,
                      why);
  /* The build's list is what was asked for; the driver has the last word on what it loads. */
  FCCLCHECK(fcclDeviceKernelsLoadable());
  s->pdl = ccMajor >= 9 && fcclParamInt(FCCL_PARAM_PDL) != 0;
  s->ll128Auto = fcclDeviceLL128Auto();
  s->copyScatterMin = fcclDeviceCopyScatterMin();
  s->copyMoveMin = fcclDeviceCopyMoveMin();
  s->graphRegister = fcclParamInt(FCCL_PARAM_GRAPH_REGISTER) != 0;
  s->minCtas = fcclDeviceCtaBound(comm->minCtas, FCCL_PARAM_MIN_CTAS);
  s->maxCtas = fcclDeviceCtaBound(comm->maxCtas, FCCL_PARAM_MAX_CTAS);
  if (s->minCtas > 0 && s->maxCtas > 0 && s->minCtas > s->maxCtas)
    FCCL_WARN(FCCL_SUBSYS_COLL, "SM budget: the minimum of %d blocks is above the maximum of %d: the maximum wins",
              s->minCtas, s->maxCtas);
  parseRequests(s);

  /* The abort flag's page (core allocates it page-aligned and alone) mapped for the kernels. */
  CUDACHECK(cudaHostRegister((void*)comm->abortFlag, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable));
  s->abortPage = (void*)comm->abortFlag;
  void* abortDev = NULL;
  CUDACHECK(cudaHostGetDevicePointer(&abortDev, (void*)comm->abortFlag, 0));
  s->dev.abortFlag = (uint64_t)(uintptr_t)abortDev;

  CUDACHECK(cudaHostAlloc((void**)&s->words, sizeof(fcclDevHostWords), cudaHostAllocMapped | cudaHostAllocPortable));
  memset(s->words, 0, sizeof(*s->words));
  void* wordsDev = NULL;
  CUDACHECK(cudaHostGetDevicePointer(&wordsDev, s->words, 0));
  s->dev.hostWords = (uint64_t)(uintptr_t)wordsDev;
  CUDACHECK(cudaMalloc((void**)&s->state, sizeof(fcclDevState)));
  s->dev.state = (uint64_t)(uintptr_t)s->state;

  return cleanOwnSlot((char*)(uintptr_t)s->dev.slots[comm->rank], layout, lastEpoch);
}

static fcclResult_t deviceInit(struct fcclComm* comm, struct fcclDeviceState* s) {
  const int nranks = comm->nranks;
  fcclSlotLayout* layout = &s->dev.layout;
  /* A slot made for nranks holds FCCL_STAGING_BYTES; a split's child in its parent's slot may hold a little less
   * (deviceSetupLocal refuses a slot too small for any). */
  (void)fcclDeviceLayoutIn(nranks, fcclTransportSlotBytes(comm->transport), layout);
  uint64_t lastEpoch = 0;
  fcclResult_t local = deviceSetupLocal(comm, s, &lastEpoch);

  /* Every rank's status, last epoch and layout (the all-gather also orders every rank's slot cleaning before any
   * rank's first kernel): start past the largest epoch any slot recorded. */
  struct deviceHello* hellos = calloc((size_t)nranks, sizeof(*hellos));
  if (!hellos) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "out of host memory");
  struct deviceHello* mine = &hellos[comm->rank];
  mine->status = (int32_t)local;
  mine->lastEpoch = lastEpoch;
  mine->slotBytes = layout->totalBytes;
  mine->chunkBytes = layout->chunkBytes;
  mine->llBytes = layout->llBytes;
  mine->nranks = nranks;
  mine->layoutVersion = FCCL_DEVICE_LAYOUT_VERSION;
  mine->ll128Auto = s->ll128Auto;
  mine->graphRegister = s->graphRegister;
  mine->copyScatterMin = s->copyScatterMin;
  mine->copyMoveMin = s->copyMoveMin;
  const int32_t requests[5] = {s->algoRequest, s->allGatherRequest, s->reduceScatterRequest, s->broadcastRequest,
                               s->fusedRequest};
  memcpy(mine->requests, requests, sizeof(requests));
  mine->minCtas = s->minCtas;
  mine->maxCtas = s->maxCtas;
  fcclResult_t res = fcclBootstrapAllGather(comm->bootstrap, hellos, sizeof(*hellos));
  if (res == fcclSuccess) res = local;
  uint64_t start = 0;
  for (int r = 0; res == fcclSuccess && r < nranks; r++) {
    const struct deviceHello* h = &hellos[r];
    if (h->status != fcclSuccess)
      res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_COLL, "rank %d failed to set up its collectives (%s; its log has "
                       "the cause)", r, fcclGetErrorString((fcclResult_t)h->status));
    else if (h->nranks != nranks || h->layoutVersion != FCCL_DEVICE_LAYOUT_VERSION ||
             h->slotBytes != mine->slotBytes || h->chunkBytes != mine->chunkBytes || h->llBytes != mine->llBytes)
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                       "rank %d's collective layout differs from rank %d's (slot %llu vs %llu bytes, staging chunk "
                       "%llu vs %llu): set the same FCCL_STAGING_BYTES on every rank",
                       r, comm->rank, (unsigned long long)h->slotBytes, (unsigned long long)mine->slotBytes,
                       (unsigned long long)h->chunkBytes, (unsigned long long)mine->chunkBytes);
    else if (h->ll128Auto != mine->ll128Auto)
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                       "rank %d has FCCL_LL128=%d, rank %d %d: set the same value on every rank (the ranks of a call "
                       "must choose the same algorithm)", r, h->ll128Auto, comm->rank, mine->ll128Auto);
    else if (h->graphRegister != mine->graphRegister)
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                       "rank %d has FCCL_GRAPH_REGISTER=%d, rank %d %d: set the same value on every rank (a captured "
                       "call registers its buffers with every rank or with none)", r, h->graphRegister, comm->rank,
                       mine->graphRegister);
    else if (h->copyScatterMin != mine->copyScatterMin)
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                       "rank %d has FCCL_COPY_SCATTER_MIN=%llu, rank %d %llu: set the same value on every rank (the "
                       "ranks of a call must choose the same algorithm)", r, (unsigned long long)h->copyScatterMin,
                       comm->rank, (unsigned long long)mine->copyScatterMin);
    else if (h->copyMoveMin != mine->copyMoveMin)
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                       "rank %d has FCCL_COPY_MOVE_MIN=%llu, rank %d %llu: set the same value on every rank (the "
                       "ranks of a call must choose the same algorithm)", r, (unsigned long long)h->copyMoveMin,
                       comm->rank, (unsigned long long)mine->copyMoveMin);
    else if (h->minCtas != mine->minCtas || h->maxCtas != mine->maxCtas)
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                       "rank %d has an SM budget of %d..%d blocks, rank %d %d..%d (0: none; config.minCTAs and "
                       "maxCTAs, FCCL_MIN_CTAS and FCCL_MAX_CTAS): set the same on every rank (the ranks of a call "
                       "must launch the same grid)",
                       r, h->minCtas, h->maxCtas, comm->rank, mine->minCtas, mine->maxCtas);
    else if (memcmp(h->requests, mine->requests, sizeof(mine->requests)) != 0)
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                       "rank %d and rank %d were given different algorithms (FCCL_ALGO, FCCL_ALLGATHER_ALGO, "
                       "FCCL_REDUCESCATTER_ALGO, FCCL_BROADCAST_ALGO or FCCL_FUSED_ALGO): set the same values on "
                       "every rank (the ranks of a call must run the same kernel)", r, comm->rank);
    if (h->lastEpoch > start) start = h->lastEpoch;
  }
  free(hellos);
  FCCLCHECK(res);
  start = fcclEpochNext(start);
  s->firstEpoch = start;

  fcclDevState initial;
  memset(&initial, 0, sizeof(initial));
  for (int b = 0; b < FCCL_DEVICE_MAX_BLOCKS; b++) initial.epochs[b] = start;
  FCCLCHECK(copyToDevice(s->state, &initial, sizeof(initial)));

  FCCL_INFO(FCCL_SUBSYS_COLL,
            "collectives ready: %d ranks, slot %llu bytes (LL %llu B/peer, staging chunk %llu B), first epoch %llu, "
            "%d SMs (budget %d..%d blocks, 0: none), timeout %llu ms, programmatic dependent launch %s",
            nranks, (unsigned long long)layout->totalBytes, (unsigned long long)layout->llBytes,
            (unsigned long long)layout->chunkBytes, (unsigned long long)start, s->smCount, s->minCtas, s->maxCtas,
            (unsigned long long)(s->dev.timeoutNs / 1000000ull), s->pdl ? "on" : "off");
  return fcclSuccess;
}

fcclResult_t fcclDeviceInit(struct fcclComm* comm) {
  if (!comm || !comm->transport || !comm->bootstrap || !comm->abortFlag)
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_COLL, "device init needs the bootstrap and the transport");
  if (comm->nranks < 1 || comm->nranks > FCCL_DEVICE_MAX_RANKS)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "the collectives support 1 to %d ranks (one NVLink domain); this communicator has %d",
                      FCCL_DEVICE_MAX_RANKS, comm->nranks);
  struct fcclDeviceState* s = calloc(1, sizeof(*s));
  if (!s) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "out of host memory");
  int saved = -1;
  CUDACHECK(cudaGetDevice(&saved));
  if (saved != comm->cudaDev) CUDACHECK(cudaSetDevice(comm->cudaDev));
  fcclResult_t res = deviceInit(comm, s);
  if (res == fcclSuccess)
    comm->device = s;
  else
    (void)freeState(s);
  if (saved != comm->cudaDev) CUDACHECKIGNORE(cudaSetDevice(saved));
  return res;
}

fcclResult_t fcclDeviceFini(struct fcclComm* comm) {
  if (!comm || !comm->device) return fcclSuccess;
  int saved = -1;
  CUDACHECK(cudaGetDevice(&saved));
  if (saved != comm->cudaDev) CUDACHECK(cudaSetDevice(comm->cudaDev));
  /* Our kernels may still run on the application's streams; they end on their own (bounded waits, abort flag). */
  CUDACHECKIGNORE(cudaDeviceSynchronize());
  fcclResult_t res = freeState(comm->device);
  comm->device = NULL;
  if (saved != comm->cudaDev) CUDACHECKIGNORE(cudaSetDevice(saved));
  return res;
}

fcclResult_t fcclDeviceAsyncError(struct fcclComm* comm) {
  if (!comm || !comm->device) return fcclSuccess;
  struct fcclDeviceState* s = comm->device;
  int32_t code = __atomic_load_n(&s->words->errorCode, __ATOMIC_ACQUIRE);
  if (code == 0) return fcclSuccess;
  fcclResult_t result = (fcclResult_t)code;
  if (!__atomic_exchange_n(&s->reported, 1, __ATOMIC_ACQ_REL)) {
    const fcclDevHostWords* w = s->words;
    /* The call number counts the communicator's calls that used an epoch since init, from 1: the same on every
     * rank, whose first epochs agree (deviceInit). A copy-engine scatter's barrier uses an epoch of its own. */
    const unsigned long long call =
        w->errorEpoch >= s->firstEpoch ? (unsigned long long)(w->errorEpoch - s->firstEpoch + 1) : 0;
    char ours[128];
    fcclPrintDescribe(w->errorPrint, ours, sizeof(ours));
    if (result == fcclInvalidUsage) {
      /* A peer's flag of this epoch carried another print (docs/errors.md#out-of-step). */
      char mismatch[FCCL_LAST_ERROR_MAX];
      fcclPrintMismatchMessage(w->errorRank, call, w->errorPrint, w->errorPeer, w->errorPeerPrint, mismatch,
                               sizeof(mismatch));
      (void)FCCL_ERROR(result, FCCL_SUBSYS_COLL,
                       "%s; seen by the %s kernel (epoch %llu) in block %d, waiting for %s; the communicator is "
                       "unusable, destroy or abort it", mismatch, fcclAlgoName(w->errorKernel),
                       (unsigned long long)w->errorEpoch, w->errorBlock, phaseName(w->errorPhase));
    } else if (w->errorPhase == FCCL_PHASE_COUNTS) {
      /* A variable call's counts in device memory did not fit the capacities its caller declared. */
      char what[64];
      if (w->errorPeer >= 0)
        snprintf(what, sizeof(what), "counts[%d] = %lld", w->errorPeer, (long long)w->errorWaitedNs);
      else
        snprintf(what, sizeof(what), "the sum of the counts, %llu,", (unsigned long long)w->errorWaitedNs);
      (void)FCCL_ERROR(result, FCCL_SUBSYS_COLL,
                       "rank %d: the %s kernel of call %llu (%s; epoch %llu) read %s in device memory: negative or "
                       "beyond the buffers' capacity (sendcapacity, recvcapacity); the call moved nothing; the "
                       "communicator is unusable, destroy or abort it",
                       w->errorRank, fcclAlgoName(w->errorKernel), call, ours, (unsigned long long)w->errorEpoch, what);
    } else if (w->errorPhase == FCCL_PHASE_MOE_ROUTING) {
      /* A kernel found the call's input invalid (the MoE dispatch: a routing entry of rank errorPeer). */
      (void)FCCL_ERROR(result, FCCL_SUBSYS_COLL,
                       "rank %d: the %s kernel of call %llu (%s; epoch %llu) found invalid input of rank %d in %s: "
                       "token %llu, top-k entry %u holds expert %d, outside [-1, experts) or repeated in the token's "
                       "row; the communicator is unusable, destroy or abort it",
                       w->errorRank, fcclAlgoName(w->errorKernel), call, ours, (unsigned long long)w->errorEpoch,
                       w->errorPeer, phaseName(w->errorPhase), (unsigned long long)(w->errorDetail >> 35),
                       (unsigned)((w->errorDetail >> 32) & 7u), (int)(uint32_t)w->errorDetail);
    } else {
      (void)FCCL_ERROR(result, FCCL_SUBSYS_COLL,
                       "rank %d: the %s kernel of call %llu (%s; epoch %llu) gave up in block %d after %.1f ms: rank "
                       "%d did not arrive (%s; FCCL_TIMEOUT %llu ms): %s; the communicator is unusable, destroy or "
                       "abort it",
                       w->errorRank, fcclAlgoName(w->errorKernel), call, ours, (unsigned long long)w->errorEpoch,
                       w->errorBlock, (double)w->errorWaitedNs / 1e6, w->errorPeer, phaseName(w->errorPhase),
                       (unsigned long long)(s->dev.timeoutNs / 1000000ull), fcclGetErrorString(result));
    }
    fcclCommRecordThreadError(comm);
    fcclCommFail(comm, result, fcclThreadLastError(), 0);
  }
  return result;
}

fcclResult_t fcclDeviceSetEpochForTest(struct fcclComm* comm, uint64_t epoch) {
  /* Low word 0 is never an epoch: it is the LL flag of a cleared area (fcclEpochNext skips it). */
  if (!comm || !comm->device || (uint32_t)epoch == 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "fcclDeviceSetEpochForTest: no device state, or epoch 0x%llx has low word 0",
                      (unsigned long long)epoch);
  uint64_t epochs[FCCL_DEVICE_MAX_BLOCKS];
  for (int b = 0; b < FCCL_DEVICE_MAX_BLOCKS; b++) epochs[b] = epoch;
  CUDACHECK(cudaSetDevice(comm->cudaDev));
  CUDACHECK(cudaDeviceSynchronize());
  return copyToDevice(comm->device->state->epochs, epochs, sizeof(epochs));
}

fcclResult_t fcclDeviceGetEpochForTest(struct fcclComm* comm, uint64_t* epoch) {
  if (!comm || !comm->device || !epoch)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "fcclDeviceGetEpochForTest: no device state");
  CUDACHECK(cudaSetDevice(comm->cudaDev));
  CUDACHECK(cudaDeviceSynchronize());
  CUDACHECK(cudaMemcpy(epoch, &comm->device->state->epochs[0], sizeof(*epoch), cudaMemcpyDeviceToHost));
  return fcclSuccess;
}
