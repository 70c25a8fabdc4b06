/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>

#include "error.h"

/* clang-format off */
G_DEFINE_QUARK(bucketfs-error-quark, bfs_error)
/* clang-format on */

int bfs_error_errno(const GError *error)
{
	if (error && error->domain == BFS_ERROR && error->code > 0)
		return error->code;
	return EIO;
}
