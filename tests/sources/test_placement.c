// SPDX-License-Identifier: MIT
/* Probe placement decisions on fixed byte patterns (no privileges). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "tracer.h"

struct pattern {
	const char *what;
	uint8_t code[24];
	size_t len;
	uint32_t arg;
	uint64_t delta;
};

Test(placement, accepts_only_proven_patterns)
{
	static const struct pattern p[] = {
		{ "glibc 2.36 free: test rdi; je; push",
		  { 0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0, 0, 0, 0x55, 0x48, 0x8d, 0x77, 0xf0 },
		  14,
		  0,
		  9 },
		{ "endbr64; test rdi; je short; push",
		  { 0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x85, 0xff, 0x74, 0x10, 0x55 },
		  10,
		  0,
		  9 },
		{ "endbr64; push", { 0xf3, 0x0f, 0x1e, 0xfa, 0x55 }, 5, 0, 4 },
		{ "test rsi (arg 1); je", { 0x48, 0x85, 0xf6, 0x74, 0x05, 0x53 }, 6, 1, 5 },
		{ "test rsi but pointer in rdi", { 0x48, 0x85, 0xf6, 0x74, 0x05, 0x53 }, 6, 0, 0 },
		{ "test rdi; jne (NULL is the fall-through)",
		  { 0x48, 0x85, 0xff, 0x75, 0x05, 0x55 },
		  6,
		  0,
		  0 },
		{ "test rdi,rsi", { 0x48, 0x85, 0xf7, 0x74, 0x05, 0x55 }, 6, 0, 0 },
		{ "cmp rdi,0; je (writes only flags, but not in the set)",
		  { 0x48, 0x83, 0xff, 0x00, 0x74, 0x05, 0x55 },
		  7,
		  0,
		  0 },
		{ "push first: already emulated", { 0x55, 0x48, 0x89, 0xe5 }, 4, 0, 0 },
		{ "mov first (jemalloc free)", { 0x48, 0x89, 0xf8, 0xc3 }, 4, 0, 0 },
		{ "truncated test", { 0x48, 0x85 }, 2, 0, 0 },
		{ "test without a jump after it", { 0x48, 0x85, 0xff }, 3, 0, 0 },
		{ "jump back to the probe point",
		  { 0x48, 0x85, 0xff, 0x74, 0x03, 0x55, 0xeb, 0xfd },
		  8,
		  0,
		  0 },
		{ "call to the probe point",
		  { 0x48, 0x85, 0xff, 0x74, 0x05, 0x55, 0xe8, 0xfa, 0xff, 0xff, 0xff },
		  11,
		  0,
		  0 },
		{ "undecodable tail", { 0x48, 0x85, 0xff, 0x74, 0x02, 0x55, 0x48, 0x0f }, 8, 0, 0 },
		{ "bad argument index", { 0x48, 0x85, 0xff, 0x74, 0x05 }, 5, 9, 0 },
	};

	for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
		cr_assert_eq(mp_tracer_place_free_probe(p[i].code, p[i].len, p[i].arg), p[i].delta,
			     "%s", p[i].what);
}
