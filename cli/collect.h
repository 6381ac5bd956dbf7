/* SPDX-License-Identifier: MIT */
/*
 * `memprof collect`: the reference collector of tcp:// and unix: streams
 * (stream.h). It says hello on each connection (ack.h); every chunk's
 * profile is validated and written to DIR/PID-TARGET/SEQUENCE.memprof (a
 * profile file, `memprof report` reads it) and then acknowledged; one line
 * per chunk goes to @report, and every gap in a target's
 * sequence numbers to @report and stderr, with the loss the daemon
 * reported for it.
 */
#ifndef MP_COLLECT_H
#define MP_COLLECT_H

#include <stdio.h>

/* Largest chunk accepted; a longer one closes that connection. */
#define MP_COLLECT_MAX_CHUNK (256u << 20)

/* Runs until SIGINT or SIGTERM (then returns 0), or a negative errno when
 * it cannot listen on @listen_url or write to @out_dir (logged). */
int mp_collect_run(const char *listen_url, const char *out_dir, FILE *report);

#endif /* MP_COLLECT_H */
