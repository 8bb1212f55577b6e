/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plain data shared by the host and the kernels of the collectives: the layout of a communicator's slot in the
 * shared arena, the device-side communicator (passed by value to every kernel), the per-call arguments and the
 * host-mapped words through which kernels report errors and the host asks them to stop. Fixed-width fields only;
 * the static_asserts keep host C and nvcc C++ agreeing on every size. docs/collectives.md draws the slot.
 */
#ifndef FCCL_DEVICE_HOST_H_
#define FCCL_DEVICE_HOST_H_

#include "kernel_list.h"
#include "tuning.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define FCCL_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define FCCL_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Largest communicator the kernels handle (one NVLink domain of 8 GPUs). */
#define FCCL_DEVICE_MAX_RANKS 8
/* Largest grid of any collective kernel; also the number of per-block epoch counters and signal rows. */
#define FCCL_DEVICE_MAX_BLOCKS 256
/* Threads per block of the data kernels (the barrier uses one warp). */
#define FCCL_DEVICE_THREADS 512
#define FCCL_DEVICE_BARRIER_THREADS 32

/*
 * A signal value names a call and a step inside it: (epoch << FCCL_STEP_BITS) | step, step >= 1. Epochs grow by
 * one per call, so values only grow and waits compare with >=. 44 bits of epoch last 300 days of back-to-back
 * 1.5 us calls; the host refuses calls that would need 2^20 - 1 steps or more.
 */
#define FCCL_STEP_BITS 20
#define FCCL_MAX_STEPS ((1u << FCCL_STEP_BITS) - 2u)

/*
 * The fingerprint ("print") of a call: FCCL_PRINT_BITS bits that every flag of the call carries, so that ranks out
 * of step (a rank that skipped a call, or called with another count, type, op, root, collective or algorithm) meet
 * a flag of the right epoch with another print and stop with fcclInvalidUsage instead of hanging or reading past a
 * peer's buffer. Structured so that the host can say which field differs (docs/errors.md#out-of-step):
 *   bits  0-5   form + 1 (fcclPrintForm: the algorithm, and the scatter of the registered two-shot or the fused
 *               norm's registered or staged form; never 0, so that no print and no LL flag is 0)
 *   bits  6-9   datatype
 *   bits 10-12  op (reducing collectives), root (broadcast, gather, scatter), scale mode (fused norm), 0 otherwise
 *   bits 13-19  a hash of the count (the reduce: of count and root; the fused norm: of tokens and hidden size)
 * The tag of a call, (epoch << FCCL_PRINT_BITS) | print, is what signal pads carry beside their value and what the
 * last word of an LL128 line holds; an LL packet's 32-bit flag is the tag's low 32 bits (12 bits of epoch).
 */
#define FCCL_PRINT_BITS 20
#define FCCL_PRINT_MASK ((1u << FCCL_PRINT_BITS) - 1u)
#define FCCL_PRINT_FORM_BITS 6
#define FCCL_PRINT_TYPE_SHIFT 6
#define FCCL_PRINT_ARG_SHIFT 10
#define FCCL_PRINT_COUNT_SHIFT 13
/* Epoch bits in an LL flag: the LL area is cleaned before they wrap (epochEnd), every 2^12 calls. */
#define FCCL_LL_EPOCH_BITS (32 - FCCL_PRINT_BITS)
#define FCCL_LL_EPOCH_MASK ((1u << FCCL_LL_EPOCH_BITS) - 1u)

/*
 * Kernels: one per KERNEL and OWN row of FCCL_KERNEL_LIST (kernel_list.h), in its order, and nothing else. The
 * all-reduce's (FCCL_ALGO_LL ...) are its algorithms; the other collectives' (FCCL_KERNEL_ALLGATHER_LL ...) are
 * their forms; FCCL_KERNEL_BARRIER and FCCL_KERNEL_FUSED_NORM have launchers of their own. Their names
 * (fcclAlgoName) are what the FCCL_*ALGO variables, the logs and the error reports use.
 */
