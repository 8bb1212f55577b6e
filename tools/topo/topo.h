/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fccl-topo's model of a machine: plain data filled by four independent sources and read by three formatters.
 *
 *   topo_hwloc.c  CPU packages, NUMA nodes and the PCI tree (hwloc; live or a recorded hwloc XML)
 *   topo_cuda.c   GPUs, peer capabilities and cuMem support (cudart, driver entry points through cudawrap.h)
 *   topo_nvml.c   NVLink links, their state, version, speed and remote end (libnvidia-ml.so.1 through dlopen)
 *   topo_facts.c  the same GPU/NVLink facts read from (or written to) a text file, for recorded machines
 *   topo_model.c  what follows from them: GPU x GPU path classes, NVLink groups, fccl's own decisions
 *   topo_human.c, topo_json.c, topo_xml.c   the three outputs (table, --json, NCCL topology XML)
 *   topo_main.c   the command line (fcclTopoMain), shared by tools/fccl_topo.c and the unit tests
 *
 * Nothing here is part of libfccl: hwloc is linked into the tool (and its tests) only.
 */
#ifndef FCCL_TOPO_H_
#define FCCL_TOPO_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOPO_MAX_GPUS 64
#define TOPO_MAX_LINKS 32 /* NVLinks NVML may report per GPU (18 on Hopper and Blackwell) */
#define TOPO_MAX_PACKAGES 16
#define TOPO_MAX_NUMA 64
#define TOPO_MAX_NOTES 16
#define TOPO_NAME_MAX 96
#define TOPO_SET_MAX 256 /* a CPU set as a list ("0-55,112-167") or in NCCL's 32-bit-word form */
#define TOPO_ERROR_MAX 512

/* ---- PCI bus ids ------------------------------------------------------------------------------------------------ */

typedef struct {
  int valid;
  unsigned domain, bus, dev, func;
} topoBusId_t;

/* Parses "0000:1b:00.0", "00000000:1B:00.0" (NVML's 8-digit domain) or "1b:00.0" (domain 0). 0 on success. */
int topoBusIdParse(const char* text, topoBusId_t* id);
/* Writes the canonical lower-case form "0000:1b:00.0" ("-" when !valid). */
void topoBusIdFormat(const topoBusId_t* id, char* buf, size_t len);
int topoBusIdEqual(const topoBusId_t* a, const topoBusId_t* b);
/* Orders bus ids (domain, bus, device, function); invalid ids sort last. */
int topoBusIdCompare(const topoBusId_t* a, const topoBusId_t* b);

/* ---- host: packages, NUMA nodes, PCI tree (hwloc) --------------------------------------------------------------- */

typedef struct {
  int osIndex;
  char cpus[TOPO_SET_MAX]; /* PU os indexes as a list */
  char numaNodes[64];      /* NUMA os indexes as a list */
  char model[128];
  char vendor[32];         /* "GenuineIntel", "AuthenticAMD", "" when unknown */
  int family, modelNumber; /* x86 CPUID family/model, -1 when unknown */
  int cores, pus;
} topoPackage_t;

typedef struct {
  int osIndex;
  char cpus[TOPO_SET_MAX];
  char ncclAffinity[TOPO_SET_MAX]; /* the same set as sysfs cpumap writes it: 32-bit hex words, commas */
  uint64_t memoryBytes;
} topoNuma_t;

typedef enum { TOPO_PCI_HOSTBRIDGE = 0, TOPO_PCI_BRIDGE = 1, TOPO_PCI_DEVICE = 2 } topoPciKind_t;

typedef struct {
  topoPciKind_t kind;
  int implied;       /* a host bridge hwloc did not show (PCI objects hung directly off a CPU object) */
  topoBusId_t busId; /* invalid for host bridges */
  unsigned domain, secondaryBus, subordinateBus; /* bridges: the bus range below */
  unsigned classId; /* 16-bit class (0x0302 3D controller, 0x0604 PCI bridge, 0x0207 InfiniBand) */
  unsigned vendor, device, subVendor, subDevice;
  float linkGBs;  /* hwloc's link speed in GB/s (0: unknown) */
  char label[64]; /* OS device name(s) ("mlx5_0", "eth0", "nvme0n1") or "" */
  int rdma;       /* the label is an RDMA (OpenFabrics) device's: a NIC of nvidia-smi topo -m's matrix */
  int gpu;        /* index into topoSystem_t.gpus, -1 */
  /* locality: for host bridges the CPUs/NUMA nodes they are attached to; devices inherit their host bridge's */
  char cpus[TOPO_SET_MAX];
  char numaNodes[64];
  int numaNode;                        /* the single NUMA node the host bridge hangs off, -1 when none or several */
  int parent, firstChild, nextSibling; /* indices into topoSystem_t.pci, -1 */
} topoPciNode_t;

