/* SPDX-License-Identifier: MIT */
/*
 * libmemprof: kernel markers for the memprofd memory profiler.
 *
 * Mark regions ("kernels": an op of an inference runtime, a request handler)
 * and memprofd, attached to this process by pid, attributes every allocation
 * made inside them. The library initialises itself on first use.
 *
 * The marker functions never block, never take a lock, never allocate, make
 * no syscall after a thread's first marker, and never abort. They return 0 on
 * success or a negative errno (-ENOSPC: ring full, record dropped and counted;
 * -EINVAL: bad argument; -ENOMEM/-EMFILE...: the ring could not be created,
 * markers are then no-ops). Ignoring the return value is fine.
 */
#ifndef MEMPROF_H
#define MEMPROF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MEMPROF_API __attribute__((visibility("default")))
#else
#define MEMPROF_API
#endif

#define MEMPROF_VERSION_MAJOR 0
#define MEMPROF_VERSION_MINOR 1
#define MEMPROF_VERSION_PATCH 0

/* Maximum rank recorded for a shape; larger ranks are rejected with -E2BIG. */
#define MEMPROF_MAX_RANK 8

/* Begin a kernel named @name on the calling thread. Kernels nest. */
MEMPROF_API int memprof_kernel_begin(const char *name);
/* End the calling thread's innermost open kernel. */
MEMPROF_API int memprof_kernel_end(void);
/* Attach an input / output shape to the calling thread's innermost open
 * kernel. Call once per input (output), in order. */
MEMPROF_API int memprof_kernel_input_shape(const int64_t *dims, int rank);
MEMPROF_API int memprof_kernel_output_shape(const int64_t *dims, int rank);
/* Set the process-wide phase ("load", "inference", ...). */
MEMPROF_API int memprof_phase(const char *name);
/* End the current phase: what follows belongs to no phase until the next
 * memprof_phase(). */
MEMPROF_API int memprof_phase_end(void);
/* 1 while a profiler (memprofd or memprof run) is attached to this
 * process, else 0. One load: cheap enough to check before every marker. */
MEMPROF_API int memprof_attached(void);
/* Allocations made on the calling thread while a tag is open carry it
 * ("weights", "activations"). Tags nest; the innermost wins. */
MEMPROF_API int memprof_tag_begin(const char *tag);
MEMPROF_API int memprof_tag_end(void);
/*
 * Pools: memory the program hands out itself (an arena carved from one big
 * malloc, a device allocator). memprofd reports slices per pool, per
 * kernel, phase, tag and owner, beside (never added to) the heap figures:
 * an arena's backing malloc stays in the heap view, its slices are in the
 * pool view. Same guarantees as the markers.
 */
enum memprof_pool_kind {
	MEMPROF_POOL_HOST = 0, /* host memory (an arena) */
	MEMPROF_POOL_DEVICE = 1, /* device memory: never in host RSS figures */
};
/* Declares pool @name of @kind; declaring a name again returns the same
 * id. Returns the pool id (> 0) or a negative errno (-ENOSPC: the name
 * table is full). */
MEMPROF_API int memprof_pool_declare(const char *name, int kind);
/* Slice [@ptr, @ptr + @size) of @pool handed out / given back. */
MEMPROF_API int memprof_pool_alloc(int pool, const void *ptr, uint64_t size);
MEMPROF_API int memprof_pool_free(int pool, const void *ptr);
/* Every live slice of @pool given back at once (arena reset). */
MEMPROF_API int memprof_pool_reset(int pool);
/* Records dropped because the ring was full, since the process started. */
MEMPROF_API uint64_t memprof_dropped(void);
/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
MEMPROF_API const char *memprof_version(void);
/* Text for a negative errno returned by this library. */
MEMPROF_API const char *memprof_strerror(int err);

#if defined(__GNUC__) && !defined(__cplusplus)
static inline void memprof__scope_end(int *unused)
{
	(void)unused;
	memprof_kernel_end();
}
#define MEMPROF__CAT2(a, b) a##b
#define MEMPROF__CAT(a, b) MEMPROF__CAT2(a, b)
/* MEMPROF_KERNEL("matmul"); marks the rest of the enclosing block. */
#define MEMPROF_KERNEL(name)                        \
	int MEMPROF__CAT(memprof__scope_, __LINE__) \
		__attribute__((cleanup(memprof__scope_end), unused)) = memprof_kernel_begin(name)
#elif defined(__cplusplus)
} /* extern "C" */
namespace memprof_detail
{
struct scope {
	explicit scope(const char *n)
	{
		memprof_kernel_begin(n);
	}
	~scope()
	{
		memprof_kernel_end();
	}
	scope(const scope &) = delete;
	scope &operator=(const scope &) = delete;
};
} // namespace memprof_detail
#define MEMPROF__CAT2(a, b) a##b
#define MEMPROF__CAT(a, b) MEMPROF__CAT2(a, b)
#define MEMPROF_KERNEL(name) memprof_detail::scope MEMPROF__CAT(memprof__scope_, __LINE__)(name)
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif /* MEMPROF_H */
