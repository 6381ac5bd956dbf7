/* SPDX-License-Identifier: MIT */
/*
 * TLS for the https collectors, with GnuTLS on the streaming thread's
 * non-blocking sockets. The server's certificate is verified against the
 * system's trust store (or a CA file, ca= in the URL / --ca) and its name
 * (DNS name or IP address in subjectAltName) against the URL's host.
 */
#ifndef MP_STREAM_TLS_H
#define MP_STREAM_TLS_H

#include <stddef.h>
#include <sys/types.h>

struct mp_tls_ctx;
struct mp_tls;

/* @ca_file NULL or "": the system store. Returns 0 or a negative errno;
 * the reason in @why. */
int mp_tls_ctx_new(const char *ca_file, struct mp_tls_ctx **ret, char *why, size_t why_len);
void mp_tls_ctx_free(struct mp_tls_ctx *c);

int mp_tls_new(struct mp_tls_ctx *c, int fd, const char *host, struct mp_tls **ret);
void mp_tls_free(struct mp_tls *t);

/* 0 when the handshake is done, -EAGAIN to call again when the socket
 * is ready for *@ret_events (POLLIN/POLLOUT), or a negative errno with
 * the reason (certificate verification included) in mp_tls_error(). */
int mp_tls_handshake(struct mp_tls *t, short *ret_events);
/* Bytes sent or received (0 on orderly close), -EAGAIN with the events to
 * wait for, or another negative errno. */
ssize_t mp_tls_send(struct mp_tls *t, const void *buf, size_t n, short *ret_events);
ssize_t mp_tls_recv(struct mp_tls *t, void *buf, size_t n, short *ret_events);
const char *mp_tls_error(const struct mp_tls *t);

#endif /* MP_STREAM_TLS_H */
