// SPDX-License-Identifier: MIT
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rcall.h"
#include "util.h"

/* The largest XSAVE area of x86-64 processors today (AMX tiles included)
 * fits with room to spare. */
#define XSTATE_MAX (16u << 10)
/* The red zone below the stack pointer that leaf functions may use, and a
 * margin. */
#define BELOW_SP (128 + 256)
#define EFLAGS_TF 0x100ull
#define EFLAGS_DF 0x400ull

int mp_rcall_save(struct mp_rthread *t)
{
	struct iovec iov;

	if (ptrace(PTRACE_GETREGS, t->tid, NULL, &t->regs) < 0)
		return -errno;
	free(t->xstate);
	t->xstate = calloc(1, XSTATE_MAX);
	if (!t->xstate)
		return -ENOMEM;
	iov = (struct iovec){ .iov_base = t->xstate, .iov_len = XSTATE_MAX };
	if (ptrace(PTRACE_GETREGSET, t->tid, (void *)(uintptr_t)NT_X86_XSTATE, &iov) == 0) {
		t->xstate_len = iov.iov_len;
		t->fx_only = false;
		return 0;
	}
	if (ptrace(PTRACE_GETFPREGS, t->tid, NULL, t->xstate) < 0)
		return -errno;
	t->xstate_len = sizeof(struct user_fpregs_struct);
	t->fx_only = true;
	return 0;
}

int mp_rcall_restore(const struct mp_rthread *t)
{
	struct iovec iov = { .iov_base = t->xstate, .iov_len = t->xstate_len };

	if (ptrace(PTRACE_SETREGS, t->tid, NULL, &t->regs) < 0)
		return -errno;
	if (!t->xstate)
		return 0;
	if (t->fx_only ? ptrace(PTRACE_SETFPREGS, t->tid, NULL, t->xstate) :
			 ptrace(PTRACE_SETREGSET, t->tid, (void *)(uintptr_t)NT_X86_XSTATE, &iov))
		return -errno;
	return 0;
}

void mp_rcall_release(struct mp_rthread *t)
{
	free(t->xstate);
	t->xstate = NULL;
	t->xstate_len = 0;
}

ssize_t mp_rcall_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

	return n < 0 ? -errno : n;
}

/* The whole of @len bytes at @addr: process_vm_writev, or /proc/PID/mem
 * where the kernel refuses the former. */
static int write_mem(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec local = { .iov_base = (void *)buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };
	char path[64];
	ssize_t n;
	int fd;

	if (process_vm_writev(pid, &local, 1, &remote, 1, 0) == (ssize_t)len)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = pwrite(fd, buf, len, (off_t)addr);
	close(fd);
	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
}

int mp_rcall_wait(pid_t tid, uint64_t timeout_ns, int *ret_status)
{
	uint64_t end = mp_now_ns() + timeout_ns;
	long nap = 20000;

	for (;;) {
		pid_t w = waitpid(tid, ret_status, __WALL | WNOHANG);

		if (w == tid)
			return 0;
		if (w < 0 && errno != EINTR)
			return -errno;
		if (mp_now_ns() >= end)
			return -ETIMEDOUT;
		nanosleep(&(struct timespec){ .tv_nsec = nap }, NULL);
		if (nap < 1000000)
			nap *= 2;
	}
}

/* The thread, stopped in the call: why. 1: it went on (a job-control stop
 * or a signal held back), 0: the call returned, negative: the call ends
 * with that error. */
