// SPDX-License-Identifier: MIT
/* Who may profile whom (docs/SERVICE.md "Authorization"): root any
 * process, another user only a process it could ptrace-read itself. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service.h"

static int read_ids(const char *text, const char *key, unsigned long ids[4])
{
	const char *p = strstr(text, key);

	if (!p || (p != text && p[-1] != '\n'))
		return -EINVAL;
	p += strlen(key);
	for (int i = 0; i < 4; i++) {
		char *end;

		while (*p == ' ' || *p == '\t')
			p++;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		errno = 0;
		ids[i] = strtoul(p, &end, 10);
		if (errno)
			return -EINVAL;
		p = end;
	}
	return 0;
}

const char *mp_service_inject_refusal(uid_t uid, const char *yama_path, char *buf, size_t len)
{
	FILE *f;
	int scope = 0;

	if (uid == 0)
		return NULL;
	f = fopen(yama_path ? yama_path : "/proc/sys/kernel/yama/ptrace_scope", "re");
	if (f) {
		if (fscanf(f, "%d", &scope) != 1)
			scope = 0;
		fclose(f);
	}
	if (scope == 0)
		return NULL;
	snprintf(buf, len,
		 "uid %u may not ptrace it (Yama ptrace_scope %d: only root's requests inject)",
		 (unsigned)uid, scope);
	return buf;
}

int mp_service_authorize(uid_t uid, gid_t gid, pid_t pid, char *why, size_t why_len)
{
	char path[64], text[8192];
	unsigned long u[4], g[4];
	struct stat st;
	ssize_t n;
	int fd;

	if (pid <= 0) {
		snprintf(why, why_len, "invalid pid");
		return -ESRCH;
	}
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) < 0) {
		snprintf(why, why_len, "no process %d", (int)pid);
		return -ESRCH;
	}
	if (uid == 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, why_len, "no process %d", (int)pid);
		return -ESRCH;
	}
	/* The kernel gives the files under /proc/PID of a non-dumpable
	 * process to root (the directory itself keeps its owner). */
	if (fstat(fd, &st) < 0) {
		close(fd);
		snprintf(why, why_len, "no process %d", (int)pid);
		return -ESRCH;
	}
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0) {
		snprintf(why, why_len, "no process %d", (int)pid);
		return -ESRCH;
	}
	text[n] = '\0';
	if (read_ids(text, "Uid:", u) < 0 || read_ids(text, "Gid:", g) < 0) {
		snprintf(why, why_len, "cannot read the credentials of process %d", (int)pid);
		return -EPERM;
	}
	for (int i = 0; i < 3; i++) {
		if (u[i] != uid || g[i] != gid) {
			snprintf(why, why_len,
				 "process %d runs with uids %lu/%lu/%lu gids %lu/%lu/%lu, "
				 "not only %u/%u (only root may profile other users' or "
				 "set-id processes)",
				 (int)pid, u[0], u[1], u[2], g[0], g[1], g[2], (unsigned)uid,
				 (unsigned)gid);
			return -EPERM;
		}
	}
	/* Checked after the ids: the ownership only tells dumpability apart
	 * once we know the process is the requester's. */
	if (st.st_uid != uid || st.st_gid != gid) {
		snprintf(why, why_len, "process %d is not dumpable (PR_SET_DUMPABLE 0 or set-id)",
			 (int)pid);
		return -EPERM;
	}
	return 0;
}
