#include "check.h"
#include "fccl.h"

FCCL_API fcclResult_t fcclGetVersion(int* version) {
  fcclClearError();
  FCCL_REQUIRE(version != NULL, "fcclGetVersion: version is NULL");
  *version = FCCL_VERSION_CODE;
  return fcclSuccess;
}
