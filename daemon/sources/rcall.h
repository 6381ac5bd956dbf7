/* SPDX-License-Identifier: MIT */
/*
 * A function call made by a thread of another process that the daemon
 * holds stopped under ptrace (x86-64): the thread's registers, its whole
 * extended state included, are saved; the call runs on the thread's stack
 * below its red zone and returns to address 0, whose fault stops the thread
 * again; then everything is put back as it was. Used by the injector
 * (injector.c) to make a target call the dynamic loader.
 */
#ifndef MP_RCALL_H
#define MP_RCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

struct mp_rthread {
	pid_t tid;
	struct user_regs_struct regs; /* as the thread was stopped */
	void *xstate; /* NT_X86_XSTATE (or the FXSAVE area) */
	size_t xstate_len;
	bool fx_only; /* the kernel gave no XSTATE regset */
	int pending_sig; /* a signal that arrived during a call, given back at release */
	bool in_call; /* a call started and has not returned */
};

/* Saves the stopped thread's registers in @t (t->tid set by the caller).
 * Negative errno. */
int mp_rcall_save(struct mp_rthread *t);
/* Puts back what mp_rcall_save() saved. */
int mp_rcall_restore(const struct mp_rthread *t);
void mp_rcall_release(struct mp_rthread *t);

/*
 * Calls @fn(@a0, @a1) in the stopped thread @t, whose registers were saved,
 * and waits at most @timeout_ns for it to return; *@ret gets the return
 * value (rax). When @data is given, its @len bytes are copied below the
 * thread's stack pointer first and @a0 is their address. The thread is
 * stopped again when this returns, with the call's registers: restore
 * them with mp_rcall_restore(). Signals that reach the thread meanwhile
 * are held in t->pending_sig (the last one). -ETIMEDOUT (the thread was
 * interrupted), -EFAULT (the call faulted elsewhere than at its return;
 * *@ret gets the faulting address), -ESRCH (the thread is gone).
 */
int mp_rcall(struct mp_rthread *t, uint64_t fn, uint64_t a0, uint64_t a1, const void *data,
	     size_t len, uint64_t timeout_ns, uint64_t *ret);

/* mp_rcall() in two steps: the call set up (the thread still stopped),
 * then run for at most @timeout_ns. After -ETIMEDOUT the thread is stopped
 * inside the call, and mp_rcall_finish() may let it go on. */
int mp_rcall_start(struct mp_rthread *t, uint64_t fn, uint64_t a0, uint64_t a1, const void *data,
		   size_t len);
int mp_rcall_finish(struct mp_rthread *t, uint64_t timeout_ns, uint64_t *ret);

/* Up to @len bytes of the target's memory at @addr (process_vm_readv);
 * the count read or a negative errno. */
ssize_t mp_rcall_read(pid_t pid, uint64_t addr, void *buf, size_t len);

/* Waits for a stop of @tid for at most @timeout_ns (waitpid(__WALL)
 * polled): 0 and *@ret_status, -ETIMEDOUT or a negative errno. */
int mp_rcall_wait(pid_t tid, uint64_t timeout_ns, int *ret_status);

#endif /* MP_RCALL_H */
