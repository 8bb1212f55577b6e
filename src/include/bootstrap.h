/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bootstrap layer: out-of-band exchange among the ranks of a communicator while it is created and destroyed.
 * One ops table (struct fcclBootstrapOps), one file per method: TCP rendezvous through a unique id (its two
 * sides in tcp_root.c, the root server, and tcp_ring.c, the ranks; the launcher-variable form in bootstrap_env.c),
 * the application's callbacks (bootstrap_external.c), an existing NCCL communicator (bootstrap_nccl.c).
 *
 * What other layers use: fcclBootstrapAllGather, fcclBootstrapBarrier, and struct fcclPeerInfo (comm->peerInfo[r]
 * holds what rank r said about itself at init: same host and process are hostHash/pidNs/pid equality).
 * Every operation is collective over the communicator, bounded by the bootstrap's timeout and abort flag, and
 * must be called by all ranks in the same order, one at a time per bootstrap (not from two threads at once).
 * No CUDA in this layer except the NCCL method: the sockets, the TCP method and the peer-info checks are plain host
 * code, testable without a GPU.
 */
#ifndef FCCL_BOOTSTRAP_H_
#define FCCL_BOOTSTRAP_H_

#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

/* Bumped whenever a frame's layout or meaning changes; ranks and roots of different versions refuse each other. */
#define FCCL_BOOTSTRAP_PROTOCOL_VERSION 2u
/* A communicator's secret: the key of the MACs by which ranks and root prove they hold it (never sent). */
#define FCCL_BOOTSTRAP_SECRET_BYTES 32
/* Upper bound on nranks accepted by the bootstrap (and so by fcclCommInitRank). */
#define FCCL_BOOTSTRAP_MAX_RANKS 4096

struct fcclBootstrap;

struct fcclBootstrapOps {
  const char* name; /* "tcp", "external", "nccl": shown in logs */
  fcclResult_t (*allGather)(struct fcclBootstrap* bootstrap, void* allData, size_t bytesPerRank);
  fcclResult_t (*barrier)(struct fcclBootstrap* bootstrap);
  /* Frees the method's state; local only (never talks to peers), safe after any failure or abort. */
  void (*destroy)(struct fcclBootstrap* bootstrap);
  /* The address this rank reaches its peers from (union fcclSocketAddress*, port 0); 0 when it has one. NULL for
   * methods without sockets of their own. */
  int (*localAddress)(const struct fcclBootstrap* bootstrap, void* addr);
  /* The communicator's secret (FCCL_BOOTSTRAP_SECRET_BYTES into out), which only its ranks hold; 0 when it has one.
   * NULL for methods without one (the application's callbacks, NCCL). */
  int (*secret)(const struct fcclBootstrap* bootstrap, uint8_t* out);
};

struct fcclBootstrap {
  const struct fcclBootstrapOps* ops;
  int rank;
  int nranks;
  int timeoutMs;          /* bound on each operation */
  volatile int* abortFlag; /* may be NULL; when it becomes non-zero every wait returns promptly */
  int pid;                /* the process that made it: a child of fork() may not use it (its peers are the parent's) */
  int inCallback;         /* atomic: non-zero while an application callback runs (external method), unbounded */
  void* impl;             /* the method's state */
};

/*
 * All-gather in place: this rank's bytesPerRank bytes are at allData + rank * bytesPerRank; on success allData
 * holds every rank's bytes in rank order. bytesPerRank may be 0 (then it is a barrier). After a failure the
 * bootstrap is broken: later operations fail at once with fcclRemoteError.
 * @return fcclSuccess; fcclTimeout or fcclRemoteError naming the rank that is missing, died or disagreed;
 *         fcclInvalidUsage when aborted, or when called in a child of fork() of the process that made the bootstrap
 *         (nothing reaches the peers); fcclInvalidArgument for a NULL buffer.
 */
fcclResult_t fcclBootstrapAllGather(struct fcclBootstrap* bootstrap, void* allData, size_t bytesPerRank);

/* Returns once every rank has entered it. Same codes as fcclBootstrapAllGather. */
fcclResult_t fcclBootstrapBarrier(struct fcclBootstrap* bootstrap);

/*
 * Whether one of the application's callbacks (fcclCommInitExternal) is running on this bootstrap now: a wait fccl
 * cannot bound, which fcclCommAbort must not join. Any thread; bootstrap may be NULL.
 */
