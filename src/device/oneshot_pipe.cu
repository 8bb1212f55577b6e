/*
 * One-shot all-reduce streamed through staging rings, for buffers of any size (registered or not). The message is
 * cut into steps of a.roundUnits units; block b takes steps b, b + G, b + 2G, ... (G = gridDim.x) and owns ring b
 * of every inbox [parity][writer]: `depth` slots of one step each. Its warps split in two groups that run at once:
 *
 *   producers  for step i: wait until every peer returned slot i mod depth (pad B >= i - depth + 1, acquire),
 *              push our input units of the step into that slot of our ring in every peer's inbox, post pad
 *              A = i + 1 (release), and tell the consumers (shared counter) that step i's input has been read;
 *   consumers  for step i: wait for pad A = i + 1 of every peer (acquire) and for our producers to have read step
 *              i, reduce our input with the peers' slots in rank order into our output, and return the slot to
 *              every peer: pad B = i + 1 (relaxed: the slot's loads have returned, their values are stored).
 *
 * So the link carries the next steps while earlier ones are reduced, and only stores cross NVLink: on 2x H200,
 * stores in both directions at once move 365 GB/s per direction, loads 335 (docs/perf/2026-11-30-h200x2-s5). Each
 * unit crosses once per peer, like the one-shot push: for 2 ranks as few bytes as a two-shot, with one flag hop.
 *
 * Reuse across calls: call e uses inbox parity e & 1. A rank starts call e + 2 after finishing call e + 1, which
 * needed every peer's steps of e + 1, sent after the peer finished call e: nobody still reads that parity. Other
 * algorithms leave it the same way (oneshot_push.cu, twoshot_staged.cu). In place is safe: consumers store the
 * output of a step only after the producers have read its input (the shared counter).
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allReduceOneshotPipe(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  constexpr int kLoads = 4;                               /* input units a producer loads before storing them */
  constexpr int kProducers = FCCL_DEVICE_THREADS / 2;     /* threads [0, kProducers); the rest consume */
  constexpr int kProducerBarrier = 1, kConsumerBarrier = 2; /* named barriers of the two groups */
  __shared__ volatile uint64_t stepsRead;                 /* steps whose input the producers have read */
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c);
  if (threadIdx.x == 0) stepsRead = 0;
  __syncthreads();
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t stepUnits = a.roundUnits;
  const uint64_t grid = gridDim.x;
  const uint64_t ringUnits = fcclPipeRingUnits(c.layout.chunkBytes, gridDim.x);
  const uint64_t depth = ringUnits / stepUnits; /* >= 2: fcclAlgoApplicable */
  const uint64_t steps = divUp(units, stepUnits);
  const uint64_t mySteps = steps > blockIdx.x ? divUp(steps - blockIdx.x, grid) : 0;
  /* Writer's ring (ours: blockIdx.x) in rank slotRank's inbox of this call's parity. */
  auto ring = [&](int slotRank, int writer) {
    return c.slots[slotRank] + c.layout.inboxOffset + (parity * n + writer) * c.layout.chunkBytes +
           (uint64_t)blockIdx.x * ringUnits * FCCL_UNIT_BYTES;
  };
  auto stepStart = [&](uint64_t i) { return (blockIdx.x + i * grid) * stepUnits; };
  auto stepLen = [&](uint64_t i) {
    const uint64_t start = stepStart(i);
    return units - start < stepUnits ? units - start : stepUnits;
  };
  auto slotOffset = [&](uint64_t i) { return (i % depth) * stepUnits * FCCL_UNIT_BYTES; };

  if (threadIdx.x < kProducers) {
    const int t = threadIdx.x;
    withRankBound(n, [&](auto bound) {
      constexpr int NR = decltype(bound)::value;
      uint64_t rings[NR]; /* our ring in each peer's inbox */
#pragma unroll
      for (int p = 0; p < NR; p++) rings[p] = p < n && p != me ? ring(p, me) : 0;
      for (uint64_t i = 0; i < mySteps; i++) {
        const bool failed = i >= depth && pollPeer(c, c.layout.signalBOffset,
                                                   sigValue(epoch, (uint32_t)(i - depth + 1)), true,
                                                   FCCL_ALGO_ONESHOT_PIPE, FCCL_PHASE_CREDIT, epoch, t);
        if (barrierOr(kProducerBarrier, kProducers, failed)) break;
        const uint64_t start = stepStart(i);
        const uint64_t len = stepLen(i);
        const uint64_t slot = slotOffset(i);
        for (uint64_t j = t; j < len; j += kLoads * kProducers) {
          Unit v[kLoads];
#pragma unroll
          for (int k = 0; k < kLoads; k++)
            if (j + k * kProducers < len) IO::load(a.sendbuf, start + j + k * kProducers, a.bytes, v[k]);
#pragma unroll
          for (int k = 0; k < kLoads; k++) {
            if (j + k * kProducers >= len) break;
            const uint64_t at = slot + (j + k * kProducers) * FCCL_UNIT_BYTES;
#pragma unroll
            for (int p = 0; p < NR; p++)
              if (rings[p] != 0) st_data16(ptr<char>(rings[p] + at), v[k].words[0], v[k].words[1]);
          }
        }
        (void)barrierOr(kProducerBarrier, kProducers, false);
        if (t == FCCL_DEVICE_MAX_RANKS) stepsRead = i + 1;
        postPeersFrom(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)(i + 1)), true, t);
      }
    });
  } else {
    const int t = threadIdx.x - kProducers;
    for (uint64_t i = 0; i < mySteps; i++) {
      bool failed = pollPeer(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)(i + 1)), true,
                             FCCL_ALGO_ONESHOT_PIPE, FCCL_PHASE_INBOX, epoch, t);
      if (a.inPlace && t == FCCL_DEVICE_MAX_RANKS) { /* our producers may lag behind the peers' */
        Spin spin(c, FCCL_ALGO_ONESHOT_PIPE, FCCL_PHASE_INBOX, me, epoch);
        while (stepsRead <= i && !failed) failed = spin.spin();
      }
      if (barrierOr(kConsumerBarrier, FCCL_DEVICE_THREADS - kProducers, failed)) break;
      const uint64_t start = stepStart(i);
      /* Rank w's units: our input (w == me) or slot i of w's ring in our inbox, shifted so unit u addresses it. */
      uint64_t bases[FCCL_DEVICE_MAX_RANKS];
#pragma unroll
      for (int w = 0; w < FCCL_DEVICE_MAX_RANKS; w++)
        bases[w] = w == me ? a.sendbuf : ring(me, w) + slotOffset(i) - start * FCCL_UNIT_BYTES;
      reducePulled<TT, OpTraits<OP>>(bases, n, start, start + stepLen(i), t, FCCL_DEVICE_THREADS - kProducers,
                                     a.bytes,
                                     [&](auto, uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, a.bytes, out); });
      (void)barrierOr(kConsumerBarrier, FCCL_DEVICE_THREADS - kProducers, false);
      postPeersFrom(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)(i + 1)), false, t);
    }
  }
  __syncthreads();
  epochEnd(c, epoch);
}

#define FCCL_TABLE_KERNEL allReduceOneshotPipe
FCCL_KERNEL_TABLE(oneshotPipeKernel)
#undef FCCL_TABLE_KERNEL

}  // namespace fccl
