/* SPDX-License-Identifier: MIT */
/*
 * Where `-o` writes, through the real front ends (issue 13, item 3): as
 * root, `memprof run -o NODE -- true` once turned a character device into
 * a regular file. The nodes are made here (mknod in a temp dir), never
 * /dev/null or /dev/full themselves. Needs root (BPF, mknod, chown).
 */
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "../output/run_helpers.h"

static char dir[] = "/tmp/memprof-output-real-XXXXXX";

static void setup(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root for BPF and mknod (running as uid %d)", (int)geteuid());
	cr_assert_not_null(mkdtemp(dir));
	chmod(dir, 0755);
}

static void teardown(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(output, .init = setup, .fini = teardown);

static const char *at(const char *name)
{
	static char buf[8][256];
	static int i;
	char *p = buf[i++ % 8];

	snprintf(p, 256, "%s/%s", dir, name);
	return p;
}

static struct run run_true(const char *out)
{
	return run_cmd((char *[]){ (char *)memprof_bin(), "run", "--mode", "rss", "--print", "none",
				   "-o", (char *)out, "--", "/bin/true", NULL },
		       NULL);
}

Test(output, run_writes_into_character_devices_and_keeps_them)
{
	char want[512];
	struct stat st;
	struct run r;

	cr_assert_eq(mknod(at("null"), S_IFCHR | 0666, makedev(1, 3)), 0);
	cr_assert_eq(mknod(at("full"), S_IFCHR | 0666, makedev(1, 7)), 0);
	r = run_true(at("null"));
	cr_expect_eq(r.status, 0, "%s", r.err);
	run_free(&r);
	r = run_true(at("full"));
	snprintf(want, sizeof(want), "memprof run: writing %s: No space left on device\n",
		 at("full"));
	cr_expect_neq(r.status, 0);
	cr_expect_not_null(strstr(r.err, want), "%s", r.err);
	run_free(&r);
	cr_assert_eq(lstat(at("null"), &st), 0);
	cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
	cr_assert_eq(lstat(at("full"), &st), 0);
	cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 7));
}

Test(output, run_and_convert_refuse_another_users_symlink_in_a_shared_dir)
{
	char want[512];
	struct stat st;
	struct run r;
	FILE *f;

	cr_assert_eq(mkdir(at("tmp"), 01777), 0);
	cr_assert_eq(chmod(at("tmp"), 01777), 0);
	f = fopen(at("victim"), "w");
	cr_assert_not_null(f);
	fputs("precious", f);
	fclose(f);
	cr_assert_eq(symlink(at("victim"), at("tmp/p.memprof")), 0);
	cr_assert_eq(lchown(at("tmp/p.memprof"), 65534, 65534), 0);
	r = run_true(at("tmp/p.memprof"));
	snprintf(want, sizeof(want), "memprof run: writing %s: a symlink not safe to follow",
		 at("tmp/p.memprof"));
	cr_expect_neq(r.status, 0);
	cr_expect_not_null(strstr(r.err, want), "%s", r.err);
	run_free(&r);

	/* A real profile to convert. */
	r = run_true(at("p.memprof"));
	cr_assert_eq(r.status, 0, "%s", r.err);
	run_free(&r);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", (char *)at("p.memprof"), "--to",
				"json", "-o", (char *)at("tmp/p.memprof"), NULL },
		    NULL);
	snprintf(want, sizeof(want), "memprof convert: cannot create %s: a symlink not safe",
		 at("tmp/p.memprof"));
	cr_expect_eq(r.status, 1);
	cr_expect_not_null(strstr(r.err, want), "%s", r.err);
	run_free(&r);
	char *victim = read_whole(at("victim"));

	cr_assert_str_eq(victim, "precious");
	free(victim);
	cr_assert_eq(lstat(at("tmp/p.memprof"), &st), 0);
	cr_assert(S_ISLNK(st.st_mode));
	/* A FIFO is written in place. */
	cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
	pid_t pid = fork();
	if (pid == 0) {
		char cmd[512];

		snprintf(cmd, sizeof(cmd), "cat '%s' > '%s'", at("fifo"), at("from-fifo"));
		_exit(system(cmd) == 0 ? 0 : 1);
	}
	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", (char *)at("p.memprof"), "--to",
				"json", "-o", (char *)at("fifo"), NULL },
		    NULL);
	cr_expect_eq(r.status, 0, "%s", r.err);
	run_free(&r);
	int ws;
	cr_assert_eq(waitpid(pid, &ws, 0), pid);
	cr_assert_eq(lstat(at("fifo"), &st), 0);
	cr_assert(S_ISFIFO(st.st_mode));
	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", (char *)at("p.memprof"), "--to",
				"json", NULL },
		    NULL);
	char *from_fifo = read_whole(at("from-fifo"));

	cr_assert_str_eq(from_fifo, r.out);
	free(from_fifo);
	run_free(&r);
}
