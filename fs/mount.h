/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * mount.h - what one bucketfs mount was asked for: the options of its
 * command line and config file, parsed by mount_opts.c (mount_option_take())
 * and read by the index's life (index_life.h).  Plain data, filled on the main
 * thread before anything starts; read-only afterwards, except fetch_lock.
 */
#ifndef BUCKETFS_FS_MOUNT_H
#define BUCKETFS_FS_MOUNT_H

#include <glib.h>

#include "config.h"
#include "fs.h"

struct mount {
	struct config cfg;
	struct fs_options fs;
	char *mountpoint;
	char *index_path;
	gboolean foreground;
	gboolean debug;
	guint list_workers;
	double index_max_age; /* seconds, 0 = never rebuild in the background */
	GPtrArray *fuse_opts; /* of char *: options FUSE itself takes */
	char *index_url;      /* -o index_url=, or NULL */
	char *pub_bucket;     /* index_url split */
	char *pub_key;
	gboolean fallback_fail; /* index_url_fallback=fail */
	GMutex fetch_lock;	/* one fetch of index_url at a time */
	guint sched_slice_us;	/* -o sched_slice=, 0 = the kernel's */
};

#endif
