/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * lister.h - builds the persisted index of a bucket from a parallel
 * listing.
 *
 * The listing starts in sequence; only a listing that has run to 20 pages
 * is cut into ranges (at keys found by ListObjectsV2 probes with
 * max-keys=1, or clean strings between keys: src/keyspace), which works
 * inside one huge flat directory as well as across common prefixes.
 * Probes cost at most one request per 20 pages listed (5%), and one that
 * fails only stops the cutting.  Worker threads list the ranges at once
 * (the HTTP engine spreads them over every endpoint), each streaming its
 * keys to an unlinked temporary file (src/spool), and the ranges are then
 * fed in order to an index_writer; keys a server lists out of byte order
 * are sorted there and duplicates dropped, with one warning naming the
 * first pair and the server.  Memory stays bounded whatever the number of
 * keys.
 */
#ifndef BUCKETFS_LISTER_H
#define BUCKETFS_LISTER_H

#include <glib.h>

#include "index.h"
#include "s3.h"

struct lister_progress {
	guint64 keys;	/* listed so far */
	guint64 pages;	/* ListObjectsV2 pages so far */
	guint ranges;	/* ranges listed in parallel */
	double elapsed; /* seconds */
	gboolean done;	/* the final call */
};

/*
 * Called about twice a second and once at the end, on the thread that
 * called lister_build().
 */
typedef void (*lister_progress_fn)(const struct lister_progress *p, void *user);

/*
 * A progress callback for terminals: rewrites one stderr line, "@user:
 * N objects listed, R/s, T s, K ranges", where @user is a const char *
 * label; ends the line at the final call.
 */
void lister_progress_print(const struct lister_progress *p, void *user);

struct lister_options {
	guint workers;	 /* parallel listings; 0 = 4 x endpoints, <= 32 */
	guint page_size; /* max-keys; 0 = 1000 */
	lister_progress_fn progress; /* may be NULL */
	void *user;
};

/*
 * Lists s3://BUCKET/@prefix through @s3 and commits the index at @path.
 * On failure the file at @path is untouched (an old index stays) and
 * @error holds the cause chain of the first failing range ("listing
 * s3://b/p, range 3 of 16 (after 'train/img_5'): LIST ... via ...").
 * A probe's failure is not one: it is logged (a warning) and the ranges
 * made so far are listed whole.
 * Blocking; any thread but the HTTP event thread.
 */
gboolean lister_build(struct s3 *s3, const char *prefix, const char *path,
		      const struct lister_options *opts,
		      struct index_stats *stats, GError **error);

#endif
