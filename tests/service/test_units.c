// SPDX-License-Identifier: MIT
/* Pure parts of the service: control messages, configuration, the option
 * table, stream URLs, varints. Unprivileged. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "option_table.h"
#include "profile.h"
#include "control.h"
#include "service.h"
#include "stream.h"

static struct mp_ctl_msg msg;

Test(control, parses_every_field_in_order)
{
	static const char text[] = "cmd=attach\npid=42\nstream=tcp://a:1\nstream=unix:/x=y\n";
	uint64_t v;

	cr_assert_eq(mp_ctl_parse(text, strlen(text), &msg), 0);
	cr_assert_eq(msg.n, 4);
	const char *want[][2] = { { "cmd", "attach" },
				  { "pid", "42" },
				  { "stream", "tcp://a:1" },
				  { "stream", "unix:/x=y" } };
	for (size_t i = 0; i < 4; i++) {
		cr_assert_str_eq(msg.f[i].key, want[i][0]);
		cr_assert_str_eq(msg.f[i].value, want[i][1]);
	}
	cr_assert_str_eq(mp_ctl_get(&msg, "stream"), "tcp://a:1");
	cr_assert_null(mp_ctl_get(&msg, "duration_ns"));
	cr_assert_eq(mp_ctl_get_u64(&msg, "pid", 100, &v), 0);
	cr_assert_eq(v, 42);
	cr_assert_eq(mp_ctl_get_u64(&msg, "pid", 41, &v), -EINVAL);
	cr_assert_eq(mp_ctl_get_u64(&msg, "cmd", 100, &v), -EINVAL);
	cr_assert_eq(mp_ctl_get_u64(&msg, "nope", 100, &v), -ENOENT);
	cr_assert_eq(mp_ctl_parse("", 0, &msg), 0);
	cr_assert_eq(msg.n, 0);
}

Test(control, rejects_malformed_text)
{
	static const char *const bad[] = {
		"cmd=list", /* no final newline */
		"=x\n", /* empty key */
		"Cmd=list\n", /* key outside [a-z_] */
		"cmd\n", /* no '=' */
		"cmd=li\0st\n", /* NUL */
	};
	static const size_t len[] = { 8, 3, 9, 4, 10 };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(mp_ctl_parse(bad[i], len[i], &msg), -EBADMSG, "case %zu", i);
	char *many = malloc(MP_CTL_MAX_FIELDS * 4 + 4);
	size_t n = 0;
	for (size_t i = 0; i <= MP_CTL_MAX_FIELDS; i++) {
		memcpy(many + n, "a=\n", 3);
		n += 3;
	}
	cr_assert_eq(mp_ctl_parse(many, n, &msg), -EBADMSG);
	cr_assert_eq(mp_ctl_parse(many, MP_CTL_MAX_MSG + 1, &msg), -EBADMSG);
	free(many);
}

Test(control, says_why_a_request_is_refused)
{
	static const struct {
		const char *text;
		size_t len;
		int err;
		const char *why;
	} cases[] = {
		{ "cmd=list", 8, -EBADMSG, "the last line does not end with a newline" },
		{ "cmd=li\0st\n", 10, -EBADMSG, "NUL byte at offset 6" },
		{ "cmd\n", 4, -EBADMSG, "line 1 is not key=value" },
		{ "cmd=list\nA=1\n", 13, -EBADMSG, "line 2: the key is not 1 to 64 of [a-z_]" },
		{ "cmd=list\nfoo=1\n", 15, -EBADMSG, "unknown key 'foo' for list" },
		{ "cmd=attach\npid=1\nstream=a\nstream=b\nmode=rss\nmode=rss\n", 53, -EBADMSG,
		  "key 'mode' given twice" },
		{ "pid=1\n", 6, -EBADMSG, "the first line is not cmd=..." },
		{ "", 0, -EBADMSG, "the first line is not cmd=..." },
		{ "cmd=frob\n", 9, -EOPNOTSUPP, "unknown command" },
		{ "cmd=attach\npid=1\nduration_ns=5\nstream=a\nstream=b\nmode=rss\n"
		  "sample_bytes=9\n",
		  73, 0, "" },
		{ "cmd=attach\npid=1\nstacks=1\n", 26, 0, "" },
		{ "cmd=attach\npid=1\ntracer=bpf\n", 28, 0, "" },
		{ "cmd=dump\npid=1\ntracer=bpf\n", 26, -EBADMSG, "unknown key 'tracer' for dump" },
		{ "cmd=detach\npid=1\nstacks=1\n", 26, -EBADMSG,
		  "unknown key 'stacks' for detach" },
	};
	char why[160];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int r = mp_ctl_parse(cases[i].text, cases[i].len, &msg);

		why[0] = '\0';
		if (r == 0)
			r = mp_ctl_check_request(&msg, why, sizeof(why));
		else
			snprintf(why, sizeof(why), "%s", msg.why);
		cr_assert_eq(r, cases[i].err, "case %zu: %d", i, r);
		cr_assert_str_eq(why, cases[i].why, "case %zu", i);
	}
}

