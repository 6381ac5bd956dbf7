// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "curl_dl.h"
#include "url.h"
#include "util.h"

struct scheme {
	const char *prefix;
	enum mp_backend_proto proto;
	bool tls, by_path;
	const char *port, *path;
};

static const struct scheme schemes[] = {
	{ "http://", MP_BE_INGEST, false, true, "80", NULL },
	{ "https://", MP_BE_INGEST, true, true, "443", NULL },
	{ "pyroscope://", MP_BE_PYROSCOPE, false, false, "4040", MP_BE_PYROSCOPE_PATH },
	{ "pyroscope+https://", MP_BE_PYROSCOPE, true, false, "4040", MP_BE_PYROSCOPE_PATH },
	{ "otlp://", MP_BE_OTLP, false, false, "4318", MP_BE_OTLP_PATH },
	{ "otlp+https://", MP_BE_OTLP, true, false, "4318", MP_BE_OTLP_PATH },
	{ "parca://", MP_BE_PARCA, false, false, "7070", MP_BE_PARCA_PATH },
	{ "parca+https://", MP_BE_PARCA, true, false, "7070", MP_BE_PARCA_PATH },
};

static const struct scheme *scheme_of(const char *url)
{
	for (size_t i = 0; i < ARRAY_SIZE(schemes); i++)
		if (!strncmp(url, schemes[i].prefix, strlen(schemes[i].prefix)))
			return &schemes[i];
	return NULL;
}

bool mp_backend_url_is(const char *url)
{
	return scheme_of(url) != NULL;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n >= k && !memcmp(s + n - k, suffix, k);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decodes a setting [s, s + n) into @out. Stricter than
 * curl_easy_unescape(): a bad escape or a control character is refused,
 * since the value ends up in HTTP headers, labels or file names. */
static int decode(const char *s, size_t n, char *out, size_t cap)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];

		if (c == '%') {
			int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
			int lo = hi >= 0 ? hexval(s[i + 2]) : -1;

			if (hi < 0 || lo < 0)
				return -EINVAL;
			c = hi << 4 | lo;
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (c < 0x20 || c == 0x7f || k + 1 >= cap)
			return -EINVAL;
		out[k++] = (char)c;
	}
	out[k] = '\0';
	return 0;
}

static bool label_key_ok(const char *k)
{
	if (!*k || (*k >= '0' && *k <= '9'))
		return false;
	for (; *k; k++)
		if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
		      (*k >= '0' && *k <= '9') || *k == '_' || *k == '.'))
			return false;
	return true;
}

static int add_label(struct mp_backend_url *u, const char *lk, const char *val)
{
	/* The labels memprofd sets itself are not the user's. */
	if (!label_key_ok(lk) || strlen(lk) >= sizeof(u->label_key[0]) ||
	    strlen(val) >= sizeof(u->label_value[0]) || !strncmp(lk, "__", 2) ||
	    !strcmp(lk, "service_name") || u->n_labels >= MP_BE_MAX_LABELS)
		return -EINVAL;
	for (size_t i = 0; i < u->n_labels; i++)
		if (!strcmp(u->label_key[i], lk))
			return -EINVAL;
	strcpy(u->label_key[u->n_labels], lk);
	strcpy(u->label_value[u->n_labels++], val);
	return 0;
}

static int parse_setting(const char *s, size_t n, struct mp_backend_url *u)
{
	const char *eq = memchr(s, '=', n);
	char key[80], val[256];
	size_t kl;

	if (!eq)
		return -EINVAL;
	kl = (size_t)(eq - s);
	if (decode(s, kl, key, sizeof(key)) < 0 ||
	    decode(eq + 1, n - kl - 1, val, sizeof(val)) < 0 || !*val)
		return -EINVAL;
	if (!strcmp(key, "service_name")) {
		if (strlen(val) >= sizeof(u->service))
			return -EINVAL;
		strcpy(u->service, val);
	} else if (!strcmp(key, "headers") || !strcmp(key, "ca")) {
		char *dst = key[0] == 'h' ? u->headers : u->ca;

		if (val[0] != '/' || strlen(val) >= sizeof(u->headers))
			return -EINVAL;
		strcpy(dst, val);
	} else if (!strncmp(key, "label.", 6)) {
		return add_label(u, key + 6, val);
	} else {
		return -EINVAL;
	}
	return 0;
}

static int parse_query(const char *q, struct mp_backend_url *u)
{
	for (const char *p = q; *p;) {
		const char *amp = strchr(p, '&');
		size_t n = amp ? (size_t)(amp - p) : strlen(p);
		int r = parse_setting(p, n, u);

		if (r < 0)
			return r;
		p += n + (amp ? 1 : 0);
		if (amp && !*p)
			return -EINVAL;
	}
	return 0;
}

/* The path as written (curl turns none into "/"): by_path schemes name
 * the protocol with it, the others take it as a prefix. */
static int set_path(const struct scheme *sc, const char *raw_rest, const char *path,
		    struct mp_backend_url *u)
{
	size_t pl = raw_rest[strcspn(raw_rest, "/?#")] == '/' ? strlen(path) : 0;

