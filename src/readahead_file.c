/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Open files: a small object's reads are served from its whole fetch; a
 * large object's through a sequential window of parts that grows while
 * its reads follow each other, or by a ranged GET of exactly what a
 * random read asks.
 */
#include "readahead_internal.h"

#define SEEK_TOLERANCE (1u << 20)

/* The window is at most this many times the bytes read in sequence. */
#define WINDOW_PER_READ 4

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
