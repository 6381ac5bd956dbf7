// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Percent-decodes [s, s + n) into @out; control characters are refused
 * (they would end up in HTTP headers, labels or file names). */
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
		const char *lk = key + 6;

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
	} else {
		return -EINVAL;
	}
	return 0;
}

static int parse_authority(const char *hp, const char *end, const struct scheme *sc,
			   struct mp_backend_url *u)
{
	const char *colon;
	size_t hl;

	if (*hp == '[') {
		const char *rb = memchr(hp, ']', (size_t)(end - hp));

		if (!rb || (rb + 1 != end && rb[1] != ':'))
			return -EINVAL;
		hl = (size_t)(rb - hp - 1);
		hp++;
		colon = rb + 1 == end ? NULL : rb + 1;
	} else {
		colon = memchr(hp, ':', (size_t)(end - hp));
		hl = (size_t)((colon ? colon : end) - hp);
	}
	if (!hl || hl >= sizeof(u->host))
		return -EINVAL;
	memcpy(u->host, hp, hl);
	u->host[hl] = '\0';
	for (const char *p = u->host; *p; p++)
		if (*p <= ' ' || *p >= 0x7f || *p == '@' || *p == '/' || *p == '?' || *p == '#')
			return -EINVAL;
	if (!colon) {
		strcpy(u->port, sc->port);
		return 0;
	}
	unsigned long port = 0;
	const char *p = colon + 1;

	if (p == end || end - p > 5)
		return -EINVAL;
	for (; p < end; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		port = port * 10 + (unsigned long)(*p - '0');
	}
	if (port == 0 || port > 65535)
		return -EINVAL;
	snprintf(u->port, sizeof(u->port), "%lu", port);
	return 0;
}

int mp_backend_url_parse(const char *url, struct mp_backend_url *ret)
{
	const struct scheme *sc = scheme_of(url);
	const char *hp, *slash, *q, *p;
	struct mp_backend_url u;
	size_t pl;
	int r;

	if (!sc || strlen(url) >= 1024)
		return -EINVAL;
	memset(&u, 0, sizeof(u));
	u.proto = sc->proto;
	u.tls = sc->tls;
	hp = url + strlen(sc->prefix);
	q = strchr(hp, '?');
	if (!q)
		q = hp + strlen(hp);
	slash = memchr(hp, '/', (size_t)(q - hp));
	if (!slash)
		slash = q;
	r = parse_authority(hp, slash, sc, &u);
	if (r < 0)
		return r;
	for (p = slash; p < q; p++)
		if (*p <= ' ' || *p >= 0x7f || *p == '#' || *p == '%')
			return -EINVAL;
	pl = (size_t)(q - slash);
	while (pl && slash[pl - 1] == '/' && !sc->by_path)
		pl--;
	if (sc->by_path) {
		/* The path names the protocol. */
		if (!pl)
			snprintf(u.path, sizeof(u.path), "/ingest");
		else if (pl >= sizeof(u.path))
			return -EINVAL;
		else
			memcpy(u.path, slash, pl);
		if (ends_with(u.path, pl, MP_BE_PYROSCOPE_PATH))
			u.proto = MP_BE_PYROSCOPE;
		else if (ends_with(u.path, pl, MP_BE_OTLP_PATH))
			u.proto = MP_BE_OTLP;
		else if (ends_with(u.path, pl, MP_BE_PARCA_PATH))
			u.proto = MP_BE_PARCA;
	} else {
		/* A prefix (a reverse proxy's), then the endpoint. */
		if (pl + strlen(sc->path) >= sizeof(u.path))
			return -EINVAL;
		memcpy(u.path, slash, pl);
		strcpy(u.path + pl, sc->path);
	}
	for (p = *q ? q + 1 : q; *p;) {
		const char *amp = strchr(p, '&');
		size_t n = amp ? (size_t)(amp - p) : strlen(p);

		r = parse_setting(p, n, &u);
		if (r < 0)
			return r;
		p += n + (amp ? 1 : 0);
		if (amp && !*p)
			return -EINVAL;
	}
	*ret = u;
	return 0;
}
