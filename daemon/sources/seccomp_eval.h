/* SPDX-License-Identifier: MIT */
/*
 * A seccomp filter, run on one system call: which action the kernel would
 * take. The injector (injector.c) asks it, before it makes a target call the
 * dynamic loader, whether the target's filters let the loader's system calls
 * through. The program comes from the target's kernel state, but a filter
 * the kernel accepted can still be anything: every jump, load and memory
 * slot is bounds-checked here, and a malformed program is an error.
 */
#ifndef MP_SECCOMP_EVAL_H
#define MP_SECCOMP_EVAL_H

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>

/* The seccomp action of @ret (SECCOMP_RET_ACTION_FULL of a return value). */
#define MP_SECCOMP_ACTION(ret) ((ret)&0xffff0000u)

/*
 * Runs the classic BPF program @prog of @n instructions on @d and puts its
 * return value in *@ret. -EINVAL when the program is malformed (a jump or
 * a load out of bounds, an instruction seccomp does not allow, no return).
 */
int mp_seccomp_eval(const struct sock_filter *prog, size_t n, const struct seccomp_data *d,
		    uint32_t *ret);

/* Whether the action of return value @ret lets the call run: ALLOW or
 * LOG. */
int mp_seccomp_allows(uint32_t ret);

#endif /* MP_SECCOMP_EVAL_H */
