/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fccl-topo: what fccl sees on this machine and what it will do there. Runs without a GPU (host only, saying so) and
 * without NVML. tools/topo/ holds the program; docs/topo.md describes its outputs.
 */
#include "topo.h"

#include <stdio.h>

int main(int argc, char** argv) { return fcclTopoMain(argc, argv, stdout, stderr); }
