/* SPDX-License-Identifier: Apache-2.0 */
/* Core runtime without a GPU: result strings, last-error text per thread, parameters, logging, fork safety. */
#include "check.h"
#include "debug.h"
#include "fccl.h"
#include "param.h"
#include "test.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void testResults(void) {
  EXPECT_EQ_INT(fcclSuccess, 0);
  EXPECT_EQ_INT(fcclInProgress, 7);
  EXPECT_EQ_INT(fcclTimeout, 8);
  for (int r = 0; r < fcclNumResults; r++) {
    const char* text = fcclGetErrorString((fcclResult_t)r);
    EXPECT(text != NULL && text[0] != '\0');
    for (int other = 0; other < r; other++)
      EXPECT_MSG(strcmp(text, fcclGetErrorString((fcclResult_t)other)) != 0, "results %d and %d share text", r, other);
  }
  EXPECT_STR_CONTAINS(fcclGetErrorString((fcclResult_t)1234), "unknown");
  int version = 0;
  EXPECT_EQ_INT(fcclGetVersion(&version), fcclSuccess);
  EXPECT_EQ_INT(version, FCCL_VERSION_CODE);
  EXPECT_EQ_INT(fcclGetVersion(NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "version is NULL");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "version.c:");
  EXPECT_EQ_INT(fcclGetVersion(&version), fcclSuccess);
  EXPECT_EQ_INT(strlen(fcclGetLastError(NULL)), 0); /* a success clears the stale message */
}

static void* failInThread(void* arg) {
  (void)arg;
  FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "thread-local failure");
  return (void*)(fcclGetLastError(NULL)[0] != '\0' ? (void*)1 : NULL);
}

static void testLastErrorIsPerThread(void) {
  fcclClearError();
  pthread_t thread;
  void* sawOwn = NULL;
  pthread_create(&thread, NULL, failInThread, NULL);
  pthread_join(thread, &sawOwn);
  EXPECT(sawOwn != NULL);
  EXPECT_EQ_INT(strlen(fcclGetLastError(NULL)), 0);
}

static void testParams(void) {
  setenv("FCCL_DEBUG_SUBSYS", "IPC,COLL", 1);
  unsetenv("FCCL_DEBUG_FILE");
  fcclParamResetForTest();
  EXPECT(strcmp(fcclParamString(FCCL_PARAM_DEBUG_SUBSYS), "IPC,COLL") == 0);
  EXPECT(fcclParamIsSet(FCCL_PARAM_DEBUG_SUBSYS));
  EXPECT(!fcclParamIsSet(FCCL_PARAM_DEBUG_FILE));
  EXPECT(strcmp(fcclParamString(FCCL_PARAM_DEBUG_FILE), "") == 0);
  /* Read once: a later setenv is not seen until a reset. */
  setenv("FCCL_DEBUG_SUBSYS", "INIT", 1);
  EXPECT(strcmp(fcclParamString(FCCL_PARAM_DEBUG_SUBSYS), "IPC,COLL") == 0);
  unsetenv("FCCL_DEBUG_SUBSYS");
  fcclParamResetForTest();

  for (int id = 0; id < FCCL_PARAM_COUNT; id++) {
    const fcclParamInfo_t* info = fcclParamInfo((fcclParamId_t)id);
    EXPECT(info && strncmp(info->name, "FCCL_", 5) == 0 && info->doc[0] != '\0');
  }
  EXPECT(fcclParamInfo(FCCL_PARAM_COUNT) == NULL);
  EXPECT(strcmp(fcclParamClosestName("FCCL_DEBUG_SUBSIS") ? fcclParamClosestName("FCCL_DEBUG_SUBSIS") : "",
                "FCCL_DEBUG_SUBSYS") == 0);
  EXPECT(fcclParamClosestName("FCCL_SOMETHING_ELSE_ENTIRELY") == NULL);
}

static char capturedLines[8][1024];
static int capturedCount;
static void captureLog(void* user, fcclLogLevel_t level, const char* subsys, const char* line) {
  (void)user;
  (void)level;
  (void)subsys;
  if (capturedCount < 8) snprintf(capturedLines[capturedCount], sizeof(capturedLines[0]), "%s", line);
  capturedCount++;
}

