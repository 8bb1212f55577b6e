/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The environment-parameter registry. Values are captured once, on first use, so every part of the library sees
 * one consistent configuration for the life of the process. Loading never logs (the logger itself reads its
 * configuration from here).
 */
#include "param.h"

#include "debug.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

extern char** environ;

static const fcclParamInfo_t paramInfos[FCCL_PARAM_COUNT] = {
#define FCCL_PARAM(id, type, defaultValue, doc) {"FCCL_" #id, type, defaultValue, doc},
#include "param_list.h"
#undef FCCL_PARAM
};

static pthread_mutex_t paramLock = PTHREAD_MUTEX_INITIALIZER;
static int paramsLoaded;
static char* paramValues[FCCL_PARAM_COUNT]; /* strdup'ed environment value, or NULL when unset */
static int paramWarnedBadInt[FCCL_PARAM_COUNT];

/*
 * A fork while another thread holds paramLock (loading) would leave the child's copy locked forever: hold it across
 * fork. Registered when the library loads, before the logger registers its own handlers (on its first line), so
 * that this prepare handler runs after the logger's (prepare handlers run in reverse order of registration): the
 * logger loads parameters with its lock held, so its lock must be taken first.
 */
static void paramLockForFork(void) { pthread_mutex_lock(&paramLock); }
static void paramUnlockAfterFork(void) { pthread_mutex_unlock(&paramLock); }
__attribute__((constructor)) static void paramRegisterForkHandlers(void) {
  pthread_atfork(paramLockForFork, paramUnlockAfterFork, paramUnlockAfterFork);
}

static void loadParams(void) {
  if (__atomic_load_n(&paramsLoaded, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&paramLock);
  if (!paramsLoaded) {
    for (int i = 0; i < FCCL_PARAM_COUNT; i++) {
      const char* value = getenv(paramInfos[i].name);
      paramValues[i] = value ? strdup(value) : NULL;
    }
    __atomic_store_n(&paramsLoaded, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&paramLock);
}

const fcclParamInfo_t* fcclParamInfo(fcclParamId_t id) {
  if ((int)id < 0 || id >= FCCL_PARAM_COUNT) return NULL;
  return &paramInfos[id];
}

const char* fcclParamString(fcclParamId_t id) {
  loadParams();
  return paramValues[id] ? paramValues[id] : paramInfos[id].defaultValue;
}

int fcclParamIsSecret(fcclParamId_t id) { return id == FCCL_PARAM_COMM_SECRET; }

int fcclParamIsSet(fcclParamId_t id) {
  loadParams();
  return paramValues[id] != NULL;
}

static int parseInt(const char* text, int64_t* value) {
  char* end = NULL;
  errno = 0;
  long long parsed = strtoll(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0') return 0;
  *value = parsed;
  return 1;
}

int64_t fcclParamInt(fcclParamId_t id) {
  loadParams();
  int64_t fallback = 0;
  parseInt(paramInfos[id].defaultValue, &fallback);
  if (!paramValues[id]) return fallback;
  int64_t value;
  if (parseInt(paramValues[id], &value)) return value;
  if (!__atomic_exchange_n(&paramWarnedBadInt[id], 1, __ATOMIC_RELAXED))
    FCCL_WARN(FCCL_SUBSYS_ENV, "%s=%s is not an integer; using the default %s", paramInfos[id].name,
              paramValues[id], paramInfos[id].defaultValue);
  return fallback;
}

/* Levenshtein distance, bounded to short names (environment names are well under 64 characters). */
static size_t editDistance(const char* a, const char* b) {
  size_t lenA = strlen(a), lenB = strlen(b);
  if (lenA > 63 || lenB > 63) return (size_t)-1;
  size_t row[64];
  for (size_t j = 0; j <= lenB; j++) row[j] = j;
  for (size_t i = 1; i <= lenA; i++) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lenB; j++) {
      size_t above = row[j];
      size_t substitute = diagonal + (a[i - 1] != b[j - 1]);
      size_t best = above + 1 < row[j - 1] + 1 ? above + 1 : row[j - 1] + 1;
      row[j] = substitute < best ? substitute : best;
      diagonal = above;
    }
  }
  return row[lenB];
}

const char* fcclParamClosestName(const char* name) {
  const char* best = NULL;
  size_t bestDistance = (size_t)-1;
  for (int i = 0; i < FCCL_PARAM_COUNT; i++) {
    size_t distance = editDistance(name, paramInfos[i].name);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = paramInfos[i].name;
    }
  }
  /* Beyond a third of the name's length the "closest" name is a guess that would mislead more than help. */
  return bestDistance <= strlen(name) / 3 + 1 ? best : NULL;
}

void fcclParamWarnUnknown(void) {
  static int warned;
  if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) return;
  for (char** entry = environ; entry && *entry; entry++) {
    if (strncmp(*entry, "FCCL_", 5) != 0) continue;
    char name[128];
    size_t length = strcspn(*entry, "=");
    if (length >= sizeof(name)) continue;
    memcpy(name, *entry, length);
    name[length] = '\0';
    int known = 0;
    for (int i = 0; i < FCCL_PARAM_COUNT && !known; i++) known = strcmp(name, paramInfos[i].name) == 0;
    if (known) continue;
    const char* closest = fcclParamClosestName(name);
    if (closest)
      FCCL_WARN(FCCL_SUBSYS_ENV, "unknown environment variable %s (did you mean %s?)", name, closest);
    else
      FCCL_WARN(FCCL_SUBSYS_ENV, "unknown environment variable %s", name);
  }
}

void fcclParamResetForTest(void) {
  pthread_mutex_lock(&paramLock);
  for (int i = 0; i < FCCL_PARAM_COUNT; i++) {
    free(paramValues[i]);
    paramValues[i] = NULL;
    paramWarnedBadInt[i] = 0;
  }
  __atomic_store_n(&paramsLoaded, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&paramLock);
}
