/* SPDX-License-Identifier: MIT */
/*
 * The running kernel's BTF (/sys/kernel/btf/vmlinux): what the tracer needs
 * to know of the kernel before it loads its programs, and the daemon's own
 * btf__load_vmlinux_btf() (kernel_btf.c says why it replaces libbpf's).
 */
#ifndef MP_KERNEL_BTF_H
#define MP_KERNEL_BTF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MP_VMLINUX_BTF "/sys/kernel/btf/vmlinux"

struct mp_kernel_facts {
	/* Multi-uprobe links (kernel 6.6+): attach in one call per object
	 * and, above all, detach in milliseconds instead of 0.1-0.2 s per
	 * probe. */
	bool uprobe_multi;
	bool rss_stat; /* the rss_stat tracepoint (5.5+) */
	uint32_t nr_mm_counters; /* enum NR_MM_COUNTERS, for rss_stat members */
};

/* The facts of the running kernel, found once (without BTF: no multi-uprobe
 * links, no rss_stat, 4 counters). Thread-safe. */
const struct mp_kernel_facts *mp_kernel_facts(void);

/* The facts read from the raw BTF @data (@size bytes, the layout of
 * /sys/kernel/btf/vmlinux) by a walk of its types, without a copy: 0, or
 * -EBADMSG when the blob is not BTF this walk knows (every read bounded). */
int mp_kernel_facts_scan(const void *data, size_t size, struct mp_kernel_facts *ret);

#endif
