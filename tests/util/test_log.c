// SPDX-License-Identifier: MIT
/* daemon/util: the log module's two outputs, its levels and its return
 * values; the timer and clock helpers of util.h. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/* Runs @fn with stderr redirected to a temp file; its whole output. */
static char *capture(void (*fn)(void))
{
	static char buf[4096];
	FILE *f = tmpfile();
	int saved = dup(STDERR_FILENO);
	size_t n;

	cr_assert_not_null(f);
	cr_assert_geq(saved, 0);
	cr_assert_geq(dup2(fileno(f), STDERR_FILENO), 0);
	fn();
	cr_assert_geq(dup2(saved, STDERR_FILENO), 0);
	close(saved);
	rewind(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int ret_errno, ret_plain;

static void lines(void)
{
	mp_log_set_max_level(LOG_INFO);
	errno = EBADF;
	ret_errno = log_error_errno(-ENOENT, "reading %s: %m", "/x");
	cr_expect_eq(errno, EBADF, "errno is preserved");
	ret_plain = log_warning_errno(EACCES, "positive %d", 1);
	log_info("info %d", 2);
	log_debug("debug hidden");
	mp_log_set_max_level(LOG_DEBUG);
	log_debug("debug shown");
	mp_log_set_max_level(LOG_INFO);
}

Test(log, plain_lines_carry_the_ident)
{
	char *out;

	mp_log_open("memprof convert", MP_LOG_PLAIN);
	out = capture(lines);
	cr_expect_str_eq(out, "memprof convert: reading /x: No such file or directory\n"
			      "memprof convert: positive 1\n"
			      "memprof convert: info 2\n"
			      "memprof convert: debug shown\n");
	cr_expect_eq(ret_errno, -ENOENT);
	cr_expect_eq(ret_plain, -EACCES);
}

Test(log, journal_lines_carry_the_priority)
{
	char *out;

	mp_log_open("memprofd", MP_LOG_JOURNAL);
	out = capture(lines);
	cr_expect_str_eq(out, "<3>reading /x: No such file or directory\n"
			      "<4>positive 1\n"
			      "<6>info 2\n"
			      "<7>debug shown\n");
}

static void one_line(void)
{
	log_notice("hello");
}

/* JOURNAL_STREAM counts only when it names the stderr of this process. */
Test(log, auto_detects_the_journal_stream)
{
	struct stat st;
	char env[64], *out;
	FILE *f = tmpfile();
	int saved = dup(STDERR_FILENO);

	cr_assert_not_null(f);
	cr_assert_geq(dup2(fileno(f), STDERR_FILENO), 0);
	cr_assert_eq(fstat(STDERR_FILENO, &st), 0);
	snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	setenv("JOURNAL_STREAM", env, 1);
	mp_log_open("memprofd", MP_LOG_AUTO);
	dup2(saved, STDERR_FILENO);
	close(saved);
	fclose(f);
	out = capture(one_line);
	cr_expect_str_eq(out, "<5>hello\n");

	setenv("JOURNAL_STREAM", "1:2", 1);
	mp_log_open("memprofd", MP_LOG_AUTO);
	out = capture(one_line);
	cr_expect_str_eq(out, "memprofd: hello\n");
	unsetenv("JOURNAL_STREAM");
}

static void long_line(void)
{
	static char big[5000];

	memset(big, 'a', sizeof(big) - 1);
	log_error("%s", big);
}

Test(log, long_lines_are_cut_and_still_end_the_line)
{
	char *out;
	size_t n;

	mp_log_open("x", MP_LOG_PLAIN);
	out = capture(long_line);
	n = strlen(out);
	cr_assert_gt(n, 1000);
	cr_expect_eq(out[n - 1], '\n');
	cr_expect_eq(strchr(out, '\n'), out + n - 1, "one line");
	cr_expect_eq(strncmp(out, "x: aaa", 6), 0);
}

Test(util, timer_fires_once_then_disarms)
{
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct itimerspec it;
	uint64_t t0 = mp_now_ns(), exp = 0;

	cr_assert_geq(fd, 0);
	cr_assert_eq(mp_timer_arm(fd, 2000000, 0), 0);
	cr_assert_eq(poll(&p, 1, 5000), 1);
	cr_assert_eq(read(fd, &exp, sizeof(exp)), (ssize_t)sizeof(exp));
	cr_expect_eq(exp, 1);
	cr_expect_geq(mp_now_ns() - t0, 2000000);
	cr_assert_eq(timerfd_gettime(fd, &it), 0);
	cr_expect_eq(it.it_value.tv_sec, 0);
	cr_expect_eq(it.it_value.tv_nsec, 0);
	cr_assert_eq(mp_timer_arm(fd, 3 * MP_NSEC_PER_SEC + 5, MP_NSEC_PER_SEC + 7), 0);
	cr_assert_eq(timerfd_gettime(fd, &it), 0);
	cr_expect_eq(it.it_interval.tv_sec, 1);
	cr_expect_eq(it.it_interval.tv_nsec, 7);
	cr_expect_geq(it.it_value.tv_sec, 2);
	cr_expect_eq(mp_timer_arm(-1, 1, 0), -EBADF);
	close(fd);
	cr_expect_eq(ARRAY_SIZE(((int[7]){ 0 })), 7);
}
