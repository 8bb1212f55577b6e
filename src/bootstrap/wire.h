/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bootstrap's wire format: framed messages with explicit little-endian fields, and parsers that check every
 * length and field against limits before anything is used. Parsers are pure (no I/O, no logging): they return a
 * status and say why in a caller buffer, so the caller reports the failure once, with the peer it came from, and
 * the fuzzer can run them at full speed. docs/bootstrap.md#messages has the frames and their limits.
 */
#ifndef FCCL_BOOTSTRAP_WIRE_H_
#define FCCL_BOOTSTRAP_WIRE_H_

#include "bootstrap.h"
#include "socket.h"

#include <stddef.h>
#include <stdint.h>

#define FCCL_WIRE_MAGIC 0x4d424346u /* bytes "FCBM" */
#define FCCL_WIRE_ID_MAGIC 0x44494346u /* bytes "FCID" */
#define FCCL_WIRE_HEADER_BYTES 16
#define FCCL_WIRE_SECRET_BYTES FCCL_BOOTSTRAP_SECRET_BYTES /* the key of every MAC, never on the wire */
#define FCCL_WIRE_NONCE_BYTES 32
#define FCCL_WIRE_MAC_BYTES 32 /* HMAC-SHA256 */
#define FCCL_WIRE_ADDR_BYTES 24
#define FCCL_WIRE_HOST_BYTES 64
#define FCCL_WIRE_HELLO_BYTES (FCCL_WIRE_NONCE_BYTES + 4 * 4 + FCCL_WIRE_ADDR_BYTES + FCCL_WIRE_HOST_BYTES)
#define FCCL_WIRE_CHALLENGE_BYTES (FCCL_WIRE_NONCE_BYTES + FCCL_WIRE_MAC_BYTES)
#define FCCL_WIRE_PROOF_BYTES FCCL_WIRE_MAC_BYTES
#define FCCL_WIRE_RING_HELLO_BYTES (4 + 4 + FCCL_WIRE_MAC_BYTES) /* ring hello and ring ack */
#define FCCL_WIRE_PROBE_BYTES 4                                  /* probe and probe ack */
#define FCCL_WIRE_ERROR_TEXT_MAX 512
#define FCCL_WIRE_ERROR_FIXED_BYTES 16
#define FCCL_WIRE_WELCOME_FIXED_BYTES 8
#define FCCL_WIRE_WELCOME_ENTRY_BYTES (FCCL_WIRE_ADDR_BYTES + FCCL_WIRE_NONCE_BYTES)
#define FCCL_WIRE_WELCOME_BYTES(nranks) \
  (FCCL_WIRE_WELCOME_FIXED_BYTES + (size_t)(nranks)*FCCL_WIRE_WELCOME_ENTRY_BYTES + FCCL_WIRE_MAC_BYTES)
#define FCCL_WIRE_WELCOME_MAX_BYTES FCCL_WIRE_WELCOME_BYTES(FCCL_BOOTSTRAP_MAX_RANKS)
/* Largest all-gather or barrier chunk a frame may announce; the receiver also requires the exact size it expects. */
#define FCCL_WIRE_MAX_DATA_BYTES (1u << 30)
/* Largest frame the small-frame reader accepts (everything but the welcome and the ring's data). */
#define FCCL_WIRE_SMALL_MAX (FCCL_WIRE_ERROR_FIXED_BYTES + FCCL_WIRE_ERROR_TEXT_MAX)
/* Bytes the unique id uses out of FCCL_UNIQUE_ID_BYTES; the rest must be zero. */
#define FCCL_WIRE_ID_USED_BYTES (4 + 4 + FCCL_WIRE_SECRET_BYTES + FCCL_WIRE_ADDR_BYTES)

