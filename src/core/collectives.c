/*
 * The collectives on the host: the communicator's device state (epoch counters, error words, slot pointers), and
 * the public fcclAllReduce / fcclBarrier: argument checks, algorithm choice (algo.c), kernel launch (src/device).
 * Nothing here waits for the GPU or for peers except fcclDeviceInit (one bootstrap all-gather) and fcclDeviceFini.
 * docs/collectives.md has the design.
 */
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "debug.h"
#include "device.h"
#include "param.h"
#include "transport.h"

#include <cuda_runtime.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_STAGING_MIN_BYTES ((uint64_t)4 * FCCL_DEVICE_MAX_RANKS * FCCL_SLOT_ALIGN)
#define FCCL_STAGING_MAX_BYTES ((uint64_t)1 << 32)
#define FCCL_DEVICE_LAYOUT_VERSION 1

struct fcclDeviceState {
  fcclDevComm dev;           /* passed by value to every kernel */
  fcclDevState* state;       /* device memory: epochs, error claim */
  fcclDevHostWords* words;   /* host memory mapped into the device: the kernels' error report */
  void* abortPage;           /* comm->abortFlag's page, registered (mapped) for the kernels; NULL if not ours */
  int smCount;
  int algoRequest;           /* FCCL_ALGO, parsed once */
  int pdl;                   /* launch with programmatic dependent launch (FCCL_PDL, compute capability >= 9.0) */
  int ll128Auto;             /* FCCL_LL128: the table may choose LL128 */
  int graphRegister;         /* FCCL_GRAPH_REGISTER: captured calls register plain buffers for the graph */
  uint64_t copyScatterMin;   /* FCCL_COPY_SCATTER_MIN: the registered two-shot's scatter by copy from this size */
  int reported;              /* the kernels' error was described once (atomic) */
};

size_t fcclTypeSize(fcclDataType_t type) {
  switch (type) {
    case fcclInt8:
    case fcclUint8: return 1;
    case fcclFloat16:
    case fcclBfloat16: return 2;
    case fcclInt32:
    case fcclUint32:
    case fcclFloat32: return 4;
    case fcclInt64:
    case fcclUint64:
    case fcclFloat64: return 8;
    default: return 0;
  }
}

static const char* typeName(fcclDataType_t type) {
  static const char* const names[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                      "uint64", "float16", "float32", "float64", "bfloat16"};
  return (int)type >= 0 && type < fcclNumTypes ? names[type] : "unknown";
}

static const char* phaseName(int phase) {
  switch (phase) {
    case FCCL_PHASE_BARRIER: return "barrier";
    case FCCL_PHASE_LL: return "LL packets";
    case FCCL_PHASE_READY: return "the peer to reach the call";
    case FCCL_PHASE_INBOX: return "the peer's staged input";
    case FCCL_PHASE_RESULT: return "the owner's reduced chunk";
    case FCCL_PHASE_DONE: return "the peer to finish with our buffers";
    case FCCL_PHASE_LL128: return "LL128 lines";
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

uint64_t fcclDeviceCopyScatterMin(void) {
  const int64_t value = fcclParamInt(FCCL_PARAM_COPY_SCATTER_MIN);
  return value > 0 ? (uint64_t)value : 0;
}

size_t fcclDeviceSlotBytes(int nranks) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  return (size_t)layout.totalBytes;
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
};

static fcclResult_t freeState(struct fcclDeviceState* s) {
  fcclResult_t res = fcclSuccess;
  if (!s) return res;
  if (s->state) {
    cudaError_t err = cudaFree(s->state);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL, "cudaFree of the epoch counters failed: %s",
                       cudaGetErrorString(err));
    }
  }
  if (s->words) {
    cudaError_t err = cudaFreeHost(s->words);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      if (res == fcclSuccess)
        res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL, "cudaFreeHost of the error words failed: %s",
                         cudaGetErrorString(err));
    }
  }
  if (s->abortPage) {
    cudaError_t err = cudaHostUnregister(s->abortPage);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      if (res == fcclSuccess)
        res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL, "cudaHostUnregister of the abort flag failed: %s",
                         cudaGetErrorString(err));
    }
  }
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
  (void)cudaStreamDestroy(stream);
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
  CUDACHECKGOTO(cudaMemsetAsync(ownSlot + layout->signalAOffset, 0, layout->inboxOffset - layout->signalAOffset,
                                stream),
                res, out);
  CUDACHECKGOTO(cudaStreamSynchronize(stream), res, out);
