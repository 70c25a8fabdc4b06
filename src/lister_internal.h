/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the files of the lister (src/lister*.c) share: the job and its
 * ranges, and the calls one file makes of another.  Private to the
 * lister; nothing outside src/lister*.c includes it.
 *
 * A range is (after, upto]: what ListObjectsV2 gives with start-after =
 * after, up to and including upto (NULL: from the start of the prefix, to
 * its end).
 *
 * Lock order: job->lock only; it is never held across a request.
 *
 * The files form layers, each calling only those below it:
 * lister_build.c (the job, feeding the index writer) over lister_worker.c
 * (the workers, listing ranges page by page) over lister.c (ranges, and
 * cutting them at probed keys).
 */
#ifndef BUCKETFS_LISTER_INTERNAL_H
#define BUCKETFS_LISTER_INTERNAL_H

#include <glib.h>

#include "lister.h"

struct spool;

#define SPLIT_AFTER_PAGES 20 /* a listing this long is worth cutting */

struct range {
	char *after; /* exclusive start, NULL = the prefix's start; fixed */
	char *upto;  /* protected by job->lock: inclusive end, NULL = end */
	gboolean upto_listed; /* protected by job->lock: upto is a key the
			       * server listed, so stop on seeing it */
	char *pos;   /* protected by job->lock: the last key of the latest
		      * page, NULL before the first */
	char *bound; /* protected by job->lock: no key lies between it and
		      * upto (above it, when open), as probes showed; NULL
		      * unknown.  Where cuts are aimed below. */
	gboolean started, done; /* protected by job->lock */
	GError *error;		/* protected by job->lock */
	/* The range's own worker's until done, then the feeder's: */
	struct spool *spool;
	gboolean sorted; /* keys came in strictly increasing byte order */
};

struct job {
	struct s3 *s3;
	const char *prefix;
	char *spool_dir;
	char *base; /* the index file's name */
	guint page_size;
	guint workers;

	GMutex lock;
	GCond cond;
	GPtrArray *ranges;  /* protected by lock: of struct range *, in key
			     * order; grows by cuts after unfinished ranges */
	gboolean failed;    /* protected by lock */
	gboolean splitting; /* protected by lock: one cut at a time */
	gboolean no_split;  /* protected by lock: a probe failed */
	guint retry_at;	    /* protected by lock: pages before the next try */
	guint pages;	    /* protected by lock */
	guint probes;	    /* protected by lock */
	char *first_key;    /* protected by lock: of the whole listing */
	char *disorder;	    /* protected by lock: the first pair out of
			     * order, for the notice */
	gsize keys;	    /* atomic */
};

/* -- lister.c: ranges, and cutting them --------------------------------- */

/* A range (after, upto] (both copied); @upto_listed: upto is a key the
 * server listed. */
struct range *range_new(const char *after, const char *upto,
			gboolean upto_listed);

/* Frees a range (a GDestroyNotify for job->ranges), its spool too. */
void range_free(void *p);

/* Whether the budget allows another probe.  Under job->lock. */
gboolean probe_allowed(const struct job *job);

/* Tries one cut of the widest unfinished range.  Called and returns with
 * job->lock held; drops it while probing. */
void try_split(struct job *job);

/* -- lister_worker.c: the workers --------------------------------------- */

/* A range nobody lists yet; else NULL, and *@all_done says whether every
 * range is done.  Under job->lock. */
struct range *unstarted(struct job *job, gboolean *all_done);

/* A worker's thread (g_thread_new()): @data is the job.  It lists ranges
 * and cuts them until every range is done or the listing failed. */
gpointer worker(gpointer data);

#endif /* BUCKETFS_LISTER_INTERNAL_H */
