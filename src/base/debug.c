/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Log lines: "host:pid:tid [rank.dev] FCCL LEVEL SUBSYS file:line message". Configuration is read once from the
 * parameter registry; the sink is stderr, a FCCL_DEBUG_FILE file, or the application's callback.
 */
#include "debug.h"

#include "param.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t logLock = PTHREAD_MUTEX_INITIALIZER;
static int logConfigured; /* guarded by logLock; read racily as a fast path, then re-checked under the lock */
static fcclLogLevel_t logLevel = fcclLogWarn;
static uint32_t logSubsysMask = FCCL_SUBSYS_ALL;
static FILE* logFile; /* NULL: stderr */
static char logHost[64];
static fcclLogCallback_t logCallback;
static void* logCallbackData;

static _Thread_local int logRank = -1;
static _Thread_local int logDevice = -1;

static const struct {
  const char* name;
  fcclSubsys_t bit;
} subsysNames[] = {
    {"INIT", FCCL_SUBSYS_INIT}, {"BOOT", FCCL_SUBSYS_BOOT}, {"IPC", FCCL_SUBSYS_IPC},
    {"COLL", FCCL_SUBSYS_COLL}, {"ENV", FCCL_SUBSYS_ENV},   {"TOPO", FCCL_SUBSYS_TOPO},
};

const char* fcclSubsysName(fcclSubsys_t subsys) {
  for (size_t i = 0; i < sizeof(subsysNames) / sizeof(subsysNames[0]); i++)
    if (subsysNames[i].bit & subsys) return subsysNames[i].name;
  return "ALL";
}

