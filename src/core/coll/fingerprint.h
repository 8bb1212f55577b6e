/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fingerprints of calls (device_host.h: fcclPrintMake and the bit layout): the print of a collective's call as the
 * host computes it for fcclDevArgs, and what a print says in words, for the message of ranks out of step
 * (docs/errors.md#out-of-step). Pure functions.
 */
#ifndef FCCL_CORE_FINGERPRINT_H_
#define FCCL_CORE_FINGERPRINT_H_

#include "device_host.h"
#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

/* The form a print names for algo (fcclAlgoChoice.algo: a kernel or an FCCL_FORM_*) with the registered two-shot's
 * scatter (fcclScatter_t; ignored for other algorithms). */
uint32_t fcclPrintForm(int algo, int scatter);

/* The print of a collective's call: its form (fcclPrintForm), datatype, op (reducing), root (broadcast) or 0 in arg,
 * and count as fcclDevArgs has it. */
uint32_t fcclCallPrint(uint32_t form, fcclDataType_t datatype, int arg, uint64_t count);

/* The print of an fcclAllReduceAddRMSNorm call. */
uint32_t fcclFusedPrint(int registered, int twoshot, fcclDataType_t datatype, fcclScaleMode_t scaleMode,
                        uint64_t tokens, uint64_t hidden);

/* The print of a MoE dispatch (combine 0) or combine (1) of datatype on a layout whose configuration hashes to
 * layoutHash (src/core/coll/moe.c). */
uint32_t fcclMoePrint(int combine, fcclDataType_t datatype, uint64_t layoutHash);

/* A print in words ("all-reduce, float32, sum, algorithm ll, count hash 0x3a"), into buf (always terminated). */
void fcclPrintDescribe(uint32_t print, char* buf, size_t size);

/* Which fields of two prints differ, in words ("another count", "another collective", "another datatype and op");
 * "nothing" when they are equal. */
void fcclPrintDifference(uint32_t mine, uint32_t theirs, char* buf, size_t size);

/* The whole report of ranks out of step: rank's call number `call` (print mine) against peer's (print theirs) of the
 * same call number. */
void fcclPrintMismatchMessage(int rank, unsigned long long call, uint32_t mine, int peer, uint32_t theirs, char* buf,
                              size_t size);

#endif /* FCCL_CORE_FINGERPRINT_H_ */