out:
  (void)cudaStreamDestroy(stream);
  return res;
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
  int ccMajor = 0;
  CUDACHECK(cudaDeviceGetAttribute(&ccMajor, cudaDevAttrComputeCapabilityMajor, comm->cudaDev));
  s->pdl = ccMajor >= 9 && fcclParamInt(FCCL_PARAM_PDL) != 0;
  s->ll128Auto = fcclDeviceLL128Auto();
  s->copyScatterMin = fcclDeviceCopyScatterMin();
  s->graphRegister = fcclParamInt(FCCL_PARAM_GRAPH_REGISTER) != 0;

  /* The abort flag's page (core allocates it page-aligned and alone) mapped for the kernels. */
  cudaError_t err = cudaHostRegister((void*)comm->abortFlag, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL, "cudaHostRegister of the abort flag page failed: %s",
                      cudaGetErrorString(err));
  }
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
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), layout);
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
    if (h->lastEpoch > start) start = h->lastEpoch;
  }
  free(hellos);
  FCCLCHECK(res);
  start = fcclEpochNext(start);

  fcclDevState initial;
  memset(&initial, 0, sizeof(initial));
  for (int b = 0; b < FCCL_DEVICE_MAX_BLOCKS; b++) initial.epochs[b] = start;
  FCCLCHECK(copyToDevice(s->state, &initial, sizeof(initial)));

  const char* algo = fcclParamString(FCCL_PARAM_ALGO);
  s->algoRequest = fcclAlgoParseRequest(algo);
  if (s->algoRequest < 0) {
    FCCL_WARN(FCCL_SUBSYS_COLL, "FCCL_ALGO=%s is not one of auto, ll, oneshot, twoshot, oneshot_push, oneshot_pull, "
              "twoshot_staged, twoshot_reg, ll128; choosing by size", algo);
    s->algoRequest = FCCL_ALGO_REQUEST_AUTO;
  }
  FCCL_INFO(FCCL_SUBSYS_COLL,
            "collectives ready: %d ranks, slot %llu bytes (LL %llu B/peer, staging chunk %llu B), first epoch %llu, "
            "%d SMs, timeout %llu ms, programmatic dependent launch %s",
            nranks, (unsigned long long)layout->totalBytes, (unsigned long long)layout->llBytes,
            (unsigned long long)layout->chunkBytes, (unsigned long long)start, s->smCount,
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
  if (saved != comm->cudaDev) (void)cudaSetDevice(saved);
  return res;
}

fcclResult_t fcclDeviceFini(struct fcclComm* comm) {
  if (!comm || !comm->device) return fcclSuccess;
  int saved = -1;
  CUDACHECK(cudaGetDevice(&saved));
  if (saved != comm->cudaDev) CUDACHECK(cudaSetDevice(comm->cudaDev));
  /* Our kernels may still run on the application's streams; they end on their own (bounded waits, abort flag). */
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    FCCL_INFO(FCCL_SUBSYS_COLL, "cudaDeviceSynchronize before freeing the collectives' state: %s",
              cudaGetErrorString(err));
  }
  fcclResult_t res = freeState(comm->device);
  comm->device = NULL;
  if (saved != comm->cudaDev) (void)cudaSetDevice(saved);
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
    (void)FCCL_ERROR(result, FCCL_SUBSYS_COLL,
                     "rank %d: the %s kernel gave up in block %d waiting for rank %d (%s) at epoch %llu after "
                     "%.1f ms (FCCL_TIMEOUT %llu ms): %s; the communicator is unusable, destroy or abort it",
                     w->errorRank, fcclAlgoName(w->errorKernel), w->errorBlock, w->errorPeer, phaseName(w->errorPhase),
                     (unsigned long long)w->errorEpoch, (double)w->errorWaitedNs / 1e6,
                     (unsigned long long)(s->dev.timeoutNs / 1000000ull), fcclGetErrorString(result));
    fcclCommRecordThreadError(comm);
    fcclResult_t expected = fcclSuccess;
    __atomic_compare_exchange_n(&comm->asyncError, &expected, result, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
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

/* ---- public calls ---- */

/* The parts of a call's checks that need the device: the stream's device and the buffers' kind and device. */
struct callDevice {
  int saved;
};

static fcclResult_t enterDevice(struct fcclComm* comm, struct callDevice* cd) {
  CUDACHECK(cudaGetDevice(&cd->saved));
  if (cd->saved != comm->cudaDev) CUDACHECK(cudaSetDevice(comm->cudaDev));
  return fcclSuccess;
}

static void leaveDevice(struct fcclComm* comm, const struct callDevice* cd) {
  if (cd->saved >= 0 && cd->saved != comm->cudaDev) (void)cudaSetDevice(cd->saved);
}

static fcclResult_t checkStream(struct fcclComm* comm, void* stream, const char* caller, int* capturing) {
  /* While a stream is captured (global mode) most queries, cudaStreamGetDevice included, are refused and would
   * invalidate the capture; cudaStreamIsCapturing is the one made for it. A captured stream of another device is
   * then refused by the launch itself (no node is added). */
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing((cudaStream_t)stream, &capture);
  *capturing = err == cudaSuccess && capture == cudaStreamCaptureStatusActive;
  if (*capturing) return fcclSuccess;
  int dev = -1;
  if (err == cudaSuccess) err = cudaStreamGetDevice((cudaStream_t)stream, &dev);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: stream %p is not a valid CUDA stream here (%s)",
                      caller, stream, cudaGetErrorName(err));
  }
  if (dev != comm->cudaDev)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: stream %p belongs to device %d, the communicator (rank %d) to device %d", caller, stream,
                      dev, comm->rank, comm->cudaDev);
  return fcclSuccess;
}

