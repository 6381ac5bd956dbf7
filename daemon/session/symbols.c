// SPDX-License-Identifier: MIT
/*
 * The session's symbols: the final profile's, with the debug files opened
 * ahead while its stacks are laid out and pruned (daemon/stacks/
 * symbolize.h "mp_symbolize_warm_start"): once the target is gone, the
 * other CPU loads libc's DWARF while this one exports the stack table.
 */
#include "session_impl.h"

void mp_sess_warm_start(struct session *s, bool final)
{
	if (!final || s->warm)
		return;
	/* best effort: without it, the files are opened when looked up */
	(void)mp_symbolize_warm_start(s->maps, mp_stack_collect_maps(s->collect), s->o->pid,
				      mp_stack_collect_holds_frames, s->collect, &s->warm);
}

int mp_sess_symbolize(struct session *s, struct mp_profile *p, struct mp_symbolize_stats *st)
{
	int r = mp_symbolize_warmed(p, s->maps, mp_stack_collect_maps(s->collect), s->o->pid,
				    mp_stack_collect_pyname, s->collect, s->warm, st);

	/* the files closed while the profile is written; the session's
	 * end joins that */
	mp_symbolize_warm_retire(s->warm);
	return r;
}
