/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A recording stand-in for fccl behind libfccl-nccl's core (nccl/engine.h), linked into libfccl-nccl-test.so for the
 * tests that run without a GPU. Each call writes one line to the trace file (FNCCL_TEST_TRACE), "fccl <what> ...",
 * beside the stand-in NCCL's lines, so that a test sees which engine got each call and in which order. It carries
 * what the product's engine carries (the same collectives, types and ops), and acts as told by:
 *   FAKE_ENGINE_REFUSE=why        the attach fails on this rank, saying why
 *   FAKE_ENGINE_ATTACH_WAIT_MS=N  the attach waits N ms (polling the abort flag) before it decides
 *   FAKE_ENGINE_ASYNC_ERROR=code  the attached communicator reports this NCCL result code as its error
 *   FAKE_ENGINE_FAIL_LAUNCH=N     the N-th launch (from 1) fails with ncclInvalidArgument
 *   FAKE_ENGINE_PREMUL_FAIL=N     the N-th twin of a pre-multiplied sum (from 1) cannot be made (ncclInvalidArgument)
 *   FAKE_ABORT_HANDSHAKE=1        an abort waits (5 s at most) until the stand-in NCCL's abort, revoke or shrink of
 *                                 the communicator has started, as fccl's abort waits for the device's work, NCCL's
 *                                 kernels included (the stand-in NCCL's waits for this abort in turn); one that waited
 *                                 in vain writes "fccl release-waited-in-vain"
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

struct standinRegistration {
  struct standinRegistration* next;
};

#define STANDIN_MAX_OPS 64

struct fncclEngineComm {
  ncclComm_t comm;
  int rank;
  struct standinRegistration* registrations; /* released with the communicator, as fccl's are */
  int opLive[STANDIN_MAX_OPS];               /* pre-multiplied sums: op ncclNumOps + i, as fccl numbers them */
};

static void trace(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char* fmt, ...) {
  const char* path = getenv("FNCCL_TEST_TRACE");
  if (!path || !path[0]) return;
  char line[512];
  int n = snprintf(line, sizeof(line), "fccl ");
  va_list args;
  va_start(args, fmt);
  n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, args);
  va_end(args);
  if (n > (int)sizeof(line) - 2) n = (int)sizeof(line) - 2;
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t written = write(fd, line, (size_t)n);
  (void)written;
  close(fd);
}

static int envInt(const char* name, int fallback) {
  const char* value = getenv(name);
  return value && value[0] ? atoi(value) : fallback;
}

static __thread char threadError[256];

const char* fncclEngineName(void) { return "the tests' recording stand-in"; }
void fncclEngineEnter(int cudaDev, struct fncclEngineScope* scope) {
  scope->savedDevice = cudaDev;
  scope->entered = 0;
}
void fncclEngineLeave(const struct fncclEngineScope* scope) { (void)scope; }

int fncclEngineHas(enum fncclColl coll) { return (int)coll >= 0 && coll < FNCCL_NUM_COLLS; }

int fncclEngineTakes(enum fncclColl coll, ncclDataType_t datatype, ncclRedOp_t op, int twinned) {
  if (!fncclEngineHas(coll)) return 0;
  if (!(FNCCL_REDUCING_COLLS & (1u << coll))) return (int)datatype >= 0 && datatype < ncclNumTypes;
  if ((int)datatype < 0 || datatype > ncclBfloat16) return 0;
  return ((int)op >= 0 && op < ncclNumOps) || ((int)op >= (int)ncclNumOps && twinned);
}

int fncclEngineTakesPreMulSum(ncclDataType_t datatype) { return (int)datatype >= 0 && datatype <= ncclBfloat16; }

