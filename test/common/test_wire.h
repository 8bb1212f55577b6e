/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two hosts on one machine, for the tests of a host that stops answering: two network namespaces joined by a veth
 * pair, laid by the test's process before it forks its ranks, which enter one namespace each; cutting the wire is
 * taking one end down, which leaves the other side's packets unanswered with no end of stream and no reset, as a
 * host that loses power or its network does. The namespaces are held by descriptors only, so they and the pair
 * vanish with the last process that holds one or runs in one, however the test ends. Needs what root has (network
 * namespaces, CAP_NET_ADMIN, the veth driver) and no external program: the kernel is asked directly (rtnetlink, the
 * interface ioctls).
 */
#ifndef FCCL_TEST_WIRE_H_
#define FCCL_TEST_WIRE_H_

struct testWire {
  int ns[2];        /* the namespaces of side 0 and side 1 (descriptors; -1 when not made) */
  char end[2][16];  /* each side's end of the pair: its interface name there */
  char addr[2][16]; /* each end's IPv4 address */
};

/* Lays the wire (both ends up with their addresses, lo up on each side: a process reaches its own address through
 * lo). Call it single-threaded, before forking the ranks. Returns NULL, or why this machine cannot lay it (the test
 * is then to be skipped): the call that failed and its error's text, valid until the next call. */
const char* testWireLay(struct testWire* wire);

/* In a forked rank: moves the process into side's namespace. 0 on success. */
int testWireEnter(const struct testWire* wire, int side);

/* From a process in side's namespace: waits up to ms milliseconds for side's end to be running with its address
 * (the kernel reports IFF_RUNNING once the link is up at both ends, which NCCL requires of an interface it will use;
 * the report may come a moment after both ends were raised). 0 when it is; else -1, with what the interface
 * showed last in why. */
int testWireWaitRunning(const struct testWire* wire, int side, int ms, char* why, int whySize);

/* Takes side's end down: from a process in side's namespace. 0 on success, else -1 with errno set. */
int testWireCut(const struct testWire* wire, int side);

/* Closes the descriptors (the namespaces go when no process runs in them any more). */
void testWireFree(struct testWire* wire);

#endif /* FCCL_TEST_WIRE_H_ */
