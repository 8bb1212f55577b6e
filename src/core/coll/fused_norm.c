/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduceAddRMSNorm: the all-reduce of a transformer layer's output, the residual add and the RMSNorm in one
 * kernel (src/device/fused_norm_*.cu; docs/fused.md). Its arguments are not an all-reduce's (rows, a residual, a
 * weight, an output of another type, a scale), so it takes its own path to the stream over the checks that
 * fcclEnqueue shares: every argument first (nothing touches the device before), then the communicator's state,
 * device, stream and buffers, the input's registration, the form (one-shot or two-shot: fusedForm), the grid and
 * the launch.
 */
#include "algo.h"
#include "check.h"
#include "comm.h"
#include "datatype.h"
#include "debug.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "fingerprint.h"
#include "fused_norm_shape.h"
#include "param.h"
#include "transport.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

static const char* const kCaller = "fcclAllReduceAddRMSNorm";

/* One call as the application made it. */
struct fusedCall {
  const void* input;
  void* residual;
  const void* weight;
  void* output;
  size_t tokens;
  size_t hidden;
  float eps;
  fcclDataType_t datatype;
  fcclDataType_t outtype;
  fcclScaleMode_t scaleMode;
  float* scale;
  void* stream;
};

/* Whether [a, a + aBytes) and [b, b + bBytes) share a byte (NULL ranges share none). */
static int overlaps(const void* a, uint64_t aBytes, const void* b, uint64_t bBytes) {
  if (a == NULL || b == NULL) return 0;
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bBytes && y < x + aBytes;
}

static fcclResult_t checkAligned(const void* p, size_t align, const char* name, const char* what) {
  if ((uintptr_t)p % align == 0) return fcclSuccess;
  return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p is not aligned to its %s elements (%zu bytes)",
                    kCaller, name, p, what, align);
}

