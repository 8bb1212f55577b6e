/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What each rank says about itself at init, and the checks on what all ranks said. No CUDA: core fills the GPU
 * fields; everything here takes plain data, so tests can feed it any combination.
 */
#include "bootstrap.h"

#include "check.h"
#include "debug.h"
#include "param.h"
#include "socket.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static_assert(sizeof(struct fcclPeerInfo) == 48 + 16 + FCCL_PEER_BUSID_BYTES + FCCL_PEER_HOST_BYTES,
              "fcclPeerInfo travels as bytes: no padding, fixed size");

/* FNV-1a, 64-bit: stable across processes and builds, which is all a host identity needs. */
static uint64_t hashBytes(uint64_t hash, const void* data, size_t size) {
  const unsigned char* bytes = data;
  for (size_t i = 0; i < size; i++) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

/* hostname + boot id: the boot id tells two hosts (or two boots) apart even when they share a host name, e.g. in
 * containers. */
static uint64_t machineHash(const char* hostname) {
  char bootId[64] = "";
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t got = read(fd, bootId, sizeof(bootId) - 1);
    close(fd);
    if (got > 0) bootId[got] = '\0';
  }
  if (bootId[0] == '\0')
    FCCL_INFO(FCCL_SUBSYS_INIT, "cannot read /proc/sys/kernel/random/boot_id; the host identity uses the name only");
  uint64_t hash = 0xcbf29ce484222325ull;
  hash = hashBytes(hash, hostname, strlen(hostname));
  hash = hashBytes(hash, "/", 1);
  return hashBytes(hash, bootId, strlen(bootId));
}

static void readHostname(char* name, size_t size) {
  if (gethostname(name, size - 1) != 0) snprintf(name, size, "unknown");
  name[size - 1] = '\0';
}

uint64_t fcclPeerMachineHash(void) {
  char hostname[FCCL_PEER_HOST_BYTES];
  readHostname(hostname, sizeof(hostname));
  return machineHash(hostname);
}

fcclResult_t fcclPeerInfoFillHost(struct fcclPeerInfo* info, int rank, int nranks) {
  memset(info, 0, sizeof(*info));
  info->rank = rank;
  info->nranks = nranks;
  info->pid = (int32_t)getpid();
  info->cudaDev = -1;
  info->fcclVersion = FCCL_VERSION_CODE;
  readHostname(info->hostname, sizeof(info->hostname));
  const char* override = fcclParamString(FCCL_PARAM_HOSTID);
  if (override[0] != '\0') {
    /* FCCL_HOSTID: processes of one machine that act as separate hosts (tests of the NCCL path). */
    uint64_t hash = 0xcbf29ce484222325ull;
    hash = hashBytes(hash, "FCCL_HOSTID=", 12);
    info->hostHash = hashBytes(hash, override, strlen(override));
  } else {
    info->hostHash = machineHash(info->hostname);
  }

  struct stat ns;
  if (stat("/proc/self/ns/pid", &ns) == 0) info->pidNs = (uint64_t)ns.st_ino;
  ssize_t got;
  do {
    got = getrandom(&info->salt, sizeof(info->salt), 0);
  } while (got == -1 && errno == EINTR);
  if (got != (ssize_t)sizeof(info->salt)) info->salt = (uint32_t)fcclTimeMs() ^ (uint32_t)info->pid << 16;
  return fcclSuccess;
}

const char* fcclPeerUuidString(const uint8_t uuid[16], char* buf, size_t size) {
  snprintf(buf, size,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", uuid[0], uuid[1], uuid[2],
           uuid[3], uuid[4], uuid[5], uuid[6], uuid[7], uuid[8], uuid[9], uuid[10], uuid[11], uuid[12], uuid[13],
           uuid[14], uuid[15]);
  return buf;
}

static int uuidKnown(const uint8_t uuid[16]) {
  for (int i = 0; i < 16; i++)
    if (uuid[i] != 0) return 1;
  return 0;
}

/* Copies a peer-supplied string for a message: bounded and printable whatever the peer sent. */
static const char* safeText(const char* text, size_t size, char* out, size_t outSize) {
  size_t i = 0;
  for (; i < size && i + 1 < outSize && text[i] != '\0'; i++)
    out[i] = (text[i] >= 0x20 && text[i] <= 0x7e) ? text[i] : '?';
  out[i] = '\0';
  return out;
}

fcclResult_t fcclPeerInfoValidate(const struct fcclPeerInfo* infos, int nranks, int allowSharedDevice) {
  if (infos == NULL || nranks < 1)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "peer info validation of %d ranks at %p", nranks,
                      (const void*)infos);
  for (int r = 0; r < nranks; r++) {
    const struct fcclPeerInfo* info = &infos[r];
    if (info->rank != r)
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_INIT,
                        "peer info of rank %d says it is rank %d: two processes use one rank, or the bootstrap "
                        "callbacks do not gather in rank order",
                        r, (int)info->rank);
    if (info->nranks != nranks)
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_INIT, "nranks mismatch: rank %d says %d ranks, this rank says %d",
                        r, (int)info->nranks, nranks);
    if (info->fcclVersion != infos[0].fcclVersion)
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_INIT,
                        "fccl version mismatch: rank 0 runs %d.%d.%d, rank %d runs %d.%d.%d; every rank must load "
                        "the same fccl",
                        infos[0].fcclVersion / 10000, infos[0].fcclVersion / 100 % 100, infos[0].fcclVersion % 100, r,
                        info->fcclVersion / 10000, info->fcclVersion / 100 % 100, info->fcclVersion % 100);
  }
  for (int r = 0; r < nranks; r++) {
    if (!uuidKnown(infos[r].gpuUuid)) continue;
    for (int other = 0; other < r; other++) {
      if (memcmp(infos[r].gpuUuid, infos[other].gpuUuid, 16) != 0) continue;
      if (allowSharedDevice) continue;
      char uuid[48], busId[FCCL_PEER_BUSID_BYTES], host[FCCL_PEER_HOST_BYTES];
      return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                        "ranks %d and %d both use GPU %s (bus id %s on host %s): give each rank its own GPU "
                        "(cudaSetDevice before init), or set config.allowSharedDevice",
                        other, r, fcclPeerUuidString(infos[r].gpuUuid, uuid, sizeof(uuid)),
                        safeText(infos[r].busId, sizeof(infos[r].busId), busId, sizeof(busId)),
                        safeText(infos[r].hostname, sizeof(infos[r].hostname), host, sizeof(host)));
    }
  }
  /* A driver difference between hosts is allowed (as in NCCL), but worth a line when something else goes wrong. */
  for (int r = 1; r < nranks; r++) {
    if (infos[r].cudaDriverVersion != infos[0].cudaDriverVersion && infos[r].cudaDriverVersion != 0 &&
        infos[0].cudaDriverVersion != 0) {
      FCCL_WARN(FCCL_SUBSYS_INIT, "CUDA driver versions differ: rank 0 has %d, rank %d has %d",
                (int)infos[0].cudaDriverVersion, r, (int)infos[r].cudaDriverVersion);
      break;
    }
  }
  return fcclSuccess;
}
