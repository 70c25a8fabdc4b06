/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * open_path.h - how an indexed file's open is answered (ops.c's op_open).
 *
 * A small object (fetched whole, size <= whole_max) on a default mount
 * (direct_io=none) is answered only once its GET is done: its bytes are
 * stored in the kernel's page cache first (fuse_lowlevel_notify_store)
 * and the file is opened with keep_cache, so the kernel answers every
 * read(2) and mmap(MAP_SHARED) itself and no FUSE READ reaches the
 * daemon.  The reply is sent from the HTTP completion path, so no FUSE
 * worker waits on the network; a signal the opener catches (FUSE
 * INTERRUPT) answers the open with EINTR at once.  A failed GET fails the
 * open, logged once with its cause chain.
 *
 * The store is skipped (the file then reads through FUSE READs, served
 * from the object's buffer, which is here by then) when the node is of an
 * older index (its pages are dropped at open instead: an index switch
 * invalidates them), or when another file is open on the same object (a
 * read of it could hold a page lock under the store).
 *
 * Every other file is answered at once: large objects through the page
 * cache, and small ones with direct_io under direct_io=small or all.
 */
#ifndef BUCKETFS_FS_OPEN_PATH_H
#define BUCKETFS_FS_OPEN_PATH_H

#include <fuse_lowlevel.h>
#include <glib.h>

struct fs;
struct handle;

/*
 * Answers the open @req of node @ino (@size bytes, object @etag, which
 * may be NULL), whose handle @h (the file's readahead handle set) is in
 * @fi->fh; @h is freed if the open fails or is interrupted.  @fi and
 * @etag are copied.  While passthrough is on, every open that is not
 * direct_io is recorded (passthrough.h), and an open of a node open in
 * passthrough from another object fails ESTALE, with a log line.  FUSE
 * worker; never blocks.
 */
void open_answer(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
		 struct handle *h, const struct fuse_file_info *fi,
		 guint64 size, const char *etag);

/*
 * Logs a failed read of @key (an open that fetched it whole, or a read):
 * "read 'KEY': CHAIN", with a hint for the errnos that have one.
 */
void open_log_read_error(const char *key, const GError *error);

#endif
