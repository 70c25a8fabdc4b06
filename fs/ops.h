/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ops.h - the FUSE low-level operations of bucketfs: the op table.
 *
 * Thin: each op decodes its request, asks src/ (the index for metadata, s3
 * for bytes) and replies.  Metadata never sends a request.  A read is a
 * GET with If-Match set to the index's ETag; its reply is sent from the
 * HTTP completion path, so no FUSE worker waits on the network.  Failures
 * are logged once, with the whole cause chain, and replied as errno.
 *
 * The layers of fs/ below main.c and index_life.c, from the top; each
 * calls only those below it (and src/):
 *   ops.c          the op table and its dispatch, the indexed tree's
 *                  metadata and the read path, with open_path.c (how an
 *                  indexed file's open is answered);
 *   overlay_ops.c  names the index lacks (overlay_ops.h), and
 *   emptydir_ops.c the directories of -o empty_dirs= (emptydir_ops.h):
 *                  the namespaces beside the index, side by side;
 *   attr.c         what every namespace fills its replies with:
 *                  attributes and readdir buffers (attr.h);
 *   fs.c           struct fs: its life, generations, node ids and open
 *                  handles (fs.h, fs_internal.h);
 *   stats.c        the counters as JSON and as the unmount summary
 *                  (stats.h), and
 *   overlay.c      the overlay's names and buffers (overlay.h): leaves
 *                  that know no struct fs.
 */
#ifndef BUCKETFS_FS_OPS_H
#define BUCKETFS_FS_OPS_H

#include <fuse_lowlevel.h>

#include "fs.h"

/* The op table; the session's userdata must be the struct fs. */
extern const struct fuse_lowlevel_ops fs_ops;

#endif
