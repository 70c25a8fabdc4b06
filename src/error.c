/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>

#include "error.h"

GQuark bfs_error_quark(void)
{
	/* Not G_DEFINE_QUARK: its plain static is a data race when two
	 * threads make their first errors at once. */
	static gint q;
	gint v = g_atomic_int_get(&q);

	if (G_UNLIKELY(!v)) {
		v = (gint)g_quark_from_static_string("bucketfs-error-quark");
		g_atomic_int_set(&q, v);
	}
	return (GQuark)v;
}

void bfs_error_init(void)
{
	g_error_free(g_error_new_literal(BFS_ERROR, EIO, "warm-up"));
}

int bfs_error_errno(const GError *error)
{
	if (error && error->domain == BFS_ERROR && error->code > 0)
		return error->code;
	return EIO;
}
