// SPDX-License-Identifier: MIT
/*
 * memprofd under a real systemd (issue 12): the project is `meson install`ed
 * into a staged prefix, a volatile container of the host's own tree is booted
 * with systemd-nspawn with that prefix bound as /usr/local, and the test
 * drives the container's systemd with `nsenter -t LEADER -a systemctl ...`,
 * exactly as a user would on a host: the unit, sysusers.d and tmpfiles.d
 * entries are the installed ones, and every request goes through the
 * installed `memprof` client and the service's control socket.
 *
 * One booted container serves every check (booting costs seconds); the checks
 * run in order and the first failing assertion ends the test. The fini
 * always powers the container off (SIGTERM to nspawn, SIGKILL after a
 * bounded wait) and removes the temp dir; nspawn also gets SIGTERM when this
 * process dies (PR_SET_PDEATHSIG), so a timeout never leaves a container
 * behind. nspawn's own mounts live in its private mount namespace: there is
 * nothing to unmount on the host.
 *
 * A machine where nspawn cannot boot fails the test with the reason (the
 * console's last lines): this test never skips on a root machine.
 *
 * Unit options a container cannot exercise are reported in the output (and
 * docs/SERVICE.md): on a host whose cgroup hierarchy is v1 or hybrid, nspawn
 * mounts the controllers read-only, so the container's systemd cannot apply
 * MemoryMax= or TasksMax= and the service finds no limit to derive
 * memory_budget from. The unit keeps both for real hosts.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile_pb.h"

#define CONTROL "/run/memprofd/control"
#define MEMPROF "/usr/local/bin/memprof"
#define UNIT_PATH "/usr/local/lib/systemd/system/memprofd.service"
#define CONF_DIR "/usr/local/etc/memprofd"
#define CONF_PATH CONF_DIR "/memprofd.conf"

static char tmpdir[256]; /* everything of this test, removed by fini */
static char outdir[512]; /* bound into the container at the same path */
static char stage[512]; /* the meson install --destdir */
static char machine[64];
static pid_t nspawn_pid = -1;
static pid_t leader = -1; /* the container's pid 1, as the host sees it */
static char fixture[4096], fixture_plain[4096];
static pid_t fixtures[64]; /* host pids, killed by teardown */
static int n_fixtures;
static uid_t test_uid;
static gid_t test_gid;

static void msleep(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static char *fmt(const char *f, ...)
{
	static char buf[16][4096];
	static int i;
	char *p = buf[i++ % 16];
	va_list ap;

	va_start(ap, f);
	vsnprintf(p, 4096, f, ap);
	va_end(ap);
	return p;
}

/* The whole text of a (small) file, NUL-terminated; "" if unreadable. */
static char *slurp(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t n = 0;
	ssize_t k;

	buf[0] = '\0';
	if (fd < 0)
		return buf;
	while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	buf[n] = '\0';
	close(fd);
	return buf;
}

/* Spawns argv with stdout and stderr to @fd. Unlike mp_test_spawn, the
 * child gets SIGTERM when this process dies: nspawn powers the container
 * off on SIGTERM, it would leave it running on SIGKILL. */
static pid_t spawn_fds(char *const argv[], int out_fd, int err_fd, int death_sig)
{
	pid_t parent = getpid(), pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (prctl(PR_SET_PDEATHSIG, death_sig) != 0 || getppid() != parent)
			_exit(126);
		if ((out_fd >= 0 && dup2(out_fd, 1) < 0) || (err_fd >= 0 && dup2(err_fd, 2) < 0))
			_exit(126);
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

static pid_t spawn_fd(char *const argv[], int fd, int death_sig)
{
	return spawn_fds(argv, fd, fd, death_sig);
}

/* Runs argv (a NULL-terminated list) to its end, bounded by `timeout`:
 * stdout and stderr in @out, the exit status returned. */
static int runv(char *out, size_t cap, int seconds, char *const argv[])
{
	char *av[64], secs[16];
	int pipefd[2], n = 0;
	pid_t pid;

	snprintf(secs, sizeof(secs), "%d", seconds);
	av[n++] = "timeout";
	av[n++] = "--kill-after=5";
	av[n++] = secs;
	for (int i = 0; argv[i] && n < 63; i++)
		av[n++] = argv[i];
	av[n] = NULL;
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	pid = spawn_fd(av, pipefd[1], SIGKILL);
	close(pipefd[1]);
	return mp_test_collect(pid, pipefd[0], out, cap);
}

/* `nsenter -t LEADER -a ARGS...` (NULL-terminated): a command in the
 * container, as root unless ARGS start with a setpriv wrapper. */
static int in_ct(char *out, size_t cap, const char *arg0, ...)
{
	char *argv[48], lp[16];
	const char *a;
	va_list ap;
	int n = 0;

	snprintf(lp, sizeof(lp), "%d", (int)leader);
	argv[n++] = "nsenter";
	argv[n++] = "-t";
	argv[n++] = lp;
	argv[n++] = "-a";
	argv[n++] = (char *)arg0;
	va_start(ap, arg0);
	while ((a = va_arg(ap, const char *)) && n < 47)
		argv[n++] = (char *)a;
	va_end(ap);
	argv[n] = NULL;
	return runv(out, cap, 60, argv);
}

#define ct(out, ...) in_ct(out, sizeof(out), __VA_ARGS__, NULL)

/* The value of `systemctl show -p KEY memprofd`. */
static char *unit_prop(const char *key)
{
	static char buf[4][1024];
	static int i;
	char *p = buf[i++ % 4], tmp[1024];

	cr_assert_eq(ct(tmp, "systemctl", "show", "--value", "-p", key, "memprofd.service"), 0,
		     "systemctl show -p %s: %s", key, tmp);
	snprintf(p, 1024, "%.*s", (int)strcspn(tmp, "\n"), tmp);
	return p;
}

static char *journal(void);

/* The host pid of the container's process @nspid (its pid namespace is the
 * leader's, the last NSpid field is @nspid); -1 if there is none. */
static pid_t host_pid_of(pid_t nspid)
{
	char want[64], ns[64], path[64], buf[4096];
	ssize_t k;
	pid_t found = -1;
	struct dirent *de;
	DIR *procdir;

	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)leader);
	k = readlink(path, want, sizeof(want) - 1);
	cr_assert_gt(k, 0);
	want[k] = '\0';
	procdir = opendir("/proc");
	cr_assert_not_null(procdir);
	while (found < 0 && (de = readdir(procdir))) {
		char *l;
		int pid = atoi(de->d_name);

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/ns/pid", pid);
		k = readlink(path, ns, sizeof(ns) - 1);
		if (k <= 0)
			continue;
		ns[k] = '\0';
		if (strcmp(ns, want))
			continue;
		l = strstr(slurp(fmt("/proc/%d/status", pid), buf, sizeof(buf)), "\nNSpid:");
		if (!l)
			continue;
		l[strcspn(l + 1, "\n") + 1] = '\0';
		l = strrchr(l, '\t') ? strrchr(l, '\t') + 1 : l;
		if (atoi(l) == nspid)
			found = pid;
	}
	closedir(procdir);
	return found;
}

