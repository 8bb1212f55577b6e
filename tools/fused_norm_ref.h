/* SPDX-License-Identifier: Apache-2.0 */
/* fccl's own add + RMSNorm kernel, the norm of fused_norm_perf's unfused baseline (fused_norm_ref.cu), callable from
 * C. */
#ifndef FCCL_TOOLS_FUSED_NORM_REF_H_
#define FCCL_TOOLS_FUSED_NORM_REF_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The threads per row of bf16 rows of hidden elements in the shape rowThreads x blockThreads (rowThreads 0: the
 * library's shape, in full blocks), and its rows per block in *rowsPerBlock (may be NULL); -1 when the kernel cannot
 * run that shape (fused_norm_shape.h). */
int fusedNormRefShape(size_t hidden, unsigned rowThreads, unsigned blockThreads, unsigned* rowsPerBlock);

/* residual = bf16(residual + reduced); output = bf16(residual * rsqrt(mean(residual^2) + eps) * weight), bf16 rows of
 * hidden (at most 32768) elements, in the shape rowThreads x blockThreads (rowThreads 0: the library's for this token
 * count on the current GPU, whose bits are fcclAllReduceAddRMSNorm's), enqueued on stream (a cudaStream_t). 0, or -1
 * when the shape is not one the kernel runs or the launch failed. */
int fusedNormRefLaunch(const void* reduced, void* residual, const void* weight, void* output, size_t tokens,
                       size_t hidden, float eps, unsigned rowThreads, unsigned blockThreads, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* FCCL_TOOLS_FUSED_NORM_REF_H_ */
