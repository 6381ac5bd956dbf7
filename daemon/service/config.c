// SPDX-License-Identifier: MIT
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "tracer.h"
#include "rss.h"
#include "stream.h"

#define MAX_FILE (1u << 20)

int mp_config_new(struct mp_config **ret)
{
	struct mp_config *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->rss_hz = MP_RSS_DEFAULT_HZ;
	c->pss_every = MP_RSS_DEFAULT_PSS_EVERY;
	c->max_targets = 256;
	c->max_conns = MP_CONFIG_DEFAULT_MAX_CONNS;
	c->max_conns_per_uid = MP_CONFIG_DEFAULT_MAX_CONNS_PER_UID;
	c->stream_interval_ns = 10ull * 1000000000ull;
	c->buffer_bytes = 64ull << 20;
	/* Always-on profiling must be cheap: no allocator uprobes by default. */
	c->mode = MP_TRACE_RSS;
	c->sample_bytes = 4096;
	c->stream_per_uid = 4;
	c->stream_total_bytes = 256ull << 20;
	*ret = c;
	return 0;
}

void mp_config_free(struct mp_config *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_collectors; i++)
		free(c->collectors[i]);
	for (size_t i = 0; i < c->n_owners; i++)
		free(c->owners[i]);
	free(c);
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

static int parse_u64(const char *v, uint64_t max, bool suffix, uint64_t *ret)
{
	unsigned long long x;
	uint64_t mul = 1;
	char *end;

	if (*v < '0' || *v > '9')
		return -EINVAL;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno)
		return -EINVAL;
	if (suffix && *end) {
		switch (*end++) {
		case 'K':
		case 'k':
			mul = 1ull << 10;
			break;
		case 'M':
		case 'm':
			mul = 1ull << 20;
			break;
		case 'G':
		case 'g':
			mul = 1ull << 30;
			break;
		default:
			return -EINVAL;
		}
	}
	if (*end || x > max / mul)
		return -EINVAL;
	*ret = x * mul;
	return 0;
}

static int set(struct mp_config *c, const char *k, const char *v)
{
	uint64_t x;
	double d;
	char *end;

	if (!strcmp(k, "collector")) {
		if (c->n_collectors >= MP_CONFIG_MAX_COLLECTORS || mp_stream_url_check(v) < 0)
			return -EINVAL;
		return (c->collectors[c->n_collectors++] = strdup(v)) ? 0 : -ENOMEM;
	}
	if (!strcmp(k, "owner")) {
		if (c->n_owners >= MP_CONFIG_MAX_OWNERS || !strchr(v, '=') || v[0] == '=')
			return -EINVAL;
		return (c->owners[c->n_owners++] = strdup(v)) ? 0 : -ENOMEM;
	}
	if (!strcmp(k, "mode"))
		return mp_trace_mode_parse(v, &c->mode);
	if (!strcmp(k, "sample_bytes")) {
		if (parse_u64(v, 1ull << 40, true, &x) < 0 || !x)
			return -EINVAL;
		c->sample_bytes = x;
		return 0;
	}
	if (!strcmp(k, "stacks")) {
		if (!strcmp(v, "yes") || !strcmp(v, "no")) {
			c->stacks = v[0] == 'y';
			return 0;
		}
		return -EINVAL;
	}
	if (!strcmp(k, "tracer"))
		return mp_tracer_choice_parse(v, &c->tracer);
	if (!strcmp(k, "stack_depth")) {
		if (parse_u64(v, 256, false, &x) < 0 || !x)
			return -EINVAL;
		c->stack_depth = (uint32_t)x;
		return 0;
	}
	if (!strcmp(k, "rss_hz")) {
		if (parse_u64(v, MP_RSS_MAX_HZ, false, &x) < 0)
			return -EINVAL;
		c->rss_hz = (unsigned)x;
		return 0;
	}
	if (!strcmp(k, "pss_every")) {
		if (parse_u64(v, 1000000, false, &x) < 0)
			return -EINVAL;
		c->pss_every = (unsigned)x;
		return 0;
	}
	if (!strcmp(k, "max_targets")) {
		if (parse_u64(v, 4096, false, &x) < 0 || !x)
			return -EINVAL;
		c->max_targets = (unsigned)x;
		return 0;
	}
	if (!strcmp(k, "max_connections")) {
		if (parse_u64(v, 4096, false, &x) < 0 || x < 2)
			return -EINVAL;
		c->max_conns = (unsigned)x;
		return 0;
	}
	if (!strcmp(k, "max_connections_per_uid")) {
		if (parse_u64(v, 4096, false, &x) < 0 || !x)
			return -EINVAL;
		c->max_conns_per_uid = (unsigned)x;
		return 0;
	}
	if (!strcmp(k, "stream_interval")) {
		errno = 0;
		d = strtod(v, &end);
		if (errno || *end || !isfinite(d) || d < 0.01 || d > 86400)
			return -EINVAL;
		c->stream_interval_ns = (uint64_t)(d * 1e9);
		return 0;
	}
	if (!strcmp(k, "buffer_size")) {
		if (parse_u64(v, 1ull << 40, true, &x) < 0)
			return -EINVAL;
		c->buffer_bytes = x;
		return 0;
	}
	if (!strcmp(k, "memory_budget")) {
		if (parse_u64(v, 1ull << 50, true, &x) < 0)
			return -EINVAL;
		c->memory_budget = x;
		return 0;
	}
	if (!strcmp(k, "stream_collectors_per_uid")) {
		if (parse_u64(v, MP_STREAM_MAX_COLLECTORS, false, &x) < 0)
			return -EINVAL;
		c->stream_per_uid = (unsigned)x;
		return 0;
	}
	if (!strcmp(k, "stream_total_size")) {
		if (parse_u64(v, 1ull << 40, true, &x) < 0)
			return -EINVAL;
		c->stream_total_bytes = x;
		return 0;
	}
	if (!strcmp(k, "bpf_ring_size")) {
		if (parse_u64(v, 1ull << 30, true, &x) < 0 || x < 4096 || (x & (x - 1)))
			return -EINVAL;
		c->bpf_ring_bytes = (uint32_t)x;
		return 0;
	}
	return -ENOENT;
}

