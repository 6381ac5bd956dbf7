/* SPDX-License-Identifier: MIT */
/*
 * Every output file memprof and memprofd write (-o of run, memprofd --pid,
 * convert, attach, dump; collect's chunks) goes through here, because the
 * writer is often root and the path often points into /tmp
 * (docs/OUTPUT.md, "Where -o writes"):
 *
 * - a path that does not exist, or a regular file, is written atomically:
 *   a temporary file in the same directory, fsync'd, renamed over the path
 *   (an existing file keeps its permission bits, a new one gets 0644);
 * - a character device (/dev/null, a terminal) or a FIFO is written in
 *   place: renaming over it would replace the node with a regular file;
 * - anything else (directory, block device, socket) is refused;
 * - a symlink, in the last component or on the way, is followed only when
 *   its owner is the writer or the owner of the directory holding it, or
 *   when nobody but that directory's owner can write the directory (the
 *   rule of the kernel's fs.protected_symlinks, applied to every writable
 *   directory, not only sticky world-writable ones, and whether or not the
 *   sysctl is on). Otherwise -ELOOP.
 *
 * The walk opens each directory with openat(O_PATH | O_NOFOLLOW) from its
 * parent and decides on what it opened, so a symlink swapped in between a
 * check and the use is never followed.
 */
#ifndef MP_OUTFILE_H
#define MP_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>

/* Writes @len bytes to @path as above. Negative errno: -ELOOP (a symlink
 * not safe to follow), -EINVAL (not a regular file, character device or
 * FIFO), or what the system calls said. */
int mp_output_write(const char *path, const void *buf, size_t len);

/* A regular file opened for a later in-place write (memprof attach passes
 * it to the service, which writes the profile when the session ends): the
 * same walk and symlink rule; only a new or regular file is accepted
 * (-EINVAL otherwise). The file is neither truncated nor written. */
struct mp_output_file {
	int fd;
	int dirfd;
	bool created;
	char base[256];
};
int mp_output_open(const char *path, struct mp_output_file *ret);
/* Closes @f; removes the file if mp_output_open() created it and @keep is
 * false. */
void mp_output_close(struct mp_output_file *f, bool keep);

/* A message for what the functions above return (strerror otherwise). */
const char *mp_output_strerror(int r);

struct mp_profile;
/* Writes @p to @path as a memprof profile file (profile_pb.h), with
 * mp_output_write(). */
int mp_profile_save(const struct mp_profile *p, const char *path);

#endif /* MP_OUTFILE_H */