	for (const char *p = path; *p; p++)
		if (*p <= ' ' || *p >= 0x7f || *p == '%')
			return -EINVAL;
	if (!sc->by_path) {
		while (pl && path[pl - 1] == '/')
			pl--;
		if (pl + strlen(sc->path) >= sizeof(u->path))
			return -EINVAL;
		memcpy(u->path, path, pl);
		strcpy(u->path + pl, sc->path);
		return 0;
	}
	if (!pl)
		snprintf(u->path, sizeof(u->path), "/ingest");
	else if (pl >= sizeof(u->path))
		return -EINVAL;
	else
		memcpy(u->path, path, pl + 1);
	if (ends_with(u->path, pl, MP_BE_PYROSCOPE_PATH))
		u->proto = MP_BE_PYROSCOPE;
	else if (ends_with(u->path, pl, MP_BE_OTLP_PATH))
		u->proto = MP_BE_OTLP;
	else if (ends_with(u->path, pl, MP_BE_PARCA_PATH))
		u->proto = MP_BE_PARCA;
	return 0;
}

static int copy_part(CURLU *h, CURLUPart what, char *out, size_t cap, bool *ret_absent)
{
	char *v = NULL;
	CURLUcode rc = curl_url_get(h, what, &v, 0);

	*ret_absent = rc != CURLUE_OK;
	if (rc != CURLUE_OK) {
		out[0] = '\0';
		return 0;
	}
	if (strlen(v) >= cap) {
		curl_free(v);
		return -EINVAL;
	}
	strcpy(out, v);
	curl_free(v);
	return 0;
}

/* Host, port, path and query through libcurl's URL parser; the scheme is
 * ours, so the rest is parsed as plain http. */
static int parse_with_curl(const struct scheme *sc, const char *rest, struct mp_backend_url *u)
{
	char buf[1100], host[260], port[8], path[1024], query[1024], scratch[8];
	bool absent, no_frag, no_port, no_query;
	CURLU *h;
	int r = mp_curl_load();

	if (r < 0)
		return r;
	h = curl_url();
	r = -EINVAL;
	if (!h)
		return -ENOMEM;
	snprintf(buf, sizeof(buf), "http://%s", rest);
	if (curl_url_set(h, CURLUPART_URL, buf, 0) != CURLUE_OK)
		goto out;
	/* No credentials, no fragment: neither has a meaning here. */
	if (copy_part(h, CURLUPART_USER, scratch, sizeof(scratch), &absent) < 0 || !absent ||
	    copy_part(h, CURLUPART_FRAGMENT, scratch, sizeof(scratch), &no_frag) < 0 || !no_frag)
		goto out;
	if (copy_part(h, CURLUPART_HOST, host, sizeof(host), &absent) < 0 || absent || !host[0] ||
	    copy_part(h, CURLUPART_PORT, port, sizeof(port), &no_port) < 0 ||
	    copy_part(h, CURLUPART_PATH, path, sizeof(path), &absent) < 0 ||
	    copy_part(h, CURLUPART_QUERY, query, sizeof(query), &no_query) < 0)
		goto out;
	if (host[0] == '[') {
		size_t hl = strlen(host);

		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	if (strlen(host) >= sizeof(u->host) || (!no_port && atoi(port) <= 0))
		goto out;
	strcpy(u->host, host);
	strcpy(u->port, no_port ? sc->port : port);
	r = set_path(sc, rest, path, u);
	if (r == 0 && !no_query)
		r = parse_query(query, u);
out:
	curl_url_cleanup(h);
	return r;
}

int mp_backend_url_parse(const char *url, struct mp_backend_url *ret)
{
	const struct scheme *sc = scheme_of(url);
	struct mp_backend_url u;
	const char *rest;
	int r;

	if (!sc || strlen(url) >= 1024)
		return -EINVAL;
	rest = url + strlen(sc->prefix);
	/* curl would take a missing or empty authority for a path. */
	if (!*rest || strchr("/?#", *rest))
		return -EINVAL;
	memset(&u, 0, sizeof(u));
	u.proto = sc->proto;
	u.tls = sc->tls;
	r = parse_with_curl(sc, rest, &u);
	if (r < 0)
		return r;
	*ret = u;
	return 0;
}

int mp_stream_addr_parse(const char *url, struct mp_stream_addr *c)
{
	const char *hp, *colon, *slash;
	size_t hl;
	char *end;
	unsigned long port;

	*c = (struct mp_stream_addr){ .is_unix = false };
	if (!strncmp(url, "unix:", 5)) {
		struct sockaddr_un sa;

		if (url[5] != '/' || strlen(url + 5) >= sizeof(sa.sun_path))
			return -EINVAL;
		c->is_unix = true;
		snprintf(c->path, sizeof(c->path), "%s", url + 5);
		return 0;
	}
	if (strncmp(url, "tcp://", 6))
		return -EINVAL;
	hp = url + 6;
	if (strchr(hp, '/'))
		return -EINVAL;
	slash = hp + strlen(hp);
	if (*hp == '[') {
		const char *rb = memchr(hp, ']', (size_t)(slash - hp));

		if (!rb || rb[1] != ':')
			return -EINVAL;
		hl = (size_t)(rb - hp - 1);
		hp++;
		colon = rb + 1;
	} else {
		colon = memchr(hp, ':', (size_t)(slash - hp));
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - hp);
	}
	if (!hl || hl >= sizeof(c->host))
		return -EINVAL;
	memcpy(c->host, hp, hl);
	c->host[hl] = '\0';
	if (colon[1] < '0' || colon[1] > '9')
		return -EINVAL;
	port = strtoul(colon + 1, &end, 10);
	if (end != slash || port == 0 || port > 65535)
		return -EINVAL;
	snprintf(c->port, sizeof(c->port), "%lu", port);
	return 0;
}
