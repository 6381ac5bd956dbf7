/* SPDX-License-Identifier: MIT */
/*
 * Start a command stopped before its main(), for `memprof run -- CMD...`.
 *
 * mp_launch() returns with the child in group-stop at its ELF entry point:
 * the dynamic loader has mapped and relocated every DT_NEEDED and LD_PRELOAD
 * library (so the tracer can resolve the allocator from /proc/PID/maps) and
 * no instruction of the program itself has run. The caller attaches its
 * probes, then mp_launch_resume(). The caller stays the parent and reaps the
 * child with mp_launch_wait() (SIGCHLD must not be SIG_IGN).
 *
 * Call it from the thread that will not exit before mp_launch() returns
 * (ptrace binds the child to the forking thread during the launch only).
 */
#ifndef MP_LAUNCH_H
#define MP_LAUNCH_H

#include <sys/types.h>

/*
 * fork + execvp(@argv[0], @argv) with PATH lookup and the caller's environment.
 * The child gets default signal dispositions and an empty signal mask.
 * Returns 0 and the child's pid in @ret_pid, or, with no child left behind:
 * -EINVAL (empty argv), -ENOENT / -EACCES / -ENOEXEC / ... (the errno of exec
 * in the child), -ECHILD (the command exited or was killed before reaching its
 * entry point, e.g. a missing shared library; the loader printed why),
 * -EOPNOTSUPP (not x86-64), or the errno of fork/pipe/ptrace.
 */
int mp_launch(char *const argv[], pid_t *ret_pid);

/* Let a launched child run (SIGCONT). Returns 0 or -errno of kill(). */
int mp_launch_resume(pid_t pid);

/* Wait for the child to exit (stops are not reported) and return its raw wait
 * status in @ret_status. Retries on EINTR. Returns 0 or -errno of waitpid(). */
int mp_launch_wait(pid_t pid, int *ret_status);

/* SIGKILL the child and reap it; for error paths. Returns 0 or -errno. */
int mp_launch_kill(pid_t pid);

/* The shell's view of a wait status: the exit code, or 128 + the signal. */
int mp_launch_exit_code(int status);

#endif /* MP_LAUNCH_H */
