/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every environment parameter fccl reads: FCCL_PARAM(ID, TYPE, DEFAULT, DOC). The environment name is FCCL_<ID>.
 * docs/env.md must describe each (the env_doc unit test checks it).
 * No include guard: this file is an X-macro list, included with different definitions of FCCL_PARAM.
 */
FCCL_PARAM(DEBUG, FCCL_PARAM_STRING, "WARN", "Log level: NONE, VERSION, WARN, INFO or TRACE.")
FCCL_PARAM(DEBUG_SUBSYS, FCCL_PARAM_STRING, "INIT,BOOT,IPC,COLL,ENV,TOPO",
           "Comma list of subsystems to log (INIT, BOOT, IPC, COLL, ENV, TOPO, ALL); a leading ^ logs all but those.")
FCCL_PARAM(DEBUG_FILE, FCCL_PARAM_STRING, "",
           "Write logs to this file instead of stderr; %h expands to the host name, %p to the process id.")


/* ---- bootstrap ---- */
FCCL_PARAM(BOOTSTRAP_TIMEOUT, FCCL_PARAM_INT, "60000",
           "Milliseconds any wait for peers during communicator creation and destruction may last (config.timeoutMs "
           "overrides).")
FCCL_PARAM(SOCKET_IFNAME, FCCL_PARAM_STRING, "",
           "Network interface (name or prefix) whose address the bootstrap root listens on; empty: loopback.")
FCCL_PARAM(COMM_ID, FCCL_PARAM_STRING, "",
           "host:port where the bootstrap root listens (fcclGetUniqueId, and rank 0 of fcclCommInitFromEnv).")
FCCL_PARAM(COMM_SECRET, FCCL_PARAM_STRING, "",
           "fcclCommInitFromEnv: the secret every rank presents, the same random string of 16 characters or more "
           "on every rank, exported by the launcher; required with more than one rank.")

/* ---- transport ---- */
FCCL_PARAM(CUMEM_ENABLE, FCCL_PARAM_INT, "1",
           "1: fccl's shared buffers and fcclMemAlloc use cuMem with POSIX fd export where the GPU supports it; "
           "0: cudaMalloc and legacy CUDA IPC.")
FCCL_PARAM(FD_PASSING, FCCL_PARAM_STRING, "auto",
           "How cuMem file descriptors reach peer processes: auto (pidfd_getfd, else a Unix socket), pidfd, socket.")
FCCL_PARAM(ARENA_SLOTS, FCCL_PARAM_INT, "1",
           "Communicator slots per shared-buffer chunk of the per-device arena (1..32); equal on every rank.")

/* ---- collectives ---- */
FCCL_PARAM(ALGO, FCCL_PARAM_STRING, "",
           "All-reduce algorithm: empty or auto (by size), ll, oneshot, twoshot, or an exact variant "
           "(oneshot_push, oneshot_pull, twoshot_staged, twoshot_reg), or ll128; one that cannot run a call falls back "
           "to auto.")
FCCL_PARAM(ALLGATHER_ALGO, FCCL_PARAM_STRING, "",
           "All-gather algorithm: empty or auto (by size), ll, direct (registered buffers), staged, or copy (the copy "
           "engines, registered buffers); one that cannot run a call falls back to auto. Equal on every rank.")
FCCL_PARAM(REDUCESCATTER_ALGO, FCCL_PARAM_STRING, "",
           "Reduce-scatter algorithm: empty or auto, ll, direct or staged, as FCCL_ALLGATHER_ALGO (no copy form).")
FCCL_PARAM(BROADCAST_ALGO, FCCL_PARAM_STRING, "",
           "Broadcast algorithm: empty or auto, ll, direct, staged or copy, as FCCL_ALLGATHER_ALGO.")
FCCL_PARAM(COPY_MOVE_MIN, FCCL_PARAM_INT, "0",
           "Block bytes from which an all-gather or broadcast on registered buffers (or buffers captured in a graph) "
           "moves its data with the copy engines (cudaMemcpyAsync between two barriers) instead of the direct "
           "kernel; 0: never by the automatic choice (FCCL_ALLGATHER_ALGO=copy, FCCL_BROADCAST_ALGO=copy force it). "
           "Equal on every rank.")
FCCL_PARAM(FUSED_ALGO, FCCL_PARAM_STRING, "",
           "fcclAllReduceAddRMSNorm's form: empty or auto (two-shot from the size where the all-reduce switches to "
           "two-shot), oneshot, or twoshot (falls back to oneshot for a call it cannot run). Equal on every rank.")
FCCL_PARAM(FUSED_KERNEL, FCCL_PARAM_STRING, "",
           "fcclAllReduceAddRMSNorm's one-shot kernel: empty, auto or row (the row kernel), or legacy (its previous "
           "kernel, one block of 512 threads per row, for comparison measurements; its bits differ). Equal on every "
           "rank.")
FCCL_PARAM(MIN_CTAS, FCCL_PARAM_INT, "0",
           "SM budget: every collective kernel runs on at least this many blocks (one per SM at most); overrides "
           "fcclConfig_t.minCTAs, as NCCL_MIN_CTAS overrides NCCL's. 0: the config's. Equal on every rank.")