/* Op values from ncclNumOps up, the lowest free first, as fccl gives them; the trace shows the scalar's address. */
ncclResult_t fncclEngineRedOpCreatePreMulSum(struct fncclEngineComm* ec, void* scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, int* engineOp) {
  static int made;
  const int n = __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED);
  if (n == envInt("FAKE_ENGINE_PREMUL_FAIL", 0)) {
    snprintf(threadError, sizeof(threadError), "the stand-in refused twin %d", n);
    trace("premulsum-refused comm=%p type=%d", (void*)ec->comm, (int)datatype);
    return ncclInvalidArgument;
  }
  int index = 0;
  while (index < STANDIN_MAX_OPS && ec->opLive[index]) index++;
  if (index == STANDIN_MAX_OPS) {
    snprintf(threadError, sizeof(threadError), "the stand-in holds %d ops already", STANDIN_MAX_OPS);
    return ncclSystemError;
  }
  ec->opLive[index] = 1;
  *engineOp = (int)ncclNumOps + index;
  trace("premulsum comm=%p op=%d type=%d residence=%d scalar=%p", (void*)ec->comm, *engineOp, (int)datatype,
        (int)residence, scalar);
  return ncclSuccess;
}

ncclResult_t fncclEngineRedOpDestroy(struct fncclEngineComm* ec, int engineOp) {
  const int index = engineOp - (int)ncclNumOps;
  if (index < 0 || index >= STANDIN_MAX_OPS || !ec->opLive[index]) {
    snprintf(threadError, sizeof(threadError), "the stand-in has no op %d", engineOp);
    return ncclInvalidArgument;
  }
  ec->opLive[index] = 0;
  trace("premulsum-destroy comm=%p op=%d", (void*)ec->comm, engineOp);
  return ncclSuccess;
}

int fncclEngineAttach(const struct fncclAttachRequest* r, struct fncclEngineComm** out, uint32_t* carried, char* why,
                      size_t whySize) {
  *out = NULL;
  *carried = 0;
  const int waitMs = envInt("FAKE_ENGINE_ATTACH_WAIT_MS", 0);
  for (int waited = 0; waited < waitMs; waited++) {
    if (__atomic_load_n(r->abortFlag, __ATOMIC_ACQUIRE)) {
      trace("attach-aborted comm=%p", (void*)r->comm);
      snprintf(why, whySize, "aborted during the attach");
      return 0;
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&pause, NULL);
  }
  const char* refuse = getenv("FAKE_ENGINE_REFUSE");
  char minCTAs[16] = "unset", maxCTAs[16] = "unset"; /* NCCL_CONFIG_UNDEF_INT: no bound */
  if (r->minCTAs > 0) snprintf(minCTAs, sizeof(minCTAs), "%d", r->minCTAs);
  if (r->maxCTAs > 0) snprintf(maxCTAs, sizeof(maxCTAs), "%d", r->maxCTAs);
  trace("attach comm=%p rank=%d nranks=%d blocking=%d wanted=%x minctas=%s maxctas=%s why=%s", (void*)r->comm, r->rank,
        r->nranks, r->blocking, r->wanted, minCTAs, maxCTAs, r->localWhy ? r->localWhy : "");
  if (r->wanted == 0) {
    snprintf(why, whySize, "rank %d: %s", r->rank, r->localWhy);
    return 0;
  }
  if (refuse && refuse[0]) {
    snprintf(why, whySize, "%s", refuse);
    return 0;
  }
  struct fncclEngineComm* ec = calloc(1, sizeof(*ec));
  if (!ec) return 0;
  ec->comm = r->comm;
  ec->rank = r->rank;
  *out = ec;
  *carried = r->wanted;
  snprintf(why, whySize, "the stand-in attached");
  return 1;
}

