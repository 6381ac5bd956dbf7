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

/*
 * The same hand-off without a fork at release time: a fork then copies
 * the caller's page tables, and a profiler that has built its tables is
 * large (~20 ms here at the end of a PyTorch run with call stacks, on the
 * path to the profile). mp_release_holder_start() forks the holder early,
 * while the caller is small: a grandchild in a session of its own (no
 * terminal signal reaches it) that closes every fd but its end of a
 * socket, before this returns, and waits there. mp_release_to_holder()
 * sends it @fds (SCM_RIGHTS: in flight they are references already) and
 * returns the socket, as mp_release_in_child() its fd: the caller closes
 * its copies of @fds, then the socket, and the holder exits once it has
 * read them all, releasing them on its own time. Closed in the other
 * order, the holder may be gone first, and the caller's copies would be
 * the last ones. One hand-off per holder: -1 when there is no holder
 * (never started, gone, or already used): then mp_release_in_child().
 * Thread-safe; the holder exits by itself when the caller exits first.
 */
int mp_release_holder_start(void);
int mp_release_to_holder(const int *fds, size_t n);

#endif