/* The last NSpid field of host process @pid: its pid in the container. */
static pid_t ns_pid_of(pid_t pid)
{
	char buf[4096],
		*l = strstr(slurp(fmt("/proc/%d/status", (int)pid), buf, sizeof(buf)), "\nNSpid:");

	cr_assert_not_null(l, "no NSpid for %d", (int)pid);
	l[strcspn(l + 1, "\n") + 1] = '\0';
	return atoi(strrchr(l, '\t') + 1);
}

/* The console's last lines, for a failure message. */
static char *console_tail(void)
{
	static char buf[65536];
	size_t n;

	slurp(fmt("%s/console.log", tmpdir), buf, sizeof(buf));
	n = strlen(buf);
	return n > 3000 ? buf + n - 3000 : buf;
}

static void power_off(void)
{
	int st;

	if (nspawn_pid <= 0)
		return;
	/* nspawn turns SIGTERM into an orderly poweroff of a booted container. */
	kill(nspawn_pid, SIGTERM);
	for (int i = 0; i < 300; i++) {
		if (waitpid(nspawn_pid, &st, WNOHANG) == nspawn_pid) {
			nspawn_pid = -1;
			return;
		}
		msleep(100);
	}
	fprintf(stderr, "systemd-container: container %s did not power off in 30 s: killed\n",
		machine);
	kill(nspawn_pid, SIGKILL);
	waitpid(nspawn_pid, &st, 0);
	nspawn_pid = -1;
}

static void teardown(void)
{
	/* Fixtures an assertion left waiting: the container's shutdown would
	 * wait for them. */
	for (int i = 0; i < n_fixtures; i++)
		kill(fixtures[i], SIGKILL);
	n_fixtures = 0;
	power_off();
	/* nspawn removes its propagation dir unless it was killed. */
	if (machine[0])
		rmdir(fmt("/run/systemd/nspawn/propagate/%s", machine));
	mp_test_rmtree(tmpdir);
	tmpdir[0] = '\0';
}

/* Installs the build into the stage, as a user would. */
static void stage_install(void)
{
	char out[16384];
	char *argv[] = {
		"meson",     "install", "-C",		(char *)getenv("MEMPROF_BUILD_ROOT"),
		"--destdir", stage,	"--no-rebuild", "--quiet",
		NULL
	};

	cr_assert_eq(mkdir(stage, 0755), 0);
	cr_assert_eq(runv(out, sizeof(out), 120, argv), 0, "meson install: %s", out);
	cr_assert_eq(access(fmt("%s%s", stage, UNIT_PATH), R_OK), 0,
		     "meson install put no unit at %s%s", stage, UNIT_PATH);
}

/* Polls `systemctl is-system-running --wait` in the container until it
 * answers running or degraded, or something no wait mends (maintenance:
 * the rescue shell; stopping), for at most @seconds. Before the container's
 * manager listens, systemctl says "offline" or cannot connect to the bus;
 * on a loaded host that can last seconds, so those mean: ask again. Its
 * last answer in @out, its status returned. */
static int wait_booted(char *out, size_t cap, int seconds)
{
	struct mp_test_wait w = mp_test_wait_start(seconds * 1000L);
	struct timespec t0, now;
	char lp[16];
	int r;

	snprintf(lp, sizeof(lp), "%d", (int)leader);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		int st, left;

		cr_assert_eq(waitpid(nspawn_pid, &st, WNOHANG), 0,
			     "systemd-nspawn exited (status %d) while booting:\n%s", st,
			     console_tail());
		clock_gettime(CLOCK_MONOTONIC, &now);
		left = seconds - (int)(now.tv_sec - t0.tv_sec);
		r = runv(out, cap, left > 1 ? left : 1,
			 (char *[]){ "nsenter", "-t", lp, "-a", "systemctl", "is-system-running",
				     "--wait", NULL });
		if (!strcmp(out, "running\n") || !strcmp(out, "degraded\n") ||
		    !strcmp(out, "maintenance\n") || !strcmp(out, "stopping\n"))
			return r;
	} while (mp_test_wait_more(&w));
	return r;
}