static fcclResult_t checkBuffer(struct fcclComm* comm, const void* buf, const char* name, const char* caller) {
  /* One driver query for what the check needs: about half the host time of cudaPointerGetAttributes, paid on every
   * call (fccl-call-cost). Memory the driver does not know reads as type 0 rather than failing. */
  CUpointer_attribute attributes[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                       CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned int memoryType = 0, managed = 0;
  int ordinal = -1;
  void* values[3] = {&memoryType, &ordinal, &managed};
  CUresult err = pfn_cuPointerGetAttributes(3, attributes, values, (CUdeviceptr)(uintptr_t)buf);
  if (err != CUDA_SUCCESS) {
    const char* errorName = "unknown";
    (void)pfn_cuGetErrorName(err, &errorName);
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p is not a CUDA pointer (%s)", caller, name,
                      buf, errorName);
  }
  if (managed) return fcclSuccess;
  if (memoryType != CU_MEMORYTYPE_DEVICE)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p is %s memory, not device memory", caller, name,
                      buf, memoryType == CU_MEMORYTYPE_HOST ? "host" : "unregistered host");
  if (ordinal != comm->cudaDev)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: %s %p is memory of device %d, the communicator (rank %d) uses device %d", caller, name, buf,
                      ordinal, comm->rank, comm->cudaDev);
  return fcclSuccess;
}

/* Common entry checks: a live communicator with device state, and no earlier kernel failure. */
static fcclResult_t checkComm(struct fcclComm* comm, const char* caller) {
  if (!fcclCommIsValid(comm))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: invalid communicator handle %p", caller,
                      (void*)comm);
  return fcclSuccess;
}

static fcclResult_t checkReady(struct fcclComm* comm, const char* caller) {
  fcclResult_t state = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  if (state == fcclInProgress)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "%s: the communicator's non-blocking init has not finished (poll fcclCommGetAsyncError)",
                      caller);
  if (comm->device == NULL)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL, "%s: the communicator has no device state (its init failed)",
                      caller);
  fcclResult_t kernels = fcclDeviceAsyncError(comm); /* describes a kernel failure the first time it is seen */
  if (state == fcclSuccess) state = kernels;
  if (state != fcclSuccess)
    return FCCL_ERROR(state, FCCL_SUBSYS_COLL, "%s: the communicator failed earlier (%s); destroy or abort it", caller,
                      fcclGetErrorString(state));
  return fcclSuccess;
}

/* Whether registered buffers would run another algorithm than staged ones at this size (LL and LL128 always stage):
 * the same answer on every rank, so every rank of a captured call registers or none does. */
static int registeredPays(struct fcclComm* comm, const struct fcclDeviceState* s, uint64_t bytes, int inPlace) {
  fcclAlgoQuery query = fcclAlgoQueryMake(bytes, comm->nranks, 1, inPlace, s->smCount, &s->dev.layout, s->ll128Auto,
                                          s->copyScatterMin);
  query.forced = fcclAlgoResolveRequest(s->algoRequest, 1);
  fcclAlgoChoice choice;
  if (fcclAlgoSelect(&query, &choice) != fcclSuccess) return 0;
  return choice.algo == FCCL_ALGO_TWOSHOT_REG || choice.algo == FCCL_ALGO_ONESHOT_PULL;
}

