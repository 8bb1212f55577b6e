/* SPDX-License-Identifier: Apache-2.0 */
#include "ring.h"

int ringA(int n) { return n <= 0 ? 0 : ringB(n - 1) + 1; }
