/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fccl-topo without a GPU: its model (bus ids, CPU masks, PCI path classes, NVLink groups, decisions), the facts file
 * parser, the command line, and its three outputs on recorded machines compared byte for byte with golden files.
 *
 *   test_topo DATA_DIR            DATA_DIR is test/data/topo
 *   test_topo DATA_DIR --update   rewrites the golden files from the current output (review the diff!)
 */
#include "cuda_status.h"
#include "param.h"
#include "test.h"
#include "topo.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static const char* dataDir;
static int updateGoldens;

/* Runs fccl-topo in-process; returns its exit code, with its standard output and error in *out and *err (freed by
 * the caller). */
static int runTopo(char** argv, char** out, char** err) {
  int argc = 0;
  while (argv[argc]) argc++;
  size_t outLen = 0, errLen = 0;
  FILE* outFile = open_memstream(out, &outLen);
  FILE* errFile = open_memstream(err, &errLen);
  if (outFile == NULL || errFile == NULL) {
    fprintf(stderr, "open_memstream failed\n");
    exit(1);
  }
  int code = fcclTopoMain(argc, argv, outFile, errFile);
  fclose(outFile);
  fclose(errFile);
  return code;
}

static char* readFile(const char* path) {
  FILE* file = fopen(path, "rb");
  if (file == NULL) return NULL;
  fseek(file, 0, SEEK_END);
  long size = ftell(file);
  fseek(file, 0, SEEK_SET);
  char* text = malloc((size_t)size + 1);
  if (text && fread(text, 1, (size_t)size, file) != (size_t)size) {
    free(text);
    text = NULL;
  }
  if (text) text[size] = '\0';
  fclose(file);
  return text;
}

static int writeFile(const char* path, const char* text) {
  FILE* file = fopen(path, "wb");
  if (file == NULL) return -1;
  size_t len = strlen(text);
  int ok = fwrite(text, 1, len, file) == len;
  return (fclose(file) == 0 && ok) ? 0 : -1;
}

/* Reports the first line where actual and expected differ. */
static void reportDifference(const char* what, const char* expected, const char* actual) {
  int line = 1;
  const char *e = expected, *a = actual;
  while (*e && *a && *e == *a) {
    if (*e == '\n') line++;
    e++;
    a++;
  }
  const char* eLine = e;
  const char* aLine = a;
  while (eLine > expected && eLine[-1] != '\n') eLine--;
  while (aLine > actual && aLine[-1] != '\n') aLine--;
  int eLen = (int)strcspn(eLine, "\n"), aLen = (int)strcspn(aLine, "\n");
  testFail(__FILE__, __LINE__, "%s differs at line %d:\n  expected: %.*s\n  actual:   %.*s", what, line, eLen, eLine,
           aLen, aLine);
}

/* ---- golden outputs of recorded machines ---------------------------------------------------------------------------
 */

typedef struct {
  const char* name;
  const char* xml;
  const char* facts; /* NULL: --no-cuda */
} goldenCase_t;

static const goldenCase_t goldenCases[] = {
    {"local", "local.xml", NULL},
    {"two-socket", "two-socket.xml", "two-socket.facts"},
    {"dgx-h100", "dgx-h100.xml", "dgx-h100.facts"},
    {"h200x2", "h200x2.xml", "h200x2.facts"}, /* recorded with fccl-topo --record on a 2x H200 machine */
};

static const struct {
  const char* name;
  const char* flag;
} formats[] = {{"human", NULL}, {"json", "--json"}, {"xml", "--xml"}};

static void testGoldens(void) {
  for (size_t c = 0; c < sizeof(goldenCases) / sizeof(goldenCases[0]); c++) {
    const goldenCase_t* gc = &goldenCases[c];
    char xml[1024], facts[1024];
    snprintf(xml, sizeof(xml), "%s/%s", dataDir, gc->xml);
    snprintf(facts, sizeof(facts), "%s/%s", dataDir, gc->facts ? gc->facts : "");
    if (access(xml, R_OK) != 0) {
      testFail(__FILE__, __LINE__, "recorded topology %s is missing", xml);
      continue;
    }
    for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]); f++) {
      char* argv[12];
      int n = 0;
      argv[n++] = "fccl-topo";
      argv[n++] = "--input-xml";
      argv[n++] = xml;
      if (gc->facts) {
        argv[n++] = "--gpu-facts";
        argv[n++] = facts;
      } else {
        argv[n++] = "--no-cuda";
      }
      argv[n++] = "--gpu-archs"; /* the decisions must not depend on how this build was configured */
      argv[n++] = "9.0";
      if (formats[f].flag) argv[n++] = (char*)formats[f].flag;
      argv[n] = NULL;
      char *out = NULL, *err = NULL;
      int code = runTopo(argv, &out, &err);
      EXPECT_MSG(code == 0, "%s %s: exit %d: %s", gc->name, formats[f].name, code, err);
      char golden[1100];
      snprintf(golden, sizeof(golden), "%s/%s.%s.golden", dataDir, gc->name, formats[f].name);
      if (updateGoldens) {
        EXPECT_MSG(writeFile(golden, out) == 0, "cannot write %s", golden);
      } else {
        char* expected = readFile(golden);
        if (expected == NULL) {
          testFail(__FILE__, __LINE__, "cannot read %s (run test_topo DATA_DIR --update to create it)", golden);
        } else if (strcmp(expected, out) != 0) {
          char actualPath[1200];
          snprintf(actualPath, sizeof(actualPath), "%s.%s.actual", gc->name, formats[f].name);
          writeFile(actualPath, out);
          reportDifference(golden, expected, out);
          fprintf(stderr, "  (whole output in %s; if the change is intended, rerun with --update)\n", actualPath);
        } else {
          testPassed++;
        }
        free(expected);
      }
      free(out);
      free(err);
    }
  }
}

