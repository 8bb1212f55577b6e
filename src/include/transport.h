/*
 * Peer memory of a communicator: its slot in the per-process arenas of shared buffers (mapped by every rank),
 * and the user buffers registered with fcclCommRegister. docs/ipc.md describes the design.
 *
 * At init every rank of the communicator agrees on one arena slot index free on all ranks, takes it (allocating,
 * zeroing and exporting a chunk where it has none), maps each peer's chunk through the process registry (a chunk
 * already mapped for another communicator is reused: its reference count goes up) and checks each mapping for
 * real: a value written through it is read back by the owner. Ranks of the same process use each other's chunks
 * directly (peer access), with no IPC.
 */
#ifndef FCCL_TRANSPORT_H_
#define FCCL_TRANSPORT_H_

#include "comm.h"
#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

/* The out-of-band exchange the transport uses during init, registration and teardown. fcclTransportInit wraps
 * the communicator's bootstrap; tests bring their own. */
struct fcclTransportExchange {
  void* ctx;
  /* In place: every rank's bytesPerRank bytes at allData + rank * bytesPerRank are gathered to every rank. */
  fcclResult_t (*allGather)(void* ctx, void* allData, size_t bytesPerRank);
  fcclResult_t (*barrier)(void* ctx);
};

/*
 * Sets up comm->transport: a slot of slotBytes bytes (the device layer's fcclDeviceSlotBytes(nranks)) in this
 * device's arena and every peer's slot mapped, verified by a write/read-back. Uses comm->rank, nranks, cudaDev,
 * timeoutMs, abortFlag and comm->bootstrap. Collective; blocks (bounded). On failure comm->transport stays NULL,
 * nothing is left mapped and every rank returns an error (naming the GPU pair when the P2P check failed).
 */
fcclResult_t fcclTransportInit(struct fcclComm* comm, size_t slotBytes);

/* fcclTransportInit with another exchange (kept for registration and teardown; ex is copied). */
fcclResult_t fcclTransportInitWithExchange(struct fcclComm* comm, size_t slotBytes,
                                           const struct fcclTransportExchange* ex);

/*
 * Tears down comm->transport: the caller has drained the communicator's work on its streams. Then a bounded
 * barrier, every mapping released (and registrations the application left behind), a second barrier, and the slot
 * given back to the arena (chunks are freed when the device's last communicator goes). When a barrier fails (dead
 * peer, abort) everything local is still released, the slot is quarantined (never handed out again while the
 * arena lives) and the error returned. NULL comm->transport: nothing to do.
 */
fcclResult_t fcclTransportFini(struct fcclComm* comm);

/* Device pointer, valid on comm's device, to this communicator's slot in peer's arena chunk (peer == rank: our
 * own slot). NULL for a rank out of range or a comm without transport. */
void* fcclTransportPeerSlot(struct fcclComm* comm, int peer);

/* Usable bytes of each slot (the slotBytes given at init). */
size_t fcclTransportSlotBytes(struct fcclComm* comm);

/* The global slot index this communicator holds (its ranks all hold the same one); -1 without transport. */
int fcclTransportSlotIndex(struct fcclComm* comm);

/*
 * Whether [ptr, ptr + bytes) lies inside a buffer this rank registered with fcclCommRegister (and inside every
 * peer's registered buffer at the same offset). Returns 1 and fills peerPtrs[r] (nranks entries) with peer r's
 * registered base plus the same offset (peerPtrs[rank] = ptr), as device pointers valid on comm's device; 0 when
 * not registered. In-place use of registered buffers therefore requires every rank to pass the same offset from
 * its registered base, as NCCL's symmetric registration does.
 */
int fcclTransportLookup(struct fcclComm* comm, const void* ptr, size_t bytes, void* peerPtrs[]);

/*
 * For an all-reduce being captured into a CUDA graph on stream with unregistered buffers: registers recvbuf (and
 * sendbuf when it differs) with every rank, held by the captured graph (a CUDA user object) until it is destroyed,
 * and fills peerSend / peerRecv (nranks entries) like fcclTransportLookup. These registrations are not seen by
 * fcclTransportLookup: a rank's graph may be gone while a peer's lives, so eager calls on the same buffers stage.
 * Collective on the host (every rank captures the call; bounded by the comm's timeout). *registered = 0 with
 * fcclSuccess when every rank skips alike: two ranks share a process (one thread may drive both), a rank could not
 * attach a registration to its graph, the ranks disagree on in place, or a buffer cannot be shared (the call then
 * stages). Errors: a failed exchange (dead peer, timeout, abort) and out of host memory.
 */
fcclResult_t fcclTransportGraphRegister(struct fcclComm* comm, void* stream, void* sendbuf, void* recvbuf,
                                        size_t bytes, void* peerSend[], void* peerRecv[], int* registered);

/*
 * Releases the registrations of captured graphs that CUDA has destroyed since the last call (all != 0: every one,
 * for teardown; graphs still alive then lose their peer mappings). Cheap when there is nothing to release. Called
 * from the communicator's own calls, never concurrently with them.
 */
fcclResult_t fcclTransportReleaseGraphRegistrations(struct fcclComm* comm, int all);

#endif /* FCCL_TRANSPORT_H_ */
