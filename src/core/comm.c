/* Communicator handles: validation shared by every public entry point. */
#include "comm.h"

int fcclCommIsValid(const struct fcclComm* comm) { return comm != NULL && comm->magic == FCCL_COMM_MAGIC; }