int fcclBootstrapInCallback(const struct fcclBootstrap* bootstrap);

/*
 * Peer links (liveness.c): one TCP connection between this rank and each rank r with watched[r] != 0, for peers
 * whose process this one cannot watch (another host, another pid namespace, no pidfd_open). After its hello a
 * link carries one byte at most, FCCL_LINK_GOODBYE, sent by a rank that destroys its communicator; the link's end
 * without it (the process ended or aborted: its kernel closes the socket) or a failed keepalive (the host stopped
 * answering within keepaliveMs) is how the other side learns the peer is gone. Collective: every rank calls it, with
 * a symmetric watched[] (r watches s exactly when s watches r); a rank that watches nobody takes part in the
 * exchange only. The lower rank of a pair connects, the higher accepts, checking a secret drawn per rank and handed
 * round by the bootstrap's all-gather, so a local stranger cannot pose as a rank. links[r] receives each link
 * (non-blocking, close-on-exec; -1 where not watched); the caller owns them. Bounded by the bootstrap's timeout.
 * Same codes as fcclBootstrapAllGather; fcclSystemError when no socket can be made.
 */
#define FCCL_LINK_GOODBYE 0x47
fcclResult_t fcclBootstrapPeerLinks(struct fcclBootstrap* bootstrap, const uint8_t* watched, int keepaliveMs,
                                    int* links);

/* What a peer link says now (non-blocking): nothing yet, the goodbye, or its end (errno-style cause in *err: 0 for a
 * plain end of stream, ETIMEDOUT for a failed keepalive, ECONNRESET, ...). */
typedef enum { FCCL_LINK_QUIET = 0, FCCL_LINK_GOODBYE_SEEN, FCCL_LINK_ENDED } fcclLinkState_t;
fcclLinkState_t fcclBootstrapPeerLinkRead(int link, int* err);

/* Sends the goodbye on link without blocking (best effort: a full or broken link is left to end by itself). */
void fcclBootstrapPeerLinkGoodbye(int link);

/* Closes a link (through the socket table that keeps sockets out of fork() children) and sets it to -1. */
void fcclBootstrapPeerLinkClose(int* link);

/* Frees the bootstrap (NULL is fine). Local: no message is sent; peers see the connections close. */
void fcclBootstrapDestroy(struct fcclBootstrap* bootstrap);

/* The timeout to use: configMs when > 0, else FCCL_BOOTSTRAP_TIMEOUT. */
int fcclBootstrapTimeoutMs(int configMs);

/* ---- TCP rendezvous (tcp_root.c, tcp_ring.c) ----------------------------------------------------------------- */

/*
 * Fills a unique id and starts a root thread serving it: listening at FCCL_COMM_ID, else at FCCL_SOCKET_IFNAME's
 * address, else at 127.0.0.1, on a free port. The root waits up to timeoutMs for the first rank, and then until
 * every rank arrived or the first arrived rank's timeout expires; it exits by itself and is joined by the rank of
 * this process that uses the id, by a later fcclBootstrapGetUniqueId, or at process exit.
 */
fcclResult_t fcclBootstrapGetUniqueId(fcclUniqueId* id, int timeoutMs);

/*
 * Same, listening on the loopback interface on a free port whatever FCCL_COMM_ID and FCCL_SOCKET_IFNAME say: for a
 * communicator whose ranks are all processes of this host (the host communicators of the hierarchical path), which
 * must not take the address FCCL_COMM_ID names for the communicator around them.
 */
fcclResult_t fcclBootstrapGetLocalUniqueId(fcclUniqueId* id, int timeoutMs);

/*
 * Same, for a communicator made of ranks of an existing one, near (fcclCommSplit): its root listens where this rank
 * reaches near's peers (near's own address, when its method has one: TCP), else on loopback when local says every
 * rank is a process of this host, else at FCCL_SOCKET_IFNAME's address, else at FCCL_COMM_ID's host; always on a
 * free port (never FCCL_COMM_ID's, which near's own root took). fcclInvalidUsage when the ranks span hosts and none
 * of these is known.
 */
fcclResult_t fcclBootstrapGetUniqueIdNear(const struct fcclBootstrap* near, int local, int timeoutMs, fcclUniqueId* id);

