// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "release.h"

#define KEEP_MAX 1024
/* fds a message to the holder carries (the kernel takes up to 253) */
#define HAND_MAX 128

/* Our end of the holder's socket; -1: none (not started, or used). */
static int holder = -1;

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* The grandchild: every fd but @keep (sorted) closed, then @ready's write
 * end, then it waits for @go's EOF and exits. Async-signal-safe calls only:
 * the caller has threads. */
static void __attribute__((noreturn)) hold(const int *keep, size_t n, int ready, int go)
{
	unsigned int lo = 0;
	char c;

	for (size_t i = 0; i < n; i++) {
		if ((unsigned int)keep[i] > lo)
			syscall(SYS_close_range, lo, (unsigned int)keep[i] - 1, 0);
		lo = (unsigned int)keep[i] + 1;
	}
	syscall(SYS_close_range, lo, ~0u, 0);
	close(ready);
	while (read(go, &c, 1) < 0 && errno == EINTR)
		;
	_exit(0);
}

int mp_release_in_child(const int *fds, size_t n)
{
	int keep[KEEP_MAX + 2], go[2], ready[2];
	pid_t mid;
	char c;

	if (!n || n > KEEP_MAX || pipe2(go, O_CLOEXEC) < 0)
		return -1;
	if (pipe2(ready, O_CLOEXEC) < 0) {
		close(go[0]);
		close(go[1]);
		return -1;
	}
	memcpy(keep, fds, n * sizeof(*fds));
	keep[n++] = go[0];
	keep[n++] = ready[1];
	qsort(keep, n, sizeof(*keep), cmp_int);
	mid = fork();
	if (mid == 0) {
		if (fork() != 0)
			_exit(0);
		hold(keep, n, ready[1], go[0]);
	}
	close(go[0]);
	close(ready[1]);
	if (mid > 0) {
		while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
			;
		/* EOF once the grandchild holds nothing but @fds (or is gone:
		 * a grandchild that failed to start took its copies along) */
		while (read(ready[0], &c, 1) < 0 && errno == EINTR)
			;
	}
	close(ready[0]);
	if (mid < 0) {
		close(go[1]);
		return -1;
	}
	return go[1];
}

/* The holder: every fd but @sock closed, out of the caller's session (a
 * terminal's ^C or ^Z reaches the caller's process group, not it) and
 * its working directory, then a byte on @ready; then it receives fds
 * until the socket's EOF, keeps them, and exits, releasing them. */
static void __attribute__((noreturn)) holder_main(int sock, int ready)
{
	unsigned int lo = (unsigned int)(sock < ready ? sock : ready),
		     hi = (unsigned int)(sock < ready ? ready : sock);
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(HAND_MAX * sizeof(int))];
	} u;
	char c = 'r';

	if (lo)
		syscall(SYS_close_range, 0u, lo - 1, 0);
	if (hi > lo + 1)
		syscall(SYS_close_range, lo + 1, hi - 1, 0);
	syscall(SYS_close_range, hi + 1, ~0u, 0);
	setsid();
	/* it may live as long as the session: no directory kept busy */
	if (chdir("/") < 0)
		_exit(0);
	while (write(ready, &c, 1) < 0 && errno == EINTR)
		;
	close(ready);
	for (;;) {
		struct iovec iov = { .iov_base = &c, .iov_len = 1 };
		struct msghdr m = { .msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = u.buf,
				    .msg_controllen = sizeof(u.buf) };
		ssize_t r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);

		if (r == 0 || (r < 0 && errno != EINTR))
			break;
	}
	_exit(0);
}

int mp_release_holder_start(void)
{
	int sv[2], ready[2], old = -1;
	pid_t mid;
	ssize_t got = 0;
	char c;

	if (__atomic_load_n(&holder, __ATOMIC_ACQUIRE) >= 0)
		return 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	if (pipe2(ready, O_CLOEXEC) < 0) {
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	mid = fork();
	if (mid == 0) {
		if (fork() != 0)
			_exit(0);
		holder_main(sv[1], ready[1]);
	}
	close(sv[1]);
	close(ready[1]);
	if (mid > 0)
		while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
			;
	/* its byte once it holds nothing of ours (none when it did not
	 * start), then EOF once it closed its end too */
	for (;;) {
		ssize_t k = read(ready[0], &c, 1);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += k;
	}
	close(ready[0]);
	if (mid < 0 || got != 1) {
		close(sv[0]);
		return -1;
	}
	if (!__atomic_compare_exchange_n(&holder, &old, sv[0], false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		close(sv[0]); /* another thread's holder came first: this one exits */
	return 0;
}

int mp_release_to_holder(const int *fds, size_t n)
{
	int sock = __atomic_exchange_n(&holder, -1, __ATOMIC_ACQ_REL);
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(HAND_MAX * sizeof(int))];
	} u;

	if (sock < 0)
		return -1;
	for (size_t done = 0; done < n;) {
		size_t k = n - done < HAND_MAX ? n - done : HAND_MAX;
		char c = 'f';
		struct iovec iov = { .iov_base = &c, .iov_len = 1 };
		struct msghdr m = { .msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = u.buf,
				    .msg_controllen = CMSG_SPACE(k * sizeof(int)) };
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		ssize_t r;

		memset(u.buf, 0, sizeof(u.buf));
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(k * sizeof(int));
		memcpy(CMSG_DATA(h), fds + done, k * sizeof(int));
		while ((r = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
			;
		if (r != 1) {
			/* gone: those handed so far are held twice, harmless */
			close(sock);
			return -1;
		}
		done += k;
	}
	/* its EOF, once the caller closed its copies */
	return sock;
}
