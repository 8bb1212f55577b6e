/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine of the product: fccl, through its public API only (include/fccl.h).
 *
 * Attach: the ranks first all-gather one small record over the NCCL communicator (what each rank would let fccl
 * carry, its host, why it would not), and only where every rank is on one host, at most 8 ranks, and each wants
 * something, does every rank make fccl's communicator from the NCCL one (fcclCommInitFromNccl, which all-gathers
 * over it in turn). The record spares fccl's init where its path could only be NCCL's (several hosts: fccl would make
 * NCCL communicators of its own there), and makes every rank decide alike. A communicator fccl puts on another path
 * than its kernels' (no peer access) is released again: NCCL carries it.
 *
 * fccl's ranks may share a GPU here (allowSharedDevice): the NCCL communicator exists, so NCCL has already accepted
 * its layout, and fccl's refusal of a shared GPU guards its own inits against a wrong device choice.
 */
#include "internal.h"

#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fccl.h"

struct fncclEngineComm {
  fcclComm_t fccl;
};

/* fccl's result and type values 0-7 and 0-9 are NCCL's (fccl.h); fcclTimeout, a peer that did not do its part in
 * time, is NCCL's remote error. */
_Static_assert((int)fcclInProgress == (int)ncclInProgress && (int)fcclRemoteError == (int)ncclRemoteError,
               "fccl's result codes 0-7 are NCCL's");
_Static_assert((int)fcclBfloat16 == (int)ncclBfloat16 && (int)fcclFloat64 == (int)ncclFloat64 &&
                   (int)fcclAvg == (int)ncclAvg,
               "fccl's types and ops are NCCL's");

static ncclResult_t fromFccl(fcclResult_t result) {
  if ((int)result >= 0 && (int)result <= (int)fcclInProgress) return (ncclResult_t)result;
  return result == fcclTimeout ? ncclRemoteError : ncclInternalError;
}

const char* fncclEngineName(void) {
  int version = 0;
  static char name[64];
  (void)fcclGetVersion(&version);
  snprintf(name, sizeof(name), "fccl %d.%d.%d", version / 10000, (version / 100) % 100, version % 100);
  return name;
}

void fncclEngineEnter(int cudaDev, struct fncclEngineScope* scope) {
  scope->entered = 0;
  scope->savedDevice = -1;
  if (cudaGetDevice(&scope->savedDevice) != cudaSuccess) scope->savedDevice = -1;
  if (cudaDev >= 0 && cudaDev != scope->savedDevice && cudaSetDevice(cudaDev) != cudaSuccess)
    (void)cudaGetLastError();
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess) {
    scope->savedCaptureMode = (int)mode;
    scope->entered = 1;
  } else {
    (void)cudaGetLastError();
  }
}

void fncclEngineLeave(const struct fncclEngineScope* scope) {
  if (scope->entered) {
    enum cudaStreamCaptureMode mode = (enum cudaStreamCaptureMode)scope->savedCaptureMode;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
  }
  int current = -1;
  if (scope->savedDevice >= 0 && cudaGetDevice(&current) == cudaSuccess && current != scope->savedDevice)
    (void)cudaSetDevice(scope->savedDevice);
  (void)cudaGetLastError();
}

/* ---- the collectives: one row each; a NULL row is NCCL's --------------------------------------------------------- */

typedef fcclResult_t (*launchFn)(fcclComm_t comm, const struct fncclOp* op);

/* The reductions pass engineOp: the built-in op, or the twin of an ncclRedOpCreatePreMulSum op. */
static fcclResult_t launchAllReduce(fcclComm_t comm, const struct fncclOp* op) {
  return fcclAllReduce(op->sendbuff, op->recvbuff, op->count, (fcclDataType_t)op->datatype,
                       (fcclRedOp_t)op->engineOp, comm, op->stream);
}

/* The moves copy bytes: NCCL's 8-bit float types travel as fcclUint8, which fccl's collectives take. */
static fcclDataType_t moveType(ncclDataType_t type) {
  return type >= ncclFloat8e4m3 ? fcclUint8 : (fcclDataType_t)type;
}

static fcclResult_t launchAllGather(fcclComm_t comm, const struct fncclOp* op) {
  return fcclAllGather(op->sendbuff, op->recvbuff, op->count, moveType(op->datatype), comm, op->stream);
}

