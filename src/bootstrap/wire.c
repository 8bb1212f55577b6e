/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Frame encoding and parsing. All multi-byte fields are little-endian, written byte by byte, so the layout does
 * not depend on struct padding or the host's byte order. Parsers never trust a length before checking it against
 * the buffer and the type's limit.
 */
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define WIRE_FAMILY_NONE 0
#define WIRE_FAMILY_IPV4 4
#define WIRE_FAMILY_IPV6 6

static void put16(uint8_t* p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static fcclWireStatus_t fail(fcclWireStatus_t status, char* why, size_t whySize, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fcclWireStatus_t fail(fcclWireStatus_t status, char* why, size_t whySize, const char* fmt, ...) {
  if (why && whySize) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(why, whySize, fmt, args);
    va_end(args);
  }
  return status;
}

const char* fcclWireStatusName(fcclWireStatus_t status) {
  switch (status) {
    case FCCL_WIRE_OK: return "ok";
    case FCCL_WIRE_BAD_MAGIC: return "not an fccl bootstrap frame";
    case FCCL_WIRE_BAD_VERSION: return "other protocol version";
    case FCCL_WIRE_BAD_TYPE: return "unknown message type";
    case FCCL_WIRE_BAD_LENGTH: return "bad length";
    case FCCL_WIRE_BAD_FIELD: return "field out of range";
  }
  return "unknown status";
}

/* ---- addresses ---- */

static void encodeAddr(uint8_t* p, const union fcclSocketAddress* addr) {
  memset(p, 0, FCCL_WIRE_ADDR_BYTES);
  if (addr->sa.sa_family == AF_INET) {
    put16(p, WIRE_FAMILY_IPV4);
    put16(p + 2, ntohs(addr->sin.sin_port));
    memcpy(p + 8, &addr->sin.sin_addr, 4);
  } else if (addr->sa.sa_family == AF_INET6) {
    put16(p, WIRE_FAMILY_IPV6);
    put16(p + 2, ntohs(addr->sin6.sin6_port));
    put32(p + 4, addr->sin6.sin6_scope_id);
    memcpy(p + 8, &addr->sin6.sin6_addr, 16);
  }
}

/* allowNone: family 0 (no address) is accepted and decoded as an all-zero address. */
static fcclWireStatus_t decodeAddr(const uint8_t* p, union fcclSocketAddress* addr, int allowNone, char* why,
                                   size_t whySize) {
  memset(addr, 0, sizeof(*addr));
  uint16_t family = get16(p);
  uint16_t port = get16(p + 2);
  if (family == WIRE_FAMILY_NONE) {
    for (int i = 2; i < FCCL_WIRE_ADDR_BYTES; i++)
      if (p[i] != 0) return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "empty address with non-zero bytes");
    return allowNone ? FCCL_WIRE_OK : fail(FCCL_WIRE_BAD_FIELD, why, whySize, "missing address");
  }
  if (port == 0) return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "address with port 0");
  if (family == WIRE_FAMILY_IPV4) {
    for (int i = 4; i < 8; i++)
      if (p[i] != 0) return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "IPv4 address with a scope id");
    for (int i = 12; i < FCCL_WIRE_ADDR_BYTES; i++)
      if (p[i] != 0) return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "IPv4 address with trailing bytes");
    addr->sin.sin_family = AF_INET;
    addr->sin.sin_port = htons(port);
    memcpy(&addr->sin.sin_addr, p + 8, 4);
    return FCCL_WIRE_OK;
  }
  if (family == WIRE_FAMILY_IPV6) {
    addr->sin6.sin6_family = AF_INET6;
    addr->sin6.sin6_port = htons(port);
    addr->sin6.sin6_scope_id = get32(p + 4);
    memcpy(&addr->sin6.sin6_addr, p + 8, 16);
    return FCCL_WIRE_OK;
  }
  return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "unknown address family %u", (unsigned)family);
}

/* ---- header ---- */

void fcclWireEncodeHeader(uint8_t* out, uint16_t type, uint32_t length, uint32_t seq) {
  put32(out, FCCL_WIRE_MAGIC);
  put16(out + 4, (uint16_t)FCCL_BOOTSTRAP_PROTOCOL_VERSION);
  put16(out + 6, type);
  put32(out + 8, length);
  put32(out + 12, seq);
}

