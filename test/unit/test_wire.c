/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bootstrap's wire format without a network: every parser against valid, truncated, oversized and out-of-range
 * input; the incremental reader over a socketpair; address parsing; launcher variables; and a short random
 * mutation run (the libFuzzer target in test/fuzz goes further).
 */
#include "bootstrap.h"
#include "check.h"
#include "param.h"
#include "socket.h"
#include "test.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static char why[256];

static struct fcclWireHello validHello(void) {
  struct fcclWireHello hello;
  memset(&hello, 0, sizeof(hello));
  for (int i = 0; i < FCCL_WIRE_NONCE_BYTES; i++) hello.nonce[i] = (uint8_t)(0xa0 + i);
  hello.rank = 2;
  hello.nranks = 4;
  hello.timeoutMs = 1500;
  hello.pid = 4242;
  fcclSocketLoopback(&hello.listenAddr, 40000);
  snprintf(hello.host, sizeof(hello.host), "node-7");
  return hello;
}

static void testHeader(void) {
  uint8_t buf[FCCL_WIRE_HEADER_BYTES];
  struct fcclWireHeader h;
  fcclWireEncodeHeader(buf, FCCL_WIRE_ALLGATHER, 1000, 77);
  EXPECT_EQ_INT(fcclWireParseHeader(buf, sizeof(buf), &h, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT_EQ_INT(h.type, FCCL_WIRE_ALLGATHER);
  EXPECT_EQ_INT(h.length, 1000);
  EXPECT_EQ_INT(h.seq, 77);
  EXPECT_EQ_INT(fcclWireParseHeader(buf, 15, &h, why, sizeof(why)), FCCL_WIRE_BAD_LENGTH);

  uint8_t bad[FCCL_WIRE_HEADER_BYTES];
  memcpy(bad, buf, sizeof(bad));
  bad[0] ^= 1;
  EXPECT_EQ_INT(fcclWireParseHeader(bad, sizeof(bad), &h, why, sizeof(why)), FCCL_WIRE_BAD_MAGIC);
  EXPECT_STR_CONTAINS(why, "magic");
  memcpy(bad, buf, sizeof(bad));
  bad[4] = 99; /* version */
  EXPECT_EQ_INT(fcclWireParseHeader(bad, sizeof(bad), &h, why, sizeof(why)), FCCL_WIRE_BAD_VERSION);
  EXPECT_STR_CONTAINS(why, "protocol version 99");
  memcpy(bad, buf, sizeof(bad));
  bad[6] = 0; /* type 0 */
  EXPECT_EQ_INT(fcclWireParseHeader(bad, sizeof(bad), &h, why, sizeof(why)), FCCL_WIRE_BAD_TYPE);
  bad[6] = FCCL_WIRE_TYPE_MAX + 1;
  EXPECT_EQ_INT(fcclWireParseHeader(bad, sizeof(bad), &h, why, sizeof(why)), FCCL_WIRE_BAD_TYPE);

  /* Per-type length limits. */
  struct {
    uint16_t type;
    uint32_t length;
    fcclWireStatus_t expect;
  } cases[] = {
      {FCCL_WIRE_HELLO, FCCL_WIRE_HELLO_BYTES, FCCL_WIRE_OK},
      {FCCL_WIRE_HELLO, FCCL_WIRE_HELLO_BYTES + 1, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_HELLO, FCCL_WIRE_HELLO_BYTES - 1, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_RING_HELLO, FCCL_WIRE_RING_HELLO_BYTES, FCCL_WIRE_OK},
      {FCCL_WIRE_RING_HELLO, 0, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_RING_ACK, FCCL_WIRE_RING_HELLO_BYTES, FCCL_WIRE_OK},
      {FCCL_WIRE_RING_ACK, FCCL_WIRE_RING_HELLO_BYTES - 1, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_CHALLENGE, FCCL_WIRE_CHALLENGE_BYTES, FCCL_WIRE_OK},
      {FCCL_WIRE_CHALLENGE, FCCL_WIRE_CHALLENGE_BYTES + 1, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_PROOF, FCCL_WIRE_PROOF_BYTES, FCCL_WIRE_OK},
      {FCCL_WIRE_PROOF, 8, FCCL_WIRE_BAD_LENGTH}, /* no room for a short secret in its place */
      {FCCL_WIRE_PROBE, FCCL_WIRE_PROBE_BYTES, FCCL_WIRE_OK},
      {FCCL_WIRE_PROBE_ACK, FCCL_WIRE_PROBE_BYTES + 4, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_ERROR, FCCL_WIRE_ERROR_FIXED_BYTES, FCCL_WIRE_OK},
      {FCCL_WIRE_ERROR, FCCL_WIRE_ERROR_FIXED_BYTES + FCCL_WIRE_ERROR_TEXT_MAX, FCCL_WIRE_OK},
      {FCCL_WIRE_ERROR, FCCL_WIRE_ERROR_FIXED_BYTES + FCCL_WIRE_ERROR_TEXT_MAX + 1, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_WELCOME, FCCL_WIRE_WELCOME_MAX_BYTES, FCCL_WIRE_OK},
      {FCCL_WIRE_WELCOME, FCCL_WIRE_WELCOME_BYTES(1) - 1, FCCL_WIRE_BAD_LENGTH}, /* a welcome without its MAC */
      {FCCL_WIRE_WELCOME, FCCL_WIRE_WELCOME_MAX_BYTES + 1, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_WELCOME, 0xffffffffu, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_ALLGATHER, FCCL_WIRE_MAX_DATA_BYTES, FCCL_WIRE_OK},
      {FCCL_WIRE_ALLGATHER, FCCL_WIRE_MAX_DATA_BYTES + 1u, FCCL_WIRE_BAD_LENGTH},
      {FCCL_WIRE_BARRIER, 0, FCCL_WIRE_OK},
      {FCCL_WIRE_BARRIER, 1, FCCL_WIRE_BAD_LENGTH},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    fcclWireEncodeHeader(buf, cases[i].type, cases[i].length, 0);
    fcclWireStatus_t status = fcclWireParseHeader(buf, sizeof(buf), &h, why, sizeof(why));
    EXPECT_MSG(status == cases[i].expect, "type %u length %u: got %s, expected %s", cases[i].type, cases[i].length,
               fcclWireStatusName(status), fcclWireStatusName(cases[i].expect));
  }
}

static void testHello(void) {
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES];
  struct fcclWireHello hello = validHello(), parsed;
  size_t size = fcclWireEncodeHello(frame, &hello);
  EXPECT_EQ_INT(size, sizeof(frame));
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size, why, sizeof(why)), FCCL_WIRE_OK);
  uint8_t* payload = frame + FCCL_WIRE_HEADER_BYTES;
  EXPECT_EQ_INT(fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES, &parsed, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT(memcmp(parsed.nonce, hello.nonce, sizeof(hello.nonce)) == 0);
  EXPECT_EQ_INT(parsed.rank, 2);
  EXPECT_EQ_INT(parsed.nranks, 4);
  EXPECT_EQ_INT(parsed.timeoutMs, 1500);
  EXPECT_EQ_INT(parsed.pid, 4242);
  EXPECT(strcmp(parsed.host, "node-7") == 0);
  EXPECT_EQ_INT(parsed.listenAddr.sa.sa_family, AF_INET);
  EXPECT_EQ_INT(ntohs(parsed.listenAddr.sin.sin_port), 40000);
  EXPECT_EQ_INT(ntohl(parsed.listenAddr.sin.sin_addr.s_addr), INADDR_LOOPBACK);
  EXPECT_EQ_INT(fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES - 1, &parsed, why, sizeof(why)),
                FCCL_WIRE_BAD_LENGTH);

  /* Each field out of range, one at a time. */
  struct fcclWireHello h;
