/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Launcher variables: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Open MPI
 * (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK) and PMI (PMI_RANK/PMI_SIZE, MPI_LOCALRANKID), with FCCL_COMM_ID=host:port.
 * Rank 0 starts the TCP root at that address (that address only); the others connect to it. No id is passed
 * around, so the secret comes from the launch: FCCL_COMM_SECRET, which the launcher exports to every rank and which
 * only processes able to read the launch environment know (docs/bootstrap.md#threat-model).
 */
#include "bootstrap.h"

#include "check.h"
#include "crypto.h"
#include "param.h"
#include "socket.h"
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shortest FCCL_COMM_SECRET accepted: 16 characters of openssl rand -hex carry 64 bits, the unique id's. */
#define ENV_SECRET_MIN_CHARS 16

/* Parses a whole decimal integer; 0 when the text is not one. */
static int parseInt(const char* text, long* value) {
  if (text == NULL || text[0] == '\0') return 0;
  char* end = NULL;
  errno = 0;
  long parsed = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0') return 0;
  *value = parsed;
  return 1;
}

static fcclResult_t readInt(const char* name, int required, long* value, int* present) {
  const char* text = getenv(name);
  *present = text != NULL && text[0] != '\0';
  if (!*present) {
    if (required) return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT, "launcher variable %s is not set", name);
    return fcclSuccess;
  }
  if (!parseInt(text, value))
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT, "launcher variable %s=%s is not an integer", name, text);
  return fcclSuccess;
}

/*
 * The launch's secret. A communicator of one rank has no peer to share it with: it draws one. Otherwise every rank
 * reads the same FCCL_COMM_SECRET, which must be there: a secret derived from what every local process can see
 * (the address, the world size) would let any of them join as a missing rank.
 */
static fcclResult_t resolveSecret(struct fcclEnvLaunch* launch) {
  if (launch->nranks == 1) return fcclRandomBytes(launch->secret, sizeof(launch->secret), "the bootstrap secret");
  const char* text = fcclParamString(FCCL_PARAM_COMM_SECRET);
  if (text[0] == '\0')
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "FCCL_COMM_SECRET is not set: with %d ranks, fcclCommInitFromEnv needs the launcher to export "
                      "one random secret to every rank, e.g. FCCL_COMM_SECRET=$(openssl rand -hex 16) before "
                      "torchrun (the same value on every node), or mpirun -x FCCL_COMM_SECRET",
                      launch->nranks);
  size_t length = strlen(text);
  if (length < ENV_SECRET_MIN_CHARS)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "FCCL_COMM_SECRET has %zu characters: give at least %d random ones (openssl rand -hex 16)",
                      length, ENV_SECRET_MIN_CHARS);
  return fcclBootstrapEnvSecret(text, launch->addr, launch->nranks, launch->secret);
}

