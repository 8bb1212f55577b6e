/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HMAC-SHA256 from OpenSSL's libcrypto, reached with dlopen (crypto.h). Only four functions are used, declared here
 * with the prototypes of OpenSSL 3's public headers (openssl/hmac.h, openssl/evp.h, openssl/crypto.h), so no
 * OpenSSL header is needed to build. OpenSSL 3 keeps its ABI within the 3.x series (the soname libcrypto.so.3),
 * and HMAC(), EVP_sha256() and CRYPTO_memcmp() are thread safe there.
 */
#include "crypto.h"

#include "check.h"
#include "debug.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_BOOT

#define CRYPTO_SONAME "libcrypto.so.3"
/* Inputs up to this size are assembled on the stack; larger ones (a welcome of many ranks) on the heap. */
#define MAC_STACK_BYTES 1024

typedef struct evp_md_st fcclEvpMd;               /* OpenSSL's EVP_MD, opaque */
#define OPENSSL_INIT_NO_ATEXIT_FLAG 0x00080000ull /* OPENSSL_INIT_NO_ATEXIT of openssl/crypto.h */

struct cryptoTable {
  int (*initCrypto)(uint64_t opts, const void* settings);
  const fcclEvpMd* (*evpSha256)(void);
  unsigned char* (*hmac)(const fcclEvpMd* md, const void* key, int keyLen, const unsigned char* data, size_t dataLen,
                         unsigned char* out, unsigned int* outLen);
  int (*memcmp)(const void* a, const void* b, size_t size);
};

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static struct cryptoTable table;
static int loaded; /* atomic */
static char loadError[384];

/* 0 with t filled, or -1 with why; the handle stays open for the process's life. */
static int loadFrom(const char* soname, struct cryptoTable* t, char* why, size_t whySize) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    snprintf(why, whySize, "cannot load %s (%s)", soname, err ? err : "unknown error");
    return -1;
  }
  static const char* const names[] = {"OPENSSL_init_crypto", "EVP_sha256", "HMAC", "CRYPTO_memcmp"};
  void* symbols[4];
  for (int i = 0; i < 4; i++) {
    symbols[i] = dlsym(handle, names[i]);
    if (!symbols[i]) {
      snprintf(why, whySize, "%s has no %s (OpenSSL 3 is needed)", soname, names[i]);
      dlclose(handle);
      return -1;
    }
  }
  *(void**)&t->initCrypto = symbols[0];
  *(void**)&t->evpSha256 = symbols[1];
  *(void**)&t->hmac = symbols[2];
  *(void**)&t->memcmp = symbols[3];
  /* Without its cleanup at exit: the bootstrap's own threads (a root still waiting for ranks) may end after it, in the
   * library's destructor, and OpenSSL frees a thread's state when the thread ends only while it is not cleaned up.
   * An application that initialised OpenSSL first keeps its own choice. */
  if (t->initCrypto(OPENSSL_INIT_NO_ATEXIT_FLAG, NULL) != 1) {
    snprintf(why, whySize, "%s: OPENSSL_init_crypto failed", soname);
    return -1;
  }
  return 0;
}

static void loadCrypto(void) {
  if (loadFrom(CRYPTO_SONAME, &table, loadError, sizeof(loadError)) == 0)
    __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
}

int fcclCryptoTryLoad(const char* soname, char* why, size_t whySize) {
  struct cryptoTable scratch;
  return loadFrom(soname, &scratch, why, whySize);
}

fcclResult_t fcclCryptoCheck(void) {
  pthread_once(&loadOnce, loadCrypto);
  if (__atomic_load_n(&loaded, __ATOMIC_ACQUIRE)) return fcclSuccess;
  return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS,
                    "the bootstrap proves its peers' secret with HMAC-SHA256 from OpenSSL's libcrypto, which %s: "
                    "install OpenSSL 3's library (Debian 12: libssl3; Ubuntu 24.04: libssl3t64)",
                    loadError);
}

fcclResult_t fcclMac(const uint8_t* key, size_t keyBytes, const struct fcclMacPart* parts, int nparts,
                     uint8_t out[FCCL_MAC_BYTES]) {
  FCCLCHECK(fcclCryptoCheck());
  size_t total = 0;
  for (int i = 0; i < nparts; i++) total += parts[i].size;
  uint8_t stackBuf[MAC_STACK_BYTES];
  uint8_t* input = total <= sizeof(stackBuf) ? stackBuf : malloc(total);
  if (!input) return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "out of memory for a MAC over %zu bytes", total);
  size_t used = 0;
  for (int i = 0; i < nparts; i++) {
    if (parts[i].size) memcpy(input + used, parts[i].data, parts[i].size);
    used += parts[i].size;
  }
  unsigned int outLen = 0;
  const unsigned char* done = table.hmac(table.evpSha256(), key, (int)keyBytes, input, total, out, &outLen);
  if (input != stackBuf) free(input);
  if (done == NULL || outLen != FCCL_MAC_BYTES)
    return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "libcrypto's HMAC-SHA256 failed (%u bytes)", outLen);
  return fcclSuccess;
}

int fcclMacEqual(const uint8_t a[FCCL_MAC_BYTES], const uint8_t b[FCCL_MAC_BYTES]) {
  return __atomic_load_n(&loaded, __ATOMIC_ACQUIRE) && table.memcmp(a, b, FCCL_MAC_BYTES) == 0;
}

fcclResult_t fcclRandomBytes(void* out, size_t size, const char* what) {
  uint8_t* bytes = out;
  size_t got = 0;
  while (got < size) {
    ssize_t rc = getrandom(bytes + got, size - got, 0);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0)
      return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "getrandom for %s failed: %s", what,
                        rc < 0 ? strerror(errno) : "no bytes");
    got += (size_t)rc;
  }
  return fcclSuccess;
}