/* Boots the container and waits until its systemd reports the boot done. */
static void boot(void)
{
	char bind_prefix[1024], bind_build[4200], bind_out[1024], out[16384];
	const char *build = getenv("MEMPROF_BUILD_ROOT");
	int log, state;

	snprintf(bind_prefix, sizeof(bind_prefix), "--bind=%s/usr/local:/usr/local", stage);
	snprintf(bind_build, sizeof(bind_build), "--bind-ro=%s", build);
	snprintf(bind_out, sizeof(bind_out), "--bind=%s", outdir);
	snprintf(machine, sizeof(machine), "memprof-test-%d", (int)getpid());
	/*
	 * --volatile=yes: a tmpfs root with the host's /usr (read-only), so
	 *   nothing of the host changes and /etc starts empty (first boot:
	 *   sysusers and tmpfiles really run).
	 * --register=no --keep-unit: no machined, no transient scope; the
	 *   host needs no running systemd.
	 * --capability=all: the service's capabilities must exist in the
	 *   container's bounding set.
	 * --system-call-filter: nspawn's seccomp filter refuses bpf() and
	 *   perf_event_open() to the container unless they are named.
	 * --console=passive and systemd.firstboot=off: nothing waits for a
	 *   terminal.
	 * The build tree (fixtures, their plain libmemprof) is bound
	 *   read-only at its own path, the output dir read-write.
	 */
	char *argv[] = { "systemd-nspawn",
			 "-D",
			 "/",
			 "--volatile=yes",
			 "--register=no",
			 "--keep-unit",
			 "--capability=all",
			 "--system-call-filter=bpf perf_event_open",
			 "--console=passive",
			 "--machine",
			 machine,
			 bind_prefix,
			 bind_build,
			 bind_out,
			 "-b",
			 "--",
			 "systemd.firstboot=off",
			 NULL };

	cr_assert_eq(access("/usr/bin/systemd-nspawn", X_OK), 0,
		     "systemd-nspawn is missing: install systemd-container (scripts/install-deps)");
	log = open(fmt("%s/console.log", tmpdir), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	cr_assert_geq(log, 0);
	nspawn_pid = spawn_fd(argv, log, SIGTERM);
	close(log);

	/* Its pid 1 is nspawn's child running systemd. */
	for (int i = 0; i < 300 && leader < 0; i++) {
		char kids[4096], comm[64];
		int st;

		cr_assert_eq(waitpid(nspawn_pid, &st, WNOHANG), 0,
			     "systemd-nspawn exited (status %d) before booting:\n%s", st,
			     console_tail());
		slurp(fmt("/proc/%d/task/%d/children", (int)nspawn_pid, (int)nspawn_pid), kids,
		      sizeof(kids));
		for (char *s = kids, *e; *s; s = e) {
			pid_t kid = (pid_t)strtol(s, &e, 10);

			if (e == s)
				break;
			slurp(fmt("/proc/%d/comm", (int)kid), comm, sizeof(comm));
			if (!strcmp(comm, "systemd\n"))
				leader = kid;
		}
		if (leader < 0)
			msleep(100);
	}
	cr_assert_gt(leader, 0, "no systemd started in the container in 30 s:\n%s", console_tail());
	/* "degraded" (some unit of the host's tree failed) is still booted. */
	state = wait_booted(out, sizeof(out), 120);
	cr_assert(!strcmp(out, "running\n") || !strcmp(out, "degraded\n"),
		  "the container did not boot (systemctl is-system-running, asked for up to 120 s: "
		  "status %d, '%s'):\n%s",
		  state, out, console_tail());
	if (!strcmp(out, "degraded\n")) {
		ct(out, "systemctl", "--failed", "--no-legend", "--plain");
		fprintf(stderr, "systemd-container: booted degraded; failed units:\n%s", out);
	}
}

/* Waits at most @seconds for @pid (a child) to exit; its status. */
static int wait_child(pid_t pid, int seconds, const char *what)
{
	int st;

	for (int i = 0; i < seconds * 20; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid) {
			cr_assert(WIFEXITED(st), "%s died by signal %d", what, WTERMSIG(st));
			return WEXITSTATUS(st);
		}
		msleep(50);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	cr_assert_fail("%s still running after %d s", what, seconds);
	return -1;
}

struct fixture {
	pid_t nsenter; /* our child: exits with the fixture's status */
	pid_t host; /* the fixture, host pid */
	pid_t ns; /* the fixture, container pid */
	char ns_s[16];
};

/* A fixture-attach process in the container (kernel "outer" with 500
 * bytes, waiting for SIGUSR1), as @uid (0: root). */
static void fixture_start(struct fixture *f, const char *exe, uid_t uid, gid_t gid)
{
	char lp[16], u[32], g[32], line[64], kids[256];
	char *argv[16];
	int pipefd[2], n = 0;
	FILE *in;

	snprintf(lp, sizeof(lp), "%d", (int)leader);
	argv[n++] = "nsenter";
	argv[n++] = "-t";
	argv[n++] = lp;
	argv[n++] = "-a";
	if (uid) {
		snprintf(u, sizeof(u), "--reuid=%u", (unsigned)uid);
		snprintf(g, sizeof(g), "--regid=%u", (unsigned)gid);
		argv[n++] = "setpriv";
		argv[n++] = u;
		argv[n++] = g;
		argv[n++] = "--clear-groups";
	}
	argv[n++] = (char *)exe;
	argv[n] = NULL;
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	f->nsenter = spawn_fds(argv, pipefd[1], -1, SIGKILL);
	close(pipefd[1]);
	in = fdopen(pipefd[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), in), "the fixture said nothing");
	cr_assert_str_eq(line, "ready\n");
	fclose(in);
	/* nsenter -a forks once; setpriv execs the fixture. */
	slurp(fmt("/proc/%d/task/%d/children", (int)f->nsenter, (int)f->nsenter), kids,
	      sizeof(kids));
	f->host = atoi(kids);
	cr_assert_gt(f->host, 0, "no child of nsenter %d", (int)f->nsenter);
	if (n_fixtures < 64)
		fixtures[n_fixtures++] = f->host;
	f->ns = ns_pid_of(f->host);
	snprintf(f->ns_s, sizeof(f->ns_s), "%d", (int)f->ns);
}

