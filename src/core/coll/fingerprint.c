/* SPDX-License-Identifier: Apache-2.0 */
/* Fingerprints of calls: the host's side of the out-of-step check (fingerprint.h). */
#include "fingerprint.h"

#include "algo.h"
#include "datatype.h"

#include <stdio.h>
#include <string.h>

/* What kind of call a form belongs to: it says what the print's arg field holds. */
typedef enum {
  KIND_ALLREDUCE,
  KIND_ALLGATHER,
  KIND_REDUCESCATTER,
  KIND_BROADCAST,
  KIND_BARRIER,
  KIND_FUSED,
  KIND_REDUCE,
  KIND_GATHER,
  KIND_SCATTER,
  KIND_ALLGATHERV,
  KIND_REDUCESCATTERV,
  KIND_MOE,
  KIND_UNKNOWN
} printKind;

static printKind formKind(uint32_t form) {
  switch (form) {
    case FCCL_PRINT_FORM_SCATTER_PUSH:
    case FCCL_PRINT_FORM_SCATTER_INBOX:
    case FCCL_PRINT_FORM_SCATTER_COPY: return KIND_ALLREDUCE;
    case FCCL_KERNEL_BARRIER: return KIND_BARRIER;
    case FCCL_KERNEL_FUSED_NORM:
    case FCCL_PRINT_FORM_FUSED_STAGED:
    case FCCL_PRINT_FORM_FUSED_TWOSHOT_REG:
    case FCCL_PRINT_FORM_FUSED_TWOSHOT_STAGED: return KIND_FUSED;
    case FCCL_KERNEL_MOE: return KIND_MOE;
    default: break;
  }
  /* An algorithm: the collective whose set it is in (kernel_list.h). */
  const fcclAlgoSet* set = fcclAlgoSetOf((int)form);
  if (set == &fcclAllReduceAlgos) return KIND_ALLREDUCE;
  if (set == &fcclAllGatherAlgos) return KIND_ALLGATHER;
  if (set == &fcclReduceScatterAlgos) return KIND_REDUCESCATTER;
  if (set == &fcclBroadcastAlgos) return KIND_BROADCAST;
  if (set == &fcclReduceAlgos) return KIND_REDUCE;
  if (set == &fcclGatherAlgos) return KIND_GATHER;
  if (set == &fcclScatterAlgos) return KIND_SCATTER;
  if (set == &fcclAllGatherVAlgos) return KIND_ALLGATHERV;
  if (set == &fcclReduceScatterVAlgos) return KIND_REDUCESCATTERV;
  return KIND_UNKNOWN;
}

static const char* kindName(printKind kind) {
  static const char* const names[] = {"all-reduce",
                                      "all-gather",
                                      "reduce-scatter",
                                      "broadcast",
                                      "barrier",
                                      "fused all-reduce + RMSNorm",
                                      "reduce",
                                      "gather",
                                      "scatter",
                                      "variable all-gather",
                                      "variable reduce-scatter",
                                      "MoE",
                                      "unknown call"};
  return names[kind];
}

static const char* formName(uint32_t form) {
  switch (form) {
    case FCCL_PRINT_FORM_SCATTER_PUSH: return "twoshot_reg, push scatter";
    case FCCL_PRINT_FORM_SCATTER_INBOX: return "twoshot_reg, inbox scatter";
    case FCCL_PRINT_FORM_SCATTER_COPY: return "twoshot_reg, copy-engine scatter";
    case FCCL_KERNEL_FUSED_NORM: return "one-shot, registered";
    case FCCL_PRINT_FORM_FUSED_STAGED: return "one-shot, staged";
    case FCCL_PRINT_FORM_FUSED_TWOSHOT_REG: return "two-shot, registered";
    case FCCL_PRINT_FORM_FUSED_TWOSHOT_STAGED: return "two-shot, staged";
    default: return fcclAlgoName((int)form);
  }
}

/* What a print's count hash is of: the reduce's hashes its count and root, a variable call's every rank's count
 * (and, for counts in device memory, the capacities). */
static const char* countName(printKind kind) {
  if (kind == KIND_FUSED) return "tokens x hidden";
  if (kind == KIND_REDUCE) return "count and root";
  if (kind == KIND_ALLGATHERV || kind == KIND_REDUCESCATTERV) return "counts";
  return "count";
}

static const char* opName(uint32_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg", "pre-multiplied sum"};
  return op < sizeof(names) / sizeof(names[0]) ? names[op] : "unknown op";
}

static const char* scaleName(uint32_t mode) {
  static const char* const names[] = {"no FP8 scale", "static FP8 scale", "dynamic FP8 scale"};
  return mode < sizeof(names) / sizeof(names[0]) ? names[mode] : "unknown scale mode";
}

static uint32_t printForm(uint32_t print) { return (print & ((1u << FCCL_PRINT_FORM_BITS) - 1u)) - 1u; }
static uint32_t printType(uint32_t print) { return (print >> FCCL_PRINT_TYPE_SHIFT) & 15u; }
static uint32_t printArg(uint32_t print) { return (print >> FCCL_PRINT_ARG_SHIFT) & 7u; }
static uint32_t printCount(uint32_t print) { return (print & FCCL_PRINT_MASK) >> FCCL_PRINT_COUNT_SHIFT; }

uint32_t fcclPrintForm(int algo, int scatter) {
  if (algo == FCCL_ALGO_TWOSHOT_REG) {
    if (scatter == FCCL_SCATTER_PUSH) return FCCL_PRINT_FORM_SCATTER_PUSH;
    if (scatter == FCCL_SCATTER_INBOX) return FCCL_PRINT_FORM_SCATTER_INBOX;
    if (scatter == FCCL_SCATTER_COPY) return FCCL_PRINT_FORM_SCATTER_COPY;
  }
  return (uint32_t)algo;
}

