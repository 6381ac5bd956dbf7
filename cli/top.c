// SPDX-License-Identifier: MIT
/*
 * `memprof top PID`: the command line and the terminal (top.h). The
 * screen is daemon/output/top_view.c's text, drawn with plain ANSI
 * escapes on the alternate screen; the terminal is restored on q, Ctrl-C,
 * SIGINT, SIGTERM, SIGHUP and every error after it was changed.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include "log.h"
#include "option_table.h"
#include "top.h"
#include "top_view.h"

/* Log lines written while the screen is up: the newest are kept and
 * printed once the terminal is back. */
#define LOG_KEEP 16
#define LOG_LINE 240

struct ui {
	struct top_source *src;
	struct termios saved;
	bool raw; /* the terminal is ours: restore it */
	int err_fd; /* the real stderr while it goes to log_r */
	int log_r;
	char logs[LOG_KEEP][LOG_LINE];
	unsigned n_logs; /* lines seen, the last LOG_KEEP kept */
	char partial[LOG_LINE];
	size_t partial_len;
	struct mp_profile *cur;
	char status[512];
	bool ended;
	enum mp_top_sort by;
	unsigned width, height;
	bool utf8;
	bool quit;
};

static void usage(FILE *f)
{
	fputs("Usage: memprof top PID [--direct | --control PATH] [--mode precise|sampled|rss]\n"
	      "                   [--sample-bytes N] [--tracer auto|inject|inprocess|bpf]\n"
	      "\n"
	      "A live view of PID's kernels, refreshed every second: per kernel name its\n"
	      "calls, LIVE (bytes of its own blocks still live), PEAK (the most one call\n"
	      "held above its start), ALLOC (bytes allocated, nested kernels included),\n"
	      "MAPPED (bytes of anonymous mappings made, apart from the heap); above\n"
	      "them the heap's live bytes and peak, the mappings' reserved bytes and\n"
	      "peak, and the RSS and its peak.\n"
	      "\n"
	      "Keys: l, p, c, a, m sort by live, peak, calls, alloc, mapped (highest\n"
	      "first); n by name; q (or Ctrl-C) quits and detaches from PID.\n"
	      "\n"
	      "How the snapshots are taken:\n"
	      "  through the memprofd service (attach, a dump every second, detach on q)\n"
	      "  when its socket answers, or with --control PATH; any user the service\n"
	      "  allows to attach to PID. A target attached before stays attached on q.\n"
	      "  --direct: a profiling session in this process (root, or the capabilities\n"
	      "  of memprofd), as `memprofd --pid`; also the way when no service answers\n"
	      "  at " MP_CTL_DEFAULT_PATH " and top runs as root.\n"
	      "\n"
	      "Options:\n"
	      "      --direct            profile in this process, without the service\n"
	      "      --control PATH      the service's socket (default " MP_CTL_DEFAULT_PATH ")\n"
	      "      --mode MODE         precise, sampled or rss; default: precise with\n"
	      "                          --direct, the service's `mode` through it\n"
	      "      --sample-bytes N    mean sampling interval (implies --mode sampled)\n"
	      "      --tracer PATH       auto, inject, inprocess or bpf (as memprofd --tracer)\n"
	      "\n"
	      "Needs a terminal; `memprof dump PID` prints one table instead.\n",
	      f);
}

/* A value of the option table, as the command line spells it. */
static int opt_value(enum mp_opt_id id, const char *arg, struct mp_opt_value *v)
{
	const struct mp_option *o = &mp_options_table[id];
	char hint[160];

	if (mp_opt_parse(o, MP_OPT_CLI, arg, v) == 0)
		return 0;
	mp_opt_hint(o, MP_OPT_CLI, hint, sizeof(hint));
	log_error("invalid --%s '%s' (%s; see --help)", o->name, arg, hint);
	return -EINVAL;
}

