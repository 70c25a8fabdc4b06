/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bdi.h - the kernel's readahead for a mount.
 *
 * The page cache reads ahead of a sequential reader at most the mount's
 * backing device's read_ahead_kb (/sys/class/bdi/MAJ:MIN/), and FUSE
 * starts every mount at 128 KiB: then a reader of a large file has one or
 * two 128 KiB reads in flight, whatever the object store could give.  Only
 * root may raise it; the kernel then keeps the smaller of it and INIT's
 * max_readahead, so both are set to the same value (ops.c).
 */
#ifndef BUCKETFS_BDI_H
#define BUCKETFS_BDI_H

#include <glib.h>

/*
 * The "MAJ:MIN" of the newest mount of type @fstype on @mountpoint (an
 * absolute, canonical path) in @mountinfo (the text of
 * /proc/self/mountinfo), or NULL with @error set.  Newly allocated.
 */
char *bdi_find_device(const char *mountinfo, const char *mountpoint,
		      const char *fstype, GError **error);

/*
 * Sets the read_ahead_kb of the mount of type @fstype on @mountpoint to
 * @bytes (rounded down to KiB).  Returns FALSE with @error holding the
 * cause (no such mount, not root, an old kernel) and changes nothing.
 */
gboolean bdi_set_readahead(const char *mountpoint, const char *fstype,
			   guint64 bytes, GError **error);

#endif
