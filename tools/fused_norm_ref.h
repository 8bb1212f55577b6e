/* SPDX-License-Identifier: Apache-2.0 */
/* The unfused baseline kernel of fused_norm_perf (fused_norm_ref.cu), callable from C. */
#ifndef FCCL_TOOLS_FUSED_NORM_REF_H_
#define FCCL_TOOLS_FUSED_NORM_REF_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* residual = bf16(residual + reduced); output = bf16(residual * rsqrt(mean(residual^2) + eps) * weight), bf16 rows of
 * hidden (at most 32768) elements, enqueued on stream (a cudaStream_t). 0, or -1 when the launch failed. */
int fusedNormRefLaunch(const void* reduced, void* residual, const void* weight, void* output, size_t tokens,
                       size_t hidden, float eps, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* FCCL_TOOLS_FUSED_NORM_REF_H_ */
