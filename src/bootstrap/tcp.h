/*
 * The TCP bootstrap method, private to src/bootstrap. Two sides share it: the root server (tcp_root.c), a thread
 * started by fcclGetUniqueId that collects one hello per rank, checks the secret, protocol version, rank and
 * nranks of each, and answers every rank with all ranks' listen addresses; and the rank side (tcp_ring.c), which
 * says hello to the root, then connects a ring (each rank to the next) that carries all-gathers and barriers.
 * Every wait is a poll() of at most FCCL_SOCKET_POLL_SLICE_MS that watches the abort flag and a deadline.
 * Failures travel as error frames, from the root to every rank and along the ring in both directions, so every
 * rank learns which rank is missing or gone. docs/bootstrap.md#the-tcp-method has the protocol and
 * docs/bootstrap.md#failures the failure behaviour.
 */
#ifndef FCCL_BOOTSTRAP_TCP_H_
#define FCCL_BOOTSTRAP_TCP_H_

#include "fccl.h"

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

/* ---- the root's side, called by a rank (tcp_root.c) ---------------------------------------------------------- */

/*
 * The root of this process serving secret, if any: unlinked and joined (it finishes right after the welcome).
 * A rank of this process calls it once its ring is up, since by then every rank had its welcome.
 */
void fcclTcpRootClaim(uint64_t secret);

#endif /* FCCL_BOOTSTRAP_TCP_H_ */
