/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fccl-topo's command line. A function rather than main() so the unit tests run the whole program in-process (under
 * AddressSanitizer too) on recorded machines and compare its output with golden files.
 */
#include "fccl_build_config.h"
#include "options.h"
#include "topo.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

typedef enum { FORMAT_HUMAN, FORMAT_JSON, FORMAT_XML } format_t;

typedef struct {
  format_t format;
  int nranks;
  int verifyP2p;
  int noCuda;
  const char* inputXml;
  const char* gpuFacts;
  const char* record;
  const char* gpuArchs;
  const char* output;
} options_t;

static void usage(FILE* out) {
  fprintf(
      out,
      "usage: fccl-topo [--json | --xml] [--nranks N] [--verify-p2p] [--record PREFIX] [-o FILE] [-h]\n"
      "\n"
      "What fccl sees on this machine and what it will do there: CPU packages, NUMA nodes and the PCI tree\n"
      "(hwloc), GPUs and peer access (CUDA), NVLink (NVML), then fccl's choices.\n"
      "\n"
      "  --json            the report as JSON (schema \"fccl-topo/1\", see docs/topo.md)\n"
      "  --xml             NCCL's topology XML, for NCCL_TOPO_FILE\n"
      "  --nranks N        rank count for fccl's decisions (default: the number of GPUs)\n"
      "  --verify-p2p      check P2P now: cudaMemcpyPeer write + read-back between every GPU pair\n"
      "  --record PREFIX   also save this machine as PREFIX.xml (hwloc) and PREFIX.facts (GPU facts)\n"
      "  -o, --output FILE write the report to FILE instead of standard output\n"
      "  -h, --help        this text\n"
      "\n"
      "Replaying a recorded machine (what the tests do):\n"
      "  --input-xml FILE  CPU, NUMA and PCI from an hwloc XML (lstopo --of xml, or --record) instead of this machine\n"
      "  --gpu-facts FILE  GPU, peer and NVLink facts from FILE (--record writes one) instead of CUDA and NVML\n"
      "  --no-cuda         do not ask CUDA: host only\n"
      "  --gpu-archs LIST  decide as if fccl was built for these compute capabilities (this build: '%s')\n"
      "\n"
      "Exit status: 0 report written, 1 failure (or a --verify-p2p pair failed), 2 usage error.\n",
      FCCL_BUILD_GPU_ARCHS);
}

/* --gpu-archs: compute capabilities as the gpu_archs build option takes them (meson.build): MAJOR.MINOR, separated
 * by spaces or commas ("9.0", "8.0 9.0"). */
static int validArchList(const char* list) {
  int archs = 0;
  for (const char* p = list; *p;) {
    if (*p == ' ' || *p == ',' || *p == '\t') {
      p++;
      continue;
    }
    size_t major = strspn(p, "0123456789");
    size_t minor = p[major] == '.' ? strspn(p + major + 1, "0123456789") : 0;
    if (major == 0 || major > 3 || minor == 0 || minor > 2) return 0;
    p += major + 1 + minor;
    if (*p && *p != ' ' && *p != ',' && *p != '\t') return 0;
    archs++;
  }
  return archs > 0 && strlen(list) < sizeof(((topoSystem_t*)0)->gpuArchs);
}

/* Long options only (-o and -h are the short ones); the values are the cases of parseOptions. */
enum { OPT_JSON = 256, OPT_XML, OPT_NRANKS, OPT_VERIFY, OPT_RECORD, OPT_INPUT_XML, OPT_GPU_FACTS, OPT_NO_CUDA,
       OPT_GPU_ARCHS };

