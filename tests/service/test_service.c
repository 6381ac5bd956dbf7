// SPDX-License-Identifier: MIT
/*
 * The memprofd service end to end: a real daemon on a temporary control
 * socket, real fixture processes (tests/e2e/fixture-attach: in kernel
 * "outer" with 500 bytes, then on SIGUSR1 700 more, frees the 500, exits),
 * the real memprof client. Needs root; says why it skips otherwise.
 */
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>

#include "helpers.h"

static void assert_outer_untouched(const struct mp_profile *p, pid_t pid)
{
	struct mp_mem_stats zero = { 0 };

	cr_assert_eq(p->pid, pid);
	cr_assert_str_eq(p->exe, path_of("tests/e2e/fixture-attach"));
	cr_assert_eq(p->n_invocations, 1);
	cr_assert_str_eq(p->names[p->invocations[0].name], "outer");
	cr_assert_eq(p->invocations[0].flags, MP_INV_F_OPEN_AT_ATTACH | MP_INV_F_TRUNCATED);
	cr_assert(!memcmp(&p->invocations[0].incl, &zero, sizeof(zero)));
	cr_assert(!memcmp(&p->mem, &zero, sizeof(zero)));
	cr_assert_eq(p->truncated, true);
	cr_assert_eq(p->unknown_frees, 0);
}

/* "pid=P id=N uid=U state=running seconds=S output=O streams=K exe=E" */
static void assert_list_line(const char *line, pid_t pid, unsigned uid, const char *output)
{
	char want_head[128], want_tail[4200];
	const char *sec;

	snprintf(want_head, sizeof(want_head), "pid=%d id=", (int)pid);
	cr_assert(!strncmp(line, want_head, strlen(want_head)), "list line: %s", line);
	snprintf(want_head, sizeof(want_head), " uid=%u state=running seconds=", uid);
	cr_assert_not_null(strstr(line, want_head), "list line: %s", line);
	sec = strstr(line, "seconds=") + 8;
	while ((*sec >= '0' && *sec <= '9') || *sec == '.')
		sec++;
	snprintf(want_tail, sizeof(want_tail), " output=%s streams=0 exe=%s", output,
		 path_of("tests/e2e/fixture-attach"));
	cr_assert_str_eq(sec, want_tail);
}

Test(service, lifecycle_attach_list_status_dump_detach_sigterm, .timeout = 120, .fini = cleanup)
{
	struct daemon d;
	char out[8192], want[256], *lines[8], *save = NULL;
	pid_t f1, f2;
	int n = 0;

	need_root();
	daemon_start(&d, "# test\nrss_hz = 50\nmax_targets = 8\n", NULL);
	f1 = fixture_start(NULL);
	f2 = fixture_start(NULL);
	char p1s[32], p2s[32];
	snprintf(p1s, sizeof(p1s), "%d", (int)f1);
	snprintf(p2s, sizeof(p2s), "%d", (int)f2);

	cr_assert_eq(client(out, sizeof(out), &d, "attach", p1s, "-o", tmp_of("p1.memprof"), NULL),
		     0);
	snprintf(want, sizeof(want), "attached to pid %d (target 1)\n", (int)f1);
	cr_assert_str_eq(out, want);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", p2s, "-o", tmp_of("p2.memprof"), NULL),
		     0);
	snprintf(want, sizeof(want), "attached to pid %d (target 2)\n", (int)f2);
	cr_assert_str_eq(out, want);
	/* One target per process. */
	cr_assert_eq(client(out, sizeof(out), &d, "attach", p1s, NULL), 1);
	cr_assert_str_eq(out, "");

	cr_assert_eq(client(out, sizeof(out), &d, "list", NULL), 0);
	for (char *l = strtok_r(out, "\n", &save); l && n < 8; l = strtok_r(NULL, "\n", &save))
		lines[n++] = l;
	cr_assert_eq(n, 2);
	/* Newest first. */
	assert_list_line(lines[0], f2, 0, "file");
	assert_list_line(lines[1], f1, 0, "file");

	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0);
	snprintf(want, sizeof(want), "pid: %d\n", (int)d.pid);
	cr_assert(!strncmp(out, want, strlen(want)), "status: %s", out);
	snprintf(want, sizeof(want),
		 "targets: 2\nmax_targets: 8\nconfig: %s\nstream_interval_s: 10.000\nrss_hz: 50\n",
		 tmp_of("memprofd.conf"));
	cr_assert_not_null(strstr(out, want), "status: %s", out);

	/* A snapshot, the session goes on. */
	cr_assert_eq(client(out, sizeof(out), &d, "dump", p1s, "-o", tmp_of("d1.memprof"), NULL),
		     0);
	struct mp_profile *p = load(tmp_of("d1.memprof"));
	assert_outer_untouched(p, f1);
	mp_profile_free(p);
	/* Without -o: the table on stdout. */
	cr_assert_eq(client(out, sizeof(out), &d, "dump", p1s, NULL), 0);
	snprintf(want, sizeof(want), "memprofd profile: pid %d %s\n", (int)f1,
		 path_of("tests/e2e/fixture-attach"));
	cr_assert(!strncmp(out, want, strlen(want)), "dump: %s", out);

	cr_assert_eq(client(out, sizeof(out), &d, "detach", p2s, NULL), 0);
	snprintf(want, sizeof(want), "detached from pid %d\n", (int)f2);
	cr_assert_str_eq(out, want);
	p = load(tmp_of("p2.memprof"));
	assert_outer_untouched(p, f2);
	mp_profile_free(p);
	cr_assert_eq(client(out, sizeof(out), &d, "detach", p2s, NULL), 1);

	/* SIGTERM flushes the target still attached. */
	cr_assert_eq(daemon_stop(&d), 0);
	p = load(tmp_of("p1.memprof"));
	assert_outer_untouched(p, f1);
	mp_profile_free(p);
	cr_assert(log_has(&d, "stopping: flushing 1 targets"));
	cr_assert(!can_connect(d.control));
	fixture_finish(f1);
	fixture_finish(f2);
}