#define HELLO_CASE(stmt, text)                                                                            \
  do {                                                                                                    \
    h = validHello();                                                                                     \
    stmt;                                                                                                 \
    fcclWireEncodeHello(frame, &h);                                                                       \
    why[0] = '\0';                                                                                        \
    fcclWireStatus_t st = fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES, &parsed, why, sizeof(why));  \
    EXPECT_MSG(st == FCCL_WIRE_BAD_FIELD, "%s: got %s", #stmt, fcclWireStatusName(st));                   \
    EXPECT_STR_CONTAINS(why, text);                                                                       \
  } while (0)
  HELLO_CASE(h.nranks = 0, "nranks 0");
  HELLO_CASE(h.nranks = FCCL_BOOTSTRAP_MAX_RANKS + 1, "nranks");
  HELLO_CASE(h.rank = 4, "rank 4 outside 0..3");
  HELLO_CASE(h.rank = -1, "rank -1");
  HELLO_CASE(h.timeoutMs = 0, "timeout");
  HELLO_CASE(h.pid = -5, "pid");
  HELLO_CASE(memset(&h.listenAddr, 0, sizeof(h.listenAddr)), "missing address");
  HELLO_CASE(h.listenAddr.sin.sin_port = 0, "port 0");
  HELLO_CASE(h.host[0] = '\n', "unprintable");
