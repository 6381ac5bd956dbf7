/* SPDX-License-Identifier: MIT */
#ifndef MP_RELEASE_H
#define MP_RELEASE_H

#include <stddef.h>

/*
 * The kernel releases a uprobe link in the task that drops its last
 * reference, and waits there for RCU grace periods (40-60 ms for the two
 * links of the in-process path here, far more for perf-event links): a
 * process that exits with links open waits for that before its parent
 * sees it exit. mp_release_in_child() hands @fds (n > 0) to a grandchild:
 * it keeps its copies of them and closes every other fd (no pipe or socket
 * of the caller's stays open after the caller exits: it says so before
 * this returns), and exits when the returned fd is closed, releasing them
 * on its own time. Its parent exits at once, so it is reparented: nobody
 * waits for it and no zombie is left. The caller closes its own copies of
 * @fds (cheap: they are no longer the last references), then the returned
 * fd. -1 when it could not be started: the caller's copies are then the
 * last ones.
 */
int mp_release_in_child(const int *fds, size_t n);

#endif
