/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One-shot all-reduce with LL128 lines: every rank pushes its whole input, as 128-byte lines of 120 data bytes and
 * the call's 64-bit tag (epoch and print, callTag) in the last 8, into its region of every peer's LL128 area, then
 * reads the lines the peers pushed into its own slot and reduces in rank order. Like LL, no barrier and no fence,
 * one NVLink hop; unlike LL (8 data bytes per 16), 15/16 of the bytes on the wire are data, so it keeps the one hop
 * up to megabytes.
 *
 * What it relies on (as NCCL's LL128 protocol does on NVLink): the 8 lanes of a warp that store one aligned
 * 128-byte line with one 16-byte store instruction reach the peer as one write, and the 8 lanes that load it with
 * one load instruction see all of it or none of it, so a line whose tag word is the call's holds the call's
 * data. Lanes reconverge (__syncwarp) before every such store and load so that a line is always one instruction.
 * The tag's 44 bits of epoch never repeat in a slot, so stale lines never match and nothing needs cleaning; a line
 * of this epoch with another print is a peer out of step (printMismatch, checked in the spin's slow path).
 *
 * Lane l of a warp handles part l % 8 (16 bytes) of line 4 i + l / 8 for the warp's i-th group of 4 lines: parts
 * 0-6 carry two 8-byte units of user data, part 7 one unit and the tag. Double buffering by epoch parity, with
 * the same argument as LL (allreduce_ll.cu).
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

namespace {

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kLinesPerWarp = 4;
/* Line groups a warp receives at once: their polls are in flight together (tuning.h). */
constexpr int kGroups = FCCL_LL128_GROUPS;

__device__ __forceinline__ uint64_t ll128Region(const fcclDevComm& c, uint64_t parity, int writer, int receiver) {
  return fcclLL128RegionOffset(&c.layout, c.nranks, parity, writer, receiver);
}

}  // namespace

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_LL128_THREADS, 1) allReduceLL128(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using OT = OpTraits<OP>;
  using IO = UnitIO<TT, 8>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t lines = divUp(a.bytes, FCCL_LL128_LINE_DATA);
  const int lane = threadIdx.x & 31;
  const int part = lane & 7;
  const bool flagPart = part == 7;
  /* This warp's index in the grid, and the number of warps (in groups of kLinesPerWarp lines). */
  const uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const uint64_t groupStride = ((uint64_t)gridDim.x * blockDim.x) >> 5;
  const uint64_t groups = divUp(lines, kLinesPerWarp);
  /* Our own units of line L: L * 15 + 2 part, and the next one unless this is the flag part. */
  auto loadOwn = [&](uint64_t line, Unit& u0, Unit& u1) {
    const uint64_t u = line * (FCCL_LL128_LINE_DATA / 8) + 2 * (uint64_t)part;
    IO::load(a.sendbuf, u, a.bytes, u0);
    if (!flagPart) IO::load(a.sendbuf, u + 1, a.bytes, u1);
  };
  /* The first line's input is loaded before the epoch (both loads overlap); the reduction reuses it. */
  Unit first0, first1;
  first0.words[0] = 0;
  first1.words[0] = 0;
  const uint64_t firstLine = warp * kLinesPerWarp + (lane >> 3);
  if (firstLine < lines) loadOwn(firstLine, first0, first1);
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const uint64_t tag = callTag();
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const int me = c.rank;

  /* Push: every lane runs the same iterations, and the lanes of a line store it together. The next group's input
   * is loaded before this group's stores, so that its memory latency overlaps them instead of following them. */
  {
    Unit d0 = first0, d1 = first1;
    for (uint64_t g = warp; g < groups; g += groupStride) {
      const uint64_t line = g * kLinesPerWarp + (lane >> 3);
      const bool active = line < lines;
      const uint64_t nextLine = line + groupStride * kLinesPerWarp;
      Unit n0, n1;
      n0.words[0] = 0;
      n1.words[0] = 0;
      if (nextLine < lines) loadOwn(nextLine, n0, n1);
      const uint64_t lo = d0.words[0];
      const uint64_t hi = flagPart ? tag : d1.words[0];
      const uint64_t at = line * FCCL_LL128_LINE_BYTES + (uint64_t)part * 16;
#pragma unroll
      for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++) {
        if (p >= n || p == me) continue;
        __syncwarp();
        if (active) st_ll_packet(ptr<char>(c.slots[p] + ll128Region(c, parity, me, p) + at), lo, hi);
      }
      d0 = n0;
      d1 = n1;
    }
  }

  /* Receive kGroups groups at a time: all their polls are issued before any is checked. */
  bool failed = false;
  for (uint64_t g0 = warp; g0 < groups && !failed; g0 += kGroups * groupStride) {
    uint64_t line[kGroups];
    bool active[kGroups];
    UnitReducer<TT, OT, 8> acc0[kGroups], acc1[kGroups];
#pragma unroll
    for (int k = 0; k < kGroups; k++) {
      line[k] = (g0 + (uint64_t)k * groupStride) * kLinesPerWarp + (lane >> 3);
      active[k] = line[k] < lines;
    }
    /* Our own input first: its loads are in flight while the peers' lines are polled. */
    uint64_t ownLo[kGroups], ownHi[kGroups];
#pragma unroll
    for (int k = 0; k < kGroups; k++) {
      Unit d0 = first0, d1 = first1;
      if (active[k] && line[k] != firstLine) loadOwn(line[k], d0, d1);
      ownLo[k] = d0.words[0];
      ownHi[k] = d1.words[0];
    }
    for (int w = 0; w < n && !failed; w++) {
      uint64_t lo[kGroups], hi[kGroups];
      if (w == me) {
#pragma unroll
        for (int k = 0; k < kGroups; k++) {
          lo[k] = ownLo[k];
          hi[k] = ownHi[k];
        }
      } else {
        const char* region = ptr<const char>(c.slots[me] + ll128Region(c, parity, w, me));
        Spin spin(c, FCCL_ALGO_LL128, FCCL_PHASE_LL128, w, epoch);
        for (;;) {
          bool ready = true;
#pragma unroll
          for (int k = 0; k < kGroups; k++) {
            lo[k] = 0;
            hi[k] = tag;
            __syncwarp();
            if (active[k]) ld_ll_packet(region + line[k] * FCCL_LL128_LINE_BYTES + (uint64_t)part * 16, lo[k], hi[k]);
          }
#pragma unroll
          for (int k = 0; k < kGroups; k++) {
            /* The flag lane of each line speaks for its 8 lanes. */
            const bool lineReady = __shfl_sync(kFullWarp, !flagPart || hi[k] == tag, lane | 7);
            ready = ready && lineReady;
          }
          if (__all_sync(kFullWarp, ready)) break;
          /* What a flag lane saw instead of our tag, for the spin's out-of-step check. */
          uint64_t seen = tag;
#pragma unroll
          for (int k = 0; k < kGroups; k++)
            if (flagPart && hi[k] != tag) seen = hi[k];
          if (__any_sync(kFullWarp, spin.spin(seen, tag))) {
            failed = true;
            break;
          }
        }
        if (failed) break;
      }
#pragma unroll
      for (int k = 0; k < kGroups; k++) {
        Unit d0, d1;
        d0.words[0] = lo[k];
        d1.words[0] = hi[k];
        if (w == 0) {
          acc0[k].first(d0);
          acc1[k].first(d1);
        } else {
          acc0[k].add(d0);
          acc1[k].add(d1);
        }
      }
    }
    if (failed) break;
#pragma unroll
    for (int k = 0; k < kGroups; k++) {
      if (!active[k]) continue;
      const uint64_t u = line[k] * (FCCL_LL128_LINE_DATA / 8) + 2 * (uint64_t)part;
      Unit out;
      acc0[k].result(out, n);
      IO::store(a.recvbuf, u, a.bytes, out);
      if (!flagPart) {
        acc1[k].result(out, n);
        IO::store(a.recvbuf, u + 1, a.bytes, out);
      }
    }
  }
  epochEnd(c, epoch);
}

FCCL_KERNEL_TABLE(allReduceLL128)

}  // namespace fccl