#define FCCL_KERNEL_ENUMERATOR4_(id, request, name, kernel) id,
#define FCCL_KERNEL_ENUMERATOR2_(id, name) id,
typedef enum { FCCL_KERNEL_LIST(FCCL_KERNEL_ENUMERATOR4_, FCCL_LIST_SKIP3_, FCCL_KERNEL_ENUMERATOR2_) } fcclDevKernel_t;

/* How many kernels there are: the kernel ids are [0, FCCL_KERNEL_COUNT). A count, not a kernel. */
#define FCCL_KERNEL_ONE4_(id, request, name, kernel) +1
#define FCCL_KERNEL_ONE3_(id, request, name) +1
#define FCCL_KERNEL_ONE2_(id, name) +1
#define FCCL_KERNEL_COUNT (0 FCCL_KERNEL_LIST(FCCL_KERNEL_ONE4_, FCCL_LIST_SKIP3_, FCCL_KERNEL_ONE2_))

/*
 * The forms with no kernel of their own (COPY rows: FCCL_FORM_ALLGATHER_COPY, FCCL_FORM_BROADCAST_COPY), numbered
 * after the kernels so that selection, the FCCL_*ALGO variables and fingerprints name them as they name kernels.
 * An algorithm (fcclAlgoChoice.algo, fcclCall.algo) is a kernel or one of these: [0, FCCL_ALGO_IDS).
 */
#define FCCL_FORM_ENUMERATOR3_(id, request, name) id,
enum {
  FCCL_FORMS_BEFORE_ = FCCL_KERNEL_COUNT - 1, /* not an id: the first form follows the last kernel */
  FCCL_KERNEL_LIST(FCCL_LIST_SKIP4_, FCCL_FORM_ENUMERATOR3_, FCCL_LIST_SKIP2_)
};
#define FCCL_ALGO_IDS (FCCL_KERNEL_COUNT + (0 FCCL_KERNEL_LIST(FCCL_LIST_SKIP4_, FCCL_KERNEL_ONE3_, FCCL_LIST_SKIP2_)))

/* Forms a print names beyond the algorithms: variants that run an algorithm's kernel. */
enum {
  FCCL_PRINT_FORM_FUSED_STAGED = FCCL_ALGO_IDS, /* the fused norm's one-shot staged form (FCCL_KERNEL_FUSED_NORM:
                                                 * registered) */
  FCCL_PRINT_FORM_SCATTER_PUSH,                 /* the registered two-shot with FCCL_SCATTER_PUSH (its own id: pull) */
  FCCL_PRINT_FORM_SCATTER_INBOX,
  FCCL_PRINT_FORM_SCATTER_COPY,
  FCCL_PRINT_FORM_FUSED_TWOSHOT_REG,   /* the fused norm's two-shot form, registered input */
  FCCL_PRINT_FORM_FUSED_TWOSHOT_STAGED /* the same, staged input */
};
/* Forms are [0, FCCL_PRINT_FORMS); form + 1 must fit FCCL_PRINT_FORM_BITS without becoming 0. */
#define FCCL_PRINT_FORMS (FCCL_PRINT_FORM_FUSED_TWOSHOT_STAGED + 1)
FCCL_STATIC_ASSERT(FCCL_PRINT_FORMS < (1 << FCCL_PRINT_FORM_BITS), "every form has a print value");

/* Bytes of one LL packet: two 8-byte words {4 data bytes, 4-byte flag}; 8 data bytes per packet. */
#define FCCL_LL_PACKET_BYTES 16
#define FCCL_LL_DATA_BYTES 8
/* The LL area of a slot holds 2 parities x nranks writers x (capacity x 2) bytes; it is this size for any nranks. */
#define FCCL_LL_AREA_BYTES (2u << 20)
/*
 * LL128: lines of 128 bytes, 120 of data and the epoch in the last 8. The area (FCCL_LL128_AREA_BYTES) holds
 * 2 parities x (n - 1) writers (writer w's region in receiver r's slot is number (w - r - 1 + n) % n) of
 * ll128Lines lines each: 1.875 MiB of data per writer for 2 ranks, 274 KiB for 8.
 */