/* Until every target has ended (their profiles are then written). */
static void wait_no_targets(const struct daemon *d)
{
	char out[4096];

	for (int i = 0; i < 1000; i++) {
		cr_assert_eq(client(out, sizeof(out), d, "list", NULL), 0);
		if (!strcmp(out, "no targets\n"))
			return;
		msleep(20);
	}
	cr_assert_fail("targets still listed: %s", out);
}

Test(service, target_exit_flushes_its_profile, .timeout = 120, .fini = cleanup)
{
	struct daemon d;
	char out[4096], ps[32];
	pid_t f;

	need_root();
	daemon_start(&d, "", NULL);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "-o", tmp_of("p.memprof"), NULL),
		     0);
	fixture_finish(f);
	wait_no_targets(&d);
	struct mp_profile *p = load(tmp_of("p.memprof"));
	struct mp_mem_stats want = {
		.bytes_added = 700, .tensors_added = 1, .alloc_bytes = 700, .alloc_count = 1
	};
	cr_assert_eq(p->n_invocations, 1);
	cr_assert_eq(p->invocations[0].flags, MP_INV_F_OPEN_AT_ATTACH);
	cr_assert(!memcmp(&p->invocations[0].incl, &want, sizeof(want)));
	cr_assert_eq(p->unknown_frees, 1);
	cr_assert_eq(p->truncated, false);
	mp_profile_free(p);
	cr_assert_eq(daemon_stop(&d), 0);
}

/* The service's default is rss mode (no allocator probes: cheap enough to
 * leave on); `attach --mode precise` asks for every allocation. */
Test(service, default_mode_is_rss_and_attach_can_ask_for_precise, .timeout = 120, .fini = cleanup)
{
	struct mp_mem_stats none = { 0 }, want = {
		.bytes_added = 700, .tensors_added = 1, .alloc_bytes = 700, .alloc_count = 1
	};
	const char *modes[2] = { NULL, "precise" };
	struct daemon d;
	char out[4096], ps[32], file[64];

	need_root();
	daemon_default_mode = true;
	daemon_start(&d, "", NULL);
	daemon_default_mode = false;
	for (int i = 0; i < 2; i++) {
		pid_t f = fixture_start(NULL);

		snprintf(ps, sizeof(ps), "%d", (int)f);
		snprintf(file, sizeof(file), "mode%d.memprof", i);
		if (modes[i])
			cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--mode", modes[i],
					    "-o", tmp_of(file), NULL),
				     0);
		else
			cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "-o", tmp_of(file),
					    NULL),
				     0);
		fixture_finish(f);
		wait_no_targets(&d);
		struct mp_profile *p = load(tmp_of(file));
		cr_assert_eq(p->trace_mode, i ? MP_TRACE_PRECISE : MP_TRACE_RSS);
		cr_assert_eq(p->n_invocations, 1);
		cr_assert_str_eq(p->names[p->invocations[0].name], "outer");
		cr_assert(!memcmp(&p->invocations[0].incl, i ? &want : &none, sizeof(want)),
			  "mode %s: %llu bytes allocated", i ? "precise" : "rss",
			  (unsigned long long)p->invocations[0].incl.alloc_bytes);
		mp_profile_free(p);
	}
	cr_assert_eq(client(out, sizeof(out), &d, "attach", "1", "--mode", "fast", NULL), 2);
	cr_assert_eq(daemon_stop(&d), 0);
}