/*
 * The reduce-scatter of the registered two-shot by the copy engines (FCCL_SCATTER_COPY, 2 ranks, out of place):
 * a barrier (the peer reached the call, so its output may be written), then one copy of our input's units of the
 * peer's share into the peer's output at their own place, both on the stream before the kernel, which then only
 * reduces and all-gathers. The share is the kernel's: divUp(units, 2) units per rank, the last one up to bytes.
 */
static fcclResult_t scatterByCopy(struct fcclComm* comm, const fcclDevArgs* args, cudaStream_t stream) {
  const int peer = 1 - comm->rank;
  /* FCCL_SCATTER_COPY_PULL: the peer's units of our share, from its input into our output. */
  const int pull = args->scatter == FCCL_SCATTER_COPY_PULL;
  const uint64_t units = (args->bytes + FCCL_UNIT_BYTES - 1) / FCCL_UNIT_BYTES;
  const uint64_t share = (units + 1) / 2 * FCCL_UNIT_BYTES;
  const uint64_t begin = (uint64_t)(pull ? comm->rank : peer) * share;
  const uint64_t end = begin + share < args->bytes ? begin + share : args->bytes;
  const uint64_t from = pull ? args->peerSend[peer] : args->sendbuf;
  const uint64_t to = pull ? args->recvbuf : args->peerRecv[peer];
  FCCLCHECK(fcclDeviceLaunchBarrier(&comm->device->dev, comm->device->pdl, stream));
  if (begin < end)
    CUDACHECK(cudaMemcpyAsync((char*)(uintptr_t)to + begin, (const char*)(uintptr_t)from + begin, end - begin,
                              cudaMemcpyDefault, stream));
  return fcclSuccess;
}

static fcclResult_t allReduce(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                              fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo, const char* caller) {
  FCCLCHECK(checkComm(comm, caller));
  if ((int)datatype < 0 || datatype >= fcclNumTypes)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown datatype %d", caller, (int)datatype);
  if ((int)op < 0 || op >= fcclNumOps)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown reduction op %d", caller, (int)op);
  const size_t size = fcclTypeSize(datatype);
  if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s is NULL with count %zu", caller,
                      sendbuf == NULL ? "sendbuf" : "recvbuf", count);
  if (count > SIZE_MAX / size)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: count %zu of %s overflows a size", caller, count,
                      typeName(datatype));
  if ((uintptr_t)sendbuf % size != 0 || (uintptr_t)recvbuf % size != 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p is not aligned to its %s elements (%zu bytes)",
                      caller, (uintptr_t)sendbuf % size != 0 ? "sendbuf" : "recvbuf",
                      (uintptr_t)sendbuf % size != 0 ? sendbuf : (const void*)recvbuf, typeName(datatype), size);
  if (algo < -1 || algo >= FCCL_ALGO_COUNT)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown algorithm %d", caller, algo);
  FCCLCHECK(checkReady(comm, caller));
  struct fcclDeviceState* s = comm->device;

  struct callDevice cd = {-1};
  fcclResult_t res = enterDevice(comm, &cd);
  if (res != fcclSuccess) return res;
  int capturing = 0;
  FCCLCHECKGOTO(checkStream(comm, stream, caller, &capturing), res, out);
  /* Graphs destroyed since the last call: release the buffers they registered (their destructor cannot). */
  FCCLCHECKGOTO(fcclTransportReleaseGraphRegistrations(comm->transport, 0), res, out);
  if (count == 0) goto out; /* every rank has count 0: nothing to move, no epoch used */
  FCCLCHECKGOTO(checkBuffer(comm, sendbuf, "sendbuf", caller), res, out);
  if (recvbuf != sendbuf) FCCLCHECKGOTO(checkBuffer(comm, recvbuf, "recvbuf", caller), res, out);

  const uint64_t bytes = (uint64_t)count * size;
  /* One rank: a copy, unless an algorithm is forced (FCCL_ALGO, tests), which still runs its kernel. Whether a
   * request is forced does not depend on registration. */
  if (fcclAlgoIsCopy(comm->nranks, algo >= 0 ? algo : fcclAlgoResolveRequest(s->algoRequest, 0))) {
    if (recvbuf != sendbuf)
      CUDACHECKGOTO(cudaMemcpyAsync(recvbuf, sendbuf, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream), res,
                    out);
    goto out;
  }
  fcclDevArgs args;
  memset(&args, 0, sizeof(args));
  args.sendbuf = (uint64_t)(uintptr_t)sendbuf;
  args.recvbuf = (uint64_t)(uintptr_t)recvbuf;
  args.count = count;
  args.bytes = bytes;
  args.inPlace = sendbuf == recvbuf;
  void* peers[FCCL_DEVICE_MAX_RANKS];
  int registered = fcclTransportLookup(comm->transport, sendbuf, bytes, peers);
  if (registered)
    for (int r = 0; r < comm->nranks; r++) args.peerSend[r] = (uint64_t)(uintptr_t)peers[r];
  if (registered && recvbuf != sendbuf) registered = fcclTransportLookup(comm->transport, recvbuf, bytes, peers);
  if (registered)
    for (int r = 0; r < comm->nranks; r++) args.peerRecv[r] = (uint64_t)(uintptr_t)peers[r];
  if (!registered && capturing && s->graphRegister && algo < 0 && registeredPays(comm, s, bytes, args.inPlace)) {
    /* Captured plain buffers: registered for the graph's lifetime, every replay reads them in place. */
    void* peerSend[FCCL_DEVICE_MAX_RANKS];
    void* peerRecv[FCCL_DEVICE_MAX_RANKS];
    FCCLCHECKGOTO(fcclTransportGraphRegister(comm->transport, stream, (void*)(uintptr_t)sendbuf, bytes, recvbuf, bytes, peerSend,
                                             peerRecv, &registered),
                  res, out);
    for (int r = 0; registered && r < comm->nranks; r++) {
      args.peerSend[r] = (uint64_t)(uintptr_t)peerSend[r];
      args.peerRecv[r] = (uint64_t)(uintptr_t)peerRecv[r];
    }
  }

  fcclAlgoQuery query = fcclAlgoQueryMake(bytes, comm->nranks, registered, args.inPlace, s->smCount,
                                          &s->dev.layout, s->ll128Auto, s->copyScatterMin);
  query.forced = algo >= 0 ? algo : fcclAlgoResolveRequest(s->algoRequest, registered);
  query.strict = algo >= 0;
  fcclAlgoChoice choice;
  FCCLCHECKGOTO(fcclAlgoSelect(&query, &choice), res, out);
  args.roundUnits = choice.roundUnits;
  args.scatter = choice.scatter;
  FCCL_TRACE(FCCL_SUBSYS_COLL, "allreduce %zu x %s op %d %s: %s, %d x %d, stream %p", count, typeName(datatype),
             (int)op, registered ? "registered" : "staged", fcclAlgoName(choice.algo), choice.blocks, choice.threads,
             stream);
  if (choice.scatter == FCCL_SCATTER_COPY || choice.scatter == FCCL_SCATTER_COPY_PULL)
    FCCLCHECKGOTO(scatterByCopy(comm, &args, (cudaStream_t)stream), res, out);
  FCCLCHECKGOTO(fcclDeviceLaunchAllReduce(choice.algo, datatype, op, &s->dev, &args, choice.blocks, choice.threads,
                                          s->pdl, (cudaStream_t)stream),
                res, out);
