/* SPDX-License-Identifier: MIT */
/*
 * `memprof convert` on profiles of real processes (tests/e2e fixtures,
 * real BPF): the trace passes the viewer checks and carries the exact
 * figures. Needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE).
 */
#include <inttypes.h>

#include "../common/helpers.h"
#include "../output/helpers_chrome.h"
#include "../output/run_helpers.h"

static char profile[128], trace[160];

static void need_root(void)
{
	mp_test_need_root("BPF and ptrace");
}

static char *fixture(const char *name)
{
	static char path[4096];

	snprintf(path, sizeof(path), "%s/tests/e2e/fixture-%s", getenv("MEMPROF_BUILD_ROOT"), name);
	return path;
}

/* Profiles the fixture, converts the profile to a trace, returns its text. */
static char *profile_and_convert(const char *name)
{
	struct run r;
	int fd;

	snprintf(profile, sizeof(profile), "/tmp/memprof-conv-real-%d-XXXXXX", (int)getpid());
	fd = mkstemp(profile);
	cr_assert_geq(fd, 0);
	close(fd);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "run", "-o", profile, "--", fixture(name),
				NULL },
		    NULL);
	cr_assert_eq(r.status, 0, "memprof run %s: %s", name, r.err);
	run_free(&r);
	snprintf(trace, sizeof(trace), "%s.json", profile);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", profile, "--to", "chrome", "-o",
				trace, NULL },
		    NULL);
	cr_assert_eq(r.status, 0, "convert: %s", r.err);
	cr_expect_str_empty(r.err);
	run_free(&r);
	return read_whole(trace);
}

static void cleanup(void)
{
	unlink(profile);
	unlink(trace);
}

/* The slice line of kernel @name (the only one). */
static char *slice_line(const char *text, const char *name)
{
	char key[128], *l, *eol, *line;

	snprintf(key, sizeof(key), "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"%s\",", name);
	l = strstr(text, key);
	cr_assert_not_null(l, "no slice %s in %s", name, text);
	cr_assert_null(strstr(l + 1, key), "two slices %s", name);
	eol = strchr(l, '\n');
	cr_assert_not_null(eol);
	line = strndup(l, (size_t)(eol - l));
	cr_assert_not_null(line);
	return line;
}

/* 64 MiB allocated in kernel "touch" and freed after it: the slice has the
 * exact figures, and the heap counter reads 64 MiB at the slice's end. */
Test(convert_real, rss_fixture_trace)
{
	char *text, *line, *val, want[256];
	unsigned long long ts_us, ts_frac, dur_us, dur_frac, end;
	int pid, tid;

	need_root();
	text = profile_and_convert("rss");
	val = validate_text(text);
	cr_expect(!strncmp(val, "ok X=1 C=", 9) && strstr(val, " M=2 i=0 threads=1"), "%s", val);
	line = slice_line(text, "touch");
	cr_assert_eq(sscanf(line,
			    "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"touch\",\"pid\":%d,"
			    "\"tid\":%d,\"ts\":%llu.%3llu,\"dur\":%llu.%3llu,",
			    &pid, &tid, &ts_us, &ts_frac, &dur_us, &dur_frac),
		     6, "%s", line);
	cr_expect_eq(pid, tid);
	cr_expect(strstr(line, ",\"args\":{\"index\":0,\"bytesAdded\":67108864,\"tensorsAdded\":1,"
			       "\"allocBytes\":67108864,\"allocCount\":1,\"freeBytes\":0,"
			       "\"freeCount\":0,\"selfBytesAdded\":67108864,"
			       "\"selfAllocBytes\":67108864,\"totalBytesSnapshot\":67108864,"
			       "\"totalTensorsSnapshot\":1,\"peakBytes\":67108864,"
			       "\"peakAdded\":67108864,\"retainedBytes\":0,\"retainedCount\":0,"
			       "\"rssBegin\":"),
		  "%s", line);
	end = (ts_us * 1000 + ts_frac) + (dur_us * 1000 + dur_frac);
	snprintf(want, sizeof(want),
		 "{\"ph\":\"C\",\"name\":\"heap\",\"pid\":%d,\"ts\":%llu.%03llu,\"args\":{\"live\":"
		 "67108864}}",
		 pid, end / 1000, end % 1000);
	cr_expect(strstr(text, want), "no %s in %s", want, text);
	snprintf(want, sizeof(want),
		 "{\"ph\":\"C\",\"name\":\"heap\",\"pid\":%d,\"ts\":0.000,\"args\":{\"live\":0}}",
		 pid);
	cr_expect(strstr(text, want), "no %s in %s", want, text);
	cr_expect(strstr(text, "{\"ph\":\"C\",\"name\":\"rss\","), "no rss counter");
	free(val);
	free(line);
	free(text);
	cleanup();
}

/* Thread pool: the workers' allocations are in the dispatcher's slice;
 * only threads with kernels get a track. `--to json` is the report. */
Test(convert_real, pool_fixture_trace_and_json)
{
	char *text, *line, *val;
	struct run a, b;

	need_root();
	text = profile_and_convert("pool");
	val = validate_text(text);
	cr_expect(!strncmp(val, "ok X=1 C=", 9) && strstr(val, " M=2 i=0 threads=1"), "%s", val);
	line = slice_line(text, "parallel_for");
	cr_expect(strstr(line, "\"bytesAdded\":4000,\"tensorsAdded\":2,\"allocBytes\":4000,"
			       "\"allocCount\":2,\"freeBytes\":0,\"freeCount\":0,"
			       "\"selfBytesAdded\":4000,\"selfAllocBytes\":4000,"),
		  "%s", line);
	cr_expect(strstr(line, "\"crossThreadAllocs\":2,\"crossThreadBytes\":4000"), "%s", line);

	a = run_cmd((char *[]){ (char *)memprof_bin(), "convert", profile, "--to", "json", NULL },
		    NULL);
	b = run_cmd(
		(char *[]){ (char *)memprof_bin(), "report", profile, "--format", "json", NULL },
		NULL);
	cr_expect_eq(a.status, 0);
	cr_expect_eq(b.status, 0);
	cr_expect_str_eq(a.out, b.out);
	run_free(&a);
	run_free(&b);
	free(val);
	free(line);
	free(text);
	cleanup();
}
