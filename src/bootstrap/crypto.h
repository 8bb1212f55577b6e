/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bootstrap's cryptography: HMAC-SHA256 and a constant-time comparison from OpenSSL's libcrypto, loaded with
 * dlopen (libfccl never links it, so it loads and builds where OpenSSL's headers are missing), and randomness from
 * getrandom(). The bootstrap proves knowledge of a communicator's secret with MACs over fresh nonces instead of
 * sending it (docs/bootstrap.md#the-handshake). Private to src/bootstrap; tests of this layer include it.
 */
#ifndef FCCL_BOOTSTRAP_CRYPTO_H_
#define FCCL_BOOTSTRAP_CRYPTO_H_

#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

#define FCCL_MAC_BYTES 32 /* HMAC-SHA256 */

/* One piece of a MAC's input: the MAC is taken over the pieces' bytes one after the other. */
struct fcclMacPart {
  const void* data;
  size_t size;
};

/*
 * Whether HMAC-SHA256 is available: fcclSuccess, or fcclSystemError saying that libcrypto.so.3 cannot be loaded,
 * why, and which package brings it. Loads the library on the first call; thread safe.
 */
fcclResult_t fcclCryptoCheck(void);

/*
 * out = HMAC-SHA256(key, parts[0] || parts[1] || ...). fcclSystemError when libcrypto is missing (as
 * fcclCryptoCheck) or out of memory. Thread safe.
 */
fcclResult_t fcclMac(const uint8_t* key, size_t keyBytes, const struct fcclMacPart* parts, int nparts,
                     uint8_t out[FCCL_MAC_BYTES]);

/* Whether two MACs are equal, in time that does not depend on where they differ (CRYPTO_memcmp). Only after
 * fcclCryptoCheck succeeded (a MAC to compare was computed). */
int fcclMacEqual(const uint8_t a[FCCL_MAC_BYTES], const uint8_t b[FCCL_MAC_BYTES]);

/* size bytes from getrandom(); fcclSystemError naming what they were for when it fails. */
fcclResult_t fcclRandomBytes(void* out, size_t size, const char* what);

/*
 * Loads libcrypto from soname into a scratch table, as fcclCryptoCheck does with libcrypto.so.3; 0 on success,
 * else -1 with the reason in why. For tests of the missing-library case.
 */
int fcclCryptoTryLoad(const char* soname, char* why, size_t whySize);

#endif /* FCCL_BOOTSTRAP_CRYPTO_H_ */
