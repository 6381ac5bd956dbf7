// SPDX-License-Identifier: MIT
#include "launch.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static int wait_retry(pid_t pid, int *status, int options)
{
	for (;;) {
		pid_t r = waitpid(pid, status, options);

		if (r >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

int mp_launch_kill(pid_t pid)
{
	int status;

	if (pid <= 0)
		return -EINVAL;
	if (kill(pid, SIGKILL) < 0)
		return -errno;
	return wait_retry(pid, &status, 0);
}

int mp_launch_resume(pid_t pid)
{
	if (pid <= 0)
		return -EINVAL;
	return kill(pid, SIGCONT) < 0 ? -errno : 0;
}

int mp_launch_wait(pid_t pid, int *ret_status)
{
	int status, r;

	if (pid <= 0 || !ret_status)
		return -EINVAL;
	r = wait_retry(pid, &status, 0);
	if (r < 0)
		return r;
	*ret_status = status;
	return 0;
}

int mp_launch_exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return -1;
}

/* Runs in the forked child: only async-signal-safe calls until exec. */
static void __attribute__((noreturn)) child_exec(char *const argv[], int err_fd)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigset_t none;
	int e;

	/* Ignored signals and the mask survive exec; the daemon's (SIGPIPE
	 * ignored, SIGCHLD/SIGTERM blocked for signalfd) are not the program's. */
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0) {
		e = errno;
	} else {
		execvp(argv[0], argv);
		e = errno;
	}
	if (write(err_fd, &e, sizeof(e)) < 0) {
		/* the parent then sees -ECHILD */
	}
	_exit(127);
}

static int read_at_entry(pid_t pid, uint64_t *ret_entry)
{
	/* The auxv is a few dozen pairs; anything past this bound is not ours. */
	Elf64_auxv_t aux[128];
	char path[64];
	size_t len = 0;
	int fd, r = -ENOEXEC;

	snprintf(path, sizeof(path), "/proc/%d/auxv", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (len < sizeof(aux)) {
		ssize_t n = read(fd, (char *)aux + len, sizeof(aux) - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			close(fd);
			return r;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	for (size_t i = 0; i < len / sizeof(aux[0]) && aux[i].a_type != AT_NULL; i++) {
		if (aux[i].a_type == AT_ENTRY && aux[i].a_un.a_val != 0) {
			*ret_entry = aux[i].a_un.a_val;
			r = 0;
			break;
		}
	}
	return r;
}

/*
 * Continue the traced child, handing it back any signal it received, until
 * it traps at @entry + 1 (our int3). Returns 0, or -ECHILD once it is gone
 * (then already reaped).
 */
static int run_to_trap(pid_t pid, uint64_t entry, struct user_regs_struct *regs)
{
	int inject = 0, status, r;

	for (;;) {
		if (ptrace(PTRACE_CONT, pid, NULL, (void *)(long)inject) < 0)
			return -errno;
		r = wait_retry(pid, &status, 0);
		if (r < 0)
			return r;
		if (WIFEXITED(status) || WIFSIGNALED(status))
			return -ECHILD;
		if (!WIFSTOPPED(status))
			continue;
		inject = WSTOPSIG(status);
		if (inject != SIGTRAP)
			continue;
		if (ptrace(PTRACE_GETREGS, pid, NULL, regs) < 0)
			return -errno;
		if (regs->rip == entry + 1)
			return 0;
		/* a SIGTRAP of the program's own (a constructor's raise()) */
	}
}

/* The child is in its post-exec SIGTRAP stop; leave it group-stopped at its
 * entry point and no longer traced. */
static int stop_at_entry(pid_t pid)
{
#if defined(__x86_64__)
	struct user_regs_struct regs;
	uint64_t entry = 0;
	long word;
	int status, r;

	if (ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)(long)PTRACE_O_EXITKILL) < 0)
		return -errno;
	r = read_at_entry(pid, &entry);
	if (r < 0)
		return r;
	if (ptrace(PTRACE_GETREGS, pid, NULL, &regs) < 0)
		return -errno;
	/* Static executables (no PT_INTERP) start right at their entry. */
	if (regs.rip != entry) {
		errno = 0;
		word = ptrace(PTRACE_PEEKTEXT, pid, (void *)entry, NULL);
		if (errno)
			return -errno;
		if (ptrace(PTRACE_POKETEXT, pid, (void *)entry,
			   (void *)(((unsigned long)word & ~0xffUL) | 0xccUL)) < 0)
			return -errno;
		r = run_to_trap(pid, entry, &regs);
		if (r < 0)
			return r;
		if (ptrace(PTRACE_POKETEXT, pid, (void *)entry, (void *)word) < 0)
			return -errno;
		regs.rip = entry;
		if (ptrace(PTRACE_SETREGS, pid, NULL, &regs) < 0)
			return -errno;
	}
	/* SIGSTOP is taken before the child returns to user space, so it stops
	 * without executing the instruction at the entry point. */
	if (ptrace(PTRACE_DETACH, pid, NULL, (void *)(long)SIGSTOP) < 0)
		return -errno;
	for (;;) {
		r = wait_retry(pid, &status, WUNTRACED);
		if (r < 0)
			return r;
		if (WIFEXITED(status) || WIFSIGNALED(status))
			return -ECHILD;
		if (WIFSTOPPED(status))
			return 0;
	}
#else
	return -EOPNOTSUPP;
#endif
}

int mp_launch(char *const argv[], pid_t *ret_pid)
{
	int pipefd[2], status, exec_errno, r;
	ssize_t n;
	pid_t pid;

	if (!argv || !argv[0] || !argv[0][0] || !ret_pid)
		return -EINVAL;
#if !defined(__x86_64__)
	return -EOPNOTSUPP;
#endif
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		r = -errno;
		close(pipefd[0]);
		close(pipefd[1]);
		return r;
	}
	if (pid == 0)
		child_exec(argv, pipefd[1]);
	close(pipefd[1]);

	/* Wait for the exec stop rather than for the pipe: a signal before exec
	 * stops the traced child, and it would hold the pipe open forever. */
	for (;;) {
		r = wait_retry(pid, &status, 0);
		if (r < 0)
			goto kill;
		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			do
				n = read(pipefd[0], &exec_errno, sizeof(exec_errno));
			while (n < 0 && errno == EINTR);
			close(pipefd[0]);
			if (n == (ssize_t)sizeof(exec_errno) && exec_errno > 0)
				return -exec_errno;
			return -ECHILD;
		}
		if (!WIFSTOPPED(status))
			continue;
		if (WSTOPSIG(status) == SIGTRAP)
			break;
		if (ptrace(PTRACE_CONT, pid, NULL, (void *)(long)WSTOPSIG(status)) < 0) {
			r = -errno;
			goto kill;
		}
	}
	close(pipefd[0]);
	pipefd[0] = -1;

	r = stop_at_entry(pid);
	if (r == -ECHILD)
		return r;
	if (r < 0)
		goto kill;
	*ret_pid = pid;
	return 0;
kill:
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	mp_launch_kill(pid);
	return r;
}
