/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Messages for getopt_long's complaints (options.h).
 */
#include "options.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

void toolOptionProblem(int c, char* const* argv, char* out, size_t len) {
  /* getopt_long has moved optind past the option it stopped at (and past its missing value). */
  const char* typed = optind > 0 ? argv[optind - 1] : "";
  const int isLong = strncmp(typed, "--", 2) == 0;
  const int nameLen = isLong ? (int)strcspn(typed, "=") : (int)strlen(typed);
  if (c == ':') {
    if (isLong)
      snprintf(out, len, "%.*s needs a value", nameLen, typed);
    else
      snprintf(out, len, "-%c needs a value", optopt);
  } else if (isLong && optopt != 0) {
    snprintf(out, len, "%.*s takes no value", nameLen, typed); /* a known flag without a value, given "=value" */
  } else if (isLong) {
    snprintf(out, len, "unknown option %.*s", nameLen, typed);
  } else {
    snprintf(out, len, "unknown option -%c", optopt ? optopt : '?');
  }
}
