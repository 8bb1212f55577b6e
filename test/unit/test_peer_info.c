/* SPDX-License-Identifier: Apache-2.0 */
/* Peer information: what a rank says about its host and process, and the checks on what all ranks said. */
#include "bootstrap.h"
#include "check.h"
#include "param.h"
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

static void fakeRanks(struct fcclPeerInfo* infos, int nranks) {
  for (int r = 0; r < nranks; r++) {
    EXPECT_EQ_INT(fcclPeerInfoFillHost(&infos[r], r, nranks), fcclSuccess);
    infos[r].cudaDev = r;
    infos[r].cudaDriverVersion = 13000;
    for (int i = 0; i < 16; i++) infos[r].gpuUuid[i] = (uint8_t)(0x10 * r + i + 1);
    snprintf(infos[r].busId, sizeof(infos[r].busId), "0000:%02x:00.0", 0x10 + r);
  }
}

static void testFillHost(void) {
  struct fcclPeerInfo a, b;
  EXPECT_EQ_INT(fcclPeerInfoFillHost(&a, 1, 4), fcclSuccess);
  EXPECT_EQ_INT(fcclPeerInfoFillHost(&b, 2, 4), fcclSuccess);
  EXPECT(a.hostHash != 0 && a.hostHash == b.hostHash); /* same host, same boot */
  EXPECT(a.pidNs != 0 && a.pidNs == b.pidNs);
  EXPECT_EQ_INT(a.pid, getpid());
  EXPECT_EQ_INT(a.rank, 1);
  EXPECT_EQ_INT(a.nranks, 4);
  EXPECT_EQ_INT(a.fcclVersion, FCCL_VERSION_CODE);
  EXPECT_EQ_INT(a.cudaDev, -1);
  EXPECT(a.hostname[0] != '\0');
  EXPECT_EQ_INT(sizeof(struct fcclPeerInfo), 160);
}

static void testValidate(void) {
  enum { N = 4 };
  struct fcclPeerInfo infos[N];
  fakeRanks(infos, N);
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, N, 0), fcclSuccess);

  fakeRanks(infos, N);
  infos[2].rank = 1;
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, N, 0), fcclRemoteError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "peer info of rank 2 says it is rank 1");

  fakeRanks(infos, N);
  infos[3].nranks = 5;
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, N, 0), fcclRemoteError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 3 says 5 ranks, this rank says 4");

  fakeRanks(infos, N);
  infos[2].fcclVersion = FCCL_VERSION(0, 2, 0);
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, N, 0), fcclRemoteError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "fccl version mismatch");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 2 runs 0.2.0");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 0 runs");

  /* Two ranks on one GPU: an error naming both, unless the config allows it. */
  fakeRanks(infos, N);
  memcpy(infos[3].gpuUuid, infos[1].gpuUuid, 16);
  memcpy(infos[3].busId, infos[1].busId, sizeof(infos[3].busId));
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, N, 0), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "ranks 1 and 3 both use GPU GPU-");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "0000:11:00.0");
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, N, 1), fcclSuccess);

  /* Unknown GPUs (all-zero UUID, as in GPU-less tests) are not compared. */
  fakeRanks(infos, N);
  for (int r = 0; r < N; r++) memset(infos[r].gpuUuid, 0, 16);
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, N, 0), fcclSuccess);

  /* Different drivers: allowed (a warning only). */
  fakeRanks(infos, N);
  infos[1].cudaDriverVersion = 12080;
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, N, 0), fcclSuccess);

  /* Peer-supplied text cannot break the message: unterminated and unprintable bytes are contained. */
  fakeRanks(infos, N);
  memcpy(infos[1].gpuUuid, infos[0].gpuUuid, 16);
  memset(infos[1].hostname, '\x07', sizeof(infos[1].hostname));
  memset(infos[1].busId, 'b', sizeof(infos[1].busId));
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, N, 0), fcclInvalidUsage);
  EXPECT(strchr(fcclGetLastError(NULL), '\x07') == NULL);

  EXPECT_EQ_INT(fcclPeerInfoValidate(NULL, N, 0), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, 0, 0), fcclInvalidArgument);

  char uuid[48];
  uint8_t bytes[16] = {0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  EXPECT(strcmp(fcclPeerUuidString(bytes, uuid, sizeof(uuid)), "GPU-deadbeef-0001-0203-0405-060708090a0b") == 0);
}

/* FCCL_HOSTID replaces the host identity: equal values are one host, distinct values distinct hosts. */
static void testHostIdOverride(void) {
  struct fcclPeerInfo real, a, b, again;
  EXPECT_EQ_INT(fcclPeerInfoFillHost(&real, 0, 2), fcclSuccess);
  setenv("FCCL_HOSTID", "simulated-a", 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclPeerInfoFillHost(&a, 0, 2), fcclSuccess);
  EXPECT_EQ_INT(fcclPeerInfoFillHost(&again, 1, 2), fcclSuccess);
  setenv("FCCL_HOSTID", "simulated-b", 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclPeerInfoFillHost(&b, 1, 2), fcclSuccess);
  unsetenv("FCCL_HOSTID");
  fcclParamResetForTest();
  EXPECT(a.hostHash != real.hostHash);
  EXPECT(a.hostHash == again.hostHash);
  EXPECT(a.hostHash != b.hostHash);
  EXPECT(a.pidNs == real.pidNs); /* the process identity is still the real one */
}

int main(void) {
  testFillHost();
  testValidate();
  testHostIdOverride();
  return testSummary("peer_info");
}
