#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cudart (shared) is the only CUDA library libfccl links; libcuda and NVML must be reached at run time
# (cudaGetDriverEntryPoint, dlopen) so the library loads on a machine without a GPU driver.
set -eu
lib=$1
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED: $(echo $needed)"
status=0
echo "$needed" | grep -q '^libcudart\.so' || { echo "libcudart.so is not a NEEDED entry"; status=1; }
for forbidden in libcuda.so libnvidia-ml.so libnccl.so libhwloc.so; do
  if echo "$needed" | grep -q "^$forbidden"; then echo "must not link $forbidden"; status=1; fi
done
readelf -d "$lib" | grep -q "SONAME.*libfccl\.so\.[0-9]" || { echo "no versioned SONAME"; status=1; }
exit $status
