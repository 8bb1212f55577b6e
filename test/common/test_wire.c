/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wire through the kernel's own interfaces, no external program: the pair is made by one RTM_NEWLINK request on
 * a NETLINK_ROUTE socket, each end created straight in its namespace; each side is then configured from inside its
 * namespace by the interface ioctls, on an AF_INET socket opened there (a socket acts on the namespace it was opened
 * in, whatever namespace its process moves to later).
 */
#include "test_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RTNL_WAIT_S 3 /* the longest wait for the kernel's answer to a request */

/* Why the wire cannot be laid, in one buffer (testWireLay runs single-threaded): what failed, the error's text, more
 * on it when there is more (said), and the usual cause of that error here when there is one. */
static const char* failed(const char* what, int err, const char* said, const char* cause) {
  static char why[256];
  snprintf(why, sizeof(why), "%s: %s", what, strerror(err));
  size_t used = strlen(why);
  if (said && said[0]) snprintf(why + used, sizeof(why) - used, ", %s", said);
  used = strlen(why);
  if (cause) snprintf(why + used, sizeof(why) - used, " (%s)", cause);
  return why;
}

/* The usual cause of err from a request that changes the network (RTM_NEWLINK, the SIOCS ioctls), or NULL. */
static const char* netAdminCause(int err) { return err == EPERM || err == EACCES ? "needs CAP_NET_ADMIN" : NULL; }

/* Appends attribute type holding len bytes of data (none for a nest, closed by endNest) to msg, a buffer of cap
 * bytes; returns it, or NULL when it does not fit. */
static struct rtattr* addAttr(struct nlmsghdr* msg, size_t cap, unsigned short type, const void* data, size_t len) {
  const size_t at = NLMSG_ALIGN(msg->nlmsg_len);
  if (at + RTA_SPACE(len) > cap) return NULL;
  struct rtattr* attr = (struct rtattr*)((char*)msg + at);
  attr->rta_type = type;
  attr->rta_len = (unsigned short)RTA_LENGTH(len);
  if (len) memcpy(RTA_DATA(attr), data, len);
  msg->nlmsg_len = (uint32_t)(at + RTA_SPACE(len));
  return attr;
}

/* Closes nest: its length covers everything appended to msg since it was opened. */
static void endNest(struct nlmsghdr* msg, struct rtattr* nest) {
  nest->rta_len = (unsigned short)((char*)msg + msg->nlmsg_len - (char*)nest);
}

/* Sends msg (which asks for an ACK) on a NETLINK_ROUTE socket of this namespace and reads the kernel's answer,
 * waiting at most RTNL_WAIT_S. 0 when the kernel acknowledged it; else the error (ETIMEDOUT without an answer), with
 * more on it in said: the kernel's own message when it gave one ("" when there is nothing more). */
static int rtnlTalk(struct nlmsghdr* msg, char* said, size_t saidSize) {
  said[0] = '\0';
  const int sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (sock < 0) {
    const int err = errno;
    snprintf(said, saidSize, "on socket(AF_NETLINK, NETLINK_ROUTE)");
    return err;
  }
  /* Best effort: the kernel's words on an error, without the request echoed back (older kernels have neither). */
  const int one = 1;
  (void)setsockopt(sock, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
  (void)setsockopt(sock, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
  const struct timeval wait = {.tv_sec = RTNL_WAIT_S};
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  int err = 0;
  if (setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait)) != 0 ||
      sendto(sock, msg, msg->nlmsg_len, 0, (struct sockaddr*)&kernel, sizeof(kernel)) != (ssize_t)msg->nlmsg_len)
    err = errno ? errno : EIO;
  /* A fresh socket in no multicast group: its only message is the answer to this request. */
  union {
    struct nlmsghdr msg;
    char bytes[4096];
  } answer;
  const ssize_t got = err ? -1 : recv(sock, &answer, sizeof(answer), 0);
  if (!err && got < 0) err = errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
  close(sock);
  if (err) return err;
  const struct nlmsghdr* head = &answer.msg;
  if (got < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) || head->nlmsg_len > (size_t)got ||
      head->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr)) || head->nlmsg_type != NLMSG_ERROR ||
      head->nlmsg_seq != msg->nlmsg_seq) {
    snprintf(said, saidSize, "an answer that is not this request's acknowledgement");
    return EPROTO;
  }
  const struct nlmsgerr* error = NLMSG_DATA(head);
  if (error->error == 0) return 0;
  if (head->nlmsg_flags & NLM_F_ACK_TLVS) {
    /* The attributes follow the error and the request's header, or the whole request when it was not capped. */
    size_t at = NLMSG_HDRLEN + sizeof(*error);
    if (!(head->nlmsg_flags & NLM_F_CAPPED)) at += NLMSG_ALIGN(error->msg.nlmsg_len - NLMSG_HDRLEN);
    int left = at < head->nlmsg_len ? (int)(head->nlmsg_len - at) : 0;
    for (const struct rtattr* attr = (const struct rtattr*)((const char*)head + at); RTA_OK(attr, left);
         attr = RTA_NEXT(attr, left))
      if (attr->rta_type == NLMSGERR_ATTR_MSG)
        snprintf(said, saidSize, "the kernel says \"%.*s\"", (int)RTA_PAYLOAD(attr), (const char*)RTA_DATA(attr));
  }
  return -error->error;
}