typedef enum {
  FCCL_WIRE_HELLO = 1,      /* rank -> root: who I am, where I listen, my nonce (no proof yet) */
  FCCL_WIRE_WELCOME = 2,    /* root -> rank: every rank's listen address and nonce, with the root's MAC */
  FCCL_WIRE_ERROR = 3,      /* anyone -> anyone: the init or operation failed, and why */
  FCCL_WIRE_RING_HELLO = 4, /* rank -> next rank (and lower -> higher rank of a peer link): my rank and its MAC */
  FCCL_WIRE_ALLGATHER = 5,  /* ring step of an all-gather: one rank's chunk */
  FCCL_WIRE_BARRIER = 6,    /* ring step of a barrier: empty */
  FCCL_WIRE_CHALLENGE = 7,  /* root -> rank: the root's nonce and its proof over the hello */
  FCCL_WIRE_PROOF = 8,      /* rank -> root: the rank's proof over the hello and the root's nonce */
  FCCL_WIRE_RING_ACK = 9,   /* the accepting end of a ring connection or peer link -> the connecting end: its MAC */
  FCCL_WIRE_PROBE = 10,     /* ring, backwards: "I wait for your data of operation seq: are you waiting too?" */
  FCCL_WIRE_PROBE_ACK = 11, /* ring, forwards: "yes, I am waiting for my own previous rank" */
  FCCL_WIRE_TYPE_MAX = 11
} fcclWireType_t;

typedef enum {
  FCCL_WIRE_OK = 0,
  FCCL_WIRE_BAD_MAGIC,   /* not an fccl frame (garbage, another protocol) */
  FCCL_WIRE_BAD_VERSION, /* an fccl frame of another protocol version */
  FCCL_WIRE_BAD_TYPE,
  FCCL_WIRE_BAD_LENGTH,  /* length over the type's limit, or not what the payload layout needs */
  FCCL_WIRE_BAD_FIELD    /* a field out of range */
} fcclWireStatus_t;

struct fcclWireHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t length; /* payload bytes after the header */
  uint32_t seq;    /* operation sequence number (ring frames), 0 otherwise */
};

struct fcclWireHello {
  uint8_t nonce[FCCL_WIRE_NONCE_BYTES]; /* fresh for this init: the root's proofs and the ring's MACs cover it */
  int32_t rank;
  int32_t nranks;
  int32_t timeoutMs; /* this rank's bound; the root judges missing ranks before it expires */
  int32_t pid;
  union fcclSocketAddress listenAddr; /* family 0 when nranks == 1 (no ring) */
  char host[FCCL_WIRE_HOST_BYTES];    /* NUL-terminated, printable */
};

struct fcclWireChallenge {
  uint8_t nonce[FCCL_WIRE_NONCE_BYTES]; /* the root's, fresh for its rendezvous */
  uint8_t mac[FCCL_WIRE_MAC_BYTES];     /* the root's proof (tcp_auth.c) */
};

/* A ring hello or ring ack (and a peer link's). */
struct fcclWireRingHello {
  int32_t rank;
  int32_t nranks;
  uint8_t mac[FCCL_WIRE_MAC_BYTES];
};

struct fcclWireError {
  int32_t result;   /* an fcclResult_t other than success and in-progress */
  int32_t culprit;  /* the rank that failed or is missing; -1 when none is known */
  int32_t reporter; /* the rank that detected it; -1 for the root */
  char text[FCCL_WIRE_ERROR_TEXT_MAX + 1]; /* NUL-terminated; unprintable bytes replaced by '?' when parsed */
};

/* The unique id's content. */
struct fcclWireId {
  uint32_t protocolVersion;
  uint8_t secret[FCCL_WIRE_SECRET_BYTES];
  union fcclSocketAddress rootAddr;
};

/* Human-readable name of a status ("bad magic"). */
const char* fcclWireStatusName(fcclWireStatus_t status);

/* Parses a 16-byte header and checks the length against the type's limits. */
fcclWireStatus_t fcclWireParseHeader(const uint8_t* buf, size_t size, struct fcclWireHeader* header, char* why,
                                     size_t whySize);
fcclWireStatus_t fcclWireParseHello(const uint8_t* payload, size_t size, struct fcclWireHello* hello, char* why,
                                    size_t whySize);
fcclWireStatus_t fcclWireParseChallenge(const uint8_t* payload, size_t size, struct fcclWireChallenge* challenge,
                                        char* why, size_t whySize);
/* A ring hello or a ring ack (the same layout). */
fcclWireStatus_t fcclWireParseRingHello(const uint8_t* payload, size_t size, struct fcclWireRingHello* hello,
                                        char* why, size_t whySize);
