// SPDX-License-Identifier: MIT
#include <errno.h>

#include "emit.h"
#include "log.h"
#include "outfile.h"
#include "pprof.h"
#include "profile.h"

int mp_emit_profile(const struct mp_emit *e, const struct mp_profile *p, FILE *out)
{
	int r;

	if (e->output) {
		r = e->pprof ? mp_pprof_save(p, e->output) : mp_profile_save(p, e->output);
		if (r < 0)
			return log_error_errno(r, "writing %s: %s", e->output,
					       mp_output_strerror(r));
	}
	if (e->print_none)
		return 0;
	r = mp_report_write_pool(p, e->print, e->region, e->pool, out);
	if (r == -ESRCH)
		return log_error_errno(r, "no pool '%s' in the profile (--pool)", e->pool);
	if (r == -ENOENT)
		return log_error_errno(r, "no invocation '%s' in the profile (--region)",
				       e->region);
	if (r < 0)
		return log_error_errno(r, "printing the profile: %m");
	fflush(out);
	return 0;
}
