/* SPDX-License-Identifier: Apache-2.0 */
#include "test_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs "ip ..." made from fmt, its output discarded; 1 when it succeeded. */
static int runIp(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static int runIp(const char* fmt, ...) {
  char command[512] = "ip ";
  va_list args;
  va_start(args, fmt);
  vsnprintf(command + 3, sizeof(command) - 3, fmt, args);
  va_end(args);
  strncat(command, " > /dev/null 2>&1", sizeof(command) - strlen(command) - 1);
  const int status = system(command);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Runs "ip command" inside namespace ns, then comes back to home. */
static int runIpIn(int ns, int home, const char* command) {
  if (setns(ns, CLONE_NEWNET) != 0) return 0;
  const int ok = runIp("%s", command);
  return setns(home, CLONE_NEWNET) == 0 && ok;
}

const char* testWireLay(struct testWire* wire) {
  memset(wire, 0, sizeof(*wire));
  wire->ns[0] = wire->ns[1] = -1;
  const int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) return "no /proc/self/ns/net";
  for (int side = 0; side < 2; side++) {
    if (unshare(CLONE_NEWNET) != 0) {
      close(home);
      testWireFree(wire);
      return errno == EPERM ? "no network namespace (unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN)"
                            : "no network namespace (unshare(CLONE_NEWNET) failed)";
    }
    wire->ns[side] = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (setns(home, CLONE_NEWNET) != 0 || wire->ns[side] < 0) {
      close(home);
      testWireFree(wire);
      return "could not come back from a new network namespace";
    }
    snprintf(wire->end[side], sizeof(wire->end[side]), "fcclwire%d", side);
    snprintf(wire->addr[side], sizeof(wire->addr[side]), "10.231.0.%d", side + 1);
  }
  /* ip opens a netns argument that holds a '/' as a path: the descriptors stand for names. */
  const int pid = (int)getpid();
  const char* why = NULL;
  if (!runIp("link add %s netns /proc/%d/fd/%d type veth peer name %s netns /proc/%d/fd/%d", wire->end[0], pid,
             wire->ns[0], wire->end[1], pid, wire->ns[1]))
    why = "no veth pair (iproute2's ip, the veth driver, CAP_NET_ADMIN)";
  for (int side = 0; side < 2 && !why; side++) {
    char address[64], up[64];
    snprintf(address, sizeof(address), "addr add %s/24 dev %s", wire->addr[side], wire->end[side]);
    snprintf(up, sizeof(up), "link set %s up", wire->end[side]);
    if (!runIpIn(wire->ns[side], home, "link set lo up") || !runIpIn(wire->ns[side], home, address) ||
        !runIpIn(wire->ns[side], home, up))
      why = "could not bring an end of the veth pair up";
  }
  close(home);
  if (why) testWireFree(wire);
  return why;
}

int testWireEnter(const struct testWire* wire, int side) { return setns(wire->ns[side], CLONE_NEWNET) == 0 ? 0 : -1; }

int testWireCut(const struct testWire* wire, int side) { return runIp("link set %s down", wire->end[side]) ? 0 : -1; }

void testWireFree(struct testWire* wire) {
  for (int side = 0; side < 2; side++) {
    if (wire->ns[side] >= 0) close(wire->ns[side]);
    wire->ns[side] = -1;
  }
}
