/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where fcclCommSplit's child takes its slot (core/comm/split.c): the collectives' layout in a slot made for another
 * rank count (fcclDeviceLayoutIn, fcclDeviceSlotHolds in device_state.c). For every parent of 1 to 8 ranks and
 * child of 1 to 8 ranks, at the default FCCL_STAGING_BYTES and two others: a slot made for n ranks holds n ranks'
 * layout with all its staging; a child that takes its parent's slot keeps at least 7/8 of it, within the slot, as
 * close to the slot's end as one alignment step allows; and from 1 MiB of staging up (the default is 32 MiB) a child
 * of fewer ranks always takes its parent's slot (the split then maps nothing new). No GPU.
 */
#include "device_state.h"
#include "param.h"
#include "test.h"

#include <stdlib.h>

static void checkAt(const char* staging) {
  const char* named = staging ? staging : "default";
  if (staging)
    setenv("FCCL_STAGING_BYTES", staging, 1);
  else
    unsetenv("FCCL_STAGING_BYTES");
  fcclParamResetForTest();
  for (int parent = 1; parent <= 8; parent++) {
    const size_t slot = fcclDeviceSlotBytes(parent);
    fcclSlotLayout own, full;
    fcclSlotLayoutCompute(parent, fcclDeviceStagingBytes(), &full);
    EXPECT_EQ_INT(fcclDeviceLayoutIn(parent, slot, &own), 1);
    EXPECT_MSG(own.totalBytes == full.totalBytes && own.chunkBytes == full.chunkBytes,
               "staging %s: %d ranks in their own slot lose staging", named, parent);
    for (int child = 1; child <= 8; child++) {
      fcclSlotLayout in, childFull;
      fcclSlotLayoutCompute(child, fcclDeviceStagingBytes(), &childFull);
      const int fits = fcclDeviceLayoutIn(child, slot, &in);
      const int holds = fcclDeviceSlotHolds(child, slot);
      /* At the least staging (128 KiB) the rounding is too large a share: the child then gets a slot of its own. */
      if (child < parent && fcclDeviceStagingBytes() >= (1u << 20))
        EXPECT_MSG(holds, "staging %s: a child of %d in the slot of %d ranks does not fit", named, child, parent);
      if (!fits) continue;
      EXPECT_MSG(in.totalBytes <= slot, "staging %s: %d ranks overflow a %d-rank slot", named, child, parent);
      EXPECT(in.chunkBytes <= childFull.chunkBytes);
      if (holds) EXPECT(in.chunkBytes * 8 >= childFull.chunkBytes * 7);
      /* the most that fits: one step more would not */
      if (in.chunkBytes < childFull.chunkBytes) {
        fcclSlotLayout more;
        const uint64_t peers = child > 1 ? (uint64_t)child - 1 : 1;
        fcclSlotLayoutCompute(child, (in.chunkBytes + 2 * FCCL_SLOT_ALIGN) * 4 * peers, &more);
        EXPECT_MSG(more.totalBytes > slot, "staging %s: %d ranks in a %d-rank slot leave staging unused", named, child,
                   parent);
      }
    }
  }
}

int main(void) {
  checkAt(NULL);
  checkAt("16777216");
  checkAt("131072");
  unsetenv("FCCL_STAGING_BYTES");
  fcclParamResetForTest();
  return testSummary("split_layout");
}