static fcclResult_t launchReduceScatter(fcclComm_t comm, const struct fncclOp* op) {
  return fcclReduceScatter(op->sendbuff, op->recvbuff, op->count, (fcclDataType_t)op->datatype,
                           (fcclRedOp_t)op->engineOp, comm, op->stream);
}

static fcclResult_t launchBroadcast(fcclComm_t comm, const struct fncclOp* op) {
  return fcclBroadcast(op->sendbuff, op->recvbuff, op->count, moveType(op->datatype), op->root, comm, op->stream);
}

/* recvbuff is read on the root only: fcclReduce takes NULL elsewhere, and what NCCL is handed elsewhere is unused. */
static fcclResult_t launchReduce(fcclComm_t comm, const struct fncclOp* op) {
  return fcclReduce(op->sendbuff, op->recvbuff, op->count, (fcclDataType_t)op->datatype, (fcclRedOp_t)op->engineOp,
                    op->root, comm, op->stream);
}

/* recvbuff of the gather and sendbuff of the scatter are the root's only, as in NCCL. */
static fcclResult_t launchGather(fcclComm_t comm, const struct fncclOp* op) {
  return fcclGather(op->sendbuff, op->recvbuff, op->count, moveType(op->datatype), op->root, comm, op->stream);
}

static fcclResult_t launchScatter(fcclComm_t comm, const struct fncclOp* op) {
  return fcclScatter(op->sendbuff, op->recvbuff, op->count, moveType(op->datatype), op->root, comm, op->stream);
}

static const launchFn launches[FNCCL_NUM_COLLS] = {
    [FNCCL_ALLREDUCE] = launchAllReduce,
    [FNCCL_ALLGATHER] = launchAllGather,
    [FNCCL_REDUCESCATTER] = launchReduceScatter,
    [FNCCL_BROADCAST] = launchBroadcast,
    [FNCCL_REDUCE] = launchReduce,
    [FNCCL_GATHER] = launchGather,
    [FNCCL_SCATTER] = launchScatter,
};

int fncclEngineHas(enum fncclColl coll) { return (int)coll >= 0 && coll < FNCCL_NUM_COLLS && launches[coll]; }

int fncclEngineTakes(enum fncclColl coll, ncclDataType_t datatype, ncclRedOp_t op, int twinned) {
  if (!fncclEngineHas(coll)) return 0;
  if (!(FNCCL_REDUCING_COLLS & (1u << coll))) return (int)datatype >= 0 && (int)datatype < (int)ncclNumTypes;
  /* fccl reduces every type up to bfloat16 with NCCL's five built-in ops, and with the ops ncclRedOpCreatePreMulSum
   * makes where their twin exists; 8-bit floats are NCCL's. */
  if ((int)datatype < 0 || (int)datatype > (int)ncclBfloat16) return 0;
  return ((int)op >= 0 && (int)op < (int)ncclNumOps) || ((int)op >= (int)ncclNumOps && twinned);
}

/* fcclRedOpCreatePreMulSum takes every type its collectives reduce: int8 to bfloat16. */
int fncclEngineTakesPreMulSum(ncclDataType_t datatype) {
  return (int)datatype >= 0 && (int)datatype <= (int)ncclBfloat16;
}

_Static_assert((int)fcclScalarDevice == (int)ncclScalarDevice &&
                   (int)fcclScalarHostImmediate == (int)ncclScalarHostImmediate,
               "fccl's scalar residences are NCCL's");

ncclResult_t fncclEngineRedOpCreatePreMulSum(struct fncclEngineComm* ec, void* scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, int* engineOp) {
  fcclRedOp_t made = fcclSum;
  fcclResult_t result = fcclRedOpCreatePreMulSum(&made, scalar, (fcclDataType_t)datatype,
                                                 (fcclScalarResidence_t)residence, ec->fccl);
  if (result != fcclSuccess) return fromFccl(result);
  *engineOp = (int)made;
  return ncclSuccess;
}

ncclResult_t fncclEngineRedOpDestroy(struct fncclEngineComm* ec, int engineOp) {
  return fromFccl(fcclRedOpDestroy((fcclRedOp_t)engineOp, ec->fccl));
}

ncclResult_t fncclEngineLaunch(struct fncclEngineComm* ec, const struct fncclOp* op) {
  return fromFccl(launches[op->coll](ec->fccl, op));
}

ncclResult_t fncclEngineAsyncError(struct fncclEngineComm* ec) {
  fcclResult_t state = fcclSuccess;
  if (fcclCommGetAsyncError(ec->fccl, &state) != fcclSuccess) return ncclInternalError;
  return fromFccl(state);
}

