/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The index format's shared pieces: the section names, the header
 * checksum, inode numbers from keys, the default path of a bucket's index,
 * and the errors the reader and the writer report.
 */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "error.h"
#include "index_internal.h"
#include "log.h"

const char *const section_names[SEC_COUNT] = {
	[SEC_ENTRIES] = "entries",     [SEC_DIR_FIRST] = "dir_first",
	[SEC_DIR_ENTRY] = "dir_entry", [SEC_NAMES] = "names",
	[SEC_ETAGS] = "etags",
};

guint64 header_checksum(const guint8 *h, gsize hlen)
{
	XXH64_state_t s;
	static const guint8 zero[8];

	XXH64_reset(&s, 0);
	XXH64_update(&s, h, H_CHECKSUM);
	XXH64_update(&s, zero, sizeof(zero));
	XXH64_update(&s, h + H_CHECKSUM + 8, hlen - H_CHECKSUM - 8);
	return XXH64_digest(&s);
}

guint64 index_key_ino(const char *key, gssize len)
{
	guint64 h;

	g_return_val_if_fail(key != NULL || len == 0, 0);
	h = XXH64(key, len < 0 ? strlen(key) : (gsize)len, 0);
	/* 0 is no inode and 1 is the root. */
	return h < 2 ? h + 2 : h;
}

gboolean set_errno_error(GError **error, int err, const char *path,
			 const char *what)
{
	g_autofree char *p = log_escape(path, -1);

	g_set_error(error, BFS_ERROR, err, "index %s: %s: %s", p, what,
		    g_strerror(err));
	return FALSE;
}

char *index_default_path(const char *bucket, const char *prefix)
{
	g_autofree char *safe = NULL;
	g_autofree char *file = NULL;
	XXH64_state_t s;

	g_return_val_if_fail(bucket != NULL, NULL);
	if (!prefix)
		prefix = "";
	safe = g_strdup(*bucket ? bucket : "_");
	for (char *p = safe; *p; p++) {
		if (!g_ascii_isalnum(*p) && *p != '-' && *p != '_')
			*p = '_';
	}
	XXH64_reset(&s, 0);
	XXH64_update(&s, bucket, strlen(bucket) + 1);
	XXH64_update(&s, prefix, strlen(prefix));
	file = g_strdup_printf("%016" G_GINT64_MODIFIER "x.idx",
			       (guint64)XXH64_digest(&s));
	return g_build_filename(g_get_user_cache_dir(), "bucketfs", safe, file,
				NULL);
}

gboolean corrupt(GError **error, const char *fmt, ...)
{
	va_list ap;
	g_autofree char *msg = NULL;

	va_start(ap, fmt);
	msg = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	g_set_error_literal(error, BFS_ERROR, EBADMSG, msg);
	return FALSE;
}
