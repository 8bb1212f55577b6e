/* SPDX-License-Identifier: Apache-2.0 */
/* The reduce-scatter's staged form (reducescatter_ll.cu describes the three). */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceScatterStaged(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t roundCap = a.roundUnits;
  const uint64_t rounds = divUp(units, roundCap);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int kernel = FCCL_KERNEL_REDUCESCATTER_STAGED;

  /* Round k of block p into our inbox region of rank p, for every peer p; round k of our block reduced from our
   * input and every writer's inbox region. */
  auto fill = [&](uint64_t k) {
    const StagedRound r(k, units, roundCap, epoch);
    for (int p = 0; p < n; p++) {
      if (p == me) continue;
      char* inbox = ptr<char>(stagingRegion(c, c.layout.inboxOffset, r.parity, me, p));
      const uint64_t block = a.sendbuf + (uint64_t)p * a.bytes;
      for (uint64_t j = first; j < r.len; j += stride) {
        Unit v;
        IO::load(block, r.start + j, a.bytes, v);
        st_data16(inbox + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
      }
    }
  };
  auto consume = [&](uint64_t k) {
    const StagedRound r(k, units, roundCap, epoch);
    /* Rank w's units of our block: our input (w == me) or inbox [parity][w], shifted so that the block's unit
     * index addresses both (constant indices keep the array in registers). */
    uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
    peerRegionsInbound<NR>(c, c.layout.inboxOffset, r.parity, bases);
#pragma unroll
    for (int w = 0; w < NR; w++)
      bases[w] = w == me ? a.sendbuf + (uint64_t)me * a.bytes : bases[w] - r.start * FCCL_UNIT_BYTES;
    reducePulled<TT, OpTraits<OP>, NR>(bases, n, r.start, r.start + r.len, first, stride, a.bytes,
                                       [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, a.bytes, out); });
  };
  stagedRounds(c, rounds, epoch, kernel, fill, consume);
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(reduceScatterStaged)

}  // namespace fccl
