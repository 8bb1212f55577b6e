/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the bootstrap's message parsers (src/bootstrap/wire.c): whatever bytes arrive on the
 * root's port or a ring connection, parsing must refuse or accept them without reading out of bounds, overflowing
 * or crashing. Built and run by test/fuzz/fuzz-bootstrap (the meson 'fuzz' suite), seeds in test/fuzz/seeds.
 */
#include "wire.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char why[256];
  /* What a receiver does with a whole frame. */
  (void)fcclWireParseMessage(data, size, why, sizeof(why));

  /* Each payload parser on its own, so the fuzzer reaches their checks without also solving the header. */
  struct fcclWireHello hello;
  (void)fcclWireParseHello(data, size, &hello, why, sizeof(why));
  struct fcclWireRingHello ring;
  (void)fcclWireParseRingHello(data, size, &ring, why, sizeof(why));
  struct fcclWireChallenge challenge;
  (void)fcclWireParseChallenge(data, size, &challenge, why, sizeof(why));
  int32_t rank;
  if (fcclWireParseProbe(data, size, &rank, why, sizeof(why)) == FCCL_WIRE_OK &&
      (rank < 0 || rank >= FCCL_BOOTSTRAP_MAX_RANKS))
    __builtin_trap();
  struct fcclWireError error;
  if (fcclWireParseError(data, size, &error, why, sizeof(why)) == FCCL_WIRE_OK &&
      strlen(error.text) > FCCL_WIRE_ERROR_TEXT_MAX)
    __builtin_trap();
  static union fcclSocketAddress addrs[64];
  static uint8_t nonces[64 * FCCL_WIRE_NONCE_BYTES];
  int nranks = 0;
  if (fcclWireParseWelcome(data, size, addrs, nonces, 64, &nranks, why, sizeof(why)) == FCCL_WIRE_OK &&
      (nranks < 1 || nranks > 64))
    __builtin_trap();
  struct fcclWireId id;
  if (size >= FCCL_UNIQUE_ID_BYTES) (void)fcclWireParseId(data, FCCL_UNIQUE_ID_BYTES, &id, why, sizeof(why));
  struct fcclWireHeader header;
  if (fcclWireParseHeader(data, size, &header, why, sizeof(why)) == FCCL_WIRE_OK &&
      (header.type < 1 || header.type > FCCL_WIRE_TYPE_MAX))
    __builtin_trap();
  return 0;
}
