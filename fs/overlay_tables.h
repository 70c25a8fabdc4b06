/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * overlay_tables.h - the overlay's tables, its nodes and their handles,
 * shared by overlay.c (names, whole files), overlay_stream.c (new files
 * streamed as multipart uploads) and overlay_write.c: the layer under
 * all three, so none of them owns it.  Not a public interface: overlay.h
 * is.
 *
 * Locks: a node's wlock (writes and flushes of one file, held across
 * the network) comes before ov->lock (the tables, never held across
 * the network).
 */
#ifndef BUCKETFS_FS_OVERLAY_TABLES_H
#define BUCKETFS_FS_OVERLAY_TABLES_H

#include <errno.h>
#include <glib.h>

#include "error.h"
#include "overlay.h"

struct ov_buf;

/* A name the index doesn't have.  Fields under ov->lock. */
struct onode {
	guint64 node;
	char *key; /* full key, no trailing '/' */
	gboolean is_dir;
	gboolean removed; /* unlinked/rmdir'ed; kept while looked up */
	guint64 size;
	gint64 mtime;
	char *etag;	     /* as last seen on S3, NULL for a new file */
	guint64 lookups;     /* kernel lookups */
	guint opens;	     /* open handles */
	struct ov_buf *data; /* the bytes while open (or not yet uploaded) */
	guint64 version;     /* bumped by each change of data */
	guint64 uploaded;    /* the version S3 has */
	gboolean uploading;  /* a PUT or DELETE of it is in flight */
	/* A write failed since the file was created or emptied: its bytes
	 * are not what the writer meant, so it is never uploaded. */
	GError *broken;
	/* Streaming (upload.h): a file made here goes up part by part once
	 * it outgrows a part; @data then holds its bytes from @base on. */
	gboolean streamable; /* made (or emptied) by this mount */
	guint writers;	     /* writable handles open */
	guint closed;	     /* ... of them closed by their opener (ov_file) */
	guint64 wgen;	     /* bumped when a writer opens with none in use */
	guint64 base;	     /* file offset of data->data[0] */
	gboolean sealed;     /* its upload completed: no more writes */
	char *s3_etag;	     /* the ETag its upload completed with */
	GMutex wlock;	     /* serializes writes and flushes; then ov->lock */
	struct upload *up;   /* protected by wlock */
};

struct overlay {
	struct s3 *s3;
	struct uploader *up;
	guint64 write_max;
	GMutex lock;
	GHashTable *by_node; /* node number -> struct onode (owned) */
	GHashTable *by_key;  /* key -> struct onode (borrowed) */
	guint64 next_node;
	GCond idle; /* a node's uploading went FALSE */
	/* Keys S3 said it lacks: key (owned) -> when that stops being
	 * believed, g_get_monotonic_time() microseconds.  At most
	 * OV_MISSING_MAX; empty when negative_us is 0. */
	GHashTable *missing;
	gint64 negative_us;
};

/* The most keys the overlay remembers as missing at once. */
#define OV_MISSING_MAX 65536

struct ov_file {
	struct overlay *ov;
	struct onode *n;
	gboolean writable;
	gboolean failed; /* an upload failed: close() said so */
	guint owner;	 /* the process that opened it (0: any) */
	/* Its opener closed it (FLUSH): the kernel's RELEASE may come after
	 * the next open, which must not find it still writing. */
	gboolean closed;
	guint64 wgen; /* n->wgen when it was opened */
};

/* The writable handles of @n still in use: those whose opener has not
 * closed them.  Under ov->lock. */
static inline guint ov_writers(const struct onode *n)
{
	return n->writers - n->closed;
}

/* Whether @f was closed by its opener and its name opened for writing
 * since: another handle's file, which @f must not write, flush, truncate
 * or abort.  Under ov->lock. */
static inline gboolean ov_stale(const struct ov_file *f)
{
	return f->writable && f->wgen != f->n->wgen;
}

/* What @f (ov_stale()) gets for anything but its close.  Under ov->lock. */
static inline GError *ov_stale_error(const struct ov_file *f)
{
	return g_error_new(BFS_ERROR, EBADF,
			   "its opener closed it, and another handle writes "
			   "'%s' now",
			   f->n->key);
}

/* Marks @f closed by its opener (TRUE) or in use again.  Under
 * ov->lock. */
static inline void ov_set_closed(struct ov_file *f, gboolean closed)
{
	if (f->closed != closed)
		f->n->closed += closed ? 1 : -1;
	f->closed = closed;
}

/* Remembers the first failed write of @n, so that close() fails too.
 * Takes ov->lock. */
static inline void ov_mark_broken(struct overlay *ov, struct onode *n,
				  const GError *error)
{
	g_mutex_lock(&ov->lock);
	if (!n->broken)
		n->broken = g_error_copy(error);
	g_mutex_unlock(&ov->lock);
}

#endif
