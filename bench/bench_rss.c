// SPDX-License-Identifier: MIT
/*
 * bench-rss [MIB...]: cost of one RSS sample (status) and of one with Pss
 * (status + smaps_rollup) on a child holding MIB of resident anonymous memory
 * (default 1 64 256). Baseline, measured in the same run: a pread of
 * /proc/PID/stat, the smallest /proc read of the same process.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rss.h"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int bench(size_t mib)
{
	int ready[2];
	char c, path[64], buf[256];
	struct mp_rss_sampler *s = NULL;
	struct mp_rss_sample r;
	double t0, base, status, pss;
	int fd, n_status = 2000, n_pss = mib > 128 ? 20 : 200, err;
	pid_t pid;

	if (pipe(ready) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		char *m = mmap(NULL, mib << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);

		if (m == MAP_FAILED)
			_exit(1);
		for (size_t i = 0; i < mib << 20; i += 4096)
			m[i] = 1;
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	if (read(ready[0], &c, 1) != 1)
		goto fail;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		goto fail;
	t0 = now_us();
	for (int i = 0; i < n_status; i++)
		if (pread(fd, buf, sizeof(buf), 0) < 0)
			break;
	base = (now_us() - t0) / n_status;
	close(fd);
	err = mp_rss_sampler_new(pid, MP_RSS_DEFAULT_HZ, 1, &s);
	if (err < 0)
		goto fail;
	t0 = now_us();
	for (int i = 0; i < n_status; i++)
		mp_rss_sampler_read(s, false, &r);
	status = (now_us() - t0) / n_status;
	t0 = now_us();
	for (int i = 0; i < n_pss; i++)
		mp_rss_sampler_read(s, true, &r);
	pss = (now_us() - t0) / n_pss - status;
	printf("%5zu MiB (VmRSS %llu MiB): stat %.1f us | status sample %.1f us (%.1fx) | "
	       "smaps_rollup %.1f us (%.1fx) | defaults (%u Hz, Pss every %u): %.2f%% of a core\n",
	       mib, (unsigned long long)(r.vm_rss >> 20), base, status, status / base, pss,
	       pss / base, MP_RSS_DEFAULT_HZ, MP_RSS_DEFAULT_PSS_EVERY,
	       (status * MP_RSS_DEFAULT_HZ + pss * MP_RSS_DEFAULT_HZ / MP_RSS_DEFAULT_PSS_EVERY) /
		       1e4);
	mp_rss_sampler_free(s);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(ready[0]);
	return 0;
fail:
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(ready[0]);
	return -1;
}

int main(int argc, char **argv)
{
	static const size_t defaults[] = { 1, 64, 256 };

	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			if (bench(strtoul(argv[i], NULL, 10)) < 0)
				return 1;
		return 0;
	}
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
		if (bench(defaults[i]) < 0)
			return 1;
	return 0;
}