#undef HELLO_CASE
  /* A one-rank communicator has no ring and sends no address. */
  h = validHello();
  h.nranks = 1;
  h.rank = 0;
  memset(&h.listenAddr, 0, sizeof(h.listenAddr));
  fcclWireEncodeHello(frame, &h);
  EXPECT_EQ_INT(fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES, &parsed, why, sizeof(why)), FCCL_WIRE_OK);

  /* Raw bytes the encoder never writes. */
  h = validHello();
  fcclWireEncodeHello(frame, &h);
  const size_t addrAt = FCCL_WIRE_NONCE_BYTES + 16; /* nonce, rank, nranks, timeout, pid */
  uint8_t* host = payload + addrAt + FCCL_WIRE_ADDR_BYTES;
  memset(host, 'a', FCCL_WIRE_HOST_BYTES);
  EXPECT_EQ_INT(fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES, &parsed, why, sizeof(why)), FCCL_WIRE_BAD_FIELD);
  EXPECT_STR_CONTAINS(why, "not terminated");
  fcclWireEncodeHello(frame, &h);
  host[20] = 'x'; /* after the NUL */
  EXPECT_EQ_INT(fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES, &parsed, why, sizeof(why)), FCCL_WIRE_BAD_FIELD);
  fcclWireEncodeHello(frame, &h);
  payload[addrAt] = 9; /* address family */
  EXPECT_EQ_INT(fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES, &parsed, why, sizeof(why)), FCCL_WIRE_BAD_FIELD);
  EXPECT_STR_CONTAINS(why, "family 9");
  fcclWireEncodeHello(frame, &h);
  payload[addrAt + 5] = 1; /* scope id on IPv4 */
  EXPECT_EQ_INT(fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES, &parsed, why, sizeof(why)), FCCL_WIRE_BAD_FIELD);

  /* IPv6 survives the round trip. */
  h = validHello();
  memset(&h.listenAddr, 0, sizeof(h.listenAddr));
  h.listenAddr.sin6.sin6_family = AF_INET6;
  h.listenAddr.sin6.sin6_port = htons(1234);
  h.listenAddr.sin6.sin6_addr = in6addr_loopback;
  h.listenAddr.sin6.sin6_scope_id = 3;
  fcclWireEncodeHello(frame, &h);
  EXPECT_EQ_INT(fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES, &parsed, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT_EQ_INT(parsed.listenAddr.sa.sa_family, AF_INET6);
  EXPECT_EQ_INT(parsed.listenAddr.sin6.sin6_scope_id, 3);
  EXPECT(memcmp(&parsed.listenAddr.sin6.sin6_addr, &in6addr_loopback, 16) == 0);
}

