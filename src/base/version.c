/* SPDX-License-Identifier: Apache-2.0 */
#include "check.h"
#include "fccl.h"

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

FCCL_API fcclResult_t fcclGetVersion(int* version) {
  fcclClearError();
  FCCL_REQUIRE(version != NULL, "fcclGetVersion: version is NULL");
  *version = FCCL_VERSION_CODE;
  return fcclSuccess;
}