/* Makes the veth pair, each end named and created in its side's namespace. 0, or the error as rtnlTalk gives it. */
static int newVethPair(const struct testWire* wire, char* said, size_t saidSize) {
  union {
    struct nlmsghdr msg;
    char bytes[512];
  } request;
  memset(&request, 0, sizeof(request));
  struct nlmsghdr* msg = &request.msg;
  msg->nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg)); /* the first end's ifinfomsg: all zero, AF_UNSPEC */
  msg->nlmsg_type = RTM_NEWLINK;
  msg->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
  msg->nlmsg_seq = 1;
  const size_t cap = sizeof(request);
  const uint32_t ns[2] = {(uint32_t)wire->ns[0], (uint32_t)wire->ns[1]};
  const struct ifinfomsg peer = {.ifi_family = AF_UNSPEC};
  struct rtattr *info = NULL, *data = NULL, *peerInfo = NULL;
  const int fits = addAttr(msg, cap, IFLA_IFNAME, wire->end[0], strlen(wire->end[0]) + 1) &&
                   addAttr(msg, cap, IFLA_NET_NS_FD, &ns[0], sizeof(ns[0])) &&
                   (info = addAttr(msg, cap, IFLA_LINKINFO, NULL, 0)) &&
                   addAttr(msg, cap, IFLA_INFO_KIND, "veth", strlen("veth")) &&
                   (data = addAttr(msg, cap, IFLA_INFO_DATA, NULL, 0)) &&
                   (peerInfo = addAttr(msg, cap, VETH_INFO_PEER, &peer, sizeof(peer))) &&
                   addAttr(msg, cap, IFLA_IFNAME, wire->end[1], strlen(wire->end[1]) + 1) &&
                   addAttr(msg, cap, IFLA_NET_NS_FD, &ns[1], sizeof(ns[1]));
  if (!fits) {
    snprintf(said, saidSize, "the request does not fit in %zu bytes", cap);
    return EMSGSIZE;
  }
  endNest(msg, peerInfo);
  endNest(msg, data);
  endNest(msg, info);
  return rtnlTalk(msg, said, saidSize);
}

/* Sets (up) or clears IFF_UP on interface name, through sock, an AF_INET socket of its namespace. 0, or the error
 * with *call naming the ioctl that failed. */
static int setUp(int sock, const char* name, int up, const char** call) {
  struct ifreq req;
  memset(&req, 0, sizeof(req));
  snprintf(req.ifr_name, sizeof(req.ifr_name), "%s", name);
  *call = "SIOCGIFFLAGS";
  if (ioctl(sock, SIOCGIFFLAGS, &req) != 0) return errno;
  req.ifr_flags = (short)(up ? req.ifr_flags | IFF_UP : req.ifr_flags & ~IFF_UP);
  *call = "SIOCSIFFLAGS";
  return ioctl(sock, SIOCSIFFLAGS, &req) == 0 ? 0 : errno;
}

/* Gives interface name the IPv4 address addr/24, through sock as for setUp. 0, or the error with *call. */
static int setAddress(int sock, const char* name, const char* addr, const char** call) {
  struct ifreq req;
  memset(&req, 0, sizeof(req));
  snprintf(req.ifr_name, sizeof(req.ifr_name), "%s", name);
  struct sockaddr_in in = {.sin_family = AF_INET};
  *call = "inet_pton";
  if (inet_pton(AF_INET, addr, &in.sin_addr) != 1) return EINVAL;
  memcpy(&req.ifr_addr, &in, sizeof(in));
  *call = "SIOCSIFADDR";
  if (ioctl(sock, SIOCSIFADDR, &req) != 0) return errno;
  in.sin_addr.s_addr = htonl(0xffffff00u); /* SIOCSIFADDR gave the class's mask (/8); the route follows the new one */
  memcpy(&req.ifr_netmask, &in, sizeof(in));
  *call = "SIOCSIFNETMASK";
  return ioctl(sock, SIOCSIFNETMASK, &req) == 0 ? 0 : errno;
}

/* From inside side's namespace: lo up, and side's end up with its address. 0, or the error with step saying which
 * call on which interface failed. */