/* ---- GPUs (CUDA, NVML or a facts file) ------------------------------------------------------------------------- */

typedef enum { TOPO_REMOTE_UNKNOWN = 0, TOPO_REMOTE_GPU, TOPO_REMOTE_SWITCH, TOPO_REMOTE_CPU } topoRemoteType_t;

/* One physical NVLink as NVML reports it. */
typedef struct {
  int link;
  int active;
  unsigned version; /* nvmlNvlinkVersion_t value: 1=1.0 2=2.0 3=2.2 4=3.0 5=3.1 6=4.0 7=5.0, 0 unknown */
  topoRemoteType_t remoteType;
  topoBusId_t remote; /* !valid when the remote is not visible (an NVSwitch seen from a VM) */
} topoNvLink_t;

/* Active links of one GPU grouped by their remote end (what NCCL's <nvlink count=..> and NV# say). */
typedef struct {
  topoRemoteType_t remoteType;
  topoBusId_t remote;
  int count;
  unsigned version;
  int peerGpu; /* the GPU at the remote end (TOPO_REMOTE_GPU), else -1 */
} topoNvGroup_t;

typedef struct {
  int index; /* CUDA ordinal */
  char name[TOPO_NAME_MAX];
  char uuid[48];
  topoBusId_t busId;
  int ccMajor, ccMinor;
  int smCount;
  uint64_t memoryBytes;
  int vmm;             /* CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, -1 unknown */
  int posixFd;         /* CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, -1 unknown */
  int gdr;             /* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, -1 unknown */
  int nvlinkQueried;   /* NVML answered for this GPU (0: no NVML, or the GPU was not found there) */
  unsigned nvlinkMBps; /* per link and direction (NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON), 0 unknown */
  int nlinks;
  topoNvLink_t links[TOPO_MAX_LINKS];
  int ngroups; /* filled by topoModelAnalyse */
  topoNvGroup_t groups[TOPO_MAX_LINKS];
  int pciNode; /* index into topoSystem_t.pci, -1 when hwloc does not show the GPU */
} topoGpu_t;

typedef enum { TOPO_VERIFY_NOT_RUN = 0, TOPO_VERIFY_OK = 1, TOPO_VERIFY_FAILED = 2 } topoVerify_t;

/* What CUDA says about GPU i reaching GPU j. */
typedef struct {
  int known;             /* 0 when CUDA was not asked (facts file without this pair) */
  int canAccess;         /* cudaDeviceCanAccessPeer */
  int access;            /* cudaDevP2PAttrAccessSupported */
  int atomics;           /* cudaDevP2PAttrNativeAtomicSupported */
  int rank;              /* cudaDevP2PAttrPerformanceRank (lower is better) */
  topoVerify_t verified; /* --verify-p2p result */
  char verifyError[160];
} topoPeer_t;

/* GPU x GPU path classes, nearest first; the names are nvidia-smi topo -m's. */
typedef enum {
  TOPO_PATH_SELF = 0, /* X */
  TOPO_PATH_NVLINK,   /* NV#: a bonded set of NVLinks, direct or through NVSwitches */
  TOPO_PATH_PIX,      /* at most one PCIe switch */
  TOPO_PATH_PXB,      /* several PCIe switches, no host bridge */
  TOPO_PATH_PHB,      /* a PCIe host bridge */
  TOPO_PATH_NODE,     /* between host bridges of one NUMA node */
  TOPO_PATH_SYS,      /* across the SMP interconnect between NUMA nodes */
  TOPO_PATH_UNKNOWN   /* hwloc does not show one of the two GPUs */
} topoPathClass_t;