static void testLogging(void) {
  EXPECT_EQ_INT(fcclParseSubsysList("INIT,IPC"), FCCL_SUBSYS_INIT | FCCL_SUBSYS_IPC);
  EXPECT_EQ_INT(fcclParseSubsysList("^IPC"), ~(uint32_t)FCCL_SUBSYS_IPC);
  EXPECT_EQ_INT(fcclParseSubsysList("all"), FCCL_SUBSYS_ALL);

  setenv("FCCL_DEBUG", "INFO", 1);
  setenv("FCCL_DEBUG_SUBSYS", "^COLL", 1);
  fcclParamResetForTest();
  fcclLogResetForTest();
  fcclSetLogCallback(captureLog, NULL);
  capturedCount = 0;
  fcclLogSetContext(3, 1);
  FCCL_INFO(FCCL_SUBSYS_IPC, "ipc line %d", 42);
  FCCL_INFO(FCCL_SUBSYS_COLL, "filtered out");
  FCCL_TRACE(FCCL_SUBSYS_IPC, "too verbose");
  FCCL_WARN(FCCL_SUBSYS_COLL, "warnings pass any mask");
  EXPECT_EQ_INT(capturedCount, 2);
  char expectPid[32];
  snprintf(expectPid, sizeof(expectPid), ":%d:", (int)getpid());
  EXPECT_STR_CONTAINS(capturedLines[0], expectPid);
  EXPECT_STR_CONTAINS(capturedLines[0], "[3.1]");
  EXPECT_STR_CONTAINS(capturedLines[0], "INFO IPC");
  EXPECT_STR_CONTAINS(capturedLines[0], "ipc line 42");
  EXPECT_STR_CONTAINS(capturedLines[1], "WARN COLL");
  fcclSetLogCallback(NULL, NULL);
  fcclLogSetContext(-1, -1);

  /* FCCL_DEBUG_FILE with %p: the line lands in a file named for this process, not on stdout. */
  char pattern[256], path[256];
  snprintf(pattern, sizeof(pattern), "/tmp/fccl-test-log.%%p");
  snprintf(path, sizeof(path), "/tmp/fccl-test-log.%d", (int)getpid());
  setenv("FCCL_DEBUG_FILE", pattern, 1);
  fcclParamResetForTest();
  fcclLogResetForTest();
  FCCL_INFO(FCCL_SUBSYS_INIT, "to the file");
  fcclLogResetForTest(); /* closes the file */
  FILE* file = fopen(path, "r");
  EXPECT_MSG(file != NULL, "log file %s missing", path);
  if (file) {
    char line[1024] = "";
    EXPECT(fgets(line, sizeof(line), file) != NULL);
    EXPECT_STR_CONTAINS(line, "to the file");
    fclose(file);
    unlink(path);
  }
  unsetenv("FCCL_DEBUG");
  unsetenv("FCCL_DEBUG_SUBSYS");
  unsetenv("FCCL_DEBUG_FILE");
  fcclParamResetForTest();
  fcclLogResetForTest();
}

/* A public call that succeeds leaves no stale message behind, fcclSetLogCallback included. */
static void testSetLogCallbackClearsError(void) {
  FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "an earlier failure");
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  EXPECT_EQ_INT(strlen(fcclGetLastError(NULL)), 0);
}