/* Every argument that needs no communicator state; *rowBytes and *outRowBytes: one row of input and of output. */
static fcclResult_t checkArguments(const struct fusedCall* c, uint64_t* rowBytes, uint64_t* outRowBytes) {
  const fcclDataType_t dt = c->datatype;
  if (dt != fcclFloat16 && dt != fcclBfloat16 && dt != fcclFloat32)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: datatype %s (%d): the fused norm takes float16, bfloat16 or float32", kCaller,
                      fcclTypeName(dt), (int)dt);
  if (c->outtype != dt && c->outtype != fcclFloat8e4m3)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: outtype %s (%d) is neither datatype %s nor float8e4m3", kCaller, fcclTypeName(c->outtype),
                      (int)c->outtype, fcclTypeName(dt));
  if ((int)c->scaleMode < 0 || c->scaleMode >= fcclNumScaleModes)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown scaleMode %d", kCaller, (int)c->scaleMode);
  const int fp8 = c->outtype == fcclFloat8e4m3;
  if (fp8 != (c->scaleMode != fcclScaleNone))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: scaleMode %d with outtype %s: an FP8 output takes fcclScaleStatic or fcclScaleDynamic, "
                      "any other output fcclScaleNone", kCaller, (int)c->scaleMode, fcclTypeName(c->outtype));
  if (!fp8 && c->scale != NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: scale %p given without an FP8 output", kCaller,
                      (void*)c->scale);
  if (c->hidden == 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: hidden is 0", kCaller);
  if (!isfinite(c->eps) || c->eps < 0.0f)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: eps %g is not finite and >= 0", kCaller,
                      (double)c->eps);
  const uint64_t size = fcclTypeSize(dt);
  if (c->hidden > FCCL_FUSED_MAX_ROW_BYTES / size)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: hidden %zu of %s is a row over %u bytes", kCaller,
                      c->hidden, fcclTypeName(dt), FCCL_FUSED_MAX_ROW_BYTES);
  *rowBytes = c->hidden * size;
  *outRowBytes = c->hidden * fcclTypeSize(c->outtype);
  if (c->tokens > SIZE_MAX / *rowBytes)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %zu tokens x %zu hidden of %s overflow a size",
                      kCaller, c->tokens, c->hidden, fcclTypeName(dt));
  /* Pointers are checked for alignment even with no tokens; NULL only with no tokens (weight, residual: always). */
  FCCLCHECK(checkAligned(c->input, size, "input", fcclTypeName(dt)));
  FCCLCHECK(checkAligned(c->residual, size, "residual", fcclTypeName(dt)));
  FCCLCHECK(checkAligned(c->weight, size, "weight", fcclTypeName(dt)));
  FCCLCHECK(checkAligned(c->output, fcclTypeSize(c->outtype), "output", fcclTypeName(c->outtype)));
  FCCLCHECK(checkAligned(c->scale, sizeof(float), "scale", "float32"));
  if (c->tokens == 0) return fcclSuccess;
  if (c->input == NULL || c->output == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s is NULL with %zu tokens", kCaller,
                      c->input == NULL ? "input" : "output", c->tokens);
  if (fp8 && c->scale == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: scale is NULL with an FP8 output (scaleMode %d)",
                      kCaller, (int)c->scaleMode);
  const uint64_t bytes = c->tokens * *rowBytes;
  const uint64_t outBytes = c->tokens * *outRowBytes;
  const uint64_t scaleBytes = c->scaleMode == fcclScaleDynamic ? c->tokens * sizeof(float) : sizeof(float);
  /* A buffer the call writes (residual, output, dynamic scales) must not overlap any other: peers read the input
   * and every block reads the weight and a static scale while blocks write their rows. */
  const struct {
    const void* p;
    uint64_t bytes;
    const char* name;
    int written;
  } buffers[] = {{c->input, bytes, "input", 0},
                 {c->residual, bytes, "residual", 1},
                 {c->output, outBytes, "output", 1},
                 {c->weight, *rowBytes, "weight", 0},
                 {c->scale, scaleBytes, "scale", c->scaleMode == fcclScaleDynamic}};
  const int n = (int)(sizeof(buffers) / sizeof(buffers[0]));
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if ((buffers[i].written || buffers[j].written) &&
          overlaps(buffers[i].p, buffers[i].bytes, buffers[j].p, buffers[j].bytes))
        return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p overlaps %s %p", kCaller, buffers[i].name,
                          buffers[i].p, buffers[j].name, buffers[j].p);
  return fcclSuccess;
}

static uint64_t minU64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t maxU64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* FCCL_FUSED_KERNEL (docs/env.md): whether the one-shot form runs its previous kernel (fused_norm_legacy.cu) instead
 * of the row kernel. An unknown value is warned about once and means the row kernel. */
static int legacyKernelAsked(void) {
  static atomic_int warned;
  const char* kernel = fcclParamString(FCCL_PARAM_FUSED_KERNEL);
  if (kernel[0] == '\0' || strcmp(kernel, "auto") == 0 || strcmp(kernel, "row") == 0) return 0;
  if (strcmp(kernel, "legacy") == 0) return 1;
  if (atomic_exchange(&warned, 1) == 0)
    FCCL_WARN(FCCL_SUBSYS_COLL, "FCCL_FUSED_KERNEL=%s is not one of auto, row, legacy; using the row kernel", kernel);
  return 0;
}

/*
 * Blocks of a call of `rows` rows at a time (the form's rows in one round, or all of them), dealt out in batches of
 * the shape's rowsPerBlock (fused_norm.cuh; fewer rows per block than a block holds when rows are few:
 * fcclFusedShapeFor). At most as many blocks as stay resident together (FCCL_FUSED_RESIDENT_THREADS per SM): each
 * takes batch after batch, its groups each on their own row, so that an SM never waits for a block to end and the
 * next to start with no load in flight. The forms with flags also need every block resident at once, and an epoch
 * counter each (FCCL_DEVICE_MAX_BLOCKS); one rank (local) posts no flags. A row's result does not depend on the
 * grid; the grid depends only on the call's arguments and the GPU, so it is the same on every rank.
 */