int mp_config_load(const char *path, struct mp_config **ret, char *err, size_t errlen)
{
	struct mp_config *c = NULL;
	char line[4096];
	unsigned lineno = 0;
	size_t total = 0;
	FILE *f;
	int r;

	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		snprintf(err, errlen, "%s", strerror(-r));
		return r;
	}
	r = mp_config_new(&c);
	while (r == 0 && fgets(line, sizeof(line), f)) {
		char *k, *v, *eq;
		size_t n = strlen(line);

		lineno++;
		total += n;
		if (total > MAX_FILE) {
			snprintf(err, errlen, "%u: file larger than 1 MiB", lineno);
			r = -EFBIG;
			break;
		}
		if (n && line[n - 1] != '\n' && !feof(f)) {
			snprintf(err, errlen, "%u: line too long", lineno);
			r = -EINVAL;
			break;
		}
		k = trim(line);
		if (k[strlen(k) - (strlen(k) ? 1 : 0)] == '\n')
			k[strlen(k) - 1] = '\0';
		k = trim(k);
		if (!*k || *k == '#')
			continue;
		eq = strchr(k, '=');
		if (!eq) {
			snprintf(err, errlen, "%u: expected 'key = value'", lineno);
			r = -EINVAL;
			break;
		}
		*eq = '\0';
		v = trim(eq + 1);
		k = trim(k);
		r = set(c, k, v);
		if (r == -ENOENT)
			snprintf(err, errlen, "%u: unknown key '%s'", lineno, k);
		else if (r == -EINVAL)
			snprintf(err, errlen, "%u: invalid value '%s' for %s", lineno, v, k);
		else if (r < 0)
			snprintf(err, errlen, "%u: %s", lineno, strerror(-r));
		if (r == -ENOENT)
			r = -EINVAL;
	}
	if (r == 0 && ferror(f)) {
		r = -EIO;
		snprintf(err, errlen, "read error");
	}
	/* One connection stays root's whatever the other users hold. */
	if (r == 0 && c->max_conns_per_uid > c->max_conns - 1) {
		r = -EINVAL;
		snprintf(err, errlen,
			 "max_connections_per_uid = %u leaves no connection for root "
			 "(max_connections = %u)",
			 c->max_conns_per_uid, c->max_conns);
	}
	fclose(f);
	if (r < 0) {
		mp_config_free(c);
		return r;
	}
	*ret = c;
	return 0;
}