/* A logging configuration that cannot be honoured is said, not silently replaced by the defaults. */
static void testBadLogConfigIsReported(void) {
  setenv("FCCL_DEBUG", "LOUD", 1);
  setenv("FCCL_DEBUG_SUBSYS", "INIT,BOGUS", 1);
  setenv("FCCL_DEBUG_FILE", "/nonexistent-fccl-dir/log.%p", 1);
  fcclParamResetForTest();
  fcclLogResetForTest();
  capturedCount = 0;
  fcclSetLogCallback(captureLog, NULL);
  FCCL_WARN(FCCL_SUBSYS_INIT, "first line");
  fcclSetLogCallback(NULL, NULL);
  EXPECT_EQ_INT(capturedCount, 2);
  EXPECT_STR_CONTAINS(capturedLines[0], "WARN ENV");
  EXPECT_STR_CONTAINS(capturedLines[0], "FCCL_DEBUG=LOUD is not a level");
  EXPECT_STR_CONTAINS(capturedLines[0], "unknown subsystem 'BOGUS'");
  EXPECT_STR_CONTAINS(capturedLines[0], "FCCL_DEBUG_FILE=/nonexistent-fccl-dir/log.%p: cannot open");
  EXPECT_STR_CONTAINS(capturedLines[1], "first line");
  /* Only once: the configuration is read once. */
  capturedCount = 0;
  fcclSetLogCallback(captureLog, NULL);
  FCCL_WARN(FCCL_SUBSYS_INIT, "second line");
  fcclSetLogCallback(NULL, NULL);
  EXPECT_EQ_INT(capturedCount, 1);
  unsetenv("FCCL_DEBUG");
  unsetenv("FCCL_DEBUG_SUBSYS");
  unsetenv("FCCL_DEBUG_FILE");
  fcclParamResetForTest();
  fcclLogResetForTest();
}

/*
 * fork() while another thread holds the parameter lock (it reloads the environment in a loop, so it almost always
 * does): the child must still be able to take it. Each child reloads the parameters and exits; one that is still
 * running after two seconds inherited a held lock.
 */
static volatile int reloaderStop;
static void* reloadParamsLoop(void* arg) {
  (void)arg;
  while (!__atomic_load_n(&reloaderStop, __ATOMIC_ACQUIRE)) {
    fcclParamResetForTest();
    (void)fcclParamString(FCCL_PARAM_DEBUG);
  }
  return NULL;
}

static void testParamLockAcrossFork(void) {
  pthread_t reloader;
  reloaderStop = 0;
  if (pthread_create(&reloader, NULL, reloadParamsLoop, NULL) != 0) {
    EXPECT_MSG(0, "cannot start a thread");
    return;
  }
  int hung = 0;
  for (int i = 0; i < 30 && hung == 0; i++) {
    pid_t child = fork();
    if (child == 0) {
      fcclParamResetForTest();
      _exit(fcclParamString(FCCL_PARAM_DEBUG) != NULL ? 0 : 1);
    }
    if (child < 0) break;
    int status = 0;
    pid_t done = 0;
    for (int waited = 0; waited < 2000 && (done = waitpid(child, &status, WNOHANG)) == 0; waited++) {
      struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
      nanosleep(&pause, NULL);
    }
    if (done == 0) {
      hung++;
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
    } else {
      EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  }
  __atomic_store_n(&reloaderStop, 1, __ATOMIC_RELEASE);
  pthread_join(reloader, NULL);
  EXPECT_MSG(hung == 0, "a child forked while the parameter lock was held could not take it");
  fcclParamResetForTest();
}

static void testUnknownVariableWarning(void) {
  setenv("FCCL_DEBUG_SUBSIS", "INIT", 1);
  fcclParamResetForTest();
  fcclLogResetForTest();
  capturedCount = 0;
  fcclSetLogCallback(captureLog, NULL);
  fcclParamWarnUnknown();
  fcclSetLogCallback(NULL, NULL);
  /* The environment may hold other unknown FCCL_* names; exactly one line must be about ours. */
  int matches = 0;
  for (int i = 0; i < capturedCount && i < 8; i++)
    matches += strstr(capturedLines[i], "FCCL_DEBUG_SUBSIS (did you mean FCCL_DEBUG_SUBSYS?)") != NULL;
  EXPECT_EQ_INT(matches, 1);
  unsetenv("FCCL_DEBUG_SUBSIS");
}

int main(void) {
  testResults();
  testLastErrorIsPerThread();
  testParams();
  testLogging();
  testUnknownVariableWarning();
  testSetLogCallbackClearsError();
  testBadLogConfigIsReported();
  testParamLockAcrossFork();
  return testSummary("core");
}
