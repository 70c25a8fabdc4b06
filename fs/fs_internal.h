/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fs_internal.h - what the files behind struct fs share, and nobody else
 * includes: the struct itself, node ids and open handles, implemented by
 * fs.c (the struct's life, its index generations and node ids, and the
 * set of open handles).  The layers above it are in ops.h.
 *
 * The public contract, the node-id scheme and the lock order are in
 * fs.h.  Node ids of generation OVERLAY_GEN are the overlay's: their
 * low bits are an overlay node number (overlay.h); those of EMPTY_GEN are
 * the declared directories of -o empty_dirs= (emptydirs.h).
 */
#ifndef BUCKETFS_FS_FS_INTERNAL_H
#define BUCKETFS_FS_FS_INTERNAL_H

#include <fuse_lowlevel.h>
#include <glib.h>

#include "emptydirs.h"
#include "fs.h"
#include "fuse_init.h"
#include "index.h"
#include "overlay.h"
#include "passthrough.h"
#include "readahead.h"
#include "s3.h"
#include "stats.h"
#include "lookups.h"
#include "streams.h"

#define GEN_SHIFT 40
#define ID_MASK	  ((G_GUINT64_CONSTANT(1) << GEN_SHIFT) - 1)
#define BLOCK	  4096
/* The largest st_blksize a file reports (attr.c, io_block()). */
#define IO_BLOCK_MAX (1u << 20)
/* Node ids of names the index doesn't have (overlay.h),
 * and readdir offsets of those names after a directory's indexed ones. */
#define OVERLAY_GEN	((G_GUINT64_CONSTANT(1) << (64 - GEN_SHIFT)) - 1)
#define OVERLAY_DIROFF	(G_GUINT64_CONSTANT(1) << 62)
#define OVERLAY_TIMEOUT 1.0
/* -o empty_dirs=: node ids of the declared directories the index lacks
 * (low bits: an emptydirs.h node number), and their readdir offsets,
 * after the indexed names and before the overlay's. */
#define EMPTY_GEN    (OVERLAY_GEN - 1)
#define EMPTY_DIROFF (G_GUINT64_CONSTANT(1) << 61)

/* An index and how many kernel lookups its nodes hold. */
struct gen {
	guint64 number;
	struct index *idx;
	guint64 lookups; /* protected by fs->lock */
};

struct fs {
	struct s3 *s3;		 /* set before the loop, then immutable */
	struct readahead *ra;	 /* likewise */
	struct overlay *ov;	 /* likewise: names the index lacks */
	struct fuse_session *se; /* likewise */
	struct emptydirs *ed;	 /* likewise; NULL without empty_dirs */
	struct passthrough *pt;	 /* made with the fs, then immutable */
	struct fs_options opts;

	GMutex lock;
	struct gen *current; /* protected by lock */
	GHashTable *gens;    /* protected by lock: number -> struct gen */
	GHashTable *handles; /* protected by lock: open struct handle set */
	gboolean stopped;    /* fs_stop() ran; main thread */
	guint64 next_gen;    /* protected by lock */
	/* Listing-order streams (streams.h) over index entries; made at the
	 * first open.  Protected by lock. */
	struct streams *streams;
	/* Whether files looked up will be opened (lookups.h); its own
	 * lock. */
	struct lookups *lookups;
	guint64 reads;	     /* atomic: FUSE reads of files */
	guint64 handed_over; /* atomic: files stored in the page cache */
	/* Atomic: FUSE requests by kind. */
	guint64 ops[STATS_OPS];
	struct fuse_init_state init; /* what INIT negotiated (fuse_init.h) */
};

/* Counts @n of FUSE request kind @op (stats.h). */
static inline void count_op(struct fs *fs, enum stats_op op, guint64 n)
{
	__atomic_add_fetch(&fs->ops[op], n, __ATOMIC_RELAXED);
}

/* An open file: its key (for logs) and its readahead handle. */
struct handle {
	char *key;
	struct ra_file *rf;
	struct ov_file *of; /* instead of rf, for an overlay file */
	/* How its open was answered (passthrough.h), and its node, set
	 * before the reply; handle_free() drops the record. */
	enum pt_mode pt_mode;
	fuse_ino_t ino;
};

static inline struct fs *data(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* Whether names the index lacks may be made, written and removed (not
 * -o ro; the index's objects never may). */
static inline gboolean fs_writes(const struct fs *fs)
{
	return fs->ov && !fs->opts.read_only;
}

/* Whether @ino names an overlay node: a name the index lacks. */
static inline gboolean is_overlay(fuse_ino_t ino)
{
	return (ino >> GEN_SHIFT) == OVERLAY_GEN;
}

/* Whether @ino names a declared directory (emptydir_ops.h). */
static inline gboolean is_empty_dir(fuse_ino_t ino)
{
	return (ino >> GEN_SHIFT) == EMPTY_GEN;
}

/* The node id of overlay node @node. */
static inline fuse_ino_t ov_ino(guint64 node)
{
	return (OVERLAY_GEN << GEN_SHIFT) | node;
}

/* The node id of declared directory @node (emptydirs.h). */
static inline fuse_ino_t empty_dir_ino(guint node)
{
	return (EMPTY_GEN << GEN_SHIFT) | node;
}

/* -- fs.c: generations, node ids, open handles ------------------------- */

/*
 * The index and entry behind @ino, with a reference on the index (unref
 * it); NULL for a node id that names no live generation.  A node of an
 * older index is answered from the current one when its key is still
 * there, so a SIGHUP refresh reaches names the kernel already knows.
 * Likewise a declared directory (is_empty_dir()) is answered from the
 * current index once that has it, else NULL.  Not for overlay nodes.  Any
 * thread.
 */
struct index *resolve(struct fs *fs, fuse_ino_t ino, index_id *id);

/* Whether the kernel's caches for @ino can be trusted: its node belongs
 * to the current index.  Any thread. */
gboolean is_current(struct fs *fs, fuse_ino_t ino);

/* The node id of entry @id of @idx (from resolve() or fs_current_index()),
 * counting one kernel lookup.  Any thread. */
fuse_ino_t node_for(struct fs *fs, struct index *idx, index_id id);

/* Returns @n kernel lookups of @ino (overlay nodes included). */
void forget_one(struct fs *fs, fuse_ino_t ino, guint64 n);

/*
 * A new open file with key @key (taken), counted so that fs_stop() can
 * close what the kernel never released; the caller sets rf or of.
 * handle_free() closes it and forgets it.  Any thread.
 */
struct handle *handle_new(struct fs *fs, char *key);
void handle_free(struct fs *fs, struct handle *h);

/* The emptydirs.h node number of @ino, or 0 if it names no declared
 * directory (is_empty_dir()).  Any thread. */
guint empty_dir_node(struct fs *fs, fuse_ino_t ino);

/*
 * The key of declared directory @ino (is_empty_dir()), borrowed for the
 * mount's life; NULL if @ino names none (or there are none).  Any thread.
 */
const char *empty_dir_key(struct fs *fs, fuse_ino_t ino);

/* What this mount's counters come from (stats.h); stats_sources_clear()
 * after.  Any thread, once fs_set_s3() ran. */
void fs_get_stats_sources(struct fs *fs, struct stats_sources *out);

#endif