fcclWireStatus_t fcclWireParseHeader(const uint8_t* buf, size_t size, struct fcclWireHeader* header, char* why,
                                     size_t whySize) {
  memset(header, 0, sizeof(*header));
  if (size < FCCL_WIRE_HEADER_BYTES)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "%zu bytes, a header needs %d", size, FCCL_WIRE_HEADER_BYTES);
  header->magic = get32(buf);
  header->version = get16(buf + 4);
  header->type = get16(buf + 6);
  header->length = get32(buf + 8);
  header->seq = get32(buf + 12);
  if (header->magic != FCCL_WIRE_MAGIC)
    return fail(FCCL_WIRE_BAD_MAGIC, why, whySize, "bad magic 0x%08x (not an fccl bootstrap frame)", header->magic);
  if (header->version != FCCL_BOOTSTRAP_PROTOCOL_VERSION)
    return fail(FCCL_WIRE_BAD_VERSION, why, whySize, "protocol version %u, this library speaks %u",
                (unsigned)header->version, FCCL_BOOTSTRAP_PROTOCOL_VERSION);
  uint32_t minimum, maximum;
  switch (header->type) {
    case FCCL_WIRE_HELLO: minimum = maximum = FCCL_WIRE_HELLO_BYTES; break;
    case FCCL_WIRE_RING_HELLO:
    case FCCL_WIRE_RING_ACK: minimum = maximum = FCCL_WIRE_RING_HELLO_BYTES; break;
    case FCCL_WIRE_CHALLENGE: minimum = maximum = FCCL_WIRE_CHALLENGE_BYTES; break;
    case FCCL_WIRE_PROOF: minimum = maximum = FCCL_WIRE_PROOF_BYTES; break;
    case FCCL_WIRE_PROBE:
    case FCCL_WIRE_PROBE_ACK: minimum = maximum = FCCL_WIRE_PROBE_BYTES; break;
    case FCCL_WIRE_ERROR:
      minimum = FCCL_WIRE_ERROR_FIXED_BYTES;
      maximum = FCCL_WIRE_ERROR_FIXED_BYTES + FCCL_WIRE_ERROR_TEXT_MAX;
      break;
    case FCCL_WIRE_WELCOME:
      minimum = (uint32_t)FCCL_WIRE_WELCOME_BYTES(1);
      maximum = (uint32_t)FCCL_WIRE_WELCOME_MAX_BYTES;
      break;
    case FCCL_WIRE_ALLGATHER: minimum = 0; maximum = FCCL_WIRE_MAX_DATA_BYTES; break;
    case FCCL_WIRE_BARRIER: minimum = maximum = 0; break;
    default: return fail(FCCL_WIRE_BAD_TYPE, why, whySize, "unknown message type %u", (unsigned)header->type);
  }
  if (header->length < minimum || header->length > maximum)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "message type %u with %u payload bytes (allowed %u..%u)",
                (unsigned)header->type, header->length, minimum, maximum);
  return FCCL_WIRE_OK;
}

/* ---- hello ---- */

static fcclWireStatus_t checkRankFields(int32_t rank, int32_t nranks, char* why, size_t whySize) {
  if (nranks < 1 || nranks > FCCL_BOOTSTRAP_MAX_RANKS)
    return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "nranks %d outside 1..%d", (int)nranks, FCCL_BOOTSTRAP_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "rank %d outside 0..%d", (int)rank, (int)nranks - 1);
  return FCCL_WIRE_OK;
}

size_t fcclWireEncodeHello(uint8_t* out, const struct fcclWireHello* hello) {
  fcclWireEncodeHeader(out, FCCL_WIRE_HELLO, FCCL_WIRE_HELLO_BYTES, 0);
  uint8_t* p = out + FCCL_WIRE_HEADER_BYTES;
  memcpy(p, hello->nonce, FCCL_WIRE_NONCE_BYTES);
  p += FCCL_WIRE_NONCE_BYTES;
  put32(p, (uint32_t)hello->rank);
  put32(p + 4, (uint32_t)hello->nranks);
  put32(p + 8, (uint32_t)hello->timeoutMs);
  put32(p + 12, (uint32_t)hello->pid);
  encodeAddr(p + 16, &hello->listenAddr);
  memset(p + 16 + FCCL_WIRE_ADDR_BYTES, 0, FCCL_WIRE_HOST_BYTES);
  size_t hostLen = strnlen(hello->host, FCCL_WIRE_HOST_BYTES - 1);
  memcpy(p + 16 + FCCL_WIRE_ADDR_BYTES, hello->host, hostLen);
  return FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES;
}