uint32_t fcclCallPrint(uint32_t form, fcclDataType_t datatype, int arg, uint64_t count) {
  return fcclPrintMake(form, (uint32_t)datatype, (uint32_t)arg, count);
}

uint32_t fcclFusedPrint(int registered, int twoshot, fcclDataType_t datatype, fcclScaleMode_t scaleMode,
                        uint64_t tokens, uint64_t hidden) {
  /* Tokens and hidden size in one hash: a change of either changes it. */
  const uint64_t shape = (tokens << 32) ^ (tokens >> 32) ^ hidden;
  const uint32_t form = twoshot
                            ? (registered ? FCCL_PRINT_FORM_FUSED_TWOSHOT_REG : FCCL_PRINT_FORM_FUSED_TWOSHOT_STAGED)
                            : (registered ? FCCL_KERNEL_FUSED_NORM : FCCL_PRINT_FORM_FUSED_STAGED);
  return fcclPrintMake(form, (uint32_t)datatype, (uint32_t)scaleMode, shape);
}

uint32_t fcclMoePrint(int combine, fcclDataType_t datatype, uint64_t layoutHash) {
  return fcclPrintMake(FCCL_KERNEL_MOE, (uint32_t)datatype, combine ? 1u : 0u, layoutHash);
}

void fcclPrintDescribe(uint32_t print, char* buf, size_t size) {
  if (size == 0) return;
  const uint32_t form = printForm(print);
  const printKind kind = formKind(form);
  if (kind == KIND_UNKNOWN) {
    snprintf(buf, size, "unknown call (fingerprint 0x%05x)", print & FCCL_PRINT_MASK);
    return;
  }
  if (kind == KIND_BARRIER) {
    snprintf(buf, size, "barrier");
    return;
  }
  if (kind == KIND_MOE) {
    snprintf(buf, size, "MoE %s, %s, layout hash 0x%02x", printArg(print) == 1 ? "combine" : "dispatch",
             fcclTypeName((fcclDataType_t)printType(print)), printCount(print));
    return;
  }
  char arg[32] = "";
  if (kind == KIND_ALLREDUCE || kind == KIND_REDUCESCATTER || kind == KIND_REDUCE || kind == KIND_REDUCESCATTERV)
    snprintf(arg, sizeof(arg), ", %s", opName(printArg(print)));
  else if (kind == KIND_BROADCAST || kind == KIND_GATHER || kind == KIND_SCATTER)
    snprintf(arg, sizeof(arg), ", root %u", printArg(print));
  else if (kind == KIND_FUSED)
    snprintf(arg, sizeof(arg), ", %s", scaleName(printArg(print)));
  snprintf(buf, size, "%s, %s%s, %s %s, %s hash 0x%02x", kindName(kind), fcclTypeName((fcclDataType_t)printType(print)),
           arg, kind == KIND_FUSED ? "form" : "algorithm", formName(form), countName(kind), printCount(print));
}

void fcclPrintDifference(uint32_t mine, uint32_t theirs, char* buf, size_t size) {
  if (size == 0) return;
  const printKind kind = formKind(printForm(mine));
  if (kind != formKind(printForm(theirs))) {
    snprintf(buf, size, "another collective");
    return;
  }
  const char* fields[5];
  int n = 0;
  if (printForm(mine) != printForm(theirs)) fields[n++] = kind == KIND_FUSED ? "form" : "algorithm";
  if (printType(mine) != printType(theirs)) fields[n++] = "datatype";
  if (printArg(mine) != printArg(theirs))
    fields[n++] = kind == KIND_BROADCAST || kind == KIND_GATHER || kind == KIND_SCATTER ? "root"
                  : kind == KIND_FUSED                                                  ? "scale mode"
                  : kind == KIND_MOE                                                    ? "call (dispatch or combine)"
                                                                                        : "op";
  if (printCount(mine) != printCount(theirs))
    fields[n++] = kind == KIND_FUSED                                       ? "token count or hidden size"
                  : kind == KIND_REDUCE                                    ? "count or root"
                  : kind == KIND_ALLGATHERV || kind == KIND_REDUCESCATTERV ? "counts"
                  : kind == KIND_MOE                                       ? "layout"
                                                                           : "count";
  if (n == 0) {
    snprintf(buf, size, "nothing");
    return;
  }
  size_t at = (size_t)snprintf(buf, size, "another %s", fields[0]);
  for (int i = 1; i < n && at < size; i++)
    at += (size_t)snprintf(buf + at, size - at, "%s%s", i == n - 1 ? " and " : ", ", fields[i]);
}

void fcclPrintMismatchMessage(int rank, unsigned long long call, uint32_t mine, int peer, uint32_t theirs, char* buf,
                              size_t size) {
  char ours[128], peers[128], difference[96];
  fcclPrintDescribe(mine, ours, sizeof(ours));
  fcclPrintDescribe(theirs, peers, sizeof(peers));
  fcclPrintDifference(mine, theirs, difference, sizeof(difference));
  const int registration = formKind(printForm(mine)) == formKind(printForm(theirs)) &&
                           printForm(mine) != printForm(theirs) && printType(mine) == printType(theirs) &&
                           printArg(mine) == printArg(theirs) && printCount(mine) == printCount(theirs);
  snprintf(buf, size, "ranks out of step: rank %d's call %llu (%s) does not match rank %d's call %llu (%s): %s%s", rank,
           call, ours, peer, call, peers, difference,
           registration ? " (are the buffers registered on some ranks only, or in place on some only?)" : "");
}