static int on_stop(struct mp_rthread *t, int st, uint64_t *ret)
{
	struct user_regs_struct regs;
	int sig;

	if (WIFEXITED(st) || WIFSIGNALED(st))
		return -ESRCH;
	if (!WIFSTOPPED(st))
		return 1;
	sig = WSTOPSIG(st);
	if (st >> 16 == PTRACE_EVENT_STOP || sig != SIGSEGV) {
		/* a group stop or an interrupt: on; a signal: held until the
		 * thread is released, so that no handler runs inside the call */
		if (st >> 16 != PTRACE_EVENT_STOP && sig != SIGTRAP)
			t->pending_sig = sig;
		return ptrace(PTRACE_CONT, t->tid, NULL, NULL) < 0 ? -errno : 1;
	}
	if (ptrace(PTRACE_GETREGS, t->tid, NULL, &regs) < 0)
		return -errno;
	if (regs.rip == 0) {
		*ret = regs.rax;
		return 0;
	}
	*ret = regs.rip;
	return -EFAULT;
}

int mp_rcall_start(struct mp_rthread *t, uint64_t fn, uint64_t a0, uint64_t a1, const void *data,
		   size_t len)
{
	struct user_regs_struct regs = t->regs;
	uint64_t sp = t->regs.rsp - BELOW_SP, zero = 0;
	int r;

	if (data) {
		sp = (sp - len) & ~15ull;
		r = write_mem(t->tid, sp, data, len);
		if (r < 0)
			return r;
		a0 = sp;
	}
	/* at the callee's first instruction, rsp + 8 is 16-byte aligned and
	 * rsp points at the return address: 0 */
	sp = ((sp - 64) & ~15ull) - 8;
	r = write_mem(t->tid, sp, &zero, sizeof(zero));
	if (r < 0)
		return r;
	regs.rip = fn;
	regs.rdi = a0;
	regs.rsi = a1;
	regs.rax = 0;
	regs.rsp = sp;
	/* not inside a system call any more: no restart on resume */
	regs.orig_rax = (uint64_t)-1;
	regs.eflags &= ~(EFLAGS_DF | EFLAGS_TF);
	if (ptrace(PTRACE_SETREGS, t->tid, NULL, &regs) < 0)
		return -errno;
	t->in_call = true;
	return 0;
}

/* Stops the thread where it is, after a call that took too long. */
static int interrupt(struct mp_rthread *t)
{
	int r, st;

	if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL) < 0)
		return -errno;
	for (int i = 0; i < 8; i++) {
		r = mp_rcall_wait(t->tid, 1000000000ull, &st);
		if (r < 0)
			return r;
		if (WIFEXITED(st) || WIFSIGNALED(st))
			return -ESRCH;
		if (WIFSTOPPED(st) && st >> 16 == PTRACE_EVENT_STOP)
			return -ETIMEDOUT;
		if (WIFSTOPPED(st) && WSTOPSIG(st) != SIGTRAP)
			t->pending_sig = WSTOPSIG(st);
		/* a signal stop came first: the interrupt follows */
		if (ptrace(PTRACE_CONT, t->tid, NULL, NULL) < 0)
			return -errno;
	}
	return -ETIMEDOUT;
}

int mp_rcall_finish(struct mp_rthread *t, uint64_t timeout_ns, uint64_t *ret)
{
	uint64_t end = mp_now_ns() + timeout_ns;
	int r, st;

	if (ptrace(PTRACE_CONT, t->tid, NULL, NULL) < 0)
		return -errno;
	for (;;) {
		uint64_t now = mp_now_ns();

		r = mp_rcall_wait(t->tid, now < end ? end - now : 0, &st);
		if (r == -ETIMEDOUT)
			return interrupt(t);
		if (r < 0)
			return r == -ECHILD ? -ESRCH : r;
		r = on_stop(t, st, ret);
		if (r <= 0) {
			t->in_call = false;
			return r;
		}
	}
}

int mp_rcall(struct mp_rthread *t, uint64_t fn, uint64_t a0, uint64_t a1, const void *data,
	     size_t len, uint64_t timeout_ns, uint64_t *ret)
{
	int r = mp_rcall_start(t, fn, a0, a1, data, len);

	return r < 0 ? r : mp_rcall_finish(t, timeout_ns, ret);
}