Test(control, builder_and_socket_round_trip_with_a_descriptor)
{
	struct mp_ctl_builder *b = malloc(sizeof(*b));
	int sv[2], fd = -1;

	mp_ctl_build_init(b);
	mp_ctl_add(b, "cmd", "%s", "dump");
	mp_ctl_add(b, "pid", "%d", 7);
	mp_ctl_add(b, "message", "two\nlines");
	cr_assert_eq(mp_ctl_build_end(b), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(mp_ctl_send(sv[0], b->buf, b->len, 1), 0);
	cr_assert_eq(mp_ctl_recv(sv[1], &msg, &fd), 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(msg.n, 3);
	cr_assert_str_eq(mp_ctl_get(&msg, "cmd"), "dump");
	cr_assert_str_eq(mp_ctl_get(&msg, "pid"), "7");
	cr_assert_str_eq(mp_ctl_get(&msg, "message"), "two lines");
	close(fd);
	/* A receiver that accepts no descriptor refuses one. */
	cr_assert_eq(mp_ctl_send(sv[0], b->buf, b->len, 1), 0);
	cr_assert_eq(mp_ctl_recv(sv[1], &msg, NULL), -EBADMSG);
	mp_ctl_build_init(b);
	mp_ctl_add(b, "Bad", "x");
	cr_assert_eq(mp_ctl_build_end(b), -EINVAL);
	close(sv[0]);
	close(sv[1]);
	free(b);
}

static int load_text(const char *text, struct mp_config **c, char *err, size_t errlen)
{
	char path[] = "/tmp/memprof-conf-XXXXXX";
	int fd = mkstemp(path), r;

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	r = mp_config_load(path, c, err, errlen);
	unlink(path);
	return r;
}

Test(config, every_key)
{
	struct mp_config *c = NULL;
	char err[256] = "";

	cr_assert_eq(load_text("# comment\n\ncollector = tcp://127.0.0.1:9\n"
			       "collector=unix:/run/c.sock\n  owner = libx*=x  \nrss_hz = 7\n"
			       "pss_every = 3\nmax_targets = 5\nstream_interval = 0.5\n"
			       "buffer_size = 2M\nbpf_ring_size = 64K\nstacks = yes\n"
			       "stack_depth = 32\ntracer = inprocess\nmax_connections = 9\n"
			       "max_connections_per_uid = 3\nmemory_budget = 1G\nmode = sampled\n"
			       "sample_bytes = 8K\nstream_collectors_per_uid = 0\n"
			       "stream_total_size = 5M\n",
			       &c, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(c->n_collectors, 2);
	cr_assert_str_eq(c->collectors[0], "tcp://127.0.0.1:9");
	cr_assert_str_eq(c->collectors[1], "unix:/run/c.sock");
	cr_assert_eq(c->n_owners, 1);
	cr_assert_str_eq(c->owners[0], "libx*=x");
	cr_assert_eq(c->rss_hz, 7);
	cr_assert_eq(c->pss_every, 3);
	cr_assert_eq(c->max_targets, 5);
	cr_assert_eq(c->stream_interval_ns, 500000000ull);
	cr_assert_eq(c->buffer_bytes, 2ull << 20);
	cr_assert_eq(c->bpf_ring_bytes, 64u << 10);
	cr_assert(c->stacks);
	cr_assert_eq(c->stack_depth, 32);
	cr_assert_eq(c->tracer, MP_PATH_INPROCESS);
	cr_assert_eq(c->max_conns, 9);
	cr_assert_eq(c->max_conns_per_uid, 3);
	cr_assert_eq(c->memory_budget, 1ull << 30);
	cr_assert_eq(c->mode, MP_TRACE_SAMPLED);
	cr_assert_eq(c->sample_bytes, 8192);
	cr_assert_eq(c->stream_per_uid, 0);
	cr_assert_eq(c->stream_total_bytes, 5ull << 20);
	mp_config_free(c);
}

Test(config, errors_name_the_line)
{
	struct mp_config *c = NULL;
	char err[256];

	cr_assert_eq(load_text("rss_hz = 1\nfoo = 2\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "2: unknown key 'foo'");
	cr_assert_eq(load_text("collector = ftp://x:1\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "1: invalid value 'ftp://x:1' for collector");
	cr_assert_eq(load_text("\nbpf_ring_size = 3000\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "2: invalid value '3000' for bpf_ring_size");
	cr_assert_eq(load_text("stacks = maybe\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "1: invalid value 'maybe' for stacks");
	cr_assert_eq(load_text("tracer = ebpf\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "1: invalid value 'ebpf' for tracer");
	cr_assert_eq(load_text("stack_depth = 257\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "1: invalid value '257' for stack_depth");
	cr_assert_eq(load_text("sample_bytes = 1099511627777\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "1: invalid value '1099511627777' for sample_bytes");
	cr_assert_eq(load_text("stream_interval = 0.01\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "1: invalid value '0.01' for stream_interval");
	cr_assert_eq(load_text("duration_ns = 5\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "1: unknown key 'duration_ns'");
	cr_assert_eq(load_text("max_targets\n", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "1: expected 'key = value'");
	cr_assert_null(c);
}

/* One bound, written once: the command line, the file and a request
 * accept the same sample_bytes. */
Test(options, one_bound_for_every_front)
{
	static const enum mp_opt_front fronts[] = { MP_OPT_CLI, MP_OPT_FILE, MP_OPT_REQUEST };
	const struct mp_option *o = mp_opt_by_key("sample_bytes");
	struct mp_opt_value v;

	cr_assert_not_null(o);
	cr_assert_eq(o, mp_opt_by_name("sample-bytes"));
	for (size_t i = 0; i < 3; i++) {
		cr_assert_eq(mp_opt_parse(o, fronts[i], "1099511627776", &v), 0);
		cr_assert_eq(v.u, 1ull << 40);
		cr_assert_eq(mp_opt_parse(o, fronts[i], "1024G", &v), 0);
		cr_assert_eq(v.u, 1ull << 40);
		cr_assert_eq(mp_opt_parse(o, fronts[i], "4k", &v), 0);
		cr_assert_eq(v.u, 4096);
		v.u = 7;
		cr_assert_eq(mp_opt_parse(o, fronts[i], "1099511627777", &v), -EINVAL);
		cr_assert_eq(mp_opt_parse(o, fronts[i], "0", &v), -EINVAL);
		cr_assert_eq(mp_opt_parse(o, fronts[i], "-1", &v), -EINVAL);
		cr_assert_eq(mp_opt_parse(o, fronts[i], " 1", &v), -EINVAL);
		cr_assert_eq(mp_opt_parse(o, fronts[i], "1KB", &v), -EINVAL);
		cr_assert_eq(mp_opt_parse(o, fronts[i], "", &v), -EINVAL);
		cr_assert_eq(v.u, 7, "a refused value leaves the result alone");
	}
}

Test(options, spellings_of_each_front)
{
	const struct mp_option *stacks = mp_opt_by_key("stacks");
	const struct mp_option *dur = mp_opt_by_name("duration");
	const struct mp_option *iv = mp_opt_by_key("stream_interval");
	struct mp_opt_value v;

	cr_assert_eq(mp_opt_parse(stacks, MP_OPT_FILE, "yes", &v), 0);
	cr_assert_eq(v.u, 1);
	cr_assert_eq(mp_opt_parse(stacks, MP_OPT_FILE, "no", &v), 0);
	cr_assert_eq(v.u, 0);
	cr_assert_eq(mp_opt_parse(stacks, MP_OPT_FILE, "1", &v), -EINVAL);
	cr_assert_eq(mp_opt_parse(stacks, MP_OPT_REQUEST, "1", &v), 0);
	cr_assert_eq(v.u, 1);
	cr_assert_eq(mp_opt_parse(stacks, MP_OPT_REQUEST, "yes", &v), -EINVAL);
	/* Seconds on the command line, nanoseconds in a request. */
	cr_assert_eq(mp_opt_parse(dur, MP_OPT_CLI, "0.3", &v), 0);
	cr_assert_eq(v.u, 300000000ull);
	cr_assert_eq(mp_opt_parse(dur, MP_OPT_CLI, "1e-12", &v), 0);
	cr_assert_eq(v.u, 1, "a positive duration is never 0");
	cr_assert_eq(mp_opt_parse(dur, MP_OPT_CLI, "0", &v), -EINVAL);
	cr_assert_eq(mp_opt_parse(dur, MP_OPT_CLI, "1e9", &v), 0);
	cr_assert_eq(mp_opt_parse(dur, MP_OPT_CLI, "1.1e9", &v), -EINVAL);
	cr_assert_eq(mp_opt_parse(dur, MP_OPT_CLI, "inf", &v), -EINVAL);
	cr_assert_eq(mp_opt_parse(dur, MP_OPT_REQUEST, "300000000", &v), 0);
	cr_assert_eq(v.u, 300000000ull);
	cr_assert_eq(mp_opt_parse(dur, MP_OPT_REQUEST, "0.3", &v), -EINVAL);
	cr_assert_eq(mp_opt_parse(dur, MP_OPT_REQUEST, "1000000000000000001", &v), -EINVAL);
	/* --stream-interval and stream_interval: 0.05 s to a day. */
	cr_assert_eq(mp_opt_by_name("stream-interval"), iv);
	cr_assert_eq(mp_opt_parse(iv, MP_OPT_FILE, "0.05", &v), 0);
	cr_assert_eq(v.u, 50000000ull);
	cr_assert_eq(mp_opt_parse(iv, MP_OPT_FILE, "0.04", &v), -EINVAL);
	cr_assert_eq(mp_opt_parse(iv, MP_OPT_CLI, "86401", &v), -EINVAL);
	cr_assert_eq(mp_opt_parse(mp_opt_by_name("p"), MP_OPT_CLI, "2147483647", &v), 0);
	cr_assert_eq(mp_opt_parse(mp_opt_by_name("p"), MP_OPT_CLI, "2147483648", &v), -EINVAL);
	cr_assert_eq(mp_opt_parse(mp_opt_by_name("merge-lag-ms"), MP_OPT_CLI, "3", &v), 0);
	cr_assert_eq(v.u, 3000000ull);
	cr_assert_eq(mp_opt_parse(mp_opt_by_key("bpf_ring_size"), MP_OPT_FILE, "3000", &v),
		     -EINVAL);
	cr_assert_eq(mp_opt_parse(mp_opt_by_key("bpf_ring_size"), MP_OPT_FILE, "64K", &v), 0);
	cr_assert_eq(v.u, 65536);
	cr_assert_eq(mp_opt_parse(mp_opt_by_key("mode"), MP_OPT_REQUEST, "sampled", &v), 0);
	cr_assert_eq(v.u, MP_TRACE_SAMPLED);
	cr_assert_eq(mp_opt_parse(mp_opt_by_key("tracer"), MP_OPT_FILE, "bpf", &v), 0);
	cr_assert_eq(v.u, MP_PATH_BPF);
}

Test(options, errors_say_what_is_valid)
{
	char hint[160];

	mp_opt_hint(mp_opt_by_key("sample_bytes"), MP_OPT_CLI, hint, sizeof(hint));
	cr_assert_str_eq(hint, "1 to 1099511627776, suffix K, M or G");
	mp_opt_hint(mp_opt_by_key("mode"), MP_OPT_REQUEST, hint, sizeof(hint));
	cr_assert_str_eq(hint, "precise, sampled or rss");
	mp_opt_hint(mp_opt_by_key("stacks"), MP_OPT_REQUEST, hint, sizeof(hint));
	cr_assert_str_eq(hint, "0 or 1");
	mp_opt_hint(mp_opt_by_key("stacks"), MP_OPT_FILE, hint, sizeof(hint));
	cr_assert_str_eq(hint, "yes or no");
	mp_opt_hint(mp_opt_by_name("stream-interval"), MP_OPT_CLI, hint, sizeof(hint));
	cr_assert_str_eq(hint, "seconds, 0.05 to 86400");
	mp_opt_hint(mp_opt_by_name("duration"), MP_OPT_CLI, hint, sizeof(hint));
	cr_assert_str_eq(hint, "seconds, more than 0, at most 1000000000");
	mp_opt_hint(mp_opt_by_key("duration_ns"), MP_OPT_REQUEST, hint, sizeof(hint));
	cr_assert_str_eq(hint, "nanoseconds, at most 1000000000000000000");
	mp_opt_hint(mp_opt_by_key("bpf_ring_size"), MP_OPT_FILE, hint, sizeof(hint));
	cr_assert_str_eq(hint, "a power of two, 4096 to 1073741824, suffix K, M or G");
}

/* The table is indexed by id, names are unique, and every key a request
 * may carry is one the control protocol lets through for attach. */
Test(options, table_is_consistent_with_the_protocol)
{
	static char text[256];
	char why[160];

	for (size_t i = 0; i < MP_OPT_N; i++) {
		const struct mp_option *o = &mp_options_table[i];

		cr_assert_eq(o->id, (enum mp_opt_id)i, "entry %zu", i);
		cr_assert(o->name || o->key, "entry %zu has no name", i);
		if (o->name)
			cr_assert_eq(mp_opt_by_name(o->name), o, "--%s twice", o->name);
		if (o->key)
			cr_assert_eq(mp_opt_by_key(o->key), o, "key %s twice", o->key);
		if (!(o->where & MP_OPT_ATTACH) || !o->key)
			continue;
		snprintf(text, sizeof(text), "cmd=attach\npid=1\n%s=x\n", o->key);
		cr_assert_eq(mp_ctl_parse(text, strlen(text), &msg), 0);
		cr_assert_eq(mp_ctl_check_request(&msg, why, sizeof(why)), 0, "%s: %s", o->key,
			     why);
	}
}

/* --help comes from the table: the columns of the hand-written text. */
Test(options, help_from_the_table)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	mp_opt_help(f, MP_OPT_PID);
	fclose(f);
	cr_assert_not_null(strstr(buf, "  -p, --pid PID           process to profile (required)\n"
				       "      --stream URL        also stream profile chunks to a "
				       "collector:\n"
				       "                          tcp://HOST:PORT, unix:PATH"),
			   "%s", buf);
	cr_assert_not_null(strstr(buf, "      --stream-interval S send a chunk every S seconds"));
	cr_assert_not_null(strstr(buf, "  -d, --duration SECONDS  stop after SECONDS"));
	cr_assert_not_null(strstr(buf, "      --alloc SYM[@OBJ]:size=argN[,ptr=ret|*argN]"
				       "[,ok=ret==0|ret!=0]\n"
				       "              [,pool=NAME[,kind=device|host]]\n"
				       "                          also trace allocator function"));
	cr_assert_not_null(strstr(buf, "      --rss-exact         attribute every RSS change"));
	cr_assert_not_null(strstr(buf, "  -h, --help              show this help\n"));
	cr_assert_null(strstr(buf, "merge-lag"), "hidden");
	cr_assert_null(strstr(buf, "--no-preload"), "memprof run only");
	cr_assert_null(strstr(buf, "max_targets"), "configuration only");
	free(buf);
	f = open_memstream(&buf, &len);
	mp_opt_help(f, MP_OPT_RUN);
	fclose(f);
	cr_assert_null(strstr(buf, "--pid"));
	cr_assert_null(strstr(buf, "--stream"));
	cr_assert_not_null(strstr(buf, "      --no-preload        do not LD_PRELOAD libmemprof"));
	free(buf);
}

Test(stream, url_check)
{
	cr_assert_eq(mp_stream_url_check("tcp://127.0.0.1:4000"), 0);
	cr_assert_eq(mp_stream_url_check("tcp://[::1]:4000"), 0);
	cr_assert_eq(mp_stream_url_check("tcp://collector.example:1"), 0);
	cr_assert_eq(mp_stream_url_check("unix:/run/x.sock"), 0);
	cr_assert_eq(mp_stream_url_check("unix:relative"), -EINVAL);
	cr_assert_eq(mp_stream_url_check("tcp://host"), -EINVAL);
	cr_assert_eq(mp_stream_url_check("tcp://host:0"), -EINVAL);
	cr_assert_eq(mp_stream_url_check("tcp://host:65536"), -EINVAL);
	cr_assert_eq(mp_stream_url_check("tcp://host:1/path"), -EINVAL);
	cr_assert_eq(mp_stream_url_check("udp://host:1"), -EINVAL);
	int http = mp_stream_url_check("http://127.0.0.1:4040/ingest");
	cr_assert(http == 0 || http == -EPROTONOSUPPORT);
	cr_assert_eq(mp_stream_url_check("http://127.0.0.1:4040/in gest"), -EINVAL);
}

Test(stream, varints)
{
	static const uint64_t vals[] = { 0, 1, 127, 128, 300, 1ull << 35, UINT64_MAX };
	uint8_t buf[10];
	uint64_t v;

	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		size_t n = mp_varint_encode(vals[i], buf);

		cr_assert_eq(mp_varint_decode(buf, n, &v), (int)n);
		cr_assert_eq(v, vals[i]);
		cr_assert_eq(mp_varint_decode(buf, n - 1, &v), 0, "truncated");
	}
	memset(buf, 0xff, sizeof(buf));
	cr_assert_eq(mp_varint_decode(buf, 10, &v), -EBADMSG);
}

/* The service injects libmemprof only where its requester could ptrace
 * the target itself: root always; another user where Yama lets a user
 * attach to its own processes (ptrace_scope 0, or no Yama). */
Test(authorize, injection_follows_the_requesters_ptrace_rights)
{
	char dir[] = "/tmp/memprof-yama-XXXXXX", scope[64], why[160];
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(scope, sizeof(scope), "%s/ptrace_scope", dir);
	cr_assert_null(mp_service_inject_refusal(0, scope, why, sizeof(why)), "no file");
	cr_assert_null(mp_service_inject_refusal(1000, scope, why, sizeof(why)), "no Yama");
	for (int s = 0; s <= 3; s++) {
		f = fopen(scope, "w");
		cr_assert_not_null(f);
		fprintf(f, "%d\n", s);
		fclose(f);
		cr_assert_null(mp_service_inject_refusal(0, scope, why, sizeof(why)), "root, %d",
			       s);
		if (s == 0) {
			cr_assert_null(mp_service_inject_refusal(1000, scope, why, sizeof(why)));
			continue;
		}
		cr_assert_eq(mp_service_inject_refusal(1000, scope, why, sizeof(why)), why);
		char want[160];

		snprintf(want, sizeof(want),
			 "uid 1000 may not ptrace it (Yama ptrace_scope %d: only root's requests "
			 "inject)",
			 s);
		cr_assert_str_eq(why, want);
	}
	unlink(scope);
	rmdir(dir);
}
