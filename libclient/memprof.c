/* SPDX-License-Identifier: MIT */
/*
 * libmemprof's markers: kernels, tags, shapes and phases of the calling
 * thread, kept in its thread slot of the shared-memory ring for a late
 * consumer and written as records into its ring while one is attached
 * (docs/RING.md). The marker path is inline (ring_state.h) down to the
 * record write (ring.c): no lock, no malloc, no syscall after the thread's
 * first marker.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "memprof.h"
#include "ring_abi.h"
#include "ring_state.h"

MEMPROF_API int memprof_kernel_begin(const char *name)
{
	struct mp_rw_tls *t;
	int r;

	if (unlikely(!name))
		return -EINVAL;
	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	return push(t, false, MP_REC_KERNEL_BEGIN, name);
}

MEMPROF_API int memprof_kernel_end(void)
{
	struct mp_rw_tls *t;
	int r;

	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	return pop(t, false, MP_REC_KERNEL_END, 0);
}

MEMPROF_API int memprof_tag_begin(const char *tag)
{
	struct mp_rw_tls *t;
	int r;

	if (unlikely(!tag))
		return -EINVAL;
	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	return push(t, true, MP_REC_TAG_BEGIN, tag);
}

MEMPROF_API int memprof_tag_end(void)
{
	struct mp_rw_tls *t;
	int r;

	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	return pop(t, true, MP_REC_TAG_END, 0);
}

static int shape(uint8_t type, const int64_t *dims, int rank)
{
	struct mp_rw_tls *t;
	int r;

	if (rank < 0 || (rank > 0 && !dims))
		return -EINVAL;
	if (rank > MEMPROF_MAX_RANK)
		return -E2BIG;
	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	if (!t->depth)
		return -EINVAL;
	/* No stack change, but the record still needs its own tseq so a late
	 * consumer drops shapes of kernels that ended before it attached. */
	gen_begin(t);
	gen_end(t);
	if (!attached())
		return 0;
	return mp_rw_put(t, type, 0, 0, now_ns(), dims, rank);
}

MEMPROF_API int memprof_kernel_input_shape(const int64_t *dims, int rank)
{
	return shape(MP_REC_INPUT_SHAPE, dims, rank);
}

MEMPROF_API int memprof_kernel_output_shape(const int64_t *dims, int rank)
{
	return shape(MP_REC_OUTPUT_SHAPE, dims, rank);
}

MEMPROF_API int memprof_phase(const char *name)
{
	struct mp_rw_tls *t;
	uint64_t ts, order;
	uint32_t id;
	int r;

	if (!name)
		return -EINVAL;
	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	id = intern(t, name);
	/* Phases are rare: always timestamp them so a late consumer gets the
	 * real start of the current phase. */
	ts = now_ns();
	order = __atomic_add_fetch(&mp_rw.hdr->phase_order, 1, __ATOMIC_RELAXED);
	gen_begin(t);
	STORE(&t->thr->phase_id, id, RELAXED);
	STORE(&t->thr->phase_ts, ts, RELAXED);
	STORE(&t->thr->phase_order, order, RELAXED);
	gen_end(t);
	if (!attached())
		return 0;
	return mp_rw_put(t, MP_REC_PHASE, 0, id, ts, NULL, 0);
}

MEMPROF_API int memprof_phase_end(void)
{
	struct mp_rw_tls *t;
	uint64_t ts, order;
	int r;

	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	ts = now_ns();
	order = __atomic_add_fetch(&mp_rw.hdr->phase_order, 1, __ATOMIC_RELAXED);
	gen_begin(t);
	STORE(&t->thr->phase_id, 0, RELAXED);
	STORE(&t->thr->phase_ts, ts, RELAXED);
	STORE(&t->thr->phase_order, order, RELAXED);
	gen_end(t);
	if (!attached())
		return 0;
	return mp_rw_put(t, MP_REC_PHASE_END, 0, 0, ts, NULL, 0);
}

MEMPROF_API int memprof_attached(void)
{
	if (LOAD(&mp_rw_state, ACQUIRE) != ST_READY)
		return 0;
	return attached() ? 1 : 0;
}

MEMPROF_API uint64_t memprof_dropped(void)
{
	if (LOAD(&mp_rw_state, ACQUIRE) != ST_READY)
		return 0;
	return LOAD(&mp_rw.hdr->drops, RELAXED);
}

MEMPROF_API const char *memprof_version(void)
{
#define STR2(x) #x
#define STR(x) STR2(x)
	return STR(MEMPROF_VERSION_MAJOR) "." STR(MEMPROF_VERSION_MINOR) "." STR(
		MEMPROF_VERSION_PATCH);
}

MEMPROF_API const char *memprof_strerror(int err)
{
	switch (err < 0 ? -err : err) {
	case 0:
		return "success";
	case ENOSPC:
		return "ring full, record dropped and counted";
	case EINVAL:
		return "invalid argument or no open kernel/tag";
	case E2BIG:
		return "shape rank larger than MEMPROF_MAX_RANK";
	case ENOMEM:
		return "out of memory creating the ring";
	case EMFILE:
	case ENFILE:
		return "too many open files to create the ring";
	case EAGAIN:
		return "ring still being created by another thread";
	case ESRCH:
		return "marker after the thread released its slot";
	case ENOSYS:
		return "memfd_create not supported";
	default:
		return "unknown error";
	}
}
