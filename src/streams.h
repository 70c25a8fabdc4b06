/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * streams.h - which files will be opened next, from the opens so far.
 *
 * Files are positions in a sequence (a directory listing: entry ids of one
 * index).  A reader that opens positions p, p+1, p+2 ... is a sequential
 * stream; many readers running at once make many interleaved streams (a
 * data loader's workers, each reading its own batch of consecutive files).
 * The detector tracks up to `slots` streams, replacing the least recently
 * used, and tells the caller which positions to fetch ahead:
 *
 * - A stream is confirmed after `confirm` consecutive opens; it then gets
 *   `ahead_min` positions ahead of its last open, doubling with each
 *   further open up to `ahead_max`, or up to its share of `budget` among
 *   the streams confirmed and opened in the last 256 opens.
 * - Batches: when readers' streams keep ending after the same run length L
 *   and the same reader then resumes J positions past the end (a loader
 *   worker skipping the batches of the other workers), the pattern is
 *   learned once three runs in a row agree, and a stream's lookahead
 *   crosses from the end of its batch to where its reader will resume (at
 *   most `ahead_min` positions of it until the reader gets there).
 * - A position opened or announced by another stream is never announced
 *   again, and a stream's lookahead stops where it runs into another one.
 * - Nothing is announced while fewer than half of the recent opens
 *   continued a stream: random order announces nothing.
 *
 * Pure logic: no I/O, no clock, no locks.  One caller at a time (the
 * caller serializes, e.g. under its own lock).
 */
#ifndef BUCKETFS_STREAMS_H
#define BUCKETFS_STREAMS_H

#include <glib.h>

struct streams;

struct streams_options {
	guint slots;	 /* streams tracked at once (128) */
	guint confirm;	 /* consecutive opens that make a stream (3) */
	guint ahead_min; /* positions ahead at confirmation (4) */
	guint ahead_max; /* positions ahead at most, per stream (32) */
	guint budget;	 /* positions ahead of all recent streams together,
			  * shared out evenly but at least ahead_min each
			  * (0: no limit) */
};

/* Counters, a snapshot.  Plain data. */
struct streams_stats {
	guint64 opens;	    /* streams_open() calls */
	guint64 continued;  /* opens that continued a tracked stream */
	guint64 confirmed;  /* streams that reached `confirm` opens */
	guint64 announced;  /* positions handed out to fetch ahead */
	guint64 jumps;	    /* opens where a reader resumed at a predicted
			     * batch start */
	guint64 batch_len;  /* the learned batch pattern: run length ... */
	guint64 batch_jump; /* ... and jump (0, 0 while none) */
	guint tracked;	    /* slots in use now */
};

/* A detector; zero fields of @opts take the defaults above.  Free with
 * streams_free(). */
struct streams *streams_new(const struct streams_options *opts);

void streams_free(struct streams *s);

/*
 * Records an open of position @pos in sequence @seq by @reader (a thread
 * id or 0 when unknown; batch patterns are learned only from known
 * readers).  Appends to @out (a GArray of guint64, owned by the caller)
 * the positions of @seq to fetch ahead now, in the order they will be
 * needed; each position is handed out at most once while its stream is
 * tracked.  Returns how many were appended.
 */
guint streams_open(struct streams *s, guint64 seq, guint64 pos, guint64 reader,
		   GArray *out);

/* Forgets every stream and the learned pattern (a new index: positions
 * changed meaning).  Counters stay. */
void streams_reset(struct streams *s);

/* Copies the counters. */
void streams_get_stats(const struct streams *s, struct streams_stats *out);

#endif
