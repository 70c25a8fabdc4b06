/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * readahead.h - what to fetch before it is asked for, and the buffers it
 * lands in.
 *
 * Small objects (size <= whole_max) are fetched whole, with one GET, as
 * soon as they are opened or announced (readahead_prefetch()), and every
 * read of them is served from that buffer.  An object is fetched once
 * while anything holds it: two opens of one key share one buffer.  Nothing
 * is cached once the last holder lets go (the dataset is larger than RAM,
 * and each file is read once per epoch).
 *
 * Large objects are read through a per-handle window: reads that follow
 * each other grow the window from window_min to window_max (but to no
 * more than 4 x the bytes read in sequence), fetched as parts of part_size
 * in parallel (the HTTP engine spreads them over the endpoints).  "Follow
 * each other" allows for the kernel's readahead, whose reads arrive in
 * any order within kernel_ra of each other.  Any other read is one ranged
 * GET of exactly what was asked.
 *
 * Announcements are promises (readahead_prefetch(): a hint) or guesses
 * (readahead_guess(): a stream's lookahead, see streams.h); guesses yield
 * to anything already announced, fetched or open, and have a depth of
 * their own (readahead_guess_depth()).
 *
 * Memory: prefetching (announced objects and read-ahead parts) stops while
 * the buffers held reach memory_max, and resumes as they are released;
 * demand reads always proceed, so nothing deadlocks on the budget.
 *
 * Completions of GETs that succeeded run on the HTTP event thread that
 * fetched them (http_request_set_quick_done(): one thread hand-off fewer
 * per file), failures on the engine's done threads: callbacks must not
 * block, and should be short, since that thread's other transfers wait.
 *
 * Lock order: readahead->lock, then a file's lock is never taken under it
 * (files are only touched by their own handle's calls and completions,
 * under readahead->lock).
 */
#ifndef BUCKETFS_READAHEAD_H
#define BUCKETFS_READAHEAD_H

#include <glib.h>

#include "s3.h"

struct readahead;
struct ra_file;

struct ra_options {
	guint64 whole_max;    /* fetch objects up to this whole (8 MiB) */
	guint64 window_min;   /* first sequential window (1 MiB+128 KiB) */
	guint64 window_max;   /* largest window (256 MiB) */
	guint64 part_size;    /* one GET of a large object (8 MiB) */
	guint64 memory_max;   /* all prefetch buffers together (1 GiB) */
	guint64 kernel_ra;    /* the most the kernel reads ahead in one
			       * batch (0: 1 MiB); its reads come in any order
			       * within that much of each other */
	guint prefetch_depth; /* announced objects fetched ahead (256);
			       * guesses: see readahead_guess_depth() */
	guint sources_off;    /* prefetch sources turned off: RA_HINTS,
			       * RA_STREAMS, RA_LOOKUPS (0: all on) */
};

/* The prefetch sources (-o readahead=): readahead_prefetch()'s hints,
 * readahead_guess()'s stream guesses and readahead_guess_lookup()'s
 * guesses that a file looked up will be opened.  One turned off drops what
 * it announces. */
#define RA_HINTS   1u
#define RA_STREAMS 2u
#define RA_LOOKUPS 4u
#define RA_SOURCES (RA_HINTS | RA_STREAMS | RA_LOOKUPS)

/* Whether prefetch source @source (RA_HINTS, RA_STREAMS, RA_LOOKUPS) is
 * on. */
gboolean readahead_source_on(const struct readahead *ra, guint source);

/* Objects up to this size are fetched whole (whole_max, resolved). */
guint64 readahead_whole_max(const struct readahead *ra);

/* From now on, objects fetched whole get bodies that may be lent to the
 * kernel as files (s3_get_args.shareable): FUSE passthrough is on.  Any
 * thread. */
void readahead_share_bodies(struct readahead *ra);

/* How many guesses may be fetched and unopened at once: prefetch_depth
 * of their own (resolved). */
guint readahead_guess_depth(const struct readahead *ra);

/* Counters, a snapshot.  Plain data. */
struct ra_stats {
	guint64 objects_fetched; /* whole-object GETs started */
	guint64 parts_fetched;	 /* large-object part GETs started */
	guint64 direct_reads;	 /* ranged GETs for random reads */
	guint64 prefetch_hits;	 /* opens that found a prefetch */
	guint64 prefetch_wasted; /* prefetches dropped unopened */
	guint64 prefetch_late;	 /* announced files opened before their
				  * prefetch started (not fetched twice) */
	/* The part of the prefetch counters that readahead_guess() made
	 * (stream_late: and readahead_guess_lookup()). */
	guint64 stream_fetched; /* guesses fetched */
	guint64 stream_hits;
	guint64 stream_wasted;
	guint64 stream_late;
	/* ... and readahead_guess_lookup(). */
	guint64 lookup_fetched;
	guint64 lookup_hits;
	guint64 lookup_wasted;
	guint64 memory_used; /* bytes held in buffers now */
	guint64 memory_max;
	guint prefetch_queued;	 /* announced, not yet started */
	guint prefetch_unopened; /* fetched (or fetching), not yet opened */
};

/*
 * A readahead engine reading through @s3 (borrowed; it must outlive the
 * engine).  Zero fields of @opts take the defaults above.  Any thread.
 */
struct readahead *readahead_new(struct s3 *s3, const struct ra_options *opts);

/* Frees; every file must have been released.  Not from a callback. */
void readahead_free(struct readahead *ra);

/*
 * Opens @key (the full key, copied) of @size bytes whose ETag must be
 * @etag (may be NULL: no If-Match).  A small object's whole GET starts
 * now unless it is already held.  Any thread; never blocks.
 */
struct ra_file *readahead_open(struct readahead *ra, const char *key,
			       const char *etag, guint64 size);

/*
 * Called once per readahead_read(), maybe before it returns, maybe on the
 * HTTP event thread.  On success @data holds @len bytes (fewer than asked
 * only at the end of the object), borrowed for the call; on failure
 * @error holds the cause chain.
 */
typedef void (*ra_read_fn)(const void *data, gsize len, const GError *error,
			   void *user);

/* Reads @size bytes at @off.  Any thread; never blocks. */
void readahead_read(struct ra_file *f, guint64 off, gsize size, ra_read_fn done,
		    void *user);

/*
 * Whether the object of @f (fetched whole) was on its way before @f was
 * opened: announced, guessed at a stream or a lookup, or held by another
 * open file.  Set at readahead_open(); any thread.
 */
gboolean readahead_fetched_ahead(const struct ra_file *f);

/*
 * The whole object of @f, if it is fetched whole and here already (a
 * reference: unref it), else NULL; *@alone says whether @f is the only
 * file open on it.  Any thread; never blocks.
 */
GBytes *readahead_peek_whole(struct ra_file *f, gboolean *alone);

/*
 * Lets go of @f; reads still in flight complete first (their callbacks
 * still run).  Any thread.
 */
void readahead_release(struct ra_file *f);

/*
 * Announces that @key will be opened soon: it is fetched whole, in
 * announcement order, keeping at most prefetch_depth announced objects
 * fetched and unopened, within the memory budget.  Objects larger than
 * whole_max are ignored.  Any thread; never blocks.
 */
void readahead_prefetch(struct readahead *ra, const char *key, const char *etag,
			guint64 size);

/*
 * Like readahead_prefetch(), for a guess (a stream's lookahead, see
 * streams.h) rather than a promise, within readahead_guess_depth()
 * instead of prefetch_depth: it is dropped if @key is already
 * announced, being fetched, or open, so that a guess never fetches what a
 * hint, another guess or a reader already has; and a hint of a key
 * already guessed is dropped likewise.  Counted in the stream_* counters
 * too.  Any thread; never blocks.
 */
void readahead_guess(struct readahead *ra, const char *key, const char *etag,
		     guint64 size);

/* Like readahead_guess(), for a guess that a file looked up will be opened
 * (lookups.h says when), from source RA_LOOKUPS, in the lookup_* counters
 * instead of the stream_* ones. */
void readahead_guess_lookup(struct readahead *ra, const char *key,
			    const char *etag, guint64 size);

/* Whether hints or stream guesses are queued, or fetched and unopened:
 * another source is ahead of the readers, and a guess at a lookup would
 * only repeat it.  Any thread. */
gboolean readahead_others_ahead(struct readahead *ra);

/* Drops every announcement not yet started.  Any thread. */
void readahead_forget_prefetches(struct readahead *ra);

/* Copies the counters.  Any thread. */
void readahead_get_stats(struct readahead *ra, struct ra_stats *out);

#endif
