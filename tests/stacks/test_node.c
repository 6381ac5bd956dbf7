// SPDX-License-Identifier: MIT
/*
 * `memprof run --stacks` on a real runtime: Debian's node (V8 maps its
 * builtins a second time from the executable, JIT code lives in anonymous
 * memory) runs a script allocating Buffers, typed arrays and strings for
 * about a second. memprof exits with node's status (0), writes the
 * profile, and its stacks have symbolized frames in node and in libc;
 * frames in anonymous memory are addresses without an object.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile_pb.h"

#ifndef NODE_PATH
#error NODE_PATH is the node executable
#endif

static const char script[] = "const keep = []; const end = Date.now() + 1000; let i = 0;"
			     "while (Date.now() < end) {"
			     "  keep.push(Buffer.alloc(4096 + (i % 7) * 1024));"
			     "  keep.push(new Uint8Array(8192 + (i % 5) * 512));"
			     "  keep.push(Buffer.from('x'.repeat(2000 + i % 100)));"
			     "  keep.push(JSON.stringify({ a: i, b: [1, 2, 3] }));"
			     "  if (keep.length > 2000) keep.length = 0;"
			     "  i++;"
			     "}";

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* Whether @addr has a function name in an object whose file name starts
 * with @prefix. */
static bool named_in(const struct mp_profile *p, uint64_t addr, const char *prefix)
{
	const struct mp_location *l = mp_profile_location(p, addr);

	return l && l->function && l->object < p->n_objects &&
	       !strncmp(base_name(p->objects[l->object].path), prefix, strlen(prefix));
}

Test(node, stacks_symbolized)
{
	char dir[128], out[256], buf[4096];
	char *argv[] = { mp_test_build_path("cli/memprof"),
			 "run",
			 "--stacks",
			 "--print",
			 "none",
			 "-o",
			 out,
			 "--",
			 NODE_PATH,
			 "-e",
			 (char *)script,
			 NULL };
	struct mp_profile *p = NULL;
	const char *why = NULL;
	uint32_t deep = 0, in_node = 0, in_libc = 0;

	mp_test_need_root("profiling node");
	mp_test_tmpdir(dir, sizeof(dir), "node");
	snprintf(out, sizeof(out), "%s/node.pb", dir);
	cr_assert_eq(mp_test_run_capture(argv, buf, sizeof(buf)), 0, "memprof run: %s", buf);
	cr_assert_eq(mp_profile_load(out, &p, &why), 0, "%s: %s", out, why ? why : "");
	cr_assert_gt(p->n_sites, 0);
	cr_assert_gt(p->n_stacks, 0);
	for (uint32_t i = 0; i < p->n_stacks; i++) {
		const struct mp_stack *s = &p->stacks[i];
		bool node = false, libc = false;

		deep += s->n_frames >= 3;
		for (uint32_t j = 0; j < s->n_frames; j++) {
			node |= named_in(p, s->frames[j], "node");
			libc |= named_in(p, s->frames[j], "libc.so");
		}
		in_node += node;
		in_libc += libc;
	}
	cr_expect_gt(deep, 0, "no stack of 3 frames or more");
	cr_expect_gt(in_node, 0, "no stack with a symbolized frame in node");
	cr_expect_gt(in_libc, 0, "no stack with a symbolized frame in libc");
	/* an address in no file is never given an object or a name */
	for (uint32_t i = 0; i < p->n_locations; i++)
		if (p->locations[i].object == MP_NONE)
			cr_expect_null(p->locations[i].function, "%#lx",
				       (unsigned long)p->locations[i].addr);
	mp_profile_free(p);
	mp_test_rmtree(dir);
}
