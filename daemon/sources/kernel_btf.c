// SPDX-License-Identifier: MIT
/*
 * The running kernel's BTF, read fast: everything here runs before the
 * target does (memprof run holds it until the tracer is attached).
 *
 * Debian 12's libbpf (1.1) reads /sys/kernel/btf/vmlinux 4 KiB a read():
 * 1,340 reads of 5.4 MB, 13-27 ms here, and btf__new() then copies and
 * indexes it into fresh memory (~6 ms, most of it page faults). The kernel
 * lets the file be mapped since 6.16, and a walk of the mapped types finds
 * the few facts the tracer needs in ~1 ms without a copy.
 */
#include "kernel_btf.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/btf.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* /sys/kernel/btf/vmlinux mapped read-only: its size in *@size, or NULL. */
static void *map_vmlinux(size_t *size)
{
	struct stat st;
	void *m = MAP_FAILED;
	int fd = open(MP_VMLINUX_BTF, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size < (1 << 30))
		m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return NULL;
	*size = (size_t)st.st_size;
	return m;
}

/*
 * vmlinux's BTF, in place of libbpf's own btf__load_vmlinux_btf(): the
 * mapped file parsed (5-6 ms here against libbpf's 13-27 ms read), for the
 * tracer's load and the hub's, each of which has libbpf load it. libbpf
 * calls this function through its PLT, so the executable's definition takes
 * the place of its own (libbpf 1.5 maps the file itself); where the file
 * cannot be mapped (a kernel before 6.16), libbpf's own runs (RTLD_NEXT).
 * The caller owns the result (btf__free()).
 */
struct btf *btf__load_vmlinux_btf(void)
{
	struct btf *(*libbpf_own)(void);
	struct btf *btf;
	size_t size;
	void *m = map_vmlinux(&size);

	if (m) {
		btf = btf__new(m, (uint32_t)size);
		munmap(m, size);
		if (!libbpf_get_error(btf))
			return btf;
	}
	libbpf_own = (struct btf * (*)(void)) dlsym(RTLD_NEXT, "btf__load_vmlinux_btf");
	if (!libbpf_own || libbpf_own == btf__load_vmlinux_btf) {
		errno = ESRCH;
		return NULL;
	}
	return libbpf_own();
}

/* Whether string @off of the string section @strs (@len bytes) is @name. */
static bool name_is(const char *strs, uint32_t len, uint32_t off, const char *name)
{
	size_t n = strlen(name);

	return off < len && len - off > n && !memcmp(strs + off, name, n + 1);
}

/* The bytes that follow type @t in the type section (btf.h: by kind), or
 * -1 for a kind this walk does not know. */
static int64_t type_extra(const struct btf_type *t)
{
	uint64_t vlen = BTF_INFO_VLEN(t->info);

	switch (BTF_INFO_KIND(t->info)) {
	case BTF_KIND_INT:
	case BTF_KIND_VAR:
	case BTF_KIND_DECL_TAG:
		return 4;
	case BTF_KIND_PTR:
	case BTF_KIND_FWD:
	case BTF_KIND_TYPEDEF:
	case BTF_KIND_VOLATILE:
	case BTF_KIND_CONST:
	case BTF_KIND_RESTRICT:
	case BTF_KIND_FUNC:
	case BTF_KIND_FLOAT:
	case BTF_KIND_TYPE_TAG:
		return 0;
	case BTF_KIND_ARRAY:
		return (int64_t)sizeof(struct btf_array);
	case BTF_KIND_STRUCT:
	case BTF_KIND_UNION:
		return (int64_t)(vlen * sizeof(struct btf_member));
	case BTF_KIND_ENUM:
		return (int64_t)(vlen * sizeof(struct btf_enum));
	case BTF_KIND_ENUM64:
		return (int64_t)(vlen * sizeof(struct btf_enum64));
	case BTF_KIND_FUNC_PROTO:
		return (int64_t)(vlen * sizeof(struct btf_param));
	case BTF_KIND_DATASEC:
		return (int64_t)(vlen * sizeof(struct btf_var_secinfo));
	default:
		return -1;
	}
}

