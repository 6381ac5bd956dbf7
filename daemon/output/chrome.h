/* SPDX-License-Identifier: MIT */
/*
 * Chrome / Perfetto trace export: the Trace Event Format's JSON object form,
 * loadable in ui.perfetto.dev and chrome://tracing. Kernel invocations are
 * complete ("X") slices on their thread, the live heap and RSS are counter
 * tracks, phases are instant events; in profiles taken with stacks each
 * allocation site is an instant event whose stack is an "sf" reference into
 * the top-level stackFrames dictionary. docs/OUTPUT.md describes the
 * mapping.
 */
#ifndef MP_CHROME_H
#define MP_CHROME_H

#include <stdio.h>

#include "profile.h"

/* Writes @p to @f. Timestamps are microseconds (three decimals, so exact to
 * the nanosecond) relative to p->begin_ns. Slices are clamped to the window
 * and to their enclosing slice so that every thread's slices nest.
 * 0, -ENOMEM, or -EIO on a write error. */
int mp_chrome_write(const struct mp_profile *p, FILE *f);

#endif /* MP_CHROME_H */
