/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Registration. NCCL's two kinds differ in the way that matters to fccl, whose registration is collective (every
 * rank registers its buffer of the same size in the same order, and peers then read it in place):
 *  - ncclCommRegister is local to its rank (PyTorch registers each memory segment as it appears, differently on
 *    each rank): forwarded and counted; fccl stages those buffers, as it does any plain buffer.
 *  - ncclCommWindowRegister is collective in NCCL too (symmetric windows): forwarded, and on a blocking communicator
 *    fccl carries, registered with fccl as well, so that its collectives read the buffers in place. A window fccl
 *    could not register (memory it cannot share) is still NCCL's; fccl stages it.
 * Calls NCCL makes into its own names (it deregisters windows at teardown) pass through untouched.
 */
#include "internal.h"

#include <stdlib.h>

struct fncclWindow {
  struct fncclWindow* next;
  ncclWindow_t window;
  void* fcclHandle; /* NULL: fccl did not register it */
};

void fncclWindowAttach(struct fncclComm* comm, void* buff, size_t size, ncclWindow_t window) {
  if (comm->engine == NULL || !comm->blocking || window == NULL) return;
  struct fncclWindow* w = calloc(1, sizeof(*w));
  if (!w) return;
  w->window = window;
  ncclResult_t result = fncclEngineRegister(comm->engine, buff, size, &w->fcclHandle);
  if (result != ncclSuccess) {
    /* Every rank failed alike (fccl's registration is all or none): each stages this buffer. */
    FNCCL_INFO("comm %p rank %d: window %p (%zu bytes at %p) stays NCCL's only, fccl stages it: %s",
               (void*)comm->nccl, comm->rank, (void*)window, size, buff, fncclEngineThreadError());
    w->fcclHandle = NULL;
  }
  pthread_mutex_lock(&comm->lock);
  w->next = comm->windows;
  comm->windows = w;
  pthread_mutex_unlock(&comm->lock);
}

void fncclWindowDetach(struct fncclComm* comm, ncclWindow_t window) {
  pthread_mutex_lock(&comm->lock);
  struct fncclWindow** link = &comm->windows;
  while (*link && (*link)->window != window) link = &(*link)->next;
  struct fncclWindow* w = *link;
  if (w) *link = w->next;
  pthread_mutex_unlock(&comm->lock);
  if (!w) return;
  if (w->fcclHandle && comm->engine) {
    ncclResult_t result = fncclEngineDeregister(comm->engine, w->fcclHandle);
    if (result != ncclSuccess)
      FNCCL_WARN("comm %p rank %d: fccl's deregistration of window %p failed: %s", (void*)comm->nccl, comm->rank,
                 (void*)window, fncclEngineThreadError());
  }
  free(w);
}

void fncclWindowsForget(struct fncclComm* comm) {
  pthread_mutex_lock(&comm->lock);
  struct fncclWindow* w = comm->windows;
  comm->windows = NULL;
  pthread_mutex_unlock(&comm->lock);
  while (w) {
    struct fncclWindow* next = w->next;
    free(w);
    w = next;
  }
}

FNCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  FNCCL_NEED_REAL(CommRegister);
  ncclResult_t result;
  FNCCL_REAL(result, CommRegister, (comm, buff, size, handle));
  if (FNCCL_PASSTHROUGH() || result != ncclSuccess) return result;
  struct fncclComm* entry = fncclTableFind(comm);
  if (entry) {
    __atomic_add_fetch(&entry->localRegistrations, 1, __ATOMIC_RELAXED);
    fncclTableRelease();
  }
  return result;
}
FNCCL_TWIN(ncclCommRegister);

FNCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  FNCCL_NEED_REAL(CommDeregister);
  ncclResult_t result;
  FNCCL_REAL(result, CommDeregister, (comm, handle));
  if (FNCCL_PASSTHROUGH() || result != ncclSuccess) return result;
  struct fncclComm* entry = fncclTableFind(comm);
  if (entry) {
    if (__atomic_load_n(&entry->localRegistrations, __ATOMIC_RELAXED) > 0)
      __atomic_sub_fetch(&entry->localRegistrations, 1, __ATOMIC_RELAXED);
    fncclTableRelease();
  }
  return result;
}
FNCCL_TWIN(ncclCommDeregister);

FNCCL_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                              int winFlags) {
  FNCCL_NEED_REAL(CommWindowRegister);
  ncclResult_t result;
  FNCCL_REAL(result, CommWindowRegister, (comm, buff, size, win, winFlags));
  if (FNCCL_PASSTHROUGH() || result != ncclSuccess) return result;
  struct fncclComm* entry = fncclTableFind(comm);
  if (!entry) return result;
  fncclTableRelease(); /* the application does not destroy a communicator while it registers with it */
  if (fncclInGroup()) {
    /* NCCL registers at the group's end; fccl's registration, which exchanges with the peers, follows it. */
    struct fncclDeferred work = {.kind = FNCCL_DEFER_WINDOW_REGISTER, .comm = comm, .buff = buff, .size = size,
                                 .window = win};
    return fncclGroupDefer(&work);
  }
  fncclWindowAttach(entry, buff, size, win ? *win : NULL);
  return result;
}
FNCCL_TWIN(ncclCommWindowRegister);

FNCCL_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  FNCCL_NEED_REAL(CommWindowDeregister);
  ncclResult_t result;
  if (FNCCL_PASSTHROUGH()) {
    FNCCL_REAL(result, CommWindowDeregister, (comm, win));
    return result;
  }
  struct fncclComm* entry = fncclTableFind(comm);
  if (entry) fncclTableRelease();
  if (entry && fncclInGroup()) {
    struct fncclDeferred work = {.kind = FNCCL_DEFER_WINDOW_DEREGISTER, .comm = comm, .windowValue = win};
    result = fncclGroupDefer(&work);
    if (result != ncclSuccess) return result;
  } else if (entry) {
    /* fccl lets go first: once NCCL has, the application may free the buffer. */
    fncclWindowDetach(entry, win);
  }
  FNCCL_REAL(result, CommWindowDeregister, (comm, win));
  return result;
}
FNCCL_TWIN(ncclCommWindowDeregister);