/* ---- model
 * ----------------------------------------------------------------------------------------------------------- */

static void testBusIds(void) {
  topoBusId_t id;
  char text[32];
  EXPECT_EQ_INT(topoBusIdParse("0000:1b:00.0", &id), 0);
  EXPECT(id.valid && id.domain == 0 && id.bus == 0x1b && id.dev == 0 && id.func == 0);
  EXPECT_EQ_INT(topoBusIdParse("00000000:1B:00.0", &id), 0); /* NVML's 8-digit domain, upper case */
  topoBusIdFormat(&id, text, sizeof(text));
  EXPECT_STR_CONTAINS(text, "0000:1b:00.0");
  EXPECT_EQ_INT(topoBusIdParse(" 84:00.1 ", &id), 0);
  EXPECT(id.bus == 0x84 && id.func == 1 && id.domain == 0);
  EXPECT_EQ_INT(topoBusIdParse("0001:ff:1f.7", &id), 0);
  EXPECT(id.domain == 1 && id.bus == 0xff && id.dev == 0x1f && id.func == 7);
  const char* bad[] = {"",
                       "1b",
                       "0000:1b:00",
                       "0000:1b:20.0",
                       "0000:1b:00.8",
                       "0000:100:00.0",
                       "0000:1b:00.0x",
                       "zz:00.0",
                       "0000:1b:00.0.1",
                       "-1:00.0",
                       "fffffff:ffff:ff"};
  for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++)
    EXPECT_MSG(topoBusIdParse(bad[b], &id) != 0, "'%s' parsed as a bus id", bad[b]);
  topoBusId_t a = {1, 0, 0x18, 0, 0}, b2 = {1, 0, 0x1b, 0, 0}, none = {0, 0, 0, 0, 0};
  EXPECT(topoBusIdCompare(&a, &b2) < 0 && topoBusIdCompare(&b2, &a) > 0 && topoBusIdCompare(&a, &a) == 0);
  EXPECT(topoBusIdCompare(&a, &none) < 0);
  EXPECT(!topoBusIdEqual(&none, &none));
  topoBusIdFormat(&none, text, sizeof(text));
  EXPECT_STR_CONTAINS(text, "-");
}

static void testCpumap(void) {
  char map[256];
  EXPECT_EQ_INT(topoCpuListToCpumap("0-55,112-167", map, sizeof(map)), 0);
  EXPECT(strcmp(map, "000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff") == 0);
  EXPECT_EQ_INT(topoCpuListToCpumap("0-1", map, sizeof(map)), 0);
  EXPECT(strcmp(map, "00000003") == 0);
  EXPECT_EQ_INT(topoCpuListToCpumap("", map, sizeof(map)), 0);
  EXPECT(strcmp(map, "00000000") == 0);
  EXPECT_EQ_INT(topoCpuListToCpumap("32", map, sizeof(map)), 0);
  EXPECT(strcmp(map, "00000001,00000000") == 0);
  EXPECT(topoCpuListToCpumap("3-1", map, sizeof(map)) != 0);
  EXPECT(topoCpuListToCpumap("a", map, sizeof(map)) != 0);
  EXPECT(topoCpuListToCpumap("0-1", map, 4) != 0); /* does not fit */
}

/* A PCI node with the given kind and bus under parent (-1: a root). */
static int pciNode(topoSystem_t* sys, topoPciKind_t kind, int parent, unsigned bus, unsigned dev, int numa) {
  int index = topoAddPciNode(sys);
  topoPciNode_t* node = &sys->pci[index];
  node->kind = kind;
  node->numaNode = numa;
  if (kind != TOPO_PCI_HOSTBRIDGE) {
    node->busId.valid = 1;
    node->busId.bus = bus;
    node->busId.dev = dev;
  }
  node->parent = parent;
  return index;
}

