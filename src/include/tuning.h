/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tuning constants of the collectives: thread counts, areas, depths and thresholds that the kernels and the host's
 * algorithm table are built with. Host C and nvcc both include this header, so the grid the host computes and the
 * bounds a kernel was compiled for cannot disagree. To time another value, edit it here (every file rebuilds);
 * defining one on the command line is refused below, since a -D given to one compiler only would build host and
 * device code that disagree. How each value was measured: docs/perf/notes/selection.md.
 */
#ifndef FCCL_TUNING_H_
#define FCCL_TUNING_H_

#if defined(FCCL_LL_THREADS) || defined(FCCL_LL128_THREADS) || defined(FCCL_LL128_AREA_BYTES) ||               \
    defined(FCCL_LL128_GROUPS) || defined(FCCL_PULL_DEPTH_2RANKS) || defined(FCCL_TWO_PART_ROWS) ||           \
    defined(FCCL_PUSH_SCATTER_MIN_2RANKS)
#error "fccl's tuning constants are set in src/include/tuning.h only (host C and nvcc must agree)"
#endif

/* Threads per block of the LL all-reduce (a multiple of 32, at most FCCL_DEVICE_THREADS). */
#define FCCL_LL_THREADS 256

/* Threads per LL128 block; also the kernel's launch bound, which leaves it the registers its line groups of
 * accumulators need without spilling (a multiple of 32, at most FCCL_DEVICE_THREADS). */
#define FCCL_LL128_THREADS 256

/* Bytes of a slot's LL128 area (a multiple of 2 MiB): 2 parities x (n - 1) writers of lines. Every byte costs
 * FCCL_ARENA_SLOTS bytes per GPU (the arena allocates that many slots at once; 1 by default). */
#define FCCL_LL128_AREA_BYTES (4u << 20)

/* Line groups an LL128 warp receives at once: their polls are in flight together. */
#define FCCL_LL128_GROUPS 4

/* Units a thread of a pulling kernel loads at once for 2 ranks (more ranks: 2 for 4, 1 for 8): the loads in
 * flight that NVLink's latency needs. */
#define FCCL_PULL_DEPTH_2RANKS 4

/* The registered two-shot's reduce-scatter by push goes in two parts while a block's share is at most this many
 * grid rows, in one part beyond. */
#define FCCL_TWO_PART_ROWS 64

/* Bytes from which the registered two-shot of 2 ranks, out of place, moves its reduce-scatter by push (into the
 * owner's inbox while a share fits one staging chunk) instead of pulling it. */
#define FCCL_PUSH_SCATTER_MIN_2RANKS (16u << 20)

#endif /* FCCL_TUNING_H_ */
