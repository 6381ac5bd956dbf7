// SPDX-License-Identifier: MIT
/* Idle targets cost the service almost nothing (docs/SERVICE.md "Costs and
 * limits"): 64 processes that only sleep, attached in rss mode and in
 * sampled mode (libmemprof injected), and the daemon's CPU time over 10 s
 * (utime + stime of /proc/PID/stat) must stay under 5% of one CPU. */
#include "helpers.h"

enum { N = 64, SETTLE_MS = 3000, WINDOW_MS = 10000 };

/* utime + stime of @pid, in clock ticks */
static unsigned long long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* after the command's ")": state is field 3, utime 14, stime 15 */
	p = strrchr(buf, ')');
	cr_assert_not_null(p);
	cr_assert_eq(
		sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st),
		2);
	return ut + st;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void idle_targets(const char *mode)
{
	char cfg[128], out[65536], ps[32], want[32];
	char *sleep_argv[] = { "/bin/sleep", "1000", NULL };
	struct daemon d;
	unsigned long long c0, c1;
	double t0, t1, pct;
	pid_t f[N];

	need_root();
	daemon_default_mode = true;
	/* small BPF rings: 64 targets at once; RSS at its default rate */
	snprintf(cfg, sizeof(cfg), "mode = %s\nbpf_ring_size = 256K\n", mode);
	daemon_start(&d, cfg, NULL);
	for (int i = 0; i < N; i++)
		f[i] = spawn(sleep_argv, -1, -1);
	for (int i = 0; i < N; i++) {
		snprintf(ps, sizeof(ps), "%d", (int)f[i]);
		cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, NULL), 0,
			     "attach %d (%s): %s", i, mode, out);
	}
	snprintf(want, sizeof(want), "\ntargets: %d\n", N);
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0);
	cr_assert_not_null(strstr(out, want), "%s", out);
	/* the sessions stop polling within a second of their last record */
	msleep(SETTLE_MS);
	c0 = cpu_ticks(d.pid);
	t0 = now_s();
	msleep(WINDOW_MS);
	c1 = cpu_ticks(d.pid);
	t1 = now_s();
	pct = 100.0 * (double)(c1 - c0) / (double)sysconf(_SC_CLK_TCK) / (t1 - t0);
	cr_log_info("%d idle %s targets: %.2f%% of a CPU over %.1f s", N, mode, pct, t1 - t0);
	fprintf(stderr, "%d idle %s targets: %.2f%% of a CPU over %.1f s\n", N, mode, pct, t1 - t0);
	/* every target still attached: none was given up */
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0);
	cr_assert_not_null(strstr(out, want), "%s", out);
	cr_assert_lt(pct, 5.0, "%d idle %s targets cost %.2f%% of a CPU (at most 5%%)", N, mode,
		     pct);
	cr_assert_eq(daemon_stop(&d), 0);
	for (int i = 0; i < N; i++) {
		kill(f[i], SIGKILL);
		waitpid(f[i], NULL, 0);
	}
}

Test(idle, rss_targets_cost_under_5_percent, .timeout = 600, .fini = cleanup)
{
	idle_targets("rss");
}

Test(idle, sampled_targets_cost_under_5_percent, .timeout = 600, .fini = cleanup)
{
	idle_targets("sampled");
}
