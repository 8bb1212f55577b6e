/* SPDX-License-Identifier: Apache-2.0 */
/* docs/env.md must describe every registered parameter with its default, and name no parameter that is gone. */
#include "param.h"
#include "test.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s docs/env.md\n", argv[0]);
    return 2;
  }
  FILE* file = fopen(argv[1], "r");
  if (!file) {
    fprintf(stderr, "cannot open %s\n", argv[1]);
    return 1;
  }
  static char doc[1 << 20];
  size_t length = fread(doc, 1, sizeof(doc) - 1, file);
  doc[length] = '\0';
  fclose(file);

  for (int id = 0; id < FCCL_PARAM_COUNT; id++) {
    const fcclParamInfo_t* info = fcclParamInfo((fcclParamId_t)id);
    /* Each parameter has a table row: | `NAME` | `default` | ... */
    char row[256];
    snprintf(row, sizeof(row), "| `%s` | `%s` |", info->name, info->defaultValue);
    EXPECT_MSG(strstr(doc, row) != NULL, "docs/env.md lacks the row starting %s", row);
  }
  /* Every `FCCL_X` the document mentions as a table row must be registered. */
  for (const char* p = strstr(doc, "| `FCCL_"); p; p = strstr(p + 1, "| `FCCL_")) {
    char name[128];
    size_t n = strcspn(p + 3, "`");
    if (n >= sizeof(name)) n = sizeof(name) - 1;
    memcpy(name, p + 3, n);
    name[n] = '\0';
    int known = 0;
    for (int id = 0; id < FCCL_PARAM_COUNT && !known; id++)
      known = strcmp(fcclParamInfo((fcclParamId_t)id)->name, name) == 0;
    EXPECT_MSG(known, "docs/env.md documents %s, which the registry does not have", name);
  }
  return testSummary("env_doc");
}