static int fusedBlocks(const struct fcclComm* comm, uint64_t rows, const fcclFusedShape* shape, int local) {
  const uint64_t batches = (rows + shape->rowsPerBlock - 1) / shape->rowsPerBlock;
  const uint64_t perSm = maxU64(FCCL_FUSED_RESIDENT_THREADS / shape->blockThreads, 1);
  const uint64_t sms = comm->device->smCount > 0 ? (uint64_t)comm->device->smCount : 1;
  const uint64_t most = minU64(sms * perSm, local ? INT_MAX : FCCL_DEVICE_MAX_BLOCKS);
  const int blocks = (int)maxU64(minU64(batches, most), 1);
  /* The communicator's SM budget (docs/collectives.md#sm-budget) bounds the grid last; a block past the batches
   * takes no row but still meets its peers' blocks, so a minimum may raise the grid up to what stays resident. */
  return fcclCtaClamp(blocks, (int)most, comm->device->minCtas, comm->device->maxCtas);
}

/*
 * Rows per owner and round of the two-shot form (fused_norm_twoshot.cu), 0 when not even one fits: an inbox
 * region holds the rows pushed to an owner (each at the 16-byte pitch of a row of datatype), a result region the
 * owner's results (r' when there is a residual, the output row at its own 16-byte pitch, the dynamic scale).
 */
static uint64_t twoshotRoundRows(const struct fusedCall* c, uint64_t pitch, uint64_t outRowBytes, uint64_t chunk) {
  const uint64_t outPitch = fcclAlignUp64(outRowBytes, FCCL_UNIT_BYTES);
  const uint64_t result = (c->residual ? pitch : 0) + outPitch + (c->scaleMode == fcclScaleDynamic ? sizeof(float) : 0);
  return chunk / maxU64(pitch, result);
}

/*
 * The form of this call: the one asked for (form >= 0: strict, for tests), else FCCL_FUSED_ALGO's, else
 * fcclFusedAutoForm's; outside the strict case a two-shot that cannot run the call becomes the one-shot. The two-shot
 * needs one row per owner in a staging chunk and its rounds counted by a signal's steps; *roundRows receives its rows
 * per owner and round. Every input to the choice is the same on every rank for one call.
 */
static fcclResult_t fusedForm(struct fcclComm* comm, const struct fusedCall* c, uint64_t bytes, uint64_t pitch,
                              uint64_t outRowBytes, int registered, int form, int* chosen, uint64_t* roundRows) {
  const struct fcclDeviceState* s = comm->device;
  const uint64_t chunk = s->dev.layout.chunkBytes;
  const uint64_t rows = twoshotRoundRows(c, pitch, outRowBytes, chunk);
  const char* why = NULL;
  if (rows == 0)
    why = "a row's results do not fit a staging chunk (FCCL_STAGING_BYTES)";
  else if ((c->tokens + rows * (uint64_t)comm->nranks - 1) / (rows * (uint64_t)comm->nranks) + 2 > FCCL_MAX_STEPS)
    why = "the call needs too many staging rounds";
  const int strict = form >= 0;
  if (!strict && s->fusedRequest != FCCL_FUSED_REQUEST_AUTO) form = s->fusedRequest;
  if (form < 0) {
    const fcclAlgoQuery query = fcclAlgoQueryMake(bytes, comm->nranks, registered, 0, s->smCount, &s->dev.layout,
                                                  s->ll128Auto, s->copyScatterMin);
    form = fcclFusedAutoForm(&query);
  }
  if (form != FCCL_FUSED_ONESHOT && form != FCCL_FUSED_TWOSHOT)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown form %d", kCaller, form);
  if (form == FCCL_FUSED_TWOSHOT && why != NULL) {
    if (strict)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: the two-shot form cannot run %zu x %zu: %s",
                        kCaller, c->tokens, c->hidden, why);
    FCCL_TRACE(FCCL_SUBSYS_COLL, "%s: the two-shot form cannot run %zu x %zu (%s); using the one-shot form", kCaller,
               c->tokens, c->hidden, why);
    form = FCCL_FUSED_ONESHOT;
  }
  *chosen = form;
  *roundRows = rows;
  return fcclSuccess;
}

