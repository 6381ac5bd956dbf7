/* SPDX-License-Identifier: MIT */
/*
 * The kernel's BTF as the daemon reads it (daemon/sources/kernel_btf.c):
 * libbpf's own loads of vmlinux's BTF go through the daemon's mapped one;
 * the facts the walk of the mapped types finds are libbpf's; a blob that
 * is not BTF the walk knows is refused, whatever its bytes, and never read
 * past its end.
 */
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/btf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernel_btf.h"

static void need_btf(void)
{
	if (access(MP_VMLINUX_BTF, R_OK) != 0)
		cr_skip_test("no " MP_VMLINUX_BTF ": this kernel has no BTF");
}

/* The definition libbpf's PLT finds is the executable's, and what it
 * returns is the BTF libbpf's own returns. */
Test(kernel_btf, libbpf_loads_the_mapped_btf)
{
	struct btf *(*own)(void) =
		(struct btf * (*)(void)) dlsym(RTLD_NEXT, "btf__load_vmlinux_btf");
	struct btf *ours, *theirs;

	need_btf();
	cr_assert_eq((void *)dlsym(RTLD_DEFAULT, "btf__load_vmlinux_btf"),
		     (void *)btf__load_vmlinux_btf, "libbpf's calls would not reach the daemon's");
	cr_assert(own && own != btf__load_vmlinux_btf, "libbpf's own is not found past ours");
	ours = btf__load_vmlinux_btf();
	theirs = own();
	cr_assert(ours && !libbpf_get_error(ours));
	cr_assert(theirs && !libbpf_get_error(theirs));
	cr_assert_gt(btf__type_cnt(ours), 1000);
	cr_assert_eq(btf__type_cnt(ours), btf__type_cnt(theirs));
	cr_assert_geq(btf__find_by_name_kind(ours, "task_struct", BTF_KIND_STRUCT), 1);
	btf__free(ours);
	btf__free(theirs);
}

static uint32_t enum_value(const struct btf *btf, const char *name)
{
	for (uint32_t id = 1; id < btf__type_cnt(btf); id++) {
		const struct btf_type *t = btf__type_by_id(btf, id);

		for (uint16_t i = 0; btf_is_enum(t) && i < btf_vlen(t); i++)
			if (!strcmp(btf__name_by_offset(btf, btf_enum(t)[i].name_off), name))
				return (uint32_t)btf_enum(t)[i].val;
	}
	return 4;
}

/* The walk of the mapped file and libbpf's parse of it agree. */
Test(kernel_btf, facts_are_libbpfs)
{
	struct btf *btf;
	struct mp_kernel_facts f;
	const struct mp_kernel_facts *g;
	struct stat st;
	void *m;
	int fd;

	need_btf();
	fd = open(MP_VMLINUX_BTF, O_RDONLY);
	cr_assert(fd >= 0 && fstat(fd, &st) == 0);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		cr_skip_test("this kernel does not let its BTF be mapped (before 6.16)");
	cr_assert_eq(mp_kernel_facts_scan(m, (size_t)st.st_size, &f), 0);
	munmap(m, (size_t)st.st_size);
	btf = btf__load_vmlinux_btf();
	cr_assert(btf && !libbpf_get_error(btf));
	cr_assert_eq(f.uprobe_multi,
		     btf__find_by_name_kind(btf, "bpf_uprobe_multi_link", BTF_KIND_STRUCT) >= 0);
	cr_assert_eq(f.rss_stat,
		     btf__find_by_name_kind(btf, "btf_trace_rss_stat", BTF_KIND_TYPEDEF) >= 0);
	cr_assert_eq(f.nr_mm_counters, enum_value(btf, "NR_MM_COUNTERS"));
	btf__free(btf);
	g = mp_kernel_facts();
	cr_assert_eq(g->uprobe_multi, f.uprobe_multi);
	cr_assert_eq(g->rss_stat, f.rss_stat);
	cr_assert_eq(g->nr_mm_counters, f.nr_mm_counters);
}

/* A small BTF: a struct bpf_uprobe_multi_link (one member), a typedef
 * btf_trace_rss_stat, an enum with NR_MM_COUNTERS = 7. */
#define INFO(kind, vlen) ((uint32_t)(kind) << 24 | (vlen))

static const char STRS[] = "\0bpf_uprobe_multi_link\0m\0btf_trace_rss_stat\0NR_MM_COUNTERS\0x";

static size_t small_btf(uint8_t *out)
{
	struct btf_header h = { .magic = BTF_MAGIC, .version = BTF_VERSION, .hdr_len = sizeof(h) };
	uint32_t w[64], n = 0;

	/* [1] struct, 1 member */
	w[n++] = 1;
	w[n++] = INFO(BTF_KIND_STRUCT, 1);
	w[n++] = 8;
	w[n++] = 23, w[n++] = 0, w[n++] = 0; /* member "m" */
	/* [2] typedef */
	w[n++] = 25;
	w[n++] = INFO(BTF_KIND_TYPEDEF, 0);
	w[n++] = 1;
	/* [3] enum of 2 */
	w[n++] = 0;
	w[n++] = INFO(BTF_KIND_ENUM, 2);
	w[n++] = 4;
	w[n++] = 59, w[n++] = 1; /* "x" = 1 */
	w[n++] = 44, w[n++] = 7; /* NR_MM_COUNTERS = 7 */
	h.type_off = 0;
	h.type_len = n * 4;
	h.str_off = h.type_len;
	h.str_len = sizeof(STRS);
	memcpy(out, &h, sizeof(h));
	memcpy(out + sizeof(h), w, n * 4);
	memcpy(out + sizeof(h) + n * 4, STRS, sizeof(STRS));
	return sizeof(h) + n * 4 + sizeof(STRS);
}

Test(kernel_btf, small_blob_read)
{
	uint8_t b[1024];
	size_t len = small_btf(b);
	struct mp_kernel_facts f;

	cr_assert_eq(mp_kernel_facts_scan(b, len, &f), 0);
	cr_assert(f.uprobe_multi);
	cr_assert(f.rss_stat);
	cr_assert_eq(f.nr_mm_counters, 7);
}

/* Every cut of the blob, and every bit flipped in it: refused or read, in
 * bounds (ASan sees each copy on the heap, sized to the cut). */
Test(kernel_btf, hostile_blobs_refused_in_bounds)
{
	uint8_t b[1024];
	size_t len = small_btf(b);
	struct mp_kernel_facts f;

	for (size_t cut = 0; cut < len; cut++) {
		uint8_t *c = malloc(cut ? cut : 1);

		memcpy(c, b, cut);
		cr_assert_eq(mp_kernel_facts_scan(c, cut, &f), -EBADMSG, "cut at %zu", cut);
		free(c);
	}
	for (size_t bit = 0; bit < len * 8; bit++) {
		uint8_t *c = malloc(len);
		int r;

		memcpy(c, b, len);
		c[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		r = mp_kernel_facts_scan(c, len, &f);
		cr_assert(r == 0 || r == -EBADMSG, "bit %zu: %d", bit, r);
		free(c);
	}
	/* a kind the walk does not know */
	b[sizeof(struct btf_header) + 7] = 0x1f;
	cr_assert_eq(mp_kernel_facts_scan(b, len, &f), -EBADMSG);
	/* no header at all */
	cr_assert_eq(mp_kernel_facts_scan(b, 3, &f), -EBADMSG);
}