ncclResult_t fncclEngineLaunch(struct fncclEngineComm* ec, const struct fncclOp* op) {
  static int launches;
  const int n = __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
  if (n == envInt("FAKE_ENGINE_FAIL_LAUNCH", 0)) {
    snprintf(threadError, sizeof(threadError), "the stand-in refused launch %d", n);
    return ncclInvalidArgument;
  }
  static const char* const names[] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                      "reduce",    "gather",    "scatter"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == FNCCL_NUM_COLLS, "a name for every collective");
  const int reduces = (FNCCL_REDUCING_COLLS & (1u << op->coll)) != 0;
  if (reduces && (int)op->op >= (int)ncclNumOps) {
    const int index = op->engineOp - (int)ncclNumOps;
    if (index < 0 || index >= STANDIN_MAX_OPS || !ec->opLive[index]) {
      snprintf(threadError, sizeof(threadError), "the stand-in was handed op %d, which it does not hold", op->engineOp);
      trace("launch-with-dead-op comm=%p op=%d", (void*)ec->comm, op->engineOp);
      return ncclInvalidArgument;
    }
  }
  trace("%s comm=%p send=%p recv=%p count=%zu type=%d op=%d engineop=%d root=%d stream=%p", names[op->coll],
        (void*)ec->comm, op->sendbuff, (void*)op->recvbuff, op->count, (int)op->datatype, (int)op->op,
        reduces ? op->engineOp : -1, op->root, (void*)op->stream);
  return ncclSuccess;
}

ncclResult_t fncclEngineAsyncError(struct fncclEngineComm* ec) {
  (void)ec;
  return (ncclResult_t)envInt("FAKE_ENGINE_ASYNC_ERROR", 0);
}

const char* fncclEngineCommError(struct fncclEngineComm* ec) {
  static __thread char text[128];
  snprintf(text, sizeof(text), "the stand-in's rank %d saw its peer die", ec->rank);
  return text;
}

const char* fncclEngineThreadError(void) { return threadError; }

/* Whether the stand-in NCCL's abort, revoke or shrink of comm appears in the trace within 5 s. */
static int awaitNcclAbort(ncclComm_t comm) {
  const char* path = getenv("FNCCL_TEST_TRACE");
  char lines[3][96];
  snprintf(lines[0], sizeof(lines[0]), "nccl CommAbort comm=%p ", (void*)comm);
  snprintf(lines[1], sizeof(lines[1]), "nccl CommRevoke comm=%p ", (void*)comm);
  snprintf(lines[2], sizeof(lines[2]), "nccl CommShrink comm=%p ", (void*)comm);
  for (int waited = 0; path && waited < 5000; waited++) {
    FILE* file = fopen(path, "r");
    char line[600];
    int found = 0;
    while (file && !found && fgets(line, sizeof(line), file))
      for (int i = 0; i < 3 && !found; i++) found = strncmp(line, lines[i], strlen(lines[i])) == 0;
    if (file) fclose(file);
    if (found) return 1;
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&pause, NULL);
  }
  return 0;
}

void fncclEngineRelease(struct fncclEngineComm* ec, int abort) {
  if (!ec) return;
  int live = 0;
  while (ec->registrations) {
    struct standinRegistration* next = ec->registrations->next;
    free(ec->registrations);
    ec->registrations = next;
    live++;
  }
  trace("release comm=%p abort=%d registrations=%d", (void*)ec->comm, abort, live);
  if (abort && envInt("FAKE_ABORT_HANDSHAKE", 0)) {
    if (!awaitNcclAbort(ec->comm)) trace("release-waited-in-vain comm=%p", (void*)ec->comm);
  }
  free(ec);
}

ncclResult_t fncclEngineRegister(struct fncclEngineComm* ec, void* buff, size_t size, void** handle) {
  trace("register comm=%p buff=%p size=%zu", (void*)ec->comm, buff, size);
  struct standinRegistration* registration = calloc(1, sizeof(*registration));
  if (!registration) return ncclSystemError;
  registration->next = ec->registrations;
  ec->registrations = registration;
  *handle = registration;
  return ncclSuccess;
}

ncclResult_t fncclEngineDeregister(struct fncclEngineComm* ec, void* handle) {
  trace("deregister comm=%p", (void*)ec->comm);
  struct standinRegistration** link = &ec->registrations;
  while (*link && *link != handle) link = &(*link)->next;
  if (!*link) return ncclInvalidArgument;
  *link = (*link)->next;
  free(handle);
  return ncclSuccess;
}