/* `attach --tracer` (control key tracer=) picks the allocation path per
 * target, over the configuration's `tracer`: the same exact 700-byte
 * block on either path, and the profile says which one saw it. The
 * fixture links libmemprof, so auto is the in-process path; a bad value
 * is refused by the client and by the service. */
Test(service, attach_can_choose_the_tracer, .timeout = 120, .fini = cleanup)
{
	static const struct {
		const char *arg; /* NULL: no --tracer */
		uint32_t want;
	} runs[] = { { NULL, MP_PATH_BPF }, /* the configuration's tracer = bpf */
		     { "auto", MP_PATH_INPROCESS },
		     { "inprocess", MP_PATH_INPROCESS },
		     { "bpf", MP_PATH_BPF } };
	struct daemon d;
	char out[4096], ps[32], file[64];

	need_root();
	daemon_start(&d, "tracer = bpf\n", NULL);
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		pid_t f = fixture_start(NULL);
		struct mp_profile *p;

		snprintf(ps, sizeof(ps), "%d", (int)f);
		snprintf(file, sizeof(file), "tracer%zu.memprof", i);
		if (runs[i].arg)
			cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--mode", "precise",
					    "--tracer", runs[i].arg, "-o", tmp_of(file), NULL),
				     0, "%s", out);
		else
			cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--mode", "precise",
					    "-o", tmp_of(file), NULL),
				     0, "%s", out);
		fixture_finish(f);
		wait_no_targets(&d);
		p = load(tmp_of(file));
		cr_assert_eq(p->tracer_path, runs[i].want, "run %zu (%s): path %u, want %u", i,
			     runs[i].arg ? runs[i].arg : "configured", p->tracer_path,
			     runs[i].want);
		cr_assert_eq(p->n_invocations, 1);
		cr_assert_eq(p->invocations[0].incl.alloc_bytes, 700, "run %zu: %" PRIu64 " bytes",
			     i, p->invocations[0].incl.alloc_bytes);
		cr_assert_eq(p->invocations[0].incl.alloc_count, 1);
		mp_profile_free(p);
	}
	cr_assert_eq(client(out, sizeof(out), &d, "attach", "1", "--tracer", "ebpf", NULL), 2);
	cr_assert_eq(daemon_stop(&d), 0);
}

/* `attach --stacks` (control key stacks=1): the profile has the stack
 * table, and the fixture's 700-byte block has a stack starting at its
 * caller; the same attach without it has none. */
Test(service, attach_can_ask_for_stacks, .timeout = 120, .fini = cleanup)
{
	struct daemon d;
	char out[4096], ps[32], file[64];

	need_root();
	daemon_start(&d, "", NULL);
	for (int i = 0; i < 2; i++) {
		pid_t f = fixture_start(NULL);
		struct mp_profile *p;
		int with = 0;

		snprintf(ps, sizeof(ps), "%d", (int)f);
		snprintf(file, sizeof(file), "stacks%d.memprof", i);
		if (i)
			cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--mode", "precise",
					    "--stacks", "-o", tmp_of(file), NULL),
				     0);
		else
			cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--mode", "precise",
					    "-o", tmp_of(file), NULL),
				     0);
		fixture_finish(f);
		wait_no_targets(&d);
		p = load(tmp_of(file));
		cr_assert_eq(p->n_stacks > 0, i == 1, "attach %d: %u stacks", i, p->n_stacks);
		for (uint32_t k = 0; k < p->n_sites; k++) {
			const struct mp_site *st = &p->sites[k];

			if (st->alloc_space != 700)
				continue;
			if (!i) {
				cr_assert_eq(st->stack, 0);
				continue;
			}
			cr_assert(st->stack && st->stack <= p->n_stacks);
			cr_assert_geq(p->stacks[st->stack - 1].n_frames, 1);
			cr_assert_eq(p->stacks[st->stack - 1].frames[0], st->caller);
			with++;
		}
		cr_assert_eq(with, i, "attach %d: %d sites of 700 bytes with a stack", i, with);
		mp_profile_free(p);
	}
	cr_assert_eq(daemon_stop(&d), 0);
}

