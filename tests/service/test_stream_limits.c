// SPDX-License-Identifier: MIT
/*
 * Streaming resource limits (issue 12): collector slots are released with
 * their last target, a uid holds a bounded number of collectors, a hung
 * name resolution delays no one else, the queues together stay within the
 * configured total, and chunks a collector never took are counted and said
 * (issue 13, 7c). The streamer is driven directly where that is enough;
 * the slot and loss tests run the real service and memprofd.
 */
#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>

#include "helpers.h"
#include "stream.h"

static void push(struct mp_streamer *s, struct mp_profile *p, uint64_t target, uint64_t seq,
		 const char *url)
{
	struct mp_chunk_meta m = { .target_id = target,
				   .pid = 42,
				   .exe = "/bin/fixture",
				   .sequence = seq,
				   .window_begin_ns = 1,
				   .window_end_ns = 2 };
	char *extra[] = { (char *)url };

	cr_assert_eq(mp_streamer_push(s, &m, p, url ? extra : NULL, url ? 1 : 0), 0);
}

static int listen_tcp(int backlog, int *ret_port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(s, 0);
	cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(s, backlog), 0);
	cr_assert_eq(getsockname(s, (struct sockaddr *)&sa, &len), 0);
	*ret_port = ntohs(sa.sin_port);
	return s;
}

/* --- a resolver that hangs for one name until the test lets it go --- */

static pthread_mutex_t hang_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hang_cond = PTHREAD_COND_INITIALIZER;
static bool hang_entered, hang_released;

static int hanging_resolver(const char *host, const char *port, const struct addrinfo *hints,
			    struct addrinfo **ret)
{
	if (strcmp(host, "hang.invalid"))
		return getaddrinfo(host, port, hints, ret);
	pthread_mutex_lock(&hang_lock);
	hang_entered = true;
	pthread_cond_broadcast(&hang_cond);
	while (!hang_released)
		pthread_cond_wait(&hang_cond, &hang_lock);
	pthread_mutex_unlock(&hang_lock);
	return EAI_NONAME;
}

/* Target 1 streams to a name whose resolution never ends, target 2 to a
 * local collector: target 2's chunks arrive while the resolver still
 * hangs (before the fix, getaddrinfo ran under the streamer's lock on
 * its only thread, and nothing else went out). */
Test(stream_limits, hung_resolver_does_not_delay_other_targets, .timeout = 60)
{
	struct mp_streamer *s;
	struct mp_profile *p = small_profile();
	char url[64];
	int port, lfd = listen_tcp(8, &port), cfd;
	struct pollfd pf;
	uint8_t buf[4096];
	uint64_t len;
	ssize_t n;

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	cr_assert_eq(mp_streamer_new(1 << 20, &s), 0);
	mp_streamer_set_resolver(s, hanging_resolver);
	cr_assert_eq(mp_streamer_acquire(s, "tcp://hang.invalid:9", 1000), 0);
	cr_assert_eq(mp_streamer_acquire(s, url, 1000), 0);
	push(s, p, 1, 0, "tcp://hang.invalid:9");
	pthread_mutex_lock(&hang_lock);
	while (!hang_entered)
		pthread_cond_wait(&hang_cond, &hang_lock);
	pthread_mutex_unlock(&hang_lock);
	for (uint64_t seq = 0; seq < 3; seq++)
		push(s, p, 2, seq, url);
	pf = (struct pollfd){ .fd = lfd, .events = POLLIN };
	cr_assert_eq(poll(&pf, 1, 20000), 1, "the local collector was never connected to");
	cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	cr_assert_geq(cfd, 0);
	pf = (struct pollfd){ .fd = cfd, .events = POLLIN };
	cr_assert_eq(poll(&pf, 1, 20000), 1, "no chunk of target 2 arrived");
	n = recv(cfd, buf, sizeof(buf), 0);
	cr_assert_gt(n, 0);
	cr_assert_gt(mp_varint_decode(buf, (size_t)n, &len), 0);
	cr_assert_gt(len, 0);
	pthread_mutex_lock(&hang_lock);
	cr_assert(!hang_released && hang_entered, "the resolver must still be hanging");
	hang_released = true;
	pthread_cond_broadcast(&hang_cond);
	pthread_mutex_unlock(&hang_lock);
	mp_streamer_release(s, url, 1000);
	mp_streamer_release(s, "tcp://hang.invalid:9", 1000);
	mp_streamer_free(s);
	mp_profile_free(p);
	close(cfd);
	close(lfd);
}

