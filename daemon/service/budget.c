// SPDX-License-Identifier: MIT
/* The service's memory budget (docs/SERVICE.md "Memory budget"): what a
 * target costs, admission against the budget, and detaching the newest
 * growing target when the service holds more than the budget. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "memstats.h"
#include "service_impl.h"

uint64_t mp_service_target_cost(uint32_t mode, uint32_t ring_bytes)
{
	return MP_SERVICE_TARGET_BASE + mp_tracer_ring_bytes(mode, ring_bytes);
}

uint64_t mp_service_target_tables(uint64_t budget, uint64_t configured)
{
	uint64_t share = budget / 8;

	if (configured)
		return configured;
	if (!budget || share > MP_SESSION_DEFAULT_MEMORY)
		return MP_SESSION_DEFAULT_MEMORY;
	return share < MP_SESSION_MIN_MEMORY ? MP_SESSION_MIN_MEMORY : share;
}

/* Where the budget comes from, for messages. */
static const char *budget_source(const struct service *svc)
{
	if (svc->cfg->memory_budget)
		return "";
	return svc->cgroup_max ? ", from MemoryMax" : ", default";
}

uint64_t mp_service_reserved(uint64_t buffer_bytes, size_t n_collectors, unsigned max_conns)
{
	/* A connection thread holds one struct request (a message and a
	 * reply) and its stack. */
	uint64_t conn = sizeof(struct mp_ctl_msg) + sizeof(struct mp_ctl_builder) + (256 << 10);

	return MP_SERVICE_FIXED_BYTES + buffer_bytes * (n_collectors ? n_collectors : 1) +
	       conn * max_conns;
}

uint64_t mp_svc_cgroup_memory_max(void)
{
	char line[4096], path[4200], val[64];
	uint64_t max = 0;
	FILE *f = fopen("/proc/self/cgroup", "re");

	while (f && fgets(line, sizeof(line), f)) {
		char *ctrl = strchr(line, ':'), *rel = ctrl ? strchr(ctrl + 1, ':') : NULL;
		size_t n = strlen(line);
		FILE *m;

		if (!rel || !n || line[n - 1] != '\n')
			continue;
		line[n - 1] = '\0';
		*rel++ = '\0';
		if (!strcmp(line, "0") && !ctrl[1])
			snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", rel);
		else if (!strcmp(ctrl + 1, "memory"))
			snprintf(path, sizeof(path),
				 "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", rel);
		else
			continue;
		m = fopen(path, "re");
		/* "max", or v1's page-rounded LLONG_MAX: no limit. */
		if (m && fgets(val, sizeof(val), m) && val[0] >= '0' && val[0] <= '9' &&
		    strtoull(val, NULL, 10) < (1ull << 60))
			max = strtoull(val, NULL, 10);
		if (m)
			fclose(m);
	}
	if (f)
		fclose(f);
	return max;
}

/* Under svc->lock: 0 when a target costing @cost fits the budget, else
 * -ENOMEM with the reason in @why. Two checks: the estimates of every
 * live target against the targets' share, and what the service really
 * holds (its anonymous memory plus the targets' BPF ring buffers, which
 * are kernel memory charged to its cgroup) against the whole budget. */
int mp_svc_budget_check(struct service *svc, uint64_t cost, uint32_t mode, char *why,
			size_t why_len)
{
	uint64_t committed = 0, rings = 0, in_use;

	if (!svc->budget)
		return 0;
	for (struct target *t = svc->targets; t; t = t->next)
		if (t->state != T_DONE) {
			committed += t->cost;
			rings += t->ring_bytes;
		}
	in_use = mp_self_anon_held() + rings;
	if (committed + cost <= svc->budget && in_use + cost <= svc->budget_total)
		return 0;
	snprintf(why, why_len,
		 "the service's memory budget for targets is %" PRIu64 " MiB (memory_budget%s); "
		 "its %u targets hold ~%" PRIu64 " MiB (estimated) and it uses %" PRIu64
		 " MiB; one %s-mode target needs ~%" PRIu64 " MiB",
		 svc->budget >> 20, budget_source(svc), svc->n_targets, committed >> 20,
		 in_use >> 20, mp_trace_mode_name(mode), cost >> 20);
	return -ENOMEM;
}

/* While targets run (service loop, every BUDGET_CHECK_MS): precise and
 * sampled targets grow with their live blocks and invocations beyond the
 * estimate they were admitted with. When what the service holds passes
 * the whole budget, the newest such target is detached as by `memprof
 * detach` (profile written, final chunk streamed), one at a time, so that
 * the service stays inside its cgroup's limit instead of every session
 * dying with it. Attaches are refused first: the newest target is the one
 * the admission check would have refused. */
/* Limits: the target holding the larger live table goes first, so that
 * a flooding target cannot push another one out; the newest of equals. */
static bool bigger(const struct target *t, const struct target *v)
{
	uint64_t a = __atomic_load_n(&t->tables_bytes, __ATOMIC_RELAXED);
	uint64_t b = __atomic_load_n(&v->tables_bytes, __ATOMIC_RELAXED);

	return a != b ? a > b : t->id > v->id;
}

void mp_svc_budget_enforce(struct service *svc)
{
	struct target *victim = NULL;
	uint64_t rings = 0, in_use;

	pthread_mutex_lock(&svc->lock);
	for (struct target *t = svc->targets; t; t = t->next) {
		if (t->state == T_DONE)
			continue;
		if (t->over_budget)
			goto out; /* the last one is still ending */
		rings += t->ring_bytes;
		if (t->state == T_RUNNING && t->sopts.mode != MP_TRACE_RSS &&
		    (!victim || bigger(t, victim)))
			victim = t;
	}
	if (!svc->budget || !victim)
		goto out;
	in_use = mp_self_anon_held() + rings;
	if (in_use <= svc->budget_total)
		goto out;
	victim->over_budget = true;
	svc->budget_detaches++;
	log_warning("pid %d: detaching (target %" PRIu64 ", %s mode): the service uses %" PRIu64
		    " MiB, over its memory budget of %" PRIu64 " MiB (memory_budget%s); "
		    "the precise or sampled target with the largest live table ends, its "
		    "profile is kept",
		    (int)victim->pid, victim->id, mp_trace_mode_name(victim->sopts.mode),
		    in_use >> 20, svc->budget_total >> 20, budget_source(svc));
	mp_svc_signal_fd(victim->ctl.stop_fd);
out:
	pthread_mutex_unlock(&svc->lock);
}

/* Under svc->lock, after a configuration is loaded. */
void mp_svc_budget_update(struct service *svc)
{
	const struct mp_config *c = svc->cfg;
	uint64_t total = c->memory_budget, reserved, per;

	if (!total)
		total = svc->cgroup_max ? svc->cgroup_max / 8 * 7 : MP_SERVICE_DEFAULT_BUDGET;
	reserved = mp_service_reserved(c->buffer_bytes, c->n_collectors, c->max_conns);
	svc->budget_total = total;
	svc->budget = !total ? 0 : total > reserved ? total - reserved : 1;
	per = mp_service_target_cost(c->mode, c->bpf_ring_bytes);
	if (svc->budget && (uint64_t)c->max_targets * per > svc->budget)
		log_warning("max_targets %u x ~%" PRIu64
			    " MiB per %s-mode target exceeds the memory "
			    "budget of %" PRIu64 " MiB for targets: attaches beyond ~%" PRIu64
			    " such targets will be refused",
			    c->max_targets, per >> 20, mp_trace_mode_name(c->mode),
			    svc->budget >> 20, svc->budget / per);
}