static int parseOptions(int argc, char** argv, options_t* opt, FILE* err, int* exitCode) {
  static const struct option longOptions[] = {
      {"json", no_argument, NULL, OPT_JSON},
      {"xml", no_argument, NULL, OPT_XML},
      {"nranks", required_argument, NULL, OPT_NRANKS},
      {"verify-p2p", no_argument, NULL, OPT_VERIFY},
      {"record", required_argument, NULL, OPT_RECORD},
      {"input-xml", required_argument, NULL, OPT_INPUT_XML},
      {"gpu-facts", required_argument, NULL, OPT_GPU_FACTS},
      {"no-cuda", no_argument, NULL, OPT_NO_CUDA},
      {"gpu-archs", required_argument, NULL, OPT_GPU_ARCHS},
      {"output", required_argument, NULL, 'o'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  memset(opt, 0, sizeof(*opt));
  opt->format = FORMAT_HUMAN;
  opt->nranks = -1;
  opt->gpuArchs = FCCL_BUILD_GPU_ARCHS;
  int formats = 0;
  *exitCode = 2;
  /* The tests run the program many times in one process: optind = 0 makes getopt_long start afresh. */
  optind = 0;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":o:h", longOptions, NULL)) != -1;) {
    const char** valueTarget = NULL;
    const char* name = argv[optind - 1]; /* the option as typed, for the messages */
    switch (c) {
      case OPT_JSON:
        opt->format = FORMAT_JSON;
        formats++;
        break;
      case OPT_XML:
        opt->format = FORMAT_XML;
        formats++;
        break;
      case OPT_VERIFY: opt->verifyP2p = 1; break;
      case OPT_NO_CUDA: opt->noCuda = 1; break;
      case 'h': *exitCode = 0; return -1;
      case OPT_NRANKS: {
        char* end = NULL;
        errno = 0;
        long n = strtol(optarg, &end, 10);
        if (errno != 0 || end == optarg || *end != '\0' || n < 1 || n > TOPO_MAX_GPUS) {
          fprintf(err, "fccl-topo: --nranks wants a number from 1 to %d, not '%s'\n", TOPO_MAX_GPUS, optarg);
          return -1;
        }
        opt->nranks = (int)n;
        break;
      }
      case OPT_INPUT_XML: valueTarget = &opt->inputXml; name = "--input-xml"; break;
      case OPT_GPU_FACTS: valueTarget = &opt->gpuFacts; name = "--gpu-facts"; break;
      case OPT_RECORD: valueTarget = &opt->record; name = "--record"; break;
      case OPT_GPU_ARCHS: valueTarget = &opt->gpuArchs; name = "--gpu-archs"; break;
      case 'o': valueTarget = &opt->output; name = strncmp(name, "--", 2) == 0 ? "--output" : "-o"; break;
      default: {
        char problem[256];
        toolOptionProblem(c, argv, problem, sizeof(problem));
        fprintf(err, "fccl-topo: %s (try --help)\n", problem);
        return -1;
      }
    }
    if (valueTarget) {
      if (*optarg == '\0') {
        fprintf(err, "fccl-topo: %s needs a value, not an empty one\n", name);
        return -1;
      }
      *valueTarget = optarg;
    }
  }
  if (optind < argc) {
    fprintf(err, "fccl-topo: unexpected argument '%s' (try --help)\n", argv[optind]);
    return -1;
  }
  if (!validArchList(opt->gpuArchs)) {
    fprintf(err, "fccl-topo: --gpu-archs wants compute capabilities like '9.0' or '8.0 9.0', not '%s'\n",
            opt->gpuArchs);
    *exitCode = 2;
    return -1;
  }
  const char* conflict = NULL;
  if (formats > 1)
    conflict = "--json and --xml are alternatives";
  else if (opt->gpuFacts && opt->noCuda)
    conflict = "--gpu-facts and --no-cuda are alternatives";
  else if (opt->verifyP2p && (opt->gpuFacts || opt->noCuda))
    conflict = "--verify-p2p needs the GPUs themselves";
  else if (opt->record && (opt->inputXml || opt->gpuFacts || opt->noCuda))
    conflict = "--record saves this machine: it does not combine with --input-xml, --gpu-facts or --no-cuda";
  if (conflict) {
    fprintf(err, "fccl-topo: %s\n", conflict);
    *exitCode = 2;
    return -1;
  }
  return 0;
}

static int recordFacts(const topoSystem_t* sys, const char* prefix, char* err, size_t errLen) {
  char path[4096];
  snprintf(path, sizeof(path), "%s.facts", prefix);
  FILE* file = fopen(path, "w");
  if (file == NULL) {
    snprintf(err, errLen, "cannot write %.300s: %s", path, strerror(errno));
    return -1;
  }
  int status = topoFactsWrite(sys, file);
  if (fclose(file) != 0 || status != 0) {
    snprintf(err, errLen, "cannot write %.300s", path);
    return -1;
  }
  return 0;
}

