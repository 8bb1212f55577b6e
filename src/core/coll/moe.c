/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Mixture-of-experts dispatch and combine (docs/moe.md): the layouts and the public calls. A layout is created
 * collectively: every rank checks the configuration, the ranks all-gather it (so that every rank fails alike when
 * one differs), each allocates its workspace (fcclMemAlloc, zeroed before any peer can reach it) and its scratch,
 * and registers the workspace with every rank through the transport, which maps the peers' workspaces here. The
 * calls check their arguments (moe_args.c), then the communicator's state, device, stream and buffers, and launch
 * one kernel (src/device/moe_*.cu) with everything by value: nothing per call comes from the host, so calls can be
 * captured in CUDA graphs and replayed with new routing.
 */
#include "moe.h"

#include "algo.h"
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "datatype.h"
#include "debug.h"
#include "device_state.h"
#include "enqueue.h"
#include "fingerprint.h"
#include "moe_device.h"
#include "path.h"
#include "transport.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

#define FCCL_MOE_LAYOUT_MAGIC 0x66636c6d6f656c79ull /* "fclmoely" */

/* The process's live layouts: a handle is valid while it is listed. */
static pthread_mutex_t layoutsLock = PTHREAD_MUTEX_INITIALIZER;
static struct fcclMoeLayout* layouts;

static void listLayout(struct fcclMoeLayout* layout) {
  pthread_mutex_lock(&layoutsLock);
  layout->next = layouts;
  layouts = layout;
  pthread_mutex_unlock(&layoutsLock);
}

/* Takes layout off the list; 0 when it was not on it. */
static int unlistLayout(struct fcclMoeLayout* layout) {
  pthread_mutex_lock(&layoutsLock);
  struct fcclMoeLayout** link = &layouts;
  while (*link && *link != layout) link = &(*link)->next;
  const int found = *link != NULL;
  if (found) *link = layout->next;
  pthread_mutex_unlock(&layoutsLock);
  return found;
}

/* A live layout, found by address only (a stale handle is never dereferenced). */
static fcclResult_t checkLayout(fcclMoeLayout_t layout, const char* caller) {
  pthread_mutex_lock(&layoutsLock);
  struct fcclMoeLayout* l = layouts;
  while (l && l != layout) l = l->next;
  pthread_mutex_unlock(&layoutsLock);
  if (l == NULL || l->magic != FCCL_MOE_LAYOUT_MAGIC)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %p is not a live MoE layout", caller, (void*)layout);
  return fcclSuccess;
}

static struct fcclMoeLayout* newLayout(struct fcclComm* comm, const fcclMoeConfig_t* config, const fcclMoeShape* shape,
                                       int maxBlocks) {
  struct fcclMoeLayout* layout = calloc(1, sizeof(*layout));
  if (!layout) return NULL;
  layout->magic = FCCL_MOE_LAYOUT_MAGIC;
  layout->comm = comm;
  layout->config = *config;
  layout->config.size = sizeof(layout->config);
  layout->shape = *shape;
  layout->hash = fcclMoeConfigHash(config);
  layout->maxBlocks = maxBlocks < 1 ? 1 : maxBlocks;
  const int wanted = config->blocks > 0 ? config->blocks : FCCL_MOE_DEFAULT_BLOCKS;
  layout->defaultBlocks = wanted < layout->maxBlocks ? wanted : layout->maxBlocks;
  layout->dispatchTokens = -1;
  return layout;
}

/* What every rank tells the others when a layout is created. */
struct layoutHello {
  int32_t status; /* fcclResult_t of this rank's checks: a failed rank still takes part in the exchange */
  int32_t numExperts;
  int32_t topk;
  int32_t recvLayout;
  int32_t expertAlignment;
  int32_t reserved;
  uint64_t hidden;
  uint64_t maxTokensPerRank;
};

