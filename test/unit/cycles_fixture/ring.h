/* SPDX-License-Identifier: Apache-2.0 */
/* A made-up library for check_cycles.py's own tests: ring_a.c and ring_b.c call each other (a circle), leaf.c
 * calls ring_a.c (no circle). */
#ifndef FCCL_TEST_CYCLES_FIXTURE_RING_H_
#define FCCL_TEST_CYCLES_FIXTURE_RING_H_
int ringA(int n);
int ringB(int n);
int leafCallsRing(void);
#endif