static int verifyFailures(const topoSystem_t* sys) {
  int failed = 0;
  for (int p = 0; p < sys->ngpus * sys->ngpus; p++) failed += sys->peers[p].verified == TOPO_VERIFY_FAILED;
  return failed;
}

int fcclTopoMain(int argc, char** argv, FILE* out, FILE* err) {
  options_t opt;
  int exitCode = 2;
  if (parseOptions(argc, argv, &opt, err, &exitCode) != 0) {
    if (exitCode == 0) usage(out);
    return exitCode;
  }
  topoSystem_t sys;
  topoInit(&sys);
  snprintf(sys.gpuArchs, sizeof(sys.gpuArchs), "%s", opt.gpuArchs);
  char message[TOPO_ERROR_MAX] = "";
  FILE* file = NULL;
  int status = 1;

  /* GPUs first: hwloc attaches them to the PCI tree by bus id. */
  if (opt.gpuFacts) {
    if (topoFactsRead(&sys, opt.gpuFacts, message, sizeof(message)) != 0) goto done;
  } else if (!opt.noCuda) {
    if (topoCudaQuery(&sys, message, sizeof(message)) != 0) goto done;
    if (sys.ngpus > 0) {
      topoNvmlQuery(&sys);
    } else {
      snprintf(sys.nvmlStatus, sizeof(sys.nvmlStatus), "%s", "not queried: no GPU");
    }
  } else {
    snprintf(sys.cudaStatus, sizeof(sys.cudaStatus), "%s", "CUDA not queried: --no-cuda");
    snprintf(sys.nvmlStatus, sizeof(sys.nvmlStatus), "%s", "not queried: --no-cuda");
  }
  if (sys.ngpus == 0) {
    /* First among the notes: it is the one a reader looks for. */
    char saved[TOPO_MAX_NOTES][256];
    int nsaved = sys.nnotes;
    memcpy(saved, sys.notes, sizeof(saved));
    sys.nnotes = 0;
    topoNote(&sys, "no GPU found (%s): CPU, NUMA and PCI only",
             sys.cudaStatus[0] ? sys.cudaStatus : "no CUDA device visible");
    for (int n = 0; n < nsaved; n++) topoNote(&sys, "%s", saved[n]);
  }

  char recordXml[4096];
  if (opt.record) snprintf(recordXml, sizeof(recordXml), "%s.xml", opt.record);
  if (topoHwlocLoad(&sys, opt.inputXml, opt.record ? recordXml : NULL, message, sizeof(message)) != 0) goto done;
  sys.nranks = opt.nranks > 0 ? opt.nranks : sys.ngpus;
  if (opt.verifyP2p && topoCudaVerifyP2p(&sys, message, sizeof(message)) != 0) goto done;
  if (topoModelAnalyse(&sys, message, sizeof(message)) != 0) goto done;
  if (opt.record && recordFacts(&sys, opt.record, message, sizeof(message)) != 0) goto done;

  FILE* target = out;
  if (opt.output) {
    file = fopen(opt.output, "w");
    if (file == NULL) {
      snprintf(message, sizeof(message), "cannot write %s: %s", opt.output, strerror(errno));
      goto done;
    }
    target = file;
  }
  int written = opt.format == FORMAT_JSON  ? topoWriteJson(&sys, target)
                : opt.format == FORMAT_XML ? topoWriteNcclXml(&sys, target)
                                           : topoWriteHuman(&sys, target);
  if (fflush(target) != 0 || written != 0) {
    snprintf(message, sizeof(message), "cannot write the report");
    goto done;
  }
  int failed = verifyFailures(&sys);
  if (failed) {
    /* The report shows which pairs; the exit status and this line are for scripts. */
    snprintf(message, sizeof(message), "the P2P check failed for %d GPU pair%s (see the report)", failed,
             failed == 1 ? "" : "s");
    goto done;
  }
  status = 0;
done:
  if (file && fclose(file) != 0 && status == 0) {
    snprintf(message, sizeof(message), "cannot write %s", opt.output);
    status = 1;
  }
  if (message[0]) fprintf(err, "fccl-topo: %s\n", message);
  topoFree(&sys);
  return status;
}
