/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real NCCL: found once (FCCL_NCCL_LIBRARY, else the libnccl.so.2 the process already holds, else the loader's
 * search), its functions resolved on its own handle (never through the global scope, where this library's names
 * come first under LD_PRELOAD), the range of its code recorded so that its calls into its own exported names can be
 * told apart, and a check that libfccl's own NCCL loader (dlopen of libnccl.so.2, RTLD_NOLOAD first) finds the
 * same library: fccl's communicators are made from this library's communicators, so they must be the same NCCL.
 */
#include "internal.h"

#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fncclRealTable fncclReal;

/* NCCL 2.19: ncclCommRegister and ncclMemAlloc, the newest calls this library cannot do without; fccl's floor too. */
#define FNCCL_REAL_MIN_VERSION 21900

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static ncclResult_t loadResult = ncclInvalidUsage;
static int loaded; /* atomic: 1 once loadResult is final */
static char loadError[640];
static char realPath[512];
static int realVersion;
static uintptr_t codeStart, codeEnd; /* the real NCCL's executable segments, [start, end) */
static int sharedWithFccl;
static char fcclSeesOther[1280];

static __thread struct fncclThread self;

struct fncclThread* fncclSelf(void) { return &self; }

/* The text NCCL uses for its codes, for when no NCCL could be loaded to ask. */
static const char* resultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t fncclSetError(ncclResult_t result, const char* fmt, ...) {
  struct fncclThread* t = fncclSelf();
  va_list args;
  va_start(args, fmt);
  vsnprintf(t->lastError, sizeof(t->lastError), fmt, args);
  va_end(args);
  t->lastErrorOurs = 1;
  return result;
}

/* Finds the executable segments of the object loaded at base. */
struct segmentSearch {
  uintptr_t base;
  uintptr_t start, end;
  int found;
};

static int findSegments(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct segmentSearch* search = data;
  if ((uintptr_t)info->dlpi_addr != search->base) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t start = (uintptr_t)info->dlpi_addr + ph->p_vaddr, end = start + ph->p_memsz;
    if (!search->found || start < search->start) search->start = start;
    if (!search->found || end > search->end) search->end = end;
    search->found = 1;
  }
  return search->found;
}

/* The object holding address, as dladdr names it. */
static const void* objectBase(const void* address, const char** path) {
  Dl_info info;
  if (!address || dladdr(address, &info) == 0) return NULL;
  if (path) *path = info.dli_fname;
  return info.dli_fbase;
}

static void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(loadError, sizeof(loadError), fmt, args);
  va_end(args);
  loadResult = ncclInvalidUsage;
}

