/* SPDX-License-Identifier: MIT */
/* Anonymous mappings in the table and JSON reports. */
#include "maps_report.h"
#include "rank.h"
#include "text.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

bool mp_maps_any(const struct mp_map_stats *m)
{
	return m->alloc_count || m->free_count;
}

static int64_t net_of(const struct mp_map_stats *m)
{
	return (int64_t)(m->alloc_bytes - m->free_bytes);
}

void mp_maps_table_head(const struct mp_profile *p, FILE *f)
{
	const struct mp_map_stats *m = &p->maps;

	/* a program that maps nothing itself gets no line (nor does a file
	 * written before mappings were recorded: JSON says null there) */
	if (!p->maps_recorded || !mp_maps_any(m))
		return;
	fprintf(f,
		"mappings: reserved peak %" PRIu64 " B, live %" PRIu64 " B, mapped %" PRIu64
		" B in %" PRIu64 ", unmapped %" PRIu64 " B in %" PRIu64 "; resident peak ",
		m->peak_bytes, m->live_bytes, m->alloc_bytes, m->alloc_count, m->free_bytes,
		m->free_count);
	if (p->maps_resident_peak == MP_UNKNOWN)
		fputs("unknown (no RSS sample)\n", f);
	else
		fprintf(f, "<= %" PRIu64 " B\n", p->maps_resident_peak);
}

static void put_row(FILE *f, const char *name, int w, const struct mp_map_stats *m)
{
	mp_text_put_name(f, name, w);
	fprintf(f, " %14" PRIu64 " %14" PRIu64 " %14" PRId64 " %14" PRIu64 " %14" PRIu64 "\n",
		m->alloc_bytes, m->free_bytes, net_of(m), m->live_bytes, m->peak_bytes);
}

static const char *kernel_name(const struct mp_profile *p, uint32_t id)
{
	return id < p->n_names ? p->names[id] : "?";
}

/* Rows of the @n figures @at gives, named by @name_at, in the order of
 * @order (NULL: as they are). */
static void put_section(FILE *f, const char *title, const struct mp_profile *p, uint32_t n,
			const struct mp_map_stats *(*at)(const struct mp_profile *, uint32_t),
			const char *(*name_at)(const struct mp_profile *, uint32_t),
			const uint32_t *order)
{
	int w = 32;
	bool any = false;

	for (uint32_t i = 0; i < n; i++) {
		if (mp_maps_any(at(p, i))) {
			w = mp_text_name_col(w, name_at(p, i));
			any = true;
		}
	}
	if (!any)
		return;
	fprintf(f, "\n%-*s %14s %14s %14s %14s %14s\n", w, title, "MAPPED_BYTES", "UNMAPPED_BYTES",
		"NET_BYTES", "LIVE_BYTES", "PEAK_BYTES");
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = order ? order[k] : k;

		if (mp_maps_any(at(p, i)))
			put_row(f, name_at(p, i), w, at(p, i));
	}
}

static const struct mp_map_stats *kernel_at(const struct mp_profile *p, uint32_t i)
{
	return &p->kernels[i].maps;
}

static const char *kernel_name_at(const struct mp_profile *p, uint32_t i)
{
	return kernel_name(p, p->kernels[i].name);
}

static const struct mp_map_stats *phase_at(const struct mp_profile *p, uint32_t i)
{
	return &p->phases[i].maps;
}

static const char *phase_name_at(const struct mp_profile *p, uint32_t i)
{
	return p->phases[i].name;
}

static const struct mp_map_stats *owner_at(const struct mp_profile *p, uint32_t i)
{
	return &p->owners[i].maps;
}

static const char *owner_name_at(const struct mp_profile *p, uint32_t i)
{
	return p->owners[i].name;
}

static const struct mp_map_stats *tag_at(const struct mp_profile *p, uint32_t i)
{
	return &p->tags[i].maps;
}

static const char *tag_name_at(const struct mp_profile *p, uint32_t i)
{
	return p->tags[i].name;
}

void mp_maps_table(const struct mp_profile *p, FILE *f)
{
	uint32_t *order = NULL;

	if (!mp_maps_any(&p->maps))
		return;
	fputs("\nanonymous mappings (a separate view: mmap/mremap/munmap the program made itself, "
	      "reserved bytes;\nin no heap figure above; KERNEL and PHASE rows: LIVE and PEAK "
	      "are the process's)\n",
	      f);
	put_section(f, "KERNEL", p, p->n_kernels, kernel_at, kernel_name_at, NULL);
	put_section(f, "PHASE", p, p->n_phases, phase_at, phase_name_at, NULL);
	/* owners by bytes mapped, the highest first (as first seen without
	 * memory for the order) */
	(void)mp_rank_pools(p->owners, p->n_owners, MP_RANK_MAPPED, &order);
	put_section(f, "OWNER", p, p->n_owners, owner_at, owner_name_at, order);
	free(order);
	put_section(f, "TAG", p, p->n_tags, tag_at, tag_name_at, NULL);
}

void mp_maps_json(struct mp_json *j, const char *key, const struct mp_map_stats *m)
{
	mp_json_object_begin(j, key);
	mp_json_u64(j, "mappedBytes", m->alloc_bytes);
	mp_json_u64(j, "mappedCount", m->alloc_count);
	mp_json_u64(j, "unmappedBytes", m->free_bytes);
	mp_json_u64(j, "unmappedCount", m->free_count);
	mp_json_i64(j, "netBytes", net_of(m));
	mp_json_u64(j, "liveBytes", m->live_bytes);
	mp_json_u64(j, "peakBytes", m->peak_bytes);
	mp_json_object_end(j);
}

void mp_maps_json_profile(struct mp_json *j, const struct mp_profile *p)
{
	if (!p->maps_recorded) {
		mp_json_null(j, "anonMaps");
		return;
	}
	mp_maps_json(j, "anonMaps", &p->maps);
	if (p->maps_resident_peak == MP_UNKNOWN)
		mp_json_null(j, "anonMapsResidentPeak");
	else
		mp_json_u64(j, "anonMapsResidentPeak", p->maps_resident_peak);
}