static void testRingHelloAndError(void) {
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
  struct fcclWireRingHello ring = {.rank = 3, .nranks = 8}, ringParsed;
  for (int i = 0; i < FCCL_WIRE_MAC_BYTES; i++) ring.mac[i] = (uint8_t)(7 * i);
  size_t size = fcclWireEncodeRingHello(frame, FCCL_WIRE_RING_HELLO, &ring);
  EXPECT_EQ_INT(size, FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_RING_HELLO_BYTES);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT_EQ_INT(fcclWireParseRingHello(frame + FCCL_WIRE_HEADER_BYTES, FCCL_WIRE_RING_HELLO_BYTES, &ringParsed, why,
                                       sizeof(why)),
                FCCL_WIRE_OK);
  EXPECT(ringParsed.rank == 3 && ringParsed.nranks == 8 && memcmp(ringParsed.mac, ring.mac, sizeof(ring.mac)) == 0);
  ring.rank = 8;
  fcclWireEncodeRingHello(frame, FCCL_WIRE_RING_ACK, &ring);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size, why, sizeof(why)), FCCL_WIRE_BAD_FIELD);

  /* The challenge and the proof carry MACs, the probes a rank. */
  struct fcclWireChallenge challenge, challengeParsed;
  for (int i = 0; i < FCCL_WIRE_NONCE_BYTES; i++) challenge.nonce[i] = (uint8_t)i;
  for (int i = 0; i < FCCL_WIRE_MAC_BYTES; i++) challenge.mac[i] = (uint8_t)(255 - i);
  size = fcclWireEncodeChallenge(frame, &challenge);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT_EQ_INT(fcclWireParseChallenge(frame + FCCL_WIRE_HEADER_BYTES, FCCL_WIRE_CHALLENGE_BYTES, &challengeParsed, why,
                                       sizeof(why)),
                FCCL_WIRE_OK);
  EXPECT(memcmp(&challenge, &challengeParsed, sizeof(challenge)) == 0);
  size = fcclWireEncodeProof(frame, challenge.mac);
  EXPECT_EQ_INT(size, FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_PROOF_BYTES);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT(memcmp(frame + FCCL_WIRE_HEADER_BYTES, challenge.mac, FCCL_WIRE_MAC_BYTES) == 0);
  size = fcclWireEncodeProbe(frame, FCCL_WIRE_PROBE, 17, 5);
  struct fcclWireHeader header;
  EXPECT_EQ_INT(fcclWireParseHeader(frame, size, &header, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT_EQ_INT(header.seq, 17);
  int32_t from = -1;
  EXPECT_EQ_INT(fcclWireParseProbe(frame + FCCL_WIRE_HEADER_BYTES, FCCL_WIRE_PROBE_BYTES, &from, why, sizeof(why)),
                FCCL_WIRE_OK);
  EXPECT_EQ_INT(from, 5);
  fcclWireEncodeProbe(frame, FCCL_WIRE_PROBE_ACK, 17, -1);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size, why, sizeof(why)), FCCL_WIRE_BAD_FIELD);

  struct fcclWireError error, parsed;
  memset(&error, 0, sizeof(error));
  error.result = fcclTimeout;
  error.culprit = 5;
  error.reporter = -1;
  snprintf(error.text, sizeof(error.text), "rank 5 did not arrive");
  size = fcclWireEncodeError(frame, &error);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size, why, sizeof(why)), FCCL_WIRE_OK);
  uint8_t* payload = frame + FCCL_WIRE_HEADER_BYTES;
  size_t payloadSize = size - FCCL_WIRE_HEADER_BYTES;
  EXPECT_EQ_INT(fcclWireParseError(payload, payloadSize, &parsed, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT(parsed.result == fcclTimeout && parsed.culprit == 5 && parsed.reporter == -1);
  EXPECT(strcmp(parsed.text, "rank 5 did not arrive") == 0);
  /* Unprintable bytes never reach a log line. */
  payload[FCCL_WIRE_ERROR_FIXED_BYTES] = 0x1b;
  EXPECT_EQ_INT(fcclWireParseError(payload, payloadSize, &parsed, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT_EQ_INT(parsed.text[0], '?');
  /* Text length must match the payload. */
  payload[12] += 1;
  EXPECT_EQ_INT(fcclWireParseError(payload, payloadSize, &parsed, why, sizeof(why)), FCCL_WIRE_BAD_LENGTH);
  int badResults[] = {fcclSuccess, fcclInProgress, fcclNumResults, -3};
  for (size_t i = 0; i < 4; i++) {
    error.result = badResults[i];
    size = fcclWireEncodeError(frame, &error);
    EXPECT_MSG(fcclWireParseError(payload, size - FCCL_WIRE_HEADER_BYTES, &parsed, why, sizeof(why)) ==
                   FCCL_WIRE_BAD_FIELD,
               "error with result %d accepted", badResults[i]);
  }
  error.result = fcclRemoteError;
  error.culprit = -2;
  size = fcclWireEncodeError(frame, &error);
  EXPECT_EQ_INT(fcclWireParseError(payload, size - FCCL_WIRE_HEADER_BYTES, &parsed, why, sizeof(why)),
                FCCL_WIRE_BAD_FIELD);
  error.culprit = 1;
  error.reporter = FCCL_BOOTSTRAP_MAX_RANKS;
  size = fcclWireEncodeError(frame, &error);
  EXPECT_EQ_INT(fcclWireParseError(payload, size - FCCL_WIRE_HEADER_BYTES, &parsed, why, sizeof(why)),
                FCCL_WIRE_BAD_FIELD);
  /* Overlong text is cut to the limit by the encoder. */
  memset(error.text, 'x', sizeof(error.text) - 1);
  error.text[sizeof(error.text) - 1] = '\0';
  error.reporter = 0;
  size = fcclWireEncodeError(frame, &error);
  EXPECT_EQ_INT(size, FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_ERROR_FIXED_BYTES + FCCL_WIRE_ERROR_TEXT_MAX);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size, why, sizeof(why)), FCCL_WIRE_OK);
}

static void testWelcome(void) {
  enum { N = 5 };
  union fcclSocketAddress addrs[N], parsed[N];
  uint8_t nonces[N * FCCL_WIRE_NONCE_BYTES], parsedNonces[N * FCCL_WIRE_NONCE_BYTES];
  for (int r = 0; r < N; r++) fcclSocketLoopback(&addrs[r], (uint16_t)(30000 + r));
  for (size_t i = 0; i < sizeof(nonces); i++) nonces[i] = (uint8_t)(i * 13 + 1);
  size_t capacity = FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_WELCOME_BYTES(N);
  uint8_t* frame = malloc(capacity);
  size_t size = fcclWireEncodeWelcome(frame, addrs, nonces, N);
  EXPECT_EQ_INT(size, capacity);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size, why, sizeof(why)), FCCL_WIRE_OK);
  uint8_t* payload = frame + FCCL_WIRE_HEADER_BYTES;
  size_t payloadSize = size - FCCL_WIRE_HEADER_BYTES;
  for (size_t i = payloadSize - FCCL_WIRE_MAC_BYTES; i < payloadSize; i++) EXPECT_EQ_INT(payload[i], 0); /* for it */
  int count = 0;
  EXPECT_EQ_INT(fcclWireParseWelcome(payload, payloadSize, parsed, parsedNonces, N, &count, why, sizeof(why)),
                FCCL_WIRE_OK);
  EXPECT_EQ_INT(count, N);
  for (int r = 0; r < N; r++) EXPECT_EQ_INT(ntohs(parsed[r].sin.sin_port), 30000 + r);
  EXPECT(memcmp(nonces, parsedNonces, sizeof(nonces)) == 0);
  EXPECT_EQ_INT(fcclWireParseWelcome(payload, payloadSize, parsed, NULL, N - 1, &count, why, sizeof(why)),
                FCCL_WIRE_BAD_FIELD); /* more ranks than the receiver has room for */
  EXPECT_EQ_INT(fcclWireParseWelcome(payload, payloadSize - 1, parsed, NULL, N, &count, why, sizeof(why)),
                FCCL_WIRE_BAD_LENGTH);
  payload[4] = 1; /* reserved */
  EXPECT_EQ_INT(fcclWireParseWelcome(payload, payloadSize, parsed, NULL, N, &count, why, sizeof(why)),
                FCCL_WIRE_BAD_FIELD);
  payload[4] = 0;
  payload[0] = 0; /* zero ranks */
  EXPECT_EQ_INT(fcclWireParseWelcome(payload, payloadSize, parsed, NULL, N, &count, why, sizeof(why)),
                FCCL_WIRE_BAD_FIELD);
  payload[0] = N;
  payload[FCCL_WIRE_WELCOME_FIXED_BYTES + 2 * FCCL_WIRE_WELCOME_ENTRY_BYTES + 2] = 0; /* rank 2's port -> 0 */
  payload[FCCL_WIRE_WELCOME_FIXED_BYTES + 2 * FCCL_WIRE_WELCOME_ENTRY_BYTES + 3] = 0;
  EXPECT_EQ_INT(fcclWireParseWelcome(payload, payloadSize, parsed, NULL, N, &count, why, sizeof(why)),
                FCCL_WIRE_BAD_FIELD);
  free(frame);
}

