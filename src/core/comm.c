/* Communicator handles: validation shared by every public entry point. */
#include "comm.h"

#include "check.h"

int fcclCommIsValid(const struct fcclComm* comm) { return comm != NULL && comm->magic == FCCL_COMM_MAGIC; }

fcclResult_t fcclCommEnsureReady(struct fcclComm* comm, const char* caller) {
  if (!fcclCommIsValid(comm))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: invalid communicator handle %p", caller,
                      (void*)comm);
  fcclResult_t state = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  if (state == fcclInProgress)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "%s: the communicator's non-blocking init has not finished (poll fcclCommGetAsyncError)",
                      caller);
  if (state != fcclSuccess)
    return FCCL_ERROR(state, FCCL_SUBSYS_INIT, "%s: the communicator failed earlier (%s); destroy or abort it",
                      caller, fcclGetErrorString(state));
  return fcclSuccess;
}