FCCL_PARAM(MAX_CTAS, FCCL_PARAM_INT, "0",
           "SM budget: every collective kernel runs on at most this many blocks, so that the rest of the GPU stays "
           "free for work that overlaps it; overrides fcclConfig_t.maxCTAs, as NCCL_MAX_CTAS overrides NCCL's. 0: "
           "the config's (none: one block per SM). Equal on every rank.")
FCCL_PARAM(TIMEOUT, FCCL_PARAM_INT, "600000",
           "Milliseconds a collective kernel waits for a peer before it gives up and records fcclTimeout.")
FCCL_PARAM(PEER_KEEPALIVE_MS, FCCL_PARAM_INT, "2000",
           "Peers whose process this one cannot watch (another host, another pid namespace) are watched through a TCP "
           "link each: its end is seen at once, and a host that stops answering its keepalive within about this many "
           "milliseconds fails the communicator. The bootstrap's connections carry the same keepalive, so that an "
           "init or an exchange with such a host ends as soon. 0: neither (those deaths are seen by FCCL_TIMEOUT).")
FCCL_PARAM(PDL, FCCL_PARAM_INT, "1",
           "1: launch the collective kernels with programmatic dependent launch (compute capability 9.0 and up), so "
           "a kernel's launch overlaps the end of the kernel before it on the stream; 0: plain launches.")
FCCL_PARAM(LL128, FCCL_PARAM_INT, "1",
           "1: the automatic choice may use LL128, which relies (as NCCL's LL128 does) on NVLink delivering a warp's "
           "128-byte line store whole; 0: never chosen automatically (FCCL_ALGO=ll128 still forces it), for GPUs that "
           "reach each other over PCIe. Equal on every rank.")
FCCL_PARAM(GRAPH_REGISTER, FCCL_PARAM_INT, "1",
           "1: an all-reduce captured into a CUDA graph with unregistered buffers, at a size where registered buffers "
           "run another algorithm, registers them with every rank for the graph's lifetime (a host exchange at "
           "capture: every rank must capture the call); 0: captured calls stage like eager ones. Equal on every rank.")
FCCL_PARAM(COPY_SCATTER_MIN, FCCL_PARAM_INT, "268435456",
           "Bytes from which an all-reduce of 2 ranks on registered buffers (or buffers captured in a graph), out of "
           "place, moves its reduce-scatter half with the copy engines (one cudaMemcpyAsync after a barrier) instead "
           "of the kernel's stores; 0: never, e.g. when the copy engines are busy with other transfers. Equal on "
           "every rank.")
FCCL_PARAM(STAGING_BYTES, FCCL_PARAM_INT, "33554432",
           "Bytes of staging per communicator and rank for unregistered buffers (and, for 2 ranks, the registered "
           "two-shot's reduce-scatter into the owner's inbox, up to messages of half this size); equal on every rank.")

/* ---- paths: fccl's kernels or NCCL (docs/paths.md) ---- */
FCCL_PARAM(PATH, FCCL_PARAM_STRING, "auto",
           "Which engine carries a communicator: auto (fccl's kernels on one host of up to 8 peer-accessible GPUs, "
           "the hierarchical path on several such hosts of equal size, NCCL otherwise), fccl (fail init where the "
           "kernels cannot), hier (fail init where the hierarchical path cannot run), nccl (always NCCL). Equal on "
           "every rank.")
FCCL_PARAM(P2P_DISABLE, FCCL_PARAM_INT, "0",
           "1: never map peer memory or run fccl's kernels; NCCL carries every call (NCCL's own NCCL_P2P_DISABLE is "
           "apart). Equal on every rank.")
FCCL_PARAM(NCCL_COMM, FCCL_PARAM_STRING, "off",
           "On the fccl path, the NCCL communicator for fcclSend, fcclRecv and fcclAllToAll: off (none: those calls "
           "fail saying to set this), init (made at init, required), auto (made at init where every rank loads NCCL "
           "and NCCL takes the layout). The NCCL path always has one. Equal on every rank.")
FCCL_PARAM(HOSTID, FCCL_PARAM_STRING, "",
           "The host identity this process reports instead of its host name and boot id (tests: processes of one "
           "machine that act as several hosts; pair it with NCCL_HOSTID). Empty: the real identity.")

/* ---- language bindings and the NCCL API library ---- */
FCCL_PARAM(LIBRARY, FCCL_PARAM_STRING, "",
           "Path of libfccl.so.0 for the Python layer (python/fccl) to load; the library itself does not use it.")
FCCL_PARAM(NCCL_LIBRARY, FCCL_PARAM_STRING, "",
           "Path of the real libnccl.so.2 for libfccl-nccl (docs/nccl-api.md) to forward to; libfccl ignores it.")
FCCL_PARAM(NCCL_API_DISABLE, FCCL_PARAM_STRING, "",
           "libfccl-nccl: collectives to leave to NCCL (allreduce, allgather, reducescatter, broadcast, reduce, "
           "gather, scatter) or all; libfccl ignores it.")