static void testId(void) {
  struct fcclWireId id = {.protocolVersion = FCCL_BOOTSTRAP_PROTOCOL_VERSION}, parsed;
  for (int i = 0; i < FCCL_WIRE_SECRET_BYTES; i++) id.secret[i] = (uint8_t)(0xc0 ^ i);
  fcclSocketLoopback(&id.rootAddr, 4444);
  fcclUniqueId raw;
  fcclWireEncodeId((uint8_t*)raw.internal, &id);
  EXPECT_EQ_INT(fcclWireParseId((uint8_t*)raw.internal, sizeof(raw), &parsed, why, sizeof(why)), FCCL_WIRE_OK);
  EXPECT(memcmp(parsed.secret, id.secret, sizeof(id.secret)) == 0);
  EXPECT_EQ_INT(ntohs(parsed.rootAddr.sin.sin_port), 4444);
  EXPECT_EQ_INT(fcclBootstrapCheckUniqueId(&raw), fcclSuccess);

  fcclUniqueId bad = raw;
  bad.internal[100] = 1;
  EXPECT_EQ_INT(fcclWireParseId((uint8_t*)bad.internal, sizeof(bad), &parsed, why, sizeof(why)), FCCL_WIRE_BAD_FIELD);
  bad = raw;
  bad.internal[4] = 1; /* an id of the protocol that sent the secret in clear */
  EXPECT_EQ_INT(fcclWireParseId((uint8_t*)bad.internal, sizeof(bad), &parsed, why, sizeof(why)),
                FCCL_WIRE_BAD_VERSION);
  EXPECT_STR_CONTAINS(why, "protocol version 1, this library speaks 2");
  EXPECT_EQ_INT(fcclBootstrapCheckUniqueId(&bad), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "protocol version");
  memset(&bad, 0, sizeof(bad));
  EXPECT_EQ_INT(fcclWireParseId((uint8_t*)bad.internal, sizeof(bad), &parsed, why, sizeof(why)), FCCL_WIRE_BAD_MAGIC);
  EXPECT_EQ_INT(fcclBootstrapTcpInit(&bad, 0, 2, 1000, NULL, &(struct fcclBootstrap*){NULL}), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "unique id");
  EXPECT_EQ_INT(fcclBootstrapTcpInit(&raw, 2, 2, 1000, NULL, &(struct fcclBootstrap*){NULL}), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclBootstrapTcpInit(&raw, 0, 0, 1000, NULL, &(struct fcclBootstrap*){NULL}), fcclInvalidArgument);
}

