/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * index_life.h - the life of the index a mount serves: where it comes from
 * at mount, and the threads that replace it while mounted.
 *
 * At mount (index_life_load()): the file at the index path (-o index=, else
 * ~/.cache/bucketfs/) when it is valid for this bucket and prefix;
 * otherwise (missing, corrupt, truncated, another version or bucket) the
 * reason is logged and the bucket is listed into a new one (lister.h).  A
 * symlink, a directory or a file we may not read there is the user's: the
 * mount fails instead of replacing it.
 *
 * With -o index_url=s3://B/KEY the index comes from an index another host
 * published (bucketfs-index publish) instead of a listing: a HEAD tells
 * whether the local copy is that object (its ETag is remembered in
 * "<index>.source"); if not, it is downloaded beside the index path, fully
 * verified (every checksum; built for this bucket and prefix) and only then
 * renamed into place.  When it cannot be had (missing, unreachable,
 * corrupt, another bucket's), the cause is logged and the mount falls
 * back to a valid local index, else to listing, unless
 * index_url_fallback=fail.
 *
 * While mounted (struct reloader), three threads may switch the mount to
 * another index (fs_switch_index()); each logs what it serves and why:
 *   - bfs-sighup takes SIGHUP: it reopens the index file (after
 *     bucketfs-index build), or fetches index_url again;
 *   - bfs-verify checks every byte of the served index once, right after
 *     the mount, and rebuilds (or fetches again) a corrupt one;
 *   - bfs-refresh, with index_max_age, rebuilds the index when it gets
 *     that old (with index_url: fetches again every index_max_age).
 * On failure the current index stays.  Open files keep working across a
 * switch (fs.h).
 */
#ifndef BUCKETFS_FS_INDEX_LIFE_H
#define BUCKETFS_FS_INDEX_LIFE_H

#include <glib.h>
#include <pthread.h>

#include "fs.h"
#include "index.h"
#include "mount.h"
#include "s3.h"

/*
 * Blocks SIGHUP in the calling thread, and so in every thread started
 * after: only bfs-sighup takes it (sigwait()), so it is never lost nor
 * handled elsewhere (libfuse would end the session on it).  Main thread,
 * first thing.
 */
void index_life_block_signals(void);

/*
 * The index to serve at mount (see above), referenced; NULL with the
 * cause chain in @error.  @s3 (borrowed) lists the bucket if need be.
 * Shows progress on a terminal.  Main thread, before the mount.
 */
struct index *index_life_load(struct mount *m, struct s3 *s3, GError **error);

/* Logs, once, the keys the tree of @idx cannot show.  Any thread. */
void index_life_report_hidden(struct index *idx);

/*
 * The threads that change the served index.  They use the mount, the fs
 * and the S3 client, so reloader_stop() ends and joins them before those
 * go.  The caller fills m, fs and s3 and inits lock and cond (cleared
 * after reloader_stop()); the rest is the reloader's.
 */
struct reloader {
	struct mount *m;
	struct fs *fs;
	struct s3 *s3; /* borrowed from fs */
	GMutex lock;
	GCond cond;
	gboolean stopping; /* protected by lock */
	pthread_t hup;	   /* sigwait()s for SIGHUP */
	gboolean hup_started;
	GThread *verify, *refresh;
};

/* Starts the threads, once the mount is up and the fs has its S3 client.
 * Without a SIGHUP thread (logged), SIGHUP does nothing.  Main thread. */
void reloader_start(struct reloader *r);

/*
 * Ends the threads (after s3_shutdown(): their requests fail at once; a
 * running index check ends first) and joins them.  Main thread.
 */
void reloader_stop(struct reloader *r);

#endif
