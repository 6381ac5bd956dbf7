/* SPDX-License-Identifier: MIT */
/* The daemon's and the CLI's one log module, with syslog levels.
 *
 * A program logs an error once, where it returns it, with context:
 *	return log_error_errno(r, "pid %d: reading %s: %m", pid, path);
 * logs the line with %m as strerror(-r) and returns -|r|.
 *
 * Two outputs, chosen once by mp_log_open():
 *  - the service (memprofd without --pid), or any program whose stderr is
 *    the journal (JOURNAL_STREAM names stderr): each line starts with a
 *    journald priority prefix "<N>" (sd-daemon(3)), so levels survive;
 *  - a command-line program: "IDENT: message", IDENT being the program
 *    (or "memprof convert" for a subcommand), as CLIs usually print.
 * Lines above the maximum level (default info; -v: debug) are dropped.
 * Each line leaves in one write(2): lines of concurrent threads don't mix. */
#ifndef MEMPROF_LOG_H
#define MEMPROF_LOG_H

#include <stdbool.h>
#include <syslog.h>

enum mp_log_output {
	MP_LOG_AUTO, /* journal prefixes if stderr is the journal, else plain */
	MP_LOG_PLAIN, /* "IDENT: message" */
	MP_LOG_JOURNAL, /* "<N>message" */
};

/* @ident: the prefix of plain lines (NULL: the program's short name). The
 * string must outlive the logging. */
void mp_log_open(const char *ident, enum mp_log_output out);
void mp_log_set_max_level(int level);
int mp_log_get_max_level(void);

/* Logs at @level (LOG_ERR ... LOG_DEBUG); %m is strerror(|err|). Returns
 * -|err| (0 when @err is 0), so callers can return it. */
int mp_log_internal(int level, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define log_full_errno(level, err, ...) mp_log_internal((level), (err), __VA_ARGS__)
#define log_error_errno(err, ...) mp_log_internal(LOG_ERR, (err), __VA_ARGS__)
#define log_warning_errno(err, ...) mp_log_internal(LOG_WARNING, (err), __VA_ARGS__)
#define log_notice_errno(err, ...) mp_log_internal(LOG_NOTICE, (err), __VA_ARGS__)
#define log_info_errno(err, ...) mp_log_internal(LOG_INFO, (err), __VA_ARGS__)
#define log_debug_errno(err, ...) mp_log_internal(LOG_DEBUG, (err), __VA_ARGS__)
#define log_error(...) ((void)mp_log_internal(LOG_ERR, 0, __VA_ARGS__))
#define log_warning(...) ((void)mp_log_internal(LOG_WARNING, 0, __VA_ARGS__))
#define log_notice(...) ((void)mp_log_internal(LOG_NOTICE, 0, __VA_ARGS__))
#define log_info(...) ((void)mp_log_internal(LOG_INFO, 0, __VA_ARGS__))
#define log_debug(...) ((void)mp_log_internal(LOG_DEBUG, 0, __VA_ARGS__))

#endif