/* 0, 1 when --help was printed, or 2 (the exit status). */
static int parse_args(int argc, char **argv, struct top_args *a)
{
	static const struct option longopts[] = {
		{ "direct", no_argument, NULL, 'D' },
		{ "control", required_argument, NULL, 'c' },
		{ "mode", required_argument, NULL, 'm' },
		{ "sample-bytes", required_argument, NULL, 's' },
		{ "tracer", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	struct mp_opt_value v;
	int c;

	memset(a, 0, sizeof(*a));
	while ((c = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
		if (c == 'D')
			a->direct = true;
		else if (c == 'c')
			a->control = optarg;
		else if (c == 'm' && opt_value(MP_OPT_ID_MODE, optarg, &v) == 0)
			a->mode = optarg;
		else if (c == 's' && opt_value(MP_OPT_ID_SAMPLE_BYTES, optarg, &v) == 0)
			a->sample_bytes = v.u;
		else if (c == 't' && opt_value(MP_OPT_ID_TRACER, optarg, &v) == 0)
			a->tracer = optarg;
		else if (c == 'h')
			return usage(stdout), 1;
		else
			return 2; /* getopt or opt_value said why */
	}
	if (a->direct && a->control) {
		log_error("--direct and --control exclude each other (see --help)");
		return 2;
	}
	if (optind + 1 != argc) {
		log_error("expected one PID (see --help)");
		return 2;
	}
	if (mp_opt_parse(&mp_options_table[MP_OPT_ID_PID], MP_OPT_CLI, argv[optind], &v) < 0) {
		log_error("invalid pid '%s'", argv[optind]);
		return 2;
	}
	a->pid = (pid_t)v.u;
	return 0;
}

/* ---- the terminal ---- */

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static void term_size(struct ui *u)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
		u->width = ws.ws_col;
		u->height = ws.ws_row;
	} else {
		u->width = 80;
		u->height = 24;
	}
}

/* Keys one at a time, no echo, no signals from the keyboard (Ctrl-C is a
 * key: q), output processing kept; the alternate screen, no cursor. */
static int term_enter(struct ui *u)
{
	static const char enter[] = "\033[?1049h\033[?25l\033[H\033[2J";
	struct termios t;

	if (tcgetattr(STDIN_FILENO, &u->saved) < 0)
		return log_error_errno(-errno, "reading the terminal's settings: %m");
	t = u->saved;
	t.c_lflag &= ~(tcflag_t)(ICANON | ECHO | ISIG | IEXTEN);
	t.c_iflag &= ~(tcflag_t)(IXON | ICRNL);
	t.c_cc[VMIN] = 1;
	t.c_cc[VTIME] = 0;
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) < 0)
		return log_error_errno(-errno, "setting the terminal: %m");
	u->raw = true;
	return write_all(STDOUT_FILENO, enter, sizeof(enter) - 1);
}

static void term_leave(struct ui *u)
{
	static const char leave[] = "\033[m\033[?25h\033[?1049l";

	if (!u->raw)
		return;
	u->raw = false;
	(void)write_all(STDOUT_FILENO, leave, sizeof(leave) - 1);
	tcsetattr(STDIN_FILENO, TCSAFLUSH, &u->saved);
}

/* ---- log lines while the screen is up ---- */

static void log_keep(struct ui *u, const char *line, size_t len)
{
	char *dst = u->logs[u->n_logs++ % LOG_KEEP];

	if (len >= LOG_LINE)
		len = LOG_LINE - 1;
	memcpy(dst, line, len);
	dst[len] = '\0';
}

/* stderr into a pipe the loop reads: a message would tear the screen. */
static int logs_capture(struct ui *u)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return log_error_errno(-errno, "pipe: %m");
	u->err_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	if (u->err_fd < 0 || dup2(p[1], STDERR_FILENO) < 0) {
		int r = -errno;

		close(p[0]);
		close(p[1]);
		if (u->err_fd >= 0)
			close(u->err_fd);
		u->err_fd = -1;
		return log_error_errno(r, "redirecting stderr: %m");
	}
	close(p[1]);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	u->log_r = p[0];
	return 0;
}

