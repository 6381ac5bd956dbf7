/* SPDX-License-Identifier: MIT */
/*
 * mp_output_write / mp_output_open (daemon/output/outfile.h), the one
 * place every output file is written: regular files are replaced
 * atomically, device nodes and FIFOs are written in place and stay what
 * they were, other node types are refused, and a symlink planted by
 * another user in a directory others can write is never followed; a
 * profile is encoded into its file's own pages. The device nodes are made
 * here with mknod (never /dev/null or /dev/full themselves); another
 * user's symlink is made with lchown; a full file system is a small tmpfs
 * mounted here. Needs root.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "outfile.h"
#include "profile.h"
#include "profile_pb.h"

#define NOBODY 65534

static char dir[] = "/tmp/memprof-outfile-XXXXXX";

static void setup(void)
{
	cr_assert_not_null(mkdtemp(dir));
	chmod(dir, 0755);
}

static void teardown(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(outfile, .init = setup, .fini = teardown);

static void need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root for mknod and chown (running as uid %d)", (int)geteuid());
}

static const char *at(const char *name)
{
	static char buf[8][512];
	static int i;
	char *p = buf[i++ % 8];

	snprintf(p, 512, "%s/%s", dir, name);
	return p;
}

static char *slurp(const char *path)
{
	static char buf[4096];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert_geq(n, 0);
	buf[n] = '\0';
	return buf;
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

/* Nothing but @n entries in @d: no temporary file left behind. */
static void assert_entries(const char *d, int n)
{
	char cmd[600], out[32];
	FILE *f;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", d);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(out, sizeof(out), f));
	pclose(f);
	cr_assert_eq(atoi(out), n, "%s holds %s entries, not %d", d, out, n);
}

Test(outfile, new_file_is_created_0644)
{
	struct stat st;

	cr_assert_eq(mp_output_write(at("new"), "abc", 3), 0);
	cr_assert_str_eq(slurp(at("new")), "abc");
	cr_assert_eq(stat(at("new"), &st), 0);
	cr_assert(S_ISREG(st.st_mode));
	cr_assert_eq(st.st_mode & 07777, 0644);
	assert_entries(dir, 1);
}

Test(outfile, regular_file_is_replaced_atomically_keeping_its_mode)
{
	struct stat before, after;
	int fd;

	put(at("old"), "previous contents, longer");
	chmod(at("old"), 0600);
	cr_assert_eq(stat(at("old"), &before), 0);
	/* A reader holding the old file still sees the old contents. */
	fd = open(at("old"), O_RDONLY | O_CLOEXEC);
	cr_assert_eq(mp_output_write(at("old"), "new", 3), 0);
	cr_assert_eq(stat(at("old"), &after), 0);
	cr_assert_str_eq(slurp(at("old")), "new");
	cr_assert_neq(after.st_ino, before.st_ino, "not renamed into place");
	cr_assert_eq(after.st_mode & 07777, 0600);
	char buf[64] = { 0 };
	cr_assert_gt(read(fd, buf, sizeof(buf) - 1), 0);
	cr_assert_str_eq(buf, "previous contents, longer");
	close(fd);
	assert_entries(dir, 1);
}

Test(outfile, character_devices_are_written_in_place_not_replaced)
{
	struct stat st;

	need_root();
	/* The numbers of /dev/null and /dev/full, as new nodes here. */
	cr_assert_eq(mknod(at("null"), S_IFCHR | 0666, makedev(1, 3)), 0);
	cr_assert_eq(mknod(at("full"), S_IFCHR | 0666, makedev(1, 7)), 0);
	cr_assert_eq(mp_output_write(at("null"), "profile", 7), 0);
	cr_assert_eq(mp_output_write(at("full"), "profile", 7), -ENOSPC);
	cr_assert_eq(lstat(at("null"), &st), 0);
	cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
	cr_assert_eq(lstat(at("full"), &st), 0);
	cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 7));
	assert_entries(dir, 2);
	/* attach -o needs a file the service can write later: refused. */
	struct mp_output_file f;
	cr_assert_eq(mp_output_open(at("null"), &f), -EINVAL);
}

static void *read_fifo(void *arg)
{
	static char buf[64];
	int fd = open(arg, O_RDONLY | O_CLOEXEC);
	ssize_t n, total = 0;

	while (fd >= 0 && (n = read(fd, buf + total, sizeof(buf) - 1 - (size_t)total)) > 0)
		total += n;
	buf[total] = '\0';
	if (fd >= 0)
		close(fd);
	return buf;
}