/* The owner of the fixture's 700-byte block (allocated by its main) in
 * @p: the name of the owner that has bytes, NULL when none has. */
static const char *owner_of_700(const struct mp_profile *p)
{
	for (uint32_t k = 0; k < p->n_owners; k++)
		if (p->owners[k].mem.alloc_bytes == 700)
			return p->owners[k].name;
	return NULL;
}

/* `attach --owner`, `--wrapper`, `--wrapper-fn`, `--no-default-wrappers`
 * (repeatable control keys owner, wrapper, wrapper_fn): the request's
 * rules apply to its target alone. The fixture's main allocates the
 * 700-byte block: --owner names it; with the fixture itself a wrapper,
 * the block goes to the first caller outside it (libc's), and a rule
 * that names the fixture no longer matches. */
Test(service, attach_takes_owner_and_wrapper_rules, .timeout = 120, .fini = cleanup)
{
	struct daemon d;
	char out[4096], ps[32], file[3][512];

	need_root();
	daemon_start(&d, "", NULL);
	for (int i = 0; i < 3; i++) {
		pid_t f = fixture_start(NULL);
		struct mp_profile *p;
		const char *owner;
		int r;

		snprintf(ps, sizeof(ps), "%d", (int)f);
		snprintf(file[i], sizeof(file[i]), "%s/rules%d.memprof", tmpdir, i);
		if (i == 0)
			r = client(out, sizeof(out), &d, "attach", ps, "--mode", "precise", "-o",
				   file[i], "--owner", "fixture-att*=mine", "--owner",
				   "libc.so*=libc", NULL);
		else if (i == 1)
			r = client(out, sizeof(out), &d, "attach", ps, "--mode", "precise", "-o",
				   file[i], "--no-default-wrappers", "--wrapper", "fixture-att*",
				   "--wrapper-fn", "no_such_function_*", "--owner",
				   "fixture-att*=mine", NULL);
		else
			r = client(out, sizeof(out), &d, "attach", ps, "--mode", "precise", "-o",
				   file[i], NULL);
		cr_assert_eq(r, 0, "attach %d: %s", i, out);
		fixture_finish(f);
		wait_no_targets(&d);
		p = load(file[i]);
		owner = owner_of_700(p);
		cr_assert(p->wrappers.on, "attach %d: wrappers off", i);
		cr_assert_eq(p->wrappers.default_list, i != 1, "attach %d", i);
		if (i == 0) {
			cr_assert(owner && !strcmp(owner, "mine"), "owner %s", owner ? owner : "-");
		} else if (i == 1) {
			/* main was looked through: libc's caller owns the block */
			cr_assert(owner && strcmp(owner, "mine"), "owner %s", owner ? owner : "-");
			cr_assert_geq(p->wrappers.objects, 1);
			cr_assert_geq(p->wrappers.skipped, 1);
		} else {
			/* the rules were the first target's alone */
			cr_assert(!owner || strcmp(owner, "mine"), "owner %s", owner);
		}
		mp_profile_free(p);
	}
	cr_assert_eq(daemon_stop(&d), 0);
}

