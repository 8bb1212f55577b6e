# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts: puts nvcc on PATH and keeps NVLink multicast off for NCCL (see README).
for cuda_dir in "${CUDA_HOME:-}" /usr/local/cuda; do
  if [ -n "$cuda_dir" ] && [ -x "$cuda_dir/bin/nvcc" ]; then
    export PATH="$cuda_dir/bin:$PATH"
    break
  fi
done
export NCCL_NVLS_ENABLE=0