static void testPathClasses(void) {
  topoSystem_t sys;
  topoInit(&sys);
  /* NUMA 0, host bridge A: root port -> switch (upstream, 3 downstream ports) -> GPU0, GPU1, and a second switch
   * -> GPU2; a second root port -> GPU5 (PHB with the others). Host bridge B (NUMA 0) -> root port -> GPU3.
   * Host bridge C (NUMA 1) -> root port -> GPU4. */
  int hostA = pciNode(&sys, TOPO_PCI_HOSTBRIDGE, -1, 0, 0, 0);
  int root = pciNode(&sys, TOPO_PCI_BRIDGE, hostA, 0x10, 1, 0);
  int up = pciNode(&sys, TOPO_PCI_BRIDGE, root, 0x11, 0, 0);
  int down0 = pciNode(&sys, TOPO_PCI_BRIDGE, up, 0x12, 0, 0);
  int down1 = pciNode(&sys, TOPO_PCI_BRIDGE, up, 0x12, 1, 0);
  int down2 = pciNode(&sys, TOPO_PCI_BRIDGE, up, 0x12, 2, 0);
  int gpu0 = pciNode(&sys, TOPO_PCI_DEVICE, down0, 0x13, 0, 0);
  int gpu1 = pciNode(&sys, TOPO_PCI_DEVICE, down1, 0x14, 0, 0);
  int up2 = pciNode(&sys, TOPO_PCI_BRIDGE, down2, 0x15, 0, 0);
  int down20 = pciNode(&sys, TOPO_PCI_BRIDGE, up2, 0x16, 0, 0);
  int gpu2 = pciNode(&sys, TOPO_PCI_DEVICE, down20, 0x17, 0, 0);
  int root2 = pciNode(&sys, TOPO_PCI_BRIDGE, hostA, 0x10, 2, 0);
  int gpu5 = pciNode(&sys, TOPO_PCI_DEVICE, root2, 0x18, 0, 0);
  int hostB = pciNode(&sys, TOPO_PCI_HOSTBRIDGE, -1, 0, 0, 0);
  int rootB = pciNode(&sys, TOPO_PCI_BRIDGE, hostB, 0x40, 1, 0);
  int gpu3 = pciNode(&sys, TOPO_PCI_DEVICE, rootB, 0x41, 0, 0);
  int hostC = pciNode(&sys, TOPO_PCI_HOSTBRIDGE, -1, 0, 0, 1);
  int rootC = pciNode(&sys, TOPO_PCI_BRIDGE, hostC, 0x80, 1, 1);
  int gpu4 = pciNode(&sys, TOPO_PCI_DEVICE, rootC, 0x81, 0, 1);
  int hostD = pciNode(&sys, TOPO_PCI_HOSTBRIDGE, -1, 0, 0, -1); /* attached to several NUMA nodes */
  int gpu6 = pciNode(&sys, TOPO_PCI_DEVICE, hostD, 0xc0, 0, -1);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu0, gpu0), TOPO_PATH_SELF);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu0, gpu1), TOPO_PATH_PIX);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu1, gpu0), TOPO_PATH_PIX);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu0, gpu2), TOPO_PATH_PXB);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu2, gpu1), TOPO_PATH_PXB);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu0, gpu5), TOPO_PATH_PHB);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu0, gpu3), TOPO_PATH_NODE);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu3, gpu4), TOPO_PATH_SYS);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu0, gpu6), TOPO_PATH_SYS);
  EXPECT_EQ_INT(topoPciPathClass(&sys, gpu0, -1), TOPO_PATH_UNKNOWN);
  topoFree(&sys);
}

static topoNvLink_t makeLink(int index, const char* remote, topoRemoteType_t type) {
  topoNvLink_t l;
  memset(&l, 0, sizeof(l));
  l.link = index;
  l.active = 1;
  l.version = 6;
  l.remoteType = type;
  if (remote) topoBusIdParse(remote, &l.remote);
  return l;
}