Test(service, many_independent_targets, .timeout = 180, .fini = cleanup)
{
	enum { N = 64 };
	struct daemon d;
	char out[65536], ps[32], name[32];
	pid_t f[N];

	need_root();
	/* Small BPF rings: 64 targets at once. */
	daemon_start(&d, "bpf_ring_size = 256K\nrss_hz = 10\n", NULL);
	for (int i = 0; i < N; i++)
		f[i] = fixture_start(NULL);
	for (int i = 0; i < N; i++) {
		snprintf(ps, sizeof(ps), "%d", (int)f[i]);
		snprintf(name, sizeof(name), "m%d.memprof", i);
		cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "-o", tmp_of(name), NULL),
			     0, "attach %d", i);
	}
	/* A failing attach (no such process) disturbs no other target. */
	cr_assert_eq(client(out, sizeof(out), &d, "attach", "999999999", NULL), 1);
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0);
	cr_assert_not_null(strstr(out, "\ntargets: 64\n"), "%s", out);
	/* Half exit on their own, half are flushed by SIGTERM. */
	for (int i = 0; i < N; i += 2)
		fixture_finish(f[i]);
	cr_assert_eq(daemon_stop(&d), 0);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "m%d.memprof", i);
		struct mp_profile *p = load(tmp_of(name));
		cr_assert_eq(p->pid, f[i]);
		cr_assert_eq(p->n_invocations, 1);
		cr_assert_eq(p->invocations[0].incl.alloc_bytes, i % 2 ? 0 : 700, "target %d", i);
		mp_profile_free(p);
		if (i % 2)
			fixture_finish(f[i]);
	}
}

Test(service, authorization_by_peer_credentials, .timeout = 120, .fini = cleanup)
{
	struct daemon d;
	char out[4096], pr[32], pu[32], po[32], want[256], udir[512];
	uid_t uid;
	gid_t gid;
	pid_t fr, fu, fo;
	struct stat st;

	need_root();
	test_user(&uid, &gid);
	daemon_start(&d, "", NULL);
	fr = fixture_start(NULL);
	fu = fixture_start(as_user(uid, gid));
	/* Another non-root user: nobody. */
	fo = fixture_start(as_user(65534, 65534));
	snprintf(pr, sizeof(pr), "%d", (int)fr);
	snprintf(pu, sizeof(pu), "%d", (int)fu);
	snprintf(po, sizeof(po), "%d", (int)fo);
	snprintf(udir, sizeof(udir), "%s", tmp_of("user"));
	cr_assert_eq(mkdir(udir, 0755), 0);
	cr_assert_eq(chown(udir, uid, gid), 0);
	char upath[600];
	snprintf(upath, sizeof(upath), "%s/own.memprof", udir);

	/* Root's and another user's processes: refused, logged. */
	cr_assert_eq(client_as(as_user(uid, gid), out, sizeof(out), &d, "attach", pr, NULL), 1);
	snprintf(want, sizeof(want), "refused attach to pid %d requested by uid %u", (int)fr,
		 (unsigned)uid);
	cr_assert(log_has(&d, want), "no '%s' in %s", want, d.log);
	cr_assert_eq(client_as(as_user(uid, gid), out, sizeof(out), &d, "attach", po, NULL), 1);
	snprintf(want, sizeof(want), "refused attach to pid %d requested by uid %u", (int)fo,
		 (unsigned)uid);
	cr_assert(log_has(&d, want), "no '%s' in %s", want, d.log);

	/* Its own but not dumpable: refused (ptrace would refuse it too). */
	pid_t fn = fixture_start_of("tests/service/fixture-nodump", as_user(uid, gid));
	char pn[32];
	snprintf(pn, sizeof(pn), "%d", (int)fn);
	cr_assert_eq(client_as(as_user(uid, gid), out, sizeof(out), &d, "attach", pn, NULL), 1);
	snprintf(want, sizeof(want), "process %d is not dumpable", (int)fn);
	cr_assert(log_has(&d, want), "no '%s' in %s", want, d.log);
	kill(fn, SIGUSR1);
	waitpid(fn, NULL, 0);
	/* A Unix socket stream is root's privilege. */
	cr_assert_eq(client_as(as_user(uid, gid), out, sizeof(out), &d, "attach", pu, "--stream",
			       "unix:/run/whatever.sock", NULL),
		     1);
	/* So is making the daemon read a file: a header file's content
	 * would go to the requester's collector. */
	{
		char *const *w = as_user(uid, gid);
		char *sh_user[] = { "/bin/sh", "-c", "exec \"$@\" 2>&1", "sh", w[0], w[1], w[2],
				    w[3],      NULL };

		cr_assert_eq(client_as(sh_user, out, sizeof(out), &d, "attach", pu, "--stream",
				       "pyroscope://127.0.0.1:9?headers=/etc/shadow", NULL),
			     1);
		cr_assert_not_null(strstr(out, "only root may name files (headers=, ca=)"), "%s",
				   out);
		cr_assert_eq(client_as(sh_user, out, sizeof(out), &d, "attach", pu, "--stream",
				       "otlp+https://127.0.0.1:9?ca=/etc/shadow", NULL),
			     1);
		cr_assert_not_null(strstr(out, "only root may name files (headers=, ca=)"), "%s",
				   out);
	}

	/* Its own: allowed; the file is the requester's. */
	cr_assert_eq(
		client_as(as_user(uid, gid), out, sizeof(out), &d, "attach", pu, "-o", upath, NULL),
		0);
	cr_assert_eq(stat(upath, &st), 0);
	cr_assert_eq(st.st_uid, uid);
	cr_assert_eq(st.st_gid, gid);
	/* Root sees it; another user neither sees nor detaches it. */
	cr_assert_eq(client(out, sizeof(out), &d, "list", NULL), 0);
	snprintf(want, sizeof(want), "pid=%d id=1 uid=%u state=running", (int)fu, (unsigned)uid);
	cr_assert(!strncmp(out, want, strlen(want)), "list: %s", out);
	cr_assert_eq(client_as(as_user(65534, 65534), out, sizeof(out), &d, "list", NULL), 0);
	cr_assert_str_eq(out, "no targets\n");
	cr_assert_eq(client_as(as_user(65534, 65534), out, sizeof(out), &d, "detach", pu, NULL), 1);
	cr_assert_eq(client_as(as_user(65534, 65534), out, sizeof(out), &d, "dump", pu, NULL), 1);
	/* The owner dumps and detaches. */
	cr_assert_eq(client_as(as_user(uid, gid), out, sizeof(out), &d, "dump", pu, NULL), 0);
	cr_assert_eq(client_as(as_user(uid, gid), out, sizeof(out), &d, "detach", pu, NULL), 0);
	cr_assert_eq(stat(upath, &st), 0);
	cr_assert_eq(st.st_uid, uid);
	struct mp_profile *p = load(upath);
	assert_outer_untouched(p, fu);
	mp_profile_free(p);
	cr_assert_eq(daemon_stop(&d), 0);
	fixture_finish(fr);
	fixture_finish(fu);
	fixture_finish(fo);
}