fcclWireStatus_t fcclWireParseHello(const uint8_t* payload, size_t size, struct fcclWireHello* hello, char* why,
                                    size_t whySize) {
  if (size != FCCL_WIRE_HELLO_BYTES)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "hello of %zu bytes, expected %d", size, FCCL_WIRE_HELLO_BYTES);
  memcpy(hello->nonce, payload, FCCL_WIRE_NONCE_BYTES);
  const uint8_t* p = payload + FCCL_WIRE_NONCE_BYTES;
  hello->rank = (int32_t)get32(p);
  hello->nranks = (int32_t)get32(p + 4);
  fcclWireStatus_t status = checkRankFields(hello->rank, hello->nranks, why, whySize);
  if (status != FCCL_WIRE_OK) return status;
  hello->timeoutMs = (int32_t)get32(p + 8);
  hello->pid = (int32_t)get32(p + 12);
  if (hello->timeoutMs <= 0)
    return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "timeout %d ms is not positive", (int)hello->timeoutMs);
  if (hello->pid <= 0) return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "pid %d is not positive", (int)hello->pid);
  status = decodeAddr(p + 16, &hello->listenAddr, hello->nranks == 1, why, whySize);
  if (status != FCCL_WIRE_OK) return status;
  const uint8_t* host = p + 16 + FCCL_WIRE_ADDR_BYTES;
  size_t hostLen = strnlen((const char*)host, FCCL_WIRE_HOST_BYTES);
  if (hostLen == FCCL_WIRE_HOST_BYTES) return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "host name not terminated");
  for (size_t i = 0; i < hostLen; i++)
    if (host[i] < 0x20 || host[i] > 0x7e)
      return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "host name with unprintable byte 0x%02x", host[i]);
  for (size_t i = hostLen; i < FCCL_WIRE_HOST_BYTES; i++)
    if (host[i] != 0) return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "bytes after the host name");
  memcpy(hello->host, host, hostLen + 1);
  return FCCL_WIRE_OK;
}

/* ---- challenge and proof ---- */

size_t fcclWireEncodeChallenge(uint8_t* out, const struct fcclWireChallenge* challenge) {
  fcclWireEncodeHeader(out, FCCL_WIRE_CHALLENGE, FCCL_WIRE_CHALLENGE_BYTES, 0);
  memcpy(out + FCCL_WIRE_HEADER_BYTES, challenge->nonce, FCCL_WIRE_NONCE_BYTES);
  memcpy(out + FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_NONCE_BYTES, challenge->mac, FCCL_WIRE_MAC_BYTES);
  return FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_CHALLENGE_BYTES;
}

fcclWireStatus_t fcclWireParseChallenge(const uint8_t* payload, size_t size, struct fcclWireChallenge* challenge,
                                        char* why, size_t whySize) {
  if (size != FCCL_WIRE_CHALLENGE_BYTES)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "challenge of %zu bytes, expected %d", size,
                FCCL_WIRE_CHALLENGE_BYTES);
  memcpy(challenge->nonce, payload, FCCL_WIRE_NONCE_BYTES);
  memcpy(challenge->mac, payload + FCCL_WIRE_NONCE_BYTES, FCCL_WIRE_MAC_BYTES);
  return FCCL_WIRE_OK;
}

size_t fcclWireEncodeProof(uint8_t* out, const uint8_t mac[FCCL_WIRE_MAC_BYTES]) {
  fcclWireEncodeHeader(out, FCCL_WIRE_PROOF, FCCL_WIRE_PROOF_BYTES, 0);
  memcpy(out + FCCL_WIRE_HEADER_BYTES, mac, FCCL_WIRE_MAC_BYTES);
  return FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_PROOF_BYTES;
}

/* ---- ring hello and ring ack ---- */

size_t fcclWireEncodeRingHello(uint8_t* out, uint16_t type, const struct fcclWireRingHello* hello) {
  fcclWireEncodeHeader(out, type, FCCL_WIRE_RING_HELLO_BYTES, 0);
  uint8_t* p = out + FCCL_WIRE_HEADER_BYTES;
  put32(p, (uint32_t)hello->rank);
  put32(p + 4, (uint32_t)hello->nranks);
  memcpy(p + 8, hello->mac, FCCL_WIRE_MAC_BYTES);
  return FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_RING_HELLO_BYTES;
}

