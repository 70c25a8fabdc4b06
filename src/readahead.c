/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * readahead.c - whole-object prefetch, sequential windows, the memory
 * budget.
 *
 * Everything shared lives under ra->lock: the object table, every
 * object's and file's state, the announcement queue and the counters.
 * Callbacks to the caller (ra_read_fn) are always made without the lock.
 * Lifetimes: an object is held by each handle on it, by its announcement
 * while unopened, and by its fetch while in flight; a file by its handle
 * and by each of its GETs in flight.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "readahead.h"

#define DEF_WHOLE_MAX	   (8u << 20)
#define DEF_WINDOW_MIN	   ((1u << 20) + (128u << 10))
#define DEF_PART_SIZE	   (8u << 20)
#define DEF_MEMORY_MAX	   (G_GUINT64_CONSTANT(1) << 30)
#define DEF_PREFETCH_DEPTH 256
#define SEEK_TOLERANCE	   (1u << 20)
#define STALE_PREFETCH_US  (30 * G_USEC_PER_SEC)

/* At a 20 ms first byte, 8 MiB parts need about 30 in flight to keep up
 * with 8 ranged GETs of a 2 GiB file; a 64 MiB window (9 in flight) gave
 * 0.65x of them, 256 MiB 0.99x (docs/PERFORMANCE.md, "Readahead"). */
#define DEF_WINDOW_MAX (256u << 20)

/* The window is at most this many times the bytes read in sequence. */
#define WINDOW_PER_READ 4

/* Guesses fetched ahead and unopened, per prefetch_depth: one per file a
 * loader's streams can run ahead of (DLIO's 32 at 20 ms need ~8 each).
 * 1024 of them (4 x 256) made DLIO's p99 at 20 ms 3x worse: a demand GET
 * queued behind them. */
#define GUESS_DEPTH_FACTOR 1

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

/* A part of a large object, on the part_size grid. */
struct part {
	guint64 index;
	enum state state;
	GBytes *data;
	GError *error;
	GQueue spans; /* of struct span * waiting for it */
	guint pins;   /* spans that will read it: keep it */
};