Test(service, hostile_control_requests_are_refused, .timeout = 60, .fini = cleanup)
{
	struct daemon d;
	char reply[4096], out[4096];
	static const uint8_t huge[] = { 0xff, 0xff, 0xff, 0xff, 'x' };
	static const uint8_t garbage[] = { 5, 0, 0, 0, 'a', 'b', 'c', 'd', '\n' };
	static const uint8_t nul[] = { 5, 0, 0, 0, 'c', '=', 0, 'x', '\n' };
	static const uint8_t unknown[] = { 6, 0, 0, 0, 'c', 'm', 'd', '=', 'x', '\n' };
	static const uint8_t list[] = { 9, 0, 0, 0, 'c', 'm', 'd', '=', 'l', 'i', 's', 't', '\n' };
	static const uint8_t badpid[] = { 19,  0,   0,	 0,   'c',  'm', 'd', '=',
					  'd', 'u', 'm', 'p', '\n', 'p', 'i', 'd',
					  '=', '-', '1', '2', '3',  '4', '\n' };

	need_root();
	daemon_start(&d, "", NULL);
	/* Each malformed request is answered with why, then closed. */
	cr_assert_gt(raw_request(d.control, huge, sizeof(huge), 0, reply, sizeof(reply)), 4);
	cr_assert_str_eq(reply + 4, "status=error\nerrno=74\nmessage=malformed request: message "
				    "longer than 65536 bytes\n");
	cr_assert_gt(raw_request(d.control, garbage, sizeof(garbage), 0, reply, sizeof(reply)), 4);
	cr_assert_str_eq(reply + 4, "status=error\nerrno=74\nmessage=malformed request: line 1 "
				    "is not key=value\n");
	cr_assert_gt(raw_request(d.control, nul, sizeof(nul), 0, reply, sizeof(reply)), 4);
	cr_assert_str_eq(reply + 4, "status=error\nerrno=74\nmessage=malformed request: NUL byte "
				    "at offset 2\n");
	cr_assert_gt(raw_request(d.control, list, sizeof(list), 3, reply, sizeof(reply)), 4);
	cr_assert_str_eq(reply + 4, "status=error\nerrno=74\nmessage=malformed request: more "
				    "than one file descriptor\n");
	cr_assert_gt(raw_request(d.control, list, 3, 0, reply, sizeof(reply)), 4);
	cr_assert_str_eq(reply + 4, "status=error\nerrno=74\nmessage=malformed request: "
				    "truncated length prefix\n");
	raw_request(d.control, unknown, sizeof(unknown), 0, reply, sizeof(reply));
	cr_assert_str_eq(reply + 4, "status=error\nerrno=95\nmessage=unknown command\n");
	raw_request(d.control, badpid, sizeof(badpid), 1, reply, sizeof(reply));
	cr_assert_str_eq(reply + 4, "status=error\nerrno=22\nmessage=missing or invalid pid\n");
	raw_request(d.control, list, sizeof(list), 0, reply, sizeof(reply));
	cr_assert_str_eq(reply + 4, "status=ok\n");
	/* A client that connects and says nothing is dropped after a timeout;
	 * meanwhile others are served. */
	int idle = raw_connect(d.control);
	cr_assert_eq(client(out, sizeof(out), &d, "list", NULL), 0);
	cr_assert_str_eq(out, "no targets\n");
	close(idle);
	cr_assert_eq(daemon_stop(&d), 0);
}

