// SPDX-License-Identifier: MIT
/* memprofd entry point (temporary: tracer only). */
#include <bpf/libbpf.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "live.h"
#include "tracer.h"

static volatile sig_atomic_t stop;
static bool verbose;

struct run {
	struct mp_live *live;
	const struct mp_tracer_opts *opts;
	bool dump;
	int err;
};

static void on_signal(int sig)
{
	stop = 1;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (!verbose)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static const char *fn_name(const struct mp_tracer_opts *o, uint32_t fn)
{
	if (fn >= MP_FN_CUSTOM && fn - MP_FN_CUSTOM < o->n_extra)
		return o->extra[fn - MP_FN_CUSTOM].name;
	return mp_alloc_fn_name(fn);
}

static uint64_t on_heap(void *ctx, const struct mp_heap_event *e)
{
	struct run *run = ctx;
	static const char *const kinds[] = { "?", "alloc", "free", "unknown-free" };

	if (run->dump)
		printf("%s fn=%s tid=%" PRIu32 " ts=%" PRIu64 " addr=0x%" PRIx64 " size=%" PRIu64
		       " caller=0x%" PRIx64 "\n",
		       kinds[e->kind <= 3 ? e->kind : 0], fn_name(run->opts, e->fn), e->tid,
		       e->ts_ns, e->addr, e->size, e->caller);
	return 0;
}

static int on_raw(void *ctx, const struct mp_raw_event *ev)
{
	struct run *run = ctx;
	int r;

	if (run->dump && ev->type == MP_RAW_EXEC)
		printf("exec tid=%" PRIu32 " ts=%" PRIu64 "\n", ev->tid, (uint64_t)ev->ts_ns);
	else if (run->dump && ev->type == MP_RAW_EXIT)
		printf("exit ts=%" PRIu64 "\n", (uint64_t)ev->ts_ns);
	else if (run->dump && ev->type == MP_RAW_RSS_STAT)
		printf("rss member=%" PRIu32 " tid=%" PRIu32 " bytes=%" PRIu64 "\n", ev->fn,
		       ev->tid, (uint64_t)ev->size);
	r = mp_live_apply(run->live, ev, on_heap, run);
	if (r < 0) {
		fprintf(stderr, "memprofd: live table: %s\n", strerror(-r));
		return r;
	}
	return 0;
}

static void print_summary(struct run *run, struct mp_tracer *t)
{
	struct mp_live_stats st;

	mp_live_stats(run->live, &st);
	printf("summary live_bytes=%" PRIu64 " live_blocks=%" PRIu64 " unknown_frees=%" PRIu64
	       " failed=%" PRIu64 " ignored=%" PRIu64 " drops=%" PRIu64 "\n",
	       st.live_bytes, st.live_blocks, st.unknown_frees, st.failed, st.ignored,
	       mp_tracer_drops(t));
	for (uint32_t fn = 0; fn < MP_LIVE_FN_MAX; fn++) {
		const struct mp_live_fn_stats *f = &st.fn[fn];

		if (!f->allocs && !f->frees && !f->unknown_frees)
			continue;
		printf("fn %s allocs=%" PRIu64 " alloc_bytes=%" PRIu64 " frees=%" PRIu64
		       " freed_bytes=%" PRIu64 " unknown_frees=%" PRIu64 "\n",
		       fn_name(run->opts, fn), f->allocs, f->alloc_bytes, f->frees, f->freed_bytes,
		       f->unknown_frees);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: memprofd --pid PID [OPTIONS]\n"
		   "Trace the allocator of a running process with eBPF.\n\n"
		   "  -p, --pid PID          process to attach to\n"
		   "  -d, --duration S       stop after S seconds (default: until the\n"
		   "                         target exits or SIGINT/SIGTERM)\n"
		   "  -e, --dump-events      print every heap event\n"
		   "  --alloc SYM[@OBJ]:size=argN   extra allocation function (N from 0)\n"
		   "  --free SYM[@OBJ]:ptr=argN     extra free function\n"
		   "  --naive-probes         probe every function at its entry\n"
		   "  --rss-exact            also trace the rss_stat tracepoint\n"
		   "  -v, --verbose          show probes and libbpf messages\n"
		   "  -h, --help             this help\n");
}

static int parse_args(int argc, char **argv, struct mp_tracer_opts *o, struct mp_tracer_func *extra,
		      double *duration, bool *dump)
{
	static const struct option lo[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 'd' },
		{ "dump-events", no_argument, NULL, 'e' },
		{ "alloc", required_argument, NULL, 'A' },
		{ "free", required_argument, NULL, 'F' },
		{ "naive-probes", no_argument, NULL, 'N' },
		{ "rss-exact", no_argument, NULL, 'R' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	int c;

	while ((c = getopt_long(argc, argv, "p:d:evh", lo, NULL)) != -1) {
		char *end;

		switch (c) {
		case 'p':
			o->pid = (pid_t)strtol(optarg, &end, 10);
			if (*end || o->pid <= 0) {
				fprintf(stderr, "memprofd: bad --pid '%s'\n", optarg);
				return -EINVAL;
			}
			break;
		case 'd':
			*duration = strtod(optarg, &end);
			if (*end || *duration <= 0) {
				fprintf(stderr, "memprofd: bad --duration '%s'\n", optarg);
				return -EINVAL;
			}
			break;
		case 'e':
			*dump = true;
			break;
		case 'A':
		case 'F':
			if (o->n_extra >= MP_TRACER_MAX_EXTRA ||
			    mp_tracer_parse_func(optarg, c == 'F', &extra[o->n_extra]) < 0) {
				fprintf(stderr, "memprofd: bad --%s '%s'\n",
					c == 'F' ? "free" : "alloc", optarg);
				return -EINVAL;
			}
			o->n_extra++;
			break;
		case 'N':
			o->naive_placement = true;
			break;
		case 'R':
			o->rss_exact = true;
			break;
		case 'v':
			verbose = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (!o->pid) {
		usage(stderr);
		return -EINVAL;
	}
	o->extra = extra;
	return 0;
}

static const char *attach_error(int r)
{
	switch (r) {
	case -ESRCH:
		return "no such process";
	case -EPERM:
	case -EACCES:
		return "not permitted (needs CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE)";
	case -ENOENT:
		return "no allocator found (no malloc and free in the process)";
	case -ENXIO:
		return "an --alloc/--free function was not found in the process";
	case -EINVAL:
		return "not a process id (a thread id?) or bad options";
	default:
		return strerror(-r);
	}
}

int main(int argc, char **argv)
{
	static struct mp_tracer_func extra[MP_TRACER_MAX_EXTRA];
	struct mp_tracer_opts opts = { 0 };
	struct run run = { .opts = &opts };
	struct mp_tracer *t = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	double duration = 0;
	struct timespec t0, now;
	int r, ep;

	if (parse_args(argc, argv, &opts, extra, &duration, &run.dump) < 0)
		return 2;
	libbpf_set_print(libbpf_print);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	r = mp_live_new(&run.live);
	if (r < 0) {
		fprintf(stderr, "memprofd: %s\n", strerror(-r));
		return 1;
	}
	r = mp_tracer_new(&opts, &t);
	if (r < 0) {
		fprintf(stderr, "memprofd: cannot attach to pid %d: %s\n", (int)opts.pid,
			attach_error(r));
		mp_live_free(run.live);
		return 1;
	}
	if (verbose) {
		const struct mp_probe_info *p;
		size_t n = mp_tracer_probes(t, &p);

		for (size_t i = 0; i < n; i++)
			fprintf(stderr, "memprofd: probe %s %s+0x%" PRIx64 " delta=%" PRIu64 "%s\n",
				p[i].name, p[i].path, p[i].offset, p[i].probe_delta,
				p[i].alias_of >= 0 ? " (alias)" : "");
	}
	fprintf(stderr, "memprofd: attached to pid %d\n", (int)opts.pid);
	fflush(stderr);
	ep = mp_tracer_fd(t);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!stop) {
		struct epoll_event ee;
		int timeout = MP_TRACER_POLL_MS;

		if (duration > 0) {
			double el;

			clock_gettime(CLOCK_MONOTONIC, &now);
			el = (double)(now.tv_sec - t0.tv_sec) +
			     (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
			if (el >= duration)
				break;
			if ((duration - el) * 1000 < timeout)
				timeout = (int)((duration - el) * 1000) + 1;
		}
		if (epoll_wait(ep, &ee, 1, timeout) < 0 && errno != EINTR) {
			r = -errno;
			fprintf(stderr, "memprofd: epoll_wait: %m\n");
			break;
		}
		r = mp_tracer_consume(t, on_raw, &run);
		if (r < 0) {
			fprintf(stderr, "memprofd: pid %d: %s\n", (int)opts.pid, strerror(-r));
			break;
		}
		if (mp_tracer_exited(t))
			break;
	}
	if (!mp_tracer_exited(t)) {
		r = mp_tracer_consume(t, on_raw, &run);
		if (r < 0)
			fprintf(stderr, "memprofd: pid %d: %s\n", (int)opts.pid, strerror(-r));
	}
	print_summary(&run, t);
	mp_tracer_free(t);
	mp_live_free(run.live);
	return r < 0 ? 1 : 0;
}
