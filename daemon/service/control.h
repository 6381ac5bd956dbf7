/* SPDX-License-Identifier: MIT */
/*
 * The control protocol between `memprof` and the `memprofd` service, over a
 * Unix stream socket any local user may connect to (docs/SERVICE.md).
 *
 * A message is a 4-byte little-endian length followed by that many bytes of
 * text: "key=value" lines, each ending in '\n'; keys are [a-z_]+, values any
 * bytes but NUL and '\n'; a key may repeat. A request's first line is
 * "cmd=...", a reply's "status=ok" or "status=error". A request may carry one
 * file descriptor (SCM_RIGHTS, with its first bytes): the output file,
 * opened by the client with the client's own rights. One request and one
 * reply per connection.
 *
 * Everything received is hostile: lengths, line counts and the passed
 * descriptors are bounded and checked.
 */
#ifndef MP_CONTROL_H
#define MP_CONTROL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MP_CTL_DEFAULT_PATH "/run/memprofd/control"
#define MP_CTL_MAX_MSG 65536u
#define MP_CTL_MAX_FIELDS 1024u
/* A line holds a path (PATH_MAX) with room to spare. */
#define MP_CTL_MAX_LINE 8192u

struct mp_ctl_field {
	const char *key, *value;
};

/* A parsed message; fields point into @text. */
struct mp_ctl_msg {
	char text[MP_CTL_MAX_MSG + 1];
	size_t n;
	struct mp_ctl_field f[MP_CTL_MAX_FIELDS];
	/* Why a message was refused (-EBADMSG): sent back to the client. */
	char why[128];
};

/* Parses @len bytes into @m (a large struct: allocate it). -EBADMSG when
 * the text is not a well-formed message, with the reason in @m->why. */
int mp_ctl_parse(const void *buf, size_t len, struct mp_ctl_msg *m);
/* The value of the first field named @key, or NULL. */
const char *mp_ctl_get(const struct mp_ctl_msg *m, const char *key);
/* Parses field @key as an unsigned number <= @max; -ENOENT when absent,
 * -EINVAL when malformed. */
int mp_ctl_get_u64(const struct mp_ctl_msg *m, const char *key, uint64_t max, uint64_t *ret);

/* Builds a message: fields are appended; an over-long message or a value
 * with '\n' makes mp_ctl_build_end() fail with -E2BIG / -EINVAL. */
struct mp_ctl_builder {
	char buf[MP_CTL_MAX_MSG];
	size_t len;
	int err;
};
void mp_ctl_build_init(struct mp_ctl_builder *b);
void mp_ctl_add(struct mp_ctl_builder *b, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void mp_ctl_vadd(struct mp_ctl_builder *b, const char *key, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
int mp_ctl_build_end(const struct mp_ctl_builder *b);

/* Checks a parsed request against the commands the service knows
 * (attach, detach, dump, list, status): "cmd" first, every key known to
 * that command (attach: pid and the keys of the option table marked
 * MP_OPT_ATTACH), no key twice but the repeatable options' (stream,
 * owner, wrapper, wrapper_fn). -EBADMSG (unknown key,
 * repeated key, no cmd) or -EOPNOTSUPP (unknown command) with the reason
 * in @why. */
int mp_ctl_check_request(const struct mp_ctl_msg *m, char *why, size_t why_len);

/* Sends one message (and @pass_fd unless it is negative). */
int mp_ctl_send(int sock, const void *buf, size_t len, int pass_fd);
/* Receives one message into @m. At most one descriptor is accepted, and
 * only with the first bytes; it is returned in *@ret_fd (-1 if none; pass
 * NULL to refuse any). Blocking: the SO_RCVTIMEO set on @sock bounds the
 * whole message (a peer dripping bytes cannot stretch it), and is set
 * back once the message is read.
 * -EBADMSG on a malformed message or unexpected descriptors (all closed;
 * the reason in @m->why), -ECONNRESET when the peer closed early. */
int mp_ctl_recv(int sock, struct mp_ctl_msg *m, int *ret_fd);

/* Connects to the service's socket at @path (NULL: the default). */
int mp_ctl_connect(const char *path, int *ret_sock);

#endif /* MP_CONTROL_H */