fcclWireStatus_t fcclWireParseRingHello(const uint8_t* payload, size_t size, struct fcclWireRingHello* hello,
                                        char* why, size_t whySize) {
  if (size != FCCL_WIRE_RING_HELLO_BYTES)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "ring hello of %zu bytes, expected %d", size,
                FCCL_WIRE_RING_HELLO_BYTES);
  hello->rank = (int32_t)get32(payload);
  hello->nranks = (int32_t)get32(payload + 4);
  memcpy(hello->mac, payload + 8, FCCL_WIRE_MAC_BYTES);
  return checkRankFields(hello->rank, hello->nranks, why, whySize);
}

/* ---- probe and probe ack ---- */

size_t fcclWireEncodeProbe(uint8_t* out, uint16_t type, uint32_t seq, int32_t rank) {
  fcclWireEncodeHeader(out, type, FCCL_WIRE_PROBE_BYTES, seq);
  put32(out + FCCL_WIRE_HEADER_BYTES, (uint32_t)rank);
  return FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_PROBE_BYTES;
}

fcclWireStatus_t fcclWireParseProbe(const uint8_t* payload, size_t size, int32_t* rank, char* why, size_t whySize) {
  if (size != FCCL_WIRE_PROBE_BYTES)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "probe of %zu bytes, expected %d", size, FCCL_WIRE_PROBE_BYTES);
  *rank = (int32_t)get32(payload);
  if (*rank < 0 || *rank >= FCCL_BOOTSTRAP_MAX_RANKS)
    return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "probe from rank %d", (int)*rank);
  return FCCL_WIRE_OK;
}

/* ---- error ---- */

size_t fcclWireEncodeError(uint8_t* out, const struct fcclWireError* error) {
  size_t textLen = strnlen(error->text, FCCL_WIRE_ERROR_TEXT_MAX);
  fcclWireEncodeHeader(out, FCCL_WIRE_ERROR, (uint32_t)(FCCL_WIRE_ERROR_FIXED_BYTES + textLen), 0);
  uint8_t* p = out + FCCL_WIRE_HEADER_BYTES;
  put32(p, (uint32_t)error->result);
  put32(p + 4, (uint32_t)error->culprit);
  put32(p + 8, (uint32_t)error->reporter);
  put32(p + 12, (uint32_t)textLen);
  memcpy(p + FCCL_WIRE_ERROR_FIXED_BYTES, error->text, textLen);
  return FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_ERROR_FIXED_BYTES + textLen;
}

fcclWireStatus_t fcclWireParseError(const uint8_t* payload, size_t size, struct fcclWireError* error, char* why,
                                    size_t whySize) {
  if (size < FCCL_WIRE_ERROR_FIXED_BYTES || size > FCCL_WIRE_ERROR_FIXED_BYTES + FCCL_WIRE_ERROR_TEXT_MAX)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "error message of %zu bytes", size);
  error->result = (int32_t)get32(payload);
  error->culprit = (int32_t)get32(payload + 4);
  error->reporter = (int32_t)get32(payload + 8);
  uint32_t textLen = get32(payload + 12);
  if (error->result <= fcclSuccess || error->result >= fcclNumResults || error->result == fcclInProgress)
    return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "error message with result code %d", (int)error->result);
  if (error->culprit < -1 || error->culprit >= FCCL_BOOTSTRAP_MAX_RANKS)
    return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "error message naming rank %d", (int)error->culprit);
  if (error->reporter < -1 || error->reporter >= FCCL_BOOTSTRAP_MAX_RANKS)
    return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "error message from rank %d", (int)error->reporter);
  if (textLen != size - FCCL_WIRE_ERROR_FIXED_BYTES)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "error text of %u bytes in %zu payload bytes", textLen, size);
  const uint8_t* text = payload + FCCL_WIRE_ERROR_FIXED_BYTES;
  /* The text only ever goes to a log: unprintable bytes are replaced rather than trusted. */
  for (uint32_t i = 0; i < textLen; i++) error->text[i] = (text[i] >= 0x20 && text[i] <= 0x7e) ? (char)text[i] : '?';
  error->text[textLen] = '\0';
  return FCCL_WIRE_OK;
}

