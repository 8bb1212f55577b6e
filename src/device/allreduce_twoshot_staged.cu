/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two-shot all-reduce through staging, for buffers that are not registered, in rounds of at most n * roundUnits
 * units. In round k (staging parity (epoch + k) & 1) each rank owns 1/n of the round's units:
 *
 *   push(k)    send the units every other owner owns to that owner's inbox [parity][me]; post pad A (release).
 *   wait A     every writer's part of our units arrived (acquire).
 *   reduce(k)  our units: own input + inbox [parity][w], in rank order; store the result in our output and push it
 *              to every peer's result area [parity][me]; post pad B (release).
 *   wait B     every owner's result arrived (acquire); copy them from our result area into our output.
 *
 * push(k + 1) is issued right after wait A of round k, so the link carries the next round while this one is
 * reduced. Reuse of a parity is safe: push(k + 1) writes the owner's inbox [parity of k - 1] after we received the
 * owner's result of round k - 1 (sent after it read that inbox), and the owner writes our result area of that
 * parity only after our push(k + 1), which we send after having copied round k - 1 out. Across calls, the first
 * round uses the call's own parity, and round 1 (the other parity, possibly still read by a peer in a one-shot
 * call before) is pushed only after every peer's round-0 data arrived, i.e. after the peers left the previous
 * call. In place is safe: units are read (pushed, reduced) by a block before the same block overwrites them.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

namespace {

/* Round k of a call: units [start, start + len) split in n owner shares of `share` units (the last ones shorter). */
struct Round {
  uint64_t start;
  uint64_t len;
  uint64_t share;
  __device__ __forceinline__ Round(uint64_t k, uint64_t roundCap, uint64_t units, int n) {
    start = k * roundCap;
    len = units - start < roundCap ? units - start : roundCap;
    share = divUp(len, (uint64_t)n);
  }
  __device__ __forceinline__ uint64_t ownerLen(int s) const {
    const uint64_t begin = (uint64_t)s * share;
    if (begin >= len) return 0;
    return len - begin < share ? len - begin : share;
  }
};

}  // namespace

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allReduceTwoshotStaged(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t roundCap = a.roundUnits * (uint64_t)n;
  const uint64_t rounds = divUp(units, roundCap);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

  /* Pushes round k's units of every other owner into its inbox, then posts pad A with step k + 1. */
  auto push = [&](uint64_t k) {
    const Round r(k, roundCap, units, n);
    const uint64_t parity = (epoch + k) & 1;
    for (int s = 0; s < n; s++) {
      if (s == me) continue;
      const uint64_t len = r.ownerLen(s);
      char* inbox = ptr<char>(stagingRegion(c, c.layout.inboxOffset, parity, me, s));
      for (uint64_t j = first; j < len; j += stride) {
        Unit v;
        IO::load(a.sendbuf, r.start + (uint64_t)s * r.share + j, a.bytes, v);
        st_data16(inbox + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
      }
    }
    __syncthreads();
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true);
  };

  if (rounds > 0) push(0);
  for (uint64_t k = 0; k < rounds; k++) {
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true, FCCL_ALGO_TWOSHOT_STAGED,
                  FCCL_PHASE_INBOX, epoch))
      break;
    if (k + 1 < rounds) push(k + 1);

    const Round r(k, roundCap, units, n);
    const uint64_t parity = (epoch + k) & 1;
    /* Reduce our share: rank w's units are our input (w == me) or inbox [parity][w]. */
    {
      uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
      uint64_t resultBases[FCCL_DEVICE_MAX_RANKS] = {};
      const uint64_t myStart = r.start + (uint64_t)me * r.share;
      peerRegionsInbound<NR>(c, c.layout.inboxOffset, parity, bases);
      peerRegionsOutbound<NR>(c, c.layout.resultOffset, parity, resultBases);
      /* Inbox and result regions hold the share from its first unit; shift the bases so unit index u addresses
       * them (constant indices keep the arrays in registers). */
#pragma unroll
      for (int w = 0; w < NR; w++) {
        bases[w] = w == me ? a.sendbuf : bases[w] - myStart * FCCL_UNIT_BYTES;
        resultBases[w] -= myStart * FCCL_UNIT_BYTES;
      }
      /* Batched loads as in the pulling loop (see allreduce_oneshot_push.cu). */
      reducePulled<TT, OpTraits<OP>, NR>(bases, n, myStart, myStart + r.ownerLen(me), first, stride, a.bytes,
                                         [&](uint64_t u, const Unit& out) {
                                           IO::store(a.recvbuf, u, a.bytes, out);
#pragma unroll
                                           for (int p = 0; p < NR; p++)
                                             if (p < n && p != me)
                                               st_data16(ptr<void>(resultBases[p] + u * FCCL_UNIT_BYTES), out.words[0],
                                                         out.words[1]);
                                         });
    }
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k + 1), true);
    if (waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k + 1), true, FCCL_ALGO_TWOSHOT_STAGED,
                  FCCL_PHASE_RESULT, epoch))
      break;

    /* Copy the other owners' results into our output. */
    for (int s = 0; s < n; s++) {
      if (s == me) continue;
      const uint64_t len = r.ownerLen(s);
      const char* result = ptr<const char>(stagingRegion(c, c.layout.resultOffset, parity, s, me));
      for (uint64_t j = first; j < len; j += stride) {
        Unit v;
        ld_data16(result + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
        IO::store(a.recvbuf, r.start + (uint64_t)s * r.share + j, a.bytes, v);
      }
    }
  }
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(allReduceTwoshotStaged)

}  // namespace fccl
