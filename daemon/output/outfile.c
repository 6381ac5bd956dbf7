// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "outfile.h"
#include "profile_pb.h"

/* As the kernel's MAXSYMLINKS. */
#define MAX_LINKS 40
#define PROC_SUPER_MAGIC_ 0x9fa0

/* Where a path leads: the directory that holds its last component, and
 * what that component is (lstat; exists false when it does not). */
struct spot {
	int dirfd;
	char base[NAME_MAX + 1];
	struct stat st;
	bool exists;
	/* A /proc magic link (/proc/self/fd/1 -> pipe:[N]): only the kernel
	 * can follow it. */
	bool magic;
};

/* fs.protected_symlinks' rule, for any directory others can write. */
static bool may_follow(int dirfd, const struct stat *link)
{
	struct stat d;

	if (fstat(dirfd, &d) < 0)
		return false;
	return link->st_uid == geteuid() || link->st_uid == d.st_uid ||
	       !(d.st_mode & (S_IWGRP | S_IWOTH));
}

static int open_start(int startfd, const char *path)
{
	int fd;

	if (path[0] == '/' || startfd < 0)
		fd = open(path[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	else
		fd = fcntl(startfd, F_DUPFD_CLOEXEC, 0);
	return fd < 0 ? -errno : fd;
}

static int read_link(int dirfd, const char *name, char *buf, size_t cap)
{
	ssize_t n = readlinkat(dirfd, name, buf, cap - 1);

	if (n < 0)
		return -errno;
	if (n == 0 || (size_t)n >= cap - 1)
		return -ENAMETOOLONG;
	buf[n] = '\0';
	return 0;
}

static int walk(int startfd, const char *path, int *links, struct spot *s);

/* The last component @name in @fd. Takes @fd. */
static int walk_last(int fd, const char *name, int *links, struct spot *s)
{
	char target[PATH_MAX];
	struct statfs sfs;
	int r;

	if (!strcmp(name, ".") || !strcmp(name, "..") || strlen(name) > NAME_MAX) {
		close(fd);
		return !strcmp(name, ".") || !strcmp(name, "..") ? -EISDIR : -ENAMETOOLONG;
	}
	memset(s, 0, sizeof(*s));
	s->dirfd = fd;
	strcpy(s->base, name);
	if (fstatat(fd, name, &s->st, AT_SYMLINK_NOFOLLOW) == 0) {
		s->exists = true;
	} else if (errno != ENOENT) {
		r = -errno;
		close(fd);
		return r;
	}
	if (!s->exists || !S_ISLNK(s->st.st_mode))
		return 0;
	if (++*links > MAX_LINKS || !may_follow(fd, &s->st)) {
		close(fd);
		return -ELOOP;
	}
	r = read_link(fd, name, target, sizeof(target));
	if (r < 0) {
		close(fd);
		return r;
	}
	if (target[0] != '/' && fstatfs(fd, &sfs) == 0 && sfs.f_type == PROC_SUPER_MAGIC_) {
		s->magic = true;
		return 0;
	}
	r = walk(fd, target, links, s);
	close(fd);
	return r;
}

/* Resolves @path (relative to @startfd) component by component. */
static int walk(int startfd, const char *path, int *links, struct spot *s)
{
	char buf[2 * PATH_MAX], target[PATH_MAX], *p;
	size_t len = strlen(path);
	int fd, r;

	if (!len)
		return -ENOENT;
	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	if (path[len - 1] == '/')
		return -EISDIR;
	fd = open_start(startfd, path);
	if (fd < 0)
		return fd;
	memcpy(buf, path, len + 1);
	p = buf;
	for (;;) {
		struct stat st;
		char *slash, *next;
		int nfd;

		while (*p == '/')
			p++;
		slash = strchr(p, '/');
		if (!slash)
			return walk_last(fd, p, links, s);
		*slash = '\0';
		next = slash + 1;
		if (!strcmp(p, ".")) {
			p = next;
			continue;
		}
		/* Decide on what was opened, not on a name that may change. */
		nfd = openat(fd, p, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 || fstat(nfd, &st) < 0) {
			r = -errno;
			goto fail_n;
		}
		if (S_ISDIR(st.st_mode)) {
			close(fd);
			fd = nfd;
			p = next;
			continue;
		}
		if (!S_ISLNK(st.st_mode)) {
			r = -ENOTDIR;
			goto fail_n;
		}
		if (++*links > MAX_LINKS || !may_follow(fd, &st)) {
			r = -ELOOP;
			goto fail_n;
		}
		r = read_link(nfd, "", target, sizeof(target));
		close(nfd);
		if (r < 0)
			goto fail;
		if (strlen(target) + 1 + strlen(next) + 1 > sizeof(buf)) {
			r = -ENAMETOOLONG;
			goto fail;
		}
		/* next points into buf: move it behind the link's target. */
		{
			size_t tl = strlen(target), nl = strlen(next);

			memmove(buf + tl + 1, next, nl + 1);
			memcpy(buf, target, tl);
			buf[tl] = '/';
		}
		p = buf;
		if (target[0] == '/') {
			close(fd);
			fd = open_start(-1, "/");
			if (fd < 0)
				return fd;
		}
		continue;
fail_n:
		if (nfd >= 0)
			close(nfd);
		goto fail;
	}
fail:
	close(fd);
	return r;
}

static int resolve(const char *path, struct spot *s)
{
	int links = 0;

	return walk(-1, path, &links, s);
}

static int write_all(int fd, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A new file beside @s's, named into @tmp: its fd, or -errno. */
static int tmp_open(const struct spot *s, char tmp[NAME_MAX + 1])
{
	int fd = -1;

	for (int i = 0; i < 100 && fd < 0; i++) {
		uint32_t rnd;

		if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
			rnd = (uint32_t)time(NULL) ^ (uint32_t)getpid() ^ (uint32_t)i * 2654435761u;
		snprintf(tmp, NAME_MAX + 1, "%.200s.tmp%06x", s->base, rnd & 0xffffff);
		fd = openat(s->dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			    0600);
		if (fd < 0 && errno != EEXIST)
			return -errno;
	}
	return fd < 0 ? -EEXIST : fd;
}

/* The new file @fd (@tmp) written (@r: 0) replaces @s's, with its mode;
 * else it is removed. Returns @r, or the error that finishing met. */
static int tmp_finish(const struct spot *s, int fd, const char *tmp, int r)
{
	mode_t mode = s->exists ? (s->st.st_mode & 0777) : 0644;

	if (r == 0 && (fchmod(fd, mode) < 0 || fsync(fd) < 0))
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	/* rename never follows a symlink at the destination: whatever was
	 * swapped in there since the check is replaced, not written. */
	if (r == 0 && renameat(s->dirfd, tmp, s->dirfd, s->base) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(s->dirfd, tmp, 0);
	return r;
}

static int write_atomic(const struct spot *s, const void *buf, size_t len)
{
	char tmp[NAME_MAX + 1];
	int fd = tmp_open(s, tmp);

	if (fd < 0)
		return fd;
	return tmp_finish(s, fd, tmp, write_all(fd, buf, len));
}

static int write_in_place(const struct spot *s, const void *buf, size_t len)
{
	struct stat st;
	int fd, r;

	/* A FIFO without a reader blocks here, as `cmd > fifo` would. */
	fd = openat(s->dirfd, s->base,
		    O_WRONLY | O_NOCTTY | O_CLOEXEC | (s->magic ? 0 : O_NOFOLLOW));
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
	} else if (s->magic ? S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode) :
			      st.st_dev != s->st.st_dev || st.st_ino != s->st.st_ino) {
		r = -EINVAL;
	} else {
		r = write_all(fd, buf, len);
	}
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

int mp_output_write(const char *path, const void *buf, size_t len)
{
	struct spot s;
	int r;

	r = resolve(path, &s);
	if (r < 0)
		return r;
	if (s.magic || (s.exists && (S_ISCHR(s.st.st_mode) || S_ISFIFO(s.st.st_mode))))
		r = write_in_place(&s, buf, len);
	else if (!s.exists || S_ISREG(s.st.st_mode))
		r = write_atomic(&s, buf, len);
	else
		r = S_ISDIR(s.st.st_mode) ? -EISDIR : -EINVAL;
	close(s.dirfd);
	return r;
}

int mp_output_open(const char *path, struct mp_output_file *ret)
{
	struct spot s;
	struct stat st;
	int fd, r;

	r = resolve(path, &s);
	if (r < 0)
		return r;
	if (s.magic || (s.exists && !S_ISREG(s.st.st_mode))) {
		r = s.exists && S_ISDIR(s.st.st_mode) ? -EISDIR : -EINVAL;
		goto fail;
	}
	if (!s.exists)
		fd = openat(s.dirfd, s.base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			    0644);
	else
		fd = openat(s.dirfd, s.base, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto fail;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (s.exists && (st.st_dev != s.st.st_dev || st.st_ino != s.st.st_ino))) {
		close(fd);
		r = -EINVAL;
		goto fail;
	}
	ret->fd = fd;
	ret->dirfd = s.dirfd;
	ret->created = !s.exists;
	snprintf(ret->base, sizeof(ret->base), "%s", s.base);
	return 0;
fail:
	close(s.dirfd);
	return r;
}

void mp_output_close(struct mp_output_file *f, bool keep)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->dirfd >= 0) {
		if (f->created && !keep)
			unlinkat(f->dirfd, f->base, 0);
		close(f->dirfd);
	}
	f->fd = f->dirfd = -1;
}

const char *mp_output_strerror(int r)
{
	switch (r) {
	case -ELOOP:
		return "a symlink not safe to follow (in a directory other users can write, "
		       "owned by neither you nor the directory's owner), or too many symlinks";
	case -EINVAL:
		return "not a regular file, character device or FIFO; refusing to replace it";
	default:
		return strerror(r < 0 ? -r : r);
	}
}

/* The buffer a profile is encoded into: the new file's own pages where
 * its blocks could be reserved (no copy through write(), which cost more
 * than the encoding for a 27 MB profile here), else the heap's. */
struct room {
	int fd; /* the new file, -1: none */
	uint8_t *map;
	size_t map_len;
};

static int room_get(void *ctx, size_t len, size_t slack, uint8_t **ret)
{
	struct room *o = ctx;
	size_t n = len + slack;

	*ret = NULL;
	/* reserved, so that a full disk is an error here and not a SIGBUS
	 * at a store into the mapping */
	if (o->fd >= 0 && n <= (size_t)INT64_MAX && fallocate(o->fd, 0, 0, (off_t)n) == 0) {
		void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, o->fd, 0);

		if (m != MAP_FAILED) {
			/* the page cache's pages at once, not a fault each */
			(void)madvise(m, n, MADV_POPULATE_WRITE);
			o->map = m;
			o->map_len = n;
			*ret = m;
			return 0;
		}
	} else if (o->fd >= 0 && (errno == ENOSPC || errno == EDQUOT || errno == EFBIG)) {
		return -errno;
	}
	*ret = malloc(n);
	return *ret ? 0 : -ENOMEM;
}

