// SPDX-License-Identifier: MIT
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tls.h"

struct mp_tls_ctx {
	gnutls_certificate_credentials_t cred;
};

struct mp_tls {
	gnutls_session_t s;
	char host[256];
	char err[512];
};

int mp_tls_ctx_new(const char *ca_file, struct mp_tls_ctx **ret, char *why, size_t why_len)
{
	struct mp_tls_ctx *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	if (gnutls_certificate_allocate_credentials(&c->cred) < 0) {
		free(c);
		return -ENOMEM;
	}
	if (ca_file && *ca_file) {
		r = gnutls_certificate_set_x509_trust_file(c->cred, ca_file, GNUTLS_X509_FMT_PEM);
		if (r <= 0) {
			snprintf(why, why_len, "no CA certificate loaded from %s: %s", ca_file,
				 r < 0 ? gnutls_strerror(r) : "empty file");
			mp_tls_ctx_free(c);
			return -EINVAL;
		}
	} else {
		r = gnutls_certificate_set_x509_system_trust(c->cred);
		if (r <= 0) {
			snprintf(why, why_len, "the system trust store is empty or unreadable: %s",
				 r < 0 ? gnutls_strerror(r) : "no certificate");
			mp_tls_ctx_free(c);
			return -ENOENT;
		}
	}
	*ret = c;
	return 0;
}

void mp_tls_ctx_free(struct mp_tls_ctx *c)
{
	if (!c)
		return;
	gnutls_certificate_free_credentials(c->cred);
	free(c);
}

static bool is_ip(const char *host)
{
	unsigned char a[16];

	return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

int mp_tls_new(struct mp_tls_ctx *c, int fd, const char *host, struct mp_tls **ret)
{
	struct mp_tls *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	snprintf(t->host, sizeof(t->host), "%s", host);
	if (gnutls_init(&t->s, GNUTLS_CLIENT | GNUTLS_NONBLOCK) < 0) {
		free(t);
		return -ENOMEM;
	}
	if (gnutls_set_default_priority(t->s) < 0 ||
	    gnutls_credentials_set(t->s, GNUTLS_CRD_CERTIFICATE, c->cred) < 0 ||
	    (!is_ip(host) &&
	     gnutls_server_name_set(t->s, GNUTLS_NAME_DNS, host, strlen(host)) < 0)) {
		mp_tls_free(t);
		return -ENOMEM;
	}
	/* Chain and name checked in the handshake, which fails otherwise. */
	gnutls_session_set_verify_cert(t->s, t->host, 0);
	gnutls_transport_set_int(t->s, fd);
	*ret = t;
	return 0;
}

void mp_tls_free(struct mp_tls *t)
{
	if (!t)
		return;
	gnutls_deinit(t->s);
	free(t);
}

static short direction(struct mp_tls *t)
{
	return gnutls_record_get_direction(t->s) ? POLLOUT : POLLIN;
}

int mp_tls_handshake(struct mp_tls *t, short *ret_events)
{
	int r = gnutls_handshake(t->s);

	if (r == GNUTLS_E_SUCCESS)
		return 0;
	if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
		*ret_events = direction(t);
		return -EAGAIN;
	}
	if (r == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
		gnutls_datum_t out = { 0 };
		unsigned st = gnutls_session_get_verify_cert_status(t->s);

		if (gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &out, 0) ==
		    0) {
			snprintf(t->err, sizeof(t->err), "certificate of %s refused: %s", t->host,
				 (const char *)out.data);
			gnutls_free(out.data);
		} else {
			snprintf(t->err, sizeof(t->err), "certificate of %s refused", t->host);
		}
		return -EKEYREJECTED;
	}
	snprintf(t->err, sizeof(t->err), "TLS handshake with %s failed: %s", t->host,
		 gnutls_strerror(r));
	return -ECONNABORTED;
}

ssize_t mp_tls_send(struct mp_tls *t, const void *buf, size_t n, short *ret_events)
{
	ssize_t r = gnutls_record_send(t->s, buf, n);

	if (r >= 0)
		return r;
	if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
		*ret_events = direction(t);
		return -EAGAIN;
	}
	snprintf(t->err, sizeof(t->err), "TLS send to %s: %s", t->host, gnutls_strerror((int)r));
	return -ECONNRESET;
}

ssize_t mp_tls_recv(struct mp_tls *t, void *buf, size_t n, short *ret_events)
{
	ssize_t r = gnutls_record_recv(t->s, buf, n);

	if (r >= 0)
		return r;
	if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
		*ret_events = direction(t);
		return -EAGAIN;
	}
	/* A server that closes without close_notify after its response:
	 * the HTTP framing says whether the response was whole. */
	if (r == GNUTLS_E_PREMATURE_TERMINATION)
		return 0;
	snprintf(t->err, sizeof(t->err), "TLS receive from %s: %s", t->host,
		 gnutls_strerror((int)r));
	return -ECONNRESET;
}

const char *mp_tls_error(const struct mp_tls *t)
{
	return t->err;
}
