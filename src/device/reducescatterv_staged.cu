/* SPDX-License-Identifier: Apache-2.0 */
/* The variable reduce-scatter's staged form (reducescatterv_ll.cu describes the three). */
#include "kernels.cuh"
#include "variable.cuh"

namespace fccl {

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceScatterVStaged(fcclDevComm c, fcclDevVArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  __shared__ VariableBlocks v;
  gridDependencyEnter();
  const uint64_t epoch = variableBegin(c, a, sizeof(typename TT::Bits), a.recvCapacity, a.sendCapacity, v);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t cap = a.roundUnits;
  const uint64_t rounds = variableRounds(v, cap);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t mine = v.bytes[me];
  const uint64_t myUnits = divUp(mine, FCCL_UNIT_BYTES);
  const int kernel = FCCL_KERNEL_REDUCESCATTERV_STAGED;

  /* Round k of block p into our inbox region of rank p, for every peer p; round k of our block reduced from our
   * input and every writer's inbox region. */
  auto fill = [&](uint64_t k) {
    const uint64_t parity = (epoch + k) & 1;
    const uint64_t start = k * cap;
    for (int p = 0; p < n; p++) {
      if (p == me) continue;
      const uint64_t bytes = v.bytes[p];
      const uint64_t len = roundLength(divUp(bytes, FCCL_UNIT_BYTES), k, cap);
      char* inbox = ptr<char>(stagingRegion(c, c.layout.inboxOffset, parity, me, p));
      const uint64_t block = a.sendbuf + v.offset[p];
      for (uint64_t j = first; j < len; j += stride) {
        Unit x;
        IO::load(block, start + j, bytes, x);
        st_data16(inbox + j * FCCL_UNIT_BYTES, x.words[0], x.words[1]);
      }
    }
  };
  auto consume = [&](uint64_t k) {
    const uint64_t parity = (epoch + k) & 1;
    const uint64_t start = k * cap;
    const uint64_t len = roundLength(myUnits, k, cap);
    /* Rank w's units of our block: our input (w == me) or inbox [parity][w], shifted so that the block's unit
     * index addresses both (constant indices keep the array in registers). */
    uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
    peerRegionsInbound<NR>(c, c.layout.inboxOffset, parity, bases);
#pragma unroll
    for (int w = 0; w < NR; w++) bases[w] = w == me ? a.sendbuf + v.offset[me] : bases[w] - start * FCCL_UNIT_BYTES;
    reducePulled<TT, OpTraits<OP>, NR>(bases, n, start, start + len, first, stride, mine,
                                       [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, mine, out); });
  };
  stagedRounds(c, rounds, epoch, kernel, fill, consume);
  variableEnd(c, v, kernel, epoch);
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(reduceScatterVStaged)

}  // namespace fccl