int mp_kernel_facts_scan(const void *data, size_t size, struct mp_kernel_facts *ret)
{
	const uint8_t *b = data, *p, *end;
	struct btf_header h;
	const char *strs;

	*ret = (struct mp_kernel_facts){ .nr_mm_counters = 4 };
	if (size < sizeof(h))
		return -EBADMSG;
	memcpy(&h, b, sizeof(h));
	if (h.magic != BTF_MAGIC || h.version != BTF_VERSION || h.hdr_len < sizeof(h) ||
	    h.hdr_len > size || (uint64_t)h.type_off + h.type_len > size - h.hdr_len ||
	    (uint64_t)h.str_off + h.str_len > size - h.hdr_len || h.type_off % 4)
		return -EBADMSG;
	p = b + h.hdr_len + h.type_off;
	end = p + h.type_len;
	strs = (const char *)b + h.hdr_len + h.str_off;
	while (p < end) {
		struct btf_type t;
		int64_t extra;

		if ((size_t)(end - p) < sizeof(t))
			return -EBADMSG;
		memcpy(&t, p, sizeof(t));
		extra = type_extra(&t);
		if (extra < 0 || (uint64_t)(end - p) - sizeof(t) < (uint64_t)extra)
			return -EBADMSG;
		switch (BTF_INFO_KIND(t.info)) {
		case BTF_KIND_STRUCT:
			if (name_is(strs, h.str_len, t.name_off, "bpf_uprobe_multi_link"))
				ret->uprobe_multi = true;
			break;
		case BTF_KIND_TYPEDEF:
			if (name_is(strs, h.str_len, t.name_off, "btf_trace_rss_stat"))
				ret->rss_stat = true;
			break;
		case BTF_KIND_ENUM:
			for (int64_t i = 0; i < extra / (int64_t)sizeof(struct btf_enum); i++) {
				struct btf_enum e;

				memcpy(&e, p + sizeof(t) + i * (int64_t)sizeof(e), sizeof(e));
				if (name_is(strs, h.str_len, e.name_off, "NR_MM_COUNTERS"))
					ret->nr_mm_counters = (uint32_t)e.val;
			}
			break;
		default:
			break;
		}
		p += sizeof(t) + (size_t)extra;
	}
	return 0;
}

static __u32 btf_enum_value(const struct btf *btf, const char *name, __u32 dflt)
{
	__u32 n = btf__type_cnt(btf);

	for (__u32 id = 1; id < n; id++) {
		const struct btf_type *t = btf__type_by_id(btf, id);
		const struct btf_enum *e;

		if (!btf_is_enum(t))
			continue;
		e = btf_enum(t);
		for (__u16 i = 0; i < btf_vlen(t); i++)
			if (!strcmp(btf__name_by_offset(btf, e[i].name_off), name))
				return (__u32)e[i].val;
	}
	return dflt;
}

static struct mp_kernel_facts facts;

/* The mapped file walked; else (not mappable, or BTF the walk does not
 * know) libbpf's parse of it. */
static void read_kernel_facts(void)
{
	struct btf *btf;
	size_t size;
	void *m = map_vmlinux(&size);

	if (m) {
		int r = mp_kernel_facts_scan(m, size, &facts);

		munmap(m, size);
		if (r == 0)
			return;
	}
	facts = (struct mp_kernel_facts){ .nr_mm_counters = 4 };
	btf = btf__load_vmlinux_btf();
	if (!btf || libbpf_get_error(btf))
		return;
	facts.uprobe_multi =
		btf__find_by_name_kind(btf, "bpf_uprobe_multi_link", BTF_KIND_STRUCT) >= 0;
	facts.rss_stat = btf__find_by_name_kind(btf, "btf_trace_rss_stat", BTF_KIND_TYPEDEF) >= 0;
	facts.nr_mm_counters = btf_enum_value(btf, "NR_MM_COUNTERS", 4);
	btf__free(btf);
}

const struct mp_kernel_facts *mp_kernel_facts(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, read_kernel_facts);
	return &facts;
}
