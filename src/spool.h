/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * spool.h - listing records on disk, and putting them in order.
 *
 * A spool is an unlinked temporary file of listing records (key, size,
 * mtime, ETag) beside the index being built, written once and then read
 * back from the start.  The lister streams every page it gets into one, so
 * memory stays bounded whatever the number of keys.
 *
 * Servers do not all list in byte order (s3rver compares UTF-16 code units
 * and lists an object after a "directory" of the same name), and ranges
 * listed in parallel may overlap when they do not.  spool_sort() turns a
 * spool into sorted runs with bounded memory, and spool_merge() merges
 * sorted runs into one stream in strictly increasing byte order, dropping
 * duplicate keys: together they are an external merge sort.
 *
 * Threads: a spool belongs to one thread at a time.
 */
#ifndef BUCKETFS_SPOOL_H
#define BUCKETFS_SPOOL_H

#include <glib.h>

struct spool;

/* One record; the strings are reused buffers owned by the caller. */
struct spool_rec {
	GString *key;
	GString *etag; /* empty: none */
	guint64 size;
	gint64 mtime;
};

/* Allocates the buffers of @rec (free with spool_rec_clear()). */
void spool_rec_init(struct spool_rec *rec);
void spool_rec_clear(struct spool_rec *rec);

/*
 * A new empty spool in directory @dir: an O_TMPFILE, or where the
 * filesystem has none a file ".@base.spool-XXXXXX" unlinked at once (a
 * crash in between leaves it for index_writer_new() to remove).  Not /tmp:
 * that is often RAM.  Returns NULL with @error (the errno of open) on
 * failure.
 */
struct spool *spool_new(const char *dir, const char *base, GError **error);

/* Closes and frees; NULL is allowed. */
void spool_free(struct spool *s);

/*
 * Appends one record; @etag may be NULL.  Only before the first
 * spool_rewind().  Errors: the errno of the write (ENOSPC, EIO...), with
 * "writing the listing spool" and the path's directory.
 */
gboolean spool_put(struct spool *s, const char *key, guint64 size, gint64 mtime,
		   const char *etag, GError **error);

/* Records written so far. */
guint64 spool_count(const struct spool *s);

/* Goes back to the first record, for reading (again).  Errors: errno. */
gboolean spool_rewind(struct spool *s, GError **error);

/*
 * Reads the next record into @rec.  Returns FALSE at the end, or on a
 * read error with @error set (check it: NULL @error means the end).
 */
gboolean spool_next(struct spool *s, struct spool_rec *rec, GError **error);

/*
 * Reads @s from its start and writes its records as sorted runs (new
 * spools, appended to @runs, rewound, each in non-decreasing order;
 * equal keys keep the order they had in @s), holding at most about @mem_max
 * bytes of records in memory at once.  @s itself is left as it was.  Errors:
 * those of spool_new(), spool_put() and spool_next().
 */
gboolean spool_sort(struct spool *s, const char *dir, const char *base,
		    gsize mem_max, GPtrArray *runs, GError **error);

/*
 * Called by spool_merge() for each record, in strictly increasing byte
 * order of keys.  @rec is borrowed for the call.  Return FALSE with @error
 * set to stop the merge.
 */
typedef gboolean (*spool_emit_fn)(const struct spool_rec *rec, void *user,
				  GError **error);

/*
 * Merges @runs (of struct spool *, each rewound and sorted) into one
 * stream passed to @emit; of records with equal keys only the first (in
 * the order of @runs) is emitted, and *@dups (if not NULL) counts the
 * others.  Errors: a read error, or @emit's.
 */
gboolean spool_merge(GPtrArray *runs, spool_emit_fn emit, void *user,
		     guint64 *dups, GError **error);

#endif
