/*
 * The device layer as the rest of the library sees it: the collectives' per-communicator device state
 * (fcclDeviceInit/Fini, called by comm init/destroy after the transport), the slot size the transport reserves,
 * the host side of abort and kernel errors, and the extern "C" kernel launchers of src/device/.
 * docs/collectives.md describes the algorithms, the slot layout, epochs and memory ordering.
 */
#ifndef FCCL_DEVICE_H_
#define FCCL_DEVICE_H_

#include "device_host.h"
#include "fccl.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fcclComm;

/*
 * Every (data type, reduction op) the kernels are instantiated for: the one list. X(type, op) is expanded once per
 * pair; the table functions of src/device and the tests iterate it.
 */
#define FCCL_DEVICE_FOR_TYPES_(X, op) \
  X(fcclInt8, op)                     \
  X(fcclUint8, op)                    \
  X(fcclInt32, op)                    \
  X(fcclUint32, op)                   \
  X(fcclInt64, op)                    \
  X(fcclUint64, op)                   \
  X(fcclFloat16, op)                  \
  X(fcclFloat32, op)                  \
  X(fcclFloat64, op)                  \
  X(fcclBfloat16, op)
#define FCCL_DEVICE_TYPE_OP_LIST(X) \
  FCCL_DEVICE_FOR_TYPES_(X, fcclSum)  \
  FCCL_DEVICE_FOR_TYPES_(X, fcclProd) \
  FCCL_DEVICE_FOR_TYPES_(X, fcclMax)  \
  FCCL_DEVICE_FOR_TYPES_(X, fcclMin)  \
  FCCL_DEVICE_FOR_TYPES_(X, fcclAvg)

/* Bytes of one element of type (0 for a value outside fcclDataType_t). */
size_t fcclTypeSize(fcclDataType_t type);

/* ---- per-communicator state (src/core/collectives.c) -------------------------------------------------------- */

/*
 * Bytes of the slot each communicator needs in every rank's arena for nranks ranks: header, signal pads, LL area
 * (2 MiB), LL128 area (4 MiB; none for one rank) and FCCL_STAGING_BYTES of staging. The same on every rank as long
 * as FCCL_STAGING_BYTES is.
 */
size_t fcclDeviceSlotBytes(int nranks);

/* FCCL_STAGING_BYTES as the collectives use it: clamped to what a slot layout can hold (warned once). */
uint64_t fcclDeviceStagingBytes(void);

/* FCCL_COPY_SCATTER_MIN as the algorithm table uses it (fcclAlgoQuery.copyScatterMin): 0 (never) when negative. */
uint64_t fcclDeviceCopyScatterMin(void);

/* FCCL_LL128 as the algorithm table uses it (fcclAlgoQuery.ll128Auto): 1 unless set to 0. */
int fcclDeviceLL128Auto(void);

/*
 * Creates comm->device once comm->transport is up: the device communicator (slot pointers of every rank), epoch
 * counters in device memory, host-mapped abort and error words. Cleans this rank's slot (signal pads, LL area),
 * then all-gathers the last epoch each rank's slot recorded and the layout: every rank starts past the largest,
 * so flags an earlier communicator left in a reused slot never satisfy a wait. Collective (one bootstrap
 * all-gather). fcclInvalidUsage when ranks disagree on FCCL_STAGING_BYTES or nranks is out of range.
 */
fcclResult_t fcclDeviceInit(struct fcclComm* comm);

/* Frees comm->device (NULL is fine). Waits for the device first: kernels of this communicator stop on their own
 * (every wait is bounded by FCCL_TIMEOUT), and within about 100 us once *comm->abortFlag is set, which the
 * kernels poll through a mapping of its page (cudaHostRegister at init). Local: no peer traffic. */
fcclResult_t fcclDeviceFini(struct fcclComm* comm);

/*
 * fcclSuccess, or the error a kernel of comm recorded (fcclTimeout when a spin bound expired). The first time an
 * error is seen it is described once (FCCL_ERROR: rank waited for, phase, epoch, how long) and kept in
 * comm->asyncError and the communicator's last error. Any thread.
 */
fcclResult_t fcclDeviceAsyncError(struct fcclComm* comm);

/* Test hooks: set every epoch counter (all ranks pass the same value, after an fcclBarrier that every rank has
 * completed, so that no peer still works on an older call; never one whose low 32 bits are 0), read the next
 * call's epoch. Both synchronise the device. */
fcclResult_t fcclDeviceSetEpochForTest(struct fcclComm* comm, uint64_t epoch);
fcclResult_t fcclDeviceGetEpochForTest(struct fcclComm* comm, uint64_t* epoch);

/* ---- algorithm selection (src/core/algo.c) ----------------------------------------------------------------- */