fcclResult_t fcclBootstrapEnvResolve(struct fcclEnvLaunch* launch) {
  static const struct {
    const char* source;
    const char* rank;
    const char* size;
    const char* localRank;
  } launchers[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
  };
  memset(launch, 0, sizeof(*launch));
  int which = -1;
  for (int i = 0; i < 3 && which < 0; i++)
    if (getenv(launchers[i].rank) && getenv(launchers[i].size)) which = i;
  if (which < 0)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "no launcher variables: set RANK and WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK and "
                      "OMPI_COMM_WORLD_SIZE (mpirun), or PMI_RANK and PMI_SIZE");
  long rank = 0, size = 0, localRank = -1;
  int present;
  FCCLCHECK(readInt(launchers[which].rank, 1, &rank, &present));
  FCCLCHECK(readInt(launchers[which].size, 1, &size, &present));
  FCCLCHECK(readInt(launchers[which].localRank, 0, &localRank, &present));
  if (!present) localRank = -1;
  if (size < 1 || size > FCCL_BOOTSTRAP_MAX_RANKS)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT, "%s=%ld: the world size must be in 1..%d",
                      launchers[which].size, size, FCCL_BOOTSTRAP_MAX_RANKS);
  if (rank < 0 || rank >= size)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT, "%s=%ld is not below %s=%ld", launchers[which].rank, rank,
                      launchers[which].size, size);
  if (present && (localRank < 0 || localRank >= size))
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT, "%s=%ld is not in 0..%ld", launchers[which].localRank,
                      localRank, size - 1);
  launch->rank = (int)rank;
  launch->nranks = (int)size;
  launch->localRank = (int)localRank;
  launch->source = launchers[which].source;

  const char* commId = fcclParamString(FCCL_PARAM_COMM_ID);
  if (commId[0] != '\0') {
    if (strlen(commId) >= sizeof(launch->addr))
      return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT, "FCCL_COMM_ID is longer than %zu characters",
                        sizeof(launch->addr) - 1);
    snprintf(launch->addr, sizeof(launch->addr), "%s", commId);
    return resolveSecret(launch);
  }
  const char* masterAddr = getenv("MASTER_ADDR");
  const char* masterPort = getenv("MASTER_PORT");
  if (which != 0 || masterAddr == NULL || masterPort == NULL || masterAddr[0] == '\0')
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "%s variables found but no rendezvous address: set FCCL_COMM_ID=host:port (reachable from "
                      "every rank; rank 0 listens there)%s",
                      launchers[which].source, which == 0 ? ", or MASTER_ADDR and MASTER_PORT" : "");
  long port;
  if (!parseInt(masterPort, &port) || port < 1 || port >= 65535)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT, "MASTER_PORT=%s is not a port in 1..65534", masterPort);
  /* MASTER_PORT itself belongs to torch's TCPStore (the elastic agent's or init_process_group's): use the next. */
  int isV6 = strchr(masterAddr, ':') != NULL && masterAddr[0] != '[';
  int n = snprintf(launch->addr, sizeof(launch->addr), isV6 ? "[%s]:%ld" : "%s:%ld", masterAddr, port + 1);
  if (n < 0 || (size_t)n >= sizeof(launch->addr))
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT, "MASTER_ADDR is too long");
  return resolveSecret(launch);
}

fcclResult_t fcclBootstrapEnvSecret(const char* secretText, const char* addr, int nranks,
                                    uint8_t secret[FCCL_BOOTSTRAP_SECRET_BYTES]) {
  /* HMAC-SHA256 keyed with FCCL_COMM_SECRET over "fccl-env-v<protocol>|<address>|<world size>": a key derived from
   * it, which the handshake's MACs use and which never travels. The address and the world size keep apart jobs
   * that share a secret. */
  char context[320];
  snprintf(context, sizeof(context), "fccl-env-v%u|%s|%d", FCCL_BOOTSTRAP_PROTOCOL_VERSION, addr, nranks);
  const struct fcclMacPart part = {context, strlen(context)};
  return fcclMac((const uint8_t*)secretText, strlen(secretText), &part, 1, secret);
}

fcclResult_t fcclBootstrapEnvInit(const struct fcclEnvLaunch* launch, int timeoutMs, volatile int* abortFlag,
                                  struct fcclBootstrap** bootstrap) {
  union fcclSocketAddress addr;
  FCCLCHECK(fcclSocketParseHostPort(launch->addr, &addr));
  fcclUniqueId id;
  if (launch->rank == 0) {
    /* Exactly the address asked for, not every interface: the port is reachable where the ranks look for it and
     * nowhere else. */
    FCCLCHECK(fcclBootstrapStartRoot(&addr, launch->secret, timeoutMs, &id));
  } else {
    struct fcclWireId wid = {.protocolVersion = FCCL_BOOTSTRAP_PROTOCOL_VERSION, .rootAddr = addr};
    memcpy(wid.secret, launch->secret, sizeof(wid.secret));
    fcclWireEncodeId((uint8_t*)id.internal, &wid);
  }
  FCCL_INFO(FCCL_SUBSYS_BOOT, "rank %d of %d from %s variables, rendezvous at %s", launch->rank, launch->nranks,
            launch->source, launch->addr);
  fcclResult_t res = fcclBootstrapTcpInit(&id, launch->rank, launch->nranks, timeoutMs, abortFlag, bootstrap);
  /* The root belongs to this init: it must not keep the fixed port bound after a failure (a retry needs it). */
  if (res != fcclSuccess && launch->rank == 0) fcclBootstrapStopRoot(&id);
  return res;
}
