/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The runtime's side of the exchange between agents (bench.h: one all-gather of a fixed slot per agent): the
 * calls that say what failed, and the two channels that need more than host memory. Under mpirun in an MPI
 * build it is MPI_COMM_WORLD; under torchrun-style variables it is the first engine's own communicator, once it
 * exists. Shared memory (threads and forked processes) lives in oob.c.
 */
#include "runtime_internal.h"

#include <stdlib.h>
#include <string.h>

#if FCCL_HAVE_MPI
#include <mpi.h>
#endif

int benchReduce(benchAgent_t* agent, double* values, int n, int how) {
  if (benchOobReduce(agent->oob, values, n, how) != 0) {
    benchFail(agent, "exchange with the other ranks failed: %s", agent->oob->error);
    return -1;
  }
  return 0;
}

int benchBarrier(benchAgent_t* agent) {
  if (benchOobBarrier(agent->oob) != 0) {
    benchFail(agent, "exchange with the other ranks failed: %s", agent->oob->error);
    return -1;
  }
  return 0;
}

int benchGatherDoubles(benchAgent_t* agent, const double* mine, int n, double* all) {
  if (benchOobGatherDoubles(agent->oob, mine, n, all) != 0) {
    benchFail(agent, "exchange with the other ranks failed: %s", agent->oob->error);
    return -1;
  }
  return 0;
}

int benchStopAgreed(benchAgent_t* agent) {
  /* Any agent asked (a signal to its process, or the launcher's flag): every agent stops after the same row. */
  double stop = benchStopRequested(agent->stopRegion) ? 1.0 : 0.0;
  if (benchReduce(agent, &stop, 1, BENCH_REDUCE_MAX) != 0) return -1;
  return stop > 0 ? 1 : 0;
}

int benchBcast(benchAgent_t* agent, void* data, size_t bytes) {
  if (benchOobBcast(agent->oob, data, bytes) != 0) {
    benchFail(agent, "exchange with the other ranks failed: %s", agent->oob->error);
    return -1;
  }
  return 0;
}

#if FCCL_HAVE_MPI
static int mpiAllgather(benchOob_t* oob, const void* mine, size_t bytes, void* all) {
  char dummy = 0;
  int status = MPI_Allgather(bytes ? mine : &dummy, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  if (status != MPI_SUCCESS) {
    snprintf(oob->error, sizeof(oob->error), "MPI_Allgather failed (%d)", status);
    return -1;
  }
  return 0;
}

static void mpiAbort(benchOob_t* oob) {
  (void)oob;
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void benchOobMpiInit(benchOob_t* oob, int nAgents, int agent) {
  oob->nAgents = nAgents;
  oob->agent = agent;
  oob->allgather = mpiAllgather;
  oob->abort = mpiAbort;
}
#endif

/* An all-gather on the communicator is an all-reduce (uint8 sum) of a zeroed buffer in which each rank filled its
 * own slot. */
static int commAllgather(benchOob_t* oob, const void* mine, size_t bytes, void* all) {
  benchCommExchange_t* state = (benchCommExchange_t*)oob->state;
  benchAgent_t* agent = state->agent;
  const benchEngineOps_t* ops = agent->engines[0].ops;
  size_t total = (size_t)oob->nAgents * BENCH_OOB_SLOT;
  memset(state->host, 0, total);
  if (bytes) memcpy(state->host + (size_t)oob->agent * BENCH_OOB_SLOT, mine, bytes);
  cudaStream_t stream = agent->streams[0];
  cudaError_t copied = cudaMemcpyAsync(state->device, state->host, total, cudaMemcpyHostToDevice, stream);
  if (copied == cudaSuccess && ops->calls[BENCH_CALL_ALL_REDUCE](agent, 0, 0, state->device, state->device, total,
                                                                 benchUint8, benchSum, 0) != 0) {
    snprintf(oob->error, sizeof(oob->error), "exchange through the communicator failed");
    return -1;
  }
  if (copied == cudaSuccess)
    copied = cudaMemcpyAsync(state->host, state->device, total, cudaMemcpyDeviceToHost, stream);
  if (copied != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(oob->error, sizeof(oob->error), "exchange through the communicator failed: %s",
             cudaGetErrorString(copied));
    return -1;
  }
  if (benchSync(agent, 0) != 0) {
    snprintf(oob->error, sizeof(oob->error), "exchange through the communicator did not complete");
    return -1;
  }
  for (int a = 0; a < oob->nAgents; a++)
    if (bytes) memcpy((unsigned char*)all + (size_t)a * bytes, state->host + (size_t)a * BENCH_OOB_SLOT, bytes);
  return 0;
}

int benchCommExchangeStart(benchAgent_t* agent, benchCommExchange_t* exchange) {
  memset(exchange, 0, sizeof(*exchange));
  exchange->agent = agent;
  exchange->oob.nAgents = agent->nAgents;
  exchange->oob.agent = agent->agent;
  exchange->oob.allgather = commAllgather;
  exchange->oob.state = exchange;
  exchange->oob.timeoutSec = agent->args.timeoutSec;
  agent->oob = &exchange->oob;
  size_t total = (size_t)agent->nAgents * BENCH_OOB_SLOT;
  exchange->host = (unsigned char*)malloc(total);
  if (!exchange->host || cudaMalloc((void**)&exchange->device, total) != cudaSuccess) {
    benchFail(agent, "cannot allocate the exchange buffer");
    return -1;
  }
  return 0;
}

void benchCommExchangeStop(benchCommExchange_t* exchange) {
  if (exchange->device) cudaFree(exchange->device);
  free(exchange->host);
  exchange->device = NULL;
  exchange->host = NULL;
}