/* Every rank's status and configuration: the same result on every rank. */
static fcclResult_t agreeOnConfig(struct fcclComm* comm, fcclResult_t local, const fcclMoeConfig_t* config) {
  struct layoutHello* hellos = calloc((size_t)comm->nranks, sizeof(*hellos));
  if (!hellos) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "out of host memory");
  struct layoutHello* mine = &hellos[comm->rank];
  mine->status = (int32_t)local;
  if (local == fcclSuccess) {
    mine->numExperts = config->numExperts;
    mine->topk = config->topk;
    mine->recvLayout = (int32_t)config->recvLayout;
    mine->expertAlignment = config->recvLayout == fcclMoePadded ? 1 : config->expertAlignment;
    mine->hidden = config->hidden;
    mine->maxTokensPerRank = config->maxTokensPerRank;
  }
  fcclResult_t res = fcclBootstrapAllGather(comm->bootstrap, hellos, sizeof(*hellos));
  if (res == fcclSuccess) res = local;
  for (int r = 0; res == fcclSuccess && r < comm->nranks; r++) {
    const struct layoutHello* h = &hellos[r];
    if (h->status != fcclSuccess)
      res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_COLL,
                       "fcclMoeLayoutCreate: rank %d could not make the layout "
                       "(%s; its log has the cause)",
                       r, fcclGetErrorString((fcclResult_t)h->status));
    else if (h->numExperts != mine->numExperts || h->topk != mine->topk || h->recvLayout != mine->recvLayout ||
             h->expertAlignment != mine->expertAlignment || h->hidden != mine->hidden ||
             h->maxTokensPerRank != mine->maxTokensPerRank)
      res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                       "fcclMoeLayoutCreate: rank %d's configuration (%d experts, top-%d, hidden %llu, %llu tokens, "
                       "layout %d, alignment %d) differs from rank %d's (%d, %d, %llu, %llu, %d, %d): every rank "
                       "must pass the same",
                       r, h->numExperts, h->topk, (unsigned long long)h->hidden,
                       (unsigned long long)h->maxTokensPerRank, h->recvLayout, h->expertAlignment, comm->rank,
                       mine->numExperts, mine->topk, (unsigned long long)mine->hidden,
                       (unsigned long long)mine->maxTokensPerRank, mine->recvLayout, mine->expertAlignment);
  }
  free(hellos);
  return res;
}

/* This rank's memory: the workspace (zeroed, and synchronised, before the registration lets any peer reach it) and
 * the scratch (zeroed, no dispatch yet, no invalid entry). */
static fcclResult_t allocateLocal(struct fcclMoeLayout* layout) {
  const fcclMoeShape* s = &layout->shape;
  fcclResult_t res = fcclSuccess;
  cudaStream_t stream = NULL;
  FCCLCHECK(fcclTransportMemAlloc(&layout->workspace, s->workspaceBytes));
  CUDACHECK(cudaMalloc(&layout->scratch, s->scratchBytes));
  fcclMoeScratchHeader header;
  memset(&header, 0, sizeof(header));
  header.badEntry = FCCL_MOE_NO_BAD_ENTRY;
  CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDACHECKGOTO(cudaMemsetAsync(layout->workspace, 0, s->workspaceBytes, stream), res, out);
  CUDACHECKGOTO(cudaMemsetAsync(layout->scratch, 0, s->scratchBytes, stream), res, out);
  CUDACHECKGOTO(cudaMemcpyAsync(layout->scratch, &header, sizeof(header), cudaMemcpyHostToDevice, stream), res, out);
  CUDACHECKGOTO(cudaStreamSynchronize(stream), res, out);
out:
  CUDACHECKIGNORE(cudaStreamDestroy(stream));
  return res;
}

static fcclResult_t freeLocal(struct fcclMoeLayout* layout) {
  fcclResult_t res = fcclSuccess;
  if (layout->workspace) {
    fcclResult_t freed = fcclTransportMemFree(layout->workspace);
    if (res == fcclSuccess) res = freed;
  }
  if (layout->scratch) CUDACHECKKEEP(cudaFree(layout->scratch), res);
  layout->workspace = layout->scratch = NULL;
  return res;
}