out:
  leaveDevice(comm, &cd);
  return res;
}

fcclResult_t fcclAllReduceAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                               fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  fcclResult_t res = allReduce(sendbuf, recvbuf, count, datatype, op, comm, stream, algo, "fcclAllReduce");
  if (res != fcclSuccess && fcclCommIsValid(comm)) fcclCommRecordThreadError(comm);
  return res;
}

FCCL_API fcclResult_t fcclAllReduce(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                    fcclRedOp_t op, fcclComm_t comm, void* stream) {
  return fcclAllReduceAlgo(sendbuf, recvbuf, count, datatype, op, comm, stream, -1);
}

FCCL_API fcclResult_t fcclBarrier(fcclComm_t comm, void* stream) {
  fcclClearError();
  fcclResult_t res = checkComm(comm, "fcclBarrier");
  if (res != fcclSuccess) return res;
  FCCLCHECKGOTO(checkReady(comm, "fcclBarrier"), res, fail);
  struct callDevice cd = {-1};
  FCCLCHECKGOTO(enterDevice(comm, &cd), res, fail);
  int capturing = 0;
  res = checkStream(comm, stream, "fcclBarrier", &capturing);
  /* As in fcclAllReduce: graphs destroyed since the last call give back what they registered. */
  if (res == fcclSuccess) res = fcclTransportReleaseGraphRegistrations(comm->transport, 0);
  /* A barrier of one rank has nobody to wait for: nothing to launch. */
  if (res == fcclSuccess && comm->nranks > 1)
    res = fcclDeviceLaunchBarrier(&comm->device->dev, comm->device->pdl, (cudaStream_t)stream);
  leaveDevice(comm, &cd);
  if (res == fcclSuccess) return res;
fail:
  fcclCommRecordThreadError(comm);
  return res;
}