/* A read of a large object that waits for one or two parts. */
struct span {
	struct ra_file *f;
	guint64 off;
	gsize size;
	guint pending; /* parts not ready yet */
	ra_read_fn done;
	void *user;
	GBytes *data; /* the bytes, once all parts are in */
	GError *error;
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
	GHashTable *parts;    /* index -> struct part * */
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

/* -- small objects ------------------------------------------------------ */

static void announce_free(struct announce *a)
{
	g_free(a->key);
	g_free(a->etag);
	g_free(a);
}

/* Under ra->lock. */
static void object_unref(struct object *obj)
{
	struct readahead *ra = obj->ra;

	g_assert(obj->refs > 0);
	if (--obj->refs)
		return;
	if (g_hash_table_lookup(ra->objects, obj->key) == obj)
		g_hash_table_remove(ra->objects, obj->key);
	ra->mem_used -= obj->size;
	g_clear_pointer(&obj->data, g_bytes_unref);
	g_clear_error(&obj->error);
	g_free(obj->key);
	g_free(obj->etag);
	g_free(obj);
}

static void serve(GBytes *data, const GError *error, guint64 off, gsize size,
		  ra_read_fn done, void *user)
{
	gsize len = 0;
	const guint8 *p = data ? g_bytes_get_data(data, &len) : NULL;

	if (error) {
		done(NULL, 0, error, user);
		return;
	}
	if (off >= len) {
		done(p, 0, NULL, user);
		return;
	}
	done(p + off, MIN(size, len - off), NULL, user);
}

static void start_object(struct readahead *ra, struct object *obj,
			 gboolean hedge);
static void pump(struct readahead *ra);

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
static struct object *object_new(struct readahead *ra, const char *key,
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
static void consume_announcement(struct readahead *ra, const char *key)
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
static void pump(struct readahead *ra)
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

/* -- large objects ------------------------------------------------------ */

/* Under ra->lock. */
static void file_unref(struct ra_file *f)
{
	struct readahead *ra = f->ra;

	if (--f->refs)
		return;
	if (f->obj) {
		f->obj->handles--;
		object_unref(f->obj);
	}
	if (f->parts) {
		GHashTableIter it;
		struct part *p;

		g_hash_table_iter_init(&it, f->parts);
		while (g_hash_table_iter_next(&it, NULL, (gpointer *)&p)) {
			if (p->data)
				ra->mem_used -= g_bytes_get_size(p->data);
			g_clear_pointer(&p->data, g_bytes_unref);
			g_clear_error(&p->error);
			g_free(p);
		}
		g_hash_table_unref(f->parts);
	}
	g_free(f->key);
	g_free(f->etag);
	g_free(f);
}

/* Copies the span's bytes out of its parts (one or two). Under lock. */
static GBytes *span_bytes(struct span *s, const GError **error)
{
	struct ra_file *f = s->f;
	guint64 ps = f->ra->o.part_size;
	guint64 end = MIN(s->off + s->size, f->size);
	guint64 first = s->off / ps, last = (end - 1) / ps, i;
	GByteArray *out;

	if (first == last) {
		struct part *p = g_hash_table_lookup(f->parts, &first);

		*error = p->error;
		return p->error ? NULL
				: g_bytes_new_from_bytes(p->data,
							 s->off - first * ps,
							 end - s->off);
	}
	out = g_byte_array_sized_new(end - s->off);
	for (i = first; i <= last; i++) {
		struct part *p = g_hash_table_lookup(f->parts, &i);
		guint64 from = MAX(s->off, i * ps), to = MIN(end, (i + 1) * ps);
		gsize n;
		const guint8 *d;

		if (p->error) {
			*error = p->error;
			g_byte_array_unref(out);
			return NULL;
		}
		d = g_bytes_get_data(p->data, &n);
		g_byte_array_append(out, d + (from - i * ps), to - from);
	}
	return g_byte_array_free_to_bytes(out);
}

/* Lets go of the parts @s covers (they may be freed now).  Under lock. */
static void span_unpin(struct span *s)
{
	struct ra_file *f = s->f;
	guint64 ps = f->ra->o.part_size;
	guint64 end = MIN(s->off + s->size, f->size), i;

	for (i = s->off / ps; i <= (end - 1) / ps; i++) {
		struct part *p = g_hash_table_lookup(f->parts, &i);

		g_assert(p && p->pins > 0);
		p->pins--;
	}
}

struct part_call {
	struct ra_file *f;
	struct part *p;
};

static void part_done(GBytes *data, const struct s3_object_meta *meta,
		      const GError *error, void *user)
{
	struct part_call *pc = user;
	struct ra_file *f = pc->f;
	struct readahead *ra = f->ra;
	GQueue ready = G_QUEUE_INIT;
	struct span *s;
	GList *l;

	(void)meta;
	g_mutex_lock(&ra->lock);
	if (error) {
		pc->p->state = FAILED;
		pc->p->error = g_error_copy(error);
	} else {
		pc->p->state = READY;
		pc->p->data = g_bytes_ref(data);
	}
	while ((s = g_queue_pop_head(&pc->p->spans)))
		if (--s->pending == 0)
			g_queue_push_tail(&ready, s);
	/* Copy out while the parts are surely there: once the lock is
	 * dropped, a read further on may free them. */
	for (l = ready.head; l; l = l->next) {
		const GError *e = NULL;

		s = l->data;
		s->data = span_bytes(s, &e);
		s->error = e ? g_error_copy(e) : NULL;
		span_unpin(s);
	}
	g_mutex_unlock(&ra->lock);
	for (l = ready.head; l; l = l->next) {
		s = l->data;
		serve(s->data, s->error, 0, s->size, s->done, s->user);
	}
	g_mutex_lock(&ra->lock);
	while ((s = g_queue_pop_head(&ready))) {
		g_clear_pointer(&s->data, g_bytes_unref);
		g_clear_error(&s->error);
		file_unref(s->f);
		g_free(s);
	}
	file_unref(f);
	g_mutex_unlock(&ra->lock);
	g_free(pc);
}

/* The part at @index, started if missing.  Under ra->lock. */
static struct part *get_part(struct ra_file *f, guint64 index)
{
	struct readahead *ra = f->ra;
	struct part *p = g_hash_table_lookup(f->parts, &index);
	struct s3_get_args a = {
		.if_match = f->etag,
		.endpoint = -1,
		.quick_done = TRUE,
	};
	struct part_call *pc;

	if (p)
		return p;
	p = g_new0(struct part, 1);
	p->index = index;
	p->state = FETCHING;
	g_queue_init(&p->spans);
	g_hash_table_insert(f->parts, &p->index, p);
	a.offset = index * ra->o.part_size;
	a.length = MIN(ra->o.part_size, f->size - a.offset);
	ra->mem_used += a.length;
	ra->st.parts_fetched++;
	pc = g_new0(struct part_call, 1);
	pc->f = f;
	pc->p = p;
	f->refs++;
	s3_get_async(ra->s3, f->key, &a, part_done, pc);
	return p;
}

/*
 * How far behind the furthest read the late reads of a sequential reader
 * may arrive: two of the kernel's batches, the one in flight when the
 * next one starts.
 */
static guint64 reorder_tolerance(const struct readahead *ra)
{
	return MAX(SEEK_TOLERANCE, 2 * ra->o.kernel_ra);
}

/* Frees the parts wholly before @off, less the reorder tolerance: a
 * sequential reader is past them, and so are its late reads. */
static void drop_parts_before(struct ra_file *f, guint64 off)
{
	guint64 ps = f->ra->o.part_size;
	GHashTableIter it;
	struct part *p;

	off = off > reorder_tolerance(f->ra) ? off - reorder_tolerance(f->ra)
					     : 0;

	g_hash_table_iter_init(&it, f->parts);
	while (g_hash_table_iter_next(&it, NULL, (gpointer *)&p)) {
		if ((p->index + 1) * ps > off || p->state == FETCHING ||
		    p->pins)
			continue;
		if (p->data)
			f->ra->mem_used -= g_bytes_get_size(p->data);
		g_clear_pointer(&p->data, g_bytes_unref);
		g_clear_error(&p->error);
		g_hash_table_iter_remove(&it);
		g_free(p);
	}
}

struct direct_call {
	struct ra_file *f;
	ra_read_fn done;
	void *user;
};

static void direct_done(GBytes *data, const struct s3_object_meta *meta,
			const GError *error, void *user)
{
	struct direct_call *dc = user;
	struct readahead *ra = dc->f->ra;

	(void)meta;
	serve(data, error, 0, data ? g_bytes_get_size(data) : 0, dc->done,
	      dc->user);
	g_mutex_lock(&ra->lock);
	file_unref(dc->f);
	g_mutex_unlock(&ra->lock);
	g_free(dc);
}

/* A random read: exactly the bytes asked, one GET.  Under ra->lock. */
static void read_direct(struct ra_file *f, guint64 off, gsize size,
			ra_read_fn done, void *user)
{
	struct direct_call *dc = g_new0(struct direct_call, 1);
	struct s3_get_args a = {
		.offset = off,
		.length = MIN(size, f->size - off),
		.if_match = f->etag,
		.endpoint = -1,
		.quick_done = TRUE,
	};

	dc->f = f;
	dc->done = done;
	dc->user = user;
	f->refs++;
	f->ra->st.direct_reads++;
	s3_get_async(f->ra->s3, f->key, &a, direct_done, dc);
}

/*
 * A span over the parts of [@off, @off + @size), each started if missing
 * and pinned until the span is served.  Under ra->lock; the caller serves
 * the span at once if no part is pending, else part_done() does.
 */
static struct span *read_parts(struct ra_file *f, guint64 off, gsize size,
			       ra_read_fn done, void *user)
{
	guint64 ps = f->ra->o.part_size;
	guint64 end = MIN(off + size, f->size), i;
	struct span *s = g_new0(struct span, 1);

	s->f = f;
	s->off = off;
	s->size = end - off;
	s->done = done;
	s->user = user;
	f->refs++;
	for (i = off / ps; i <= (end - 1) / ps; i++) {
		struct part *p = get_part(f, i);

		p->pins++;
		if (p->state == FETCHING) {
			s->pending++;
			g_queue_push_tail(&p->spans, s);
		}
	}
	return s;
}

/*
 * A read at the head of a sequential stream: the window grows, the parts
 * the reader is past are let go, and the parts ahead are started within
 * the memory budget.  Under lock; returns the read's span.
 */
static struct span *read_window(struct ra_file *f, guint64 off, gsize size,
				ra_read_fn done, void *user)
{
	struct readahead *ra = f->ra;
	guint64 ps = ra->o.part_size;
	guint64 end = MIN(off + size, f->size), i;
	struct span *s;

	f->window = f->window ? MIN(f->window * 2, ra->o.window_max)
			      : ra->o.window_min;
	/* Never far more ahead than the reader has read: a reader that
	 * stops early leaves little fetched for nothing. */
	f->window = MIN(f->window,
			MAX(ra->o.window_min,
			    WINDOW_PER_READ * (f->next_off - f->stream_start)));
	drop_parts_before(f, MAX(off, f->next_off));
	s = read_parts(f, off, size, done, user);
	for (i = end / ps; i * ps < MIN(end + f->window, f->size); i++) {
		if (g_hash_table_contains(f->parts, &i))
			continue;
		if (ra->mem_used + ps > ra->o.memory_max)
			break;
		get_part(f, i);
	}
	return s;
}

/*
 * Whether a read of a large object is at the head of its sequential
 * stream.  The kernel's readahead sends a batch of reads at once, up to
 * the mount's read_ahead_kb, and the FUSE threads deliver them in any
 * order.  While a stream is going, the head is the window ahead of the
 * furthest byte read so far and the two batches behind it (their parts
 * are kept); after a seek, within SEEK_TOLERANCE of the last read (a
 * batch reordered there costs a direct read or two).  Under ra->lock.
 */
static gboolean at_head(const struct ra_file *f, guint64 off)
{
	const struct readahead *ra = f->ra;
	guint64 ahead = MAX(SEEK_TOLERANCE, f->window);
	guint64 behind = f->window ? reorder_tolerance(ra) : SEEK_TOLERANCE;

	return off + behind >= f->next_off && off <= f->next_off + ahead;
}

/* Whether every part [@off, @off + @size) needs is held or on its way
 * (a failed one is not: a read elsewhere in the file asks again). */
static gboolean in_parts(struct ra_file *f, guint64 off, gsize size)
{
	guint64 ps = f->ra->o.part_size;
	guint64 end = MIN(off + size, f->size), i;

	for (i = off / ps; i <= (end - 1) / ps; i++) {
		const struct part *p = g_hash_table_lookup(f->parts, &i);

		if (!p || p->state == FAILED)
			return FALSE;
	}
	return TRUE;
}

/* -- files -------------------------------------------------------------- */

struct ra_file *readahead_open(struct readahead *ra, const char *key,
			       const char *etag, guint64 size)
{
	struct ra_file *f = g_new0(struct ra_file, 1);
	struct object *obj;

	f->ra = ra;
	f->key = g_strdup(key);
	f->etag = g_strdup(etag);
	f->size = size;
	f->refs = 1;
	g_mutex_lock(&ra->lock);
	if (size > ra->o.whole_max) {
		f->parts = g_hash_table_new(g_int64_hash, g_int64_equal);
	} else if (size > 0) {
		obj = g_hash_table_lookup(ra->objects, key);
		if (obj && g_strcmp0(obj->etag, etag) != 0) {
			/* Another version of the key (the index changed while
			 * a file held it): its holders keep it, this file
			 * fetches its own. */
			g_hash_table_steal(ra->objects, key);
			obj = NULL;
		}
		if (!obj || !obj->announced)
			consume_announcement(ra, key);
		/* Fetched for an announcement, a guess or another open. */
		f->ahead = obj != NULL;
		if (obj && obj->announced) {
			/* The announcement's reference becomes ours. */
			obj->announced = FALSE;
			g_queue_remove(&ra->unopened, obj);
			ra->st.prefetch_hits++;
			ra->st.stream_hits += obj->guess && !obj->looked_up;
			ra->st.lookup_hits += obj->looked_up;
			ra->unopened_guesses -= obj->guess;
			ra->unopened_lookups -= obj->looked_up;
		} else if (obj) {
			obj->refs++;
		} else {
			obj = object_new(ra, key, etag, size, FALSE);
		}
		f->obj = obj;
		obj->handles++;
		pump(ra);
	}
	g_mutex_unlock(&ra->lock);
	return f;
}

void readahead_read(struct ra_file *f, guint64 off, gsize size, ra_read_fn done,
		    void *user)
{
	struct readahead *ra = f->ra;
	struct span *s = NULL;
	GBytes *data = NULL;
	GError *error = NULL;

	if (off >= f->size || size == 0) {
		done(NULL, 0, NULL, user);
		return;
	}
	g_mutex_lock(&ra->lock);
	if (f->obj) {
		if (f->obj->state == FETCHING) {
			struct waiter *w = g_new0(struct waiter, 1);

			w->off = off;
			w->size = size;
			w->done = done;
			w->user = user;
			g_queue_push_tail(&f->obj->waiters, w);
			g_mutex_unlock(&ra->lock);
			return;
		}
		data = f->obj->data ? g_bytes_ref(f->obj->data) : NULL;
		error = f->obj->error ? g_error_copy(f->obj->error) : NULL;
		g_mutex_unlock(&ra->lock);
		serve(data, error, off, size, done, user);
		g_clear_pointer(&data, g_bytes_unref);
		g_clear_error(&error);
		return;
	}
	if (at_head(f, off)) {
		s = read_window(f, off, size, done, user);
		f->next_off = MAX(f->next_off, off + size);
	} else if (in_parts(f, off, size)) {
		/* Held already: served from there, the stream left as is. */
		s = read_parts(f, off, size, done, user);
	} else {
		/* A seek: a stream may start again here. */
		f->window = 0;
		read_direct(f, off, size, done, user);
		f->stream_start = off;
		f->next_off = off + size;
	}
	if (s && s->pending)
		s = NULL; /* part_done() serves it */
	if (s) {
		const GError *e = NULL;

		data = span_bytes(s, &e);
		error = e ? g_error_copy(e) : NULL;
		span_unpin(s);
		file_unref(f);
	}
	g_mutex_unlock(&ra->lock);
	if (s) {
		serve(data, error, 0, s->size, done, user);
		g_clear_pointer(&data, g_bytes_unref);
		g_clear_error(&error);
		g_free(s);
	}
}

gboolean readahead_fetched_ahead(const struct ra_file *f)
{
	return f->ahead;
}

GBytes *readahead_peek_whole(struct ra_file *f, gboolean *alone)
{
	GBytes *data = NULL;

	g_mutex_lock(&f->ra->lock);
	if (f->obj && f->obj->state == READY)
		data = g_bytes_ref(f->obj->data);
	*alone = f->obj && f->obj->handles == 1;
	g_mutex_unlock(&f->ra->lock);
	return data;
}

void readahead_release(struct ra_file *f)
{
	struct readahead *ra = f->ra;

	g_mutex_lock(&ra->lock);
	file_unref(f);
	pump(ra);
	g_mutex_unlock(&ra->lock);
}

/* -- lifecycle ---------------------------------------------------------- */

struct readahead *readahead_new(struct s3 *s3, const struct ra_options *opts)
{
	struct readahead *ra = g_new0(struct readahead, 1);

	ra->s3 = s3;
	ra->o = *opts;
	if (!ra->o.whole_max)
		ra->o.whole_max = DEF_WHOLE_MAX;
	if (!ra->o.window_min)
		ra->o.window_min = DEF_WINDOW_MIN;
	if (!ra->o.window_max)
		ra->o.window_max = DEF_WINDOW_MAX;
	if (!ra->o.part_size)
		ra->o.part_size = DEF_PART_SIZE;
	if (!ra->o.memory_max)
		ra->o.memory_max = DEF_MEMORY_MAX;
	if (!ra->o.prefetch_depth)
		ra->o.prefetch_depth = DEF_PREFETCH_DEPTH;
	ra->o.window_max = MAX(ra->o.window_max, ra->o.window_min);
	g_mutex_init(&ra->lock);
	ra->objects = g_hash_table_new(g_str_hash, g_str_equal);
	ra->queued =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	ra->overtaken =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	ra->guesses =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	g_queue_init(&ra->announced);
	g_queue_init(&ra->unopened);
	return ra;
}

guint64 readahead_whole_max(const struct readahead *ra)
{
	return ra->o.whole_max;
}

void readahead_share_bodies(struct readahead *ra)
{
	g_atomic_int_set(&ra->share_bodies, 1);
}

gboolean readahead_source_on(const struct readahead *ra, guint source)
{
	return !(ra->o.sources_off & source);
}

guint readahead_guess_depth(const struct readahead *ra)
{
	return ra->o.prefetch_depth * GUESS_DEPTH_FACTOR;
}

void readahead_free(struct readahead *ra)
{
	struct object *obj;

	if (!ra)
		return;
	g_mutex_lock(&ra->lock);
	g_queue_clear_full(&ra->announced, (GDestroyNotify)announce_free);
	while ((obj = g_queue_pop_head(&ra->unopened)))
		if (obj->announced) {
			obj->announced = FALSE;
			object_unref(obj);
		}
	g_mutex_unlock(&ra->lock);
	g_hash_table_unref(ra->objects);
	g_hash_table_unref(ra->queued);
	g_hash_table_unref(ra->overtaken);
	g_hash_table_unref(ra->guesses);
	g_mutex_clear(&ra->lock);
	g_free(ra);
}

void readahead_get_stats(struct readahead *ra, struct ra_stats *out)
{
	g_mutex_lock(&ra->lock);
	*out = ra->st;
	out->memory_used = ra->mem_used;
	out->memory_max = ra->o.memory_max;
	out->prefetch_queued = ra->announced.length;
	out->prefetch_unopened = ra->unopened.length;
	g_mutex_unlock(&ra->lock);
}