static void testMessageFraming(void) {
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES + 1];
  struct fcclWireHello hello = validHello();
  size_t size = fcclWireEncodeHello(frame, &hello);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size - 1, why, sizeof(why)), FCCL_WIRE_BAD_LENGTH);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, size + 1, why, sizeof(why)), FCCL_WIRE_BAD_LENGTH);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, 0, why, sizeof(why)), FCCL_WIRE_BAD_LENGTH);
  EXPECT_EQ_INT(fcclWireParseMessage(frame, 3, why, sizeof(why)), FCCL_WIRE_BAD_LENGTH);
}

/* A mutation run: valid frames with random bytes changed must parse or be refused, never crash (ASan checks). */
static void testMutations(void) {
  uint64_t state = testSeed();
  enum { KINDS = 6 };
  uint8_t frames[KINDS][FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
  size_t sizes[KINDS];
  struct fcclWireHello hello = validHello();
  sizes[0] = fcclWireEncodeHello(frames[0], &hello);
  struct fcclWireRingHello ring = {.rank = 0, .nranks = 2, .mac = {1}};
  sizes[1] = fcclWireEncodeRingHello(frames[1], FCCL_WIRE_RING_HELLO, &ring);
  struct fcclWireError error = {.result = fcclRemoteError, .culprit = 1, .reporter = 0};
  snprintf(error.text, sizeof(error.text), "rank 1 closed its connection");
  sizes[2] = fcclWireEncodeError(frames[2], &error);
  union fcclSocketAddress addrs[3];
  uint8_t nonces[3 * FCCL_WIRE_NONCE_BYTES] = {9};
  for (int r = 0; r < 3; r++) fcclSocketLoopback(&addrs[r], (uint16_t)(1000 + r));
  sizes[3] = fcclWireEncodeWelcome(frames[3], addrs, nonces, 3);
  struct fcclWireChallenge challenge = {.nonce = {3}, .mac = {4}};
  sizes[4] = fcclWireEncodeChallenge(frames[4], &challenge);
  sizes[5] = fcclWireEncodeProbe(frames[5], FCCL_WIRE_PROBE_ACK, 3, 1);
  int accepted = 0, refused = 0;
  for (int iter = 0; iter < 200000; iter++) {
    int which = (int)(testRandom(&state) % KINDS);
    uint8_t buf[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
    memcpy(buf, frames[which], sizes[which]);
    size_t size = sizes[which];
    int flips = 1 + (int)(testRandom(&state) % 3);
    for (int f = 0; f < flips; f++) buf[testRandom(&state) % size] ^= (uint8_t)(1u << (testRandom(&state) % 8));
    if (testRandom(&state) % 8 == 0) size = testRandom(&state) % (size + 1);
    if (fcclWireParseMessage(buf, size, why, sizeof(why)) == FCCL_WIRE_OK)
      accepted++;
    else
      refused++;
  }
  EXPECT(refused > 0);
  EXPECT(accepted > 0); /* flips in free-form fields (nonces, MACs, text, host letters) are legal */
}

static void testReader(void) {
  int sv[2];
  EXPECT_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  struct fcclWireReader reader;
  fcclWireReaderInit(&reader);
  int err = 0;
  fcclWireStatus_t status = FCCL_WIRE_OK;
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES];
  struct fcclWireHello hello = validHello();
  size_t size = fcclWireEncodeHello(frame, &hello);
  EXPECT_EQ_INT(fcclWireReaderProgress(&reader, sv[0], &err, &status, why, sizeof(why)), FCCL_READ_MORE);
  /* One byte at a time: the reader must assemble the frame. */
  for (size_t i = 0; i < size; i++) {
    EXPECT_EQ_INT(write(sv[1], frame + i, 1), 1);
    fcclWireReadResult_t rr = fcclWireReaderProgress(&reader, sv[0], &err, &status, why, sizeof(why));
    EXPECT_EQ_INT(rr, i + 1 == size ? FCCL_READ_FRAME : FCCL_READ_MORE);
  }
  EXPECT_EQ_INT(reader.header.type, FCCL_WIRE_HELLO);

  /* A frame too large for the small-frame reader is refused at its header. */
  fcclWireReaderInit(&reader);
  uint8_t header[FCCL_WIRE_HEADER_BYTES];
  fcclWireEncodeHeader(header, FCCL_WIRE_WELCOME, FCCL_WIRE_WELCOME_MAX_BYTES, 0);
  EXPECT_EQ_INT(write(sv[1], header, sizeof(header)), (long)sizeof(header));
  EXPECT_EQ_INT(fcclWireReaderProgress(&reader, sv[0], &err, &status, why, sizeof(why)), FCCL_READ_MALFORMED);
  EXPECT_EQ_INT(status, FCCL_WIRE_BAD_LENGTH);

  /* Garbage is refused at the header; a close before a whole frame is reported as such. */
  fcclWireReaderInit(&reader);
  EXPECT_EQ_INT(write(sv[1], "GET / HTTP/1.1\r\n\r\n", 18), 18);
  EXPECT_EQ_INT(fcclWireReaderProgress(&reader, sv[0], &err, &status, why, sizeof(why)), FCCL_READ_MALFORMED);
  EXPECT_EQ_INT(status, FCCL_WIRE_BAD_MAGIC);
  char sink[64];
  while (read(sv[0], sink, sizeof(sink)) > 0) {
  }
  fcclWireReaderInit(&reader);
  EXPECT_EQ_INT(write(sv[1], frame, 5), 5);
  close(sv[1]);
  EXPECT_EQ_INT(fcclWireReaderProgress(&reader, sv[0], &err, &status, why, sizeof(why)), FCCL_READ_CLOSED);
  close(sv[0]);
}

static void testAddresses(void) {
  union fcclSocketAddress addr;
  char text[FCCL_SOCKET_ADDR_STR];
  EXPECT_EQ_INT(fcclSocketParseHostPort("127.0.0.1:5000", &addr), fcclSuccess);
  EXPECT(strcmp(fcclSocketAddrToString(&addr, text, sizeof(text)), "127.0.0.1:5000") == 0);
  EXPECT_EQ_INT(fcclSocketParseHostPort("[::1]:80", &addr), fcclSuccess);
  EXPECT(strcmp(fcclSocketAddrToString(&addr, text, sizeof(text)), "[::1]:80") == 0);
  EXPECT_EQ_INT(fcclSocketParseHostPort("localhost:6000", &addr), fcclSuccess);
  const char* bad[] = {"", "nohost", ":80", "1.2.3.4:0", "1.2.3.4:70000", "1.2.3.4:abc", "[::1:80", "1.2.3.4:"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    EXPECT_MSG(fcclSocketParseHostPort(bad[i], &addr) == fcclInvalidArgument, "'%s' was accepted", bad[i]);
  EXPECT_EQ_INT(fcclSocketInterfaceAddress("lo", &addr), fcclSuccess);
  EXPECT_EQ_INT(addr.sa.sa_family, AF_INET);
  EXPECT_EQ_INT(fcclSocketInterfaceAddress("no-such-interface", &addr), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_SOCKET_IFNAME");
}

static void clearLaunchEnv(void) {
  const char* names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                         "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE",
                         "MPI_LOCALRANKID", "FCCL_COMM_ID", "FCCL_COMM_SECRET"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) unsetenv(names[i]);
  fcclParamResetForTest();
}

static void testLaunchEnv(void) {
  struct fcclEnvLaunch launch;
  clearLaunchEnv();
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "RANK and WORLD_SIZE");

  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "29500", 1);
  /* More than one rank: the launcher must export a secret, long enough to be one. */
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_COMM_SECRET is not set");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "openssl rand -hex 16");
  setenv("FCCL_COMM_SECRET", "short", 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_COMM_SECRET has 5 characters");
  const char* secretText = "0123456789abcdef0123456789abcdef";
  setenv("FCCL_COMM_SECRET", secretText, 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  EXPECT_EQ_INT(launch.rank, 3);
  EXPECT_EQ_INT(launch.nranks, 8);
  EXPECT_EQ_INT(launch.localRank, 1);
  EXPECT(strcmp(launch.addr, "10.1.2.3:29501") == 0);
  EXPECT(strcmp(launch.source, "torchrun") == 0);
  /* Every rank derives the same secret from the same launch; another secret, address or size another one, and what
   * a stranger sees (the address and the size) is not enough. */
  uint8_t secret[FCCL_BOOTSTRAP_SECRET_BYTES], other[FCCL_BOOTSTRAP_SECRET_BYTES];
  EXPECT_EQ_INT(fcclBootstrapEnvSecret(secretText, launch.addr, launch.nranks, secret), fcclSuccess);
  EXPECT(memcmp(launch.secret, secret, sizeof(secret)) == 0);
  setenv("RANK", "0", 1);
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  EXPECT(memcmp(launch.secret, secret, sizeof(secret)) == 0);
  EXPECT_EQ_INT(fcclBootstrapEnvSecret(secretText, launch.addr, 9, other), fcclSuccess);
  EXPECT(memcmp(other, secret, sizeof(secret)) != 0);
  EXPECT_EQ_INT(fcclBootstrapEnvSecret(secretText, "10.1.2.3:29502", 8, other), fcclSuccess);
  EXPECT(memcmp(other, secret, sizeof(secret)) != 0);
  EXPECT_EQ_INT(fcclBootstrapEnvSecret("0123456789abcdef0123456789abcdeF", launch.addr, 8, other), fcclSuccess);
  EXPECT(memcmp(other, secret, sizeof(secret)) != 0);
  EXPECT_EQ_INT(fcclBootstrapEnvSecret("", launch.addr, 8, other), fcclSuccess);
  EXPECT(memcmp(other, secret, sizeof(secret)) != 0);
  setenv("RANK", "3", 1);

  setenv("MASTER_ADDR", "::1", 1);
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  EXPECT(strcmp(launch.addr, "[::1]:29501") == 0);
  setenv("FCCL_COMM_ID", "127.0.0.1:7777", 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  EXPECT(strcmp(launch.addr, "127.0.0.1:7777") == 0);

  setenv("RANK", "8", 1);
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "RANK=8 is not below WORLD_SIZE=8");
  setenv("RANK", "x1", 1);
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not an integer");
  setenv("RANK", "1", 1);
  setenv("LOCAL_RANK", "-1", 1);
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclInvalidUsage);

  /* mpirun needs FCCL_COMM_ID. */
  clearLaunchEnv();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_COMM_ID");
  setenv("FCCL_COMM_ID", "[::1]:9000", 1);
  setenv("FCCL_COMM_SECRET", secretText, 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  EXPECT(strcmp(launch.source, "Open MPI") == 0);
  EXPECT_EQ_INT(launch.localRank, -1);
  /* A single rank has nobody to share a secret with: it needs none, and draws its own. */
  clearLaunchEnv();
  setenv("PMI_RANK", "0", 1);
  setenv("PMI_SIZE", "1", 1);
  setenv("MPI_LOCALRANKID", "0", 1);
  setenv("FCCL_COMM_ID", "127.0.0.1:9001", 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  EXPECT(strcmp(launch.source, "PMI") == 0);
  EXPECT_EQ_INT(launch.localRank, 0);
  uint8_t drawn[FCCL_BOOTSTRAP_SECRET_BYTES];
  memcpy(drawn, launch.secret, sizeof(drawn));
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  EXPECT(memcmp(launch.secret, drawn, sizeof(drawn)) != 0);
  clearLaunchEnv();
}

static void testTimeoutParam(void) {
  unsetenv("FCCL_BOOTSTRAP_TIMEOUT");
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclBootstrapTimeoutMs(-1), 60000);
  EXPECT_EQ_INT(fcclBootstrapTimeoutMs(250), 250);
  setenv("FCCL_BOOTSTRAP_TIMEOUT", "1234", 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclBootstrapTimeoutMs(-1), 1234);
  setenv("FCCL_BOOTSTRAP_TIMEOUT", "0", 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclBootstrapTimeoutMs(-1), 60000);
  unsetenv("FCCL_BOOTSTRAP_TIMEOUT");
  fcclParamResetForTest();
}

int main(void) {
  testHeader();
  testHello();
  testRingHelloAndError();
  testWelcome();
  testId();
  testMessageFraming();
  testMutations();
  testReader();
  testAddresses();
  testLaunchEnv();
  testTimeoutParam();
  return testSummary("wire");
}
