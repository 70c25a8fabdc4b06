/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fs.h - struct fs: one mounted filesystem's state, for main.c, the
 * index's life (index_life.h) and the FUSE ops (ops.h).
 *
 * Node ids: 1 is the root of the current index; any other node id is
 * (generation << 40) | index_id, where the generation names the index it
 * came from.  An index stays mapped while the kernel holds a lookup on one
 * of its nodes, so open files and cached names keep working after a
 * SIGHUP switched the mount to a newer index.
 *
 * Lock order: fs->lock is a leaf; it is never held across a request or a
 * FUSE reply.
 *
 * Implemented by fs.c; fs_internal.h is what the files of fs/ that serve
 * the ops share of it.
 */
#ifndef BUCKETFS_FS_FS_H
#define BUCKETFS_FS_FS_H

#include <fuse_lowlevel.h>
#include <glib.h>

#include "emptydirs.h"
#include "index.h"
#include "readahead.h"
#include "s3.h"

struct fs;

/* Which open files bypass the kernel's page cache (FOPEN_DIRECT_IO);
 * mmap(MAP_SHARED) of them needs FUSE_DIRECT_IO_ALLOW_MMAP (fuse_init.h).
 * The order is -o direct_io='s list of names (main.c). */
enum fs_direct_io {
	FS_DIRECT_IO_AUTO,  /* auto (the default): objects fetched whole where
			     * the kernel maps direct_io files and no
			     * passthrough is asked for, else as none */
	FS_DIRECT_IO_NONE,  /* every file through the page cache, small ones
			     * stored there at open */
	FS_DIRECT_IO_SMALL, /* objects fetched whole (size <= whole_max) */
	FS_DIRECT_IO_ALL,   /* every file */
};

/*
 * Background requests (RELEASE, the kernel's async readahead) the kernel
 * may have at the daemon at once (FUSE INIT's max_background).  The
 * kernel's default of 12 lets RELEASEs fall behind the opens of a few
 * thousand readers (fs/ops.c, op_init()).  The field is 16 bits.
 */
#define FS_MAX_BACKGROUND 4096

/*
 * -o readdirplus=.  AUTO, the default, is ALWAYS for an index of at most
 * FS_READDIRPLUS_SMALL entries (its whole listing costs the kernel at most
 * ~110 MiB, and a loader that lists, then opens, needs no lookup per file)
 * and LOOKUPS above (the kernel's AUTO mode: attributes only where lookups
 * follow, so a huge directory's names build no kernel inode).
 */
enum fs_readdirplus {
	FS_READDIRPLUS_AUTO,
	FS_READDIRPLUS_ALWAYS,
	FS_READDIRPLUS_LOOKUPS,
};
#define FS_READDIRPLUS_SMALL 100000

struct fs_options {
	double entry_timeout; /* seconds the kernel may cache names/attrs */
	guint64 free_space;   /* statfs free bytes; 0 = max(dataset, 1 PiB) */
	enum fs_direct_io direct_io;
	/* -o passthrough=auto or always: files fetched whole are read by
	 * the kernel from a memfd where it can be (passthrough.h); auto only
	 * those already fetched at open (open_path.c); FALSE (off):
	 * direct_io (or the page cache, direct_io=none).  Auto by default,
	 * where direct_io is auto; -o direct_io=none alone keeps the page
	 * cache (passthrough_asked: the option was given). */
	gboolean passthrough_on;
	gboolean passthrough_asked;
	gboolean passthrough_always; /* -o passthrough=always: every open of a
				      * file fetched whole, here or not */
	/* -o readdirplus=: which listings hand the kernel attributes and an
	 * inode per name (enum fs_readdirplus; op_init() decides auto). */
	int readdirplus;
	/*
	 * Names the index lacks (overlay.h) are looked up on the store on
	 * every mount.  Unless @read_only (-o ro), they may also be created,
	 * written and removed there; the index's objects never are.
	 * @writable (-o writable) is for mounts that write much: close,
	 * fsync and unlink wait in up to 64 FUSE workers.
	 */
	gboolean read_only;
	gboolean writable;
	/* Seconds a name found on neither the index nor the store is known
	 * to be missing, by the kernel and by the overlay (0: not cached). */
	double negative_timeout;
	guint64 write_max; /* largest file rewritten in place; 0 = default */
	guint64 part_size; /* multipart part size (upload.h); 0 = default */
	guint write_parts; /* parts in flight, whole mount; 0 = default */
	/*
	 * Every file's and directory's owner, and their permission bits
	 * (0 to 0777).  Write bits are shown only where a write can work:
	 * none with -o ro, none on indexed files; the kernel
	 * checks them (default_permissions).
	 */
	guint32 uid, gid;
	guint32 file_mode, dir_mode;
	struct ra_options readahead;
};

/*
 * A filesystem; it serves nothing until fs_switch_index() gives it an
 * index, which must happen before the session loop runs.  The S3 client
 * is attached with fs_set_s3() (it starts threads, so it is made after
 * daemonizing).  Main thread.
 */
struct fs *fs_new(const struct fs_options *opts);

/* Attaches @s3 (the fs takes ownership).  Before the session loop runs. */
void fs_set_s3(struct fs *fs, struct s3 *s3);

/*
 * The directories of -o empty_dirs= (the fs takes @d), shown wherever the
 * index lacks them (emptydirs.h).  Before the first fs_switch_index().
 */
void fs_set_empty_dirs(struct fs *fs, struct emptydirs *d);

/* The session, for cache invalidations.  Before the loop runs. */
void fs_set_session(struct fs *fs, struct fuse_session *se);

/*
 * Once fuse_session_mount() has opened /dev/fuse, before the loop: asks
 * the kernel at INIT for mmap of direct_io files (fuse_init.h), logging
 * the outcome.  Main thread.
 */
void fs_session_mounted(struct fs *fs);

/*
 * After the session loop: uploads written files left open, logs the
 * counters, and shuts the S3 client down (s3_shutdown()): reads still in
 * flight are answered (cancelled) while the channel is still open, and
 * other threads' S3 calls fail at once from then on.  Main thread;
 * before fuse_session_unmount().  fs_free() closes the files the kernel
 * never released.
 */
void fs_stop(struct fs *fs);

/* Frees (stopping first if needed).  Main thread. */
void fs_free(struct fs *fs);

/*
 * Switches new lookups to @idx (a reference is taken); nodes of the old
 * index keep working until the kernel forgets them.  Any thread.
 */
void fs_switch_index(struct fs *fs, struct index *idx);

/* The current index, referenced (unref it).  Any thread. */
struct index *fs_current_index(struct fs *fs);

#endif