const char* fncclEngineCommError(struct fncclEngineComm* ec) {
  static __thread char text[1024];
  snprintf(text, sizeof(text), "%s", fcclGetLastError(ec->fccl));
  return text;
}

const char* fncclEngineThreadError(void) {
  static __thread char text[1024];
  snprintf(text, sizeof(text), "%s", fcclGetLastError(NULL));
  return text;
}

void fncclEngineRelease(struct fncclEngineComm* ec, int abort) {
  if (!ec) return;
  fcclResult_t result = abort ? fcclCommAbort(ec->fccl) : fcclCommDestroy(ec->fccl);
  if (result != fcclSuccess)
    FNCCL_WARN("fccl's %s of communicator %p: %s (its resources are freed all the same)",
               abort ? "abort" : "teardown", (void*)ec->fccl, fcclGetLastError(NULL));
  free(ec);
}

ncclResult_t fncclEngineRegister(struct fncclEngineComm* ec, void* buff, size_t size, void** handle) {
  fcclRegHandle_t registration = NULL;
  fcclResult_t result = fcclCommRegister(ec->fccl, buff, size, &registration);
  if (result != fcclSuccess) return fromFccl(result);
  *handle = registration;
  return ncclSuccess;
}

ncclResult_t fncclEngineDeregister(struct fncclEngineComm* ec, void* handle) {
  return fromFccl(fcclCommDeregister(ec->fccl, (fcclRegHandle_t)handle));
}

/* ---- the attach -------------------------------------------------------------------------------------------------- */

#define RECORD_MAGIC 0x6e63636cu /* "nccl" */
/* 2: gather and scatter in wanted, and pre-multiplied sums carried where their twins exist. Ranks of another
 * protocol would route some calls elsewhere than this one: they leave the communicator to NCCL. */
#define RECORD_PROTOCOL 2u
#define FCCL_KERNEL_MAX_RANKS 8 /* fccl.h: fccl's kernels carry 1 to 8 ranks of one host */

/* What every rank tells the others before fccl is made; a fixed layout, sent as bytes. */
struct attachRecord {
  uint32_t magic;
  uint32_t protocol;
  uint32_t wanted;
  int32_t nranks;
  uint64_t hostHash;
  char why[112]; /* this rank's reason when wanted is 0 */
};
_Static_assert(sizeof(struct attachRecord) == 136, "attachRecord travels as bytes: no padding");

static uint64_t hashText(uint64_t hash, const char* text) {
  for (const unsigned char* c = (const unsigned char*)text; *c; c++) hash = (hash ^ *c) * 0x100000001b3ull;
  return hash;
}

/* The host as fccl tells hosts apart (FCCL_HOSTID, else the host name and the boot id), so that where this says
 * "one host" fccl's own path decision says so too. */
static uint64_t hostIdentity(void) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const char* override = getenv("FCCL_HOSTID");
  if (override && override[0]) return hashText(hashText(hash, "FCCL_HOSTID="), override);
  char name[256] = "unknown";
  if (gethostname(name, sizeof(name) - 1) != 0) snprintf(name, sizeof(name), "unknown");
  name[sizeof(name) - 1] = '\0';
  char bootId[64] = "";
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t got = read(fd, bootId, sizeof(bootId) - 1);
    close(fd);
    if (got > 0) bootId[got] = '\0';
  }
  return hashText(hashText(hashText(hash, name), "/"), bootId);
}

static int64_t nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void backoff(long* sleepNs) {
  struct timespec t = {.tv_sec = 0, .tv_nsec = *sleepNs};
  nanosleep(&t, NULL);
  if (*sleepNs < 1000000) *sleepNs *= 2;
}

/* All-gathers the records over the NCCL communicator; 1 when all arrived, else 0 with why. Bounded by the timeout
 * and the abort flag; a non-blocking communicator's ncclInProgress is waited for. */