/* After the checks and the agreement, the comm's device current: memory, registration, the peers' workspaces. */
static fcclResult_t createOnDevice(struct fcclComm* comm, struct fcclMoeLayout* layout) {
  /* A local failure goes into the registration's exchange (a NULL buffer), so that every rank fails alike. */
  fcclResult_t local = allocateLocal(layout);
  void* buffer = local == fcclSuccess ? layout->workspace : NULL;
  fcclResult_t res = fcclTransportRegister(comm->transport, buffer, layout->shape.workspaceBytes,
                                           &layout->registration);
  if (res == fcclSuccess) res = local;
  if (res != fcclSuccess) return res;
  void* peers[FCCL_DEVICE_MAX_RANKS] = {NULL};
  if (!fcclTransportLookup(comm->transport, layout->workspace, layout->shape.workspaceBytes, peers))
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_COLL,
                      "fcclMoeLayoutCreate: the registered workspace is not "
                      "found");
  for (int r = 0; r < comm->nranks; r++) layout->peerWorkspace[r] = (uint64_t)(uintptr_t)peers[r];
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclMoeLayoutCreate(fcclComm_t comm, const fcclMoeConfig_t* config, fcclMoeLayout_t* layout) {
  const char* caller = "fcclMoeLayoutCreate";
  fcclClearError();
  FCCLCHECK(fcclCommEnsureReady(comm, caller));
  fcclResult_t res = fcclSuccess;
  if (comm->path != fcclPathFccl)
    res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL, "%s: not available on the %s path (%s)", caller,
                     fcclGetPathName(comm->path), comm->pathReason);
  if (res == fcclSuccess) res = fcclEnqueueCheckReady(comm, caller, 0);
  if (res != fcclSuccess) { /* the same on every rank: nobody goes on to the exchange */
    fcclCommRecordThreadError(comm);
    return res;
  }
  /* From here every rank takes part in each exchange, its own failure carried in it. */
  fcclMoeShape shape;
  fcclResult_t local = layout == NULL ? FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: layout is NULL", caller)
                                      : fcclMoeConfigCheck(config, comm->nranks, &shape);
  res = agreeOnConfig(comm, local, config);
  struct fcclMoeLayout* made = NULL;
  struct fcclCallDevice cd = {-1};
  if (res == fcclSuccess) {
    const int sms = comm->device->smCount;
    made = newLayout(comm, config, &shape, sms < FCCL_DEVICE_MAX_BLOCKS ? sms : FCCL_DEVICE_MAX_BLOCKS);
    local = made ? fcclEnqueueEnterDevice(comm, &cd)
                 : FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "out of host memory");
    if (local != fcclSuccess) {
      /* Still through the registration's exchange, with nothing to register. */
      struct fcclRegistration* none = NULL;
      (void)fcclTransportRegister(comm->transport, NULL, 0, &none);
      res = local;
    } else {
      res = createOnDevice(comm, made);
    }
  }
  if (res == fcclSuccess) {
    listLayout(made);
    *layout = made;
    FCCL_INFO(FCCL_SUBSYS_COLL,
              "%s: %d experts (%d per rank), top-%d, hidden %zu, %zu tokens per rank, %s layout of %llu rows; "
              "workspace %llu bytes, scratch %llu bytes, %d blocks by default",
              caller, made->shape.numExperts, made->shape.localExperts, made->shape.topk, config->hidden,
              config->maxTokensPerRank, made->shape.padded ? "padded" : "packed",
              (unsigned long long)made->shape.recvRows, (unsigned long long)made->shape.workspaceBytes,
              (unsigned long long)made->shape.scratchBytes, made->defaultBlocks);
  } else if (made) {
    (void)freeLocal(made);
    free(made);
  }
  fcclEnqueueLeaveDevice(comm, &cd);
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}

void fcclMoeReleaseLayouts(struct fcclComm* comm) {
  pthread_mutex_lock(&layoutsLock);
  for (struct fcclMoeLayout* layout = layouts; layout; layout = layout->next) {
    if (layout->comm != comm || layout->orphaned) continue;
    (void)freeLocal(layout);
    layout->registration = NULL; /* released by the transport's teardown */
    layout->orphaned = 1;
  }
  pthread_mutex_unlock(&layoutsLock);
}

/* A layout whose communicator is still there. */
static fcclResult_t checkLive(const struct fcclMoeLayout* layout, const char* caller) {
  if (!layout->orphaned) return fcclSuccess;
  return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                    "%s: the layout's communicator was destroyed or aborted (and the layout's memory with it): only "
                    "fcclMoeLayoutDestroy takes it now",
                    caller);
}

FCCL_API fcclResult_t fcclMoeLayoutDestroy(fcclMoeLayout_t layout) {
  const char* caller = "fcclMoeLayoutDestroy";
  fcclClearError();
  FCCLCHECK(checkLayout(layout, caller));
  if (!unlistLayout(layout))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %p is not a live MoE layout", caller, (void*)layout);
  if (layout->orphaned) { /* its memory went with its communicator */
    layout->magic = 0;
    free(layout);
    return fcclSuccess;
  }
  struct fcclComm* comm = layout->comm;
  fcclResult_t res = fcclSuccess;
  struct fcclCallDevice cd = {-1};
  if (layout->registration) {
    /* The layout's kernels end before its memory goes: their waits are bounded, and stop on abort. */
    res = fcclEnqueueEnterDevice(comm, &cd);
    if (res == fcclSuccess) CUDACHECKKEEP(cudaDeviceSynchronize(), res);
    /* A communicator that was aborted (fcclCommAbort running, or a peer's death, which sets the abort word) does
     * not meet its peers again: the registration stays with it and its destroy releases it, while this rank's
     * memory is freed now (cuMem mappings keep it valid for peers that still map it). Otherwise the peers deregister
     * together, a kernel's failure notwithstanding. */
    if (comm->abortFlag != NULL && __atomic_load_n(comm->abortFlag, __ATOMIC_ACQUIRE) != 0) {
      FCCL_INFO(FCCL_SUBSYS_COLL,
                "%s: the communicator was aborted; its registration of the layout's workspace "
                "goes with it",
                caller);
    } else {
      fcclResult_t released = fcclTransportDeregister(comm->transport, layout->registration);
      if (res == fcclSuccess) res = released;
    }
  }
  fcclResult_t freed = freeLocal(layout);
  if (res == fcclSuccess) res = freed;
  fcclEnqueueLeaveDevice(comm, &cd);
  layout->magic = 0;
  free(layout);
  if (res != fcclSuccess && fcclCommIsValid(comm)) fcclCommRecordThreadError(comm);
  return res;
}