/*
 * Same with a fixed listen address (bound as given) and secret (FCCL_BOOTSTRAP_SECRET_BYTES: fcclCommInitFromEnv's
 * rank 0). The id is written to id.
 */
fcclResult_t fcclBootstrapStartRoot(const void* listenAddr /* union fcclSocketAddress* */, const uint8_t* secret,
                                    int timeoutMs, fcclUniqueId* id);

/* Whether id looks like one from fcclGetUniqueId of this protocol version (fcclInvalidArgument saying why). */
fcclResult_t fcclBootstrapCheckUniqueId(const fcclUniqueId* id);

/*
 * Joins the communicator described by id as rank of nranks over TCP. Validates the id (fcclInvalidArgument),
 * connects to the root, sends this rank's hello, receives every rank's listen address, and connects the ring.
 */
fcclResult_t fcclBootstrapTcpInit(const fcclUniqueId* id, int rank, int nranks, int timeoutMs,
                                  volatile int* abortFlag, struct fcclBootstrap** bootstrap);

/* Stops and joins this process's root serving id, if any (its waiting ranks see the connection close). */
void fcclBootstrapStopRoot(const fcclUniqueId* id);

/*
 * Waits up to timeoutMs for every root thread this process started to finish, and joins them; returns how many
 * are still running. For tests that count threads and file descriptors.
 */
int fcclBootstrapRootsWait(int timeoutMs);

/* ---- launcher variables (bootstrap_env.c) -------------------------------------------------------------------- */

struct fcclEnvLaunch {
  int rank;
  int nranks;
  int localRank;   /* -1 when the launcher did not say */
  char addr[256];  /* host:port where rank 0 listens */
  const char* source; /* "torchrun", "Open MPI", "PMI": which variables were used */
  uint8_t secret[FCCL_BOOTSTRAP_SECRET_BYTES]; /* from FCCL_COMM_SECRET (fcclBootstrapEnvSecret); drawn at random
                                                * for a single rank */
};

/*
 * Reads RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, else OMPI_COMM_WORLD_*, else PMI_RANK/PMI_SIZE, and
 * FCCL_COMM_ID and FCCL_COMM_SECRET. fcclInvalidUsage naming the variable when they are missing, unparsable or
 * inconsistent, or when FCCL_COMM_SECRET is missing or shorter than 16 characters with more than one rank.
 */
fcclResult_t fcclBootstrapEnvResolve(struct fcclEnvLaunch* launch);

/*
 * The secret of a launch: HMAC-SHA256 keyed with FCCL_COMM_SECRET's text over the protocol version, the rendezvous
 * address and the world size. fcclSystemError when libcrypto is missing.
 */
fcclResult_t fcclBootstrapEnvSecret(const char* secretText, const char* addr, int nranks,
                                    uint8_t secret[FCCL_BOOTSTRAP_SECRET_BYTES]);

/* TCP bootstrap for a resolved launch: rank 0 starts the root at launch->addr (bound to exactly that address);
 * every rank then joins it with launch->secret. */
fcclResult_t fcclBootstrapEnvInit(const struct fcclEnvLaunch* launch, int timeoutMs, volatile int* abortFlag,
                                  struct fcclBootstrap** bootstrap);

/* ---- application callbacks (bootstrap_external.c) ------------------------------------------------------------ */

/*
 * The callbacks are copied; their userContext must stay valid until fcclBootstrapDestroy, and until a callback
 * still running returns. The abort flag is checked before each call; no call starts once it is set.
 */
fcclResult_t fcclBootstrapExternalInit(const fcclBootstrapCallbacks_t* callbacks, int rank, int nranks,
                                       volatile int* abortFlag, struct fcclBootstrap** bootstrap);

/* ---- NCCL (bootstrap_nccl.c) --------------------------------------------------------------------------------- */

/*
 * Uses an existing ncclComm_t (NCCL reached with dlopen; the communicator's device must be current). The
 * bootstrap's rank and nranks are the NCCL communicator's. Builds without NCCL return fcclInvalidUsage.
 */
fcclResult_t fcclBootstrapNcclInit(void* ncclComm, int timeoutMs, volatile int* abortFlag,
                                   struct fcclBootstrap** bootstrap);

/* ---- a unique id handed among processes of one host (local_share.c) ----------------------------------------- */

