/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The collective steps every part of the transport takes with its peers: the all-gather and barrier of the
 * exchange (a failure marks the transport out of step), agreement on every rank's status, and the import of
 * peers' allocations through the process's mappings with their file descriptors (pidfd_getfd, else a Unix socket).
 */
#include "transport_internal.h"

#include "check.h"
#include "debug.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC

#define MAX_IMPORT_PIECES 4096

uint64_t fcclMix64(uint64_t value) {
  value += 0x9e3779b97f4a7c15ull;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

fcclResult_t fcclTransportAllGather(struct fcclTransport* t, void* allData, size_t bytesPerRank) {
  fcclResult_t res = t->cfg.ex.allGather(t->cfg.ex.ctx, allData, bytesPerRank);
  if (res != fcclSuccess) t->outOfStep = 1;
  return res;
}

fcclResult_t fcclTransportBarrier(struct fcclTransport* t) {
  fcclResult_t res = t->cfg.ex.barrier(t->cfg.ex.ctx);
  if (res != fcclSuccess) t->outOfStep = 1;
  return res;
}

int fcclTransportRanksShareProcess(const struct fcclTransport* t) {
  for (int p = 0; p < t->cfg.nranks; p++)
    for (int q = p + 1; q < t->cfg.nranks; q++)
      if (fcclTransportSameProcess(&t->peers[p].info, &t->peers[q].info)) return 1;
  return 0;
}

int fcclTransportInStep(const struct fcclTransport* t) {
  const struct fcclTransportParams* cfg = &t->cfg;
  return !t->outOfStep && !(cfg->abortFlag && __atomic_load_n(cfg->abortFlag, __ATOMIC_ACQUIRE));
}

int fcclTransportSettle(struct fcclTransport* t) {
  return fcclTransportInStep(t) && fcclTransportBarrier(t) == fcclSuccess;
}

fcclResult_t fcclTransportAgree(struct fcclTransport* t, fcclResult_t localStatus, const char* what) {
  const struct fcclTransportParams* cfg = &t->cfg;
  int32_t* statuses = calloc((size_t)cfg->nranks, 2 * sizeof(int32_t));
  if (!statuses) {
    t->outOfStep = 1; /* the peers go on to the all-gather without us */
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
  }
  statuses[2 * cfg->rank] = (int32_t)localStatus;
  fcclResult_t res = fcclTransportAllGather(t, statuses, 2 * sizeof(int32_t));
  if (res == fcclSuccess && localStatus != fcclSuccess) res = localStatus;
  for (int r = 0; res == fcclSuccess && r < cfg->nranks; r++)
    if (statuses[2 * r] != fcclSuccess)
      res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d failed %s (%s; its log has the cause)", r, what,
                       fcclGetErrorString((fcclResult_t)statuses[2 * r]));
  free(statuses);
  return res;
}

fcclResult_t fcclTransportReleaseItems(struct fcclTransport* t, struct fcclImportItem* items) {
  fcclResult_t res = fcclSuccess;
  for (int p = 0; p < t->cfg.nranks; p++) {
    if (!items[p].held) continue;
    fcclResult_t released = fcclMappingsRelease(t->mappings, &items[p].key);
    if (res == fcclSuccess) res = released;
    items[p].held = 0;
  }
  return res;
}

/* Pulls one peer's descriptors with pidfd_getfd. *fallback: not permitted here, use the socket. */
static fcclResult_t pullAndMap(struct fcclTransport* t, struct fcclImportItem* item, int* fallback) {
  fcclResult_t res = fcclSuccess;
  *fallback = 0;
  int* fds = malloc((size_t)item->pieces * sizeof(int));
  if (!fds) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
  int got = 0;
  for (; got < item->pieces; got++) {
    int unsupported = 0;
    res = fcclFdPidGet(item->pid, item->remoteFds[got], &fds[got], &unsupported);
    if (res != fcclSuccess) {
      if (unsupported && t->fdMode == FCCL_FD_MODE_AUTO) {
        *fallback = 1;
        res = fcclSuccess;
      } else if (unsupported) {
        res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC,
                         "FCCL_FD_PASSING=pidfd, but pidfd_getfd of process %d is not permitted here (kernel older "
                         "than 5.6, another user, or Yama ptrace_scope)", item->pid);
      }
      break;
    }
  }
  if (res == fcclSuccess && !*fallback) {
    struct fcclCuMemImport import = {.pieces = item->pieces, .fds = fds, .sizes = item->pieceSizes};
    res = fcclMappingsAcquire(t->mappings, &item->key, item->size, &import, &item->base);
    if (res == fcclSuccess) item->held = 1;
  }
  for (int i = 0; i < got; i++) close(fds[i]);
  free(fds);
  return res;
}