Test(outfile, fifo_is_written_in_place)
{
	pthread_t th;
	struct stat st;
	void *got;

	cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
	cr_assert_eq(pthread_create(&th, NULL, read_fifo, (void *)at("fifo")), 0);
	cr_assert_eq(mp_output_write(at("fifo"), "through the fifo", 16), 0);
	cr_assert_eq(pthread_join(th, &got), 0);
	cr_assert_str_eq(got, "through the fifo");
	cr_assert_eq(lstat(at("fifo"), &st), 0);
	cr_assert(S_ISFIFO(st.st_mode));
	assert_entries(dir, 1);
}

Test(outfile, other_node_types_are_refused_untouched)
{
	struct stat st;

	need_root();
	cr_assert_eq(mknod(at("blk"), S_IFBLK | 0600, makedev(7, 200)), 0);
	cr_assert_eq(mp_output_write(at("blk"), "x", 1), -EINVAL);
	cr_assert_eq(lstat(at("blk"), &st), 0);
	cr_assert(S_ISBLK(st.st_mode));
	cr_assert_eq(mkdir(at("sub"), 0755), 0);
	cr_assert_eq(mp_output_write(at("sub"), "x", 1), -EISDIR);
	cr_assert_eq(mp_output_write(at("sub/"), "x", 1), -EISDIR);
	cr_assert_eq(mp_output_write(at("no/such/dir/f"), "x", 1), -ENOENT);
	assert_entries(dir, 2);
	cr_assert_str_eq(mp_output_strerror(-EINVAL),
			 "not a regular file, character device or FIFO; refusing to replace it");
}

/* A sticky world-writable directory like /tmp, and in it a symlink owned
 * by another user (nobody) pointing at a file of ours. */
static const char *plant(const char *victim_text)
{
	cr_assert_eq(mkdir(at("tmp"), 0777), 0);
	cr_assert_eq(chmod(at("tmp"), 01777), 0);
	put(at("victim"), victim_text);
	cr_assert_eq(symlink(at("victim"), at("tmp/out")), 0);
	cr_assert_eq(lchown(at("tmp/out"), NOBODY, NOBODY), 0);
	return at("tmp/out");
}

Test(outfile, symlink_planted_in_a_sticky_world_writable_dir_is_not_followed)
{
	struct mp_output_file f;
	struct stat st;

	need_root();
	plant("precious");
	cr_assert_eq(mp_output_write(at("tmp/out"), "evil", 4), -ELOOP);
	cr_assert_eq(mp_output_open(at("tmp/out"), &f), -ELOOP);
	cr_assert_str_eq(slurp(at("victim")), "precious");
	cr_assert_eq(lstat(at("tmp/out"), &st), 0);
	cr_assert(S_ISLNK(st.st_mode));
	assert_entries(at("tmp"), 1);
	/* Nor as a directory on the way. */
	cr_assert_eq(mkdir(at("real"), 0755), 0);
	cr_assert_eq(symlink(at("real"), at("tmp/d")), 0);
	cr_assert_eq(lchown(at("tmp/d"), NOBODY, NOBODY), 0);
	cr_assert_eq(mp_output_write(at("tmp/d/p"), "evil", 4), -ELOOP);
	assert_entries(at("real"), 0);
	/* Any directory others can write counts, sticky or not. */
	cr_assert_eq(chmod(at("tmp"), 0777), 0);
	cr_assert_eq(mp_output_write(at("tmp/out"), "evil", 4), -ELOOP);
	cr_assert_eq(chmod(at("tmp"), 0775), 0);
	cr_assert_eq(mp_output_write(at("tmp/out"), "evil", 4), -ELOOP);
	cr_assert_str_eq(slurp(at("victim")), "precious");
}

Test(outfile, symlink_of_the_writer_or_in_a_private_dir_is_followed)
{
	struct mp_output_file f;
	struct stat st, vst;

	need_root();
	plant("precious");
	/* The writer's own link in the shared dir: followed; the target is
	 * replaced atomically and the link stays a link. */
	cr_assert_eq(lchown(at("tmp/out"), 0, 0), 0);
	cr_assert_eq(mp_output_write(at("tmp/out"), "mine", 4), 0);
	cr_assert_str_eq(slurp(at("victim")), "mine");
	cr_assert_eq(lstat(at("tmp/out"), &st), 0);
	cr_assert(S_ISLNK(st.st_mode));
	/* Another user's link in a directory only its owner (root) can
	 * write: the owner let it be there. Relative target, through a
	 * symlinked directory too. */
	cr_assert_eq(mkdir(at("priv"), 0755), 0);
	cr_assert_eq(symlink("../victim", at("priv/out")), 0);
	cr_assert_eq(lchown(at("priv/out"), NOBODY, NOBODY), 0);
	cr_assert_eq(symlink("priv", at("privlink")), 0);
	cr_assert_eq(mp_output_write(at("privlink/out"), "again", 5), 0);
	cr_assert_str_eq(slurp(at("victim")), "again");
	cr_assert_eq(lstat(at("priv/out"), &st), 0);
	cr_assert(S_ISLNK(st.st_mode));
	/* The link's owner owns the directory: followed. */
	cr_assert_eq(chown(at("tmp"), NOBODY, NOBODY), 0);
	cr_assert_eq(lchown(at("tmp/out"), NOBODY, NOBODY), 0);
	cr_assert_eq(mp_output_open(at("tmp/out"), &f), 0);
	cr_assert_eq(fstat(f.fd, &st), 0);
	cr_assert_eq(stat(at("victim"), &vst), 0);
	cr_assert_eq(st.st_ino, vst.st_ino);
	cr_assert_eq(f.created, false);
	mp_output_close(&f, false);
	cr_assert_str_eq(slurp(at("victim")), "again");
	/* A dangling link a trusted user made leads to a new file. */
	cr_assert_eq(symlink(at("nowhere"), at("priv/dangling")), 0);
	cr_assert_eq(mp_output_write(at("priv/dangling"), "x", 1), 0);
	cr_assert_str_eq(slurp(at("nowhere")), "x");
}

