/* SPDX-License-Identifier: MIT */
/*
 * Internal to libmemprof and the memprof Python extension (not in
 * memprof.h): frames that stand for others in the call stacks libmemprof
 * unwinds itself (FRAMES records, docs/RING.md "Python frames").
 *
 * int memprof__frame_expander(uint64_t lo, uint64_t hi, memprof_expand_fn fn)
 *   (exported, version node MEMPROF_0.5)
 *   From now on, a stack libmemprof unwinds with a return address in
 *   [@lo, @hi) (an interpreter's eval loop) goes through @fn before it is
 *   written: @fn gets the @n frames, innermost first, and writes at most
 *   @max into @out, returning how many (a negative value or 0: the stack
 *   as it was). @fn runs inside an allocator call of the thread that
 *   allocates: it must not allocate, lock, or make a system call. @fn
 *   NULL: none. 0, or -EINVAL for @lo >= @hi with @fn set.
 *
 * uint32_t memprof__intern(const char *s, uint32_t len)
 *   (exported, version node MEMPROF_0.5)
 *   The id of string @s (@len bytes, at most MP_NAME_MAX, no NUL) in the
 *   ring's string table, added there if new; 0 when there is no ring,
 *   the table is three-quarters full (the rest is kept for the markers'
 *   names), or @len is out of bounds. Allocation-free, lock-free and
 *   async-signal-safe: callable from @fn.
 */
#ifndef MEMPROF_EXPAND_H
#define MEMPROF_EXPAND_H

#include <stdint.h>

typedef int (*memprof_expand_fn)(const uint64_t *in, int n, uint64_t *out, int max);

#define MP_EXPAND_API __attribute__((visibility("default")))

MP_EXPAND_API int memprof__frame_expander(uint64_t lo, uint64_t hi, memprof_expand_fn fn);
MP_EXPAND_API uint32_t memprof__intern(const char *s, uint32_t len);

#endif /* MEMPROF_EXPAND_H */
