// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "option_table.h"
#include "rss.h"
#include "tracer.h"

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
	c->sample_bytes = MP_SAMPLE_BYTES_DEFAULT;
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
	for (size_t i = 0; i < c->n_wrappers; i++)
		free(c->wrappers[i]);
	for (size_t i = 0; i < c->n_wrapper_fns; i++)
		free(c->wrapper_fns[i]);
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

#define FIELD(id, member)                                           \
	{                                                           \
		MP_OPT_ID_##id, offsetof(struct mp_config, member), \
			sizeof(((struct mp_config *)0)->member)     \
	}

/* Keys that set one number or flag; their bounds are the option table's. */
static const struct {
	enum mp_opt_id id;
	size_t off, size;
} fields[] = {
	FIELD(RSS_HZ, rss_hz),
	FIELD(PSS_EVERY, pss_every),
	FIELD(MAX_TARGETS, max_targets),
	FIELD(MAX_CONNS, max_conns),
	FIELD(MAX_CONNS_PER_UID, max_conns_per_uid),
	FIELD(STREAM_INTERVAL, stream_interval_ns),
	FIELD(BUFFER_SIZE, buffer_bytes),
	FIELD(BPF_RING_SIZE, bpf_ring_bytes),
	FIELD(MEMORY_BUDGET, memory_budget),
	FIELD(MODE, mode),
	FIELD(SAMPLE_BYTES, sample_bytes),
	FIELD(STREAM_PER_UID, stream_per_uid),
	FIELD(STREAM_TOTAL, stream_total_bytes),
	FIELD(STACKS, stacks),
	FIELD(NO_DEFAULT_WRAPPERS, no_default_wrappers),
	FIELD(TRACER, tracer),
	FIELD(STACK_DEPTH, stack_depth),
	FIELD(MAX_MEMORY, max_memory),
	FIELD(MAX_SITES, max_sites),
	FIELD(MAX_STACKS, max_stacks),
};

static int add(char **list, size_t *n, size_t max, const char *v)
{
	if (*n >= max)
		return -EINVAL;
	list[*n] = strdup(v);
	if (!list[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* -ENOENT: no such key; -EINVAL: not a valid value for it. */
static int set(struct mp_config *c, const char *k, const char *v)
{
	const struct mp_option *o = mp_opt_by_key(k);
	struct mp_opt_value x;

	if (!o || !(o->where & MP_OPT_CONFIG))
		return -ENOENT;
	if (mp_opt_parse(o, MP_OPT_FILE, v, &x) < 0)
		return -EINVAL;
	if (o->id == MP_OPT_ID_COLLECTOR)
		return add(c->collectors, &c->n_collectors, MP_CONFIG_MAX_COLLECTORS, v);
	if (o->id == MP_OPT_ID_OWNER)
		return add(c->owners, &c->n_owners, MP_CONFIG_MAX_OWNERS, v);
	if (o->id == MP_OPT_ID_WRAPPER)
		return add(c->wrappers, &c->n_wrappers, MP_CONFIG_MAX_OWNERS, v);
	if (o->id == MP_OPT_ID_WRAPPER_FN)
		return add(c->wrapper_fns, &c->n_wrapper_fns, MP_CONFIG_MAX_OWNERS, v);
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (fields[i].id == o->id) {
			mp_opt_store(c, fields[i].off, fields[i].size, x.u);
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
