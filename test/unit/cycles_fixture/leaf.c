/* SPDX-License-Identifier: Apache-2.0 */
#include "ring.h"

int leafCallsRing(void) { return ringA(3); }
