/* SPDX-License-Identifier: Apache-2.0 */
/* The bootstrap's one entry for other layers: argument checks, then the method's ops table. */
#include "bootstrap.h"

#include "check.h"
#include "param.h"

#include <limits.h>
#include <unistd.h>

/* A bootstrap belongs to the process that made it: a child of fork() shares its peers with nobody. */
static fcclResult_t checkProcess(const struct fcclBootstrap* bootstrap, const char* op) {
  int self = (int)getpid();
  if (bootstrap->pid == self) return fcclSuccess;
  return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT,
                    "bootstrap %s in process %d, a child of fork() of process %d, which made the communicator: it "
                    "belongs to that process and its ranks; the child must create a communicator of its own",
                    op, self, bootstrap->pid);
}

fcclResult_t fcclBootstrapAllGather(struct fcclBootstrap* bootstrap, void* allData, size_t bytesPerRank) {
  if (bootstrap == NULL || bootstrap->ops == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "bootstrap all-gather on a NULL bootstrap");
  FCCLCHECK(checkProcess(bootstrap, "all-gather"));
  if (allData == NULL && bytesPerRank > 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "bootstrap all-gather of %zu bytes into NULL",
                      bytesPerRank);
  if (bootstrap->nranks > 0 && bytesPerRank > SIZE_MAX / (size_t)bootstrap->nranks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "bootstrap all-gather of %zu bytes per rank overflows",
                      bytesPerRank);
  if (bootstrap->nranks == 1) return fcclSuccess;
  return bootstrap->ops->allGather(bootstrap, allData, bytesPerRank);
}

fcclResult_t fcclBootstrapBarrier(struct fcclBootstrap* bootstrap) {
  if (bootstrap == NULL || bootstrap->ops == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "bootstrap barrier on a NULL bootstrap");
  FCCLCHECK(checkProcess(bootstrap, "barrier"));
  if (bootstrap->nranks == 1) return fcclSuccess;
  return bootstrap->ops->barrier(bootstrap);
}

int fcclBootstrapInCallback(const struct fcclBootstrap* bootstrap) {
  return bootstrap != NULL && __atomic_load_n(&bootstrap->inCallback, __ATOMIC_ACQUIRE) != 0;
}

void fcclBootstrapDestroy(struct fcclBootstrap* bootstrap) {
  if (bootstrap == NULL) return;
  if (bootstrap->ops) bootstrap->ops->destroy(bootstrap); /* frees bootstrap itself */
}

int fcclBootstrapTimeoutMs(int configMs) {
  if (configMs > 0) return configMs;
  int64_t value = fcclParamInt(FCCL_PARAM_BOOTSTRAP_TIMEOUT);
  if (value <= 0 || value > INT_MAX) {
    FCCL_WARN(FCCL_SUBSYS_BOOT, "FCCL_BOOTSTRAP_TIMEOUT=%lld is not a positive number of milliseconds; using 60000",
              (long long)value);
    return 60000;
  }
  return (int)value;
}
