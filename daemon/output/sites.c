// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "sites.h"

/* One row: the sites of one kernel with the same stack (or caller),
 * summed over phases, owners and threads. */
struct row {
	uint32_t kernel; /* MP_NONE: outside any kernel */
	uint32_t stack;
	uint64_t caller;
	uint32_t owner;
	bool other; /* limits: the "(other sites)" entry */
	uint64_t alloc_objects, alloc_space, inuse_space;
	uint64_t error_space; /* limits: bytes it may lack (mp_site.error_space) */
	/* sampled mode: variances of the two (independent sites: they add) */
	double alloc_var, inuse_var;
};

static int cmp_key(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (x->kernel != y->kernel)
		return x->kernel < y->kernel ? -1 : 1;
	if (x->stack != y->stack)
		return x->stack < y->stack ? -1 : 1;
	if (x->other != y->other)
		return x->other ? 1 : -1;
	return x->caller < y->caller ? -1 : x->caller > y->caller;
}

static int cmp_row(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (x->kernel != y->kernel)
		return x->kernel < y->kernel ? -1 : 1;
	if (x->alloc_space != y->alloc_space)
		return x->alloc_space > y->alloc_space ? -1 : 1;
	return x->caller < y->caller ? -1 : x->caller > y->caller;
}

static void frame(const struct mp_profile *p, uint64_t addr, FILE *f)
{
	const struct mp_location *l = mp_profile_location(p, addr);

	if (!l) {
		fprintf(f, "      0x%" PRIx64 "\n", addr);
		return;
	}
	for (uint32_t i = 0; i < l->n_inlined; i++) {
		const struct mp_inline_frame *in = &l->inlined[i];

		fprintf(f, "      %s (inlined)", in->function ? in->function : "??");
		if (in->file)
			fprintf(f, "  %s:%" PRIu32, in->file, in->line);
		fputc('\n', f);
	}
	fprintf(f, "      %s", l->function ? l->function : "??");
	if (l->file)
		fprintf(f, "  %s:%" PRIu32, l->file, l->line);
	else if (l->object < p->n_objects)
		fprintf(f, "  %s+0x%" PRIx64, p->objects[l->object].path, l->rel_addr);
	fputc('\n', f);
}

int mp_report_sites(const struct mp_profile *p, uint32_t n, FILE *f)
{
	struct row *rows = calloc(p->n_sites ? p->n_sites : 1, sizeof(*rows));
	uint64_t buf[MP_PROFILE_MAX_DEPTH];
	const uint64_t *frames;
	uint32_t nr = 0;

	if (!rows)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_sites; i++) {
		const struct mp_site *s = &p->sites[i];

		rows[i] = (struct row){ .kernel = s->name,
					.stack = s->stack,
					.caller = s->caller,
					.owner = s->owner,
					.other = (s->flags & MP_SITE_F_OTHER) != 0,
					.alloc_objects = s->alloc_objects,
					.alloc_space = s->alloc_space,
					.inuse_space = s->inuse_space,
					.error_space = s->error_space };
		if (p->site_vars) {
			rows[i].alloc_var = p->site_vars[i].alloc_space;
			rows[i].inuse_var = p->site_vars[i].inuse_space;
		}
	}
	/* Merge sites that differ only by phase, owner or thread. */
	qsort(rows, p->n_sites, sizeof(*rows), cmp_key);
	for (uint32_t i = 0; i < p->n_sites; i++) {
		if (nr && !cmp_key(&rows[nr - 1], &rows[i])) {
			rows[nr - 1].alloc_objects += rows[i].alloc_objects;
			rows[nr - 1].alloc_space += rows[i].alloc_space;
			rows[nr - 1].inuse_space += rows[i].inuse_space;
			rows[nr - 1].error_space += rows[i].error_space;
			rows[nr - 1].alloc_var += rows[i].alloc_var;
			rows[nr - 1].inuse_var += rows[i].inuse_var;
		} else {
			rows[nr++] = rows[i];
		}
	}
	qsort(rows, nr, sizeof(*rows), cmp_row);
	for (uint32_t i = 0, k = 0; i < nr; i++) {
		const struct row *r = &rows[i];
		const struct mp_stack *st =
			r->stack && r->stack <= p->n_stacks ? &p->stacks[r->stack - 1] : NULL;

		if (i == 0 || rows[i - 1].kernel != r->kernel) {
			k = 0;
			fprintf(f, "%skernel %s\n", i ? "\n" : "",
				r->kernel < p->n_names ? p->names[r->kernel] : "(none)");
		}
		if (++k > n)
			continue;
		if (p->site_vars)
			fprintf(f,
				"  #%" PRIu32 "  %" PRIu64 " ± %.0f bytes in %" PRIu64
				" sampled allocations, %" PRIu64 " ± %.0f in use, owner %s\n",
				k, r->alloc_space, sqrt(r->alloc_var), r->alloc_objects,
				r->inuse_space, sqrt(r->inuse_var),
				r->owner < p->n_owners ? p->owners[r->owner].name : "?");
		else
			fprintf(f,
				"  #%" PRIu32 "  %" PRIu64 " bytes in %" PRIu64
				" allocations, %" PRIu64 " in use, owner %s\n",
				k, r->alloc_space, r->alloc_objects, r->inuse_space,
				r->owner < p->n_owners ? p->owners[r->owner].name : "?");
		if (r->other) {
			fprintf(f, "      (other sites: evicted past max_sites %" PRIu32 ")\n",
				p->limits.sites);
			continue;
		}
		if (r->error_space)
			fprintf(f,
				"      (listed past max_sites %" PRIu32 ": may lack up to %" PRIu64
				" bytes allocated before, counted in \"(other sites)\")\n",
				p->limits.sites, r->error_space);
		if (!st) {
			frame(p, r->caller, f);
			continue;
		}
		frames = mp_profile_stack_frames(p, r->stack - 1, buf);
		for (uint32_t j = 0; j < st->n_frames; j++)
			frame(p, frames[j], f);
		if (st->flags & MP_STACK_F_TRUNCATED)
			fputs("      ... (truncated)\n", f);
	}
	free(rows);
	return ferror(f) ? -EIO : 0;
}