#define FCCL_LL128_LINE_BYTES 128
#define FCCL_LL128_LINE_DATA 120
FCCL_STATIC_ASSERT(FCCL_LL128_THREADS >= 32 && FCCL_LL128_THREADS <= FCCL_DEVICE_THREADS &&
                       FCCL_LL128_THREADS % 32 == 0,
                   "FCCL_LL128_THREADS must be a multiple of 32 in [32, FCCL_DEVICE_THREADS]");
FCCL_STATIC_ASSERT(FCCL_LL_THREADS >= 32 && FCCL_LL_THREADS <= FCCL_DEVICE_THREADS && FCCL_LL_THREADS % 32 == 0,
                   "FCCL_LL_THREADS must be a multiple of 32 in [32, FCCL_DEVICE_THREADS]");
FCCL_STATIC_ASSERT(FCCL_LL128_AREA_BYTES % (2u << 20) == 0, "FCCL_LL128_AREA_BYTES must be a multiple of 2 MiB");
/* Staged data moves in 16-byte units; every area in the slot is aligned to this many bytes. */
#define FCCL_UNIT_BYTES 16
#define FCCL_SLOT_ALIGN 4096
/* A signal pad: {signal value, tag of the writer's call}, written and polled as one 16-byte access. */
#define FCCL_PAD_BYTES 16

#define FCCL_SLOT_MAGIC 0x66636c736c6f7431ull /* "fclslot1" */

/* Start of every slot. The kernels keep lastEpoch current, so a communicator that later reuses the slot can start
 * past every flag value this one left behind. */
typedef struct {
  uint64_t magic;
  uint64_t lastEpoch; /* epoch of the latest call that started on this rank (written by block 0 of each kernel) */
  uint64_t reserved[6];
} fcclSlotHeader;
FCCL_STATIC_ASSERT(sizeof(fcclSlotHeader) == 64, "fcclSlotHeader layout");

/* The call board, after the header: u64 [FCCL_DEVICE_MAX_RANKS writers], the tag of the writer's latest call of the
 * kernels that post no signal pads (LL, LL128), written by their block 0. A wait that lasts reads it (and the pads'
 * tags): the peer may run a call of another protocol at this epoch, whose flags never reach the areas we poll. */
#define FCCL_SLOT_BOARD_OFFSET 64

/*
 * Where each area lives inside a slot (byte offsets from the slot base). Identical on every rank of a
 * communicator: init checks it, since every rank writes into the others' slots at these offsets.
 *   header    fcclSlotHeader, then the call board (FCCL_SLOT_BOARD_OFFSET)
 *   signalA   pads [FCCL_DEVICE_MAX_BLOCKS][FCCL_DEVICE_MAX_RANKS]: [block][writer], "ready"/"inbox full"/barrier
 *   signalB   pads [FCCL_DEVICE_MAX_BLOCKS][FCCL_DEVICE_MAX_RANKS]: [block][writer], "done"/"result ready"
 *             (a pad is 16 bytes: the signal value, then the writer's call tag; FCCL_PAD_BYTES)
 *   ll        LL packets [2 parities][nranks writers][llBytes / 8 packets]
 *   ll128     LL128 lines [2 parities][nranks - 1 writers][ll128Lines] (no area for one rank)
 *   inbox     [2 parities][nranks - 1 writers][chunkBytes]: staged inputs pushed to their owner
 *   result    [2 parities][nranks - 1 owners][chunkBytes]: reduced chunks pushed by their owner
 * (regions of other ranks only, in the order receiver + 1, receiver + 2, ... modulo nranks: fcclPeerRegion)
 */
