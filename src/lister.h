/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * lister.h - builds the persisted index of a bucket from a parallel
 * listing.
 *
 * The key space under the prefix is cut into ranges by probing
 * (ListObjectsV2 with start-after and max-keys=1 at byte-wise midpoints),
 * which works inside one huge flat directory as well as across common
 * prefixes.  Worker threads list the ranges at once (the HTTP engine
 * spreads them over every endpoint), each streaming its keys to an
 * unlinked temporary file, and the ranges are then fed in order to an
 * index_writer: memory stays bounded whatever the number of keys.
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
 * Blocking; any thread but the HTTP event thread.
 */
gboolean lister_build(struct s3 *s3, const char *prefix, const char *path,
		      const struct lister_options *opts,
		      struct index_stats *stats, GError **error);

#endif
