/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * readahead.c - the readahead engine's life, its options and counters;
 * and what every piece of it lets go of (objects, announcements) or
 * answers readers with (serve()).
 *
 * The other pieces: readahead_whole.c (objects fetched whole, the
 * announcements that fetch them ahead) and readahead_file.c (open files:
 * reads of small objects, large objects' sequential windows of parts).
 * What they share is readahead_internal.h, with the locking rules.
 */
#include "readahead_internal.h"

#define DEF_WHOLE_MAX	   (8u << 20)
#define DEF_WINDOW_MIN	   ((1u << 20) + (128u << 10))
#define DEF_PART_SIZE	   (8u << 20)
#define DEF_MEMORY_MAX	   (G_GUINT64_CONSTANT(1) << 30)
#define DEF_PREFETCH_DEPTH 256

/* At a 20 ms first byte, 8 MiB parts need about 30 in flight to keep up
 * with 8 ranged GETs of a 2 GiB file; a 64 MiB window (9 in flight) gave
 * 0.65x of them, 256 MiB 0.99x (docs/PERFORMANCE.md). */
#define DEF_WINDOW_MAX (256u << 20)

/* Guesses fetched ahead and unopened, per prefetch_depth: one per file a
 * loader's streams can run ahead of (DLIO's 32 at 20 ms need ~8 each).
 * 1024 of them (4 x 256) made DLIO's p99 at 20 ms 3x worse: a demand GET
 * queued behind them. */
#define GUESS_DEPTH_FACTOR 1

/* -- what every piece lets go of, or answers with ---------------------- */

void announce_free(struct announce *a)
{
	g_free(a->key);
	g_free(a->etag);
	g_free(a);
}

/* Under ra->lock. */
void object_unref(struct object *obj)
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

void serve(GBytes *data, const GError *error, guint64 off, gsize size,
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