typedef struct {
  uint64_t signalAOffset;
  uint64_t signalBOffset;
  uint64_t llOffset;
  uint64_t llBytes;       /* LL data capacity per writer and parity (bytes of user data) */
  uint64_t ll128Offset;
  uint64_t ll128Lines;    /* LL128 lines per writer and parity (FCCL_LL128_LINE_DATA bytes of user data each) */
  uint64_t inboxOffset;
  uint64_t resultOffset;
  uint64_t chunkBytes;    /* staging capacity per writer (inbox) or owner (result) and parity */
  uint64_t totalBytes;    /* the whole slot */
} fcclSlotLayout;
FCCL_STATIC_ASSERT(sizeof(fcclSlotLayout) == 80, "fcclSlotLayout layout");

#if defined(__CUDACC__)
#define FCCL_HOST_DEVICE __host__ __device__
#else
#define FCCL_HOST_DEVICE
#endif

/*
 * The epoch after `epoch`. Epochs whose low 32 bits are 0 are skipped, by jumping 3 so that consecutive calls still
 * alternate parity: LL flags were once the epoch's low word, and a slot a communicator reuses may hold them.
 */
static inline FCCL_HOST_DEVICE uint64_t fcclEpochNext(uint64_t epoch) {
  epoch += 1;
  if ((uint32_t)epoch == 0) epoch += 2;
  return epoch;
}

/* The 7-bit hash of a count in a print (the bits above FCCL_PRINT_COUNT_SHIFT): any change of the value changes it
 * with probability 127/128. */
static inline FCCL_HOST_DEVICE uint32_t fcclPrintCountHash(uint64_t count) {
  count ^= count >> 29;
  count *= 0x9e3779b97f4a7c15ull;
  return (uint32_t)(count >> (64 - (FCCL_PRINT_BITS - FCCL_PRINT_COUNT_SHIFT)));
}

/* The print of a call of form `form` (an algorithm or an FCCL_PRINT_FORM_*), datatype, the op, root or scale
 * mode in arg (0..7), and count. */
static inline FCCL_HOST_DEVICE uint32_t fcclPrintMake(uint32_t form, uint32_t datatype, uint32_t arg, uint64_t count) {
  return ((form + 1u) & ((1u << FCCL_PRINT_FORM_BITS) - 1u)) | ((datatype & 15u) << FCCL_PRINT_TYPE_SHIFT) |
         ((arg & 7u) << FCCL_PRINT_ARG_SHIFT) | (fcclPrintCountHash(count) << FCCL_PRINT_COUNT_SHIFT);
}

/* The print of the barrier kernel on its own (fcclBarrier): no data, no arguments. */
#define FCCL_PRINT_BARRIER (FCCL_KERNEL_BARRIER + 1u)

static inline uint64_t fcclAlignUp64(uint64_t value, uint64_t align) { return (value + align - 1) / align * align; }

/* The layout for nranks ranks and stagingBytes of staging (inbox + result areas together). Pure: tested on the
 * host and used identically by every rank. */
static inline void fcclSlotLayoutCompute(int nranks, uint64_t stagingBytes, fcclSlotLayout* layout) {
  const uint64_t signalBytes = (uint64_t)FCCL_DEVICE_MAX_BLOCKS * FCCL_DEVICE_MAX_RANKS * FCCL_PAD_BYTES;
  uint64_t n = nranks > 0 ? (uint64_t)nranks : 1;
  layout->signalAOffset = FCCL_SLOT_ALIGN;
  layout->signalBOffset = layout->signalAOffset + signalBytes;
  layout->llOffset = fcclAlignUp64(layout->signalBOffset + signalBytes, FCCL_SLOT_ALIGN);
  /* 2 parities x n writers x (llBytes x 2 packet bytes per data byte) == FCCL_LL_AREA_BYTES */
  layout->llBytes = (uint64_t)FCCL_LL_AREA_BYTES / (4 * n) / FCCL_SLOT_ALIGN * FCCL_SLOT_ALIGN;
  layout->ll128Offset = layout->llOffset + FCCL_LL_AREA_BYTES;
  layout->ll128Lines = n > 1 ? (uint64_t)FCCL_LL128_AREA_BYTES / (2 * (n - 1)) / FCCL_LL128_LINE_BYTES : 0;
  layout->inboxOffset = layout->ll128Offset + (n > 1 ? FCCL_LL128_AREA_BYTES : 0);
  /* One rank stages nothing but keeps one region per parity, so that forced staged algorithms still run. */
  const uint64_t peers = n > 1 ? n - 1 : 1;
  layout->chunkBytes = stagingBytes / (4 * peers) / FCCL_SLOT_ALIGN * FCCL_SLOT_ALIGN;
  layout->resultOffset = layout->inboxOffset + 2 * peers * layout->chunkBytes;
  layout->totalBytes = layout->resultOffset + 2 * peers * layout->chunkBytes;
}

