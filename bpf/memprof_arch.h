/* SPDX-License-Identifier: MIT */
/*
 * What the BPF programs need of the architecture: syscall numbers and mmap
 * flags. Only x86-64 is supported (bpf/vmlinux/ has its vmlinux.h only).
 * BPF side only; shared by memprof.bpf.c and memprof_hub.bpf.c.
 */
#ifndef MEMPROF_ARCH_H
#define MEMPROF_ARCH_H

#if defined(__TARGET_ARCH_x86)
#define NR_MMAP 9
#define NR_MUNMAP 11
#define NR_MREMAP 25
#define NR_BRK 12
#define MAP_ANONYMOUS_FLAG 0x20
#else
#error "memprofd's BPF side supports x86-64 only (see scripts/gen-vmlinux)"
#endif

#endif
