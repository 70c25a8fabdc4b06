/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the files of the readahead engine (src/readahead*.c) share: the
 * engine, its objects and files, and the calls one file makes of another.
 * Private to the engine; nothing outside src/readahead*.c includes it.
 *
 * Everything shared lives under ra->lock: the object table, every
 * object's and file's state, the announcement queue and the counters.
 * Callbacks to the caller (ra_read_fn) are always made without the lock.
 * Lifetimes: an object is held by each handle on it, by its announcement
 * while unopened, and by its fetch while in flight; a file by its handle
 * and by each of its GETs in flight.
 *
 * The files form layers, each calling only those below it:
 * readahead_file.c (open files, large objects' windows) over
 * readahead_whole.c (objects fetched whole, announcements) over
 * readahead.c (the engine's life, its options and counters).
 */
#ifndef BUCKETFS_READAHEAD_INTERNAL_H
#define BUCKETFS_READAHEAD_INTERNAL_H

#include <glib.h>

#include "readahead.h"

enum state { FETCHING, READY, FAILED };

struct waiter {
	guint64 off;
	gsize size;
	ra_read_fn done;
	void *user;
};

/* A small object, fetched whole. */
struct object {
	struct readahead *ra;
	char *key;
	char *etag;
	guint64 size;
	guint refs;	    /* under ra->lock */
	guint handles;	    /* the files open on it; under ra->lock */
	gboolean announced; /* fetched for readahead_prefetch(), unopened */
	gboolean guess;	    /* ... for readahead_guess() or
			     * readahead_guess_lookup() */
	gboolean looked_up; /* ... for readahead_guess_lookup() */
	gint64 ready_at;
	enum state state;
	GBytes *data;
	GError *error;
	GQueue waiters; /* of struct waiter * */
};

struct ra_file {
	struct readahead *ra;
	char *key;
	char *etag;
	guint64 size;
	guint refs;	    /* handle + GETs in flight; under ra->lock */
	struct object *obj; /* small objects */
	gboolean ahead;	    /* obj's GET started before the open */
	/* Large objects, under ra->lock. */
	guint64 next_off;     /* the furthest end read since the last seek */
	guint64 stream_start; /* where the reads since that seek began */
	guint64 window;	      /* 0 while reading randomly */
	GHashTable *parts;    /* index -> struct part * (readahead_file.c) */
};

struct announce {
	char *key;
	char *etag;
	guint64 size;
	gboolean guess;	    /* readahead_guess(), readahead_guess_lookup() */
	gboolean looked_up; /* readahead_guess_lookup() */
};

struct readahead {
	struct s3 *s3;
	struct ra_options o;
	GMutex lock;
	GHashTable *objects; /* key -> struct object *; under lock */
	GQueue announced;    /* of struct announce *; under lock */
	/* key -> how many of its announcements the readers got to before
	 * their fetch started: pump() drops that many, the oldest, instead
	 * of fetching again what was read already.  Under lock. */
	GHashTable *overtaken;
	GHashTable *queued;	/* key -> its announcements in announced */
	GHashTable *guesses;	/* keys with a guess in announced (one each) */
	guint unopened_guesses; /* of those in unopened; under lock */
	guint unopened_lookups; /* ... of readahead_guess_lookup() */
	guint queued_lookups;	/* of those in announced; under lock */
	GQueue unopened;	/* of struct object *: announced, not opened,
				 * in order; each holds a reference */
	guint64 mem_used;	/* under lock */
	struct ra_stats st;	/* under lock */
	gint share_bodies;	/* atomic: readahead_share_bodies() ran */
};

/* -- readahead.c: what every piece lets go of, or answers with --------- */

/* Frees an announcement not (or no longer) queued. */
void announce_free(struct announce *a);

/* Drops a reference to @obj; the last frees it and its share of the
 * budget.  Under ra->lock. */
void object_unref(struct object *obj);

/* Calls @done with @size bytes of @data at @off (fewer at its end), or
 * with @error.  Without ra->lock. */
void serve(GBytes *data, const GError *error, guint64 off, gsize size,
	   ra_read_fn done, void *user);

/* -- readahead_whole.c, for the open files ------------------------------ */

/* A new object, held once by the caller and by its fetch, which starts
 * now (hedged unless fetched @ahead of its open).  Under ra->lock. */
struct object *object_new(struct readahead *ra, const char *key,
			  const char *etag, guint64 size, gboolean ahead);

/* @key is being opened: an announcement of it still queued is used up.
 * Under ra->lock. */
void consume_announcement(struct readahead *ra, const char *key);

/* Starts announced fetches while depth and memory allow.  Under lock. */
void pump(struct readahead *ra);

#endif /* BUCKETFS_READAHEAD_INTERNAL_H */