static void testNvLinkGroups(void) {
  topoSystem_t sys;
  topoInit(&sys);
  char err[256];
  EXPECT_EQ_INT(topoSetGpuCount(&sys, 4, err, sizeof(err)), 0);
  const char* buses[] = {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"};
  for (int g = 0; g < 4; g++) topoBusIdParse(buses[g], &sys.gpus[g].busId);
  /* GPU0 <-> GPU1: 12 direct links (type unknown for half: resolved by bus id); GPU2, GPU3: through switches, one
   * of GPU3's links down and one going to a switch the OS hides. */
  for (int l = 0; l < 12; l++) {
    sys.gpus[0].links[sys.gpus[0].nlinks++] = makeLink(l, buses[1], l % 2 ? TOPO_REMOTE_GPU : TOPO_REMOTE_UNKNOWN);
    sys.gpus[1].links[sys.gpus[1].nlinks++] = makeLink(l, buses[0], TOPO_REMOTE_GPU);
  }
  for (int l = 0; l < 18; l++)
    sys.gpus[2].links[sys.gpus[2].nlinks++] = makeLink(l, "0000:05:00.0", TOPO_REMOTE_SWITCH);
  for (int l = 0; l < 18; l++) {
    topoNvLink_t nv = makeLink(l, l < 4 ? NULL : "0000:06:00.0", l < 4 ? TOPO_REMOTE_UNKNOWN : TOPO_REMOTE_SWITCH);
    nv.active = l != 17;
    sys.gpus[3].links[sys.gpus[3].nlinks++] = nv;
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) sys.peers[i * 4 + j].known = i != j;
  EXPECT_EQ_INT(topoModelAnalyse(&sys, err, sizeof(err)), 0);
  EXPECT_EQ_INT(sys.gpus[0].ngroups, 1);
  EXPECT_EQ_INT(sys.gpus[0].groups[0].count, 12);
  EXPECT_EQ_INT(sys.gpus[0].groups[0].peerGpu, 1);
  EXPECT_EQ_INT(sys.gpus[3].ngroups, 2);
  EXPECT_EQ_INT(sys.gpus[3].groups[0].remoteType, TOPO_REMOTE_SWITCH); /* unknown + not a GPU: a switch */
  EXPECT(!sys.gpus[3].groups[0].remote.valid);
  EXPECT_EQ_INT(sys.gpus[3].groups[0].count + sys.gpus[3].groups[1].count, 17);
  char cell[16];
  topoPathName(&sys.paths[0 * 4 + 1], cell, sizeof(cell));
  EXPECT(strcmp(cell, "NV12") == 0);
  topoPathName(&sys.paths[2 * 4 + 3], cell, sizeof(cell));
  EXPECT(strcmp(cell, "NV17") == 0); /* through switches: the smaller of the two sides' links */
  topoPathName(&sys.paths[0 * 4 + 2], cell, sizeof(cell));
  EXPECT(strcmp(cell, "?") == 0); /* no NVLink between them and no PCI tree */
  topoPathName(&sys.paths[3 * 4 + 3], cell, sizeof(cell));
  EXPECT(strcmp(cell, "X") == 0);
  topoFree(&sys);
}

static void testDecisions(void) {
  topoSystem_t sys;
  topoInit(&sys);
  char err[256], reason[256];
  EXPECT_EQ_INT(topoSetGpuCount(&sys, 2, err, sizeof(err)), 0);
  snprintf(sys.gpuArchs, sizeof(sys.gpuArchs), "8.0 9.0");
  sys.gpus[0].ccMajor = 9;
  sys.gpus[1].ccMajor = 8;
  sys.gpus[1].ccMinor = 6;
  EXPECT(topoGpuHasKernels(&sys, &sys.gpus[0]));
  EXPECT(topoGpuHasKernels(&sys, &sys.gpus[1])); /* sm_80 code runs on sm_86 */
  snprintf(sys.gpuArchs, sizeof(sys.gpuArchs), "9.0");
  EXPECT(!topoGpuHasKernels(&sys, &sys.gpus[1]));
  sys.gpus[1].ccMajor = 10;
  sys.gpus[1].ccMinor = 0;
  EXPECT(!topoGpuHasKernels(&sys, &sys.gpus[1])); /* sm_90 code does not run on sm_100 */
  sys.gpus[1].ccMajor = 9;

  sys.gpus[0].vmm = 1;
  sys.gpus[0].posixFd = 1;
  EXPECT_EQ_INT(topoGpuIpc(&sys.gpus[0]), TOPO_IPC_CUMEM);
  sys.gpus[1].vmm = 1;
  sys.gpus[1].posixFd = 0;
  EXPECT_EQ_INT(topoGpuIpc(&sys.gpus[1]), TOPO_IPC_LEGACY);
  sys.gpus[1].posixFd = -1;
  EXPECT_EQ_INT(topoGpuIpc(&sys.gpus[1]), TOPO_IPC_UNKNOWN);

  sys.nranks = 2;
  EXPECT(!topoCollectivesSupported(&sys, reason, sizeof(reason)));
  EXPECT_STR_CONTAINS(reason, "unknown");
  for (int p = 1; p <= 2; p++) {
    topoPeer_t* peer = &sys.peers[p];
    peer->known = peer->canAccess = 1;
    peer->access = p == 1;
  }
  EXPECT(!topoCollectivesSupported(&sys, reason, sizeof(reason)));
  EXPECT_STR_CONTAINS(reason, "GPU1 cannot access GPU0");
  sys.peers[2].access = 1;
  EXPECT(topoCollectivesSupported(&sys, reason, sizeof(reason)));
  EXPECT(strcmp(topoPeerP2pText(&sys, 0, 1), "capable (verified at communicator init)") == 0);
  sys.peers[1].verified = TOPO_VERIFY_FAILED;
  EXPECT(!topoCollectivesSupported(&sys, reason, sizeof(reason)));
  EXPECT_STR_CONTAINS(reason, "P2P check");
  sys.nranks = 3;
  EXPECT(!topoCollectivesSupported(&sys, reason, sizeof(reason)));
  EXPECT_STR_CONTAINS(reason, "3 ranks need 3 GPUs");
  sys.nranks = 9;
  EXPECT(!topoCollectivesSupported(&sys, reason, sizeof(reason)));
  sys.nranks = 1;
  EXPECT(!topoCollectivesSupported(&sys, reason, sizeof(reason)));
  EXPECT_STR_CONTAINS(topoNvLinkVersionName(6), "4.0");
  EXPECT_STR_CONTAINS(topoNvLinkVersionName(99), "?");
  topoFree(&sys);
}

/* ---- the facts file ------------------------------------------------------------------------------------------------
 */

static void writeTemp(char* path, size_t len, const char* text) {
  snprintf(path, len, "/tmp/fccl-topo-test-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) {
    fprintf(stderr, "mkstemp: %s\n", strerror(errno));
    exit(1);
  }
  size_t n = strlen(text);
  if (write(fd, text, n) != (ssize_t)n) exit(1);
  close(fd);
}

static void expectFactsError(const char* text, const char* message) {
  char path[64], err[TOPO_ERROR_MAX] = "";
  writeTemp(path, sizeof(path), text);
  topoSystem_t sys;
  topoInit(&sys);
  EXPECT_MSG(topoFactsRead(&sys, path, err, sizeof(err)) != 0, "accepted: %s", text);
  EXPECT_STR_CONTAINS(err, message);
  topoFree(&sys);
  unlink(path);
}

static void testFactsErrors(void) {
  const char* gpu0 = "[system]\nnvml = available\n[gpu 0]\nbusid = 0000:01:00.0\ncc = 9.0\n";
  char text[512];
  expectFactsError("[system]\ncuda_driver = twelve\nnvml = available\n", ":2: bad CUDA version 'twelve'");
  expectFactsError("[system]\n", "must say nvml");
  expectFactsError("[system]\nnvml = maybe\n", ":2: nvml is 'available' or 'unavailable: WHY'");
  expectFactsError("[gpus]\n", ":1: unknown section [gpus]");
  expectFactsError("[system\n", ":1: a section header");
  expectFactsError("busid = 0000:01:00.0\n", ":1: 'busid' outside a section");
  expectFactsError("[system]\nnvml = available\n[gpu 1]\nbusid = 0000:01:00.0\ncc = 9.0\n",
                   "GPU 1 is defined but GPU 0");
  expectFactsError("[system]\nnvml = available\n[gpu 0]\ncc = 9.0\n", "needs at least busid and cc");
  snprintf(text, sizeof(text), "%sbusid = 0000:01:00\n", gpu0);
  expectFactsError(text, ":6: bad bus id");
  snprintf(text, sizeof(text), "%scc = 9\n", gpu0);
  expectFactsError(text, ":6: compute capability '9' is not MAJOR.MINOR");
  snprintf(text, sizeof(text), "%svmm = perhaps\n", gpu0);
  expectFactsError(text, ":6: vmm is 1, 0 or unknown");
  snprintf(text, sizeof(text), "%scolour = green\n", gpu0);
  expectFactsError(text, ":6: unknown GPU key 'colour'");
  snprintf(text, sizeof(text), "%snvlink = 0-3 up 6 0000:05:00.0\n", gpu0);
  expectFactsError(text, ":6: nvlink needs");
  snprintf(text, sizeof(text), "%snvlink = 3-0 up 6 0000:05:00.0 switch\n", gpu0);
  expectFactsError(text, ":6: bad link range");
  snprintf(text, sizeof(text), "%snvlink = 0 sideways 6 0000:05:00.0 switch\n", gpu0);
  expectFactsError(text, ":6: link state 'sideways'");
  snprintf(text, sizeof(text), "%snvlink = 0 up 6 0000:05:00.0 router\n", gpu0);
  expectFactsError(text, ":6: remote type 'router'");
  snprintf(text, sizeof(text), "%snvlink = 0-1 up 6 - switch\nnvlink = 1 up 6 - switch\n", gpu0);
  expectFactsError(text, ":7: link listed twice");
  snprintf(text, sizeof(text), "%s[gpu 0]\n", gpu0);
  expectFactsError(text, ":6: GPU 0 defined twice");
  snprintf(text, sizeof(text), "%s[peers]\n0 1 1 1 1\n", gpu0);
  expectFactsError(text, ":7: peer lines are");
  snprintf(text, sizeof(text), "%s[peers]\n0 3 1 1 1 0\n", gpu0);
  expectFactsError(text, "names GPU 3, but only 1 GPUs");
  char err[TOPO_ERROR_MAX];
  topoSystem_t sys;
  topoInit(&sys);
  EXPECT(topoFactsRead(&sys, "/nonexistent/facts", err, sizeof(err)) != 0);
  EXPECT_STR_CONTAINS(err, "cannot open /nonexistent/facts");
  topoFree(&sys);
}

/* Reading the DGX facts, writing them and reading that back gives the same facts. */
static void testFactsRoundTrip(void) {
  char path[1024], err[TOPO_ERROR_MAX];
  snprintf(path, sizeof(path), "%s/dgx-h100.facts", dataDir);
  topoSystem_t first, second;
  topoInit(&first);
  topoInit(&second);
  EXPECT_EQ_INT(topoFactsRead(&first, path, err, sizeof(err)), 0);
  char* written = NULL;
  size_t writtenLen = 0;
  FILE* out = open_memstream(&written, &writtenLen);
  EXPECT_EQ_INT(topoFactsWrite(&first, out), 0);
  fclose(out);
  char temp[64];
  writeTemp(temp, sizeof(temp), written);
  EXPECT_EQ_INT(topoFactsRead(&second, temp, err, sizeof(err)), 0);
  EXPECT_EQ_INT(second.ngpus, 8);
  EXPECT_EQ_INT(second.gpus[7].nlinks, 18);
  EXPECT_EQ_INT(second.gpus[7].nvlinkMBps, 26562);
  EXPECT(second.peers[7 * 8 + 0].known && second.peers[7 * 8 + 0].atomics);
  char* again = NULL;
  size_t againLen = 0;
  out = open_memstream(&again, &againLen);
  EXPECT_EQ_INT(topoFactsWrite(&second, out), 0);
  fclose(out);
  EXPECT(strcmp(written, again) == 0);
  EXPECT_STR_CONTAINS(written, "nvlink = 0-1 up 6 0000:07:00.0 switch");
  unlink(temp);
  free(written);
  free(again);
  topoFree(&first);
  topoFree(&second);
}

/* ---- the command line
 * ------------------------------------------------------------------------------------------------ */

/* A command line fccl-topo refuses: its exit status, and a piece of the one-line message on standard error. DATA in
 * an argument stands for the data directory. */
typedef struct {
  const char* args[6];
  int code;
  const char* message;
} badCommand_t;

static const badCommand_t badCommands[] = {
    {{"--colour"}, 2, "fccl-topo: unknown option --colour"},
    {{"--json", "--xml"}, 2, "--json and --xml are alternatives"},
    {{"--no-cuda", "--verify-p2p"}, 2, "--verify-p2p needs the GPUs themselves"},
    {{"--gpu-facts", "DATA/h200x2.facts", "--no-cuda"}, 2, "--gpu-facts and --no-cuda are alternatives"},
    {{"--record", "/tmp/x", "--no-cuda"}, 2, "--record saves this machine"},
    {{"--nranks", "0"}, 2, "--nranks wants a number from 1 to 64, not '0'"},
    {{"--nranks", "65"}, 2, "not '65'"},
    {{"--nranks", "-2"}, 2, "not '-2'"},
    {{"--nranks", "two"}, 2, "not 'two'"},
    {{"--nranks", "2x"}, 2, "not '2x'"},
    {{"--nranks", ""}, 2, "not ''"},
    {{"--nranks", "99999999999999999999"}, 2, "--nranks wants a number"},
    {{"--nranks"}, 2, "--nranks needs a value"},
    {{"--input-xml"}, 2, "--input-xml needs a value"},
    {{"-o"}, 2, "-o needs a value"},
    {{"--no-cuda", "--input-xml", "/nonexistent/topology.xml"}, 1, "/nonexistent/topology.xml"},
    {{"--gpu-facts", "/nonexistent/facts", "--input-xml", "DATA/local.xml"}, 1, "cannot open /nonexistent/facts"},
    {{"--no-cuda", "--input-xml", "DATA/local.xml", "-o", "/nonexistent/dir/report"}, 1,
     "cannot write /nonexistent/dir/report"},
    {{"--no-cuda", "--gpu-archs", "nine"}, 2, "--gpu-archs wants compute capabilities like '9.0'"},
    {{"--no-cuda", "--gpu-archs", "9.0 x"}, 2, "not '9.0 x'"},
    {{"--no-cuda", "--gpu-archs", "9.0.1"}, 2, "not '9.0.1'"},
    {{"--no-cuda", "--gpu-archs", " "}, 2, "not ' '"},
    {{"--no-cuda", "--gpu-archs", "90"}, 2, "not '90'"},
    {{"--no-cuda", "--input-xml", ""}, 2, "--input-xml needs a value, not an empty one"},
    {{"--no-cuda", "-o", ""}, 2, "-o needs a value, not an empty one"},
};

static void testCommandLine(void) {
  char *out, *err;
  char* help[] = {"fccl-topo", "--help", NULL};
  EXPECT_EQ_INT(runTopo(help, &out, &err), 0);
  EXPECT_STR_CONTAINS(out, "usage: fccl-topo");
  EXPECT(err[0] == '\0');
  free(out);
  free(err);
  char xml[1024];
  snprintf(xml, sizeof(xml), "%s/local.xml", dataDir);
  char* archs[] = {"fccl-topo", "--no-cuda", "--input-xml", xml, "--gpu-archs", " 8.0, 9.0\t10.0 ", NULL};
  EXPECT_EQ_INT(runTopo(archs, &out, &err), 0);
  EXPECT_MSG(err[0] == '\0', "--gpu-archs list: %s", err);
  free(out);
  free(err);
  for (size_t c = 0; c < sizeof(badCommands) / sizeof(badCommands[0]); c++) {
    const badCommand_t* bad = &badCommands[c];
    char* argv[8] = {"fccl-topo"};
    char expanded[6][1024], line[512] = "fccl-topo";
    int argc = 1;
    for (const char* const* a = bad->args; *a; a++, argc++) {
      if (strncmp(*a, "DATA/", 5) == 0)
        snprintf(expanded[argc - 1], sizeof(expanded[0]), "%s/%s", dataDir, *a + 5);
      else
        snprintf(expanded[argc - 1], sizeof(expanded[0]), "%s", *a);
      argv[argc] = expanded[argc - 1];
      snprintf(line + strlen(line), sizeof(line) - strlen(line), " '%s'", *a);
    }
    argv[argc] = NULL;
    int code = runTopo(argv, &out, &err);
    EXPECT_MSG(code == bad->code, "%s: exit %d, want %d", line, code, bad->code);
    EXPECT_MSG(strstr(err, bad->message) != NULL, "%s: the message '%s' does not say '%s'", line, err, bad->message);
    EXPECT_MSG(strncmp(err, "fccl-topo: ", 11) == 0, "%s: the message does not name the program: %s", line, err);
    EXPECT_MSG(out[0] == '\0', "%s: a failure wrote to standard output: %.200s", line, out); /* nothing half-written */
    free(out);
    free(err);
  }
}

/* The driver and the reason for no GPU, in the words fccl-topo, fccl-info and the benchmark share: without a driver
 * (no device node, or no libcuda) CUDA's "driver version is insufficient" never reaches the user. */
static void describe(toolCudaStatus_t* status, int driver, int runtime, int count, cudaError_t error, int nodes,
                     int libcuda, const char* visible) {
  memset(status, 0, sizeof(*status));
  status->driverVersion = driver;
  status->runtimeVersion = runtime;
  status->deviceCount = count;
  toolCudaDescribe(status, error, nodes, libcuda, visible);
}

static void testCudaStatus(void) {
  toolCudaStatus_t s;
  describe(&s, 0, 13000, 0, cudaErrorInsufficientDriver, 0, 0, NULL);
  EXPECT(s.noDriver);
  EXPECT_STR_CONTAINS(s.driver, "none (no NVIDIA driver found)");
  EXPECT_STR_CONTAINS(s.noGpu, "no NVIDIA driver found: no /dev/nvidia* device, no libcuda.so.1");
  EXPECT_MSG(strstr(s.noGpu, "insufficient") == NULL, "%s", s.noGpu);
  describe(&s, 0, 13000, 0, cudaErrorInsufficientDriver, 1, 0, NULL); /* device nodes, no library: a container */
  EXPECT(s.noDriver);
  EXPECT_MSG(strcmp(s.noGpu, "no NVIDIA driver found: no libcuda.so.1") == 0, "%s", s.noGpu);
  describe(&s, 0, 13000, 0, cudaErrorInsufficientDriver, 0, 1, NULL); /* the library (a stub), no device */
  EXPECT_MSG(strcmp(s.noGpu, "no NVIDIA driver found: no /dev/nvidia* device") == 0, "%s", s.noGpu);
  /* An old driver: then the driver is there, and too old. */
  describe(&s, 12040, 13000, 0, cudaErrorInsufficientDriver, 1, 1, NULL);
  EXPECT(!s.noDriver);
  EXPECT_MSG(strcmp(s.driver, "12.4") == 0, "%s", s.driver);
  EXPECT_STR_CONTAINS(s.noGpu, "the NVIDIA driver supports CUDA 12.4, older than this CUDA runtime (13.0)");
  /* GPUs hidden, or none. */
  describe(&s, 13000, 13000, 0, cudaErrorNoDevice, 1, 1, "");
  EXPECT_MSG(strcmp(s.noGpu, "no CUDA device visible: CUDA_VISIBLE_DEVICES='' hides them all") == 0, "%s", s.noGpu);
  describe(&s, 13000, 13000, 0, cudaErrorNoDevice, 1, 1, "-1");
  EXPECT_STR_CONTAINS(s.noGpu, "CUDA_VISIBLE_DEVICES='-1' hides them all");
  describe(&s, 13000, 13000, 0, cudaErrorNoDevice, 1, 1, NULL);
  EXPECT_MSG(strcmp(s.noGpu, "no CUDA device visible") == 0, "%s", s.noGpu);
  describe(&s, 13000, 13000, 0, cudaErrorDevicesUnavailable, 1, 1, NULL);
  EXPECT_STR_CONTAINS(s.noGpu, "CUDA cannot list the GPUs: cudaErrorDevicesUnavailable");
  /* A working machine: no reason. */
  describe(&s, 13000, 13000, 2, cudaSuccess, 1, 1, "0,1");
  EXPECT_MSG(s.noGpu[0] == '\0' && strcmp(s.driver, "13.0") == 0 && !s.noDriver, "'%s' '%s'", s.noGpu, s.driver);
}

/* GPU facts that do not belong to the hwloc topology: the GPUs still appear, with unknown locality. And -o. */
static void testUnplacedGpus(void) {
  char xml[1024], facts[1024], output[64];
  snprintf(xml, sizeof(xml), "%s/local.xml", dataDir);
  snprintf(facts, sizeof(facts), "%s/h200x2.facts", dataDir);
  snprintf(output, sizeof(output), "/tmp/fccl-topo-out-%d.xml", (int)getpid());
  char* argv[] = {"fccl-topo", "--input-xml", xml, "--gpu-facts", facts, "--xml", "-o", output, NULL};
  char *out, *err;
  EXPECT_EQ_INT(runTopo(argv, &out, &err), 0);
  EXPECT(out[0] == '\0');
  free(out);
  free(err);
  char* text = readFile(output);
  EXPECT_STR_CONTAINS(text, "<cpu numaid=\"-1\"");
  EXPECT_STR_CONTAINS(text, "<pci busid=\"0000:00:06.0\" class=\"0x030200\" link_speed=\"\" link_width=\"\">");
  EXPECT_STR_CONTAINS(text, "<nvlink target=\"fffffff:ffff:ff\" count=\"18\" tclass=\"0x068000\"/>");
  free(text);
  unlink(output);
  char* human[] = {"fccl-topo", "--input-xml", xml, "--gpu-facts", facts, NULL};
  EXPECT_EQ_INT(runTopo(human, &out, &err), 0);
  EXPECT_STR_CONTAINS(out, "GPU0 (0000:00:06.0) is not in the hwloc topology");
  EXPECT_STR_CONTAINS(out, "  GPU0   X     NV18  N/A");
  free(out);
  free(err);
}

/* This machine, live: whatever it has (here: no GPU), the report is written and says what it found; recording it and
 * replaying the recording gives the same report apart from the line naming the source. */
static void testLiveAndRecord(void) {
  char *live, *err;
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "/tmp/fccl-topo-record-%d", (int)getpid());
  char* record[] = {"fccl-topo", "--record", prefix, "--gpu-archs", "9.0", NULL};
  int code = runTopo(record, &live, &err);
  EXPECT_MSG(code == 0, "live run exit %d: %s", code, err);
  EXPECT_STR_CONTAINS(live, "fccl-topo: host from this machine");
  EXPECT_STR_CONTAINS(live, "\nHost\n");
  free(err);
  char xml[128], facts[128];
  snprintf(xml, sizeof(xml), "%s.xml", prefix);
  snprintf(facts, sizeof(facts), "%s.facts", prefix);
  char* replayArgs[] = {"fccl-topo", "--input-xml", xml, "--gpu-facts", facts, "--gpu-archs", "9.0", NULL};
  char* replay;
  code = runTopo(replayArgs, &replay, &err);
  EXPECT_MSG(code == 0, "replay exit %d: %s", code, err);
  const char* liveBody = strchr(live, '\n');
  const char* replayBody = strchr(replay, '\n');
  if (liveBody && replayBody && strcmp(liveBody, replayBody) != 0)
    reportDifference("the replay of a --record", liveBody, replayBody);
  else
    EXPECT(liveBody && replayBody);
  free(live);
  free(replay);
  free(err);
  char* json[] = {"fccl-topo", "--json", NULL};
  EXPECT_EQ_INT(runTopo(json, &live, &err), 0);
  EXPECT_STR_CONTAINS(live, "\"schema\": \"fccl-topo/1\"");
  free(live);
  free(err);
  unlink(xml);
  unlink(facts);
}

int main(int argc, char** argv) {
  if (argc < 2 || (argc == 3 && strcmp(argv[2], "--update") != 0) || argc > 3) {
    fprintf(stderr, "usage: %s DATA_DIR [--update]\n", argv[0]);
    return 2;
  }
  dataDir = argv[1];
  updateGoldens = argc == 3;
  /* The algorithm table follows FCCL_ALGO and FCCL_STAGING_BYTES: the goldens are written with neither set. */
  unsetenv("FCCL_ALGO");
  unsetenv("FCCL_STAGING_BYTES");
  fcclParamResetForTest();
  testBusIds();
  testCpumap();
  testPathClasses();
  testNvLinkGroups();
  testDecisions();
  testFactsErrors();
  testFactsRoundTrip();
  testCommandLine();
  testCudaStatus();
  testGoldens();
  testUnplacedGpus();
  testLiveAndRecord();
  return testSummary("topo");
}
