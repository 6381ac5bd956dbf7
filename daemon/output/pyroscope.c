// SPDX-License-Identifier: MIT
/* Pyroscope: the push API (Connect unary, push.v1.PushRequest) and the
 * legacy /ingest query. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_body.h"
#include "pyroscope_push.pb-c.h"
#include "util.h"

uint64_t mp_be_unix_ns(uint64_t mono_ns)
{
	struct timespec rt;
	uint64_t now = mp_now_ns(), rt_ns;

	clock_gettime(CLOCK_REALTIME, &rt);
	rt_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
	return rt_ns - (now > mono_ns ? now - mono_ns : 0);
}

const char *mp_be_service_name(const char *configured, const char *exe)
{
	const char *base;

	if (configured && configured[0])
		return configured;
	if (!exe || !*exe)
		return "unknown";
	base = strrchr(exe, '/');
	return base && base[1] ? base + 1 : exe;
}

static size_t urlencode(char *out, size_t cap, const char *in)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;

	for (; *in && n + 4 < cap; in++) {
		unsigned char ch = (unsigned char)*in;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
			out[n++] = (char)ch;
		} else {
			out[n++] = '%';
			out[n++] = hex[ch >> 4];
			out[n++] = hex[ch & 15];
		}
	}
	out[n] = '\0';
	return n;
}

int mp_be_ingest_query(const struct mp_be_chunk *m, char *out, size_t cap)
{
	char name[512], enc[1600];
	const char *base = m->exe && *m->exe ? strrchr(m->exe, '/') : NULL;
	uint64_t from = mp_be_unix_ns(m->window_begin_ns) / 1000000000ull,
		 until = mp_be_unix_ns(m->window_end_ns) / 1000000000ull;
	int n;

	base = base ? base + 1 : (m->exe && *m->exe ? m->exe : "unknown");
	/* Pyroscope's application name with labels: NAME{label=value}. */
	snprintf(name, sizeof(name), "memprofd.%s{pid=%d}", base, (int)m->pid);
	urlencode(enc, sizeof(enc), name);
	n = snprintf(out, cap, "?name=%s&from=%" PRIu64 "&until=%" PRIu64 "&format=pprof", enc,
		     from, until > from ? until : from + 1);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : n;
}

int mp_be_encode_pyroscope(const struct mp_be_chunk *m, const uint8_t *pprof, size_t pprof_len,
			   uint8_t **ret, size_t *ret_len)
{
	Push__V1__PushRequest req = PUSH__V1__PUSH_REQUEST__INIT;
	Push__V1__RawProfileSeries series = PUSH__V1__RAW_PROFILE_SERIES__INIT, *sp = &series;
	Push__V1__RawSample sample = PUSH__V1__RAW_SAMPLE__INIT, *smp = &sample;
	Push__V1__LabelPair lab[3 + MP_BE_MAX_LABELS], *labp[3 + MP_BE_MAX_LABELS];
	char id[64];
	size_t n = 0, len;
	uint8_t *buf;

	/* memory:<sample type>:...: Pyroscope names the profile types from
	 * __name__ and the pprof's sample types. __delta__=false: each
	 * profile holds the target's figures since attach, not a delta. */
	const char *fixed[3][2] = { { "__name__", "memory" },
				    { "service_name", m->service },
				    { "__delta__", "false" } };
	for (size_t i = 0; i < 3; i++, n++) {
		push__v1__label_pair__init(&lab[n]);
		lab[n].name = (char *)fixed[i][0];
		lab[n].value = (char *)fixed[i][1];
	}
	for (size_t i = 0; i < m->n_labels; i++, n++) {
		push__v1__label_pair__init(&lab[n]);
		lab[n].name = (char *)m->label_key[i];
		lab[n].value = (char *)m->label_value[i];
	}
	for (size_t i = 0; i < n; i++)
		labp[i] = &lab[i];
	series.n_labels = n;
	series.labels = labp;
	/* Unique per profile: this daemon's target and the chunk number. */
	snprintf(id, sizeof(id), "memprofd-%d-%" PRIu64 "-%" PRIu64, (int)m->pid, m->target_id,
		 m->sequence);
	sample.raw_profile.data = (uint8_t *)pprof;
	sample.raw_profile.len = pprof_len;
	sample.id = id;
	series.n_samples = 1;
	series.samples = &smp;
	req.n_series = 1;
	req.series = &sp;
	len = push__v1__push_request__get_packed_size(&req);
	buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	push__v1__push_request__pack(&req, buf);
	*ret = buf;
	*ret_len = len;
	return 0;
}
