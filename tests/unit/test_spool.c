/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_spool - listing spools and the external merge sort: records round
 * trip; random keys in random order, sorted with a memory bound small
 * enough to make many runs, then merged, come out in strictly increasing
 * byte order with every key once, its own attributes, and the first of
 * two listings of one key; merging already sorted runs that overlap (as
 * ranges listed from an out-of-order server do) drops the overlap.
 */
#include <string.h>

#include <glib/gstdio.h>

#include "spool.h"

struct fixture {
	char *dir;
};

static void setup(struct fixture *f, gconstpointer data)
{
	(void)data;
	f->dir = g_dir_make_tmp("bfs-spool-XXXXXX", NULL);
	g_assert_nonnull(f->dir);
}

static void teardown(struct fixture *f, gconstpointer data)
{
	(void)data;
	/* The spools are unlinked temporary files: nothing else is left. */
	g_assert_cmpint(g_rmdir(f->dir), ==, 0);
	g_free(f->dir);
}

/* A key that sorts differently by bytes and by UTF-16 code units. */
static char *random_key(GRand *rnd)
{
	static const char *const parts[] = {
		"a",
		"b",
		"collide",
		"collide/",
		"/child.bin",
		"\xf0\x9f\x98\x80",
		"\xee\x80\x80",
		"\xef\xbf\xbd",
		" ",
		"+",
		"%",
		"~",
		"=",
		"img_",
		"0",
		"9",
	};
	GString *s = g_string_new(NULL);
	guint n = g_rand_int_range(rnd, 1, 6), i;

	for (i = 0; i < n; i++)
		g_string_append(
			s,
			parts[g_rand_int_range(rnd, 0, G_N_ELEMENTS(parts))]);
	return g_string_free(s, FALSE);
}

static gboolean collect(const struct spool_rec *rec, void *user, GError **error)
{
	GPtrArray *out = user;

	(void)error;
	g_ptr_array_add(out, g_strdup_printf("%s|%" G_GUINT64_FORMAT "|%s",
					     rec->key->str, rec->size,
					     rec->etag->str));
	return TRUE;
}

static void test_round_trip(struct fixture *f, gconstpointer data)
{
	g_autoptr(GError) error = NULL;
	struct spool *s = spool_new(f->dir, "idx", &error);
	struct spool_rec rec;

	(void)data;
	g_assert_no_error(error);
	g_assert_true(spool_put(s, "k1", 5, -7, "\"e1\"", &error));
	g_assert_true(spool_put(s, "k\xc3\xa9 2", 0, 0, NULL, &error));
	g_assert_cmpuint(spool_count(s), ==, 2);
	g_assert_true(spool_rewind(s, &error));
	spool_rec_init(&rec);
	g_assert_true(spool_next(s, &rec, &error));
	g_assert_cmpstr(rec.key->str, ==, "k1");
	g_assert_cmpuint(rec.size, ==, 5);
	g_assert_cmpint(rec.mtime, ==, -7);
	g_assert_cmpstr(rec.etag->str, ==, "\"e1\"");
	g_assert_true(spool_next(s, &rec, &error));
	g_assert_cmpstr(rec.key->str, ==, "k\xc3\xa9 2");
	g_assert_cmpuint(rec.etag->len, ==, 0);
	g_assert_false(spool_next(s, &rec, &error));
	g_assert_no_error(error);
	spool_rec_clear(&rec);
	spool_free(s);
}