/* A uid holds at most the configured number of distinct collectors; the
 * same URL again is no new one; a release makes room; root is not
 * limited by it, only by the slots left to the configured collectors. */
Test(stream_limits, per_uid_limit_and_slot_reserve, .timeout = 60)
{
	struct mp_streamer *s;
	char url[64];
	size_t n_target;

	cr_assert_eq(mp_streamer_new(1 << 20, &s), 0);
	mp_streamer_set_limits(s, 4, 0);
	for (int i = 0; i < 4; i++) {
		snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", 1000 + i);
		cr_assert_eq(mp_streamer_acquire(s, url, 1000), 0);
	}
	cr_assert_eq(mp_streamer_acquire(s, "tcp://127.0.0.1:1000", 1000), 0, "not distinct");
	cr_assert_eq(mp_streamer_acquire(s, "tcp://127.0.0.1:2000", 1000), -EDQUOT);
	cr_assert_eq(mp_streamer_acquire(s, "tcp://127.0.0.1:2000", 1001), 0, "another uid");
	mp_streamer_release(s, "tcp://127.0.0.1:1003", 1000);
	cr_assert_eq(mp_streamer_acquire(s, "tcp://127.0.0.1:2001", 1000), 0);
	/* Root: every per-target slot, then -ENOSPC; the configured
	 * collectors still have theirs. */
	for (int i = 0;; i++) {
		int r;

		snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", 3000 + i);
		r = mp_streamer_acquire(s, url, 0);
		if (r == -ENOSPC)
			break;
		cr_assert_eq(r, 0);
		cr_assert_lt(i, MP_STREAM_MAX_COLLECTORS);
	}
	mp_streamer_slots(s, &n_target);
	cr_assert_eq(n_target, MP_STREAM_MAX_COLLECTORS - MP_STREAM_GLOBAL_SLOTS);
	{
		char *globals[MP_STREAM_GLOBAL_SLOTS];
		char g[MP_STREAM_GLOBAL_SLOTS][64];

		for (int i = 0; i < MP_STREAM_GLOBAL_SLOTS; i++) {
			snprintf(g[i], sizeof(g[i]), "tcp://127.0.0.1:%d", 5000 + i);
			globals[i] = g[i];
		}
		cr_assert_eq(mp_streamer_set_global(s, globals, MP_STREAM_GLOBAL_SLOTS), 0);
	}
	mp_streamer_free(s);
}

/* Collectors that never connect (no listener) keep everything queued:
 * the queues together never hold more than the configured total, and
 * every chunk that did not fit is counted for its target. */
Test(stream_limits, total_buffer_bound, .timeout = 60)
{
	struct mp_streamer *s;
	struct mp_profile *p = small_profile();
	char dir[] = "/tmp/memprof-limits-XXXXXX", url[3][128];
	uint64_t total, queued, one, lost = 0;

	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(mp_streamer_new(1 << 20, &s), 0);
	for (int i = 0; i < 3; i++) {
		snprintf(url[i], sizeof(url[i]), "unix:%s/none-%d", dir, i);
		cr_assert_eq(mp_streamer_acquire(s, url[i], 0), 0);
	}
	push(s, p, 1, 0, url[0]);
	one = mp_streamer_queued_total(s);
	cr_assert_gt(one, 0);
	/* Room for 4.5 chunks, shared by three collectors. */
	total = one * 9 / 2;
	mp_streamer_set_limits(s, 0, total);
	for (uint64_t seq = 1; seq < 30; seq++) {
		push(s, p, 1 + seq % 3, seq, url[seq % 3]);
		queued = mp_streamer_queued_total(s);
		cr_assert_leq(queued, total, "queued %" PRIu64 " > total %" PRIu64, queued, total);
	}
	for (uint64_t t = 1; t <= 3; t++)
		lost += mp_streamer_target_lost(s, t, false);
	/* Chunk sizes differ by a byte or two (varints of the sequence). */
	cr_assert_eq(lost, 30 - mp_streamer_queued_total(s) / one, "lost %" PRIu64, lost);
	cr_assert_eq(lost, 26);
	for (int i = 0; i < 3; i++)
		mp_streamer_release(s, url[i], 0);
	mp_streamer_free(s);
	mp_profile_free(p);
	rmdir(dir);
}