static int exchangeRecords(const struct fncclAttachRequest* r, struct attachRecord* all, char* why, size_t whySize) {
  const size_t each = sizeof(struct attachRecord), total = each * (size_t)r->nranks;
  char* device = NULL;
  cudaStream_t stream = NULL;
  int ok = 0, keepDevice = 0;
  cudaError_t err = cudaMalloc((void**)&device, total);
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(device + (size_t)r->rank * each, &all[r->rank], each, cudaMemcpyHostToDevice, stream);
  if (err != cudaSuccess) {
    snprintf(why, whySize, "the attach exchange could not start: %s", cudaGetErrorString(err));
    goto out;
  }
  ncclResult_t issued;
  FNCCL_REAL(issued, AllGather, (device + (size_t)r->rank * each, device, each, ncclUint8, r->comm, stream));
  if (issued != ncclSuccess && issued != ncclInProgress) {
    snprintf(why, whySize, "the attach exchange (ncclAllGather) failed: %s", fncclReal.GetErrorString(issued));
    goto out;
  }
  const int64_t deadline = nowMs() + r->timeoutMs;
  long sleepNs = 1000;
  for (;;) {
    ncclResult_t state = ncclSuccess, queried;
    FNCCL_REAL(queried, CommGetAsyncError, (r->comm, &state));
    if (queried != ncclSuccess) state = queried;
    if (state != ncclSuccess && state != ncclInProgress) {
      snprintf(why, whySize, "the NCCL communicator failed during the attach exchange: %s",
               fncclReal.GetErrorString(state));
      keepDevice = 1;
      goto out;
    }
    if (state == ncclSuccess) { /* an NCCL call still in progress is not on the stream yet */
      err = cudaStreamQuery(stream);
      if (err == cudaSuccess) break;
      if (err != cudaErrorNotReady) {
        snprintf(why, whySize, "the attach exchange failed: %s", cudaGetErrorString(err));
        keepDevice = 1;
        goto out;
      }
    }
    if (__atomic_load_n(r->abortFlag, __ATOMIC_ACQUIRE)) {
      snprintf(why, whySize, "aborted during the attach");
      keepDevice = 1;
      goto out;
    }
    if (nowMs() >= deadline) {
      snprintf(why, whySize, "the attach exchange did not finish within %d ms (FCCL_BOOTSTRAP_TIMEOUT): a rank "
               "did not take part", r->timeoutMs);
      keepDevice = 1;
      goto out;
    }
    backoff(&sleepNs);
  }
  err = cudaMemcpyAsync(all, device, total, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) {
    snprintf(why, whySize, "the attach exchange could not be read back: %s", cudaGetErrorString(err));
    goto out;
  }
  ok = 1;
out:
  (void)cudaGetLastError();
  if (stream) (void)cudaStreamDestroy(stream); /* returns at once; queued work still completes */
  /* An all-gather that may still run would write freed memory: kept (a few bytes per failed attach). */
  if (device && !keepDevice) (void)cudaFree(device);
  return ok;
}

/* The agreement every rank reaches alike from the records: the collectives fccl carries (0: none, why says why). */
static uint32_t agree(const struct fncclAttachRequest* r, const struct attachRecord* all, char* why, size_t whySize) {
  uint32_t carried = FNCCL_ALL_COLLS;
  for (int i = 0; i < r->nranks; i++) {
    const struct attachRecord* rec = &all[i];
    if (rec->magic != RECORD_MAGIC || rec->protocol != RECORD_PROTOCOL || rec->nranks != r->nranks) {
      snprintf(why, whySize, "rank %d runs another version of libfccl-nccl (or none)", i);
      return 0;
    }
    if (rec->wanted == 0) {
      snprintf(why, whySize, "rank %d: %.*s", i, (int)sizeof(rec->why), rec->why);
      return 0;
    }
    carried &= rec->wanted;
  }
  for (int i = 1; i < r->nranks; i++) {
    if (all[i].hostHash != all[0].hostHash) {
      snprintf(why, whySize, "the %d ranks are on more than one host (fccl's kernels carry one host)", r->nranks);
      return 0;
    }
  }
  if (r->nranks > FCCL_KERNEL_MAX_RANKS) {
    snprintf(why, whySize, "%d ranks, more than fccl's kernels carry (%d)", r->nranks, FCCL_KERNEL_MAX_RANKS);
    return 0;
  }
  if (carried == 0) snprintf(why, whySize, "the ranks leave different collectives to NCCL, and none is left to fccl");
  return carried;
}

/* What keeps fccl away on this rank, whatever the communicator: settings that turn its kernels off. */
static const char* fcclSettingsWhyNot(void) {
  const char* path = getenv("FCCL_PATH");
  if (path && strcmp(path, "nccl") == 0) return "FCCL_PATH=nccl";
  const char* p2p = getenv("FCCL_P2P_DISABLE");
  if (p2p && atoi(p2p) != 0) return "FCCL_P2P_DISABLE=1";
  return NULL;
}

