/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine: what runs the collectives this library takes from NCCL. The product's is fccl (engine_fccl.c, over
 * include/fccl.h); the unit tests link a recording stand-in instead, so that the routing, grouping and lifecycle
 * logic of the rest of the library is checked without a GPU. Attach, release and registration are called between
 * fncclEngineEnter and fncclEngineLeave with the communicator's device.
 */
#ifndef FNCCL_ENGINE_H_
#define FNCCL_ENGINE_H_

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

/* The collectives an engine may carry; the rest of NCCL's calls are always NCCL's. */
enum fncclColl {
  FNCCL_ALLREDUCE = 0,
  FNCCL_ALLGATHER,
  FNCCL_REDUCESCATTER,
  FNCCL_BROADCAST, /* ncclBroadcast and ncclBcast */
  FNCCL_REDUCE,
  FNCCL_GATHER,
  FNCCL_SCATTER,
  FNCCL_NUM_COLLS
};

/* The collectives that take a reduction op. */
#define FNCCL_REDUCING_COLLS ((1u << FNCCL_ALLREDUCE) | (1u << FNCCL_REDUCESCATTER) | (1u << FNCCL_REDUCE))

/* One collective call, as the application made it. */
struct fncclOp {
  enum fncclColl coll;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op;  /* reductions: the application's (NCCL's) op */
  int engineOp;    /* the op as the engine knows it: op itself when built in, else the engine's twin of an
                    * ncclRedOpCreatePreMulSum op (set when the call is routed to the engine) */
  int root;        /* broadcast, reduce, gather, scatter */
  ncclComm_t comm;
  cudaStream_t stream;
};

struct fncclEngineComm;

/* What a rank brings to the attach of a ready NCCL communicator. */
struct fncclAttachRequest {
  ncclComm_t comm;          /* ready: its calls are issued by the caller, outside any group */
  int rank, nranks, cudaDev;
  int blocking;             /* 0: the communicator is non-blocking (its calls may answer ncclInProgress) */
  const char* name;         /* commName, for the logs; may be "" */
  uint32_t wanted;          /* the collectives this rank would let the engine carry (bits of enum fncclColl);
                             * 0 when something local keeps the engine away (then localWhy says what) */
  const char* localWhy;
  int minCTAs, maxCTAs;     /* the SM budget the engine's communicator keeps (NCCL's config and NCCL_MIN_CTAS /
                             * NCCL_MAX_CTAS); NCCL_CONFIG_UNDEF_INT: none */
  int timeoutMs;            /* bound of every wait for the peers */
  volatile int* abortFlag;  /* set while the attach runs: it gives up promptly */
};

/*
 * Collective over the communicator's ranks, outside any group: every rank learns what every rank wants and the
 * engine attaches only where all agree, so either every rank gets an engine communicator or none does. Returns 1
 * with *out and *carried (the collectives it carries, the same on every rank) when it attached; 0 with why filled
 * when the communicator stays NCCL's. Never leaves the NCCL communicator unusable.
 */
int fncclEngineAttach(const struct fncclAttachRequest* request, struct fncclEngineComm** out, uint32_t* carried,
                      char* why, size_t whySize);

/* Makes cudaDev current on the calling thread, with the relaxed CUDA graph capture mode (the attach allocates, and
 * another thread may be capturing), saving what was there; fncclEngineLeave restores it. */
struct fncclEngineScope {
  int savedDevice;
  int savedCaptureMode;
  int entered;
};
void fncclEngineEnter(int cudaDev, struct fncclEngineScope* scope);
void fncclEngineLeave(const struct fncclEngineScope* scope);

/* Whether the engine has coll at all. */
int fncclEngineHas(enum fncclColl coll);

/* Whether the engine can carry coll with this type and op (the same answer on every rank). An op from ncclNumOps
 * up (ncclRedOpCreatePreMulSum's) is taken by the reducing collectives only when twinned: the engine holds its twin,
 * made for this datatype. */
int fncclEngineTakes(enum fncclColl coll, ncclDataType_t datatype, ncclRedOp_t op, int twinned);

/* Whether the engine can make the twin of a pre-multiplied sum of datatype (the same answer on every rank). */
int fncclEngineTakesPreMulSum(ncclDataType_t datatype);
/* The engine's twin of ncclRedOpCreatePreMulSum's op: the same scalar, datatype and residence (host: read now;
 * device: read by every call that uses it). ncclSuccess with *engineOp, or NCCL's code for the failure
 * (fncclEngineThreadError has the words). Local to the rank; no work on any stream. */
ncclResult_t fncclEngineRedOpCreatePreMulSum(struct fncclEngineComm* ec, void* scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, int* engineOp);
/* Destroys a twin; calls already enqueued with it keep what they need. The engine's communicator release destroys
 * the twins left. */
ncclResult_t fncclEngineRedOpDestroy(struct fncclEngineComm* ec, int engineOp);

/* Enqueues op on the engine; ncclSuccess or NCCL's code for the failure (fncclEngineThreadError has the words). */
ncclResult_t fncclEngineLaunch(struct fncclEngineComm* ec, const struct fncclOp* op);

/* ncclSuccess, or the error the engine recorded for the communicator (a dead peer, a timeout, ranks out of step)
 * as NCCL's code. Cheap, any thread. */
ncclResult_t fncclEngineAsyncError(struct fncclEngineComm* ec);
/* The words of the communicator's recorded error; "" when none. */
const char* fncclEngineCommError(struct fncclEngineComm* ec);
/* The words of the calling thread's last engine failure. */
const char* fncclEngineThreadError(void);

/* Releases the engine's communicator: abort 0 is collective (every rank releases; bounded by the timeout), abort 1
 * stops its kernels at once and frees what is local without waiting for anyone. */
void fncclEngineRelease(struct fncclEngineComm* ec, int abort);

/* Collective registration of a buffer every rank registers alike (NCCL's windows); ncclSuccess or an error after
 * which nothing is registered on any rank. */
ncclResult_t fncclEngineRegister(struct fncclEngineComm* ec, void* buff, size_t size, void** handle);
ncclResult_t fncclEngineDeregister(struct fncclEngineComm* ec, void* handle);

/* A line saying which engine this is (the INFO line at load). */
const char* fncclEngineName(void);

#endif /* FNCCL_ENGINE_H_ */