int mp_profile_save(const struct mp_profile *p, const char *path)
{
	struct room o = { .fd = -1 };
	char tmp[NAME_MAX + 1];
	struct spot s;
	uint8_t *buf;
	size_t len;
	int r;

	r = resolve(path, &s);
	if (r < 0)
		return r;
	if (s.exists && !s.magic && S_ISDIR(s.st.st_mode)) {
		r = -EISDIR;
		goto out;
	}
	if (!s.magic && (!s.exists || S_ISREG(s.st.st_mode))) {
		o.fd = tmp_open(&s, tmp);
		if (o.fd < 0) {
			r = o.fd;
			goto out;
		}
	} else if (!s.magic && !S_ISCHR(s.st.st_mode) && !S_ISFIFO(s.st.st_mode)) {
		r = -EINVAL;
		goto out;
	}
	r = mp_profile_encode_with(p, MP_PROFILE_FILE_HEADER, room_get, &o, &buf, &len);
	if (r == 0) {
		mp_profile_file_header(buf + MP_PROFILE_FILE_HEADER, len, buf);
		len += MP_PROFILE_FILE_HEADER;
	}
	if (o.map) {
		munmap(o.map, o.map_len);
		/* the slack past the message goes */
		if (r == 0 && ftruncate(o.fd, (off_t)len) < 0)
			r = -errno;
	} else {
		if (r == 0)
			r = o.fd >= 0 ? write_all(o.fd, buf, len) : write_in_place(&s, buf, len);
		/* blocks reserved for a mapping that failed: not the file's */
		if (r == 0 && o.fd >= 0 && ftruncate(o.fd, (off_t)len) < 0)
			r = -errno;
		free(buf);
	}
	if (o.fd >= 0)
		r = tmp_finish(&s, o.fd, tmp, r);
out:
	close(s.dirfd);
	return r;
}