/* After the device is current and the stream checked: the buffers, the form, the grid and the launch. */
static fcclResult_t enqueueFused(struct fcclComm* comm, const struct fusedCall* c, uint64_t rowBytes,
                                 uint64_t outRowBytes, int form) {
  const struct fcclDeviceState* s = comm->device;
  FCCLCHECK(fcclEnqueueCheckBuffer(comm, c->input, "input", kCaller));
  FCCLCHECK(fcclEnqueueCheckBuffer(comm, c->output, "output", kCaller));
  if (c->residual) FCCLCHECK(fcclEnqueueCheckBuffer(comm, c->residual, "residual", kCaller));
  if (c->weight) FCCLCHECK(fcclEnqueueCheckBuffer(comm, c->weight, "weight", kCaller));
  if (c->scale) FCCLCHECK(fcclEnqueueCheckBuffer(comm, c->scale, "scale", kCaller));

  fcclFusedArgs args;
  memset(&args, 0, sizeof(args));
  args.input = (uint64_t)(uintptr_t)c->input;
  args.residual = (uint64_t)(uintptr_t)c->residual;
  args.weight = (uint64_t)(uintptr_t)c->weight;
  args.output = (uint64_t)(uintptr_t)c->output;
  args.scale = (uint64_t)(uintptr_t)c->scale;
  args.tokens = c->tokens;
  args.hidden = c->hidden;
  args.eps = c->eps;
  args.scaleMode = (int32_t)c->scaleMode;

  /* Staged rows sit at a 16-byte pitch in one staging chunk per writer and parity. */
  const uint64_t pitch = fcclAlignUp64(rowBytes, FCCL_UNIT_BYTES);
  const uint64_t chunk = s->dev.layout.chunkBytes;
  if (pitch > chunk)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: a row of %llu bytes does not fit a staging chunk of %llu bytes (raise FCCL_STAGING_BYTES)",
                      kCaller, (unsigned long long)rowBytes, (unsigned long long)chunk);
  args.roundRows = chunk / pitch;
  const uint64_t rounds = (c->tokens + args.roundRows - 1) / args.roundRows;
  if (rounds >= FCCL_MAX_STEPS)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %zu tokens need %llu staging rounds, over %u",
                      kCaller, c->tokens, (unsigned long long)rounds, FCCL_MAX_STEPS - 1);

  void* peers[FCCL_DEVICE_MAX_RANKS];
  args.registered = comm->nranks > 1 && fcclTransportLookup(comm->transport, c->input, c->tokens * rowBytes, peers);
  for (int r = 0; args.registered && r < comm->nranks; r++) args.peerInput[r] = (uint64_t)(uintptr_t)peers[r];
  int chosen = FCCL_FUSED_ONESHOT;
  uint64_t ownerRows = 0;
  FCCLCHECK(fusedForm(comm, c, c->tokens * rowBytes, pitch, outRowBytes, args.registered, form, &chosen, &ownerRows));
  args.form = chosen;
  /* Carried by every flag of the kernel (docs/errors.md#out-of-step). */
  args.print = fcclFusedPrint(args.registered, chosen == FCCL_FUSED_TWOSHOT, c->datatype, c->scaleMode, c->tokens,
                              c->hidden);

  /* The rows the grid shares at a time: every row (registered, or one rank), a round's, or the two-shot's rows of
   * one owner's share of a round. */
  const int local = comm->nranks == 1 && chosen == FCCL_FUSED_ONESHOT;
  uint64_t rows = args.registered || local ? c->tokens : minU64(c->tokens, args.roundRows);
  if (chosen == FCCL_FUSED_TWOSHOT) {
    args.roundRows = ownerRows;
    rows = minU64(ownerRows, (c->tokens + (uint64_t)comm->nranks - 1) / (uint64_t)comm->nranks);
  }
  const fcclFusedShape shape = fcclFusedShapeFor(rowBytes, rows, s->smCount);
  args.rowsPerBlock = shape.rowsPerBlock;
  int blocks = fusedBlocks(comm, rows, &shape, local);
  if (chosen == FCCL_FUSED_ONESHOT && legacyKernelAsked()) {
    /* The previous kernel: one block of 512 threads per row at a time, at most one block per SM. */
    args.form = FCCL_FUSED_ONESHOT_LEGACY;
    rows = args.registered ? c->tokens : minU64(c->tokens, args.roundRows);
    const uint64_t cap = minU64(s->smCount > 0 ? (uint64_t)s->smCount : 1, FCCL_DEVICE_MAX_BLOCKS);
    blocks = fcclCtaClamp((int)minU64(rows, cap), (int)cap, s->minCtas, s->maxCtas);
  }
  FCCL_TRACE(FCCL_SUBSYS_COLL,
             "%s %zu x %zu %s -> %s scale %d %s%s %s: %d blocks of %u rows x %u threads, %llu rows per %s, stream %p",
             kCaller, c->tokens, c->hidden, fcclTypeName(c->datatype), fcclTypeName(c->outtype), (int)c->scaleMode,
             fcclFusedFormName(chosen), args.form == FCCL_FUSED_ONESHOT_LEGACY ? " (legacy kernel)" : "",
             args.registered ? "registered"
             : local         ? "local"
                             : "staged",
             blocks, shape.rowsPerBlock, shape.rowThreads, (unsigned long long)args.roundRows,
             chosen == FCCL_FUSED_TWOSHOT ? "owner and round" : "round", c->stream);
  return fcclDeviceLaunchFusedNorm(c->datatype, c->outtype, &s->dev, &args, blocks, s->pdl, (cudaStream_t)c->stream);
}

