/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TCP bootstrap method, private to src/bootstrap. Two sides share it: the root server (tcp_root.c), a thread
 * started by fcclGetUniqueId that admits one rank per slot once it has proven the secret, checks the protocol
 * version, rank and nranks of each, and answers every rank with all ranks' listen addresses and nonces; and the rank
 * side (tcp_join.c), which proves the secret to the root and checks the root's proof, then connects a ring (each rank
 * to the next, each end proving the secret to the other) that carries all-gathers and barriers (tcp_ring.c). The
 * secret never travels: every proof is a MAC over fresh nonces (tcp_auth.c). Every wait is a poll() of at most
 * FCCL_SOCKET_POLL_SLICE_MS that watches the abort flag and a deadline. Failures travel as error frames, from the
 * root to every rank and along the ring in both directions, so every rank learns which rank is missing or gone.
 * docs/bootstrap.md#the-tcp-method has the protocol and docs/bootstrap.md#failures the failure behaviour.
 */
#ifndef FCCL_BOOTSTRAP_TCP_H_
#define FCCL_BOOTSTRAP_TCP_H_

#include "debug.h"
#include "fccl.h"
#include "socket.h"
#include "wire.h"

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

/* ---- error notices (tcp_notice.c), sent by the root and by ranks --------------------------------------------- */

/*
 * Encodes an error frame (result, culprit and reporter ranks, -1 when none; text cut to FCCL_WIRE_ERROR_TEXT_MAX).
 * out needs FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX; returns the frame's size.
 */
size_t fcclTcpEncodeErrorFrame(uint8_t* out, fcclResult_t result, int culprit, int reporter, const char* text);

/*
 * Sends a whole small frame if the socket takes it now, trying for at most 100 ms; used for error notices, which
 * must never block: a peer that does not read must not hold up the failure this side is returning.
 */
void fcclTcpSendNotice(int fd, const uint8_t* frame, size_t size);

/* Reads what is already queued (so that close sends FIN, not a reset that could destroy our reply), then closes. */
void fcclTcpDrainAndClose(int* fd);

/* ---- the handshakes' MACs (tcp_auth.c) ----------------------------------------------------------------------- */

/*
 * Ranks and roots prove that they hold the communicator's secret (FCCL_WIRE_SECRET_BYTES) without sending it:
 * every proof is an HMAC-SHA256 keyed with it over fresh nonces from both sides. docs/bootstrap.md#the-handshake
 * has the exchange. All return fcclSystemError only when libcrypto is missing.
 */

/* The root's proof (fromRoot, in its challenge) or the rank's (its proof frame) over the rank's hello payload
 * (FCCL_WIRE_HELLO_BYTES, which holds the rank's nonce) and the root's nonce. */
fcclResult_t fcclTcpHandshakeMac(const uint8_t* secret, int fromRoot, const uint8_t* helloPayload,
                                 const uint8_t* rootNonce, uint8_t* mac);

/* The welcome's MAC, over the rank's and the root's nonces and the welcome's payload before the MAC. */
fcclResult_t fcclTcpWelcomeMac(const uint8_t* secret, const uint8_t* rankNonce, const uint8_t* rootNonce,
                               const uint8_t* body, size_t bodyBytes, uint8_t* mac);

/* A ring hello's or ring ack's MAC (type says which): the sender's rank and nranks, over the receiver's nonce (from
 * the welcome). */
fcclResult_t fcclTcpRingMac(const uint8_t* secret, uint16_t type, const uint8_t* peerNonce, int rank, int nranks,
                            uint8_t* mac);

/* A peer link's hello or ack (type), keyed with the higher rank's link key, which only the communicator's ranks got
 * (liveness.c). */
fcclResult_t fcclTcpLinkMac(const uint8_t* key, uint16_t type, int lower, int higher, int nranks, uint8_t* mac);

/* ---- connections not yet admitted (tcp_pending.c) ------------------------------------------------------------ */

/*
 * The connections a listener (the root's, a rank's ring listener, a peer link listener) has accepted but that have
 * not proven the secret yet. Any local process can connect, so a stranger must cost the ranks nothing: each frame
 * is read as it arrives (a rank sends its first frame right after connecting, so it is usually there by the time
 * the connection is accepted); every connection has FCCL_TCP_HANDSHAKE_MS from its accept to finish its handshake,
 * whatever it sends meanwhile; at most FCCL_TCP_PENDING_MAX are held, and when the table is full and more wait in
 * the kernel's backlog, the oldest is closed to make room for the next. A rank whose connection is closed that way
 * connects again. Lines about refused connections are rate-limited. docs/bootstrap.md#strangers
 */
#define FCCL_TCP_PENDING_MAX 64
#define FCCL_TCP_HANDSHAKE_MS 1000
/* Refusals logged one by one; after that one line per FCCL_TCP_REFUSAL_SUMMARY_MS says how many more there were. */
#define FCCL_TCP_REFUSALS_LOGGED 8
#define FCCL_TCP_REFUSAL_SUMMARY_MS 2000

struct fcclTcpConn {
  int fd;
  union fcclSocketAddress peer;
  struct fcclWireReader reader;
  int64_t acceptedMs;
  int challenged;             /* root: its hello was answered with the challenge; its proof is awaited */
  struct fcclWireHello hello; /* root: that hello, parsed */
  uint8_t helloPayload[FCCL_WIRE_HELLO_BYTES]; /* root: and as it came, which the proofs cover */
};