static bool status_has_target_collector(const struct daemon *d)
{
	char out[65536];

	cr_assert_eq(client(out, sizeof(out), d, "status", NULL), 0);
	return strstr(out, " target state=") != NULL;
}

/* Whether the log file @path holds @needle anywhere (the service's log of
 * a hundred attaches may pass the 64 KiB that log_has() reads). */
static bool log_file_has(const char *path, const char *needle)
{
	char *text = NULL;
	size_t size = 0;
	bool found;
	FILE *f = fopen(path, "re"), *m = open_memstream(&text, &size);
	char buf[65536];
	size_t n;

	cr_assert_not_null(m);
	while (f && (n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, m);
	if (f)
		fclose(f);
	fclose(m);
	found = strstr(text, needle) != NULL;
	free(text);
	return found;
}

/* Takes what the collector @lfd got, so that it never blocks. */
static void drain_accepts(int lfd)
{
	for (int c; (c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0;)
		close(c);
}

/* 100 distinct per-target URLs, one attach/detach after another: every
 * slot is given back (before the fix the 49th attach failed for want of a
 * slot, and so did a reload). The collector is a Unix socket reached
 * through 100 symlinks, so that each URL is distinct and answers. */
Test(stream_limits, hundred_urls_in_sequence_leave_no_slot, .timeout = 600, .fini = cleanup)
{
	char out[8192], sock[512], url[600], ps[32], link[512];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct daemon d;
	int lfd, i;
	pid_t f;

	need_root();
	snprintf(sock, sizeof(sock), "%s", tmp_of("coll.sock"));
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	cr_assert_lt(strlen(sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 256), 0);
	daemon_start(&d, "mode = rss\nrss_hz = 0\nstream_interval = 60\n", NULL);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	for (i = 0; i < 100; i++) {
		snprintf(link, sizeof(link), "%s/l%d", tmpdir, i);
		cr_assert_eq(symlink(sock, link), 0);
		snprintf(url, sizeof(url), "unix:%s", link);
		cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--stream", url, NULL), 0,
			     "attach %d: %s (see %s)", i, out, d.log);
		cr_assert_eq(client(out, sizeof(out), &d, "detach", ps, NULL), 0, "detach %d: %s",
			     i, out);
		drain_accepts(lfd);
	}
	MP_TEST_WAIT_FOR((drain_accepts(lfd), !status_has_target_collector(&d)), 60000);
	cr_assert(!status_has_target_collector(&d), "a per-target collector slot stayed");
	cr_assert_eq(kill(d.pid, SIGHUP), 0);
	/* The reload is done when it says so, or says why not. */
	cr_assert(MP_TEST_WAIT_FOR(log_file_has(d.log, "configuration reloaded from ") ||
					   log_file_has(d.log, "collectors: "),
				   60000),
		  "no reload in %s", d.log);
	cr_assert(!log_file_has(d.log, "collectors: No space"), "reload failed");
	cr_assert(log_file_has(d.log, "configuration reloaded from "), "reload failed, see %s",
		  d.log);
	cr_assert_eq(daemon_stop(&d), 0);
	fixture_finish(f);
	close(lfd);
}

/* Whether process @pid, running @exe, holds a TCP socket to port @port of
 * this host (its network namespace's /proc/PID/net/tcp, matched by inode).
 * Until its exec, a child of this test holds the test's own sockets. */
static bool connects_to(pid_t pid, const char *exe, int port)
{
	char path[64], line[512], ran[PATH_MAX], want[PATH_MAX];
	unsigned long inodes[256], ino;
	size_t n = 0;
	bool found = false;
	struct dirent *e;
	unsigned rport;
	ssize_t k;
	DIR *dir;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	k = readlink(path, ran, sizeof(ran) - 1);
	if (k <= 0 || !realpath(exe, want))
		return false;
	ran[k] = '\0';
	if (strcmp(ran, want))
		return false;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return false;
	while ((e = readdir(dir)) && n < 256) {
		char fd[400], link[64];

		snprintf(fd, sizeof(fd), "%s/%s", path, e->d_name);
		k = readlink(fd, link, sizeof(link) - 1);
		if (k <= 0)
			continue;
		link[k] = '\0';
		if (sscanf(link, "socket:[%lu]", &ino) == 1)
			inodes[n++] = ino;
	}
	closedir(dir);
	snprintf(path, sizeof(path), "/proc/%d/net/tcp", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (sscanf(line, " %*u: %*x:%*x %*x:%x %*x %*x:%*x %*x:%*x %*x %*u %*u %lu", &rport,
			   &ino) != 2 ||
		    rport != (unsigned)port)
			continue;
		for (size_t i = 0; i < n; i++)
			if (inodes[i] == ino)
				found = true;
	}
	fclose(f);
	return found;
}

/* Issue 13, 7c: memprofd --stream to a collector that never answers (its
 * listen queue is full, so the connection never completes). At the end
 * the log says how many chunks were never delivered, and the written
 * profile's loss counter holds the same number. */
Test(stream_limits, never_answering_collector_loss_is_said, .timeout = 120, .fini = cleanup)
{
	char url[64], ps[32], out[512], log[65536], *hit;
	int port, lfd = listen_tcp(0, &port), fill[4], logfd, st;
	unsigned long long never = 0;
	struct mp_profile *p;
	pid_t f, d;
	FILE *lf;
	size_t n;

	need_root();
	/* Fill the accept queue: later connections stay in SYN-SENT. */
	for (int i = 0; i < 4; i++) {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_port = htons((uint16_t)port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		connect(fill[i], (struct sockaddr *)&sa, sizeof(sa));
	}
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	snprintf(out, sizeof(out), "%s", tmp_of("fg.memprof"));
	logfd = open(tmp_of("fg.log"), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	char *argv[] = { path_of("cli/memprofd"),
			 "--pid",
			 ps,
			 "--stream",
			 url,
			 "--stream-interval",
			 "0.2",
			 "--print",
			 "none",
			 "-o",
			 out,
			 NULL };
	d = spawn(argv, logfd, logfd);
	close(logfd);
	/* The streamer connects only with a chunk queued: a periodic one is,
	 * whatever the time it took to get there. */
	cr_assert(MP_TEST_WAIT_FOR(connects_to(d, argv[0], port), 60000),
		  "memprofd never connected to the collector, see %s", tmp_of("fg.log"));
	kill(d, SIGTERM);
	cr_assert_eq(waitpid(d, &st, 0), d);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memprofd status %d", st);
	lf = fopen(tmp_of("fg.log"), "r");
	cr_assert_not_null(lf);
	n = fread(log, 1, sizeof(log) - 1, lf);
	log[n] = '\0';
	fclose(lf);
	hit = strstr(log, " never delivered (shutdown)");
	cr_assert_not_null(hit, "no final loss line in: %s", log);
	while (hit > log && hit[-1] != ':')
		hit--;
	cr_assert_eq(sscanf(hit, " %llu chunks", &never), 1, "%s", log);
	cr_assert_geq(never, 2, "a periodic chunk and the final one at least: %s", log);
	p = load(out);
	cr_assert_eq(p->stream_chunks_lost, never, "profile %" PRIu64 ", log %llu",
		     p->stream_chunks_lost, never);
	mp_profile_free(p);
	fixture_finish(f);
	for (int i = 0; i < 4; i++)
		close(fill[i]);
	close(lfd);
}
