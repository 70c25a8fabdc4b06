/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Objects fetched whole: one GET each, shared by every file open on the
 * object; and the announcements (hints, stream and lookup guesses) that
 * fetch them before they are opened, within their depths and the memory
 * budget.
 */
#include "readahead_internal.h"

#define STALE_PREFETCH_US (30 * G_USEC_PER_SEC)

/* -- objects fetched whole --------------------------------------------- */

static void start_object(struct readahead *ra, struct object *obj,
			 gboolean hedge);

static void object_done(GBytes *data, const struct s3_object_meta *meta,
			const GError *error, void *user)
{
	struct object *obj = user;
	struct readahead *ra = obj->ra;
	GQueue waiters = G_QUEUE_INIT;
	struct waiter *w;

	(void)meta;
	g_mutex_lock(&ra->lock);
	if (error) {
		obj->state = FAILED;
		obj->error = g_error_copy(error);
		/* The next open fetches again. */
		if (g_hash_table_lookup(ra->objects, obj->key) == obj)
			g_hash_table_steal(ra->objects, obj->key);
	} else {
		obj->state = READY;
		obj->data = g_bytes_ref(data);
	}
	obj->ready_at = g_get_monotonic_time();
	waiters = obj->waiters;
	g_queue_init(&obj->waiters);
	g_mutex_unlock(&ra->lock);

	/* The fetch's reference keeps the object alive meanwhile. */
	while ((w = g_queue_pop_head(&waiters))) {
		serve(obj->data, obj->error, w->off, w->size, w->done, w->user);
		g_free(w);
	}
	g_mutex_lock(&ra->lock);
	object_unref(obj);
	pump(ra);
	g_mutex_unlock(&ra->lock);
}

/*
 * Under ra->lock: a new object, held once by @holder and by its fetch.
 * Fetched @ahead of its open (announced), its GET is not hedged: it has
 * time to spare, and a duplicate would add load just when the endpoints
 * are slow.
 */
struct object *object_new(struct readahead *ra, const char *key,
			  const char *etag, guint64 size, gboolean ahead)
{
	struct object *obj = g_new0(struct object, 1);

	obj->ra = ra;
	obj->key = g_strdup(key);
	obj->etag = g_strdup(etag);
	obj->size = size;
	obj->refs = 2;
	obj->state = FETCHING;
	g_queue_init(&obj->waiters);
	g_hash_table_insert(ra->objects, obj->key, obj);
	ra->mem_used += size;
	start_object(ra, obj, !ahead);
	return obj;
}

/* Under ra->lock (s3_get_async only queues). */
static void start_object(struct readahead *ra, struct object *obj,
			 gboolean hedge)
{
	struct s3_get_args a = {
		.length = obj->size,
		.if_match = obj->etag,
		.endpoint = -1,
		.hedge = hedge,
		.quick_done = TRUE,
		.shareable = g_atomic_int_get(&ra->share_bodies),
	};

	ra->st.objects_fetched++;
	s3_get_async(ra->s3, obj->key, &a, object_done, obj);
}

/* -- announcements ----------------------------------------------------- */

/*
 * Drops announced objects that failed, or that nobody opened for a long
 * time, so that a reader that skipped them doesn't stall the queue.  Under
 * ra->lock.
 */
static void drop_stale(struct readahead *ra)
{
	struct object *obj;
	gint64 now = g_get_monotonic_time();

	while ((obj = g_queue_peek_head(&ra->unopened))) {
		if (obj->state == FETCHING ||
		    (obj->state == READY &&
		     now - obj->ready_at < STALE_PREFETCH_US))
			break;
		g_queue_pop_head(&ra->unopened);
		obj->announced = FALSE;
		ra->st.prefetch_wasted++;
		ra->st.stream_wasted += obj->guess && !obj->looked_up;
		ra->st.lookup_wasted += obj->looked_up;
		ra->unopened_guesses -= obj->guess;
		ra->unopened_lookups -= obj->looked_up;
		object_unref(obj);
	}
}

/* Adds @delta to the count of @key in @counts (removed at 0). */
static guint count_add(GHashTable *counts, const char *key, int delta)
{
	gpointer orig = NULL, val = NULL;
	guint n = 0;

	if (g_hash_table_lookup_extended(counts, key, &orig, &val))
		n = GPOINTER_TO_UINT(val);
	n += delta;
	/* Taken out first: inserting over an existing key frees one copy. */
	if (orig)
		g_hash_table_steal(counts, key);
	if (n)
		g_hash_table_insert(counts, orig ? orig : g_strdup(key),
				    GUINT_TO_POINTER(n));
	else
		g_free(orig);
	return n;
}

/*
 * @key is being opened: if an announcement of it still waits, the reader
 * overtook the prefetcher, and that announcement is used up.  Under lock.
 */
void consume_announcement(struct readahead *ra, const char *key)
{
	gpointer n = g_hash_table_lookup(ra->queued, key);

	if (GPOINTER_TO_UINT(n) >
	    GPOINTER_TO_UINT(g_hash_table_lookup(ra->overtaken, key))) {
		count_add(ra->overtaken, key, 1);
		ra->st.prefetch_late++;
		ra->st.stream_late += g_hash_table_contains(ra->guesses, key);
	}
}

