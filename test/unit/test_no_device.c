/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Init without a GPU says why in fccl's words: with every GPU hidden (CUDA_VISIBLE_DEVICES='', set before the first
 * CUDA call) fcclCommInitRank, fcclCommInitAll and fcclCommInitFromEnv fail with fcclUnhandledCudaError, and
 * fcclGetLastError says "no NVIDIA driver found" on a machine without a driver, "no CUDA device visible:
 * CUDA_VISIBLE_DEVICES='' hides them all" on one with, and never the runtime's "CUDA driver version is insufficient"
 * that the first CUDA call answers without a driver (src/include/cudawrap.h: fcclCudaNoDeviceText).
 */
#include "fccl.h"
#include "test.h"

#include <cuda_runtime.h>
#include <stdlib.h>

/* What the last error must say on this machine: no driver at all (cudaDriverGetVersion reports 0), or the GPUs
 * hidden. */
static const char* expectedWords(void) {
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  return driver <= 0 ? "no NVIDIA driver found" : "no CUDA device visible: CUDA_VISIBLE_DEVICES='' hides them all";
}

static void expectNoDevice(const char* call, fcclResult_t res, const char* words) {
  const char* error = fcclGetLastError(NULL);
  printf("%s: %s: %s\n", call, fcclGetErrorString(res), error);
  EXPECT_MSG(res == fcclUnhandledCudaError, "%s returned %s, want fcclUnhandledCudaError", call,
             fcclGetErrorString(res));
  EXPECT_MSG(strstr(error, words) != NULL, "%s: last error \"%s\" does not say \"%s\"", call, error, words);
  EXPECT_MSG(strstr(error, "insufficient") == NULL, "%s: last error repeats the runtime's words: \"%s\"", call, error);
}

int main(void) {
  /* Before any CUDA call: the runtime reads it once. */
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  const char* words = expectedWords();

  fcclUniqueId id;
  EXPECT_EQ_INT(fcclGetUniqueId(&id), fcclSuccess);
  fcclComm_t comm = NULL;
  expectNoDevice("fcclCommInitRank", fcclCommInitRank(&comm, 1, id, 0), words);
  EXPECT(comm == NULL);

  fcclComm_t comms[2] = {NULL, NULL};
  expectNoDevice("fcclCommInitAll", fcclCommInitAll(comms, 2, NULL), words);

  /* A torchrun launch of one rank: the device comes from LOCAL_RANK, so the count is the first CUDA call. */
  static const char* const names[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",
                                      "MASTER_ADDR", "MASTER_PORT", "FCCL_COMM_SECRET"};
  static const char* const values[] = {"0", "1", "0", "127.0.0.1", "29500", "0123456789abcdef"};
  for (int i = 0; i < 6; i++) setenv(names[i], values[i], 1);
  comm = NULL;
  expectNoDevice("fcclCommInitFromEnv", fcclCommInitFromEnv(&comm, NULL), words);
  EXPECT(comm == NULL);
  for (int i = 0; i < 6; i++) unsetenv(names[i]);
  return testSummary("no_device");
}