struct fcclTcpPending {
  int listenFd;
  int count;
  int64_t acceptAfterMs; /* after a failed accept (out of descriptors) the listener is left alone until then */
  char owner[48];        /* "bootstrap root at 127.0.0.1:4000", "rank 3": names the listener in log lines */
  int refusalsLogged;
  unsigned long refusalsUnlogged; /* since the last line */
  int64_t refusalSummaryMs;
  struct fcclTcpConn conns[FCCL_TCP_PENDING_MAX];
};

void fcclTcpPendingInit(struct fcclTcpPending* p, int listenFd, const char* owner);

/*
 * Accepts one queued connection; returns its index, or -1 when nothing was accepted (none queued, or a failed
 * accept, after which the listener rests for a while). With the table full, the oldest connection is closed first
 * when another is queued. Read the new connection's frame at once.
 */
int fcclTcpPendingAccept(struct fcclTcpPending* p, int64_t now);

/* fcclWireReaderProgress on connection i. */
fcclWireReadResult_t fcclTcpPendingRead(struct fcclTcpPending* p, int i, int* err, fcclWireStatus_t* status, char* why,
                                        size_t whySize);

/*
 * Reads connection i as a ring hello (the ring's and the peer links' first frame): 1 when one arrived whole, with
 * valid fields (hello filled; the caller checks the rank and the MAC, then takes or refuses connection i), 0 when
 * more is to come or the connection was refused (closed early, malformed, another message). what names the frame
 * in the refusal's log line ("ring hello").
 */
int fcclTcpPendingReadHello(struct fcclTcpPending* p, int i, const char* what, struct fcclWireRingHello* hello);

/* Removes connection i and returns its descriptor (the caller owns it now). Indices of the others may change. */
int fcclTcpPendingTake(struct fcclTcpPending* p, int i);

/* Logs (rate-limited, at level) why connection i is refused, then closes and removes it. */
void fcclTcpPendingRefuse(struct fcclTcpPending* p, int i, fcclLogLevel_t level, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Closes every connection that has had FCCL_TCP_HANDSHAKE_MS since its accept. */
void fcclTcpPendingExpire(struct fcclTcpPending* p, int64_t now);

/*
 * Fills fds with the listener (fd -1 while it rests) followed by every held connection, in index order: fds[1 + i]
 * is connection i. fds needs 1 + FCCL_TCP_PENDING_MAX entries; returns how many it filled.
 */
int fcclTcpPendingPollFds(const struct fcclTcpPending* p, struct pollfd* fds, int64_t now);

/* Closes every held connection (not the listener) and logs how many refusals went unlogged. */
void fcclTcpPendingClose(struct fcclTcpPending* p);

/*
 * Sends a whole small frame on a connection that has just been accepted or connected (its send buffer is empty, so
 * it is taken at once); 0 when it could not be sent whole.
 */
int fcclTcpSendFresh(int fd, const uint8_t* frame, size_t size);

/* ---- the ring (tcp_ring.c: operations; tcp_join.c: the rendezvous and the ring's setup) ----------------------- */

/* A rank's TCP bootstrap: its two ring connections. */
struct fcclTcpState {
  int fdNext; /* to (rank + 1) % nranks: we send */
  int fdPrev; /* from (rank - 1) % nranks: we receive */
  uint8_t secret[FCCL_WIRE_SECRET_BYTES];
  uint32_t seq;
  int prevPartial;     /* a small frame to prev was sent in part: no notice may follow it on that connection */
  fcclResult_t broken; /* an earlier operation failed: the ring is out of step */
};

extern const struct fcclBootstrapOps fcclTcpRingOps;

/*
 * How much longer than a wait's own bound a rank waits for a peer that knows more to speak first: for the root's
 * verdict on missing ranks, and for an answer to a ring probe. A quarter of the timeout plus 100 ms, at most 2 s.
 */
static inline int fcclTcpGraceMs(int timeoutMs) {
  int grace = timeoutMs / 4 + 100;
  return grace > 2000 ? 2000 : grace;
}

/*
 * Reports a failure once (FCCL_ERROR), and tells the ring neighbours so they stop waiting and name the same
 * culprit. toNext: whether the stream to next is at a frame boundary (a notice mid-frame would be read as data).
 * docs/bootstrap.md#failures has what each failure looks like to the other ranks.
 */
fcclResult_t fcclTcpRingFail(struct fcclTcpState* t, int rank, fcclResult_t result, int culprit, int toNext,
                             const char* fmt, ...) __attribute__((format(printf, 6, 7)));

/* An error frame arrived (payload, size) from rank from; pass it on (to next only when toNext) and report it. */
fcclResult_t fcclTcpRingRelay(struct fcclTcpState* t, int rank, int toNext, const uint8_t* payload, size_t size,
                              int from, const char* op);

/* ---- the root's side, called by a rank (tcp_root.c) ---------------------------------------------------------- */

/*
 * The root of this process serving secret, if any: unlinked and joined (it finishes right after the welcome).
 * A rank of this process calls it once its ring is up, since by then every rank had its welcome.
 */
void fcclTcpRootClaim(const uint8_t* secret);

#endif /* FCCL_BOOTSTRAP_TCP_H_ */
