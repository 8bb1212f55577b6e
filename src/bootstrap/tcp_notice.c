/* SPDX-License-Identifier: Apache-2.0 */
/* Error notices of the TCP bootstrap: how the root and the ranks tell a peer why they give up, without blocking. */
#include "tcp.h"

#include "socket.h"
#include "wire.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

void fcclTcpSendNotice(int fd, const uint8_t* frame, size_t size) {
  if (fd < 0) return;
  size_t done = 0;
  int64_t deadline = fcclTimeMs() + 100;
  while (done < size && fcclTimeMs() < deadline) {
    long rc = fcclSocketTrySend(fd, frame + done, size - done);
    if (rc < 0) return;
    done += (size_t)rc;
    if (rc == 0) {
      struct pollfd p = {.fd = fd, .events = POLLOUT, .revents = 0};
      (void)poll(&p, 1, 5);
    }
  }
}

void fcclTcpDrainAndClose(int* fd) {
  uint8_t sink[4096];
  for (int i = 0; i < 16; i++)
    if (fcclSocketTryRecv(*fd, sink, sizeof(sink)) <= 0) break;
  shutdown(*fd, SHUT_WR);
  fcclSocketClose(fd);
}

size_t fcclTcpEncodeErrorFrame(uint8_t* out, fcclResult_t result, int culprit, int reporter, const char* text) {
  struct fcclWireError error;
  memset(&error, 0, sizeof(error));
  error.result = result;
  error.culprit = culprit;
  error.reporter = reporter;
  snprintf(error.text, sizeof(error.text), "%s", text);
  return fcclWireEncodeError(out, &error);
}
