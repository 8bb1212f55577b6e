/* SPDX-License-Identifier: Apache-2.0 */
/* The reduce's staged form (reduce_ll.cu describes the three). */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceStaged(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const int n = c.nranks;
  const int me = c.rank;
  const int root = a.root;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t roundCap = a.roundUnits;
  const uint64_t rounds = divUp(units, roundCap);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

  /* Round k of our input into our inbox region of the root (the root sends nothing); round k reduced on the root
   * from its own input and every writer's region. The rounds' flags go between every pair (stagedRounds), which
   * keeps every rank in step with every other. */
  auto fill = [&](uint64_t k) {
    if (me == root) return;
    const StagedRound r(k, units, roundCap, epoch);
    char* inbox = ptr<char>(stagingRegion(c, c.layout.inboxOffset, r.parity, me, root));
    for (uint64_t j = first; j < r.len; j += stride) {
      Unit v;
      IO::load(a.sendbuf, r.start + j, a.bytes, v);
      st_data16(inbox + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
    }
  };
  auto consume = [&](uint64_t k) {
    if (me != root) return;
    const StagedRound r(k, units, roundCap, epoch);
    /* Rank w's units of round k: our input (w == me) or inbox [parity][w], shifted so that the message's unit index
     * addresses both (constant indices keep the array in registers). */
    uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
    peerRegionsInbound<NR>(c, c.layout.inboxOffset, r.parity, bases);
#pragma unroll
    for (int w = 0; w < NR; w++) bases[w] = w == me ? a.sendbuf : bases[w] - r.start * FCCL_UNIT_BYTES;
    reducePulled<TT, OpTraits<OP>, NR>(bases, n, r.start, r.start + r.len, first, stride, a.bytes,
                                       [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, a.bytes, out); });
  };
  stagedRounds(c, rounds, epoch, FCCL_KERNEL_REDUCE_STAGED, fill, consume);
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(reduceStaged)

}  // namespace fccl