/* ---- welcome ---- */

size_t fcclWireEncodeWelcome(uint8_t* out, const union fcclSocketAddress* addrs, const uint8_t* nonces, int nranks) {
  const uint32_t length = (uint32_t)FCCL_WIRE_WELCOME_BYTES(nranks);
  fcclWireEncodeHeader(out, FCCL_WIRE_WELCOME, length, 0);
  uint8_t* p = out + FCCL_WIRE_HEADER_BYTES;
  put32(p, (uint32_t)nranks);
  put32(p + 4, 0);
  for (int r = 0; r < nranks; r++) {
    uint8_t* entry = p + FCCL_WIRE_WELCOME_FIXED_BYTES + (size_t)r * FCCL_WIRE_WELCOME_ENTRY_BYTES;
    encodeAddr(entry, &addrs[r]);
    memcpy(entry + FCCL_WIRE_ADDR_BYTES, nonces + (size_t)r * FCCL_WIRE_NONCE_BYTES, FCCL_WIRE_NONCE_BYTES);
  }
  memset(p + length - FCCL_WIRE_MAC_BYTES, 0, FCCL_WIRE_MAC_BYTES);
  return FCCL_WIRE_HEADER_BYTES + length;
}

fcclWireStatus_t fcclWireParseWelcome(const uint8_t* payload, size_t size, union fcclSocketAddress* addrs,
                                      uint8_t* nonces, int capacity, int* nranks, char* why, size_t whySize) {
  if (size < FCCL_WIRE_WELCOME_FIXED_BYTES)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "welcome of %zu bytes", size);
  uint32_t count = get32(payload);
  if (count < 1 || count > FCCL_BOOTSTRAP_MAX_RANKS || (addrs && (int)count > capacity))
    return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "welcome for %u ranks (expected 1..%d)", count,
                addrs && capacity < FCCL_BOOTSTRAP_MAX_RANKS ? capacity : FCCL_BOOTSTRAP_MAX_RANKS);
  if (get32(payload + 4) != 0) return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "welcome with reserved bits set");
  if (size != FCCL_WIRE_WELCOME_BYTES(count))
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "welcome for %u ranks in %zu bytes", count, size);
  for (uint32_t r = 0; r < count; r++) {
    const uint8_t* entry = payload + FCCL_WIRE_WELCOME_FIXED_BYTES + (size_t)r * FCCL_WIRE_WELCOME_ENTRY_BYTES;
    union fcclSocketAddress scratch;
    fcclWireStatus_t status = decodeAddr(entry, addrs ? &addrs[r] : &scratch, count == 1, why, whySize);
    if (status != FCCL_WIRE_OK) return status;
    if (nonces) memcpy(nonces + (size_t)r * FCCL_WIRE_NONCE_BYTES, entry + FCCL_WIRE_ADDR_BYTES, FCCL_WIRE_NONCE_BYTES);
  }
  *nranks = (int)count;
  return FCCL_WIRE_OK;
}

/* ---- unique id ---- */

void fcclWireEncodeId(uint8_t* out, const struct fcclWireId* id) {
  memset(out, 0, FCCL_UNIQUE_ID_BYTES);
  put32(out, FCCL_WIRE_ID_MAGIC);
  put32(out + 4, id->protocolVersion);
  memcpy(out + 8, id->secret, FCCL_WIRE_SECRET_BYTES);
  encodeAddr(out + 8 + FCCL_WIRE_SECRET_BYTES, &id->rootAddr);
}

