// SPDX-License-Identifier: MIT
#include "release.h"

#include "ringq.h"

uint64_t mp_session_watermark(uint64_t t0, uint64_t lag, uint64_t bpf_done, uint64_t rings_done)
{
	uint64_t wm = mp_release_watermark(t0, lag, bpf_done, rings_done);
	uint64_t r = rings_done > MP_RELEASE_MARGIN_NS ? rings_done - MP_RELEASE_MARGIN_NS : 0;

	return wm < r ? wm : r;
}
