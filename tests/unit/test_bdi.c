/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_bdi - finding a mount's backing device in /proc/self/mountinfo:
 * the newest mount on the path wins, the type must match, escaped paths,
 * optional fields, and lines too short to be mounts.
 */
#include <errno.h>
#include <string.h>

#include "bdi.h"
#include "error.h"

static const char info[] =
	"22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw\n"
	"40 22 0:39 / /mnt/data rw,nosuid,nodev,relatime shared:20 - "
	"fuse.bucketfs s3://a/ rw,user_id=0,group_id=0\n"
	"41 40 0:40 / /mnt/data rw,nosuid,nodev,relatime - fuse.bucketfs "
	"s3://b/ rw,user_id=0,group_id=0\n"
	"42 22 0:41 / /mnt/my\\040data\\134x rw,relatime - fuse.bucketfs "
	"s3://c/ rw\n"
	"43 22 0:42 / /mnt/other rw,relatime shared:1 master:2 - fuse.sshfs "
	"h:/ rw\n"
	"garbage line\n"
	"44 22 0:43 / /mnt/short rw -\n";

static void test_newest_wins(void)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *dev =
		bdi_find_device(info, "/mnt/data", "fuse.bucketfs", &error);

	g_assert_no_error(error);
	g_assert_cmpstr(dev, ==, "0:40");
}

static void test_escaped_path(void)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *dev = bdi_find_device(info, "/mnt/my data\\x",
					       "fuse.bucketfs", &error);

	g_assert_no_error(error);
	g_assert_cmpstr(dev, ==, "0:41");
}

static void test_not_found(void)
{
	static const char *const cases[][2] = {
		{ "/mnt/other", "fuse.bucketfs" }, /* another type */
		{ "/mnt/dat", "fuse.bucketfs" },   /* a prefix of a path */
		{ "/mnt/short", "fuse.bucketfs" }, /* no type after "-" */
		{ "/mnt/none", "fuse.bucketfs" },
	};
	guint i;

	for (i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_autoptr(GError) error = NULL;
		char *dev =
			bdi_find_device(info, cases[i][0], cases[i][1], &error);

		g_assert_null(dev);
		g_assert_error(error, BFS_ERROR, ENOENT);
		g_assert_nonnull(strstr(error->message, cases[i][0]));
	}
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/bdi/newest-wins", test_newest_wins);
	g_test_add_func("/bdi/escaped-path", test_escaped_path);
	g_test_add_func("/bdi/not-found", test_not_found);
	return g_test_run();
}
