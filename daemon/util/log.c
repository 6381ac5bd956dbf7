// SPDX-License-Identifier: MIT
/* The log module: see log.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

static const char *log_ident;
static bool log_journal;
static int log_max_level = LOG_INFO;

/* JOURNAL_STREAM is "DEV:INO" of the stream systemd connected to stdout
 * and stderr; it counts only if stderr is still that stream (a child may
 * have inherited the variable with stderr redirected). */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void mp_log_open(const char *ident, enum mp_log_output out)
{
	log_ident = ident;
	log_journal = out == MP_LOG_JOURNAL || (out == MP_LOG_AUTO && stderr_is_journal());
}

void mp_log_set_max_level(int level)
{
	__atomic_store_n(&log_max_level, level, __ATOMIC_RELAXED);
}

int mp_log_get_max_level(void)
{
	return __atomic_load_n(&log_max_level, __ATOMIC_RELAXED);
}

int mp_log_internal(int level, int err, const char *fmt, ...)
{
	int saved = errno, ret = err < 0 ? err : -err;
	char line[2048];
	size_t n;
	va_list ap;
	int k;

	if (level > mp_log_get_max_level())
		return ret;
	if (log_journal)
		k = snprintf(line, sizeof(line), "<%d>", level & LOG_PRIMASK);
	else
		k = snprintf(line, sizeof(line),
			     "%s: ", log_ident ? log_ident : program_invocation_short_name);
	n = k < 0 ? 0 : (size_t)k < sizeof(line) ? (size_t)k : sizeof(line) - 1;
	errno = -ret; /* for %m */
	va_start(ap, fmt);
	k = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (k > 0)
		n = n + (size_t)k < sizeof(line) - 1 ? n + (size_t)k : sizeof(line) - 2;
	line[n++] = '\n';
	/* One write per line; a short write to stderr is not worth a loop. */
	(void)!write(STDERR_FILENO, line, n);
	errno = saved;
	return ret;
}
