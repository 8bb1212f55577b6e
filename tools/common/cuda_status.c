/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tools' one reading of CUDA's driver and GPU status (cuda_status.h).
 */
#include "cuda_status.h"

#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void formatVersion(int version, char* out, size_t len) {
  snprintf(out, len, "%d.%d", version / 1000, (version % 1000) / 10);
}

void toolCudaDescribe(toolCudaStatus_t* status, cudaError_t countError, int deviceNodes, int libcuda,
                      const char* visibleDevices) {
  char missing[96] = "", runtime[16] = "?";
  if (!deviceNodes) snprintf(missing, sizeof(missing), "no /dev/nvidia* device");
  if (!libcuda)
    snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%sno libcuda.so.1", missing[0] ? ", " : "");
  if (status->runtimeVersion > 0) formatVersion(status->runtimeVersion, runtime, sizeof(runtime));
  status->noDriver = status->driverVersion <= 0 && (!deviceNodes || !libcuda);
  if (status->driverVersion > 0)
    formatVersion(status->driverVersion, status->driver, sizeof(status->driver));
  else if (status->noDriver)
    snprintf(status->driver, sizeof(status->driver), "none (no NVIDIA driver found)");
  else
    snprintf(status->driver, sizeof(status->driver), "unknown (libcuda.so.1 loads but reports no CUDA version)");

  status->noGpu[0] = '\0';
  if (countError == cudaSuccess && status->deviceCount > 0) return;
  const int hidden = visibleDevices && (visibleDevices[strspn(visibleDevices, " ")] == '\0' ||
                                        visibleDevices[strspn(visibleDevices, " ")] == '-');
  if (status->noDriver) {
    snprintf(status->noGpu, sizeof(status->noGpu), "no NVIDIA driver found: %s", missing);
  } else if (countError == cudaErrorInsufficientDriver && status->driverVersion > 0) {
    char driver[16];
    formatVersion(status->driverVersion, driver, sizeof(driver));
    snprintf(status->noGpu, sizeof(status->noGpu),
             "the NVIDIA driver supports CUDA %s, older than this CUDA runtime (%s): a newer driver is needed", driver,
             runtime);
  } else if (countError == cudaSuccess || countError == cudaErrorNoDevice) {
    if (hidden)
      snprintf(status->noGpu, sizeof(status->noGpu), "no CUDA device visible: CUDA_VISIBLE_DEVICES='%s' hides them all",
               visibleDevices);
    else
      snprintf(status->noGpu, sizeof(status->noGpu), "no CUDA device visible");
  } else {
    snprintf(status->noGpu, sizeof(status->noGpu), "CUDA cannot list the GPUs: %s (%s)", cudaGetErrorName(countError),
             cudaGetErrorString(countError));
  }
}

static int haveDeviceNodes(void) {
  if (access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0) return 1;
  glob_t found;
  int nodes = glob("/dev/nvidia[0-9]*", 0, NULL, &found) == 0 && found.gl_pathc > 0;
  globfree(&found);
  return nodes;
}

static int haveLibcuda(void) {
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!handle) return 0;
  dlclose(handle);
  return 1;
}

void toolCudaQuery(toolCudaStatus_t* status) {
  memset(status, 0, sizeof(*status));
  if (cudaDriverGetVersion(&status->driverVersion) != cudaSuccess) status->driverVersion = 0;
  if (cudaRuntimeGetVersion(&status->runtimeVersion) != cudaSuccess) status->runtimeVersion = 0;
  cudaError_t countError = cudaGetDeviceCount(&status->deviceCount);
  if (countError != cudaSuccess) status->deviceCount = 0;
  (void)cudaGetLastError();
  toolCudaDescribe(status, countError, haveDeviceNodes(), haveLibcuda(), getenv("CUDA_VISIBLE_DEVICES"));
}

int toolReportNoGpu(const char* program, const char* reason) {
  fprintf(stderr, "%s: no GPU to run on: %s\n", program, reason && *reason ? reason : "no CUDA device visible");
  return TOOL_EXIT_NO_GPU;
}

static double monotonicSec(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

void toolCudaQueryInChild(toolCudaStatus_t* status, int timeoutSec) {
  memset(status, 0, sizeof(*status));
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(status->noGpu, sizeof(status->noGpu), "cannot ask CUDA in a child process: pipe: %s", strerror(errno));
    return;
  }
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(fds[0]);
    toolCudaStatus_t answer;
    toolCudaQuery(&answer);
    _exit(write(fds[1], &answer, sizeof(answer)) == (ssize_t)sizeof(answer) ? 0 : 1);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    snprintf(status->noGpu, sizeof(status->noGpu), "cannot ask CUDA in a child process: fork: %s", strerror(errno));
    return;
  }
  toolCudaStatus_t answer;
  size_t got = 0;
  const double deadline = monotonicSec() + timeoutSec;
  int timedOut = 0;
  while (got < sizeof(answer)) {
    /* A driver that hangs must not hang the tool. */
    const double left = deadline - monotonicSec();
    struct pollfd ready = {fds[0], POLLIN, 0};
    const int polled = left > 0 ? poll(&ready, 1, (int)(left * 1000) + 1) : 0;
    if (polled < 0 && errno == EINTR) continue;
    if (polled == 0) timedOut = 1;
    if (polled <= 0) break;
    const ssize_t n = read(fds[0], (char*)&answer + got, sizeof(answer) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fds[0]);
  if (timedOut) kill(pid, SIGKILL);
  /* Reaped when it goes within a few seconds; one stuck in a driver may never go, and is left. */
  int exitStatus = 0;
  for (const double reapBy = monotonicSec() + 5; waitpid(pid, &exitStatus, WNOHANG) == 0 && monotonicSec() < reapBy;) {
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  if (got == sizeof(answer)) {
    *status = answer;
    status->noGpu[sizeof(status->noGpu) - 1] = '\0';
    status->driver[sizeof(status->driver) - 1] = '\0';
  } else if (timedOut) {
    snprintf(status->noGpu, sizeof(status->noGpu), "asking CUDA for the GPUs took more than %d s (a hung driver?)",
             timeoutSec);
  } else {
    snprintf(status->noGpu, sizeof(status->noGpu), "the process asking CUDA for the GPUs failed");
  }
}