/* The daemon as an unprivileged user with only the capabilities
 * systemd/memprofd.service grants profiles another user's (root's) process
 * exactly, markers included. Without CAP_DAC_READ_SEARCH /proc/PID/fd of
 * another user is closed (docs/SERVICE.md); CAP_SYS_ADMIN is not needed with
 * uprobe multi-links. */
#define CAPS "+bpf,+perfmon,+sys_ptrace,+dac_read_search"
Test(service, least_privilege_profiles_a_fixture, .timeout = 120, .fini = cleanup)
{
	struct daemon d;
	char out[4096], ps[32], u[32], g[32];
	uid_t uid;
	gid_t gid;
	pid_t f;

	need_root();
	test_user(&uid, &gid);
	snprintf(u, sizeof(u), "--reuid=%u", (unsigned)uid);
	snprintf(g, sizeof(g), "--regid=%u", (unsigned)gid);
	char *wrapper[] = { "/usr/bin/setpriv",
			    u,
			    g,
			    "--clear-groups",
			    "--inh-caps=-all," CAPS,
			    "--ambient-caps=" CAPS,
			    "--bounding-set=-all," CAPS,
			    NULL };
	/* The daemon creates its socket here. */
	cr_assert_eq(chown(tmpdir, uid, gid), 0);
	daemon_start(&d, "", wrapper);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "-o", tmp_of("lp.memprof"), NULL),
		     0);
	fixture_finish(f);
	wait_no_targets(&d);
	struct mp_profile *p = load(tmp_of("lp.memprof"));
	struct mp_mem_stats want = {
		.bytes_added = 700, .tensors_added = 1, .alloc_bytes = 700, .alloc_count = 1
	};
	cr_assert_eq(p->pid, f);
	cr_assert_eq(p->n_invocations, 1);
	cr_assert_eq(p->invocations[0].flags, MP_INV_F_OPEN_AT_ATTACH);
	cr_assert(!memcmp(&p->invocations[0].incl, &want, sizeof(want)));
	cr_assert_eq(p->unknown_frees, 1);
	cr_assert_eq(p->drops_ring, 0);
	cr_assert_eq(p->drops_bpf, 0);
	mp_profile_free(p);
	/* The daemon really ran without root. */
	char status[64];
	snprintf(status, sizeof(status), "/proc/%d/status", (int)d.pid);
	FILE *sf = fopen(status, "r");
	char line[256], want_uid[64];
	bool seen = false;
	snprintf(want_uid, sizeof(want_uid), "Uid:\t%u\t%u\t%u\t%u\n", (unsigned)uid, (unsigned)uid,
		 (unsigned)uid, (unsigned)uid);
	cr_assert_not_null(sf);
	while (fgets(line, sizeof(line), sf))
		if (!strncmp(line, "Uid:", 4))
			seen = !strcmp(line, want_uid);
	fclose(sf);
	cr_assert(seen, "memprofd does not run as uid %u only", (unsigned)uid);
	cr_assert_eq(daemon_stop(&d), 0);
}
