/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MACs of the TCP bootstrap's handshakes (tcp.h, docs/bootstrap.md#the-handshake). Each is HMAC-SHA256 keyed
 * with the communicator's secret (a peer link's: the accepting rank's link key) over a label naming its purpose,
 * the protocol version, and the fresh nonces and fields it vouches for. Distinct labels keep a MAC made for one
 * purpose from passing for another (the root's proof for a rank's, a ring hello for its ack); the nonces, drawn
 * afresh by each side for each rendezvous, keep an old MAC from passing again.
 */
#include "crypto.h"
#include "tcp.h"
#include "wire.h"

#include <string.h>

static void putLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* HMAC(key, label || version || parts...). At most 5 parts. */
static fcclResult_t labelledMac(const uint8_t* key, size_t keyBytes, const char* label, const struct fcclMacPart* parts,
                                int nparts, uint8_t* mac) {
  uint8_t version[4];
  putLe32(version, FCCL_BOOTSTRAP_PROTOCOL_VERSION);
  struct fcclMacPart all[8] = {{label, strlen(label) + 1}, {version, sizeof(version)}};
  for (int i = 0; i < nparts && i < 6; i++) all[2 + i] = parts[i];
  return fcclMac(key, keyBytes, all, 2 + nparts, mac);
}

fcclResult_t fcclTcpHandshakeMac(const uint8_t* secret, int fromRoot, const uint8_t* helloPayload,
                                 const uint8_t* rootNonce, uint8_t* mac) {
  const struct fcclMacPart parts[] = {{helloPayload, FCCL_WIRE_HELLO_BYTES}, {rootNonce, FCCL_WIRE_NONCE_BYTES}};
  return labelledMac(secret, FCCL_WIRE_SECRET_BYTES, fromRoot ? "fccl root proof" : "fccl rank proof", parts, 2, mac);
}

fcclResult_t fcclTcpWelcomeMac(const uint8_t* secret, const uint8_t* rankNonce, const uint8_t* rootNonce,
                               const uint8_t* body, size_t bodyBytes, uint8_t* mac) {
  const struct fcclMacPart parts[] = {{rankNonce, FCCL_WIRE_NONCE_BYTES},
                                      {rootNonce, FCCL_WIRE_NONCE_BYTES},
                                      {body, bodyBytes}};
  return labelledMac(secret, FCCL_WIRE_SECRET_BYTES, "fccl welcome", parts, 3, mac);
}

fcclResult_t fcclTcpRingMac(const uint8_t* secret, uint16_t type, const uint8_t* peerNonce, int rank, int nranks,
                            uint8_t* mac) {
  uint8_t fields[8];
  putLe32(fields, (uint32_t)rank);
  putLe32(fields + 4, (uint32_t)nranks);
  const struct fcclMacPart parts[] = {{peerNonce, FCCL_WIRE_NONCE_BYTES}, {fields, sizeof(fields)}};
  return labelledMac(secret, FCCL_WIRE_SECRET_BYTES, type == FCCL_WIRE_RING_ACK ? "fccl ring ack" : "fccl ring hello",
                     parts, 2, mac);
}

fcclResult_t fcclTcpLinkMac(const uint8_t* key, uint16_t type, int lower, int higher, int nranks, uint8_t* mac) {
  uint8_t fields[12];
  putLe32(fields, (uint32_t)lower);
  putLe32(fields + 4, (uint32_t)higher);
  putLe32(fields + 8, (uint32_t)nranks);
  const struct fcclMacPart part = {fields, sizeof(fields)};
  return labelledMac(key, FCCL_WIRE_SECRET_BYTES, type == FCCL_WIRE_RING_ACK ? "fccl link ack" : "fccl link hello",
                     &part, 1, mac);
}
