/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What this library reads: its environment variables (once), the caller's ncclConfig_t (through its size, never
 * past it: a caller compiled against an older nccl.h passes a shorter struct), and its log lines, in fccl's format
 * and under fccl's FCCL_DEBUG level.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char* const collNames[FNCCL_NUM_COLLS] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                                       "reduce",    "gather",    "scatter"};

const char* fncclCollName(enum fncclColl coll) {
  return (int)coll >= 0 && coll < FNCCL_NUM_COLLS ? collNames[coll] : "unknown";
}

/* ---- logging ---------------------------------------------------------------------------------------------------- */

static pthread_once_t logOnce = PTHREAD_ONCE_INIT;
static int logLevel = FNCCL_LOG_WARN;
static int logInit = 1; /* FCCL_DEBUG_SUBSYS lets INIT through (this library's lines are INIT's) */
static char logHost[64];

static void logConfigure(void) {
  gethostname(logHost, sizeof(logHost) - 1);
  char* dot = strchr(logHost, '.');
  if (dot) *dot = '\0';
  const char* level = getenv("FCCL_DEBUG");
  if (level) {
    static const char* const names[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
    for (int i = 0; i < 5; i++)
      if (strcasecmp(level, names[i]) == 0) logLevel = i;
  }
  const char* subsys = getenv("FCCL_DEBUG_SUBSYS");
  if (subsys && subsys[0]) {
    int invert = subsys[0] == '^', named = 0;
    char copy[256];
    snprintf(copy, sizeof(copy), "%s", subsys + invert);
    char* save = NULL;
    for (char* token = strtok_r(copy, ",", &save); token; token = strtok_r(NULL, ",", &save))
      named |= strcasecmp(token, "INIT") == 0 || strcasecmp(token, "ALL") == 0;
    logInit = invert ? !named : named;
  }
}

int fncclLogOn(fncclLogLevel_t level) {
  pthread_once(&logOnce, logConfigure);
  return (int)level <= logLevel && (level <= FNCCL_LOG_WARN || logInit);
}

void fncclLog(fncclLogLevel_t level, const char* fmt, ...) {
  if (!fncclLogOn(level)) return;
  static const char* const tags[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  char line[1200];
  int prefix = snprintf(line, sizeof(line), "%s:%d:%ld FCCL %s INIT nccl-api ", logHost, (int)getpid(),
                        (long)syscall(SYS_gettid), tags[level]);
  if (prefix < 0 || (size_t)prefix >= sizeof(line)) prefix = 0;
  va_list args;
  va_start(args, fmt);
  int body = vsnprintf(line + prefix, sizeof(line) - (size_t)prefix - 1, fmt, args);
  va_end(args);
  size_t length = (size_t)prefix + (body < 0 ? 0 : (size_t)body);
  if (length > sizeof(line) - 2) length = sizeof(line) - 2;
  line[length++] = '\n';
  /* One write: lines of several threads and processes sharing stderr do not interleave. */
  ssize_t written = write(STDERR_FILENO, line, length);
  (void)written;
}

/* ---- environment ------------------------------------------------------------------------------------------------ */

static pthread_once_t settingsOnce = PTHREAD_ONCE_INIT;
static struct fncclSettings settings;

static void readSettings(void) {
  settings.timeoutMs = 60000; /* FCCL_BOOTSTRAP_TIMEOUT's default (docs/env.md) */
  const char* timeout = getenv("FCCL_BOOTSTRAP_TIMEOUT");
  if (timeout && timeout[0]) {
    char* end = NULL;
    long value = strtol(timeout, &end, 10);
    if (end && *end == '\0' && value > 0 && value <= 24L * 3600 * 1000) settings.timeoutMs = (int)value;
  }
  const char* list = getenv("FCCL_NCCL_API_DISABLE");
  if (!list || !list[0]) return;
  snprintf(settings.disabledWhy, sizeof(settings.disabledWhy), "FCCL_NCCL_API_DISABLE=%s", list);
  char copy[256];
  snprintf(copy, sizeof(copy), "%s", list);
  char* save = NULL;
  for (char* token = strtok_r(copy, ",", &save); token; token = strtok_r(NULL, ",", &save)) {
    while (*token == ' ') token++;
    size_t length = strlen(token);
    while (length > 0 && token[length - 1] == ' ') token[--length] = '\0';
    if (length == 0) continue;
    int known = 0;
    if (strcasecmp(token, "all") == 0) {
      settings.disabled = FNCCL_ALL_COLLS;
      known = 1;
    }
    for (int c = 0; c < FNCCL_NUM_COLLS && !known; c++) {
      if (strcasecmp(token, collNames[c]) != 0) continue;
      settings.disabled |= 1u << c;
      known = 1;
    }
    if (!known) {
      /* A list that cannot be read is not guessed at: NCCL carries everything, which is always correct. */
      FNCCL_WARN("FCCL_NCCL_API_DISABLE=%s: '%s' is not all, allreduce, allgather, reducescatter, broadcast, "
                 "reduce, gather or scatter; NCCL carries every call",
                 list, token);
      settings.disabled = FNCCL_ALL_COLLS;
      snprintf(settings.disabledWhy, sizeof(settings.disabledWhy), "FCCL_NCCL_API_DISABLE=%s cannot be read", list);
      return;
    }
  }
}

const struct fncclSettings* fncclSettingsGet(void) {
  pthread_once(&settingsOnce, readSettings);
  return &settings;
}

/* ---- the caller's ncclConfig_t ----------------------------------------------------------------------------------- */

/* Whether config, of config->size bytes, holds the whole of field. */
#define HAS_FIELD(config, field) \
  ((config)->size >= offsetof(ncclConfig_t, field) + sizeof(((ncclConfig_t*)0)->field))

void fncclConfigRead(const ncclConfig_t* config, struct fncclConfigView* view) {
  view->blocking = -1;
  view->maxCTAs = view->minCTAs = view->ctaPolicy = NCCL_CONFIG_UNDEF_INT;
  view->name[0] = '\0';
  /* size and magic come first in every version of the struct; a config without NCCL's magic is NCCL's to refuse,
   * and nothing else of it is read. */
  if (config == NULL || config->magic != 0xcafebeef) return;
  if (HAS_FIELD(config, blocking) && config->blocking != NCCL_CONFIG_UNDEF_INT) view->blocking = config->blocking != 0;
  if (HAS_FIELD(config, minCTAs)) view->minCTAs = config->minCTAs;
  if (HAS_FIELD(config, maxCTAs)) view->maxCTAs = config->maxCTAs;
  if (HAS_FIELD(config, CTAPolicy)) view->ctaPolicy = config->CTAPolicy;
  if (HAS_FIELD(config, commName) && config->commName) snprintf(view->name, sizeof(view->name), "%s", config->commName);
}

int fncclConfigBlocking(const struct fncclConfigView* view) {
  if (view->blocking >= 0) return view->blocking;
  const char* env = getenv("NCCL_COMM_BLOCKING");
  if (env && env[0]) return atoi(env) != 0;
  return 1;
}

/* NCCL_MIN_CTAS or NCCL_MAX_CTAS as NCCL reads them: a positive integer, else not set. */
static int ctaVariable(const char* name) {
  const char* text = getenv(name);
  if (!text || !text[0]) return NCCL_CONFIG_UNDEF_INT;
  char* end = NULL;
  long value = strtol(text, &end, 10);
  while (end && *end == ' ') end++;
  if (!end || *end != '\0' || value <= 0 || value > 1 << 20) return NCCL_CONFIG_UNDEF_INT;
  return (int)value;
}

void fncclConfigBudget(const struct fncclConfigView* view, int* minCTAs, int* maxCTAs) {
  /* NCCL's rule: a positive NCCL_MIN_CTAS / NCCL_MAX_CTAS overrides the config's field (NCCL copies its nccl.conf
   * settings into the environment, so they count too). A field left NCCL_CONFIG_UNDEF_INT is NCCL's default, no
   * bound here (NCCL refuses a communicator whose field is set below 1). */
  *minCTAs = view->minCTAs > 0 ? view->minCTAs : NCCL_CONFIG_UNDEF_INT;
  *maxCTAs = view->maxCTAs > 0 ? view->maxCTAs : NCCL_CONFIG_UNDEF_INT;
  const int minEnv = ctaVariable("NCCL_MIN_CTAS"), maxEnv = ctaVariable("NCCL_MAX_CTAS");
  if (minEnv != NCCL_CONFIG_UNDEF_INT) *minCTAs = minEnv;
  if (maxEnv != NCCL_CONFIG_UNDEF_INT) *maxCTAs = maxEnv;
}

void fncclConfigWhyNot(const struct fncclConfigView* view, char* why, size_t size) {
  why[0] = '\0';
  /* The SM budget (maxCTAs, minCTAs) goes on to fccl's communicator (fncclConfigBudget). The zero-CTA policy (no
   * SM for communication) keeps the collectives on NCCL: fccl's kernels use SMs. */
#ifdef NCCL_CTA_POLICY_ZERO
  if (view->ctaPolicy != NCCL_CONFIG_UNDEF_INT && (view->ctaPolicy & NCCL_CTA_POLICY_ZERO)) {
    snprintf(why, size, "config.CTAPolicy asks for no CTAs (NCCL_CTA_POLICY_ZERO), and fccl's kernels use SMs");
    return;
  }
#endif
  int minCTAs, maxCTAs;
  fncclConfigBudget(view, &minCTAs, &maxCTAs);
  /* NCCL refuses such a communicator; should its reading and this one differ, fccl would refuse it too. */
  if (minCTAs > 0 && maxCTAs > 0 && minCTAs > maxCTAs)
    snprintf(why, size, "its SM budget asks for at least %d CTAs and at most %d (config.minCTAs/maxCTAs, "
             "NCCL_MIN_CTAS/NCCL_MAX_CTAS)", minCTAs, maxCTAs);
}