static void fixture_finish(struct fixture *f)
{
	kill(f->host, SIGUSR1);
	cr_assert_eq(wait_child(f->nsenter, 30, "fixture"), 0, "fixture status");
	/* Gone: teardown must not signal its pid (it may be reused). */
	for (int i = 0; i < n_fixtures; i++)
		if (fixtures[i] == f->host)
			fixtures[i--] = fixtures[--n_fixtures];
}

static void list_targets(char *out, size_t cap)
{
	cr_assert_eq(in_ct(out, cap, MEMPROF, "list", NULL), 0, "memprof list: %s", out);
}

/* Until the service lists no target (their profiles are then written). */
static void wait_no_targets(void)
{
	char out[4096];

	cr_assert(MP_TEST_WAIT_FOR((list_targets(out, sizeof(out)), !strcmp(out, "no targets\n")),
				   60000),
		  "targets still listed after 60 s: %s", out);
}

static struct mp_profile *load(const char *path)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;

	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "decoding %s: %s", path, why ? why : "");
	return p;
}

/* The RSS samples of the target @ns_s so far, from a dump into @file. */
static size_t dumped_rss(const char *ns_s, const char *file)
{
	struct mp_profile *p;
	char out[4096];
	size_t n;

	cr_assert_eq(ct(out, MEMPROF, "dump", ns_s, "-o", file), 0, "memprof dump: %s", out);
	p = load(file);
	n = p->n_rss;
	mp_profile_free(p);
	unlink(file);
	return n;
}

static const struct mp_mem_stats outer_700 = { .bytes_added = 700,
					       .tensors_added = 1,
					       .alloc_bytes = 700,
					       .alloc_count = 1 };

/* A fixture profiled through the service in @mode, with the figures the
 * same fixture gives on the host (tests/service; and a host memprofd on
 * fixture-plain):
 * - fixture-attach links libmemprof, so the service traces it on the
 *   in-process path: kernel "outer" allocates one 700-byte block in precise
 *   mode (and frees the 500 allocated before attach: an unknown free);
 * - fixture-plain does not: in precise mode the service injects libmemprof
 *   into it (docs/TRACER.md "Injection"; not in a sanitizer build, whose
 *   installed libmemprof a plain process cannot load: the eBPF path
 *   there), in sampled mode it is attached with --tracer bpf (the path the
 *   issue found silently empty in a container): 700 bytes allocated and
 *   freed in one block each on either path, the 500-byte unknown free in
 *   precise mode; sampled mode with a one-byte interval samples every
 *   block;
 * - rss mode has no allocator probes: no heap figures, RSS samples only. */
static void profile_mode(const char *mode, enum mp_trace_mode want_mode, bool plain, int *attaches)
{
	static const struct mp_mem_stats none = { 0 }, plain_700 = {
		.alloc_bytes = 700, .alloc_count = 1, .free_bytes = 700, .free_count = 1
	};
	bool bpf = plain, rss = want_mode == MP_TRACE_RSS;
	bool force_bpf = plain && want_mode == MP_TRACE_SAMPLED;
#ifdef MP_TEST_SANITIZED
	bool injects = false;
#else
	bool injects = plain && want_mode == MP_TRACE_PRECISE;
#endif
	/* rss mode has no allocator path to choose: always the eBPF one
	 * (tracepoints). */
	enum mp_tracer_path want_path =
		rss || force_bpf || (plain && !injects) ? MP_PATH_BPF : MP_PATH_INPROCESS;
	char out[4096], *file = fmt("%s/%s-%d.memprof", outdir, mode, (int)plain);
	struct fixture f;
	int r;

	fixture_start(&f, bpf ? fixture_plain : fixture, 0, 0);
	if (force_bpf)
		r = ct(out, MEMPROF, "attach", f.ns_s, "--mode", mode, "--sample-bytes", "1",
		       "--tracer", "bpf", "-o", file);
	else if (want_mode == MP_TRACE_SAMPLED)
		r = ct(out, MEMPROF, "attach", f.ns_s, "--mode", mode, "--sample-bytes", "1", "-o",
		       file);
	else
		r = ct(out, MEMPROF, "attach", f.ns_s, "--mode", mode, "-o", file);
	cr_assert_eq(r, 0, "memprof attach --mode %s: %s\njournal:\n%s", mode, out, journal());
	cr_assert(!strncmp(out, fmt("attached to pid %d (target ", (int)f.ns),
			   strlen(fmt("attached to pid %d (target ", (int)f.ns))),
		  "attach: %s", out);
	(*attaches)++;
	/* RSS samples at the service's 100 Hz, however slowly it runs. */
	cr_assert(MP_TEST_WAIT_FOR(dumped_rss(f.ns_s, fmt("%s.dump", file)) > 0, 60000),
		  "mode %s: no RSS sample in 60 s", mode);
	fixture_finish(&f);
	wait_no_targets();

	struct mp_profile *p = load(file);
	const struct mp_mem_stats *got = bpf ? &p->mem : &p->invocations[0].incl;
	const struct mp_mem_stats *want = rss ? &none : bpf ? &plain_700 : &outer_700;

	cr_assert_eq(p->pid, f.ns);
	cr_assert_str_eq(p->exe, bpf ? fixture_plain : fixture);
	cr_assert_eq(p->trace_mode, want_mode, "mode %s: profile says %d", mode, p->trace_mode);
	cr_assert_eq(p->tracer_path, want_path, "mode %s: tracer path %d, want %d (%s)", mode,
		     p->tracer_path, want_path, p->tracer_path_reason);
	cr_assert_eq(p->injected, injects, "mode %s: %s", mode, p->tracer_path_reason);
	cr_assert_eq(p->n_invocations, bpf ? 0 : 1);
	if (!bpf) {
		cr_assert_str_eq(p->names[p->invocations[0].name], "outer");
		cr_assert_eq(p->invocations[0].flags, MP_INV_F_OPEN_AT_ATTACH);
	}
	cr_assert(!memcmp(got, want, sizeof(*want)),
		  "mode %s, path %d: allocated %llu B in %llu blocks, freed %llu B in %llu, "
		  "added %lld",
		  mode, want_path, (unsigned long long)got->alloc_bytes,
		  (unsigned long long)got->alloc_count, (unsigned long long)got->free_bytes,
		  (unsigned long long)got->free_count, (long long)got->bytes_added);
	cr_assert_eq(p->unknown_frees, want_mode == MP_TRACE_PRECISE ? 1 : 0, "mode %s", mode);
	cr_assert_eq(p->peak_bytes, rss ? 0 : 700, "mode %s: peak %llu", mode,
		     (unsigned long long)p->peak_bytes);
	cr_assert_eq(p->probe_hits_unmatched, 0);
	cr_assert_gt(p->n_rss, 0, "mode %s: no RSS sample", mode);
	cr_assert_eq(p->truncated, false);
	mp_profile_free(p);
}

