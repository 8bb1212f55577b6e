/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The collectives' per-communicator device state (src/core/comm/device_state.c): the device-side communicator, epoch
 * counters in device memory, the host-mapped abort and error words, and the knobs every rank must share. Built by
 * the communicator's init after the transport, freed by its teardown.
 */
#ifndef FCCL_DEVICE_STATE_H_
#define FCCL_DEVICE_STATE_H_

#include "device_host.h"
#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

struct fcclComm;

/* What the collectives keep per communicator (comm->device). */
struct fcclDeviceState {
  fcclDevComm dev;           /* passed by value to every kernel */
  fcclDevState* state;       /* device memory: epochs, error claim */
  fcclDevHostWords* words;   /* host memory mapped into the device: the kernels' error report */
  void* abortPage;           /* comm->abortFlag's page, registered (mapped) for the kernels; NULL if not ours */
  int smCount;
  int algoRequest;           /* FCCL_ALGO, parsed once */
  int allGatherRequest;      /* FCCL_ALLGATHER_ALGO, FCCL_REDUCESCATTER_ALGO, FCCL_BROADCAST_ALGO:
                              * fcclMoveParseRequest */
  int reduceScatterRequest;
  int broadcastRequest;
  int fusedRequest;          /* FCCL_FUSED_ALGO: fcclFusedParseRequest */
  int pdl;                   /* launch with programmatic dependent launch (FCCL_PDL, compute capability >= 9.0) */
  int ll128Auto;             /* FCCL_LL128: the table may choose LL128 */
  int graphRegister;         /* FCCL_GRAPH_REGISTER: captured calls register plain buffers for the graph */
  uint64_t copyScatterMin;   /* FCCL_COPY_SCATTER_MIN: the registered two-shot's scatter by copy from this size */
  uint64_t copyMoveMin;      /* FCCL_COPY_MOVE_MIN: all-gather and broadcast by the copy engines from this block */
  int minCtas, maxCtas;      /* the SM budget (fcclDeviceCtaBound; 0: none): every kernel's grid (fcclCtaClamp) */
  int reported;              /* the kernels' error was described once (atomic) */
  uint64_t firstEpoch;       /* the epoch of the communicator's first call (error reports count calls from it) */
};

/*
 * Bytes of the slot each communicator needs in every rank's arena for nranks ranks: header, signal pads, LL area
 * (2 MiB), LL128 area (4 MiB; none for one rank) and FCCL_STAGING_BYTES of staging. The same on every rank as long
 * as FCCL_STAGING_BYTES is.
 */
size_t fcclDeviceSlotBytes(int nranks);

/* FCCL_STAGING_BYTES as the collectives use it: clamped to what a slot layout can hold (warned once). */
uint64_t fcclDeviceStagingBytes(void);

/*
 * The layout of nranks in a slot of slotBytes: with FCCL_STAGING_BYTES of staging where the slot holds it (a slot of
 * fcclDeviceSlotBytes(nranks) does), else with the most staging it holds, to within FCCL_SLOT_ALIGN. The same on
 * every rank for the same slot. 0 (layout at the least staging, too large) when the slot holds none.
 */
int fcclDeviceLayoutIn(int nranks, size_t slotBytes, fcclSlotLayout* layout);

/*
 * Whether a communicator of nranks may take a slot of slotBytes (another communicator's size, fcclCommSplit's
 * parent's): its layout there keeps at least 7/8 of FCCL_STAGING_BYTES. Slot sizes differ by rank count only by
 * rounding, so that a child keeps nearly all its staging and maps nothing new (core/comm/split.c).
 */
int fcclDeviceSlotHolds(int nranks, size_t slotBytes);

/* FCCL_COPY_SCATTER_MIN as the algorithm table uses it (fcclAlgoQuery.copyScatterMin): 0 (never) when negative. */
uint64_t fcclDeviceCopyScatterMin(void);

/* FCCL_COPY_MOVE_MIN as the move table uses it (fcclAlgoQuery.copyMoveMin): 0 (never) when not positive. */
uint64_t fcclDeviceCopyMoveMin(void);

/*
 * Whether a GPU of compute capability cc (major * 10 + minor) can run kernels built with SASS for sassArchs
 * ("80 90": the build's FCCL_BUILD_SASS_ARCHS) and PTX for ptxArch (0: none): SASS of the same major and a minor
 * at most cc's runs as it is, PTX of an older or equal capability is compiled by the driver. 1 or 0; why says what
 * the build has when it cannot. Pure: the unit tests fake capabilities with it.
 */
int fcclDeviceArchRunnable(int cc, const char* sassArchs, int ptxArch, char* why, size_t whySize);

/* One bound of the SM budget: the variable (FCCL_MIN_CTAS or FCCL_MAX_CTAS, as id) where it is set to a positive
 * value, which overrides the config's as NCCL's variables do, else configured (fcclConfig_t.minCTAs or maxCTAs) when
 * positive; 0: no bound. */
int fcclDeviceCtaBound(int configured, int id);

/* FCCL_LL128 as the algorithm table uses it (fcclAlgoQuery.ll128Auto): 1 unless set to 0. */
int fcclDeviceLL128Auto(void);

/*
 * Creates comm->device once comm->transport is up: the device communicator (slot pointers of every rank), epoch
 * counters in device memory, host-mapped abort and error words. Cleans this rank's slot (signal pads, LL area),
 * then all-gathers the last epoch each rank's slot recorded and the layout: every rank starts past the largest,
 * so flags an earlier communicator left in a reused slot never satisfy a wait. Collective (one bootstrap
 * all-gather). fcclInvalidUsage when ranks disagree on FCCL_STAGING_BYTES (or another setting the ranks of a call
 * must share: the algorithm variables, the SM budget) or nranks is out of range.
 */
fcclResult_t fcclDeviceInit(struct fcclComm* comm);

/* Frees comm->device (NULL is fine). Waits for the device first: kernels of this communicator stop on their own
 * (every wait is bounded by FCCL_TIMEOUT), and about a millisecond into a wait once *comm->abortFlag is set, which
 * the kernels poll through a mapping of its page (cudaHostRegister at init). Local: no peer traffic. */
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

#endif /* FCCL_DEVICE_STATE_H_ */
