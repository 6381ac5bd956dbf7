// SPDX-License-Identifier: MIT
/*
 * The injector's decisions that need no target (daemon/sources/injector.c,
 * seccomp_eval.c): which executables can take libmemprof, and what a
 * seccomp filter does to the loader's system calls.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "injector.h"
#include "seccomp_eval.h"
#include "../common/helpers.h"

static int check(const char *path, bool *dynamic, char *why)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;

	cr_assert_geq(fd, 0, "%s", path);
	r = mp_inject_check_exe(fd, dynamic, why);
	close(fd);
	return r;
}

/* This machine's kernel may run no 32-bit program (no IA32 emulation):
 * the file is what the injector reads first, through /proc/PID/exe. */
Test(inject_units, a_32bit_program_is_refused_with_its_class)
{
	char why[MP_INJECT_WHY_MAX] = "";
	bool dynamic = true;

	cr_assert_eq(check(mp_test_build_path("tests/inject/fixture-i386"), &dynamic, why),
		     -EOPNOTSUPP);
	cr_assert_str_eq(why, "a 32-bit process (ELF class 1, machine 3): only x86-64 takes "
			      "libmemprof");
}

Test(inject_units, dynamic_and_static_programs_are_told_apart)
{
	char why[MP_INJECT_WHY_MAX] = "", src[4096];
	bool dynamic = false;

	cr_assert_eq(check("/proc/self/exe", &dynamic, why), 0, "%s", why);
	cr_assert(dynamic);
	cr_assert_eq(check(mp_test_build_path("tests/inject/fixture-static"), &dynamic, why), 0);
	cr_assert_not(dynamic);
	snprintf(src, sizeof(src), "%s/tests/inject/fixture_i386.S", getenv("MEMPROF_SOURCE_ROOT"));
	cr_assert_eq(check(src, &dynamic, why), -EOPNOTSUPP);
	cr_assert_str_eq(why, "the executable is not an ELF file");
}

static uint32_t run(const struct sock_filter *f, size_t n, int nr, int *err)
{
	struct seccomp_data d = { .nr = nr, .arch = AUDIT_ARCH_X86_64 };
	uint32_t ret = 0;

	*err = mp_seccomp_eval(f, n, &d, &ret);
	return ret;
}

#define N(f) (sizeof(f) / sizeof((f)[0]))

Test(inject_units, seccomp_filters_are_run_as_the_kernel_would)
{
	/* memfd_create -> EPERM, the rest allowed (fixture-seccomp's) */
	static const struct sock_filter errno_memfd[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	/* scratch memory, ALU and X: allow nr < 10 (read, write, ..., mmap,
	 * mprotect), log the rest */
	static const struct sock_filter alu[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_STMT(BPF_ST, 3),
		BPF_STMT(BPF_LDX | BPF_IMM, 10),
		BPF_STMT(BPF_LD | BPF_MEM, 3),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_X, 0, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0),
		BPF_STMT(BPF_ALU | BPF_OR | BPF_K, SECCOMP_RET_LOG),
		BPF_STMT(BPF_RET | BPF_A, 0),
	};
	int err;

	cr_assert_eq(run(errno_memfd, N(errno_memfd), SYS_memfd_create, &err),
		     SECCOMP_RET_ERRNO | EPERM);
	cr_assert_eq(err, 0);
	cr_assert_not(mp_seccomp_allows(SECCOMP_RET_ERRNO | EPERM));
	cr_assert_eq(run(errno_memfd, N(errno_memfd), SYS_openat, &err), SECCOMP_RET_ALLOW);
	cr_assert(mp_seccomp_allows(SECCOMP_RET_ALLOW));
	cr_assert_eq(run(alu, N(alu), SYS_mmap, &err), SECCOMP_RET_ALLOW);
	cr_assert_eq(run(alu, N(alu), SYS_openat, &err), SECCOMP_RET_LOG);
	cr_assert_eq(err, 0);
	cr_assert(mp_seccomp_allows(SECCOMP_RET_LOG));
	cr_assert_not(mp_seccomp_allows(SECCOMP_RET_KILL_PROCESS));
}

Test(inject_units, malformed_seccomp_filters_are_errors)
{
	static const struct sock_filter past_end[] = {
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 5, 5),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	static const struct sock_filter ja_past_end[] = {
		BPF_STMT(BPF_JMP | BPF_JA, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	static const struct sock_filter no_ret[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
	};
	static const struct sock_filter bad_load[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 64),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	static const struct sock_filter bad_mem[] = {
		BPF_STMT(BPF_ST, BPF_MEMWORDS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	static const struct sock_filter div0[] = {
		BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	int err;

	run(past_end, N(past_end), 0, &err);
	cr_assert_eq(err, -EINVAL);
	run(ja_past_end, N(ja_past_end), 0, &err);
	cr_assert_eq(err, -EINVAL);
	run(no_ret, N(no_ret), 0, &err);
	cr_assert_eq(err, -EINVAL);
	run(bad_load, N(bad_load), 0, &err);
	cr_assert_eq(err, -EINVAL);
	run(bad_mem, N(bad_mem), 0, &err);
	cr_assert_eq(err, -EINVAL);
	run(div0, N(div0), 0, &err);
	cr_assert_eq(err, -EINVAL);
	run(no_ret, 0, 0, &err);
	cr_assert_eq(err, -EINVAL);
}