static void test_sort_merge(struct fixture *f, gconstpointer data)
{
	g_autoptr(GError) error = NULL;
	g_autoptr(GRand) rnd = g_rand_new_with_seed(42);
	g_autoptr(GHashTable) first =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	g_autoptr(GPtrArray) runs =
		g_ptr_array_new_with_free_func((GDestroyNotify)spool_free);
	g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func(g_free);
	g_autoptr(GPtrArray) want = g_ptr_array_new_with_free_func(g_free);
	g_autoptr(GList) keys = NULL;
	struct spool *s = spool_new(f->dir, "idx", &error);
	guint64 dups = 0, listed = 0;
	GList *l;
	guint i;

	(void)data;
	for (i = 0; i < 20000; i++) {
		g_autofree char *k = random_key(rnd);
		guint64 size = g_rand_int(rnd);

		g_assert_true(spool_put(s, k, size, 0, "etag", &error));
		listed++;
		if (!g_hash_table_contains(first, k))
			g_hash_table_insert(first, g_strdup(k),
					    GSIZE_TO_POINTER((gsize)size + 1));
	}
	/* About 100 bytes per record held: many runs. */
	g_assert_true(spool_sort(s, f->dir, "idx", 64 * 1024, runs, &error));
	g_assert_no_error(error);
	g_assert_cmpuint(runs->len, >, 10);
	g_assert_true(spool_merge(runs, collect, out, &dups, &error));
	g_assert_no_error(error);
	g_assert_cmpuint(out->len + dups, ==, listed);

	keys = g_hash_table_get_keys(first);
	keys = g_list_sort(keys, (GCompareFunc)strcmp);
	for (l = keys; l; l = l->next) {
		gsize size =
			GPOINTER_TO_SIZE(g_hash_table_lookup(first, l->data)) -
			1;

		g_ptr_array_add(want,
				g_strdup_printf("%s|%" G_GSIZE_FORMAT "|etag",
						(char *)l->data, size));
	}
	g_assert_cmpuint(out->len, ==, want->len);
	for (i = 0; i < out->len; i++)
		g_assert_cmpstr(g_ptr_array_index(out, i), ==,
				g_ptr_array_index(want, i));
	spool_free(s);
}

static struct spool *run_of(const char *dir, const char *const *keys)
{
	g_autoptr(GError) error = NULL;
	struct spool *s = spool_new(dir, "idx", &error);

	for (; *keys; keys++)
		g_assert_true(
			spool_put(s, *keys, strlen(*keys), 0, NULL, &error));
	g_assert_true(spool_rewind(s, &error));
	return s;
}

static void test_merge_overlap(struct fixture *f, gconstpointer data)
{
	static const char *const a[] = { "a", "b", "c", "d", NULL };
	static const char *const b[] = { "c", "d", "e", NULL };
	static const char *const c[] = { NULL };
	static const char *const d[] = { "a", "f", NULL };
	static const char *const want[] = { "a|1|", "b|1|", "c|1|",
					    "d|1|", "e|1|", "f|1|" };
	g_autoptr(GError) error = NULL;
	g_autoptr(GPtrArray) runs =
		g_ptr_array_new_with_free_func((GDestroyNotify)spool_free);
	g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func(g_free);
	guint64 dups = 0;
	guint i;

	(void)data;
	g_ptr_array_add(runs, run_of(f->dir, a));
	g_ptr_array_add(runs, run_of(f->dir, b));
	g_ptr_array_add(runs, run_of(f->dir, c));
	g_ptr_array_add(runs, run_of(f->dir, d));
	g_assert_true(spool_merge(runs, collect, out, &dups, &error));
	g_assert_cmpuint(dups, ==, 3);
	g_assert_cmpuint(out->len, ==, G_N_ELEMENTS(want));
	for (i = 0; i < out->len; i++)
		g_assert_cmpstr(g_ptr_array_index(out, i), ==, want[i]);
}

static gboolean stop_at_c(const struct spool_rec *rec, void *user,
			  GError **error)
{
	(void)user;
	if (strcmp(rec->key->str, "c") == 0) {
		g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOSPC, "full");
		return FALSE;
	}
	return TRUE;
}

static void test_merge_stops(struct fixture *f, gconstpointer data)
{
	static const char *const a[] = { "a", "b", "c", "d", NULL };
	g_autoptr(GError) error = NULL;
	g_autoptr(GPtrArray) runs =
		g_ptr_array_new_with_free_func((GDestroyNotify)spool_free);

	(void)data;
	g_ptr_array_add(runs, run_of(f->dir, a));
	g_assert_false(spool_merge(runs, stop_at_c, NULL, NULL, &error));
	g_assert_error(error, G_FILE_ERROR, G_FILE_ERROR_NOSPC);
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add("/spool/round-trip", struct fixture, NULL, setup,
		   test_round_trip, teardown);
	g_test_add("/spool/sort-merge", struct fixture, NULL, setup,
		   test_sort_merge, teardown);
	g_test_add("/spool/merge-overlap", struct fixture, NULL, setup,
		   test_merge_overlap, teardown);
	g_test_add("/spool/merge-stops", struct fixture, NULL, setup,
		   test_merge_stops, teardown);
	return g_test_run();
}