FCCL_API fcclResult_t fcclMoeLayoutRecvRows(fcclMoeLayout_t layout, size_t* rows) {
  fcclClearError();
  FCCLCHECK(checkLayout(layout, "fcclMoeLayoutRecvRows"));
  FCCL_REQUIRE(rows != NULL, "fcclMoeLayoutRecvRows: rows is NULL");
  *rows = (size_t)layout->shape.recvRows;
  return fcclSuccess;
}

/* The arguments every launch of layout shares. */
static void baseArgs(const struct fcclMoeLayout* layout, fcclMoeArgs* args) {
  memset(args, 0, sizeof(*args));
  args->shape = layout->shape;
  memcpy(args->workspace, layout->peerWorkspace, sizeof(args->workspace));
  args->scratch = (uint64_t)(uintptr_t)layout->scratch;
}

/* The checks a call shares after its arguments': the communicator's state and device, the stream, then `buffers`
 * (NULL entries skipped), and the launch. */
static fcclResult_t enqueueMoe(struct fcclMoeLayout* layout, const char* caller, void* stream,
                               const void* const* buffers, const char* const* names, int count, fcclMoeOp_t op,
                               fcclDataType_t datatype, fcclMoeArgs* args, int blocks) {
  struct fcclComm* comm = layout->comm;
  FCCLCHECK(fcclEnqueueCheckReady(comm, caller, 0));
  struct fcclCallDevice cd = {-1};
  fcclResult_t res = fcclEnqueueEnterDevice(comm, &cd);
  int capturing = 0;
  if (res == fcclSuccess) res = fcclEnqueueCheckStream(comm, stream, caller, &capturing);
  for (int i = 0; res == fcclSuccess && i < count; i++)
    if (buffers[i] != NULL) res = fcclEnqueueCheckBuffer(comm, buffers[i], names[i], caller);
  if (res == fcclSuccess) {
    const struct fcclDeviceState* s = comm->device;
    /* The communicator's SM budget (fcclConfig_t.minCTAs, maxCTAs) bounds every kernel's grid, this one's too; the
     * results do not depend on the grid. */
    blocks = fcclCtaClamp(blocks, layout->maxBlocks, s->minCtas, s->maxCtas);
    FCCL_TRACE(FCCL_SUBSYS_COLL, "%s %s: %llu tokens, %d blocks, stream %p%s", caller, fcclTypeName(datatype),
               (unsigned long long)args->tokens, blocks, stream, capturing ? " (captured)" : "");
    res = fcclDeviceLaunchMoe(op, datatype, &s->dev, args, blocks, s->pdl, (cudaStream_t)stream);
  }
  fcclEnqueueLeaveDevice(comm, &cd);
  return res;
}