fcclResult_t fcclAllReduceAddRMSNormForm(const void* input, void* residual, const void* weight, void* output,
                                         size_t tokens, size_t hidden, float eps, fcclDataType_t datatype,
                                         fcclDataType_t outtype, fcclScaleMode_t scaleMode, float* scale,
                                         struct fcclComm* comm, void* stream, int form) {
  fcclClearError();
  if (!fcclCommIsValid(comm))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: invalid communicator handle %p", kCaller,
                      (void*)comm);
  fcclResult_t res = fcclCommCheckOwner(comm, kCaller);
  if (res != fcclSuccess) return res;
  const struct fusedCall call = {input, residual, weight, output, tokens, hidden, eps,
                                 datatype, outtype, scaleMode, scale, stream};
  uint64_t rowBytes = 0, outRowBytes = 0;
  res = checkArguments(&call, &rowBytes, &outRowBytes);
  /* NCCL has no fused epilogue, and fccl's kernel needs fccl's peer mappings of every rank: the call is fccl-path
   * only. */
  if (res == fcclSuccess && comm->path != fcclPathFccl)
    res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                     "%s: not available on the %s path (%s); call fcclAllReduce and the norm separately",
                     kCaller, fcclGetPathName(comm->path), comm->pathReason);
  if (res == fcclSuccess) res = fcclEnqueueCheckReady(comm, kCaller, 0);
  struct fcclCallDevice cd = {-1};
  if (res == fcclSuccess) res = fcclEnqueueEnterDevice(comm, &cd);
  if (res == fcclSuccess) {
    int capturing = 0;
    res = fcclEnqueueCheckStream(comm, stream, kCaller, &capturing);
    /* Graphs destroyed since the last call: release the buffers they registered (their destructor cannot). */
    if (res == fcclSuccess) res = fcclTransportReleaseGraphRegistrations(comm->transport, 0);
    if (res == fcclSuccess && tokens > 0) res = enqueueFused(comm, &call, rowBytes, outRowBytes, form);
    fcclEnqueueLeaveDevice(comm, &cd);
  }
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}

FCCL_API fcclResult_t fcclAllReduceAddRMSNorm(const void* input, void* residual, const void* weight, void* output,
                                              size_t tokens, size_t hidden, float eps, fcclDataType_t datatype,
                                              fcclDataType_t outtype, fcclScaleMode_t scaleMode, float* scale,
                                              fcclComm_t comm, void* stream) {
  return fcclAllReduceAddRMSNormForm(input, residual, weight, output, tokens, hidden, eps, datatype, outtype,
                                     scaleMode, scale, comm, stream, -1);
}