typedef struct {
  topoPathClass_t cls;
  int nvlinks; /* NV# count for TOPO_PATH_NVLINK */
  int viaSwitch;
} topoPath_t;

/* ---- the whole machine ----------------------------------------------------------------------------------------- */

typedef enum { TOPO_SRC_NONE = 0, TOPO_SRC_LIVE, TOPO_SRC_FILE } topoSourceKind_t;

typedef struct {
  /* where the data came from (written into every output, so it must be deterministic for recorded inputs) */
  topoSourceKind_t hostSource;
  char hostSourceName[128]; /* basename of the hwloc XML, or "" for this machine */
  topoSourceKind_t gpuSource;
  char gpuSourceName[128]; /* basename of the facts file */
  char hwlocVersion[32];   /* of the library that read the topology */

  /* host */
  char arch[32];
  char hostModel[128]; /* DMI product name when hwloc has it */
  int npus, ncores;
  int npackages;
  topoPackage_t packages[TOPO_MAX_PACKAGES];
  int nnuma;
  topoNuma_t numa[TOPO_MAX_NUMA];
  int npci, pciCapacity;
  topoPciNode_t* pci;

  /* CUDA */
  int cudaQueried;                   /* 0 with --no-cuda */
  char cudaStatus[256];              /* "" when fine, else why no GPU was listed */
  int driverVersion, runtimeVersion; /* 13000 = 13.0; 0 unknown */
  int noDriver;                      /* no NVIDIA driver on this machine (tools/common/cuda_status.h) */
  int ngpus;
  topoGpu_t* gpus;   /* ngpus entries */
  topoPeer_t* peers; /* ngpus * ngpus, [i * ngpus + j] */

  /* NVML */
  int nvmlAvailable;
  char nvmlStatus[160]; /* why NVML is unavailable */

  /* derived by topoModelAnalyse */
  topoPath_t* paths; /* ngpus * ngpus */

  /* fccl's build, for its decisions (the golden tests pin it with --gpu-archs) */
  char gpuArchs[64];
  int nranks; /* rank count for the algorithm table (default: ngpus) */
  int verifyRan;

  int nnotes;
  char notes[TOPO_MAX_NOTES][256];
} topoSystem_t;