/* A probe or a probe ack: the sender's rank. */
fcclWireStatus_t fcclWireParseProbe(const uint8_t* payload, size_t size, int32_t* rank, char* why, size_t whySize);
fcclWireStatus_t fcclWireParseError(const uint8_t* payload, size_t size, struct fcclWireError* error, char* why,
                                    size_t whySize);
/*
 * addrs and nonces (FCCL_WIRE_NONCE_BYTES each) have room for capacity entries (NULL: only validate); *nranks
 * receives the count. The MAC is the payload's last FCCL_WIRE_MAC_BYTES, over everything before it (the caller
 * checks it).
 */
fcclWireStatus_t fcclWireParseWelcome(const uint8_t* payload, size_t size, union fcclSocketAddress* addrs,
                                      uint8_t* nonces, int capacity, int* nranks, char* why, size_t whySize);
fcclWireStatus_t fcclWireParseId(const uint8_t* buf, size_t size, struct fcclWireId* id, char* why, size_t whySize);

/* Header and payload in one buffer, dispatched on the type (what a receiver does; the fuzz target's entry). */
fcclWireStatus_t fcclWireParseMessage(const uint8_t* buf, size_t size, char* why, size_t whySize);

/* Encoders write header + payload to out (room for the returned size) and return the frame's size. */
void fcclWireEncodeHeader(uint8_t* out, uint16_t type, uint32_t length, uint32_t seq);
size_t fcclWireEncodeHello(uint8_t* out, const struct fcclWireHello* hello);
size_t fcclWireEncodeChallenge(uint8_t* out, const struct fcclWireChallenge* challenge);
/* The rank's proof: a frame of type FCCL_WIRE_PROOF carrying mac. */
size_t fcclWireEncodeProof(uint8_t* out, const uint8_t mac[FCCL_WIRE_MAC_BYTES]);
/* type: FCCL_WIRE_RING_HELLO or FCCL_WIRE_RING_ACK. */
size_t fcclWireEncodeRingHello(uint8_t* out, uint16_t type, const struct fcclWireRingHello* hello);
/* type: FCCL_WIRE_PROBE or FCCL_WIRE_PROBE_ACK, for operation seq. */
size_t fcclWireEncodeProbe(uint8_t* out, uint16_t type, uint32_t seq, int32_t rank);
/* Text longer than FCCL_WIRE_ERROR_TEXT_MAX is cut. out needs FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX. */
size_t fcclWireEncodeError(uint8_t* out, const struct fcclWireError* error);
/*
 * out needs FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_WELCOME_BYTES(nranks). The MAC (the frame's last
 * FCCL_WIRE_MAC_BYTES) is left zero: the caller computes it over the payload before it and writes it there.
 */
size_t fcclWireEncodeWelcome(uint8_t* out, const union fcclSocketAddress* addrs, const uint8_t* nonces, int nranks);
/* Writes the whole FCCL_UNIQUE_ID_BYTES id (unused bytes zeroed). */
void fcclWireEncodeId(uint8_t* out, const struct fcclWireId* id);

/*
 * Incremental reader for small frames (all but the welcome and the ring's data) on a non-blocking socket, so one
 * silent or slow connection never holds up the others. Frames longer than FCCL_WIRE_SMALL_MAX are malformed here.
 */
struct fcclWireReader {
  uint8_t buf[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
  size_t got;
  struct fcclWireHeader header; /* valid once got >= FCCL_WIRE_HEADER_BYTES */
};

typedef enum {
  FCCL_READ_MORE = 0,    /* nothing complete yet */
  FCCL_READ_FRAME = 1,   /* a whole frame is in buf: header, then payload at FCCL_WIRE_HEADER_BYTES */
  FCCL_READ_CLOSED = 2,  /* the peer closed (before a whole frame) */
  FCCL_READ_ERROR = 3,   /* recv failed (errno in *err) */
  FCCL_READ_MALFORMED = 4 /* *status and why say what was wrong */
} fcclWireReadResult_t;

void fcclWireReaderInit(struct fcclWireReader* reader);
fcclWireReadResult_t fcclWireReaderProgress(struct fcclWireReader* reader, int fd, int* err,
                                            fcclWireStatus_t* status, char* why, size_t whySize);

#endif /* FCCL_BOOTSTRAP_WIRE_H_ */
