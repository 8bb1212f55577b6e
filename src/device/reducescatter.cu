/*
 * Reduce-scatter: rank r's output is the reduction of block r (a.bytes bytes at sendbuf + r * a.bytes) of every
 * rank's input, in rank order with the all-reduce's reducers, so that its bits are the all-reduce's.
 *
 *   LL      every rank pushes its block p as LL packets into its region [parity][me] of rank p's LL area, then
 *           reduces its own block from its input and the peers' packets: one hop, no barrier.
 *   direct  (registered input) ready (pad A, relaxed, one acquire once seen): every peer's input is final; the
 *           owner pulls its block from every rank's input in place (all ranks' loads in flight before the first
 *           add) into its output; done (pad B, release, acquire): no peer reads our input any more.
 *   staged  (plain buffers) as the all-gather's staged form, with round k of block p pushed into rank p's inbox
 *           and reduced there from our own input and every writer's inbox region.
 * In place (recvbuf == sendbuf + rank * a.bytes) is safe: a rank writes only its own block, which only it reads.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceScatterLL(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using OT = OpTraits<OP>;
  using IO = UnitIO<TT, 8>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t packets = divUp(a.bytes, FCCL_LL_DATA_BYTES);
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int me = c.rank;
  const uint64_t ownBlock = a.sendbuf + (uint64_t)me * a.bytes;
  Unit mine;
  if (first < packets) IO::load(ownBlock, first, a.bytes, mine);
  const uint64_t epoch = epochBegin(c);
  const uint64_t flag = (uint64_t)(uint32_t)epoch << 32;
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  for (uint64_t i = first; i < packets; i += stride) {
#pragma unroll
    for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++) {
      if (p >= n || p == me) continue;
      Unit d;
      IO::load(a.sendbuf + (uint64_t)p * a.bytes, i, a.bytes, d);
      const uint64_t lo = (d.words[0] & 0xffffffffull) | flag;
      const uint64_t hi = (d.words[0] >> 32) | flag;
      st_ll_packet(slotPtr(c, p, pushOffset) + i * FCCL_LL_PACKET_BYTES, lo, hi);
    }
  }

  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);
  bool failed = false;
  for (uint64_t i = first; i < packets && !failed; i += stride) {
    UnitReducer<TT, OT, 8> acc;
    for (int w = 0; w < n; w++) {
      Unit d;
      if (w == me) {
        d = mine;
        if (i != first) IO::load(ownBlock, i, a.bytes, d);
      } else {
        const char* packet = inbox + (uint64_t)w * perWriter + i * FCCL_LL_PACKET_BYTES;
        uint64_t lo, hi;
        Spin spin(c, FCCL_KERNEL_REDUCESCATTER_LL, FCCL_PHASE_LL, w, epoch);
        for (;;) {
          ld_ll_packet(packet, lo, hi);
          if ((lo & 0xffffffff00000000ull) == flag && (hi & 0xffffffff00000000ull) == flag) break;
          if (spin.spin()) {
            failed = true;
            break;
          }
        }
        if (failed) break;
        d.words[0] = (lo & 0xffffffffull) | (hi << 32);
      }
      if (w == 0)
        acc.first(d);
      else
        acc.add(d);
    }
    if (failed) break;
    Unit out;
    acc.result(out, n);
    IO::store(a.recvbuf, i, a.bytes, out);
  }
  epochEnd(c, epoch);
}

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceScatterDirect(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_KERNEL_REDUCESCATTER_DIRECT,
                FCCL_PHASE_READY, epoch)) {
    epochEnd(c, epoch);
    return;
  }
  /* Our block of every rank's input (constant indices keep the array in registers). */
  uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
  const uint64_t at = (uint64_t)me * a.bytes;
#pragma unroll
  for (int w = 0; w < NR; w++)
    if (w < n) bases[w] = a.peerSend[w] + at;
  reducePulled<TT, OpTraits<OP>, NR>(bases, n, 0, units, first, stride, a.bytes,
                                     [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, a.bytes, out); });
  __syncthreads();
  postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), false, FCCL_KERNEL_REDUCESCATTER_DIRECT,
                  FCCL_PHASE_DONE, epoch);
  epochEnd(c, epoch);
}

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceScatterStaged(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t roundCap = a.roundUnits;
  const uint64_t rounds = divUp(units, roundCap);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int kernel = FCCL_KERNEL_REDUCESCATTER_STAGED;

  /* Round k of block p into our inbox region of rank p, for every peer p, then pad A step k + 1. */
  auto push = [&](uint64_t k) -> bool {
    if (k >= 2 && waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k - 1), true, kernel,
                            FCCL_PHASE_CONSUMED, epoch))
      return false;
    const uint64_t start = k * roundCap;
    const uint64_t len = units - start < roundCap ? units - start : roundCap;
    const uint64_t parity = (epoch + k) & 1;
    for (int p = 0; p < n; p++) {
      if (p == me) continue;
      char* inbox = ptr<char>(stagingRegion(c, c.layout.inboxOffset, parity, me, p));
      const uint64_t block = a.sendbuf + (uint64_t)p * a.bytes;
      for (uint64_t j = first; j < len; j += stride) {
        Unit v;
        IO::load(block, start + j, a.bytes, v);
        st_data16(inbox + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
      }
    }
    __syncthreads();
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true);
    return true;
  };

  bool ok = rounds == 0 || push(0);
  for (uint64_t k = 0; ok && k < rounds; k++) {
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true, kernel, FCCL_PHASE_INBOX,
                  epoch))
      break;
    if (k + 1 < rounds && !push(k + 1)) break;
    const uint64_t start = k * roundCap;
    const uint64_t len = units - start < roundCap ? units - start : roundCap;
    const uint64_t parity = (epoch + k) & 1;
    {
      /* Rank w's units of our block: our input (w == me) or inbox [parity][w], shifted so that the block's unit
       * index addresses both (constant indices keep the array in registers). */
      uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
      peerRegionsInbound<NR>(c, c.layout.inboxOffset, parity, bases);
#pragma unroll
      for (int w = 0; w < NR; w++)
        bases[w] = w == me ? a.sendbuf + (uint64_t)me * a.bytes : bases[w] - start * FCCL_UNIT_BYTES;
      reducePulled<TT, OpTraits<OP>, NR>(bases, n, start, start + len, first, stride, a.bytes,
                                         [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, a.bytes, out); });
    }
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k + 1), true);
    if (k + 1 == rounds)
      (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)rounds), true, kernel,
                      FCCL_PHASE_CONSUMED, epoch);
  }
  epochEnd(c, epoch);
}

#define FCCL_TABLE_KERNEL reduceScatterLL
FCCL_KERNEL_TABLE(reduceScatterLLKernel)
#undef FCCL_TABLE_KERNEL
#define FCCL_TABLE_KERNEL reduceScatterDirect
FCCL_RANKED_KERNEL_TABLE(reduceScatterDirectKernel)
#undef FCCL_TABLE_KERNEL
#define FCCL_TABLE_KERNEL reduceScatterStaged
FCCL_RANKED_KERNEL_TABLE(reduceScatterStagedKernel)
#undef FCCL_TABLE_KERNEL

}  // namespace fccl