void topoInit(topoSystem_t* sys);
void topoFree(topoSystem_t* sys);
/* Appends a line to the notes every output ends with ("no GPU found", "NVML unavailable: ..."). */
void topoNote(topoSystem_t* sys, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Grows sys->gpus/peers to ngpus entries (zeroed, defaults set). 0 on success. */
int topoSetGpuCount(topoSystem_t* sys, int ngpus, char* err, size_t errLen);
/* Appends a zeroed PCI node and returns its index, -1 when out of memory. */
int topoAddPciNode(topoSystem_t* sys);

/* ---- sources ----------------------------------------------------------------------------------------------------- */

/* Reads CPU/NUMA/PCI from hwloc: this machine (xmlPath NULL) or a recorded hwloc XML. Attaches GPUs by bus id, so
 * call it after the GPU source. recordPath, when set, also exports the topology there as hwloc XML. */
int topoHwlocLoad(topoSystem_t* sys, const char* xmlPath, const char* recordPath, char* err, size_t errLen);

/* Lists GPUs, peer attributes and cuMem support through CUDA. No GPU is not an error (cudaStatus says why). */
int topoCudaQuery(topoSystem_t* sys, char* err, size_t errLen);
/* The real P2P check behind --verify-p2p: for every pair with peer access, write a pattern into the peer's memory
 * with cudaMemcpyPeer and read it back. Results go to sys->peers[].verified. */
int topoCudaVerifyP2p(topoSystem_t* sys, char* err, size_t errLen);

/* Fills NVLink facts of the GPUs already listed. NVML missing is not an error (nvmlStatus says why). */
void topoNvmlQuery(topoSystem_t* sys);

/* The facts file: GPU, peer and NVLink facts as text (docs/topo.md describes the format). */
int topoFactsRead(topoSystem_t* sys, const char* path, char* err, size_t errLen);
int topoFactsWrite(const topoSystem_t* sys, FILE* out);

/* ---- analysis -------------------------------------------------------------------------------------------------- */

/* Groups NVLinks, classifies every GPU pair and fills sys->paths. 0 on success. */
int topoModelAnalyse(topoSystem_t* sys, char* err, size_t errLen);

/* The PCI path class between two PCI nodes, from the PCI tree alone (no NVLink). */
topoPathClass_t topoPciPathClass(const topoSystem_t* sys, int nodeA, int nodeB);
/* The NICs of nvidia-smi topo -m's matrix: the PCI devices with an RDMA (OpenFabrics) device ("mlx5_0"), in the order
 * of the PCI tree, as indices into sys->pci; at most max of them. Returns how many there are (all, even past max). */
int topoMatrixNics(const topoSystem_t* sys, int* nodes, int max);
/* The matrix cell between a GPU (or a NIC, gpu -1) and PCI node nic: the PCI path class ("?" when hwloc does not
 * show the GPU). */
topoPath_t topoNicPath(const topoSystem_t* sys, int gpu, int fromNode, int nic);
/* nvidia-smi's cell text for a path: "X", "NV18", "PIX", ... */
void topoPathName(const topoPath_t* path, char* buf, size_t len);
const char* topoPathClassName(topoPathClass_t cls);

/* NVLink version as its marketing number ("4.0"), from NVML's enum value; "?" when unknown. */
const char* topoNvLinkVersionName(unsigned nvmlVersion);
/* Nominal per-link, per-direction bandwidth in GB/s for an NVML version enum, 0 when unknown. */
double topoNvLinkNominalGBs(unsigned nvmlVersion);
const char* topoRemoteTypeName(topoRemoteType_t type);

/* fccl's decisions, computed from the model. */
typedef enum { TOPO_IPC_CUMEM = 0, TOPO_IPC_LEGACY, TOPO_IPC_UNKNOWN } topoIpc_t;
topoIpc_t topoGpuIpc(const topoGpu_t* gpu);
const char* topoIpcName(topoIpc_t ipc);
/* Whether fccl's kernels (built for sys->gpuArchs) run on this GPU. */
int topoGpuHasKernels(const topoSystem_t* sys, const topoGpu_t* gpu);
/* "capable (verified at communicator init)", "verified (...)", "no peer access", ... */
const char* topoPeerP2pText(const topoSystem_t* sys, int i, int j);
/* Whether fccl can run sys->nranks ranks on GPUs 0..nranks-1 (one rank per GPU); reason says why not. */
int topoCollectivesSupported(const topoSystem_t* sys, char* reason, size_t len);

/* The message sizes the algorithm table covers. */
extern const size_t topoAlgoSizes[];
extern const int topoAlgoSizeCount;

typedef struct {
  char name[32]; /* "ll", "oneshot_push", ... */
  int blocks, threads;
} topoAlgo_t;

/* Whether the algorithm table applies (GPUs found, 2 to 8 ranks); reason says why not. */
int topoAlgoAvailable(const topoSystem_t* sys, char* reason, size_t len);
/* The all-reduce algorithm and grid fccl's own selection (fcclAlgoSelect) picks for bytes on sys->nranks ranks of
 * GPU0's kind, with staged or registered buffers, under the FCCL_ALGO and FCCL_STAGING_BYTES in effect. 0 on success.
 */
int topoAlgoFor(const topoSystem_t* sys, size_t bytes, int registered, topoAlgo_t* algo);
/* FCCL_ALGO as set in the environment ("" when choosing by size). */
const char* topoAlgoRequest(void);

/* ---- outputs ----------------------------------------------------------------------------------------------------- */

int topoWriteHuman(const topoSystem_t* sys, FILE* out);
int topoWriteJson(const topoSystem_t* sys, FILE* out);
int topoWriteNcclXml(const topoSystem_t* sys, FILE* out);

/* Converts a CPU list ("0-55,112-167") to sysfs cpumap form ("000000ff,..."), as NCCL's affinity attribute. */
int topoCpuListToCpumap(const char* list, char* buf, size_t len);

/* ---- command line ------------------------------------------------------------------------------------------------ */

/* fccl-topo's whole program; writes the report to out and diagnostics to err. Returns the exit code. */
int fcclTopoMain(int argc, char** argv, FILE* out, FILE* err);

#endif /* FCCL_TOPO_H_ */
