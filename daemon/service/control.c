// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "option_table.h"

static bool key_ok(const char *k, size_t n)
{
	if (!n || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((k[i] >= 'a' && k[i] <= 'z') || k[i] == '_'))
			return false;
	return true;
}

static int bad(struct mp_ctl_msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct mp_ctl_msg *m, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m->why, sizeof(m->why), fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

int mp_ctl_parse(const void *buf, size_t len, struct mp_ctl_msg *m)
{
	char *p, *end, *nul;

	m->n = 0;
	m->why[0] = '\0';
	if (len > MP_CTL_MAX_MSG)
		return bad(m, "message longer than %u bytes", MP_CTL_MAX_MSG);
	memcpy(m->text, buf, len);
	m->text[len] = '\0';
	nul = memchr(m->text, '\0', len);
	if (nul)
		return bad(m, "NUL byte at offset %zu", (size_t)(nul - m->text));
	if (len && m->text[len - 1] != '\n')
		return bad(m, "the last line does not end with a newline");
	for (p = m->text, end = m->text + len; p < end;) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *eq = memchr(p, '=', (size_t)(nl - p));

		if (m->n >= MP_CTL_MAX_FIELDS)
			return bad(m, "more than %u lines", MP_CTL_MAX_FIELDS);
		if ((size_t)(nl - p) > MP_CTL_MAX_LINE)
			return bad(m, "line %zu longer than %u bytes", m->n + 1, MP_CTL_MAX_LINE);
		if (!eq)
			return bad(m, "line %zu is not key=value", m->n + 1);
		if (!key_ok(p, (size_t)(eq - p)))
			return bad(m, "line %zu: the key is not 1 to 64 of [a-z_]", m->n + 1);
		*eq = '\0';
		*nl = '\0';
		m->f[m->n].key = p;
		m->f[m->n].value = eq + 1;
		m->n++;
		p = nl + 1;
	}
	return 0;
}

const char *mp_ctl_get(const struct mp_ctl_msg *m, const char *key)
{
	for (size_t i = 0; i < m->n; i++)
		if (!strcmp(m->f[i].key, key))
			return m->f[i].value;
	return NULL;
}

int mp_ctl_get_u64(const struct mp_ctl_msg *m, const char *key, uint64_t max, uint64_t *ret)
{
	const char *v = mp_ctl_get(m, key);
	unsigned long long x;
	char *end;

	if (!v)
		return -ENOENT;
	if (v[0] < '0' || v[0] > '9')
		return -EINVAL;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end || x > max)
		return -EINVAL;
	*ret = x;
	return 0;
}

struct ctl_cmd {
	const char *name;
	const char *const *keys; /* besides cmd; NULL-terminated */
	bool options; /* also the option table's keys of attach requests */
};

static const char *const pid_keys[] = { "pid", NULL };
static const char *const no_keys[] = { NULL };
static const struct ctl_cmd ctl_cmds[] = {
	{ "attach", pid_keys, true }, { "detach", pid_keys, false }, { "dump", pid_keys, false },
	{ "list", no_keys, false },   { "status", no_keys, false },
};

static bool key_known(const struct ctl_cmd *c, const char *k)
{
	const struct mp_option *o;

	for (const char *const *a = c->keys; *a; a++)
		if (!strcmp(*a, k))
			return true;
	o = c->options ? mp_opt_by_key(k) : NULL;
	return o && (o->where & MP_OPT_ATTACH);
}

/* Keys a request may give more than once: the repeatable options. */
static bool key_repeats(const char *k)
{
	const struct mp_option *o = mp_opt_by_key(k);

	return o && (o->id == MP_OPT_ID_STREAM || o->id == MP_OPT_ID_OWNER ||
		     o->id == MP_OPT_ID_WRAPPER || o->id == MP_OPT_ID_WRAPPER_FN);
}

int mp_ctl_check_request(const struct mp_ctl_msg *m, char *why, size_t why_len)
{
	const struct ctl_cmd *c = NULL;

	if (!m->n || strcmp(m->f[0].key, "cmd")) {
		snprintf(why, why_len, "the first line is not cmd=...");
		return -EBADMSG;
	}
	for (size_t i = 0; i < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); i++)
		if (!strcmp(m->f[0].value, ctl_cmds[i].name))
			c = &ctl_cmds[i];
	if (!c) {
		snprintf(why, why_len, "unknown command");
		return -EOPNOTSUPP;
	}
	for (size_t i = 1; i < m->n; i++) {
		const char *k = m->f[i].key;

		if (!key_known(c, k)) {
			snprintf(why, why_len, "unknown key '%s' for %s", k, c->name);
			return -EBADMSG;
		}
		if (key_repeats(k))
			continue;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(m->f[j].key, k)) {
				snprintf(why, why_len, "key '%s' given twice", k);
				return -EBADMSG;
			}
	}
	return 0;
}

void mp_ctl_build_init(struct mp_ctl_builder *b)
{
	b->len = 0;
	b->err = 0;
}

void mp_ctl_vadd(struct mp_ctl_builder *b, const char *key, const char *fmt, va_list ap)
{
	size_t room, start = b->len;
	int n;

	if (b->err)
		return;
	if (!key_ok(key, strlen(key))) {
		b->err = -EINVAL;
		return;
	}
	room = sizeof(b->buf) - b->len;
	n = snprintf(b->buf + b->len, room, "%s=", key);
	if (n < 0 || (size_t)n >= room) {
		b->err = -E2BIG;
		return;
	}
	b->len += (size_t)n;
	room -= (size_t)n;
	n = vsnprintf(b->buf + b->len, room, fmt, ap);
	if (n < 0 || (size_t)n + 1 >= room) {
		b->err = -E2BIG;
		return;
	}
	if (memchr(b->buf + b->len, '\n', (size_t)n)) {
		/* Values are single lines: replace rather than fail, the
		 * text comes from file names and error messages. */
		for (char *c = b->buf + start; c < b->buf + b->len + n; c++)
			if (*c == '\n')
				*c = ' ';
	}
	b->len += (size_t)n;
	b->buf[b->len++] = '\n';
}