/*
 * Hands *id from the first of n processes of this host to the other n - 1, over an abstract Unix socket named
 * "fccl-share-<name>": pids[i] and ranks[i] are member i's process and rank (ranks for messages only; several members
 * may share a process), me is this member's index, member 0 holds *id on entry, the others receive it. Each side
 * checks the other's process by SO_PEERCRED (a process that is not a member is refused and never sees the id), so
 * the name needs no secret (fcclBootstrapShareName makes one nobody else can take first); every member must be in
 * this pid namespace. A process that is not a member is dropped at connect, and members are served side by side,
 * each connection for at most a second, so neither strangers nor a silent member hold up the others. Bounded by
 * timeoutMs; no abort flag (it serves communicators that already failed).
 * @return fcclSuccess; fcclTimeout naming the members that did not come; fcclSystemError (a socket failed, the name
 *         is taken); fcclRemoteError (the server is not member 0's process); fcclInvalidArgument (bad n or me).
 */
fcclResult_t fcclBootstrapLocalShare(const char* name, const int32_t* pids, const int32_t* ranks, int n, int me,
                                     fcclUniqueId* id, int timeoutMs);

/*
 * A name for fcclBootstrapLocalShare that every member computes alike and a process that is not a member cannot:
 * 2 * FCCL_SHARE_NAME_BYTES hex digits of HMAC-SHA256 keyed with the bootstrap's secret (when its method has one;
 * bootstrap may be NULL) over context (what only the members know and agree on: the communicator's salts, say) and
 * the attempt's number, so that seeing one attempt's name (in /proc/net/unix) tells nothing of the next one's.
 * name needs 2 * FCCL_SHARE_NAME_BYTES + 1 bytes. fcclSystemError when libcrypto is missing.
 */
#define FCCL_SHARE_NAME_BYTES 16
fcclResult_t fcclBootstrapShareName(const struct fcclBootstrap* bootstrap, const void* context, size_t contextBytes,
                                    unsigned attempt, char* name, size_t size);

/* ---- peer information (peer_info.c) -------------------------------------------------------------------------- */

#define FCCL_PEER_BUSID_BYTES 32
#define FCCL_PEER_HOST_BYTES 64

/* What each rank tells the others at init. Plain data with fixed-width fields: it travels as bytes. */
struct fcclPeerInfo {
  uint64_t hostHash;        /* hash of hostname and boot id, or of FCCL_HOSTID: equal when two ranks share a host */
  uint64_t pidNs;           /* inode of /proc/self/ns/pid: with hostHash and pid, identifies a process */
  int32_t pid;
  int32_t rank;
  int32_t nranks;
  int32_t cudaDev;          /* ordinal in the rank's process (after CUDA_VISIBLE_DEVICES) */
  int32_t cudaDriverVersion;
  int32_t fcclVersion;      /* FCCL_VERSION_CODE of the library */
  int32_t computeCapability; /* major * 10 + minor; 0 when unknown */
  uint32_t salt;            /* random, drawn at init: the ranks' salts together tell this communicator from another */
  uint8_t gpuUuid[16];      /* all zero when unknown */
  char busId[FCCL_PEER_BUSID_BYTES]; /* "0000:1b:00.0", NUL-terminated */
  char hostname[FCCL_PEER_HOST_BYTES]; /* NUL-terminated, for messages */
};

/* Fills the host part (hostHash, pidNs, pid, hostname, fcclVersion) and rank/nranks; GPU fields are zeroed.
 * hostHash is FCCL_HOSTID's hash when that is set, else fcclPeerMachineHash(). */
fcclResult_t fcclPeerInfoFillHost(struct fcclPeerInfo* info, int rank, int nranks);

/* The machine's own identity (host name and boot id), whatever FCCL_HOSTID says. */
uint64_t fcclPeerMachineHash(void);

/*
 * Checks what every rank said: slot r holds rank r, the same nranks and fccl version everywhere, and no two ranks
 * on one GPU (same UUID) unless allowSharedDevice. fcclRemoteError (or fcclInvalidUsage for a shared GPU) with a
 * message naming the ranks involved. Different driver versions are only warned about.
 */
fcclResult_t fcclPeerInfoValidate(const struct fcclPeerInfo* infos, int nranks, int allowSharedDevice);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; buf needs 41 bytes. */
const char* fcclPeerUuidString(const uint8_t uuid[16], char* buf, size_t size);

#endif /* FCCL_BOOTSTRAP_H_ */