/* Capability names the unit may use, by number (linux/capability.h). */
static uint64_t cap_mask(const char *list)
{
	static const struct {
		const char *name;
		int bit;
	} caps[] = { { "CAP_CHOWN", 0 },
		     { "CAP_DAC_OVERRIDE", 1 },
		     { "CAP_DAC_READ_SEARCH", 2 },
		     { "CAP_FOWNER", 3 },
		     { "CAP_KILL", 5 },
		     { "CAP_SETGID", 6 },
		     { "CAP_SETUID", 7 },
		     { "CAP_NET_ADMIN", 12 },
		     { "CAP_IPC_LOCK", 14 },
		     { "CAP_SYS_PTRACE", 19 },
		     { "CAP_SYS_ADMIN", 21 },
		     { "CAP_SYS_RESOURCE", 24 },
		     { "CAP_PERFMON", 38 },
		     { "CAP_BPF", 39 },
		     { "CAP_CHECKPOINT_RESTORE", 40 } };
	char buf[1024], *save = NULL;
	uint64_t m = 0;

	snprintf(buf, sizeof(buf), "%s", list);
	for (char *w = strtok_r(buf, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
		size_t i;

		for (i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
			if (!strcmp(w, caps[i].name))
				break;
		cr_assert_lt(i, sizeof(caps) / sizeof(caps[0]),
			     "capability %s of the unit is not in this test's table", w);
		m |= 1ull << caps[i].bit;
	}
	return m;
}

/* The value of "KEY=" in the installed unit (one line). */
static char *unit_line(const char *key)
{
	static char unit[16384];
	char *l, want[64];

	slurp(fmt("%s%s", stage, UNIT_PATH), unit, sizeof(unit));
	snprintf(want, sizeof(want), "\n%s=", key);
	l = strstr(unit, want);
	cr_assert_not_null(l, "%s= not in the unit", key);
	l += strlen(want);
	return fmt("%.*s", (int)strcspn(l, "\n"), l);
}

static uint64_t status_hex(const char *status, const char *key)
{
	const char *l = strstr(status, key);

	cr_assert_not_null(l, "%s not in /proc/PID/status", key);
	return strtoull(l + strlen(key), NULL, 16);
}

static pid_t service_host_pid(void)
{
	pid_t ns = atoi(unit_prop("MainPID")), h;

	cr_assert_gt(ns, 0, "memprofd has no main pid");
	h = host_pid_of(ns);
	cr_assert_gt(h, 0, "memprofd (pid %d in the container) not found on the host", (int)ns);
	return h;
}

/* The service process: the unit's user, capabilities and sandbox. */
static void check_sandbox(void)
{
	char st[8192], mi[65536], a[64], b[64], *l;
	pid_t h = service_host_pid();
	uint64_t bounding = cap_mask(unit_line("CapabilityBoundingSet"));
	uint64_t ambient = cap_mask(unit_line("AmbientCapabilities"));
	char passwd[65536], *pw;
	unsigned uid;
	ssize_t k;

	slurp(fmt("/proc/%d/root/etc/passwd", (int)leader), passwd, sizeof(passwd));
	pw = strstr(passwd, "\nmemprofd:");
	cr_assert_not_null(pw, "sysusers did not create user memprofd:\n%s", passwd);
	cr_assert_eq(sscanf(pw, "\nmemprofd:x:%u:", &uid), 1);
	slurp(fmt("/proc/%d/status", (int)h), st, sizeof(st));
	cr_assert_not_null(strstr(st, fmt("\nUid:\t%u\t%u\t%u\t%u\n", uid, uid, uid, uid)),
			   "memprofd does not run as memprofd (uid %u):\n%s", uid, st);
	cr_assert_eq(status_hex(st, "\nCapBnd:\t"), bounding, "CapBnd %" PRIx64 " != unit %" PRIx64,
		     status_hex(st, "\nCapBnd:\t"), bounding);
	cr_assert_eq(status_hex(st, "\nCapAmb:\t"), ambient);
	cr_assert_eq(status_hex(st, "\nCapPrm:\t"), ambient);
	cr_assert_eq(status_hex(st, "\nCapEff:\t"), ambient, "CapEff %" PRIx64 " != unit %" PRIx64,
		     status_hex(st, "\nCapEff:\t"), ambient);
	cr_assert_not_null(strstr(st, "\nNoNewPrivs:\t1\n"), "NoNewPrivileges=yes not applied");
	/* SystemCallFilter=: a seccomp filter of its own (mode 2). */
	cr_assert_not_null(strstr(st, "\nSeccomp:\t2\n"), "no seccomp filter");

	/* A mount namespace of its own (PrivateTmp, ProtectSystem, ...). */
	k = readlink(fmt("/proc/%d/ns/mnt", (int)h), a, sizeof(a) - 1);
	cr_assert_gt(k, 0);
	a[k] = '\0';
	k = readlink(fmt("/proc/%d/ns/mnt", (int)leader), b, sizeof(b) - 1);
	cr_assert_gt(k, 0);
	b[k] = '\0';
	cr_assert_str_neq(a, b, "memprofd shares pid 1's mount namespace");
	/* ProtectSystem=strict: its / is read-only; PrivateTmp: its /tmp is a
	 * mount of its own. */
	slurp(fmt("/proc/%d/mountinfo", (int)h), mi, sizeof(mi));
	l = strstr(mi, " / / ");
	cr_assert_not_null(l, "no / in memprofd's mountinfo");
	cr_assert(!strncmp(l, " / / ro,", 8), "memprofd's / is writable: %.80s", l);
	cr_assert_not_null(strstr(mi, " /tmp rw,"), "PrivateTmp=yes: no /tmp mount of its own");
}

/* Lines of the service's journal (every invocation in this boot). */
static char journal_cursor[512] = "--since=2000-01-01";

static char *journal(void)
{
	static char out[262144];

	cr_assert_eq(in_ct(out, sizeof(out), "journalctl", "-u", "memprofd.service", "-o", "cat",
			   "--no-pager", journal_cursor, NULL),
		     0, "journalctl: %s", out);
	return out;
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* journald receives the service's stdout asynchronously: wait (bounded)
 * until @needle appears at least @n times. */
static char *journal_wait(const char *needle, int n)
{
	char *j;

	MP_TEST_WAIT_FOR(count(j = journal(), needle) >= n, 60000);
	cr_assert_geq(count(j, needle), n, "journal: %d times '%s' (want %d):\n%s",
		      count(j, needle), needle, n, j);
	return j;
}

/* Starts the service (stopped first: the preset enables it and it may
 * already run from the boot) and checks that it came up through
 * sd_notify. */
static void service_start(void)
{
	char out[4096];

	cr_assert_eq(ct(out, "systemctl", "stop", "memprofd.service"), 0, "stop: %s", out);
	/* The journal checks start here: the boot's start is not ours. */
	cr_assert_eq(ct(out, "journalctl", "-n", "0", "--show-cursor", "--no-pager"), 0, "%s", out);
	cr_assert_not_null(strstr(out, "-- cursor: "), "journalctl --show-cursor: %s", out);
	snprintf(journal_cursor, sizeof(journal_cursor), "--after-cursor=%.*s",
		 (int)strcspn(strstr(out, "-- cursor: ") + 11, "\n"),
		 strstr(out, "-- cursor: ") + 11);
	cr_assert_eq(ct(out, "systemctl", "start", "memprofd.service"), 0, "start: %s", out);
	cr_assert_str_eq(unit_prop("Type"), "notify");
	cr_assert_str_eq(unit_prop("ActiveState"), "active");
	cr_assert_str_eq(unit_prop("SubState"), "running");
	/* STATUS= reaches systemd only through sd_notify. */
	cr_assert_str_eq(unit_prop("StatusText"), "listening on " CONTROL);
}

/* The sanitizer build installs a sanitized memprofd (its runtime comes from
 * the host's /usr, shared with the container). LeakSanitizer's exit check
 * stops the process's threads with ptrace, which the unit's
 * SystemCallFilter= refuses (as it should): the stop would fail. A runtime
 * drop-in turns the leak check off for this test only; tests/service runs
 * the sanitized daemon with it. */
static void sanitizer_dropin(void)
{
#ifdef MP_TEST_SANITIZED
	char out[4096];
	FILE *f;

	cr_assert_eq(ct(out, "mkdir", "-p", "/run/systemd/system/memprofd.service.d"), 0, "%s",
		     out);
	f = fopen(fmt("/proc/%d/root/run/systemd/system/memprofd.service.d/asan.conf", (int)leader),
		  "w");
	cr_assert_not_null(f, "drop-in: %s", strerror(errno));
	fputs("[Service]\nEnvironment=ASAN_OPTIONS=detect_leaks=0\n", f);
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(ct(out, "systemctl", "daemon-reload"), 0, "daemon-reload: %s", out);
#endif
}

static void write_config(const char *text)
{
	FILE *f = fopen(fmt("%s%s", stage, CONF_PATH), "w");

	cr_assert_not_null(f);
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
}

/* A non-root user of the container attaches to its own process through the
 * socket; the same user is refused root's. */
static void check_user(int *attaches, int *refusals)
{
	char out[4096], passwd[65536], *pw, u[32], g[32];
	char *file = fmt("%s/user.memprof", outdir);
	struct fixture mine, roots;

	cr_assert_eq(ct(out, "useradd", "--system", "--no-create-home", "--shell",
			"/usr/sbin/nologin", "memproftest"),
		     0, "useradd: %s", out);
	slurp(fmt("/proc/%d/root/etc/passwd", (int)leader), passwd, sizeof(passwd));
	pw = strstr(passwd, "\nmemproftest:");
	cr_assert_not_null(pw);
	cr_assert_eq(sscanf(pw, "\nmemproftest:x:%u:%u:", &test_uid, &test_gid), 2);
	snprintf(u, sizeof(u), "--reuid=%u", (unsigned)test_uid);
	snprintf(g, sizeof(g), "--regid=%u", (unsigned)test_gid);

	fixture_start(&mine, fixture, test_uid, test_gid);
	cr_assert_eq(ct(out, "setpriv", u, g, "--clear-groups", MEMPROF, "attach", mine.ns_s,
			"--mode", "precise", "-o", file),
		     0, "the user's attach to its own process: %s", out);
	(*attaches)++;
	fixture_start(&roots, fixture, 0, 0);
	cr_assert_eq(ct(out, "setpriv", u, g, "--clear-groups", MEMPROF, "attach", roots.ns_s), 1,
		     "the user attached to root's process: %s", out);
	cr_assert_not_null(strstr(out, "memprof attach: not permitted: "), "%s", out);
	(*refusals)++;
	/* The user sees its target, nobody else's. */
	cr_assert_eq(ct(out, "setpriv", u, g, "--clear-groups", MEMPROF, "list"), 0);
	cr_assert(!strncmp(out, fmt("pid=%d id=", (int)mine.ns),
			   strlen(fmt("pid=%d id=", (int)mine.ns))),
		  "list: %s", out);
	cr_assert_eq(count(out, "\n"), 1, "list: %s", out);
	fixture_finish(&mine);
	fixture_finish(&roots);
	wait_no_targets();

	struct mp_profile *p = load(file);
	struct stat sb;

	cr_assert_eq(stat(file, &sb), 0);
	cr_assert_eq(sb.st_uid, test_uid, "the profile is not the requester's");
	cr_assert_eq(p->pid, mine.ns);
	cr_assert_eq(p->n_invocations, 1);
	cr_assert(!memcmp(&p->invocations[0].incl, &outer_700, sizeof(outer_700)));
	mp_profile_free(p);
	journal_wait(fmt("refused attach to pid %d requested by uid %u (pid ", (int)roots.ns,
			 (unsigned)test_uid),
		     1);
}

static void service_status(char *out, size_t cap)
{
	cr_assert_eq(in_ct(out, cap, MEMPROF, "status", NULL), 0, "status: %s", out);
}

static void check_reload(void)
{
	char out[4096];

	write_config("# tests/systemd\nmax_targets = 7\nrss_hz = 37\n");
	cr_assert_eq(ct(out, "systemctl", "reload", "memprofd.service"), 0, "reload: %s", out);
	/* ExecReload= sends SIGHUP: the new values follow asynchronously. */
	MP_TEST_WAIT_FOR((service_status(out, sizeof(out)), strstr(out, "\nmax_targets: 7\n")),
			 60000);
	cr_assert_not_null(strstr(out, "\nmax_targets: 7\nconfig: " CONF_PATH), "%s", out);
	cr_assert_not_null(strstr(out, "\nrss_hz: 37\n"), "%s", out);
	/* The daemon's two lines, in that order; systemd's own "Reloaded
	 * memprofd.service" may come between them (its messages and the
	 * service's stdout reach the journal on separate streams). */
	journal_wait("configuration reloaded from " CONF_PATH ": 0 collectors, max_targets 7", 1);
	const char *j = journal_wait("SIGHUP: reloading " CONF_PATH "\n", 1);
	const char *hup = strstr(j, "SIGHUP: reloading " CONF_PATH "\n");
	const char *done =
		strstr(j, "configuration reloaded from " CONF_PATH ": 0 collectors, max_targets 7");
	cr_assert(hup && done && hup < done, "journal: reload logged out of order:\n%s", j);
	cr_assert_str_eq(unit_prop("ActiveState"), "active");
}

/* systemctl stop writes every open profile, each decodable. */
static void check_stop(int *attaches)
{
	struct fixture f[2];
	char out[4096];

	for (int i = 0; i < 2; i++) {
		fixture_start(&f[i], fixture, 0, 0);
		cr_assert_eq(ct(out, MEMPROF, "attach", f[i].ns_s, "--mode", "precise", "-o",
				fmt("%s/stop%d.memprof", outdir, i)),
			     0, "attach: %s", out);
		(*attaches)++;
	}
	cr_assert_eq(ct(out, "systemctl", "stop", "memprofd.service"), 0, "stop: %s", out);
	cr_assert_str_eq(unit_prop("ActiveState"), "inactive", "after stop; journal:\n%s",
			 journal());
	/* RuntimeDirectory= is gone with the service. */
	cr_assert_neq(access(fmt("/proc/%d/root/run/memprofd", (int)leader), F_OK), 0);
	for (int i = 0; i < 2; i++) {
		struct mp_profile *p = load(fmt("%s/stop%d.memprof", outdir, i));
		struct mp_mem_stats zero = { 0 };

		cr_assert_eq(p->pid, f[i].ns);
		cr_assert_eq(p->n_invocations, 1);
		cr_assert_str_eq(p->names[p->invocations[0].name], "outer");
		cr_assert_eq(p->invocations[0].flags, MP_INV_F_OPEN_AT_ATTACH | MP_INV_F_TRUNCATED);
		cr_assert(!memcmp(&p->invocations[0].incl, &zero, sizeof(zero)));
		cr_assert_eq(p->truncated, true);
		mp_profile_free(p);
		fixture_finish(&f[i]);
	}
	journal_wait("stopping: flushing 2 targets", 1);
}

Test(systemd, service_in_a_booted_container, .timeout = 280, .fini = teardown)
{
	int attaches = 0, refusals = 0, starts = 0;
	char out[4096], *j;
	struct stat sb;

	mp_test_need_root("systemd-nspawn, BPF and nsenter");
	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "systemd");
	cr_assert_eq(chmod(tmpdir, 0755), 0);
	snprintf(outdir, sizeof(outdir), "%s/out", tmpdir);
	snprintf(stage, sizeof(stage), "%s/stage", tmpdir);
	snprintf(fixture, sizeof(fixture), "%s", mp_test_build_path("tests/e2e/fixture-attach"));
	snprintf(fixture_plain, sizeof(fixture_plain), "%s",
		 mp_test_build_path("tests/e2e/fixture-plain"));
	/* The test user writes its profile here too. */
	cr_assert_eq(mkdir(outdir, 0755), 0);
	cr_assert_eq(chmod(outdir, 01777), 0);
	stage_install();
	/* Tests assert exact heap figures: nothing else differs from the
	 * shipped configuration. */
	write_config("# tests/systemd\n");
	/* tmpfiles.d's "d" line sets the mode of the directory memprofd
	 * reads, where the install put it (the prefix's, not /etc). */
	cr_assert_eq(chmod(fmt("%s%s", stage, CONF_DIR), 0700), 0);
	boot();

	/* sysusers.d created the user, tmpfiles.d the configuration dir. */
	cr_assert_eq(stat(fmt("/proc/%d/root" CONF_DIR, (int)leader), &sb), 0);
	cr_assert(S_ISDIR(sb.st_mode) && (sb.st_mode & 07777) == 0755 && sb.st_uid == 0,
		  "tmpfiles.d did not set up " CONF_DIR " (mode %o)", sb.st_mode & 07777);
	cr_assert_neq(stat(fmt("/proc/%d/root/etc/memprofd", (int)leader), &sb), 0,
		      "tmpfiles.d created /etc/memprofd, which a /usr/local install never reads");
	sanitizer_dropin();
	service_start();
	starts++;
	/* RuntimeDirectory=: the control socket's directory, the service's. */
	cr_assert_eq(stat(fmt("/proc/%d/root/run/memprofd", (int)leader), &sb), 0);
	cr_assert((sb.st_mode & 07777) == 0755, "/run/memprofd mode %o", sb.st_mode & 07777);
	check_sandbox();
	journal_wait("listening on " CONTROL, starts);

	/* Options the container cannot honour are said, not hidden: without
	 * a memory (pids) controller of its own, systemd shows no
	 * MemoryCurrent (TasksCurrent) and enforces no MemoryMax= (TasksMax=);
	 * memprofd then finds no limit to derive its memory_budget from and
	 * uses its default (2 GiB). On a host with the unified hierarchy both
	 * apply. */
	cr_assert_eq(ct(out, MEMPROF, "status"), 0, "status: %s", out);
	if (!strcmp(unit_prop("MemoryCurrent"), "[not set]")) {
		cr_assert_not_null(strstr(out, "\nmemory_budget_mib: "), "%s", out);
		cr_assert_null(strstr(out, "\nmemory_budget_mib: 0\n"), "%s", out);
		fprintf(stderr,
			"systemd-container: MemoryMax=%s is not enforced in this container (nspawn "
			"mounts the host's cgroup v1 controllers read-only: no memory controller "
			"for the unit), so memprofd uses its default memory_budget; the unit keeps "
			"it for real hosts\n",
			unit_prop("MemoryMax"));
	} else {
		cr_assert_not_null(strstr(out, "\nmemory_budget_mib: 1792\n"),
				   "MemoryMax=2G must give 7/8 of it: %s", out);
	}
	if (!strcmp(unit_prop("TasksCurrent"), "[not set]"))
		fprintf(stderr,
			"systemd-container: TasksMax=%s is not enforced in this container (no pids "
			"controller for the unit, as above); the unit keeps it for real hosts\n",
			unit_prop("TasksMax"));

	/* The service picks the path per target: in-process for a target
	 * with libmemprof, eBPF for one without. The in-process path's
	 * sampled mode is left out: on the host too it reports a 2162688-byte
	 * block the fixture never asked for (not a container matter). */
	profile_mode("precise", MP_TRACE_PRECISE, false, &attaches);
	profile_mode("rss", MP_TRACE_RSS, false, &attaches);
	profile_mode("precise", MP_TRACE_PRECISE, true, &attaches);
	profile_mode("sampled", MP_TRACE_SAMPLED, true, &attaches);
	profile_mode("rss", MP_TRACE_RSS, true, &attaches);

	/* Errors are answered and logged with their reason. */
	cr_assert_eq(ct(out, MEMPROF, "attach", "999999999"), 1, "%s", out);
	cr_assert_str_eq(out, "memprof attach: not permitted: no process 999999999\n");
	refusals++;
	journal_wait("): no process 999999999", 1);

	check_user(&attaches, &refusals);
	check_reload();

	check_stop(&attaches);

	/* One start line per start, one line per attach and per detach (a
	 * target flushed by stop is detached too), every refusal with its
	 * reason. */
	j = journal_wait("listening on " CONTROL, starts);
	cr_assert_eq(count(j, "listening on " CONTROL), starts, "%s", j);
	j = journal_wait("): attached for uid ", attaches);
	cr_assert_eq(count(j, "): attached for uid "), attaches, "%s", j);
	j = journal_wait(": detached (target ", attaches);
	cr_assert_eq(count(j, ": detached (target "), attaches, "%s", j);
	cr_assert_eq(count(j, "refused attach to pid "), refusals, "%s", j);
}
