/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Peer memory of a communicator: its slot in the per-process arenas of shared buffers (mapped by every rank),
 * and the user buffers registered with fcclCommRegister. docs/ipc.md describes the design.
 *
 * At init every rank of the communicator agrees on one arena slot index free on all ranks, takes it (allocating,
 * zeroing and exporting a chunk where it has none), maps each peer's chunk through the process's mappings (a chunk
 * already mapped for another communicator is reused: its reference count goes up) and checks each mapping for
 * real: a value written through it is read back by the owner. Ranks of the same process use each other's chunks
 * directly (peer access), with no IPC.
 */
#ifndef FCCL_TRANSPORT_H_
#define FCCL_TRANSPORT_H_

#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

/* The out-of-band exchange the transport uses during init, registration and teardown: core wraps the
 * communicator's bootstrap in it, tests bring their own. */
struct fcclTransportExchange {
  void* ctx;
  /* In place: every rank's bytesPerRank bytes at allData + rank * bytesPerRank are gathered to every rank. */
  fcclResult_t (*allGather)(void* ctx, void* allData, size_t bytesPerRank);
  fcclResult_t (*barrier)(void* ctx);
};

#define FCCL_TRANSPORT_NAME_MAX 64

/* What the transport needs to know about the communicator it serves; copied at init. */
struct fcclTransportParams {
  int rank;
  int nranks;
  int cudaDev;
  int timeoutMs;                   /* bound on every host-side wait for peers */
  volatile int* abortFlag;         /* non-zero: every wait gives up and teardown does not wait for peers */
  const char* name;                /* shown in log lines; may be NULL */
  size_t slotBytes;                /* bytes of this communicator's slot in every rank's arena (> 0) */
  struct fcclTransportExchange ex; /* kept for registration and teardown */
};

struct fcclTransport;
struct fcclRegistration;

/*
 * A transport for the communicator params describes: a slot of params->slotBytes in this device's arena and every
 * peer's slot mapped, verified by a write/read-back. Collective; blocks (bounded). On success *transport is set
 * (with release semantics: other threads may read it for statistics). On failure *transport stays NULL, nothing is
 * left mapped and every rank returns an error (naming the GPU pair when the P2P check failed).
 */
fcclResult_t fcclTransportInit(const struct fcclTransportParams* params, struct fcclTransport** transport);

/*
 * Tears the transport down and frees it: the caller has drained the communicator's work on its streams. Then a
 * bounded barrier, every mapping released (and registrations the application left behind), a second barrier, and
 * the slot given back to the arena (chunks are freed when the device's last communicator goes). When a barrier
 * fails (dead peer, abort) everything local is still released, the slot is quarantined (never handed out again
 * while the arena lives) and the error returned. NULL: nothing to do.
 */
fcclResult_t fcclTransportFini(struct fcclTransport* transport);

/* Device pointer, valid on the communicator's device, to its slot in peer's arena chunk (peer == rank: our own
 * slot). NULL for a rank out of range or a NULL transport. */
void* fcclTransportPeerSlot(struct fcclTransport* transport, int peer);

/* Usable bytes of each slot (params->slotBytes at init); 0 for NULL. */
size_t fcclTransportSlotBytes(struct fcclTransport* transport);

/* The global slot index this communicator holds (its ranks all hold the same one); -1 for NULL. */
int fcclTransportSlotIndex(struct fcclTransport* transport);

/* ---- user buffers (register.c) ------------------------------------------------------------------------------ */

/*
 * fcclCommRegister's work: registers [buf, buf + size) with every rank (collective; bounded by the timeout); bad
 * arguments are carried into the exchange, so every rank fails alike. fcclCommDeregister's: releases handle once
 * every rank's handle was valid (a bad one on any rank: every rank returns an error, nothing is released). The
 * error codes are the public calls'.
 */
fcclResult_t fcclTransportRegister(struct fcclTransport* transport, void* buf, size_t size,
                                   struct fcclRegistration** handle);
fcclResult_t fcclTransportDeregister(struct fcclTransport* transport, struct fcclRegistration* handle);

/*
 * Whether [ptr, ptr + bytes) lies inside a buffer this rank registered with fcclCommRegister (and inside every
 * peer's registered buffer at the same offset). Returns 1 and fills peerPtrs[r] (nranks entries) with peer r's
 * registered base plus the same offset (peerPtrs[rank] = ptr), as device pointers valid on the communicator's
 * device; 0 when not registered. In-place use of registered buffers therefore requires every rank to pass the
 * same offset from its registered base, as NCCL's symmetric registration does.
 */
int fcclTransportLookup(struct fcclTransport* transport, const void* ptr, size_t bytes, void* peerPtrs[]);

/* ---- buffers of captured graphs (graph_register.c) ---------------------------------------------------------- */

/*
 * For a collective being captured into a CUDA graph on stream with unregistered buffers: registers the buffers its
 * peers reach (recvbuf and sendbuf; NULL for one they do not: sendBytes and recvBytes each) with every rank, held
 * by the captured graph (a CUDA user object) until it is destroyed, and fills peerSend / peerRecv (nranks entries,
 * NULL for a buffer not registered) like fcclTransportLookup. These registrations are not seen by
 * fcclTransportLookup: a rank's graph may be gone while a peer's lives, so eager calls on the same buffers stage.
 * Collective on the host (every rank captures the call; bounded by the timeout). *registered = 0 with fcclSuccess
 * when every rank skips alike: two ranks share a process (one thread may drive both), a rank could not attach a
 * registration to its graph, the ranks disagree on inPlace, or a buffer cannot be shared (the call then stages).
 * Errors: a failed exchange (dead peer, timeout, abort) and out of host memory.
 */
fcclResult_t fcclTransportGraphRegister(struct fcclTransport* transport, void* stream, void* sendbuf,
                                        size_t sendBytes, void* recvbuf, size_t recvBytes, int inPlace,
                                        void* peerSend[], void* peerRecv[], int* registered);

/*
 * Releases the registrations of captured graphs that CUDA has destroyed since the last call (all != 0: every one,
 * for teardown; graphs still alive then lose their peer mappings). Cheap when there is nothing to release. Called
 * from the communicator's own calls, never concurrently with them. NULL: nothing to do.
 */
fcclResult_t fcclTransportReleaseGraphRegistrations(struct fcclTransport* transport, int all);

/* ---- memory for registration (ipc.c) and statistics --------------------------------------------------------- */

/* fcclMemAlloc / fcclMemFree: exportable device memory on the current device, and its release. */
fcclResult_t fcclTransportMemAlloc(void** ptr, size_t size);
fcclResult_t fcclTransportMemFree(void* ptr);

struct fcclTransportStats {
  /* the process's table of peer mappings (all communicators together) */
  uint64_t openMappings;
  uint64_t mappingReferences;
  uint64_t bytesMapped;
  uint64_t totalOpens;
  uint64_t totalCloses;
  /* the process's own shared buffers (every arena) */
  uint64_t arenaChunks;
  uint64_t arenaBytes;
  /* one transport (0 for NULL) */
  uint64_t registrations;      /* live user registrations */
  uint64_t graphRegistrations; /* buffers held by captured graphs */
  uint64_t deviceBytes;        /* its share of its arena chunk as allocated: its slot and the slot's check words */
  uint64_t peerBytes;          /* the other processes' chunks its slot lives in, as mapped here */
};

/* A consistent snapshot; transport may be NULL (process-wide numbers only). Any thread; never loads the driver. */
void fcclTransportGetStats(struct fcclTransport* transport, struct fcclTransportStats* stats);

#endif /* FCCL_TRANSPORT_H_ */