/* Appends a formatted note to a problem list ("; "-separated), cut at its size. */
static void addProblem(char* problems, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void addProblem(char* problems, size_t size, const char* fmt, ...) {
  size_t used = strlen(problems);
  if (used + 3 >= size) return;
  if (used > 0) {
    memcpy(problems + used, "; ", 3);
    used += 2;
  }
  va_list args;
  va_start(args, fmt);
  vsnprintf(problems + used, size - used, fmt, args);
  va_end(args);
}

/* fcclParseSubsysList, naming the names it does not know in problems (may be NULL). */
static uint32_t parseSubsys(const char* list, char* problems, size_t problemsSize) {
  int invert = 0;
  if (list[0] == '^') {
    invert = 1;
    list++;
  }
  uint32_t mask = 0;
  char copy[256];
  snprintf(copy, sizeof(copy), "%s", list);
  char* save = NULL;
  for (char* token = strtok_r(copy, ",", &save); token; token = strtok_r(NULL, ",", &save)) {
    while (*token == ' ') token++;
    if (*token == '\0') continue;
    if (strcasecmp(token, "ALL") == 0) {
      mask = FCCL_SUBSYS_ALL;
      continue;
    }
    int known = 0;
    for (size_t i = 0; i < sizeof(subsysNames) / sizeof(subsysNames[0]); i++) {
      if (strcasecmp(token, subsysNames[i].name) != 0) continue;
      mask |= subsysNames[i].bit;
      known = 1;
    }
    if (!known && problems)
      addProblem(problems, problemsSize, "FCCL_DEBUG_SUBSYS: unknown subsystem '%s' ignored (known: INIT, BOOT, IPC, "
                 "COLL, ENV, TOPO, ALL)", token);
  }
  return invert ? ~mask : mask;
}

uint32_t fcclParseSubsysList(const char* list) { return parseSubsys(list, NULL, 0); }

static fcclLogLevel_t parseLevel(const char* name, char* problems, size_t problemsSize) {
  static const char* levelNames[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  for (int level = fcclLogNone; level <= fcclLogTrace; level++)
    if (strcasecmp(name, levelNames[level]) == 0) return (fcclLogLevel_t)level;
  addProblem(problems, problemsSize, "FCCL_DEBUG=%s is not a level (NONE, VERSION, WARN, INFO, TRACE); using WARN",
             name);
  return fcclLogWarn;
}

/* Expands %h (host) and %p (pid) in a FCCL_DEBUG_FILE pattern. */
static void expandFilePattern(const char* pattern, char* out, size_t outSize) {
  size_t used = 0;
  for (const char* p = pattern; *p && used + 1 < outSize; p++) {
    if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
      int n = p[1] == 'h' ? snprintf(out + used, outSize - used, "%s", logHost)
                          : snprintf(out + used, outSize - used, "%d", (int)getpid());
      if (n < 0) break;
      used += (size_t)n < outSize - used ? (size_t)n : outSize - used - 1;
      p++;
    } else {
      out[used++] = *p;
    }
  }
  out[used] = '\0';
}

/* A fork while another thread holds logLock would leave the child's copy locked forever: hold it across fork. */
static void lockBeforeFork(void) { pthread_mutex_lock(&logLock); }
static void unlockAfterFork(void) { pthread_mutex_unlock(&logLock); }
static void registerForkHandlers(void) { pthread_atfork(lockBeforeFork, unlockAfterFork, unlockAfterFork); }
static pthread_once_t forkHandlersOnce = PTHREAD_ONCE_INIT;

/*
 * Reads the configuration. What is wrong with it goes to problems, which the caller logs once the lock is released
 * (logging here would take the lock again).
 */
static void configureLocked(char* problems, size_t problemsSize) {
  if (logConfigured) return;
  pthread_once(&forkHandlersOnce, registerForkHandlers);
  gethostname(logHost, sizeof(logHost) - 1);
  char* dot = strchr(logHost, '.');
  if (dot) *dot = '\0';
  logLevel = parseLevel(fcclParamString(FCCL_PARAM_DEBUG), problems, problemsSize);
  logSubsysMask = parseSubsys(fcclParamString(FCCL_PARAM_DEBUG_SUBSYS), problems, problemsSize);
  const char* filePattern = fcclParamString(FCCL_PARAM_DEBUG_FILE);
  if (filePattern[0] != '\0') {
    char path[512];
    expandFilePattern(filePattern, path, sizeof(path));
    logFile = fopen(path, "we");
    /* An unopenable file is not fatal: lines keep going to stderr, starting with this one. */
    if (!logFile)
      addProblem(problems, problemsSize, "FCCL_DEBUG_FILE=%s: cannot open %s (%s); logging to stderr", filePattern,
                 path, strerror(errno));
  }
  __atomic_store_n(&logConfigured, 1, __ATOMIC_RELEASE);
}

int fcclLogEnabled(fcclLogLevel_t level, fcclSubsys_t subsys) {
  if (!__atomic_load_n(&logConfigured, __ATOMIC_ACQUIRE)) {
    char problems[1024] = "";
    pthread_mutex_lock(&logLock);
    configureLocked(problems, sizeof(problems));
    pthread_mutex_unlock(&logLock);
    if (problems[0] != '\0') fcclLog(fcclLogWarn, FCCL_SUBSYS_ENV, __FILE__, __LINE__, "%s", problems);
  }
  if (level > logLevel) return 0;
  /* Warnings always pass the subsystem filter: a failure must never be silenced by a debug mask. */
  return level <= fcclLogWarn || (logSubsysMask & (uint32_t)subsys) != 0;
}

void fcclLogSetContext(int rank, int cudaDev) {
  logRank = rank;
  logDevice = cudaDev;
}

void fcclLogSetCallback(fcclLogCallback_t callback, void* userData) {
  pthread_mutex_lock(&logLock);
  logCallback = callback;
  logCallbackData = userData;
  pthread_mutex_unlock(&logLock);
}

void fcclLog(fcclLogLevel_t level, fcclSubsys_t subsys, const char* file, int line, const char* fmt, ...) {
  if (!fcclLogEnabled(level, subsys)) return;
  static const char* levelTags[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  char context[32] = "";
  if (logRank >= 0) snprintf(context, sizeof(context), " [%d.%d]", logRank, logDevice);
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;

  char text[1024];
  int prefix = snprintf(text, sizeof(text), "%s:%d:%ld%s FCCL %s %s %s:%d ", logHost, (int)getpid(),
                        (long)syscall(SYS_gettid), context, levelTags[level], fcclSubsysName(subsys), base, line);
  if (prefix < 0 || (size_t)prefix >= sizeof(text)) prefix = 0;
  va_list args;
  va_start(args, fmt);
  vsnprintf(text + prefix, sizeof(text) - (size_t)prefix, fmt, args);
  va_end(args);

  pthread_mutex_lock(&logLock);
  if (logCallback) {
    logCallback(logCallbackData, level, fcclSubsysName(subsys), text);
  } else {
    FILE* sink = logFile ? logFile : stderr;
    fprintf(sink, "%s\n", text);
    fflush(sink);
  }
  pthread_mutex_unlock(&logLock);
}

void fcclLogResetForTest(void) {
  pthread_mutex_lock(&logLock);
  if (logFile) fclose(logFile);
  logFile = NULL;
  logConfigured = 0;
  pthread_mutex_unlock(&logLock);
}