/* Reads what was logged; whole lines are kept. */
static void logs_read(struct ui *u)
{
	char buf[4096];
	ssize_t n;

	while ((n = read(u->log_r, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\n') {
				log_keep(u, u->partial, u->partial_len);
				u->partial_len = 0;
			} else if (u->partial_len + 1 < LOG_LINE) {
				u->partial[u->partial_len++] = buf[i];
			}
		}
	}
}

/* stderr back, and the lines logged meanwhile written to it. */
static void logs_release(struct ui *u)
{
	unsigned first;

	if (u->err_fd < 0)
		return;
	logs_read(u);
	if (u->partial_len)
		log_keep(u, u->partial, u->partial_len);
	dup2(u->err_fd, STDERR_FILENO);
	close(u->err_fd);
	close(u->log_r);
	u->err_fd = u->log_r = -1;
	first = u->n_logs > LOG_KEEP ? u->n_logs - LOG_KEEP : 0;
	if (first)
		fprintf(stderr, "(%u earlier log lines not kept)\n", first);
	for (unsigned i = first; i < u->n_logs; i++)
		fprintf(stderr, "%s\n", u->logs[i % LOG_KEEP]);
}

/* ---- the screen ---- */

static int draw(struct ui *u)
{
	const char *status = u->status[0] ? u->status :
			     u->n_logs	  ? u->logs[(u->n_logs - 1) % LOG_KEEP] :
					    NULL;
	struct mp_top_view v = { .width = u->width,
				 .height = u->height,
				 .by = u->by,
				 .utf8 = u->utf8,
				 .pid = (int32_t)u->src->a.pid,
				 .via = top_source_via(u->src),
				 .status = status };
	char *text = NULL, *out = NULL;
	size_t len = 0, out_len = 0;
	uint32_t header = UINT32_MAX, line = 0;
	FILE *f;
	int r;

	r = mp_top_render(u->cur, &v, &text, &len, &header);
	if (r < 0)
		return log_error_errno(r, "drawing: %m");
	f = open_memstream(&out, &out_len);
	if (!f) {
		free(text);
		return log_error_errno(-ENOMEM, "drawing: %m");
	}
	/* Each line erased before it is written (erasing after the last
	 * column would take that column with it), no newline after the
	 * bottom line (it would scroll). */
	fputs("\033[H", f);
	for (char *s = text, *nl; (nl = strchr(s, '\n')); s = nl + 1, line++) {
		fputs("\033[K", f);
		if (line == header)
			fputs("\033[7m", f);
		fwrite(s, 1, (size_t)(nl - s), f);
		if (line == header)
			fputs("\033[m", f);
		if (line + 1 < u->height)
			fputs("\r\n", f);
	}
	if (line < u->height)
		fputs("\033[J", f);
	free(text);
	if (fclose(f) != 0) {
		free(out);
		return log_error_errno(-ENOMEM, "drawing: %m");
	}
	r = write_all(STDOUT_FILENO, out, out_len);
	free(out);
	return r < 0 ? log_error_errno(r, "writing to the terminal: %m") : 0;
}

