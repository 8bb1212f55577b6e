/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libfccl-nccl without a GPU: the library (its core with the recording stand-in engine, or the product) over the
 * stand-in NCCL (standin/fake_nccl.c), both writing what reached them to one trace file, which each scenario reads.
 *
 * usage: test_nccl_api SCENARIO bypath|preload
 *        test_nccl_api gpus          prints the number of visible CUDA devices (0 without a driver)
 *   bypath   the library is opened by path, as PyNccl does (FNCCL_TEST_SHIM names it), and every name is bound on
 *            its handle;
 *   preload  the library is LD_PRELOADed (by the test's environment): names come from the global scope, where the
 *            stand-in NCCL's calls into its own exported names land in the library too.
 * The stand-in NCCL is found through FCCL_NCCL_LIBRARY. Scenarios: see the table at the end.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../nccl/fccl_nccl.h"
#include "test.h"

/* ---- the library's functions, bound as the mode says ---------------------------------------------------------- */

static struct {
#define FN(ret, name, params) ret(*name) params;
  FN(ncclResult_t, GetVersion, (int*))
  FN(const char*, GetErrorString, (ncclResult_t))
  FN(const char*, GetLastError, (ncclComm_t))
  FN(ncclResult_t, GetUniqueId, (ncclUniqueId*))
  FN(ncclResult_t, CommInitRank, (ncclComm_t*, int, ncclUniqueId, int))
  FN(ncclResult_t, CommInitRankConfig, (ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*))
  FN(ncclResult_t, CommInitAll, (ncclComm_t*, int, const int*))
  FN(ncclResult_t, CommSplit, (ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*))
  FN(ncclResult_t, CommShrink, (ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int))
  FN(ncclResult_t, CommFinalize, (ncclComm_t))
  FN(ncclResult_t, CommDestroy, (ncclComm_t))
  FN(ncclResult_t, CommAbort, (ncclComm_t))
  FN(ncclResult_t, CommRevoke, (ncclComm_t, int))
  FN(ncclResult_t, CommGetAsyncError, (ncclComm_t, ncclResult_t*))
  FN(ncclResult_t, CommRegister, (const ncclComm_t, void*, size_t, void**))
  FN(ncclResult_t, CommDeregister, (const ncclComm_t, void*))
  FN(ncclResult_t, CommWindowRegister, (ncclComm_t, void*, size_t, ncclWindow_t*, int))
  FN(ncclResult_t, CommWindowDeregister, (ncclComm_t, ncclWindow_t))
  FN(ncclResult_t, RedOpCreatePreMulSum, (ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t))
  FN(ncclResult_t, RedOpDestroy, (ncclRedOp_t, ncclComm_t))
  FN(ncclResult_t, AllReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, AllGather, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, ReduceScatter, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, Broadcast, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, Bcast, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, Reduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, Gather, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, Scatter, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, AlltoAll, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, Send, (const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, Recv, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
  FN(ncclResult_t, GroupStart, (void))
  FN(ncclResult_t, GroupEnd, (void))
  FN(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t*))
  FN(ncclResult_t, pAllReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))
  FN(int, Stats, (fcclNcclStats_t*))
#undef FN
} api;

static void* library;
static char tracePath[256];
static int preloaded;

static void* bind(const char* name) {
  void* symbol = dlsym(library, name);
  if (!symbol) {
    fprintf(stderr, "FAIL: %s is not bound (%s)\n", name, dlerror());
    exit(1);
  }
  return symbol;
}

static void loadLibrary(const char* mode) {
  snprintf(tracePath, sizeof(tracePath), "%s/fnccl-trace-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  int fd = mkstemp(tracePath);
  if (fd < 0) {
    perror("mkstemp");
    exit(1);
  }
  close(fd);
  setenv("FNCCL_TEST_TRACE", tracePath, 1);
  preloaded = strcmp(mode, "preload") == 0;
  if (preloaded) {
    library = RTLD_DEFAULT;
  } else {
    const char* path = getenv("FNCCL_TEST_SHIM");
    library = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!library) {
      fprintf(stderr, "FAIL: cannot open FNCCL_TEST_SHIM=%s: %s\n", path ? path : "(unset)", dlerror());
      exit(1);
    }
  }
#define BIND(field, name) *(void**)&api.field = bind(name)
  BIND(GetVersion, "ncclGetVersion");
  BIND(GetErrorString, "ncclGetErrorString");
  BIND(GetLastError, "ncclGetLastError");
  BIND(GetUniqueId, "ncclGetUniqueId");
  BIND(CommInitRank, "ncclCommInitRank");
  BIND(CommInitRankConfig, "ncclCommInitRankConfig");
  BIND(CommInitAll, "ncclCommInitAll");
  BIND(CommSplit, "ncclCommSplit");
  BIND(CommShrink, "ncclCommShrink");
  BIND(CommFinalize, "ncclCommFinalize");
  BIND(CommDestroy, "ncclCommDestroy");
  BIND(CommAbort, "ncclCommAbort");
  BIND(CommRevoke, "ncclCommRevoke");
  BIND(CommGetAsyncError, "ncclCommGetAsyncError");
  BIND(CommRegister, "ncclCommRegister");
  BIND(CommDeregister, "ncclCommDeregister");
  BIND(CommWindowRegister, "ncclCommWindowRegister");
  BIND(CommWindowDeregister, "ncclCommWindowDeregister");
  BIND(RedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum");
  BIND(RedOpDestroy, "ncclRedOpDestroy");
  BIND(AllReduce, "ncclAllReduce");
  BIND(AllGather, "ncclAllGather");
  BIND(ReduceScatter, "ncclReduceScatter");
  BIND(Broadcast, "ncclBroadcast");
  BIND(Bcast, "ncclBcast");
  BIND(Reduce, "ncclReduce");
  BIND(Gather, "ncclGather");
  BIND(Scatter, "ncclScatter");
  BIND(AlltoAll, "ncclAlltoAll");
  BIND(Send, "ncclSend");
  BIND(Recv, "ncclRecv");
  BIND(GroupStart, "ncclGroupStart");
  BIND(GroupEnd, "ncclGroupEnd");
  BIND(GroupSimulateEnd, "ncclGroupSimulateEnd");
  BIND(pAllReduce, "pncclAllReduce");
  BIND(Stats, "fcclNcclGetStats");
#undef BIND
  /* The names must be the library's, not the stand-in NCCL's. */
  Dl_info info;
  if (!dladdr((void*)api.AllReduce, &info) || !strstr(info.dli_fname, "fccl-nccl")) {
    fprintf(stderr, "FAIL: ncclAllReduce comes from %s, not libfccl-nccl\n", info.dli_fname ? info.dli_fname : "?");
    exit(1);
  }
}

/* ---- the trace --------------------------------------------------------------------------------------------------- */

static char traceText[1 << 20];

static const char* traceRead(void) {
  FILE* file = fopen(tracePath, "r");
  size_t length = file ? fread(traceText, 1, sizeof(traceText) - 1, file) : 0;
  if (file) fclose(file);
  traceText[length] = '\0';
  return traceText;
}

static void traceClear(void) {
  if (truncate(tracePath, 0) != 0) perror("truncate");
}

/* Position of the first line containing every word of pattern (space separated, formatted), or -1. */
static long traceFind(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static long traceFindFrom(long from, const char* pattern) {
  const char* text = traceRead();
  long offset = 0;
  for (const char* line = text; *line;) {
    const char* end = strchr(line, '\n');
    size_t length = end ? (size_t)(end - line) : strlen(line);
    if (offset >= from) {
      char copy[600], words[600];
      snprintf(copy, sizeof(copy), "%.*s", (int)length, line);
      snprintf(words, sizeof(words), "%s", pattern);
      int all = 1;
      char* save = NULL;
      for (char* word = strtok_r(words, " ", &save); word && all; word = strtok_r(NULL, " ", &save)) {
        /* a word must match a whole field of the line */
        char field[128];
        snprintf(field, sizeof(field), " %s ", word);
        char padded[640];
        snprintf(padded, sizeof(padded), " %s ", copy);
        all = strstr(padded, field) != NULL;
      }
      if (all) return offset;
    }
    offset += (long)length + 1;
    line += length + (end ? 1 : 0);
  }
  return -1;
}

static long traceFind(const char* fmt, ...) {
  char pattern[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(pattern, sizeof(pattern), fmt, args);
  va_end(args);
  return traceFindFrom(0, pattern);
}

static int traceCount(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static int traceCount(const char* fmt, ...) {
  char pattern[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(pattern, sizeof(pattern), fmt, args);
  va_end(args);
  int count = 0;
  for (long at = traceFindFrom(0, pattern); at >= 0; at = traceFindFrom(at + 1, pattern)) count++;
  return count;
}

#define EXPECT_TRACE(...) EXPECT_MSG(traceFind(__VA_ARGS__) >= 0, "trace lacks: " __VA_ARGS__)
#define EXPECT_NO_TRACE(...) EXPECT_MSG(traceFind(__VA_ARGS__) < 0, "trace has: " __VA_ARGS__)
#define EXPECT_BEFORE(a, b) EXPECT_MSG(a >= 0 && b >= 0 && a < b, "trace order: %ld before %ld expected", a, b)

static void dumpTrace(void) { fprintf(stderr, "---- trace ----\n%s---- end ----\n", traceRead()); }

/* ---- helpers ---------------------------------------------------------------------------------------------------- */

static ncclUniqueId newId(void) {
  ncclUniqueId id;
  EXPECT_EQ_INT(api.GetUniqueId(&id), ncclSuccess);
  return id;
}

/* A blocking communicator of one rank, attached (the stand-in engine attaches unless told otherwise). */
static ncclComm_t oneRank(void) {
  ncclComm_t comm = NULL;
  EXPECT_EQ_INT(api.CommInitRank(&comm, 1, newId(), 0), ncclSuccess);
  EXPECT(comm != NULL);
  return comm;
}

static fcclNcclStats_t stats(void) {
  fcclNcclStats_t s;
  memset(&s, 0, sizeof(s));
  s.size = sizeof(s);
  EXPECT_EQ_INT(api.Stats(&s), 0);
  return s;
}

static char buf[4096];
#define SEND ((const void*)buf)
#define RECV ((void*)(buf + 2048))
#define STREAM ((cudaStream_t)(uintptr_t)0x5)

/* ---- scenarios --------------------------------------------------------------------------------------------------- */

static void scenarioVersion(void) {
  int version = 0;
  EXPECT_EQ_INT(api.GetVersion(&version), ncclSuccess);
  EXPECT_EQ_INT(version, atoi(getenv("FAKE_NCCL_VERSION") ? getenv("FAKE_NCCL_VERSION") : "22809"));
  EXPECT_STR_CONTAINS(api.GetErrorString(ncclRemoteError), "fake-nccl: remote error");
  int (*pGetVersion)(int*) = (int (*)(int*))bind("pncclGetVersion");
  version = 0;
  EXPECT_EQ_INT(pGetVersion(&version), ncclSuccess);
  EXPECT(version > 0);
  EXPECT_TRACE("nccl GetVersion");
}

/* A config of size bytes at the very end of a readable page: reading past size faults. */
static ncclConfig_t* guardedConfig(size_t size, void** mapping) {
  long page = sysconf(_SC_PAGESIZE);
  char* base = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return NULL;
  mprotect(base + page, (size_t)page, PROT_NONE);
  *mapping = base;
  /* 8-byte aligned end: size is a multiple of 8 for every size used here, or the struct ends a little early. */
  ncclConfig_t* config = (ncclConfig_t*)(base + page - ((size + 7) & ~(size_t)7));
  memset(config, 0x7f, size); /* garbage in every field the caller's header does not know */
  config->size = size;
  config->magic = 0xcafebeef;
  config->version = NCCL_VERSION(2, 14, 0);
  return config;
}

static void scenarioConfig(void) {
  long page = sysconf(_SC_PAGESIZE);
  void* mapping = NULL;
  /* 1. an older caller's struct, ending before maxCTAs: only blocking and minCTAs are its own */
  size_t small = offsetof(ncclConfig_t, maxCTAs);
  ncclConfig_t* config = guardedConfig(small, &mapping);
  EXPECT(config != NULL);
  config->blocking = 1;
  config->cgaClusterSize = NCCL_CONFIG_UNDEF_INT;
  config->minCTAs = NCCL_CONFIG_UNDEF_INT;
  unsigned char before[256];
  memcpy(before, config, small);
  ncclComm_t comm = NULL;
  traceClear();
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, config), ncclSuccess);
  EXPECT(memcmp(before, config, small) == 0); /* untouched */
  EXPECT_TRACE("nccl CommInitRankConfig comm=%p config=%p size=%zu blocking=1", (void*)comm, (void*)config, small);
  EXPECT_TRACE("fccl attach comm=%p wanted=7f minctas=unset", (void*)comm); /* the older struct's minCTAs: unset */
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  munmap(mapping, (size_t)page * 2);

  /* 2. this header's struct with maxCTAs set: fccl's communicator keeps the budget and carries the collectives */
  config = guardedConfig(sizeof(ncclConfig_t), &mapping);
  ncclConfig_t initial = NCCL_CONFIG_INITIALIZER;
  memcpy(config, &initial, sizeof(initial));
  config->maxCTAs = 4;
  config->commName = "capped";
  fcclNcclStats_t start = stats();
  traceClear();
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, config), ncclSuccess);
  EXPECT_TRACE("fccl attach comm=%p wanted=7f minctas=unset maxctas=4", (void*)comm);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 8, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.Gather(SEND, RECV, 8, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce comm=%p count=8", (void*)comm);
  EXPECT_TRACE("fccl gather comm=%p count=8", (void*)comm);
  EXPECT_NO_TRACE("nccl AllReduce");
  fcclNcclStats_t end = stats();
  EXPECT_EQ_INT(end.commsWithBudget - start.commsWithBudget, 1);
  EXPECT_EQ_INT(end.commsWithFccl - start.commsWithFccl, 1);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);

  /* 2b. NCCL_MAX_CTAS and NCCL_MIN_CTAS, NCCL's variables: a positive value overrides the config's, as in NCCL */
  setenv("NCCL_MAX_CTAS", "6", 1);
  setenv("NCCL_MIN_CTAS", "2", 1);
  traceClear();
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, config), ncclSuccess);
  EXPECT_TRACE("fccl attach comm=%p wanted=7f minctas=2 maxctas=6", (void*)comm);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  setenv("NCCL_MAX_CTAS", "0", 1); /* not positive: NCCL ignores it, and so does the library */
  setenv("NCCL_MIN_CTAS", "three", 1);
  traceClear();
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, config), ncclSuccess);
  EXPECT_TRACE("fccl attach comm=%p wanted=7f minctas=unset maxctas=4", (void*)comm);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  setenv("NCCL_MAX_CTAS", "3", 1); /* with no config at all */
  unsetenv("NCCL_MIN_CTAS");
  comm = oneRank();
  EXPECT_TRACE("fccl attach comm=%p wanted=7f minctas=unset maxctas=3", (void*)comm);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  /* a minimum above the maximum (NCCL refuses it; here the stand-in NCCL does not): NCCL carries the collectives */
  setenv("NCCL_MIN_CTAS", "8", 1);
  traceClear();
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, config), ncclSuccess);
  EXPECT_TRACE("fccl attach comm=%p wanted=0", (void*)comm);
  EXPECT_STR_CONTAINS(traceRead(), "at least 8 CTAs and at most 3");
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  unsetenv("NCCL_MAX_CTAS");
  unsetenv("NCCL_MIN_CTAS");
  munmap(mapping, (size_t)page * 2);

  /* 3. the zero-CTA policy keeps fccl away too */
  config = guardedConfig(sizeof(ncclConfig_t), &mapping);
  memcpy(config, &initial, sizeof(initial));
  config->CTAPolicy = NCCL_CTA_POLICY_ZERO;
  traceClear();
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, config), ncclSuccess);
  EXPECT_TRACE("fccl attach comm=%p wanted=0", (void*)comm);
  EXPECT_STR_CONTAINS(traceRead(), "NCCL_CTA_POLICY_ZERO");
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  munmap(mapping, (size_t)page * 2);

  /* 4. a newer caller's larger struct, non-blocking: ncclInProgress until NCCL and the attach are done */
  size_t large = sizeof(ncclConfig_t) + 64;
  config = guardedConfig(large, &mapping);
  memcpy(config, &initial, sizeof(initial));
  config->size = large;
  config->blocking = 0;
  memcpy(before, config, sizeof(initial));
  traceClear();
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, config), ncclInProgress);
  EXPECT(memcmp(before, config, sizeof(initial)) == 0);
  EXPECT_TRACE("nccl CommInitRankConfig comm=%p config=%p size=%zu blocking=0", (void*)comm, (void*)config, large);
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 100000 && state == ncclInProgress; i++) {
    EXPECT_EQ_INT(api.CommGetAsyncError(comm, &state), ncclSuccess);
    if (state == ncclInProgress) usleep(100);
  }
  EXPECT_EQ_INT(state, ncclSuccess);
  EXPECT_TRACE("fccl attach comm=%p blocking=0 wanted=7f", (void*)comm);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  munmap(mapping, (size_t)page * 2);

  /* 5. no config, and a config without NCCL's magic (NCCL refuses it; no communicator) */
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, NULL), ncclSuccess);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  comm = NULL;
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, &bad), ncclInvalidArgument);
}

