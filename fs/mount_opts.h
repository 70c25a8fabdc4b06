/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * mount_opts.h - the mount's own options (-o and the config file's mount
 * keys), from one table: each option's name, the field of struct mount
 * it sets, and its limits.  What the table does not know is FUSE's to
 * judge (struct mount's fuse_opts).  The main thread, before the mount.
 */
#ifndef BUCKETFS_FS_MOUNT_OPTS_H
#define BUCKETFS_FS_MOUNT_OPTS_H

#include <glib.h>

#include "mount.h"

/* -o sched_slice=: the least the kernel grants, and the most. */
#define SCHED_SLICE_MIN_US 100
#define SCHED_SLICE_MAX_US 100000

/*
 * Takes one option, "NAME" or "NAME=VALUE", that config passed through:
 * sets its field of @m, or keeps it for FUSE (mount(8)'s bookkeeping,
 * such as nofail, is dropped).  FALSE with @error saying which option,
 * which value and what it must be.
 */
gboolean mount_option_take(struct mount *m, const char *opt, GError **error);

#endif