void mp_ctl_add(struct mp_ctl_builder *b, const char *key, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mp_ctl_vadd(b, key, fmt, ap);
	va_end(ap);
}

int mp_ctl_build_end(const struct mp_ctl_builder *b)
{
	return b->err;
}

static int write_all(int sock, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(sock, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int mp_ctl_send(int sock, const void *buf, size_t len, int pass_fd)
{
	uint8_t hdr[4] = { (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
			   (uint8_t)(len >> 24) };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = hdr, .iov_len = sizeof(hdr) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (len > MP_CTL_MAX_MSG)
		return -E2BIG;
	if (pass_fd >= 0) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = sizeof(cm.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n < (ssize_t)sizeof(hdr)) {
		int r = write_all(sock, hdr + n, sizeof(hdr) - (size_t)n);

		if (r < 0)
			return r;
	}
	return write_all(sock, buf, len);
}

static uint64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The receive timeout set on @sock bounds the whole message, not each
 * recv(): a peer dripping one byte just inside it would otherwise hold
 * the connection for as long as it likes. *@ret_deadline_us is when
 * the message must be whole (0: no timeout set). */
static void whole_deadline(int sock, struct timeval *ret_tv, uint64_t *ret_deadline_us)
{
	socklen_t len = sizeof(*ret_tv);

	*ret_deadline_us = 0;
	if (getsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, ret_tv, &len) < 0 ||
	    (ret_tv->tv_sec <= 0 && ret_tv->tv_usec <= 0))
		return;
	*ret_deadline_us =
		mono_us() + (uint64_t)ret_tv->tv_sec * 1000000u + (uint64_t)ret_tv->tv_usec;
}

/* Before a recv(): the time left until @deadline_us, as the socket's
 * receive timeout. -ETIMEDOUT once it has passed. */
static int arm(int sock, uint64_t deadline_us)
{
	uint64_t now = mono_us(), left;
	struct timeval tv;

	if (!deadline_us)
		return 0;
	if (now >= deadline_us)
		return -ETIMEDOUT;
	left = deadline_us - now;
	tv = (struct timeval){ .tv_sec = (time_t)(left / 1000000u),
			       .tv_usec = (suseconds_t)(left % 1000000u) };
	return setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ? -errno : 0;
}

static int read_all(int sock, void *buf, size_t len, uint64_t deadline_us)
{
	char *p = buf;

	while (len) {
		int r = arm(sock, deadline_us);
		ssize_t n;

		if (r < 0)
			return r;
		n = recv(sock, p, len, 0);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Closes every descriptor of a control message; returns how many. */
static int close_fds(struct msghdr *mh, int *keep)
{
	int count = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		size_t n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (keep && *keep < 0 && count == 0 && n == 1)
				*keep = fd;
			else
				close(fd);
			count++;
		}
	}
	return count;
}

int mp_ctl_recv(int sock, struct mp_ctl_msg *m, int *ret_fd)
{
	uint8_t hdr[4];
	union {
		/* Room for more than we accept, so extra descriptors are
		 * received (and closed) rather than silently truncated. */
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = hdr, .iov_len = sizeof(hdr) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cm.buf,
			     .msg_controllen = sizeof(cm.buf) };
	struct timeval tv = { 0 };
	uint64_t deadline_us;
	int fd = -1, nfds, r;
	char *body = NULL;
	uint32_t len;
	ssize_t n;

	m->n = 0;
	m->why[0] = '\0';
	whole_deadline(sock, &tv, &deadline_us);
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EAGAIN) {
		bad(m, "no request within the timeout");
		return -ETIMEDOUT;
	}
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	nfds = close_fds(&mh, ret_fd ? &fd : NULL);
	if ((mh.msg_flags & MSG_CTRUNC) || nfds > 1 || (nfds == 1 && !ret_fd)) {
		if (fd >= 0)
			close(fd);
		return bad(m, nfds == 1 ? "no file descriptor is accepted here" :
					  "more than one file descriptor");
	}
	r = 0;
	if (n < (ssize_t)sizeof(hdr))
		r = read_all(sock, hdr + n, sizeof(hdr) - (size_t)n, deadline_us);
	len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
	      (uint32_t)hdr[3] << 24;
	if (r == -ECONNRESET)
		r = bad(m, "truncated length prefix");
	else if (r == 0 && len > MP_CTL_MAX_MSG)
		r = bad(m, "message longer than %u bytes", MP_CTL_MAX_MSG);
	if (r == 0) {
		body = malloc(len ? len : 1);
		r = body ? read_all(sock, body, len, deadline_us) : -ENOMEM;
		if (r == -ECONNRESET)
			r = bad(m, "truncated message (the length prefix says %u bytes)", len);
	}
	if (r == -ETIMEDOUT)
		bad(m, "no complete request within %lld s", (long long)tv.tv_sec);
	if (deadline_us)
		setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (r == 0)
		r = mp_ctl_parse(body, len, m);
	free(body);
	if (r < 0) {
		if (fd >= 0)
			close(fd);
		return r;
	}
	if (ret_fd)
		*ret_fd = fd;
	return 0;
}

int mp_ctl_connect(const char *path, int *ret_sock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s;

	if (!path)
		path = MP_CTL_DEFAULT_PATH;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;

		close(s);
		return r;
	}
	*ret_sock = s;
	return 0;
}