static int raiseSide(const struct testWire* wire, int side, char* step, size_t stepSize) {
  const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) {
    const int err = errno;
    snprintf(step, stepSize, "socket(AF_INET)");
    return err;
  }
  const char* call = "";
  const char* name = "lo";
  int err = setUp(sock, name, 1, &call);
  if (!err) {
    name = wire->end[side];
    err = setAddress(sock, name, wire->addr[side], &call);
  }
  if (!err) err = setUp(sock, name, 1, &call);
  if (err) snprintf(step, stepSize, "%s on %s", call, name);
  close(sock);
  return err;
}

const char* testWireLay(struct testWire* wire) {
  memset(wire, 0, sizeof(*wire));
  wire->ns[0] = wire->ns[1] = -1;
  const int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) return failed("no network namespace: open /proc/self/ns/net", errno, NULL, NULL);
  const char* why = NULL;
  for (int side = 0; side < 2 && !why; side++) {
    snprintf(wire->end[side], sizeof(wire->end[side]), "fcclwire%d", side);
    snprintf(wire->addr[side], sizeof(wire->addr[side]), "10.231.0.%d", side + 1);
    if (unshare(CLONE_NEWNET) != 0) {
      const int err = errno;
      const char* cause = err == EPERM ? "needs CAP_SYS_ADMIN" : NULL;
      why = failed("no network namespace: unshare(CLONE_NEWNET)", err, NULL, cause);
      break;
    }
    wire->ns[side] = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    const int openErr = errno;
    if (setns(home, CLONE_NEWNET) != 0)
      why = failed("could not come back from a new network namespace: setns", errno, NULL, NULL);
    else if (wire->ns[side] < 0)
      why = failed("could not hold a new network namespace: open /proc/self/ns/net", openErr, NULL, NULL);
  }
  if (!why) {
    char said[128], timeout[32];
    const int err = newVethPair(wire, said, sizeof(said));
    snprintf(timeout, sizeof(timeout), "no answer within %d s", RTNL_WAIT_S);
    const char* cause = err == EOPNOTSUPP ? "the veth driver" : netAdminCause(err);
    if (err == ETIMEDOUT) cause = timeout;
    if (err) why = failed("no veth pair: RTM_NEWLINK", err, said, cause);
  }
  for (int side = 0; side < 2 && !why; side++) {
    char what[96], step[48];
    if (setns(wire->ns[side], CLONE_NEWNET) != 0) {
      snprintf(what, sizeof(what), "could not enter side %d's network namespace: setns", side);
      why = failed(what, errno, NULL, NULL);
      break;
    }
    const int err = raiseSide(wire, side, step, sizeof(step));
    if (setns(home, CLONE_NEWNET) != 0) {
      snprintf(what, sizeof(what), "could not come back from side %d's network namespace: setns", side);
      why = failed(what, errno, NULL, NULL);
    } else if (err) {
      snprintf(what, sizeof(what), "could not bring side %d's end up: %s", side, step);
      why = failed(what, err, NULL, netAdminCause(err));
    }
  }
  close(home);
  if (why) testWireFree(wire);
  return why;
}

int testWireEnter(const struct testWire* wire, int side) { return setns(wire->ns[side], CLONE_NEWNET) == 0 ? 0 : -1; }

int testWireWaitRunning(const struct testWire* wire, int side, int ms, char* why, int whySize) {
  snprintf(why, (size_t)whySize, "%s not seen", wire->end[side]);
  for (int waited = 0;; waited += 10) {
    struct ifaddrs* list = NULL;
    if (getifaddrs(&list) != 0) {
      snprintf(why, (size_t)whySize, "getifaddrs: %s", strerror(errno));
      return -1;
    }
    int running = 0;
    for (const struct ifaddrs* i = list; i; i = i->ifa_next) {
      if (strcmp(i->ifa_name, wire->end[side]) != 0 || !i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      running = (i->ifa_flags & IFF_RUNNING) != 0;
      snprintf(why, (size_t)whySize, "%s has its address, flags 0x%x (%s, %s)", wire->end[side], i->ifa_flags,
               i->ifa_flags & IFF_UP ? "up" : "down", running ? "running" : "not running");
    }
    freeifaddrs(list);
    if (running) return 0;
    if (waited >= ms) return -1;
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 10 * 1000000};
    nanosleep(&pause, NULL);
  }
}

int testWireCut(const struct testWire* wire, int side) {
  const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return -1;
  const char* call;
  const int err = setUp(sock, wire->end[side], 0, &call);
  close(sock);
  errno = err;
  return err ? -1 : 0;
}

void testWireFree(struct testWire* wire) {
  for (int side = 0; side < 2; side++) {
    if (wire->ns[side] >= 0) close(wire->ns[side]);
    wire->ns[side] = -1;
  }
}