/* Index of writer's region of one parity among a receiver's per-peer regions (writer != receiver; 0 for one
 * rank): [2 parities][nranks - 1], peers in the order receiver + 1, receiver + 2, ... modulo nranks. */
static inline FCCL_HOST_DEVICE uint64_t fcclPeerRegion(int nranks, uint64_t parity, int writer, int receiver) {
  if (nranks < 2) return parity;
  /* writer - receiver - 1 lies in [-nranks, nranks - 2]: one conditional add instead of an integer modulo, which
   * kernels evaluate per peer. */
  int distance = writer - receiver - 1;
  if (distance < 0) distance += nranks;
  return parity * (uint64_t)(nranks - 1) + (uint64_t)distance;
}

/* Byte offset, in receiver's slot, of writer's LL128 region of one parity (writer != receiver). */
static inline FCCL_HOST_DEVICE uint64_t fcclLL128RegionOffset(const fcclSlotLayout* layout, int nranks, uint64_t parity,
                                                            int writer, int receiver) {
  return layout->ll128Offset + fcclPeerRegion(nranks, parity, writer, receiver) * layout->ll128Lines *
                                   FCCL_LL128_LINE_BYTES;
}

/*
 * Error report of the communicator's kernels, in host memory mapped into the device (cudaHostAlloc(...,
 * cudaHostAllocMapped)): written once, by the first kernel that gives up, the code last and after a system fence,
 * so the host sees the details whenever it sees the code.
 */
typedef struct {
  int32_t errorCode;   /* fcclResult_t; 0 while nothing failed */
  int32_t errorPeer;   /* rank that was waited for */
  int32_t errorBlock;
  int32_t errorPhase;  /* fcclDevPhase_t */
  int32_t errorKernel; /* fcclDevKernel_t */
  int32_t errorRank;   /* the rank that gave up (this one) */
  uint64_t errorEpoch;
  uint64_t errorWaitedNs;
  uint32_t errorPrint;     /* the print of this rank's call */
  uint32_t errorPeerPrint; /* fcclInvalidUsage: the print of the peer's call of the same epoch */
  uint64_t errorDetail;    /* fcclInvalidArgument found in a call's input on the device (errorPeer's): what was wrong
                            * (the MoE dispatch: (token << 35) | (top-k entry << 32) | the expert's low 32 bits) */
  uint64_t reserved[1];
} fcclDevHostWords;
FCCL_STATIC_ASSERT(sizeof(fcclDevHostWords) == 64, "fcclDevHostWords layout");

/* Device memory owned by the communicator's device state: per-block epochs and the error claim word. */
typedef struct {
  uint64_t epochs[FCCL_DEVICE_MAX_BLOCKS]; /* all equal between kernels: epoch of the next call */
  int32_t errorClaim;                      /* 0 until the first failing kernel claims the report */
  int32_t reserved[15];
} fcclDevState;
FCCL_STATIC_ASSERT(sizeof(fcclDevState) == FCCL_DEVICE_MAX_BLOCKS * 8 + 64, "fcclDevState layout");