/* A newer profile or status from the snapshot thread. */
static void take_feed(struct ui *u)
{
	struct top_feed *fd = &u->src->feed;
	uint64_t n;

	if (read(fd->wake_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		log_debug_errno(-errno, "eventfd: %m");
	pthread_mutex_lock(&fd->lock);
	if (fd->latest) {
		mp_profile_free(u->cur);
		u->cur = fd->latest;
		fd->latest = NULL;
	}
	snprintf(u->status, sizeof(u->status), "%s", fd->status);
	u->ended = fd->ended;
	pthread_mutex_unlock(&fd->lock);
}

/* Keys: a sort key redraws, q or Ctrl-C quits; escape sequences (arrows,
 * function keys) are skipped whole. End of input (the terminal hung up)
 * quits too. */
static void keys(struct ui *u)
{
	char buf[64];
	ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
	enum mp_top_sort by;

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		u->quit = true;
		return;
	}
	for (ssize_t i = 0; i < n; i++) {
		if (buf[i] == '\033')
			return;
		if (buf[i] == 'q' || buf[i] == 'Q' || buf[i] == 3)
			u->quit = true;
		else if (mp_top_sort_of_key(buf[i], &by) == 0)
			u->by = by;
	}
}

static void on_signal(struct ui *u, int sigfd)
{
	struct signalfd_siginfo si;

	while (read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGWINCH) {
			term_size(u);
			(void)write_all(STDOUT_FILENO, "\033[2J", 4);
		} else {
			u->quit = true;
		}
	}
}

static int ui_loop(struct ui *u, int sigfd)
{
	struct pollfd pfd[4] = {
		{ .fd = STDIN_FILENO, .events = POLLIN },
		{ .fd = sigfd, .events = POLLIN },
		{ .fd = u->src->feed.wake_fd, .events = POLLIN },
		{ .fd = u->log_r, .events = POLLIN },
	};
	int r;

	take_feed(u);
	r = draw(u);
	while (r == 0 && !u->quit) {
		if (poll(pfd, 4, -1) < 0) {
			if (errno == EINTR)
				continue;
			return log_error_errno(-errno, "poll: %m");
		}
		if (pfd[0].revents)
			keys(u);
		if (pfd[1].revents)
			on_signal(u, sigfd);
		if (pfd[2].revents)
			take_feed(u);
		if (pfd[3].revents)
			logs_read(u);
		if (!u->quit)
			r = draw(u);
	}
	return r;
}

/* The UI between the attach and the detach; the terminal restored on
 * every way out. */
static int ui_run(struct top_source *src, int sigfd)
{
	struct ui *u = calloc(1, sizeof(*u));
	int r;

	if (!u)
		return log_error_errno(-ENOMEM, "out of memory");
	u->src = src;
	u->err_fd = u->log_r = -1;
	u->by = MP_TOP_BY_LIVE;
	u->utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
	term_size(u);
	r = logs_capture(u);
	if (r == 0)
		r = term_enter(u);
	if (r == 0)
		r = ui_loop(u, sigfd);
	term_leave(u);
	logs_release(u);
	mp_profile_free(u->cur);
	free(u);
	return r;
}

int mp_top_main(int argc, char **argv)
{
	struct top_source *src;
	struct top_args a;
	sigset_t sigs;
	int r, sigfd, stop;
	bool left = false;

	r = parse_args(argc, argv, &a);
	if (r)
		return r == 1 ? 0 : r;
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
		log_error("needs a terminal on standard input and output "
			  "(`memprof dump PID` prints one table)");
		return 2;
	}
	setlocale(LC_CTYPE, "");
	/* Blocked before any thread starts, so that every thread inherits
	 * the mask and they all arrive here. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGWINCH);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	sigfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	src = malloc(sizeof(*src));
	if (sigfd < 0 || !src) {
		log_error_errno(sigfd < 0 ? -errno : -ENOMEM, "setting up: %m");
		free(src);
		return 1;
	}
	r = top_source_start(src, &a, sigfd);
	if (r == 0) {
		r = ui_run(src, sigfd);
		pthread_mutex_lock(&src->feed.lock);
		left = !src->direct && !src->we_attached && !src->feed.ended;
		pthread_mutex_unlock(&src->feed.lock);
		stop = top_source_stop(src);
		if (r == 0)
			r = stop;
	}
	if (r == 0 && left)
		printf("pid %d stays attached to memprofd (memprof detach %d ends it)\n",
		       (int)a.pid, (int)a.pid);
	free(src);
	close(sigfd);
	return r < 0 ? 1 : 0;
}