/*
 * Whether @a must wait: as many objects of its kind as its depth allows
 * (prefetch_depth hints, readahead_guess_depth() guesses) are fetched and
 * unopened, or the memory budget is reached.  Under lock.
 */
static gboolean must_wait(struct readahead *ra, const struct announce *a)
{
	guint kind = a->guess ? ra->unopened_guesses
			      : ra->unopened.length - ra->unopened_guesses;

	if (g_hash_table_contains(ra->overtaken, a->key))
		return FALSE;
	return kind >= (a->guess ? readahead_guess_depth(ra)
				 : ra->o.prefetch_depth) ||
	       ra->mem_used + a->size > ra->o.memory_max;
}

/* Starts announced fetches while depth and memory allow.  Under lock. */
void pump(struct readahead *ra)
{
	struct announce *a;

	drop_stale(ra);
	while ((a = g_queue_peek_head(&ra->announced))) {
		struct object *obj;

		if (must_wait(ra, a))
			break;
		g_queue_pop_head(&ra->announced);
		count_add(ra->queued, a->key, -1);
		ra->queued_lookups -= a->looked_up;
		if (a->guess)
			g_hash_table_remove(ra->guesses, a->key);
		if (g_hash_table_contains(ra->overtaken, a->key)) {
			count_add(ra->overtaken, a->key, -1);
		} else if (!g_hash_table_contains(ra->objects, a->key)) {
			obj = object_new(ra, a->key, a->etag, a->size, TRUE);
			obj->announced = TRUE;
			obj->guess = a->guess;
			obj->looked_up = a->looked_up;
			ra->st.stream_fetched += a->guess && !a->looked_up;
			ra->st.lookup_fetched += a->looked_up;
			ra->unopened_guesses += a->guess;
			ra->unopened_lookups += a->looked_up;
			g_queue_push_tail(&ra->unopened, obj);
		}
		announce_free(a);
	}
}

/*
 * Whether an announcement of @key (a guess if @guess) would only repeat
 * one that is pending: a guess repeats anything queued or held (an object
 * being read needs no fetch for a guess); a hint repeats a guess queued
 * or fetched and unopened.  Under lock.
 */
static gboolean repeats(struct readahead *ra, const char *key, gboolean guess)
{
	struct object *obj = g_hash_table_lookup(ra->objects, key);

	if (guess)
		return obj || g_hash_table_contains(ra->queued, key);
	return g_hash_table_contains(ra->guesses, key) ||
	       (obj && obj->announced && obj->guess);
}

/* An announcement from prefetch source @source (RA_HINTS: a promise; else
 * a guess). */
static void announce(struct readahead *ra, const char *key, const char *etag,
		     guint64 size, guint source)
{
	gboolean guess = source != RA_HINTS;
	struct announce *a;

	if (size == 0 || size > ra->o.whole_max ||
	    !readahead_source_on(ra, source))
		return;
	g_mutex_lock(&ra->lock);
	if (repeats(ra, key, guess)) {
		g_mutex_unlock(&ra->lock);
		return;
	}
	a = g_new0(struct announce, 1);
	a->key = g_strdup(key);
	a->etag = g_strdup(etag);
	a->size = size;
	a->guess = guess;
	a->looked_up = source == RA_LOOKUPS;
	ra->queued_lookups += a->looked_up;
	g_queue_push_tail(&ra->announced, a);
	count_add(ra->queued, a->key, 1);
	if (guess)
		g_hash_table_add(ra->guesses, g_strdup(key));
	pump(ra);
	g_mutex_unlock(&ra->lock);
}

void readahead_prefetch(struct readahead *ra, const char *key, const char *etag,
			guint64 size)
{
	announce(ra, key, etag, size, RA_HINTS);
}

void readahead_guess(struct readahead *ra, const char *key, const char *etag,
		     guint64 size)
{
	announce(ra, key, etag, size, RA_STREAMS);
}

void readahead_guess_lookup(struct readahead *ra, const char *key,
			    const char *etag, guint64 size)
{
	announce(ra, key, etag, size, RA_LOOKUPS);
}

void readahead_forget_prefetches(struct readahead *ra)
{
	g_mutex_lock(&ra->lock);
	g_queue_clear_full(&ra->announced, (GDestroyNotify)announce_free);
	g_hash_table_remove_all(ra->queued);
	g_hash_table_remove_all(ra->overtaken);
	g_hash_table_remove_all(ra->guesses);
	ra->queued_lookups = 0;
	g_mutex_unlock(&ra->lock);
}

gboolean readahead_others_ahead(struct readahead *ra)
{
	gboolean ahead;

	g_mutex_lock(&ra->lock);
	ahead = ra->announced.length > ra->queued_lookups ||
		ra->unopened.length > ra->unopened_lookups;
	g_mutex_unlock(&ra->lock);
	return ahead;
}