/* What waited when a kernel gave up (errorPhase). */
typedef enum {
  FCCL_PHASE_BARRIER = 1,
  FCCL_PHASE_LL = 2,          /* LL packets of a peer */
  FCCL_PHASE_READY = 3,       /* a peer reaching the call (registered buffers) */
  FCCL_PHASE_INBOX = 4,       /* a peer's staged input */
  FCCL_PHASE_RESULT = 5,      /* an owner's reduced chunk */
  FCCL_PHASE_DONE = 6,        /* a peer finishing with this rank's buffers */
  FCCL_PHASE_LL128 = 7,       /* LL128 lines of a peer */
  FCCL_PHASE_CONSUMED = 8,    /* a peer to have copied a staging round out, before its parity is written again */
  FCCL_PHASE_COUNTS = 9,      /* no wait: a variable call's counts in device memory do not fit its capacities
                               * (errorPeer: the rank whose count, -1: their sum; errorWaitedNs: the value) */
  FCCL_PHASE_MOE_COUNTS = 10, /* MoE dispatch: a peer's rows per expert */
  FCCL_PHASE_MOE_DATA = 11,   /* MoE dispatch: a peer's tokens */
  FCCL_PHASE_MOE_RESULT = 12, /* MoE combine: a peer's expert outputs */
  FCCL_PHASE_MOE_FREE = 13,   /* MoE: a peer to have read its staging of the layout's previous call */
  FCCL_PHASE_MOE_GRID = 14,   /* MoE: the other blocks of this rank's kernel (a grid barrier) */
  FCCL_PHASE_MOE_ROUTING = 15 /* MoE dispatch: invalid routing (fcclInvalidArgument, not a wait) */
} fcclDevPhase_t;

/* The device-side communicator: constant for the communicator's life, passed by value to each kernel. */
typedef struct {
  uint64_t slots[FCCL_DEVICE_MAX_RANKS]; /* device address of each rank's slot (ours at [rank]) */
  uint64_t state;                        /* fcclDevState* in device memory */
  uint64_t hostWords;                    /* fcclDevHostWords*: device address of the mapped host words */
  uint64_t abortFlag;                    /* int32_t*: device address of comm->abortFlag (host page, mapped) */
  uint64_t timeoutNs;                    /* spin bound of every wait (FCCL_TIMEOUT) */
  fcclSlotLayout layout;
  int32_t rank;
  int32_t nranks;
  uint64_t reserved;
} fcclDevComm;
FCCL_STATIC_ASSERT(sizeof(fcclDevComm) == 8 * FCCL_DEVICE_MAX_RANKS + 32 + sizeof(fcclSlotLayout) + 16,
                   "fcclDevComm layout");

/* How the registered two-shot's reduce-scatter moves each owner's units of the other ranks' inputs
 * (allreduce_twoshot_reg.cu). */
typedef enum {
  FCCL_SCATTER_PULL = 0, /* the owner loads them from every rank's input */
  FCCL_SCATTER_PUSH = 1, /* 2 ranks, out of place: the kernel stores them into the owner's output */
  FCCL_SCATTER_COPY = 2, /* as push, by a copy-engine copy the host enqueues before the kernel, after a barrier */
  FCCL_SCATTER_INBOX = 3  /* 2 ranks, out of place, a share within one staging chunk: the kernel stores them into the
                           * owner's inbox, which needs no "ready" (its reuse follows from the epochs) */
} fcclScatter_t;

/* Arguments of one collective call, passed by value (so a captured graph replays them as they were). For the
 * all-reduce and the reduce count and bytes are the message's; for all-gather, reduce-scatter, broadcast, gather and
 * scatter they are one block's (a rank's contribution, a rank's result, the broadcast message). */