static void loadReal(void) {
  const char* chosen = getenv("FCCL_NCCL_LIBRARY");
  void* handle = NULL;
  const char* how;
  if (chosen && chosen[0]) {
    handle = dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
    how = "FCCL_NCCL_LIBRARY";
    if (!handle) {
      fail("FCCL_NCCL_LIBRARY=%s cannot be loaded (%s): set it to the path of NCCL's libnccl.so.2", chosen,
           dlerror());
      return;
    }
  } else {
    /* The NCCL already in the process is the one the application's other NCCL users hold. */
    how = "the libnccl.so.2 already loaded";
    handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (!handle) {
      how = "the loader's search for libnccl.so.2";
      handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    }
    if (!handle) {
      fail("libnccl.so.2 cannot be loaded (%s): install NCCL 2.19 or newer, or set FCCL_NCCL_LIBRARY to the path of "
           "its libnccl.so.2",
           dlerror());
      return;
    }
  }
  /* This very library, installed or linked under NCCL's name, is not NCCL. */
  const char* foundPath = NULL;
  const void* foundBase = objectBase(dlsym(handle, "ncclGetVersion"), &foundPath);
  const void* ownBase = objectBase((const void*)&fncclRealLoad, NULL);
  if (foundBase == NULL || foundBase == ownBase) {
    fail("%s (%s) is libfccl-nccl itself, not NCCL: set FCCL_NCCL_LIBRARY to the path of NCCL's libnccl.so.2", how,
         foundPath ? foundPath : chosen ? chosen : "libnccl.so.2");
    return;
  }
  snprintf(realPath, sizeof(realPath), "%s", foundPath ? foundPath : "libnccl.so.2");

#define FNCCL_RESOLVE(ret, name, params, args)                             \
  *(void**)&fncclReal.name = dlsym(handle, "pnccl" #name);                 \
  if (!fncclReal.name) *(void**)&fncclReal.name = dlsym(handle, "nccl" #name);
  FNCCL_REAL_FUNCTIONS(FNCCL_RESOLVE)
#undef FNCCL_RESOLVE

  /* What every communicator's life and the four collectives need; the rest may be missing from an older NCCL and
   * then fail alone, saying so. */
  static const struct {
    const char* name;
    size_t offset;
  } needed[] = {
#define FNCCL_NEEDED(name) {"nccl" #name, offsetof(struct fncclRealTable, name)}
      FNCCL_NEEDED(GetVersion),        FNCCL_NEEDED(GetErrorString),    FNCCL_NEEDED(GetLastError),
      FNCCL_NEEDED(GetUniqueId),       FNCCL_NEEDED(CommInitRankConfig), FNCCL_NEEDED(CommInitRank),
      FNCCL_NEEDED(CommDestroy),       FNCCL_NEEDED(CommAbort),         FNCCL_NEEDED(CommFinalize),
      FNCCL_NEEDED(CommGetAsyncError), FNCCL_NEEDED(CommCount),         FNCCL_NEEDED(CommCuDevice),
      FNCCL_NEEDED(CommUserRank),      FNCCL_NEEDED(CommRegister),      FNCCL_NEEDED(CommDeregister),
      FNCCL_NEEDED(AllReduce),         FNCCL_NEEDED(AllGather),         FNCCL_NEEDED(ReduceScatter),
      FNCCL_NEEDED(Broadcast),         FNCCL_NEEDED(GroupStart),        FNCCL_NEEDED(GroupEnd),
#undef FNCCL_NEEDED
  };
  for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
    if (*(void**)((char*)&fncclReal + needed[i].offset) == NULL) {
      fail("%s (%s) has no %s: it is not NCCL 2.19 or newer; set FCCL_NCCL_LIBRARY to NCCL's libnccl.so.2",
           realPath, how, needed[i].name);
      return;
    }
  }
  int version = 0;
  if (fncclReal.GetVersion(&version) != ncclSuccess || version < FNCCL_REAL_MIN_VERSION) {
    fail("%s (%s) is NCCL %d; NCCL 2.19 or newer is needed: set FCCL_NCCL_LIBRARY to a newer libnccl.so.2", realPath,
         how, version);
    return;
  }
  realVersion = version;

  struct link_map* map = NULL;
  struct segmentSearch search = {.base = 0};
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map) {
    search.base = (uintptr_t)map->l_addr;
    dl_iterate_phdr(findSegments, &search);
  }
  if (!search.found) {
    fail("the code of %s cannot be located (dl_iterate_phdr)", realPath);
    return;
  }
  codeStart = search.start;
  codeEnd = search.end;

  /* libfccl makes its communicators from ours with its own NCCL loader: it must find this same library. */
  void* fcclView = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (fcclView == handle) {
    sharedWithFccl = 1;
  } else {
    const char* otherPath = NULL;
    if (fcclView) objectBase(dlsym(fcclView, "ncclGetVersion"), &otherPath);
    snprintf(fcclSeesOther, sizeof(fcclSeesOther),
             "libfccl's NCCL loader would find %s, not %s: leave FCCL_NCCL_LIBRARY unset, or point it at the "
             "libnccl.so.2 the application loads",
             fcclView ? (otherPath ? otherPath : "another libnccl.so.2") : "no libnccl.so.2 loaded by that name",
             realPath);
  }
  if (fcclView) dlclose(fcclView);
  loadResult = ncclSuccess;
  FNCCL_INFO("NCCL API over NCCL %d.%d.%d at %s (%s); collectives engine: %s", version / 10000,
             (version / 100) % 100, version % 100, realPath, how, fncclEngineName());
}

static void loadOnceRun(void) {
  loadReal();
  if (loadResult != ncclSuccess) FNCCL_WARN("%s", loadError);
  __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
}

ncclResult_t fncclRealLoad(void) {
  if (__builtin_expect(__atomic_load_n(&loaded, __ATOMIC_ACQUIRE), 1) && loadResult == ncclSuccess)
    return ncclSuccess;
  pthread_once(&loadOnce, loadOnceRun);
  if (loadResult != ncclSuccess) return fncclSetError(loadResult, "%s", loadError);
  return ncclSuccess;
}

const char* fncclRealError(void) { return loadError; }
int fncclRealVersion(void) { return realVersion; }
const char* fncclRealPath(void) { return realPath; }

int fncclRealSharedWithFccl(const char** why) {
  if (!sharedWithFccl && why) *why = fcclSeesOther;
  return sharedWithFccl;
}

int fncclAddressInReal(const void* address) {
  return (uintptr_t)address - codeStart < codeEnd - codeStart;
}

ncclResult_t fncclRealMissing(const char* name) {
  if (name == NULL) return fncclSetError(loadResult, "%s", loadError);
  return fncclSetError(ncclInvalidUsage, "%s is not in the loaded NCCL (%d, %s): it needs a newer NCCL", name,
                       realVersion, realPath);
}

/* ---- the calls that only read what NCCL says -------------------------------------------------------------------- */

FNCCL_API ncclResult_t ncclGetVersion(int* version) {
  if (fncclRealLoad() != ncclSuccess) return fncclRealMissing(NULL);
  ncclResult_t result;
  FNCCL_REAL(result, GetVersion, (version));
  return result;
}
FNCCL_TWIN(ncclGetVersion);

FNCCL_API const char* ncclGetErrorString(ncclResult_t result) {
  if (fncclRealLoad() != ncclSuccess) return resultName(result);
  return fncclReal.GetErrorString(result);
}
FNCCL_TWIN(ncclGetErrorString);
