/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The transport layer's state of one communicator, shared by its files: transport.c (init, teardown), exchange.c
 * (the collective steps every part takes with the peers), register.c (user buffers), graph_register.c (buffers of
 * captured graphs).
 */
#ifndef FCCL_TRANSPORT_INTERNAL_H_
#define FCCL_TRANSPORT_INTERNAL_H_

#include "arena.h"
#include "fdpass.h"
#include "ipc.h"
#include "mappings.h"
#include "transport.h"

#define FCCL_PCI_BUS_ID_BYTES 16

enum { FCCL_FD_MODE_AUTO = 0, FCCL_FD_MODE_PIDFD = 1, FCCL_FD_MODE_SOCKET = 2 };

/* What every rank says about itself at init (and keeps: registrations need it). */
struct fcclTransportRankInfo {
  uint64_t hostHash;
  uint64_t processNonce;
  int32_t pid;
  int32_t dev; /* device ordinal in its own process */
  char busId[FCCL_PCI_BUS_ID_BYTES];
};

struct fcclTransportPeer {
  struct fcclTransportRankInfo info;
  int sameProcess;
  struct fcclPeerArena* remoteArena; /* another process: its arena, in use by this communicator, which keeps the
                                        mapping of key (the chunk of this communicator's slot) */
  struct fcclMappingKey key;
  uint64_t mappedBytes;      /* the size of that mapping */
  int borrowed;              /* same process: a reference on the peer arena's chunk is held */
  struct fcclArena* peerArena;
  void* chunkBase;           /* the peer's chunk, as comm's device addresses it */
  void* slot;                /* this communicator's slot in it */
};

struct fcclRegistration {
  struct fcclRegistration* next;
  void* buf;
  size_t size;
  void** peerBufs;        /* nranks: each rank's registered buffer as comm's device addresses it */
  size_t* peerSizes;      /* nranks */
  struct fcclMappingKey* keys; /* nranks: mapping keys held (kind 0: none, e.g. own or same-process) */
};

struct fcclTransport {
  struct fcclTransportParams cfg; /* as given at init; cfg.name points at name */
  char name[FCCL_TRANSPORT_NAME_MAX];
  struct fcclMappings* mappings;
  struct fcclArena* arena;
  int slot;
  struct fcclIpcAlloc chunk; /* copy of our own chunk's allocation */
  struct fcclTransportPeer* peers;
  int fdMode;
  uint64_t tagSeed;       /* agreed by all ranks at init */
  uint64_t exchanges;     /* descriptor exchanges so far (all ranks count alike) */
  struct fcclRegistration* registrations;
  uint64_t nRegistrations; /* read by fcclTransportGetStats from any thread: __atomic builtins */
  struct fcclGraphHolder* graphHolders; /* registrations held by captured graphs (graph_register.c; graphLock) */
  uint64_t nGraphRegistrations;         /* buffers they hold; read by fcclTransportGetStats (__atomic builtins) */
  int graphsGone;                       /* a holder's graph was destroyed (set by CUDA's thread; __atomic) */
  int outOfStep;           /* an exchange failed or this rank skipped one: the ranks no longer meet step for step,
                              so nothing waits for them any more (teardown quarantines instead of barriers) */
};

/* One rank's export, as importers need it. */
struct fcclImportItem {
  int active;               /* 0: nothing to import from this rank (self, same process) */
  struct fcclMappingKey key; /* importDev = comm's device */
  size_t size;
  int pieces;
  const int32_t* remoteFds; /* cuMem: the exporter's descriptor numbers (pidfd_getfd) */
  const uint64_t* pieceSizes;
  int pid;
  const char* sockName;     /* this rank's descriptor socket (set for every rank, active or not) */
  void* base;               /* out: local address of the mapping */
  int held;                 /* out: a reference on its mapping is held */
};

/*
 * Maps every active item through the process's mappings (a mapping open already takes a reference). Collective: every
 * rank calls it with its own items, its own exported descriptors (myFds, myPieces: sent over sock, whose name every
 * item's sockName gives for its rank, to peers that cannot pull them with pidfd_getfd) and its local status so far.
 * Ranks learn each other's status: either every rank succeeds or every rank returns an error (unless the exchange
 * itself fails). On failure nothing stays held.
 */
fcclResult_t fcclTransportImport(struct fcclTransport* transport, struct fcclImportItem* items, const int* myFds,
                                 int myPieces, fcclResult_t localStatus, struct fcclFdSocket* sock);

/* Releases what fcclTransportImport took. The first failure is returned; every reference is dropped. */
fcclResult_t fcclTransportReleaseItems(struct fcclTransport* transport, struct fcclImportItem* items);

/* ---- exchange.c: collective steps with the peers ---- */

/* Every collective step goes through these two: a failure marks the transport out of step. */
fcclResult_t fcclTransportAllGather(struct fcclTransport* transport, void* allData, size_t bytesPerRank);
fcclResult_t fcclTransportBarrier(struct fcclTransport* transport);

/*
 * After a collective step that failed on every rank alike (each rank learned the failure through the exchange)
 * and after this rank released what it mapped of its peers: a barrier, so that once it returns 1 no peer maps
 * this rank's memory any more and it may be freed (legacy IPC memory freed under an importer's open mapping is
 * undefined behaviour). Returns 0 without waiting when the transport is out of step or aborted, and when the
 * barrier fails: the caller must then assume peers may still map its memory.
 */
int fcclTransportSettle(struct fcclTransport* transport);

/* Whether two ranks of the communicator live in one process (every rank computes the same answer). */
int fcclTransportRanksShareProcess(const struct fcclTransport* transport);

/* Whether this rank may still wait for its peers: not aborted, and every exchange so far taken in step. */
int fcclTransportInStep(const struct fcclTransport* transport);

/* An all-gather of each rank's status: fcclSuccess when every rank succeeded, else an error naming the first
 * failed rank (the exchange's own failure when it failed). */
fcclResult_t fcclTransportAgree(struct fcclTransport* transport, fcclResult_t localStatus, const char* what);

/* Whether two ranks' records name one process. */
static inline int fcclTransportSameProcess(const struct fcclTransportRankInfo* a,
                                           const struct fcclTransportRankInfo* b) {
  return a->hostHash == b->hostHash && a->processNonce == b->processNonce && a->pid == b->pid;
}

/* splitmix64's finaliser: well-mixed 64-bit values from counters and seeds. */
uint64_t fcclMix64(uint64_t value);

/* ---- register.c: user buffers ---- */

/* Registers [buf, buf + size) with every rank (collective). listed: a user registration (fcclTransportLookup
 * finds it, fcclTransportDeregister releases it); else one held by a captured graph, which the caller keeps and
 * releases with fcclTransportReleaseRegistration. */
fcclResult_t fcclTransportRegisterBuffer(struct fcclTransport* transport, void* buf, size_t size, int listed,
                                         struct fcclRegistration** handle);

/* Drops a registration's peer mappings and frees it (local: no exchange). */
fcclResult_t fcclTransportReleaseRegistration(struct fcclTransport* transport, struct fcclRegistration* reg);

/* Releases every user registration still held (teardown). */
fcclResult_t fcclTransportReleaseRegistrations(struct fcclTransport* transport);

#endif /* FCCL_TRANSPORT_INTERNAL_H_ */