/* fccl's communicator from the NCCL one; 1 with *out when it is on fccl's kernels' path. */
static int makeFccl(const struct fncclAttachRequest* r, fcclComm_t* out, char* why, size_t whySize) {
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  /* A non-blocking communicator's attach runs on a thread of its own and must end promptly on an abort: fccl's
   * non-blocking init, polled here, can be aborted; a blocking one runs here, in the relaxed capture mode. */
  config.blocking = r->blocking ? 1 : 0;
  config.timeoutMs = r->timeoutMs;
  config.commName = r->name && r->name[0] ? r->name : NULL;
  config.allowSharedDevice = 1;
  /* NCCL's SM budget becomes fccl's (fcclConfig_t's fields of the same names); FCCL_MIN_CTAS and FCCL_MAX_CTAS
   * override it there, as NCCL's variables override NCCL's config. */
  config.minCTAs = r->minCTAs > 0 ? r->minCTAs : FCCL_CONFIG_UNDEF_INT;
  config.maxCTAs = r->maxCTAs > 0 ? r->maxCTAs : FCCL_CONFIG_UNDEF_INT;
  fcclComm_t comm = NULL;
  fcclResult_t result = fcclCommInitFromNccl(&comm, r->comm, &config);
  long sleepNs = 1000;
  while (result == fcclInProgress) {
    if (__atomic_load_n(r->abortFlag, __ATOMIC_ACQUIRE)) {
      (void)fcclCommAbort(comm);
      snprintf(why, whySize, "aborted during fccl's init");
      return 0;
    }
    fcclResult_t state = fcclSuccess;
    if (fcclCommGetAsyncError(comm, &state) != fcclSuccess) state = fcclInternalError;
    if (state != fcclInProgress) {
      result = state;
      if (result != fcclSuccess) {
        snprintf(why, whySize, "fccl's init failed: %s", fcclGetLastError(comm));
        (void)fcclCommDestroy(comm); /* frees what is local: a failed init talks to no peer */
        return 0;
      }
      break;
    }
    backoff(&sleepNs);
  }
  if (result != fcclSuccess) {
    snprintf(why, whySize, "fccl's init failed: %s", fcclGetLastError(NULL));
    return 0;
  }
  fcclPath_t path = fcclPathNccl;
  const char* reason = "";
  if (fcclCommGetPath(comm, &path, &reason) != fcclSuccess || path != fcclPathFccl) {
    /* Every rank sees the same path: every rank releases its fccl communicator alike. */
    snprintf(why, whySize, "fccl's kernels cannot carry it: %s", reason ? reason : "");
    (void)fcclCommDestroy(comm);
    return 0;
  }
  *out = comm;
  snprintf(why, whySize, "%s", reason ? reason : "");
  return 1;
}

int fncclEngineAttach(const struct fncclAttachRequest* r, struct fncclEngineComm** out, uint32_t* carried, char* why,
                      size_t whySize) {
  *out = NULL;
  *carried = 0;
  struct attachRecord* all = calloc((size_t)r->nranks, sizeof(*all));
  struct fncclEngineComm* ec = calloc(1, sizeof(*ec));
  if (!all || !ec) {
    /* Without the records this rank cannot take part in the exchange: its peers' waits end at the timeout. */
    free(all);
    free(ec);
    snprintf(why, whySize, "out of host memory for the attach");
    return 0;
  }
  struct attachRecord* mine = &all[r->rank];
  mine->magic = RECORD_MAGIC;
  mine->protocol = RECORD_PROTOCOL;
  mine->nranks = r->nranks;
  mine->hostHash = hostIdentity();
  mine->wanted = r->wanted;
  const char* settingsWhy = fcclSettingsWhyNot();
  if (settingsWhy) mine->wanted = 0;
  snprintf(mine->why, sizeof(mine->why), "%s", settingsWhy ? settingsWhy : r->localWhy ? r->localWhy : "");
  int attached = 0;
  if (exchangeRecords(r, all, why, whySize)) {
    const uint32_t agreed = agree(r, all, why, whySize);
    if (agreed && makeFccl(r, &ec->fccl, why, whySize)) {
      *out = ec;
      *carried = agreed;
      attached = 1;
    }
  }
  if (!attached) free(ec);
  free(all);
  return attached;
}