Test(outfile, open_creates_and_removes_on_failure)
{
	struct mp_output_file f;
	struct stat st;

	cr_assert_eq(mp_output_open(at("a"), &f), 0);
	cr_assert(f.created);
	cr_assert_eq(fstat(f.fd, &st), 0);
	cr_assert(S_ISREG(st.st_mode));
	mp_output_close(&f, false);
	cr_assert_eq(access(at("a"), F_OK), -1);
	cr_assert_eq(mp_output_open(at("a"), &f), 0);
	mp_output_close(&f, true);
	cr_assert_eq(access(at("a"), F_OK), 0);
	put(at("a"), "kept");
	cr_assert_eq(mp_output_open(at("a"), &f), 0);
	cr_assert(!f.created);
	mp_output_close(&f, false);
	cr_assert_str_eq(slurp(at("a")), "kept");
}

Test(outfile, proc_magic_link_to_a_pipe_is_written)
{
	int p[2];
	char path[64], buf[16] = { 0 };

	cr_assert_eq(pipe(p), 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", p[1]);
	cr_assert_eq(mp_output_write(path, "piped", 5), 0);
	close(p[1]);
	cr_assert_eq(read(p[0], buf, sizeof(buf) - 1), 5);
	cr_assert_str_eq(buf, "piped");
	close(p[0]);
}

/* A profile of @n sites, each with figures of its own: some hundreds of
 * KB encoded, more than the encoder's slack past the end. */
static struct mp_profile *profile_of(uint32_t n)
{
	struct mp_profile *p = mp_profile_new();

	cr_assert_not_null(p);
	p->sites = calloc(n, sizeof(*p->sites));
	cr_assert_not_null(p->sites);
	p->n_sites = n;
	p->owners = calloc(1, sizeof(*p->owners));
	cr_assert_not_null(p->owners);
	p->owners[0].name = strdup("(unknown)");
	p->n_owners = 1;
	for (uint32_t i = 0; i < n; i++) {
		struct mp_site *st = &p->sites[i];

		st->caller = 0x400000 + 16 * (uint64_t)i;
		st->name = MP_NONE;
		st->phase = MP_NONE;
		st->owner = MP_OWNER_UNKNOWN;
		st->alloc_objects = st->peak_objects = 1 + i % 7;
		st->alloc_space = st->peak_space = 4096 + (uint64_t)i * 24;
	}
	return p;
}

/* The whole of @path, *@len bytes (malloc'd). */
static uint8_t *slurp_all(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *b;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	b = malloc((size_t)st.st_size + 1);
	cr_assert_not_null(b);
	cr_assert_eq(read(fd, b, (size_t)st.st_size), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return b;
}

struct fifo_read {
	const char *path;
	uint8_t *buf;
	size_t len, cap;
};

static void *read_fifo_all(void *arg)
{
	struct fifo_read *f = arg;
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	while (fd >= 0 && f->len < f->cap && (n = read(fd, f->buf + f->len, f->cap - f->len)) > 0)
		f->len += (size_t)n;
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* mp_profile_save() lays the profile out in the new file's own pages:
 * the file holds exactly what mp_profile_file_encode() gives (no slack
 * left past the message), decodes, keeps the mode of the file it
 * replaces, and leaves no temporary file; a FIFO gets the same bytes. */
Test(outfile, profile_saved_in_place_is_the_encoding)
{
	struct mp_profile *p = profile_of(20000), *back = NULL;
	struct fifo_read fr = { 0 };
	char fifo[512];
	uint8_t *want, *got;
	size_t want_len, got_len;
	struct stat st;
	pthread_t th;

	cr_assert_eq(mp_profile_file_encode(p, &want, &want_len), 0);
	cr_assert_gt(want_len, 256 << 10);
	cr_assert_eq(mp_profile_save(p, at("new.pb")), 0);
	got = slurp_all(at("new.pb"), &got_len);
	cr_assert_eq(got_len, want_len);
	cr_assert(!memcmp(got, want, want_len), "the file differs from the encoding");
	{
		const char *why = NULL;

		cr_assert_eq(mp_profile_file_decode(got, got_len, &back, &why), 0, "%s", why);
	}
	cr_assert_eq(back->n_sites, 20000);
	mp_profile_free(back);
	free(got);
	cr_assert_eq(stat(at("new.pb"), &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0644);
	/* replacing a longer file of another mode */
	put(at("old.pb"), "x");
	cr_assert_eq(truncate(at("old.pb"), (off_t)want_len * 2), 0);
	chmod(at("old.pb"), 0640);
	cr_assert_eq(mp_profile_save(p, at("old.pb")), 0);
	got = slurp_all(at("old.pb"), &got_len);
	cr_assert_eq(got_len, want_len);
	cr_assert(!memcmp(got, want, want_len));
	free(got);
	cr_assert_eq(stat(at("old.pb"), &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0640);
	assert_entries(dir, 2);
	/* a FIFO: written in place, from the heap */
	snprintf(fifo, sizeof(fifo), "%s", at("fifo"));
	fr.path = fifo;
	fr.cap = want_len + 1;
	fr.buf = malloc(fr.cap);
	cr_assert_not_null(fr.buf);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(pthread_create(&th, NULL, read_fifo_all, &fr), 0);
	cr_assert_eq(mp_profile_save(p, fifo), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(fr.len, want_len);
	cr_assert(!memcmp(fr.buf, want, want_len));
	cr_assert_eq(lstat(fifo, &st), 0);
	cr_assert(S_ISFIFO(st.st_mode));
	cr_assert_eq(mp_profile_save(p, dir), -EISDIR);
	assert_entries(dir, 3);
	free(fr.buf);
	free(want);
	mp_profile_free(p);
}

/* A file system without room for the profile: an error (its blocks are
 * reserved before the encoder writes into the file's pages, where a full
 * disk would be a SIGBUS), the file replaced stays as it was, and no
 * temporary file is left. A 64 KiB tmpfs, mounted here. */
Test(outfile, profile_save_on_a_full_file_system_fails_cleanly)
{
	struct mp_profile *p = profile_of(20000);
	char mnt[512];

	need_root();
	snprintf(mnt, sizeof(mnt), "%s", at("small"));
	cr_assert_eq(mkdir(mnt, 0755), 0);
	/* in a mount namespace of this test's own, which a crash takes
	 * away with the mount */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("memprof-test", mnt, "tmpfs", 0, "size=64k") < 0)
		cr_skip_test("cannot mount a tmpfs here: %s", strerror(errno));
	put(at("small/kept.pb"), "old");
	cr_assert_eq(mp_profile_save(p, at("small/kept.pb")), -ENOSPC);
	cr_assert_str_eq(slurp(at("small/kept.pb")), "old");
	cr_assert_eq(mp_profile_save(p, at("small/new.pb")), -ENOSPC);
	cr_assert_eq(access(at("small/new.pb"), F_OK), -1);
	assert_entries(mnt, 1);
	cr_assert_eq(umount(mnt), 0);
	mp_profile_free(p);
}

/* A file system without fallocate (ramfs, mounted here): the profile is
 * encoded in memory and written, the same bytes. */
Test(outfile, profile_save_without_fallocate_writes_from_memory)
{
	struct mp_profile *p = profile_of(20000);
	uint8_t *want, *got;
	size_t want_len, got_len;
	char mnt[512], file[600];

	need_root();
	snprintf(mnt, sizeof(mnt), "%s", at("ram"));
	snprintf(file, sizeof(file), "%s/p.pb", mnt);
	cr_assert_eq(mkdir(mnt, 0755), 0);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("memprof-test", mnt, "ramfs", 0, NULL) < 0)
		cr_skip_test("cannot mount a ramfs here: %s", strerror(errno));
	{
		/* the premise: ramfs has no fallocate */
		int fd = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

		cr_assert_geq(fd, 0);
		cr_assert_eq(fallocate(fd, 0, 0, 4096), -1);
		cr_assert_eq(errno, EOPNOTSUPP);
		close(fd);
		cr_assert_eq(unlink(file), 0);
	}
	cr_assert_eq(mp_profile_file_encode(p, &want, &want_len), 0);
	cr_assert_eq(mp_profile_save(p, file), 0);
	got = slurp_all(file, &got_len);
	cr_assert_eq(got_len, want_len);
	cr_assert(!memcmp(got, want, want_len));
	assert_entries(mnt, 1);
	cr_assert_eq(umount(mnt), 0);
	free(got);
	free(want);
	mp_profile_free(p);
}
