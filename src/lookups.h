/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * lookups.h - whether a file looked up will be opened, from the lookups
 * and opens so far.
 *
 * A reader that opens a file the kernel has no entry for sends a LOOKUP,
 * then an OPEN: on a busy reader's core the two are a round trip and a
 * wake-up apart, and a GET started at the LOOKUP gains that time (a data
 * loader in random order, whose files nothing else predicts).  But `du`,
 * `stat` and `find -size` look files up and open none, and a GET per
 * lookup there is all waste.  So each lookup is a bet paid out of a
 * credit: a lookup is fetched only while fewer of the fetched ones are
 * unopened than the credit; an open that follows a lookup (fetched or
 * not) within `window_us` earns a unit, and a fetched lookup left
 * unopened that long costs one.  The credit starts at 0: nothing is
 * fetched at a lookup until opens have been seen to follow lookups, so a
 * `stat` or an `ls` of a fresh mount sends no GET.  A sweep of stats
 * after a loader fetches at most the credit the loader left, then nothing
 * until opens follow lookups again.
 *
 * Pure logic: no I/O, no clock of its own (the caller passes the time),
 * its own lock (LOOKUP and OPEN come from many FUSE threads).
 */
#ifndef BUCKETFS_LOOKUPS_H
#define BUCKETFS_LOOKUPS_H

#include <glib.h>

struct lookups;

struct lookups_options {
	guint credit;	   /* the starting credit (0) */
	guint credit_max;  /* at most (64) */
	gint64 window_us;  /* an open this soon after its lookup follows
			    * it (2 s) */
	guint tracked_max; /* lookups remembered at once, the oldest
			    * forgotten first (4096) */
};

/* Counters, a snapshot.  Plain data. */
struct lookups_stats {
	guint64 lookups;  /* lookups_seen() calls */
	guint64 fetched;  /* ... that said fetch */
	guint64 followed; /* opens that followed a lookup */
	guint64 hits;	  /* ... a fetched one */
	guint64 wasted;	  /* fetched lookups that no open followed */
	guint credit;	  /* now */
	guint pending;	  /* fetched, not yet opened or expired, now */
};

/* A tracker; zero fields of @opts take the defaults above.  Free with
 * lookups_free(). */
struct lookups *lookups_new(const struct lookups_options *opts);
void lookups_free(struct lookups *lk);

/* A lookup of file @ino at @now_us: TRUE if its object should be fetched
 * now.  A second lookup of a tracked file is no new bet: FALSE. */
gboolean lookups_seen(struct lookups *lk, guint64 ino, gint64 now_us);

/* An open of file @ino at @now_us. */
void lookups_opened(struct lookups *lk, guint64 ino, gint64 now_us);

void lookups_get_stats(struct lookups *lk, struct lookups_stats *out);

#endif
