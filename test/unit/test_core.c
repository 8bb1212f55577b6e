/* Core runtime without a GPU: result strings, last-error text per thread, parameters, logging. */
#include "check.h"
#include "debug.h"
#include "fccl.h"
#include "param.h"
#include "test.h"

#include <pthread.h>
#include <stdlib.h>
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
  return testSummary("core");
}
