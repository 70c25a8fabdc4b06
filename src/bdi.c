/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bdi.c - the kernel's readahead for a mount: see bdi.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "bdi.h"
#include "error.h"

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static char *unescape(const char *s)
{
	GString *out = g_string_new(NULL);

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			g_string_append_c(out, (char)((s[1] - '0') << 6 |
						      (s[2] - '0') << 3 |
						      (s[3] - '0')));
			s += 4;
		} else {
			g_string_append_c(out, *s++);
		}
	}
	return g_string_free(out, FALSE);
}

char *bdi_find_device(const char *mountinfo, const char *mountpoint,
		      const char *fstype, GError **error)
{
	g_auto(GStrv) lines = g_strsplit(mountinfo, "\n", -1);
	char *found = NULL;
	guint i;

	/* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - TYPE ..." */
	for (i = 0; lines[i]; i++) {
		g_auto(GStrv) f = g_strsplit(lines[i], " ", -1);
		g_autofree char *where = NULL;
		guint n = g_strv_length(f), j;

		if (n < 7)
			continue;
		for (j = 6; j + 1 < n && strcmp(f[j], "-"); j++)
			;
		if (j + 1 >= n || strcmp(f[j + 1], fstype))
			continue;
		where = unescape(f[4]);
		if (strcmp(where, mountpoint))
			continue;
		/* Later lines are newer mounts: the last one is on top. */
		g_free(found);
		found = g_strdup(f[2]);
	}
	if (!found)
		g_set_error(error, BFS_ERROR, ENOENT,
			    "no %s mount on %s in /proc/self/mountinfo", fstype,
			    mountpoint);
	return found;
}

gboolean bdi_set_readahead(const char *mountpoint, const char *fstype,
			   guint64 bytes, GError **error)
{
	g_autofree char *info = NULL, *dev = NULL, *path = NULL, *kb = NULL;
	GError *e = NULL;
	int fd;

	if (!g_file_get_contents("/proc/self/mountinfo", &info, NULL, &e)) {
		g_propagate_error(error, e);
		return FALSE;
	}
	dev = bdi_find_device(info, mountpoint, fstype, error);
	if (!dev)
		return FALSE;
	path = g_strdup_printf("/sys/class/bdi/%s/read_ahead_kb", dev);
	kb = g_strdup_printf("%" G_GUINT64_FORMAT "\n", bytes >> 10);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, kb, strlen(kb)) != (ssize_t)strlen(kb)) {
		int err = fd < 0 || errno ? errno : EIO;

		g_set_error(error, BFS_ERROR, err, "cannot write %s to %s: %s",
			    g_strchomp(kb), path, g_strerror(err));
		if (fd >= 0)
			close(fd);
		return FALSE;
	}
	close(fd);
	return TRUE;
}
