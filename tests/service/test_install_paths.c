// SPDX-License-Identifier: MIT
/*
 * The installed files name the paths the installation really has: the
 * configuration file meson installs is the one memprofd reads by default
 * (MP_CONFIG_DEFAULT_PATH) and the one the unit passes, tmpfiles.d creates
 * its directory, and the unit starts the installed binary. A /usr/local
 * install (meson's default prefix) used to get a tmpfiles.d entry for
 * /etc/memprofd while reading /usr/local/etc/memprofd. Where meson installs
 * each file is read from its own plan (meson-info/intro-installed.json).
 */
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

static json_object *installed;

static void load_plan(void)
{
	const char *b = getenv("MEMPROF_BUILD_ROOT");
	char path[PATH_MAX];

	cr_assert_not_null(b, "MEMPROF_BUILD_ROOT is not set (run through meson test)");
	snprintf(path, sizeof(path), "%s/meson-info/intro-installed.json", b);
	installed = json_object_from_file(path);
	cr_assert_not_null(installed, "%s: %s", path, json_util_get_last_err());
}

static void free_plan(void)
{
	json_object_put(installed);
}

/* Where meson installs the file whose build or source path ends in
 * @suffix (exactly one such file). */
static const char *dest_of(const char *suffix)
{
	const char *found = NULL;

	json_object_object_foreach(installed, from, to)
	{
		size_t n = strlen(from), m = strlen(suffix);

		if (n >= m && !strcmp(from + n - m, suffix)) {
			cr_assert_null(found, "two installed files end in %s", suffix);
			found = json_object_get_string(to);
		}
	}
	cr_assert_not_null(found, "meson installs no file ending in %s", suffix);
	return found;
}

/* The first line of the built file @rel starting with @prefix, without
 * @prefix and the newline. */
static void line_of(const char *rel, const char *prefix, char *ret, size_t cap)
{
	char path[PATH_MAX], line[1024];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", getenv("MEMPROF_BUILD_ROOT"), rel);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	while (!found && fgets(line, sizeof(line), f))
		if (!strncmp(line, prefix, strlen(prefix))) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(ret, cap, "%s", line + strlen(prefix));
			found = true;
		}
	fclose(f);
	cr_assert(found, "no line '%s...' in %s", prefix, path);
}

Test(install_paths, the_configuration_file_is_where_memprofd_reads_it, .init = load_plan,
     .fini = free_plan)
{
	cr_assert_str_eq(dest_of("/systemd/memprofd.conf"), MP_CONFIG_DEFAULT_PATH);
}

Test(install_paths, the_unit_starts_the_installed_daemon_with_that_file, .init = load_plan,
     .fini = free_plan)
{
	char exec[1024], want[2048], doc[1024];

	line_of("systemd/memprofd.service", "ExecStart=", exec, sizeof(exec));
	snprintf(want, sizeof(want), "%s --control /run/memprofd/control --config %s",
		 dest_of("/cli/memprofd"), MP_CONFIG_DEFAULT_PATH);
	cr_assert_str_eq(exec, want);
	line_of("systemd/memprofd.service", "Documentation=file://", doc, sizeof(doc));
	cr_assert_str_eq(doc, dest_of("/docs/SERVICE.md"));
}

Test(install_paths, tmpfiles_creates_the_configuration_directory, .init = load_plan,
     .fini = free_plan)
{
	char dir[PATH_MAX], line[1024], want[PATH_MAX + 64];

	snprintf(dir, sizeof(dir), "%s", MP_CONFIG_DEFAULT_PATH);
	line_of("systemd/memprofd.tmpfiles", "d ", line, sizeof(line));
	snprintf(want, sizeof(want), "%s 0755 root root -", dirname(dir));
	cr_assert_str_eq(line, want);
	/* ... and is installed where systemd-tmpfiles looks, under the prefix. */
	cr_assert_not_null(
		strstr(dest_of("/systemd/memprofd.tmpfiles"), "/lib/tmpfiles.d/memprofd.conf"));
}