/* What the choice depends on; identical on every rank for one call (registration must be symmetric). */
typedef struct {
  uint64_t bytes;      /* count * element size, > 0 */
  int nranks;
  int registered;      /* sendbuf and recvbuf both inside registered buffers */
  int inPlace;
  int smCount;         /* multiprocessors of the device */
  uint64_t llBytes;    /* LL capacity per writer (fcclSlotLayout.llBytes) */
  uint64_t chunkBytes; /* staging capacity per writer and parity (fcclSlotLayout.chunkBytes) */
  uint64_t ll128Bytes; /* LL128 capacity per writer (fcclSlotLayout.ll128Lines x FCCL_LL128_LINE_DATA) */
  int ll128Auto;       /* the table may choose LL128 (FCCL_LL128) */
  /* 2 ranks, registered, out of place: the two-shot's reduce-scatter by the copy engines from this size (0: never;
   * FCCL_COPY_SCATTER_MIN). They move 390 GB/s per direction between the two H200s with both directions busy, SM
   * stores 364 (docs/perf/2026-11-30-h200x2-s9/linkmix.txt), after a barrier and a copy that cost about 15 us per
   * call: a gain from about 200 MiB (s9 ab-copy-0f18437.txt). */
  uint64_t copyScatterMin;
  int forced;          /* -1: choose; else the fcclDevKernel_t to use */
  int strict;          /* forced but not applicable: 1 -> fcclInvalidArgument, 0 -> choose instead */
} fcclAlgoQuery;

/* A query for the automatic choice (forced -1, strict 0), its capacities (LL, LL128, staging) from the slot
 * layout. Callers that force an algorithm set forced and strict afterwards. */
static inline fcclAlgoQuery fcclAlgoQueryMake(uint64_t bytes, int nranks, int registered, int inPlace, int smCount,
                                              const fcclSlotLayout* layout, int ll128Auto, uint64_t copyScatterMin) {
  fcclAlgoQuery query;
  memset(&query, 0, sizeof(query));
  query.bytes = bytes;
  query.nranks = nranks;
  query.registered = registered;
  query.inPlace = inPlace;
  query.smCount = smCount;
  query.llBytes = layout->llBytes;
  query.ll128Bytes = layout->ll128Lines * FCCL_LL128_LINE_DATA;
  query.chunkBytes = layout->chunkBytes;
  query.ll128Auto = ll128Auto;
  query.copyScatterMin = copyScatterMin;
  query.forced = -1;
  query.strict = 0;
  return query;
}

typedef struct {
  fcclDevKernel_t algo;
  int blocks;
  int threads;
  uint64_t roundUnits; /* staged two-shot: 16-byte units per owner and round */
  fcclScatter_t scatter; /* registered two-shot: how the reduce-scatter moves the data (twoshot_reg.cu) */
} fcclAlgoChoice;

/*
 * Picks the algorithm and grid (table in algo.c, docs/collectives.md). fcclInvalidArgument (with a message) when
 * a strict forced algorithm cannot run this call, or when the call needs more steps than a signal can count
 * (a count far beyond any device memory with a tiny FCCL_STAGING_BYTES). Pure: no CUDA, no environment.
 */
fcclResult_t fcclAlgoSelect(const fcclAlgoQuery* query, fcclAlgoChoice* choice);

/* Whether algo can run the call described by query (0 or 1); why receives a reason when it cannot. */
int fcclAlgoApplicable(fcclDevKernel_t algo, const fcclAlgoQuery* query, const char** why);

/* "ll", "oneshot_push", ... ; "barrier"; "unknown" otherwise. */
const char* fcclAlgoName(int algo);

/* "pull", "push", "inbox", "copy" or "copy-pull" ("unknown" otherwise): how the registered two-shot moves its
 * reduce-scatter (fcclScatter_t). */
const char* fcclScatterName(int scatter);

/* FCCL_ALGO values: "" or "auto" -> FCCL_ALGO_REQUEST_AUTO, "ll", "oneshot", "twoshot" (the registered or staged
 * variant by the buffers), or an exact name ("oneshot_push", ...); -1 for anything else. */
#define FCCL_ALGO_REQUEST_AUTO 100
#define FCCL_ALGO_REQUEST_ONESHOT 101
#define FCCL_ALGO_REQUEST_TWOSHOT 102
int fcclAlgoParseRequest(const char* name);

/* The forced algorithm for a request and this call's registration (-1 for auto). */
int fcclAlgoResolveRequest(int request, int registered);

/* Whether a call needs no kernel: one rank and no forced algorithm (forced as for fcclAlgoQuery.forced). Every op
 * of one contribution is the identity (avg divides by 1), so the call is a copy, or nothing in place. */
int fcclAlgoIsCopy(int nranks, int forced);

/*
 * fcclAllReduce with the algorithm chosen by the caller: algo -1 chooses as fcclAllReduce does (FCCL_ALGO
 * included), otherwise that fcclDevKernel_t exactly (fcclInvalidArgument when it cannot run the call). For tests.
 */
fcclResult_t fcclAllReduceAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                               fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo);

/* ---- launchers (src/device/launch.cu) ----------------------------------------------------------------------- */

/*
 * Launches the all-reduce kernel of algorithm algo for (type, op) with blocks x threads on stream (the current
 * device must be comm's); pdl != 0 adds programmatic dependent launch (FCCL_PDL; compute capability >= 9.0).
 * fcclInvalidArgument for an unknown algorithm/type/op or a grid outside [1, FCCL_DEVICE_MAX_BLOCKS] x
 * [32, FCCL_DEVICE_THREADS]; fcclUnhandledCudaError when the launch fails.
 */
fcclResult_t fcclDeviceLaunchAllReduce(fcclDevKernel_t algo, fcclDataType_t type, fcclRedOp_t op,
                                       const fcclDevComm* comm, const fcclDevArgs* args, int blocks, int threads,
                                       int pdl, cudaStream_t stream);

/* Launches the barrier kernel (one warp) on stream; pdl as for fcclDeviceLaunchAllReduce. */
fcclResult_t fcclDeviceLaunchBarrier(const fcclDevComm* comm, int pdl, cudaStream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FCCL_DEVICE_H_ */
