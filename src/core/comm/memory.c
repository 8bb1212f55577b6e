/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public memory calls: buffer registration (fcclCommRegister / fcclCommDeregister), fcclMemAlloc / fcclMemFree
 * and fcclCommGetMemStats. Arguments and the communicator's state are checked here; the transport does the work
 * (src/transport/register.c, ipc.c) and its statistics.
 */
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "hier.h"
#include "nccl_path.h"
#include "transport.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC

/* A valid handle whose init finished and did not fail, with peer memory. */
static fcclResult_t commWithTransport(fcclComm_t comm, const char* call) {
  FCCLCHECK(fcclCommEnsureReady(comm, call));
  if (!comm->transport)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC, "%s: communicator %s has no peer memory (was its init "
                      "completed?)", call, comm->name);
  return fcclSuccess;
}

/* The NCCL path registers with NCCL (ncclCommRegister): local, checked here since no exchange follows. */
static fcclResult_t ncclRegister(fcclComm_t comm, void* buf, size_t size, fcclRegHandle_t* handle) {
  FCCL_REQUIRE(handle != NULL, "fcclCommRegister: handle is NULL");
  FCCL_REQUIRE(buf != NULL, "fcclCommRegister: buf is NULL");
  FCCL_REQUIRE(size > 0, "fcclCommRegister: size is 0");
  FCCL_REQUIRE((uintptr_t)buf + size > (uintptr_t)buf, "fcclCommRegister: %zu bytes at %p pass the end of the "
               "address space", size, buf);
  return fcclNcclRegister(comm, buf, size, handle);
}

/* The peer memory of the communicator's fccl kernels: its own, or on the hierarchical path its host
 * communicator's (where the reduce-scatter and all-gather of the all-reduce run). NULL on the NCCL path. */
static struct fcclTransport* peerMemory(fcclComm_t comm) {
  if (comm->path == fcclPathHier) return fcclHierTransport(comm);
  return __atomic_load_n(&comm->transport, __ATOMIC_ACQUIRE);
}

FCCL_API fcclResult_t fcclCommRegister(fcclComm_t comm, void* buf, size_t size, fcclRegHandle_t* handle) {
  fcclClearError();
  FCCLCHECK(fcclCommEnsureReady(comm, "fcclCommRegister"));
  if (comm->path == fcclPathNccl) {
    fcclResult_t res = ncclRegister(comm, buf, size, handle);
    if (res != fcclSuccess) fcclCommRecordThreadError(comm);
    return res;
  }
  if (comm->path == fcclPathFccl) FCCLCHECK(commWithTransport(comm, "fcclCommRegister"));
  struct fcclTransport* transport = peerMemory(comm);
  if (!transport)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC, "fcclCommRegister: communicator %s has no host "
                      "communicator (was its init completed?)", comm->name);
  /* Bad buffers and a NULL handle are checked inside, so that every rank learns of them in the exchange (on the
   * hierarchical path, every rank of the host). */
  fcclResult_t res = fcclTransportRegister(transport, buf, size, handle);
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}

FCCL_API fcclResult_t fcclCommDeregister(fcclComm_t comm, fcclRegHandle_t handle) {
  fcclClearError();
  FCCLCHECK(fcclCommEnsureReady(comm, "fcclCommDeregister"));
  if (comm->path == fcclPathNccl) {
    fcclResult_t res = fcclNcclDeregister(comm, handle);
    if (res != fcclSuccess) fcclCommRecordThreadError(comm);
    return res;
  }
  if (comm->path == fcclPathFccl) FCCLCHECK(commWithTransport(comm, "fcclCommDeregister"));
  struct fcclTransport* transport = peerMemory(comm);
  if (!transport)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC, "fcclCommDeregister: communicator %s has no host "
                      "communicator (was its init completed?)", comm->name);
  fcclResult_t res = fcclTransportDeregister(transport, handle);
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}

FCCL_API fcclResult_t fcclMemAlloc(void** ptr, size_t size) {
  fcclClearError();
  FCCL_REQUIRE(ptr != NULL, "fcclMemAlloc: ptr is NULL");
  FCCL_REQUIRE(size > 0, "fcclMemAlloc: size is 0");
  return fcclTransportMemAlloc(ptr, size);
}

FCCL_API fcclResult_t fcclMemFree(void* ptr) {
  fcclClearError();
  return fcclTransportMemFree(ptr);
}

FCCL_API fcclResult_t fcclCommGetMemStats(fcclComm_t comm, fcclMemStats_t* stats) {
  fcclClearError();
  FCCL_REQUIRE(stats != NULL, "fcclCommGetMemStats: stats is NULL");
  FCCL_REQUIRE(stats->size >= offsetof(fcclMemStats_t, openMappings) + sizeof(uint64_t),
               "fcclCommGetMemStats: stats->size is %zu; set it to sizeof(fcclMemStats_t)", stats->size);
  FCCL_REQUIRE(comm == NULL || fcclCommIsValid(comm), "fcclCommGetMemStats: invalid communicator handle %p",
               (void*)comm);
  /* Set by a non-blocking init's thread: read once, with acquire. */
  struct fcclTransport* transport = comm ? peerMemory(comm) : NULL;
  struct fcclTransportStats ts;
  fcclTransportGetStats(transport, &ts);
  fcclMemStats_t out;
  memset(&out, 0, sizeof(out));
  out.openMappings = ts.openMappings;
  out.mappingReferences = ts.mappingReferences;
  out.bytesMapped = ts.bytesMapped;
  out.totalOpens = ts.totalOpens;
  out.totalCloses = ts.totalCloses;
  out.commRegistrations = ts.registrations + (comm ? fcclNcclRegistrations(comm) : 0);
  out.commDeviceBytes = ts.deviceBytes;
  out.commGraphRegistrations = ts.graphRegistrations;
  out.arenaBytes = ts.arenaBytes;
  out.arenaChunks = ts.arenaChunks;
  out.commPeerBytes = ts.peerBytes;
  /* Fields beyond the caller's size are not written: an older caller's smaller struct stays valid. */
  size_t bytes = stats->size < sizeof(out) ? stats->size : sizeof(out);
  out.size = stats->size;
  memcpy(stats, &out, bytes);
  return fcclSuccess;
}
