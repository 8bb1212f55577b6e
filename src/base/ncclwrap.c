/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL's functions resolved once with dlopen/dlsym (ncclwrap.h). The handle stays open for the process's life. */
#include "ncclwrap.h"

#include <stdio.h>

#if FCCL_HAVE_NCCL

#include <dlfcn.h>
#include <pthread.h>

#define FCCL_NCCL_DEFINE(name, ret, params) ret(*pfn_##name) params;
FCCL_NCCL_FUNCTIONS(FCCL_NCCL_DEFINE)
FCCL_NCCL_ROOTED_FUNCTIONS(FCCL_NCCL_DEFINE)
#undef FCCL_NCCL_DEFINE

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static int loaded;
static char loadError[320];

static void loadNccl(void) {
  /* RTLD_NOLOAD first: an NCCL the application already loaded is the one its communicators belong to. */
  void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (!handle) handle = dlopen("libnccl.so", RTLD_NOW | RTLD_NOLOAD);
  if (!handle) handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    snprintf(loadError, sizeof(loadError), "cannot load libnccl.so.2 (%s)", dlerror());
    return;
  }
#define FCCL_NCCL_LOAD(name, ret, params)                                                                  \
  *(void**)&pfn_##name = dlsym(handle, #name);                                                             \
  if (!pfn_##name) {                                                                                       \
    snprintf(loadError, sizeof(loadError), "libnccl.so.2 has no %s (NCCL 2.19 or newer is needed)", #name); \
    return;                                                                                                \
  }
  FCCL_NCCL_FUNCTIONS(FCCL_NCCL_LOAD)
  FCCL_NCCL_ROOTED_FUNCTIONS(FCCL_NCCL_LOAD)
#undef FCCL_NCCL_LOAD
  __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
}

int fcclNcclLoaded(const char** why) {
  pthread_once(&loadOnce, loadNccl);
  if (__atomic_load_n(&loaded, __ATOMIC_ACQUIRE)) return 1;
  if (why) *why = loadError;
  return 0;
}

#else /* !FCCL_HAVE_NCCL */

int fcclNcclLoaded(const char** why) {
  if (why) *why = "this fccl was built without NCCL (rebuild with nccl.h present, meson -Dnccl=enabled)";
  return 0;
}

#endif