fcclWireStatus_t fcclWireParseId(const uint8_t* buf, size_t size, struct fcclWireId* id, char* why,
                                 size_t whySize) {
  if (size != FCCL_UNIQUE_ID_BYTES)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "unique id of %zu bytes", size);
  if (get32(buf) != FCCL_WIRE_ID_MAGIC)
    return fail(FCCL_WIRE_BAD_MAGIC, why, whySize, "not a unique id from fcclGetUniqueId (bad magic)");
  id->protocolVersion = get32(buf + 4);
  if (id->protocolVersion != FCCL_BOOTSTRAP_PROTOCOL_VERSION)
    return fail(FCCL_WIRE_BAD_VERSION, why, whySize,
                "unique id of bootstrap protocol version %u, this library speaks %u (mixed fccl versions?)",
                id->protocolVersion, FCCL_BOOTSTRAP_PROTOCOL_VERSION);
  memcpy(id->secret, buf + 8, FCCL_WIRE_SECRET_BYTES);
  fcclWireStatus_t status = decodeAddr(buf + 8 + FCCL_WIRE_SECRET_BYTES, &id->rootAddr, 0, why, whySize);
  if (status != FCCL_WIRE_OK) return status;
  for (size_t i = FCCL_WIRE_ID_USED_BYTES; i < FCCL_UNIQUE_ID_BYTES; i++)
    if (buf[i] != 0) return fail(FCCL_WIRE_BAD_FIELD, why, whySize, "unique id with non-zero padding (corrupted?)");
  return FCCL_WIRE_OK;
}

/* ---- whole message ---- */

fcclWireStatus_t fcclWireParseMessage(const uint8_t* buf, size_t size, char* why, size_t whySize) {
  struct fcclWireHeader header;
  fcclWireStatus_t status = fcclWireParseHeader(buf, size, &header, why, whySize);
  if (status != FCCL_WIRE_OK) return status;
  if (size - FCCL_WIRE_HEADER_BYTES != header.length)
    return fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "header announces %u payload bytes, %zu present", header.length,
                size - FCCL_WIRE_HEADER_BYTES);
  const uint8_t* payload = buf + FCCL_WIRE_HEADER_BYTES;
  switch (header.type) {
    case FCCL_WIRE_HELLO: {
      struct fcclWireHello hello;
      return fcclWireParseHello(payload, header.length, &hello, why, whySize);
    }
    case FCCL_WIRE_RING_HELLO:
    case FCCL_WIRE_RING_ACK: {
      struct fcclWireRingHello hello;
      return fcclWireParseRingHello(payload, header.length, &hello, why, whySize);
    }
    case FCCL_WIRE_CHALLENGE: {
      struct fcclWireChallenge challenge;
      return fcclWireParseChallenge(payload, header.length, &challenge, why, whySize);
    }
    case FCCL_WIRE_PROBE:
    case FCCL_WIRE_PROBE_ACK: {
      int32_t rank;
      return fcclWireParseProbe(payload, header.length, &rank, why, whySize);
    }
    case FCCL_WIRE_ERROR: {
      struct fcclWireError error;
      return fcclWireParseError(payload, header.length, &error, why, whySize);
    }
    case FCCL_WIRE_WELCOME: {
      int nranks;
      return fcclWireParseWelcome(payload, header.length, NULL, NULL, 0, &nranks, why, whySize);
    }
    default: return FCCL_WIRE_OK; /* data frames and proofs: any content; the receiver checks what it expects */
  }
}

/* ---- reader ---- */

void fcclWireReaderInit(struct fcclWireReader* reader) { reader->got = 0; }

fcclWireReadResult_t fcclWireReaderProgress(struct fcclWireReader* reader, int fd, int* err,
                                            fcclWireStatus_t* status, char* why, size_t whySize) {
  for (;;) {
    size_t want = FCCL_WIRE_HEADER_BYTES;
    if (reader->got >= FCCL_WIRE_HEADER_BYTES) want += reader->header.length;
    if (reader->got == want && reader->got >= FCCL_WIRE_HEADER_BYTES) return FCCL_READ_FRAME;
    long rc = fcclSocketTryRecv(fd, reader->buf + reader->got, want - reader->got);
    if (rc == 0) return FCCL_READ_CLOSED;
    if (rc < 0) {
      if (errno == EAGAIN) return FCCL_READ_MORE;
      *err = errno;
      return FCCL_READ_ERROR;
    }
    reader->got += (size_t)rc;
    if (reader->got == FCCL_WIRE_HEADER_BYTES) {
      *status = fcclWireParseHeader(reader->buf, reader->got, &reader->header, why, whySize);
      if (*status != FCCL_WIRE_OK) return FCCL_READ_MALFORMED;
      if (reader->header.length > FCCL_WIRE_SMALL_MAX) {
        *status = fail(FCCL_WIRE_BAD_LENGTH, why, whySize, "unexpected message type %u of %u bytes here",
                       (unsigned)reader->header.type, reader->header.length);
        return FCCL_READ_MALFORMED;
      }
    }
  }
}