fcclResult_t fcclTransportImport(struct fcclTransport* t, struct fcclImportItem* items, const int* myFds,
                                 int myPieces, fcclResult_t localStatus, struct fcclFdSocket* sock) {
  const struct fcclTransportParams* cfg = &t->cfg;
  const int nranks = cfg->nranks, me = cfg->rank;
  fcclResult_t local = localStatus;
  fcclResult_t res = fcclSuccess;
  const size_t recordBytes = sizeof(int64_t) + ((size_t)nranks + 7) / 8 * 8;
  uint8_t* records = calloc((size_t)nranks, recordBytes);
  struct fcclFdSend* sends = calloc((size_t)nranks, sizeof(*sends));
  struct fcclFdRecv* recvs = calloc((size_t)nranks, sizeof(*recvs));
  if (!records || !sends || !recvs) {
    /* Without memory for the records we cannot even take part in the exchange: the peers time out. */
    t->outOfStep = 1;
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
    goto exit;
  }
  uint8_t* need = records + (size_t)me * recordBytes + sizeof(int64_t);

  /* a. Reuse open mappings; open legacy handles; pull cuMem descriptors where the kernel lets us. */
  for (int p = 0; p < nranks && local == fcclSuccess; p++) {
    struct fcclImportItem* item = &items[p];
    if (!item->active) continue;
    int found = 0;
    local = fcclMappingsRetain(t->mappings, &item->key, item->size, &item->base, &found);
    if (local != fcclSuccess) break;
    if (found) {
      item->held = 1;
      continue;
    }
    if (item->key.kind == FCCL_MAPPING_LEGACY_IPC) {
      local = fcclMappingsAcquire(t->mappings, &item->key, item->size, NULL, &item->base);
      item->held = local == fcclSuccess;
      continue;
    }
    if (item->pieces < 1 || item->pieces > MAX_IMPORT_PIECES) {
      local = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d describes its buffer with %d pieces", p,
                         item->pieces);
      break;
    }
    if (t->fdMode == FCCL_FD_MODE_SOCKET) {
      need[p] = 1;
      continue;
    }
    int fallback = 0;
    local = pullAndMap(t, item, &fallback);
    if (fallback) {
      FCCL_INFO(FCCL_SUBSYS_IPC, "pidfd_getfd from rank %d (pid %d) not permitted: descriptors come over a Unix "
                "socket instead", p, item->pid);
      need[p] = 1;
    }
  }

  /* b. Everyone learns everyone's status and who needs descriptors sent by whom. */
  int64_t status = local;
  memcpy(records + (size_t)me * recordBytes, &status, sizeof(status));
  FCCLCHECKGOTO(fcclTransportAllGather(t, records, recordBytes), res, release);
  t->exchanges++;
  if (local != fcclSuccess) {
    res = local;
    goto release;
  }
  for (int r = 0; r < nranks; r++) {
    memcpy(&status, records + (size_t)r * recordBytes, sizeof(status));
    if (status != fcclSuccess) {
      res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d failed to map its peers' memory (%s)", r,
                       fcclGetErrorString((fcclResult_t)status));
      goto release;
    }
  }

  /* c. Descriptors over the sockets, for those that could not pull them. A failure here is known to this rank
   *    only: it is carried into d. */
  int nSends = 0, nRecvs = 0;
  for (int q = 0; q < nranks && res == fcclSuccess; q++) {
    if (q != me && records[(size_t)q * recordBytes + sizeof(int64_t) + (size_t)me]) {
      if (myPieces <= 0 || !sock || sock->fd < 0) {
        res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC,
                         "rank %d asks for descriptors that this rank cannot send", q);
        break;
      }
      sends[nSends++] = (struct fcclFdSend){.peerName = items[q].sockName, .peerRank = q, .count = myPieces,
                                            .fds = myFds};
    }
    if (need[q]) {
      if (!sock || sock->fd < 0) {
        res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "no socket to receive descriptors from rank %d", q);
        break;
      }
      recvs[nRecvs] = (struct fcclFdRecv){.peerRank = q, .count = items[q].pieces,
                                          .fds = malloc((size_t)items[q].pieces * sizeof(int))};
      if (!recvs[nRecvs].fds) {
        res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
        break;
      }
      nRecvs++;
    }
  }
  if (res == fcclSuccess && nSends + nRecvs > 0) {
    uint64_t tag = fcclMix64(t->tagSeed + t->exchanges);
    res = fcclFdExchange(sock, tag, me, nSends, sends, nRecvs, recvs, cfg->timeoutMs, cfg->abortFlag);
    for (int i = 0; i < nRecvs && res == fcclSuccess; i++) {
      struct fcclImportItem* item = &items[recvs[i].peerRank];
      struct fcclCuMemImport import = {.pieces = item->pieces, .fds = recvs[i].fds, .sizes = item->pieceSizes};
      res = fcclMappingsAcquire(t->mappings, &item->key, item->size, &import, &item->base);
      if (res == fcclSuccess) item->held = 1;
    }
    for (int i = 0; i < nRecvs; i++)
      for (int f = 0; f < recvs[i].count; f++)
        if (recvs[i].fds[f] >= 0) close(recvs[i].fds[f]);
  }

  /* d. Every rank learns whether every other one mapped everything. */
  res = fcclTransportAgree(t, res, "to map its peers' memory");
  if (res != fcclSuccess) goto release;
  goto exit;

release:
  (void)fcclTransportReleaseItems(t, items);
exit:
  if (recvs)
    for (int i = 0; i < nranks; i++) free(recvs[i].fds);
  free(recvs);
  free(sends);
  free(records);
  return res;
}

