/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the runtime's files and the engines share and the programs need not see: the CUDA check, the per-GPU
 * threads, the exchange adapters, and each file's part of an agent's life (agent.c runs it).
 */
#ifndef FCCL_BENCH_RUNTIME_INTERNAL_H_
#define FCCL_BENCH_RUNTIME_INTERNAL_H_

#include "runtime.h"

#include "fccl_build_config.h"

#include <cuda_runtime.h>

/* A failed CUDA call: benchFail with the call, the error's name and text (the sticky error cleared), return -1. */
#define BENCH_CHECK_CUDA(agent, call)                                                               \
  do {                                                                                              \
    cudaError_t benchErr_ = (call);                                                                 \
    if (benchErr_ != cudaSuccess) {                                                                 \
      (void)cudaGetLastError();                                                                     \
      benchFail((agent), "%s failed: %s (%s)", #call, cudaGetErrorName(benchErr_),                  \
                cudaGetErrorString(benchErr_));                                                     \
      return -1;                                                                                    \
    }                                                                                               \
  } while (0)

/* ---- agent.c: an agent's life ----------------------------------------------------------------------------------- */

/* Sets up the agent's GPUs, creates the communicators, prints the header, makes the buffers, runs the test and
 * tears everything down. Returns what the test's run returned (0, 1), or -1 after a failure. */
int benchRunAgent(benchAgent_t* agent);

/* ---- agent_gpus.c: what every part of the run uses on the agent's GPUs (benchFail, benchSync: runtime.h) ------- */

/* Makes local rank gpu's device current when this thread drives several. */
int benchUseDevice(benchAgent_t* agent, int gpu);
/* Runs fn for every local GPU at once, each on a thread with that device current (collective, blocking calls such
 * as communicator creation need every local rank inside at the same time); directly when there is one. */
typedef int (*benchPerGpuFn_t)(benchAgent_t* agent, int gpu, void* ctx);
int benchForEachGpu(benchAgent_t* agent, benchPerGpuFn_t fn, void* ctx);
/* Aborts this agent's communicators of engine after a failure or a timeout, and the exchange with them. */
void benchAbortEngine(benchAgent_t* agent, int engine);
double benchNowSec(void);
/* -T, or the default bound on every wait. */
int benchTimeoutSec(const benchAgent_t* agent);

/* ---- exchange.c: the channels between agents beside bench.h's shared memory ------------------------------------- */

/* Copies agent 0's bytes to every agent; 0, or -1 after benchFail. */
int benchBcast(benchAgent_t* agent, void* data, size_t bytes);

/* Under a launcher (BENCH_LAUNCH_ENV) the processes have no channel until the first engine's communicator exists;
 * from then on this one carries the exchange. */
typedef struct {
  benchOob_t oob;
  benchAgent_t* agent;
  unsigned char* device;
  unsigned char* host;
} benchCommExchange_t;
/* Points agent->oob at exchange (also when its buffers cannot be made: then -1 after benchFail). */
int benchCommExchangeStart(benchAgent_t* agent, benchCommExchange_t* exchange);
/* Frees its buffers; exchange may be all zeros (never started). */
void benchCommExchangeStop(benchCommExchange_t* exchange);

#if FCCL_HAVE_MPI
/* MPI_COMM_WORLD under mpirun, one agent per process. */
void benchOobMpiInit(benchOob_t* oob, int nAgents, int agent);
#endif

/* ---- buffers.c -------------------------------------------------------------------------------------------------- */

/* Shrinks agent->args.maxBytes, like nccl-tests, when the buffers would not fit the GPUs (every agent calls):
 * buffersPerSize is how many times maxBytes the buffers of one rank and engine take (all-reduce: 2). */
int benchFitMaxBytes(benchAgent_t* agent, int buffersPerSize);
/* Send and receive buffers for every local rank and measured engine, as -R says. */
int benchAllocBuffers(benchAgent_t* agent, size_t sendBytes, size_t recvBytes);
/* Deregisters and frees them (also a partial set after a failure); -1 when anything failed. */
int benchFreeBuffers(benchAgent_t* agent);

/* ---- output.c --------------------------------------------------------------------------------------------------- */

/* Gathers every rank's "#  Rank ..." line on the output agent (every agent calls). */
int benchGatherDevices(benchAgent_t* agent);
/* The header above the results: versions, flags, launch, devices, communicator creation. */
void benchPrintHeader(benchAgent_t* agent);

#endif /* FCCL_BENCH_RUNTIME_INTERNAL_H_ */