FCCL_API fcclResult_t fcclMoeDispatch(const void* x, const float* xScales, const void* topkIdx, fcclDataType_t idxType,
                                      const float* topkWeights, size_t tokens, fcclDataType_t datatype,
                                      const fcclMoeRecv_t* recv, int blocks, fcclMoeLayout_t layout, void* stream) {
  const char* caller = "fcclMoeDispatch";
  fcclClearError();
  FCCLCHECK(checkLayout(layout, caller));
  FCCLCHECK(checkLive(layout, caller));
  struct fcclComm* comm = layout->comm;
  fcclResult_t res = fcclCommCheckOwner(comm, caller);
  if (res == fcclSuccess && recv == NULL)
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: recv is NULL", caller);
  struct fcclMoeDispatchCall call = {x, xScales, topkIdx, idxType, topkWeights, tokens, datatype, {0}, blocks};
  if (res == fcclSuccess) {
    call.recv = *recv;
    res = fcclMoeCheckDispatch(layout, &call);
  }
  if (res == fcclSuccess) {
    fcclMoeArgs args;
    baseArgs(layout, &args);
    args.input = (uint64_t)(uintptr_t)x;
    args.inputScales = (uint64_t)(uintptr_t)xScales;
    args.topkIdx = (uint64_t)(uintptr_t)topkIdx;
    args.topkWeights = (uint64_t)(uintptr_t)topkWeights;
    args.output = (uint64_t)(uintptr_t)recv->x;
    args.outputScales = (uint64_t)(uintptr_t)recv->scales;
    args.recvWeights = (uint64_t)(uintptr_t)recv->weights;
    args.recvSources = (uint64_t)(uintptr_t)recv->sourceTokens;
    args.recvCounts = (uint64_t)(uintptr_t)recv->expertCounts;
    args.recvOffsets = (uint64_t)(uintptr_t)recv->expertOffsets;
    args.tokens = tokens;
    args.idx64 = idxType == fcclInt64;
    args.elemBytes = datatype == fcclFloat8e4m3 ? 1 : 2;
    args.print = fcclMoePrint(0, datatype, layout->hash);
    const void* const buffers[] = {tokens ? x : NULL,
                                   tokens ? xScales : NULL,
                                   tokens ? topkIdx : NULL,
                                   tokens ? topkWeights : NULL,
                                   recv->x,
                                   recv->scales,
                                   recv->weights,
                                   recv->sourceTokens,
                                   recv->expertCounts,
                                   recv->expertOffsets};
    static const char* const names[] = {"x",
                                        "xScales",
                                        "topkIdx",
                                        "topkWeights",
                                        "recv->x",
                                        "recv->scales",
                                        "recv->weights",
                                        "recv->sourceTokens",
                                        "recv->expertCounts",
                                        "recv->expertOffsets"};
    res = enqueueMoe(layout, caller, stream, buffers, names, (int)(sizeof(buffers) / sizeof(buffers[0])),
                     FCCL_MOE_DISPATCH, datatype, &args, blocks > 0 ? blocks : layout->defaultBlocks);
    if (res == fcclSuccess) layout->dispatchTokens = (long long)tokens;
  }
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}

FCCL_API fcclResult_t fcclMoeCombine(const void* y, void* out, const float* topkWeights, size_t tokens,
                                     fcclDataType_t datatype, int blocks, fcclMoeLayout_t layout, void* stream) {
  const char* caller = "fcclMoeCombine";
  fcclClearError();
  FCCLCHECK(checkLayout(layout, caller));
  FCCLCHECK(checkLive(layout, caller));
  struct fcclComm* comm = layout->comm;
  fcclResult_t res = fcclCommCheckOwner(comm, caller);
  const struct fcclMoeCombineCall call = {y, out, topkWeights, tokens, datatype, blocks};
  if (res == fcclSuccess) res = fcclMoeCheckCombine(layout, &call);
  if (res == fcclSuccess) {
    fcclMoeArgs args;
    baseArgs(layout, &args);
    args.input = (uint64_t)(uintptr_t)y;
    args.output = (uint64_t)(uintptr_t)out;
    args.topkWeights = (uint64_t)(uintptr_t)topkWeights;
    args.tokens = tokens;
    args.elemBytes = 2;
    args.print = fcclMoePrint(1, datatype, layout->hash);
    const void* const buffers[] = {y, tokens ? out : NULL, tokens ? topkWeights : NULL};
    static const char* const names[] = {"y", "out", "topkWeights"};
    res = enqueueMoe(layout, caller, stream, buffers, names, 3, FCCL_MOE_COMBINE, datatype, &args,
                     blocks > 0 ? blocks : layout->defaultBlocks);
  }
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}

fcclResult_t fcclMoeLayoutCreateHostOnly(struct fcclComm* comm, const fcclMoeConfig_t* config, int maxBlocks,
                                         fcclMoeLayout_t* layout) {
  fcclMoeShape shape;
  FCCLCHECK(fcclMoeConfigCheck(config, comm->nranks, &shape));
  struct fcclMoeLayout* made = newLayout(comm, config, &shape, maxBlocks);
  if (!made) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "out of host memory");
  listLayout(made);
  *layout = made;
  return fcclSuccess;
}

void fcclMoeLayoutDestroyHostOnly(fcclMoeLayout_t layout) {
  if (layout && unlistLayout(layout)) free(layout);
}
