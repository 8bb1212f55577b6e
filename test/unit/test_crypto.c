/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bootstrap's HMAC-SHA256 (libcrypto through dlopen): RFC 4231's test cases, the same MAC from one piece or many,
 * the constant-time comparison, fresh random bytes, and the error a process without libcrypto gets.
 */
#include "crypto.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

static void hex(const uint8_t* bytes, size_t size, char* out) {
  for (size_t i = 0; i < size; i++) sprintf(out + 2 * i, "%02x", bytes[i]);
}

static void expectMac(const uint8_t* key, size_t keyBytes, const void* data, size_t dataBytes, const char* expected,
                      const char* name) {
  uint8_t mac[FCCL_MAC_BYTES];
  char text[2 * FCCL_MAC_BYTES + 1];
  const struct fcclMacPart part = {data, dataBytes};
  EXPECT_EQ_INT(fcclMac(key, keyBytes, &part, 1, mac), fcclSuccess);
  hex(mac, sizeof(mac), text);
  EXPECT_MSG(strcmp(text, expected) == 0, "%s: HMAC-SHA256 %s, RFC 4231 says %s", name, text, expected);
}

/* RFC 4231, test cases 1, 2, 3 and 6 (a key longer than SHA-256's block). */
static void testVectors(void) {
  uint8_t key[131];
  uint8_t data[50];
  memset(key, 0x0b, 20);
  expectMac(key, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", "case 1");
  expectMac((const uint8_t*)"Jefe", 4, "what do ya want for nothing?", 28,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", "case 2");
  memset(key, 0xaa, sizeof(key));
  memset(data, 0xdd, sizeof(data));
  expectMac(key, 20, data, sizeof(data), "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", "case 3");
  const char* longKeyText = "Test Using Larger Than Block-Size Key - Hash Key First";
  expectMac(key, 131, longKeyText, strlen(longKeyText),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", "case 6");
  printf("RFC 4231 test cases: ok\n");
}

/* Pieces are concatenated: any split of the input gives the MAC of the whole, also past the stack buffer. */
static void testPieces(void) {
  static uint8_t big[5000];
  uint64_t state = testSeed();
  for (size_t i = 0; i < sizeof(big); i++) big[i] = (uint8_t)testRandom(&state);
  const uint8_t key[32] = {1, 2, 3};
  uint8_t whole[FCCL_MAC_BYTES], split[FCCL_MAC_BYTES], other[FCCL_MAC_BYTES];
  const struct fcclMacPart one = {big, sizeof(big)};
  EXPECT_EQ_INT(fcclMac(key, sizeof(key), &one, 1, whole), fcclSuccess);
  const struct fcclMacPart three[] = {{big, 7}, {big + 7, 0}, {big + 7, sizeof(big) - 7}};
  EXPECT_EQ_INT(fcclMac(key, sizeof(key), three, 3, split), fcclSuccess);
  EXPECT(fcclMacEqual(whole, split));
  big[4999] ^= 1; /* one bit of input, and the last byte of the key, change the MAC */
  EXPECT_EQ_INT(fcclMac(key, sizeof(key), &one, 1, other), fcclSuccess);
  EXPECT(!fcclMacEqual(whole, other));
  big[4999] ^= 1;
  uint8_t key2[32] = {1, 2, 3};
  key2[31] = 1;
  EXPECT_EQ_INT(fcclMac(key2, sizeof(key2), &one, 1, other), fcclSuccess);
  EXPECT(!fcclMacEqual(whole, other));
  for (int i = 0; i < FCCL_MAC_BYTES; i++) { /* a difference anywhere is a difference */
    memcpy(other, whole, sizeof(other));
    other[i] ^= 0x80;
    EXPECT(!fcclMacEqual(whole, other));
  }
  printf("a MAC over pieces: ok\n");
}

static void testRandom32(void) {
  uint8_t a[32] = {0}, b[32] = {0};
  EXPECT_EQ_INT(fcclRandomBytes(a, sizeof(a), "a test"), fcclSuccess);
  EXPECT_EQ_INT(fcclRandomBytes(b, sizeof(b), "a test"), fcclSuccess);
  EXPECT(memcmp(a, b, sizeof(a)) != 0);
  printf("random bytes: ok\n");
}

/* What a machine without libcrypto gets: the loader's reason, from the same loader. */
static void testMissingLibrary(void) {
  char why[384] = "";
  EXPECT_EQ_INT(fcclCryptoTryLoad("libcrypto.so.3", why, sizeof(why)), 0);
  EXPECT_EQ_INT(fcclCryptoTryLoad("libfccl-no-such-crypto.so.3", why, sizeof(why)), -1);
  EXPECT_STR_CONTAINS(why, "cannot load libfccl-no-such-crypto.so.3");
  EXPECT_EQ_INT(fcclCryptoTryLoad("libc.so.6", why, sizeof(why)), -1); /* a library, but not OpenSSL's */
  EXPECT_STR_CONTAINS(why, "has no OPENSSL_init_crypto");
  printf("a missing libcrypto is named: ok (%s)\n", why);
}

int main(void) {
  EXPECT_EQ_INT(fcclCryptoCheck(), fcclSuccess);
  testVectors();
  testPieces();
  testRandom32();
  testMissingLibrary();
  return testSummary("crypto");
}