static void scenarioRoute(void) {
  ncclComm_t comm = oneRank();
  fcclNcclStats_t start = stats();
  traceClear();
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 100, ncclBfloat16, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce comm=%p send=%p recv=%p count=100 type=9 op=0", (void*)comm, SEND, RECV);
  EXPECT_EQ_INT(api.AllGather(SEND, RECV, 7, ncclInt32, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allgather comm=%p count=7 type=2", (void*)comm);
  EXPECT_EQ_INT(api.ReduceScatter(SEND, RECV, 5, ncclFloat16, ncclMax, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl reducescatter comm=%p count=5 type=6 op=2", (void*)comm);
  EXPECT_EQ_INT(api.Broadcast(SEND, RECV, 3, ncclUint8, 0, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl broadcast comm=%p send=%p recv=%p count=3 root=0", (void*)comm, SEND, RECV);
  EXPECT_EQ_INT(api.Bcast(RECV, 4, ncclUint8, 0, comm, STREAM), ncclSuccess); /* in place */
  EXPECT_TRACE("fccl broadcast comm=%p send=%p recv=%p count=4", (void*)comm, RECV, RECV);
  EXPECT_EQ_INT(api.pAllReduce(SEND, RECV, 11, ncclFloat32, ncclAvg, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce comm=%p count=11 type=7 op=4", (void*)comm);
  EXPECT_NO_TRACE("nccl AllReduce");
  EXPECT_NO_TRACE("nccl Broadcast");
  EXPECT_EQ_INT(api.Reduce(SEND, RECV, 6, ncclFloat32, ncclMin, 0, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl reduce comm=%p send=%p recv=%p count=6 type=7 op=3 root=0", (void*)comm, SEND, RECV);
  EXPECT_NO_TRACE("nccl Reduce");
  EXPECT_EQ_INT(api.Gather(SEND, RECV, 15, ncclInt8, 0, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl gather comm=%p send=%p recv=%p count=15 type=0 root=0", (void*)comm, SEND, RECV);
  EXPECT_EQ_INT(api.Scatter(SEND, RECV, 16, ncclFloat8e4m3, 0, comm, STREAM), ncclSuccess); /* a move: fccl's */
  EXPECT_TRACE("fccl scatter comm=%p send=%p recv=%p count=16 type=10 root=0", (void*)comm, SEND, RECV);
  EXPECT_NO_TRACE("nccl Gather");
  EXPECT_NO_TRACE("nccl Scatter");
  /* NCCL's: 8-bit float reductions, NCCL's own operators, point to point */
  EXPECT_EQ_INT(api.Reduce(SEND, RECV, 6, ncclFloat8e5m2, ncclSum, 0, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl Reduce comm=%p count=6 type=11 op=0 root=0", (void*)comm);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 9, ncclFloat8e4m3, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p count=9 type=10", (void*)comm);
  EXPECT_EQ_INT(api.AllGather(SEND, RECV, 9, ncclFloat8e5m2, comm, STREAM), ncclSuccess); /* a move: fccl's */
  EXPECT_TRACE("fccl allgather comm=%p count=9 type=11", (void*)comm);
  /* a pre-multiplied sum: NCCL's op first, then fccl's twin, which the reductions of its type then take */
  ncclRedOp_t premul = ncclSum, fp8 = ncclSum;
  float scalar = 0.5f;
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&premul, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT((int)premul, (int)ncclNumOps);
  EXPECT_BEFORE(traceFind("nccl RedOpCreatePreMulSum comm=%p op=5 type=7 residence=1", (void*)comm),
                traceFind("fccl premulsum comm=%p op=5 type=7 residence=1 scalar=%p", (void*)comm, (void*)&scalar));
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 12, ncclFloat32, premul, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce comm=%p count=12 type=7 op=5 engineop=5", (void*)comm);
  EXPECT_EQ_INT(api.ReduceScatter(SEND, RECV, 17, ncclFloat32, premul, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl reducescatter comm=%p count=17 type=7 op=5 engineop=5", (void*)comm);
  EXPECT_EQ_INT(api.Reduce(SEND, RECV, 14, ncclFloat32, premul, 0, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl reduce comm=%p count=14 type=7 op=5 engineop=5 root=0", (void*)comm);
  /* the op with another type than its own: NCCL's call (and NCCL's error) */
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 18, ncclBfloat16, premul, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p count=18 type=9 op=5", (void*)comm);
  /* 8-bit floats: NCCL makes the op, fccl no twin; their reductions stay NCCL's */
  traceClear();
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&fp8, &scalar, ncclFloat8e5m2, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT((int)fp8, (int)ncclNumOps + 1);
  EXPECT_NO_TRACE("fccl premulsum");
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 19, ncclFloat8e5m2, fp8, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p count=19 type=11 op=6", (void*)comm);
  EXPECT_EQ_INT(api.RedOpDestroy(fp8, comm), ncclSuccess);
  EXPECT_TRACE("nccl RedOpDestroy comm=%p op=6", (void*)comm);
  traceClear();
  EXPECT_EQ_INT(api.RedOpDestroy(premul, comm), ncclSuccess);
  EXPECT_BEFORE(traceFind("fccl premulsum-destroy comm=%p op=5", (void*)comm),
                traceFind("nccl RedOpDestroy comm=%p op=5", (void*)comm));
  /* destroyed: NCCL gives the value to the next op, and the twin follows the new op, not the old */
  double scalar64 = 3.0;
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&premul, &scalar64, ncclFloat64, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT((int)premul, (int)ncclNumOps);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 20, ncclFloat32, premul, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p count=20 type=7 op=5", (void*)comm);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 21, ncclFloat64, premul, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce comm=%p count=21 type=8 op=5 engineop=5", (void*)comm);
  /* an op that is not the communicator's: NCCL's call and error */
  EXPECT_EQ_INT(api.RedOpDestroy((ncclRedOp_t)(ncclNumOps + 7), comm), ncclInvalidArgument);
  /* the op is left for the communicator's destroy to take down (no leak: the sanitizer build checks) */
  EXPECT_EQ_INT(api.Send(SEND, 2, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.Recv(RECV, 2, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl Send comm=%p", (void*)comm);
  EXPECT_TRACE("nccl Recv comm=%p", (void*)comm);
  fcclNcclStats_t end = stats();
  EXPECT_EQ_INT(end.size, sizeof(end));
  EXPECT_EQ_INT(end.fcclCalls[FCCL_NCCL_ALLREDUCE] - start.fcclCalls[FCCL_NCCL_ALLREDUCE], 4);
  EXPECT_EQ_INT(end.fcclCalls[FCCL_NCCL_BROADCAST] - start.fcclCalls[FCCL_NCCL_BROADCAST], 2);
  EXPECT_EQ_INT(end.fcclCalls[FCCL_NCCL_ALLGATHER] - start.fcclCalls[FCCL_NCCL_ALLGATHER], 2);
  EXPECT_EQ_INT(end.fcclCalls[FCCL_NCCL_REDUCESCATTER] - start.fcclCalls[FCCL_NCCL_REDUCESCATTER], 2);
  EXPECT_EQ_INT(end.ncclCalls[FCCL_NCCL_ALLREDUCE] - start.ncclCalls[FCCL_NCCL_ALLREDUCE], 4);
  EXPECT_EQ_INT(end.fcclCalls[FCCL_NCCL_REDUCE] - start.fcclCalls[FCCL_NCCL_REDUCE], 2);
  EXPECT_EQ_INT(end.ncclCalls[FCCL_NCCL_REDUCE] - start.ncclCalls[FCCL_NCCL_REDUCE], 1);
  for (int c = 0; c < FCCL_NCCL_COLLS; c++) {
    EXPECT_EQ_INT(end.fcclCallsAll[c], end.fcclCalls[c]);
    EXPECT_EQ_INT(end.ncclCallsAll[c], end.ncclCalls[c]);
  }
  EXPECT_EQ_INT(end.fcclCallsAll[FCCL_NCCL_GATHER] - start.fcclCallsAll[FCCL_NCCL_GATHER], 1);
  EXPECT_EQ_INT(end.fcclCallsAll[FCCL_NCCL_SCATTER] - start.fcclCallsAll[FCCL_NCCL_SCATTER], 1);
  EXPECT_EQ_INT(end.ncclCallsAll[FCCL_NCCL_GATHER] - start.ncclCallsAll[FCCL_NCCL_GATHER], 0);
  EXPECT_EQ_INT(end.fcclPreMulSumCalls - start.fcclPreMulSumCalls, 4);
  EXPECT_EQ_INT(end.ncclPreMulSumCalls - start.ncclPreMulSumCalls, 3);
  EXPECT_EQ_INT(end.preMulSumOps - start.preMulSumOps, 2);
  EXPECT(end.commsWithFccl >= 1 && end.comms >= end.commsWithFccl);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);

  /* A caller of the first fccl_nccl.h passes its smaller struct: the five-collective counts, nothing past them. */
  struct {
    size_t size;
    uint64_t comms, commsWithFccl, fcclCalls[5], ncclCalls[5];
    uint64_t past;
  } older;
  memset(&older, 0xab, sizeof(older));
  older.size = offsetof(fcclNcclStats_t, fcclCallsAll);
  EXPECT_EQ_INT(older.size, 13 * 8);
  EXPECT_EQ_INT(api.Stats((fcclNcclStats_t*)&older), 0);
  EXPECT_EQ_INT(older.size, 13 * 8);
  EXPECT_EQ_INT(older.fcclCalls[FCCL_NCCL_ALLREDUCE], end.fcclCalls[FCCL_NCCL_ALLREDUCE]);
  EXPECT(older.past == 0xababababababababull);
  /* a newer header's larger struct: this library's part filled, size says how much */
  struct {
    fcclNcclStats_t known;
    uint64_t newer;
  } larger;
  memset(&larger, 0, sizeof(larger));
  larger.known.size = sizeof(larger);
  larger.newer = 7;
  EXPECT_EQ_INT(api.Stats(&larger.known), 0);
  EXPECT_EQ_INT(larger.known.size, sizeof(fcclNcclStats_t));
  EXPECT_EQ_INT(larger.newer, 7);
  EXPECT_EQ_INT(larger.known.preMulSumOps, end.preMulSumOps);
  fcclNcclStats_t tiny = {.size = sizeof(size_t)};
  EXPECT_EQ_INT(api.Stats(&tiny), ncclInvalidArgument);

  /* A communicator the library never saw (made through the stand-in directly) is NCCL's. */
  void* nccl = dlopen(getenv("FCCL_NCCL_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  EXPECT(nccl != NULL);
  if (nccl) {
    ncclResult_t (*realInit)(ncclComm_t*, int, ncclUniqueId,
                             int) = (ncclResult_t(*)(ncclComm_t*, int, ncclUniqueId, int))dlsym(nccl,
                                                                                                "pncclCommInitRank");
    ncclComm_t stranger = NULL;
    EXPECT_EQ_INT(realInit(&stranger, 1, newId(), 0), ncclSuccess);
    traceClear();
    EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 13, ncclFloat32, ncclSum, stranger, STREAM), ncclSuccess);
    EXPECT_TRACE("nccl AllReduce comm=%p count=13", (void*)stranger);
    EXPECT_NO_TRACE("fccl allreduce");
    EXPECT_EQ_INT(api.CommDestroy(stranger), ncclSuccess);
    dlclose(nccl);
  }
}

static void scenarioGroup(void) {
  ncclComm_t comm = oneRank();
  /* 1. a group of fccl's calls: NCCL's group opens and closes empty; the calls follow, in order, on fccl */
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 21, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.AllGather(SEND, RECV, 22, ncclFloat32, comm, STREAM), ncclSuccess);
  EXPECT_NO_TRACE("fccl allreduce"); /* recorded, not launched */
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  long start = traceFind("nccl GroupStart"), end = traceFind("nccl GroupEnd");
  long first = traceFind("fccl allreduce count=21"), second = traceFind("fccl allgather count=22");
  EXPECT_BEFORE(start, end);
  EXPECT_BEFORE(end, first);
  EXPECT_BEFORE(first, second);
  EXPECT_NO_TRACE("nccl AllReduce");

  /* 2. a call NCCL carries makes the whole group NCCL's, in order */
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 31, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.Send(SEND, 32, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 33, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  long a = traceFind("nccl AllReduce count=31"), s = traceFind("nccl Send count=32");
  long b = traceFind("nccl AllReduce count=33"), e = traceFind("nccl GroupEnd");
  EXPECT_BEFORE(traceFind("nccl GroupStart"), a);
  EXPECT_BEFORE(a, s);
  EXPECT_BEFORE(s, b);
  EXPECT_BEFORE(b, e);
  EXPECT_NO_TRACE("fccl allreduce");

  /* 3. nested: launched at the outermost end only */
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.ReduceScatter(SEND, RECV, 41, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  EXPECT_NO_TRACE("fccl reducescatter");
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  EXPECT_TRACE("fccl reducescatter count=41");
  EXPECT_EQ_INT(traceCount("nccl GroupStart"), 2);
  EXPECT_EQ_INT(traceCount("nccl GroupEnd"), 2);

  /* 4. a type fccl does not reduce sends the group to NCCL, the calls recorded before it first */
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 51, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 52, ncclFloat8e4m3, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.Broadcast(SEND, RECV, 53, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  EXPECT_BEFORE(traceFind("nccl AllReduce count=51"), traceFind("nccl AllReduce count=52"));
  EXPECT_BEFORE(traceFind("nccl AllReduce count=52"), traceFind("nccl Broadcast count=53"));
  EXPECT_NO_TRACE("fccl");

  /* 5. NCCL's estimate is of the group as NCCL would run it; nothing runs */
  traceClear();
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 61, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.GroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_BEFORE(traceFind("nccl AllReduce count=61"), traceFind("nccl GroupSimulateEnd"));
  EXPECT_NO_TRACE("fccl allreduce");
  /* and the thread is out of the group: the next call is eager */
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 62, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce count=62");

  /* 6. ncclGroupEnd without a group is NCCL's error */
  EXPECT(api.GroupEnd() != ncclSuccess);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
}

static void scenarioPreMulSum(void) {
  /* FAKE_ENGINE_PREMUL_FAIL=5: the fifth twin cannot be made */
  ncclComm_t comm = oneRank();
  ncclRedOp_t a = ncclSum, b = ncclSum;
  float scalar = 2.0f;
  float* device = (float*)(buf + 3072); /* the stand-ins read nothing: the address is what the trace shows */
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&a, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&b, device, ncclFloat16, ncclScalarDevice, comm), ncclSuccess);
  EXPECT_TRACE("fccl premulsum comm=%p op=6 type=6 residence=0 scalar=%p", (void*)comm, (void*)device);

  /* 1. destroyed inside a group while a recorded call uses it: both go after the group's end, after the launch */
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 101, ncclFloat32, a, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.RedOpDestroy(a, comm), ncclSuccess);
  EXPECT_NO_TRACE("nccl RedOpDestroy");
  EXPECT_NO_TRACE("fccl premulsum-destroy");
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  long launched = traceFind("fccl allreduce comm=%p count=101 type=7 op=5 engineop=5", (void*)comm);
  EXPECT_BEFORE(traceFind("nccl GroupEnd"), launched);
  EXPECT_BEFORE(launched, traceFind("fccl premulsum-destroy comm=%p op=5", (void*)comm));
  EXPECT_BEFORE(traceFind("fccl premulsum-destroy comm=%p op=5", (void*)comm),
                traceFind("nccl RedOpDestroy comm=%p op=5", (void*)comm));
  EXPECT_NO_TRACE("launch-with-dead-op");

  /* 2. the same, and then the group turns to NCCL: the recorded call goes to NCCL with the op still alive */
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&a, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT((int)a, (int)ncclNumOps);
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.ReduceScatter(SEND, RECV, 102, ncclFloat32, a, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.RedOpDestroy(a, comm), ncclSuccess);
  EXPECT_EQ_INT(api.Send(SEND, 103, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  EXPECT_BEFORE(traceFind("nccl ReduceScatter comm=%p count=102 type=7 op=5", (void*)comm), traceFind("nccl GroupEnd"));
  EXPECT_BEFORE(traceFind("nccl GroupEnd"), traceFind("nccl RedOpDestroy comm=%p op=5", (void*)comm));
  EXPECT_TRACE("fccl premulsum-destroy comm=%p op=5", (void*)comm);
  EXPECT_NO_TRACE("fccl reducescatter");

  /* 3. destroyed in a group that does not use it: at once; and a simulated group's deferred destroy is done too */
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 104, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.RedOpDestroy(b, comm), ncclSuccess);
  EXPECT_TRACE("nccl RedOpDestroy comm=%p op=6", (void*)comm);
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&a, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  EXPECT_EQ_INT(api.Reduce(SEND, RECV, 105, ncclFloat32, a, 0, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.RedOpDestroy(a, comm), ncclSuccess);
  EXPECT_EQ_INT(api.GroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_BEFORE(traceFind("nccl GroupSimulateEnd"), traceFind("nccl RedOpDestroy comm=%p op=5", (void*)comm));
  EXPECT_TRACE("fccl premulsum-destroy comm=%p op=5", (void*)comm);

  /* 4. the fifth twin fails: ncclRedOpCreatePreMulSum fails on this rank, NCCL's op is destroyed again, the output
   * is untouched, and the next op is made as usual */
  ncclRedOp_t c = (ncclRedOp_t)1234;
  traceClear();
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&c, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclInvalidArgument);
  EXPECT_EQ_INT((int)c, 1234);
  EXPECT_STR_CONTAINS(api.GetLastError(NULL), "refused twin 5");
  EXPECT_BEFORE(traceFind("fccl premulsum-refused comm=%p", (void*)comm),
                traceFind("nccl RedOpDestroy comm=%p op=5", (void*)comm));
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&c, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 106, ncclFloat32, c, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce comm=%p count=106 op=5 engineop=5", (void*)comm);

  /* 5. revoked: fccl's state goes, twins included; the op is NCCL's from then on, and its destroy NCCL's alone */
  traceClear();
  EXPECT_EQ_INT(api.CommRevoke(comm, 0), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 107, ncclFloat32, c, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p count=107 op=5", (void*)comm);
  EXPECT_EQ_INT(api.RedOpDestroy(c, comm), ncclSuccess);
  EXPECT_TRACE("nccl RedOpDestroy comm=%p op=5", (void*)comm);
  EXPECT_NO_TRACE("fccl premulsum-destroy");
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);

  /* 6. a communicator NCCL carries: its ops have no twin, on every rank alike */
  setenv("FAKE_ENGINE_REFUSE", "no peer access", 1);
  comm = oneRank();
  unsetenv("FAKE_ENGINE_REFUSE");
  traceClear();
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&a, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 108, ncclFloat32, a, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p count=108 op=5", (void*)comm);
  EXPECT_NO_TRACE("fccl premulsum");
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);

  /* 7. a non-blocking communicator not ready yet: refused, as NCCL refuses calls before ncclSuccess */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, &config), ncclInProgress);
  traceClear();
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&a, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclInvalidArgument);
  EXPECT_NO_TRACE("nccl RedOpCreatePreMulSum");
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 200000 && state == ncclInProgress; i++) {
    EXPECT_EQ_INT(api.CommGetAsyncError(comm, &state), ncclSuccess);
    if (state == ncclInProgress) usleep(50);
  }
  EXPECT_EQ_INT(state, ncclSuccess);
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&a, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 109, ncclFloat32, a, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce comm=%p count=109 op=5", (void*)comm);
  /* 8. destroyed with live ops: the communicator takes twins and ops down (no leak: the sanitizer build checks) */
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
}

static void scenarioLaunchFail(void) {
  /* FAKE_ENGINE_FAIL_LAUNCH=2: the group's second call fails; the third is not launched */
  ncclComm_t comm = oneRank();
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  for (int i = 0; i < 3; i++)
    EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 70 + i, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.GroupEnd(), ncclInvalidArgument);
  EXPECT_TRACE("fccl allreduce count=70");
  EXPECT_NO_TRACE("fccl allreduce count=72");
  EXPECT_STR_CONTAINS(api.GetLastError(NULL), "refused launch 2");
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
}

static void scenarioInitAll(void) {
  ncclComm_t comms[3] = {NULL, NULL, NULL};
  traceClear();
  EXPECT_EQ_INT(api.CommInitAll(comms, 3, NULL), ncclSuccess);
  for (int i = 0; i < 3; i++) EXPECT_TRACE("fccl attach comm=%p rank=%d nranks=3", (void*)comms[i], i);
  /* the first destroy takes fccl down for the whole clique, side by side; the others only NCCL's */
  traceClear();
  EXPECT_EQ_INT(api.CommDestroy(comms[0]), ncclSuccess);
  for (int i = 0; i < 3; i++) EXPECT_TRACE("fccl release comm=%p abort=0", (void*)comms[i]);
  EXPECT_BEFORE(traceFind("fccl release comm=%p", (void*)comms[0]),
                traceFind("nccl CommDestroy comm=%p", (void*)comms[0]));
  EXPECT_EQ_INT(api.CommDestroy(comms[1]), ncclSuccess);
  EXPECT_EQ_INT(api.CommDestroy(comms[2]), ncclSuccess);
  EXPECT_EQ_INT(traceCount("fccl release"), 3);

  /* two ranks of one NCCL communicator made in one group: attached together after the group */
  ncclUniqueId id = newId();
  ncclComm_t pair[2] = {NULL, NULL};
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) EXPECT_EQ_INT(api.CommInitRank(&pair[r], 2, id, r), ncclSuccess);
  EXPECT_NO_TRACE("fccl attach");
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; r++) EXPECT_TRACE("fccl attach comm=%p rank=%d nranks=2", (void*)pair[r], r);
  EXPECT_BEFORE(traceFind("nccl GroupEnd"), traceFind("fccl attach"));
  traceClear();
  EXPECT_EQ_INT(api.CommDestroy(pair[1]), ncclSuccess);
  EXPECT_EQ_INT(traceCount("fccl release"), 2);
  EXPECT_EQ_INT(api.CommDestroy(pair[0]), ncclSuccess);
  EXPECT_EQ_INT(traceCount("fccl release"), 2);

  /* two different communicators made in one group are torn down apart */
  ncclComm_t apart[2] = {NULL, NULL};
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) EXPECT_EQ_INT(api.CommInitRank(&apart[r], 1, newId(), 0), ncclSuccess);
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  traceClear();
  EXPECT_EQ_INT(api.CommDestroy(apart[0]), ncclSuccess);
  EXPECT_EQ_INT(traceCount("fccl release"), 1);
  EXPECT_EQ_INT(api.CommDestroy(apart[1]), ncclSuccess);
  EXPECT_EQ_INT(traceCount("fccl release"), 2);
}

static void scenarioAbort(void) {
  /* FAKE_ABORT_HANDSHAKE=1: fccl's abort and NCCL's each wait for the other to have started, as each waits for the
   * device's work, the other's kernels included: they must run side by side. */
  ncclComm_t comm = oneRank();
  traceClear();
  EXPECT_EQ_INT(api.CommAbort(comm), ncclSuccess);
  EXPECT_TRACE("fccl release comm=%p abort=1", (void*)comm);
  EXPECT_TRACE("nccl CommAbort comm=%p", (void*)comm);
  EXPECT_NO_TRACE("fccl release-waited-in-vain");
  EXPECT_NO_TRACE("nccl abort-waited-in-vain");

  /* a non-blocking communicator aborted while its attach runs: the attach gives up, the abort returns */
  setenv("FAKE_ENGINE_ATTACH_WAIT_MS", "600000", 1);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  comm = NULL;
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, &config), ncclInProgress);
  ncclResult_t state = ncclSuccess;
  for (int i = 0; i < 10; i++) EXPECT_EQ_INT(api.CommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ_INT(state, ncclInProgress); /* NCCL is ready after 3 queries; the attach is not */
  traceClear();
  unsetenv("FAKE_ABORT_HANDSHAKE"); /* no fccl state to abort: NCCL's abort waits for none */
  EXPECT_EQ_INT(api.CommAbort(comm), ncclSuccess);
  EXPECT_TRACE("fccl attach-aborted comm=%p", (void*)comm);
  EXPECT_TRACE("nccl CommAbort comm=%p", (void*)comm);
  unsetenv("FAKE_ENGINE_ATTACH_WAIT_MS");
}

static void scenarioAbortGroup(void) {
  /* An abort of one member of a local group aborts that member's fccl state only (the others' may wait for their
   * NCCL kernels); their later teardowns are local aborts, never the collective teardown waiting for the gone. */
  ncclComm_t comms[2] = {NULL, NULL};
  EXPECT_EQ_INT(api.CommInitAll(comms, 2, NULL), ncclSuccess);
  traceClear();
  EXPECT_EQ_INT(api.CommAbort(comms[0]), ncclSuccess);
  EXPECT_TRACE("fccl release comm=%p abort=1", (void*)comms[0]);
  EXPECT_NO_TRACE("fccl release comm=%p", (void*)comms[1]);
  EXPECT_EQ_INT(api.CommDestroy(comms[1]), ncclSuccess);
  EXPECT_TRACE("fccl release comm=%p abort=1", (void*)comms[1]);
  EXPECT_NO_TRACE("fccl release abort=0");
}

static void scenarioNonBlocking(void) {
  /* FAKE_NCCL_PENDING_POLLS=3, FAKE_ENGINE_ATTACH_WAIT_MS=50 */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  EXPECT_EQ_INT(api.CommInitRankConfig(&comm, 1, newId(), 0, &config), ncclInProgress);
  /* used too early: NCCL's answer */
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 81, ncclFloat32, ncclSum, comm, STREAM), ncclInvalidArgument);
  int polls = 0, inProgress = 0;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && polls < 200000) {
    EXPECT_EQ_INT(api.CommGetAsyncError(comm, &state), ncclSuccess);
    polls++;
    inProgress += state == ncclInProgress;
    if (state == ncclInProgress) usleep(50);
  }
  EXPECT_EQ_INT(state, ncclSuccess);
  EXPECT(inProgress >= 3);
  EXPECT_TRACE("fccl attach comm=%p blocking=0", (void*)comm);
  traceClear();
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 82, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce comm=%p count=82", (void*)comm);
  /* non-blocking split: the child answers ncclInProgress until its attach is done */
  ncclComm_t child = NULL;
  EXPECT_EQ_INT(api.CommSplit(comm, 0, 0, &child, NULL), ncclInProgress);
  state = ncclInProgress;
  for (polls = 0; state == ncclInProgress && polls < 200000; polls++) {
    EXPECT_EQ_INT(api.CommGetAsyncError(child, &state), ncclSuccess);
    if (state == ncclInProgress) usleep(50);
  }
  EXPECT_EQ_INT(state, ncclSuccess);
  EXPECT_TRACE("fccl attach comm=%p blocking=0", (void*)child);
  EXPECT_EQ_INT(api.CommDestroy(child), ncclSuccess);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
}

struct pollArgs {
  ncclComm_t comm;
  int wrong;
};

static void* pollThread(void* arg) {
  struct pollArgs* p = arg;
  for (int i = 0; i < 2000; i++) {
    ncclResult_t state = ncclSuccess;
    if (api.CommGetAsyncError(p->comm, &state) != ncclSuccess || state != ncclRemoteError) p->wrong++;
  }
  return NULL;
}

static void scenarioAsyncError(void) {
  /* FAKE_ENGINE_ASYNC_ERROR=6: the engine reports a dead peer */
  ncclComm_t comm = oneRank();
  ncclResult_t state = ncclSuccess;
  EXPECT_EQ_INT(api.CommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ_INT(state, ncclRemoteError);
  EXPECT_STR_CONTAINS(api.GetLastError(comm), "saw its peer die");
  /* a watchdog thread polls while this one works */
  struct pollArgs args = {.comm = comm};
  pthread_t thread;
  EXPECT_EQ_INT(pthread_create(&thread, NULL, pollThread, &args), 0);
  for (int i = 0; i < 2000; i++) (void)api.AllReduce(SEND, RECV, 1, ncclFloat32, ncclSum, comm, STREAM);
  pthread_join(thread, NULL);
  EXPECT_EQ_INT(args.wrong, 0);
  /* an abort from the watchdog's side while it polls */
  EXPECT_EQ_INT(api.CommAbort(comm), ncclSuccess);
}

static void scenarioPassthrough(void) {
  if (!preloaded) {
    printf("passthrough: needs the library preloaded\n");
    exit(TEST_SKIP);
  }
  ncclComm_t comm = oneRank();
  fcclNcclStats_t start = stats();
  traceClear();
  /* The stand-in's all-to-all is made of ncclBroadcast calls through its PLT: they land in the library, which
   * passes them through: NCCL's, uncounted, although fccl carries this communicator's broadcasts. */
  EXPECT_EQ_INT(api.AlltoAll(SEND, RECV, 5, ncclFloat32, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AlltoAll comm=%p", (void*)comm);
  EXPECT_TRACE("nccl Broadcast comm=%p count=5", (void*)comm);
  EXPECT_NO_TRACE("fccl broadcast");
  fcclNcclStats_t end = stats();
  EXPECT_EQ_INT(end.ncclCalls[FCCL_NCCL_BROADCAST] - start.ncclCalls[FCCL_NCCL_BROADCAST], 0);
  EXPECT_EQ_INT(end.fcclCalls[FCCL_NCCL_BROADCAST] - start.fcclCalls[FCCL_NCCL_BROADCAST], 0);
  /* NCCL's teardown deregisters the windows left through its exported name: not fccl's business */
  ncclWindow_t window = NULL;
  EXPECT_EQ_INT(api.CommWindowRegister(comm, buf, sizeof(buf), &window, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_TRACE("fccl register comm=%p", (void*)comm);
  traceClear();
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  EXPECT_TRACE("nccl CommWindowDeregister comm=%p win=%p", (void*)comm, (void*)window);
  EXPECT_NO_TRACE("fccl deregister");
  /* and a direct program's call by name reaches the library, not NCCL */
  Dl_info info;
  EXPECT(dladdr(dlsym(RTLD_DEFAULT, "ncclGroupStart"), &info) && strstr(info.dli_fname, "fccl-nccl"));
}

static void scenarioSplit(void) {
  ncclComm_t parent = oneRank(), child = NULL, none = (ncclComm_t)(uintptr_t)1;
  traceClear();
  EXPECT_EQ_INT(api.CommSplit(parent, 0, 0, &child, NULL), ncclSuccess);
  EXPECT(child != NULL);
  EXPECT_TRACE("fccl attach comm=%p", (void*)child);
  EXPECT_EQ_INT(api.CommSplit(parent, NCCL_SPLIT_NOCOLOR, 0, &none, NULL), ncclSuccess);
  EXPECT(none == NULL);
  EXPECT_EQ_INT(traceCount("fccl attach"), 1);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 91, ncclFloat32, ncclSum, child, STREAM), ncclSuccess);
  EXPECT_TRACE("fccl allreduce comm=%p count=91", (void*)child);
  /* shrink with NCCL_SHRINK_ABORT stops the parent's fccl work first; the child gets its own */
  ncclComm_t shrunk = NULL;
  traceClear();
  EXPECT_EQ_INT(api.CommShrink(parent, NULL, 0, &shrunk, NULL, NCCL_SHRINK_ABORT), ncclSuccess);
  EXPECT_TRACE("fccl release comm=%p abort=1", (void*)parent);
  EXPECT_TRACE("nccl CommShrink comm=%p", (void*)parent);
  EXPECT_NO_TRACE("fccl release-waited-in-vain");
  EXPECT_NO_TRACE("nccl abort-waited-in-vain");
  EXPECT_TRACE("fccl attach comm=%p", (void*)shrunk);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 92, ncclFloat32, ncclSum, parent, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p count=92", (void*)parent);
  EXPECT_EQ_INT(api.CommDestroy(shrunk), ncclSuccess);
  EXPECT_EQ_INT(api.CommDestroy(child), ncclSuccess);
  EXPECT_EQ_INT(api.CommDestroy(parent), ncclSuccess);
}

static void scenarioWindow(void) {
  ncclComm_t comm = oneRank();
  ncclWindow_t window = NULL;
  traceClear();
  EXPECT_EQ_INT(api.CommWindowRegister(comm, buf, 1024, &window, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_BEFORE(traceFind("nccl CommWindowRegister comm=%p", (void*)comm),
                traceFind("fccl register comm=%p buff=%p size=1024", (void*)comm, (void*)buf));
  traceClear();
  EXPECT_EQ_INT(api.CommWindowDeregister(comm, window), ncclSuccess);
  EXPECT_BEFORE(traceFind("fccl deregister comm=%p", (void*)comm), traceFind("nccl CommWindowDeregister"));
  /* NCCL's local registration is forwarded only: fccl's is collective */
  void* handle = NULL;
  traceClear();
  EXPECT_EQ_INT(api.CommRegister(comm, buf, 512, &handle), ncclSuccess);
  EXPECT_EQ_INT(api.CommDeregister(comm, handle), ncclSuccess);
  EXPECT_TRACE("nccl CommRegister comm=%p size=512", (void*)comm);
  EXPECT_NO_TRACE("fccl register");
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);

  /* windows of two ranks registered in one group: fccl registers each after the group, side by side */
  ncclComm_t comms[2] = {NULL, NULL};
  ncclWindow_t windows[2] = {NULL, NULL};
  EXPECT_EQ_INT(api.CommInitAll(comms, 2, NULL), ncclSuccess);
  traceClear();
  EXPECT_EQ_INT(api.GroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++)
    EXPECT_EQ_INT(api.CommWindowRegister(comms[i], buf + i * 1024, 1024, &windows[i], 0), ncclSuccess);
  EXPECT_NO_TRACE("fccl register");
  EXPECT_EQ_INT(api.GroupEnd(), ncclSuccess);
  for (int i = 0; i < 2; i++)
    EXPECT_BEFORE(traceFind("nccl GroupEnd"), traceFind("fccl register comm=%p", (void*)comms[i]));
  /* windows left registered are fccl's to release with its communicators */
  for (int i = 0; i < 2; i++) EXPECT_EQ_INT(api.CommDestroy(comms[i]), ncclSuccess);
  for (int i = 0; i < 2; i++) EXPECT_TRACE("fccl release comm=%p registrations=1", (void*)comms[i]);
}

static void scenarioDisable(void) {
  /* FCCL_NCCL_API_DISABLE=allgather, broadcast,reduce */
  ncclComm_t comm = oneRank();
  EXPECT_TRACE("fccl attach comm=%p wanted=65", (void*)comm);
  traceClear();
  EXPECT_EQ_INT(api.Reduce(SEND, RECV, 3, ncclFloat32, ncclSum, 0, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl Reduce comm=%p", (void*)comm);
  EXPECT_EQ_INT(api.AllGather(SEND, RECV, 3, ncclFloat32, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.Bcast(RECV, 3, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 3, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllGather comm=%p", (void*)comm);
  EXPECT_TRACE("nccl Broadcast comm=%p", (void*)comm);
  EXPECT_TRACE("fccl allreduce comm=%p", (void*)comm);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
}

static void scenarioDisableGather(void) {
  /* FCCL_NCCL_API_DISABLE=gather,scatter,allreduce,reducescatter,reduce: the moves but gather and scatter on fccl */
  ncclComm_t comm = oneRank();
  EXPECT_TRACE("fccl attach comm=%p wanted=a", (void*)comm);
  traceClear();
  EXPECT_EQ_INT(api.Gather(SEND, RECV, 3, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.Scatter(SEND, RECV, 3, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_EQ_INT(api.AllGather(SEND, RECV, 3, ncclFloat32, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl Gather comm=%p", (void*)comm);
  EXPECT_TRACE("nccl Scatter comm=%p", (void*)comm);
  EXPECT_TRACE("fccl allgather comm=%p", (void*)comm);
  /* no reduction is fccl's: a pre-multiplied sum needs no twin */
  ncclRedOp_t op = ncclSum;
  float scalar = 1.5f;
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 4, ncclFloat32, op, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p count=4 op=5", (void*)comm);
  EXPECT_NO_TRACE("fccl premulsum");
  EXPECT_EQ_INT(api.RedOpDestroy(op, comm), ncclSuccess);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
}

static void scenarioDisableAll(void) {
  /* FCCL_NCCL_API_DISABLE=all, or a list that cannot be read */
  ncclComm_t comm = oneRank();
  EXPECT_TRACE("fccl attach comm=%p wanted=0", (void*)comm);
  EXPECT_STR_CONTAINS(traceRead(), "FCCL_NCCL_API_DISABLE=");
  traceClear();
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 3, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p", (void*)comm);
  EXPECT_NO_TRACE("fccl allreduce");
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
}

static void scenarioRefused(void) {
  /* FAKE_ENGINE_REFUSE: the engine does not attach; NCCL carries everything and the communicator works */
  ncclComm_t comm = oneRank();
  traceClear();
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 3, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p", (void*)comm);
  ncclResult_t state = ncclInternalError;
  EXPECT_EQ_INT(api.CommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ_INT(state, ncclSuccess);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  EXPECT_NO_TRACE("fccl release");
}

static void scenarioLifecycle(void) {
  ncclComm_t comm = oneRank();
  traceClear();
  EXPECT_EQ_INT(api.CommFinalize(comm), ncclSuccess);
  EXPECT_BEFORE(traceFind("fccl release comm=%p abort=0", (void*)comm), traceFind("nccl CommFinalize"));
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  EXPECT_EQ_INT(traceCount("fccl release"), 1);
  EXPECT_TRACE("nccl CommDestroy comm=%p", (void*)comm);

  comm = oneRank();
  traceClear();
  EXPECT_EQ_INT(api.CommRevoke(comm, 0), ncclSuccess);
  EXPECT_TRACE("fccl release comm=%p abort=1", (void*)comm);
  EXPECT_TRACE("nccl CommRevoke comm=%p", (void*)comm);
  EXPECT_NO_TRACE("fccl release-waited-in-vain");
  EXPECT_NO_TRACE("nccl abort-waited-in-vain");
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 3, ncclFloat32, ncclSum, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl AllReduce comm=%p", (void*)comm);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
  EXPECT_EQ_INT(traceCount("fccl release"), 1);
}

/* The real NCCL cannot be used: every call says what to set. */
static void scenarioMissing(void) {
  int version = 0;
  EXPECT_EQ_INT(api.GetVersion(&version), ncclInvalidUsage);
  const char* expected = getenv("FNCCL_TEST_EXPECT_ERROR");
  EXPECT_STR_CONTAINS(api.GetLastError(NULL), expected ? expected : "FCCL_NCCL_LIBRARY");
  ncclComm_t comm = NULL;
  EXPECT_EQ_INT(api.CommInitRank(&comm, 1, (ncclUniqueId){{0}}, 0), ncclInvalidUsage);
  EXPECT_EQ_INT(api.AllReduce(SEND, RECV, 1, ncclFloat32, ncclSum, comm, STREAM), ncclInvalidUsage);
  /* NCCL's words for its codes still come */
  EXPECT_STR_CONTAINS(api.GetErrorString(ncclRemoteError), "remote process exited");
}

/* The product library over the stand-in NCCL: forwarding works, and each call is carried by exactly one engine. */
static void scenarioProduct(void) {
  int version = 0;
  EXPECT_EQ_INT(api.GetVersion(&version), ncclSuccess);
  EXPECT_EQ_INT(version, 22809);
  ncclComm_t comm = oneRank();
  fcclNcclStats_t start = stats();
  EXPECT_EQ_INT(api.AllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  fcclNcclStats_t end = stats();
  EXPECT_EQ_INT(end.fcclCalls[0] + end.ncclCalls[0] - start.fcclCalls[0] - start.ncclCalls[0], 1);
  EXPECT_EQ_INT(end.comms, 1);
  if (end.commsWithFccl == 0) EXPECT_TRACE("nccl AllReduce comm=%p", (void*)comm);
  /* a gather, and a reduction with a pre-multiplied sum: each carried by one engine, fccl's with the op's twin */
  ncclRedOp_t premul = ncclSum;
  float scalar = 0.25f;
  EXPECT_EQ_INT(api.RedOpCreatePreMulSum(&premul, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ_INT(api.Gather(NULL, NULL, 0, ncclFloat32, 0, comm, NULL), ncclSuccess);
  EXPECT_EQ_INT(api.AllReduce(NULL, NULL, 0, ncclFloat32, premul, comm, NULL), ncclSuccess);
  EXPECT_EQ_INT(api.RedOpDestroy(premul, comm), ncclSuccess);
  fcclNcclStats_t after = stats();
  EXPECT_EQ_INT(after.fcclCallsAll[FCCL_NCCL_GATHER] + after.ncclCallsAll[FCCL_NCCL_GATHER], 1);
  EXPECT_EQ_INT(after.fcclPreMulSumCalls + after.ncclPreMulSumCalls, 1);
  EXPECT_EQ_INT(after.preMulSumOps, after.commsWithFccl);
  EXPECT_EQ_INT(after.fcclPreMulSumCalls, after.commsWithFccl);
  EXPECT_EQ_INT(api.Send(SEND, 1, ncclFloat32, 0, comm, STREAM), ncclSuccess);
  EXPECT_TRACE("nccl Send comm=%p", (void*)comm);
  EXPECT_EQ_INT(api.CommDestroy(comm), ncclSuccess);
}

static const struct {
  const char* name;
  void (*run)(void);
} scenarios[] = {
    {"version", scenarioVersion},       {"config", scenarioConfig},           {"route", scenarioRoute},
    {"group", scenarioGroup},           {"launchfail", scenarioLaunchFail},   {"initall", scenarioInitAll},
    {"abort", scenarioAbort},           {"abortgroup", scenarioAbortGroup},   {"nonblocking", scenarioNonBlocking},
    {"asyncerror", scenarioAsyncError}, {"passthrough", scenarioPassthrough}, {"split", scenarioSplit},
    {"window", scenarioWindow},         {"disable", scenarioDisable},         {"disableall", scenarioDisableAll},
    {"refused", scenarioRefused},       {"lifecycle", scenarioLifecycle},     {"missing", scenarioMissing},
    {"product", scenarioProduct},       {"premulsum", scenarioPreMulSum},     {"disablegather", scenarioDisableGather},
};

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "gpus") == 0) { /* for the scripts of the gpu suite: the visible GPUs */
    printf("%d\n", testGpuCount());
    return 0;
  }
  if (argc != 3 || (strcmp(argv[2], "bypath") != 0 && strcmp(argv[2], "preload") != 0)) {
    fprintf(stderr, "usage: %s SCENARIO bypath|preload\n", argv[0]);
    return 2;
  }
  for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
    if (strcmp(argv[1], scenarios[i].name) != 0) continue;
    loadLibrary(argv[2]);
    scenarios[i].run();
    if (testFailed) dumpTrace();
    unlink(tracePath);
    char name[128];
    snprintf(name, sizeof(name), "nccl_api %s %s", argv[1], argv[2]);
    return testSummary(name);
  }
  fprintf(stderr, "unknown scenario %s\n", argv[1]);
  return 2;
}
