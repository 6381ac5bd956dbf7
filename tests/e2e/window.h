/* SPDX-License-Identifier: MIT */
/*
 * The block sizes of fixture-inproc's "window" scenario, shared with the
 * test that knows its exact figures (tests/e2e/test_sampled.c); the
 * blocks its "temps" scenario keeps (tests/e2e/test_inproc.c).
 */
#ifndef MP_TEST_WINDOW_H
#define MP_TEST_WINDOW_H

#include <stdint.h>

#define WINDOW_LIVE 4096
#define WINDOW_SEED 0x9e3779b97f4a7c15ull
#define TEMPS_KEPT 100 /* blocks of 1000 B */
#define TEMPS_FIFO 64 /* blocks of 48 B */
#define TEMPS_FIFO_STEPS 10000

/* 16..63 bytes, from a 64-bit LCG (Knuth's MMIX constants). */
static inline uint64_t window_size(uint64_t *rng)
{
	*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
	return 16 + (*rng >> 33) % 48;
}

#endif /* MP_TEST_WINDOW_H */