typedef struct {
  uint64_t sendbuf;                        /* this rank's input */
  uint64_t recvbuf;                        /* this rank's output (== sendbuf in place) */
  uint64_t peerSend[FCCL_DEVICE_MAX_RANKS]; /* registered algorithms: every rank's input, mapped here */
  uint64_t peerRecv[FCCL_DEVICE_MAX_RANKS]; /* registered algorithms: every rank's output, mapped here */
  uint64_t count;                          /* elements */
  uint64_t bytes;                          /* count * element size */
  uint64_t roundUnits;                     /* staged two-shot: 16-byte units per owner and round */
  int32_t inPlace;                         /* sendbuf == recvbuf (the same on every rank) */
  int32_t scatter;                         /* registered two-shot: fcclScatter_t */
  int32_t root;                            /* broadcast, reduce, gather, scatter: the root rank */
  uint32_t print;                          /* the call's fingerprint (fcclPrintMake), carried by every flag */
  /* A pre-multiplied sum (FCCL_DEVICE_OP_PREMULSUM): its scalar as the bits of the call's datatype (zero-extended),
   * or, when scalarPtr is not 0, the device address the kernel reads it from when it runs. */
  uint64_t scalar;
  uint64_t scalarPtr;
} fcclDevArgs;
FCCL_STATIC_ASSERT(sizeof(fcclDevArgs) == 16 * FCCL_DEVICE_MAX_RANKS + 72, "fcclDevArgs layout");

/* fcclAllReduceAddRMSNorm: a row of datatype is at most this many bytes, because each thread keeps its share of the
 * row in registers between the sum of squares and the output (fused_norm_shape.h: how a row's work is laid out). */
#define FCCL_FUSED_MAX_ROW_BYTES 65536u

/* fcclAllReduceAddRMSNorm's forms (docs/fused.md#how-the-data-moves): every rank reduces and normalises every row
 * (one-shot), or the rows it owns and then all-gathers their results (two-shot). */
#define FCCL_FUSED_ONESHOT 0
#define FCCL_FUSED_TWOSHOT 1
/* Not a form of its own: the one-shot form run by the kernel it had before the row kernel (one block of 512 threads
 * per row, fused_norm_legacy.cu), kept for comparison measurements (FCCL_FUSED_KERNEL=legacy). fcclFusedArgs.form
 * only: the form as the fingerprint and the choice know it is FCCL_FUSED_ONESHOT. */
#define FCCL_FUSED_ONESHOT_LEGACY 2

/* Arguments of one fcclAllReduceAddRMSNorm call, passed by value. */
typedef struct {
  uint64_t input;                           /* tokens x hidden of datatype */
  uint64_t residual;                        /* the same, read and written; 0: none */
  uint64_t weight;                          /* hidden of datatype; 0: ones */
  uint64_t output;                          /* tokens x hidden of outtype */
  uint64_t scale;                           /* float*: static (read) or dynamic (written per token); 0: none */
  uint64_t peerInput[FCCL_DEVICE_MAX_RANKS]; /* registered: every rank's input, mapped here */
  uint64_t tokens;
  uint64_t hidden;
  uint64_t roundRows;                       /* one-shot staged: rows per round (each at a 16-byte aligned pitch);
                                             * two-shot: rows per owner and round */
  float eps;
  int32_t scaleMode;                        /* fcclScaleMode_t */
  int32_t registered;                       /* 1: read the peers' inputs in place; 0: staged in rounds */
  int32_t form;                             /* FCCL_FUSED_ONESHOT, FCCL_FUSED_TWOSHOT (or _ONESHOT_LEGACY) */
  uint32_t print;                           /* the call's fingerprint (fcclPrintMake), carried by every flag */
  uint32_t rowsPerBlock;                    /* row groups per block (fused_norm_shape.h): the launch's block size is
                                             * this many times the row's threads */
} fcclFusedArgs;
FCCL_STATIC_ASSERT(sizeof(fcclFusedArgs) == 8 * FCCL_DEVICE_MAX_RANKS + 88, "fcclFusedArgs layout");

#endif /* FCCL_DEVICE_HOST_H_ */
