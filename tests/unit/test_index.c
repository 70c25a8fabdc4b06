/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_index - the persisted listing index: the key -> path rules, lookup,
 * readdir and attributes on real files, stable inode numbers, and every way
 * an index file can be bad (missing, truncated, bit-flipped, another
 * version, another bucket, a planted symlink, a full disk).
 *
 * Each test works in its own g_dir_make_tmp() directory.  The ENOSPC test
 * mounts a 1 MiB tmpfs there and skips when it cannot (not root, no
 * CAP_SYS_ADMIN).  With -m perf, test_perf builds 1,000,000 keys and
 * reports build time, bytes per object, open time and lookup time.
 */
#include <errno.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "error.h"
#include "index.h"
#include "index_reseal.h"

#define MD5	  "0123456789abcdef0123456789abcdef"
#define MD5_EMPTY "d41d8cd98f00b204e9800998ecf8427e"
#define NO_ID	  G_MAXUINT64

struct fixture {
	char *dir;
};

struct key {
	const char *key;
	guint64 size;
	gint64 mtime;
	const char *etag;
};

static void rm_rf(const char *path)
{
	GDir *dir;
	const char *name;
	struct stat st;

	if (lstat(path, &st) < 0)
		return;
	if (!S_ISDIR(st.st_mode)) {
		g_unlink(path);
		return;
	}
	dir = g_dir_open(path, 0, NULL);
	while (dir && (name = g_dir_read_name(dir))) {
		g_autofree char *child = g_build_filename(path, name, NULL);

		rm_rf(child);
	}
	if (dir)
		g_dir_close(dir);
	g_rmdir(path);
}

static void fixture_setup(struct fixture *f, gconstpointer data)
{
	g_autoptr(GError) error = NULL;

	(void)data;
	f->dir = g_dir_make_tmp("bfs-index-XXXXXX", &error);
	g_assert_no_error(error);
}

static void fixture_teardown(struct fixture *f, gconstpointer data)
{
	(void)data;
	rm_rf(f->dir);
	g_free(f->dir);
}

static char *fpath(struct fixture *f, const char *name)
{
	return g_build_filename(f->dir, name, NULL);
}

/* Names in @dir, sorted, joined by ' '; "" when empty. */
static char *dir_listing(const char *dir)
{
	g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
	GDir *d = g_dir_open(dir, 0, NULL);
	const char *name;

	g_assert_nonnull(d);
	while ((name = g_dir_read_name(d)))
		g_ptr_array_add(names, g_strdup(name));
	g_dir_close(d);
	g_ptr_array_sort(names, (GCompareFunc)g_ascii_strcasecmp);
	g_ptr_array_add(names, NULL);
	return g_strjoinv(" ", (char **)names->pdata);
}

static int key_cmp(gconstpointer a, gconstpointer b)
{
	return strcmp(((const struct key *)a)->key,
		      ((const struct key *)b)->key);
}

static gboolean build_keys(const char *path, const char *bucket,
			   const char *prefix, const struct key *keys, gsize n,
			   struct index_stats *st, GError **error)
{
	g_autofree struct key *sorted = g_memdup2(keys, n * sizeof(*keys));
	g_autoptr(index_writer) w = NULL;

	if (n > 0)
		qsort(sorted, n, sizeof(*sorted), key_cmp);
	w = index_writer_new(path, bucket, prefix, error);
	if (!w)
		return FALSE;
	for (gsize i = 0; i < n; i++) {
		if (!index_writer_add(w, sorted[i].key, sorted[i].size,
				      sorted[i].mtime, sorted[i].etag, error))
			return FALSE;
	}
	return index_writer_commit(w, st, error);
}

static struct index *open_ok(const char *path, const char *bucket,
			     const char *prefix)
{
	g_autoptr(GError) error = NULL;
	struct index *idx = index_open(path, bucket, prefix, &error);

	g_assert_no_error(error);
	g_assert_nonnull(idx);
	index_verify(idx, &error);
	g_assert_no_error(error);
	return idx;
}

/* The id at the relative path @path ("" for the root), or NO_ID. */
static index_id resolve(struct index *idx, const char *path)
{
	g_auto(GStrv) parts = NULL;
	index_id id = INDEX_ROOT;

	if (!*path)
		return INDEX_ROOT;
	parts = g_strsplit(path, "/", -1);
	for (guint i = 0; parts[i]; i++) {
		if (!index_lookup(idx, id, parts[i], strlen(parts[i]), &id))
			return NO_ID;
	}
	return id;
}

/* The names readdir gives for @path, escaped, each followed by ' ' (and
 * '/' before it for directories). */
static char *listing(struct index *idx, const char *path)
{
	GString *out = g_string_new(NULL);
	index_id dir = resolve(idx, path), child;
	guint64 pos = 0;

	g_assert_cmpuint(dir, !=, NO_ID);
	while (index_child_at(idx, dir, pos, &child, &pos)) {
		gsize len;
		const char *name = index_name(idx, child, &len);
		g_autofree char *esc = g_strescape(name, NULL);

		g_assert_nonnull(name);
		g_assert_cmpuint(strlen(name), ==, len);
		g_assert_cmpuint(index_parent(idx, child), ==, dir);
		g_string_append_printf(
			out, "%s%s ", index_is_dir(idx, child) ? "/" : "", esc);
	}
	return g_string_free(out, FALSE);
}

static void check_listing(struct index *idx, const char *path, const char *want)
{
	g_autofree char *got = listing(idx, path);

	g_assert_cmpstr(got, ==, want);
}

static void check_file(struct index *idx, const char *path, guint64 size,
		       gint64 mtime, const char *etag, const char *key)
{
	index_id id = resolve(idx, path);
	struct index_attr a;
	g_autofree char *got_key = NULL;
	g_autofree char *got_etag = NULL;

	g_assert_cmpuint(id, !=, NO_ID);
	index_get_attr(idx, id, &a);
	g_assert_false(a.is_dir);
	g_assert_cmpuint(a.size, ==, size);
	g_assert_cmpint(a.mtime, ==, mtime);
	got_key = index_key(idx, id);
	g_assert_cmpstr(got_key, ==, key);
	g_assert_cmpuint(a.ino, ==, index_key_ino(key, -1));
	got_etag = index_etag(idx, id);
	g_assert_cmpstr(got_etag, ==, etag);
}

static void check_dir(struct index *idx, const char *path, gint64 mtime,
		      guint64 nchildren, const char *key)
{
	index_id id = resolve(idx, path);
	struct index_attr a;
	g_autofree char *got_key = NULL;
	g_autofree char *got_etag = NULL;

	g_assert_cmpuint(id, !=, NO_ID);
	index_get_attr(idx, id, &a);
	g_assert_true(a.is_dir);
	g_assert_cmpuint(a.size, ==, 0);
	g_assert_cmpint(a.mtime, ==, mtime);
	g_assert_cmpuint(a.nchildren, ==, nchildren);
	got_key = index_key(idx, id);
	g_assert_cmpstr(got_key, ==, key);
	if (id == INDEX_ROOT)
		g_assert_cmpuint(a.ino, ==, INDEX_ROOT_INO);
	else
		g_assert_cmpuint(a.ino, ==, index_key_ino(key, -1));
	got_etag = index_etag(idx, id);
	g_assert_null(got_etag);
}

/* What index_verify() promises: a consistent tree, every child found. */
static void walk_strict(struct index *idx, index_id dir)
{
	index_id child, id;
	guint64 pos = 0, want = 0;
	struct index_attr da;

	index_get_attr(idx, dir, &da);
	while (index_child_at(idx, dir, pos, &child, &pos)) {
		struct index_attr a;
		gsize len;
		const char *name = index_name(idx, child, &len);
		g_autofree char *key = index_key(idx, child);

		g_assert_cmpuint(pos, ==, ++want);
		g_assert_nonnull(name);
		g_assert_nonnull(key);
		g_assert_true(index_lookup(idx, dir, name, len, &id));
		g_assert_cmpuint(id, ==, child);
		g_assert_cmpuint(index_parent(idx, child), ==, dir);
		index_get_attr(idx, child, &a);
		g_assert_cmpuint(a.ino, ==, index_key_ino(key, -1));
		if (a.is_dir)
			walk_strict(idx, child);
	}
	g_assert_cmpuint(want, ==, da.nchildren);
}

/* Every mapping case of docs/INDEX-FORMAT.md, "From keys to paths". */
static const struct key mapping_keys[] = {
	{ "ds/", 0, 500, NULL },    /* the root's marker */
	{ "ds//lead", 1, 1, NULL }, /* empty component */
	{ "ds/../up", 1, 1, NULL }, /* dot components */
	{ "ds/./x", 1, 1, NULL },
	{ "ds/...", 3, 10, MD5 }, /* a legal name */
	{ "ds/.hidden", 4, 11, "\"" MD5 "\"" },
	{ "ds/a", 5, 12, MD5 },		 /* hidden by the dir a */
	{ "ds/a!", 6, 13, MD5 "-17" },	 /* sorts between a and a/ */
	{ "ds/a/", 0, 1000, MD5_EMPTY }, /* marker */
	{ "ds/a//x", 1, 1, NULL },
	{ "ds/a/b", 7, 14, "W/\"weak\"" },
	{ "ds/a/c/", 0, 2000, NULL },
	{ "ds/a/c/d", 8, 15, "0123456789ABCDEF0123456789ABCDEF" },
	{ "ds/bad\xff\xfe", 9, 16, NULL }, /* not UTF-8: shown */
	{ "ds/ctl\x01\x7f", 10, 17, "" },  /* control bytes: shown */
	{ "ds/e/..", 1, 1, NULL },
	{ "ds/implied/deep/file", 11, 18, MD5 "-3" },
	{ "ds/long/"
	  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
	  1, 1, NULL },		  /* 256 bytes */
	{ "ds/m/", 5, 19, NULL }, /* a marker with data */
	{ "ds/p", 1, 1, NULL },	  /* hidden by p/ */
	{ "ds/p!", 2, 1, NULL },  /* hidden by p!/ */
	{ "ds/p!/q", 3, 20, NULL },
	{ "ds/p-", 4, 20, NULL },
	{ "ds/p/r", 5, 20, NULL },
	{ "ds/zz/", 0, 21, NULL },
};

static void check_mapping(struct index *idx, gint64 created)
{
	check_listing(idx, "",
		      "... .hidden a! /a bad\\377\\376 ctl\\001\\177 /e "
		      "/implied /long /m /p! p- /p /zz ");
	check_listing(idx, "a", "b /c ");
	check_listing(idx, "a/c", "d ");
	check_listing(idx, "p!", "q ");
	check_listing(idx, "p", "r ");
	check_listing(idx, "implied", "/deep ");
	check_listing(idx, "implied/deep", "file ");
	check_listing(idx, "e", "");
	check_listing(idx, "long", "");
	check_listing(idx, "zz", "");

	check_dir(idx, "", 500, 14, "ds/");
	check_dir(idx, "a", 1000, 2, "ds/a/");
	check_dir(idx, "a/c", 2000, 1, "ds/a/c/");
	check_dir(idx, "m", 19, 0, "ds/m/");
	check_dir(idx, "zz", 21, 0, "ds/zz/");
	check_dir(idx, "e", created, 0, "ds/e/");
	check_dir(idx, "implied/deep", created, 1, "ds/implied/deep/");
	check_dir(idx, "p", created, 1, "ds/p/");

	check_file(idx, "...", 3, 10, MD5, "ds/...");
	check_file(idx, ".hidden", 4, 11, MD5, "ds/.hidden");
	check_file(idx, "a!", 6, 13, MD5 "-17", "ds/a!");
	check_file(idx, "a/b", 7, 14, "W/\"weak\"", "ds/a/b");
	check_file(idx, "a/c/d", 8, 15, "0123456789ABCDEF0123456789ABCDEF",
		   "ds/a/c/d");
	check_file(idx, "bad\xff\xfe", 9, 16, NULL, "ds/bad\xff\xfe");
	check_file(idx, "ctl\x01\x7f", 10, 17, NULL, "ds/ctl\x01\x7f");
	check_file(idx, "implied/deep/file", 11, 18, MD5 "-3",
		   "ds/implied/deep/file");
	check_file(idx, "p-", 4, 20, NULL, "ds/p-");
	check_file(idx, "p!/q", 3, 20, NULL, "ds/p!/q");
}

static void check_mapping_negative(struct index *idx)
{
	index_id id = 12345, file = resolve(idx, "a/b");
	static const char *const absent[] = {
		"lead", "up",	"x",	"a/x",	   "long/x", ".",
		"..",	"e/..", "a//b", "a/c/d/e", "a!/x",   "zz/x",
	};

	for (guint i = 0; i < G_N_ELEMENTS(absent); i++)
		g_assert_cmpuint(resolve(idx, absent[i]), ==, NO_ID);
	g_assert_false(index_lookup(idx, INDEX_ROOT, "a/b", 3, &id));
	g_assert_false(index_lookup(idx, INDEX_ROOT, "a\0b", 3, &id));
	g_assert_false(index_lookup(idx, INDEX_ROOT, ".", 1, &id));
	g_assert_false(index_lookup(idx, INDEX_ROOT, "..", 2, &id));
	g_assert_false(index_lookup(idx, file, "x", 1, &id));
	g_assert_false(index_lookup(idx, G_MAXUINT64 - 1, "a", 1, &id));
	g_assert_cmpuint(id, ==, 12345);
	/* The shadowed file "p" is gone; the directory answers. */
	g_assert_true(index_lookup(idx, INDEX_ROOT, "p", 1, &id));
	g_assert_true(index_is_dir(idx, id));
	/* "ds/a" was hidden: "a" is the directory. */
	g_assert_true(index_is_dir(idx, resolve(idx, "a")));
	g_assert_cmpuint(index_parent(idx, INDEX_ROOT), ==, INDEX_ROOT);
	g_assert_cmpuint(index_parent(idx, resolve(idx, "a/c/d")), ==,
			 resolve(idx, "a/c"));
	g_assert_null(index_name(idx, G_MAXUINT64, NULL));
	g_assert_null(index_key(idx, G_MAXUINT64));
	g_assert_null(index_etag(idx, G_MAXUINT64));
	g_assert_false(index_child_at(idx, file, 0, &id, NULL));
}

static void check_mapping_stats(const struct index_stats *st)
{
	g_assert_cmpuint(st->keys, ==, G_N_ELEMENTS(mapping_keys));
	g_assert_cmpuint(st->files, ==, 11);
	g_assert_cmpuint(st->dirs, ==, 10);
	g_assert_cmpuint(st->markers, ==, 4);
	g_assert_cmpuint(st->shadowed, ==, 4);
	g_assert_cmpuint(st->skipped_empty, ==, 2);
	g_assert_cmpuint(st->skipped_dot, ==, 3);
	g_assert_cmpuint(st->skipped_long, ==, 1);
	g_assert_cmpuint(st->skipped_deep, ==, 0);
	g_assert_cmpuint(st->bytes, ==,
			 3 + 4 + 6 + 7 + 8 + 9 + 10 + 11 + 4 + 3 + 5);
	g_assert_cmpuint(st->entries, ==, 22);
	g_assert_cmpuint(st->version, ==, INDEX_FORMAT_VERSION);
	g_assert_cmpuint(st->keys, ==,
			 st->files + st->markers + st->shadowed +
				 st->skipped_empty + st->skipped_dot +
				 st->skipped_long + st->skipped_deep);
}

static void test_mapping(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "map.idx");
	g_autoptr(GError) error = NULL;
	struct index_stats built, opened;
	struct index *idx;
	gint64 before = g_get_real_time() / G_USEC_PER_SEC;

	(void)data;
	build_keys(path, "bkt", "ds/", mapping_keys, G_N_ELEMENTS(mapping_keys),
		   &built, &error);
	g_assert_no_error(error);
	check_mapping_stats(&built);
	g_assert_cmpint(built.created, >=, before);
	g_assert_cmpint(built.created, <=, g_get_real_time() / G_USEC_PER_SEC);

	idx = open_ok(path, "bkt", "ds/");
	walk_strict(idx, INDEX_ROOT);
	index_get_stats(idx, &opened);
	g_assert_cmpmem(&opened, sizeof(opened), &built, sizeof(built));
	g_assert_cmpstr(index_bucket(idx), ==, "bkt");
	g_assert_cmpstr(index_prefix(idx), ==, "ds/");
	g_assert_cmpstr(index_path(idx), ==, path);
	check_mapping(idx, built.created);
	check_mapping_negative(idx);
	index_unref(idx);
}

/* An index of nothing: the root alone. */
static void test_empty(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "empty.idx");
	g_autoptr(GError) error = NULL;
	struct index_stats st;
	struct index *idx;
	index_id id;

	(void)data;
	build_keys(path, "bkt", NULL, NULL, 0, &st, &error);
	g_assert_no_error(error);
	g_assert_cmpuint(st.entries, ==, 1);
	idx = open_ok(path, "bkt", "");
	check_listing(idx, "", "");
	check_dir(idx, "", st.created, 0, "");
	g_assert_false(index_lookup(idx, INDEX_ROOT, "a", 1, &id));
	g_assert_false(index_child_at(idx, INDEX_ROOT, 0, &id, NULL));
	index_unref(idx);
}

/* Keys past INDEX_DEPTH_MAX components are skipped; the path above stays. */
static void test_deep(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "deep.idx");
	g_autoptr(GString) key = g_string_new(NULL);
	g_autoptr(GError) error = NULL;
	struct key keys[2];
	struct index_stats st;
	struct index *idx;
	index_id id = INDEX_ROOT;
	g_autofree char *back = NULL;

	(void)data;
	for (int i = 0; i < INDEX_DEPTH_MAX; i++)
		g_string_append(key, "d/");
	keys[0] = (struct key){ g_strconcat(key->str, "f", NULL), 1, 1, NULL };
	keys[1] =
		(struct key){ g_strconcat(key->str, "g/h", NULL), 1, 1, NULL };
	build_keys(path, "bkt", "", keys, 2, &st, &error);
	g_free((char *)keys[0].key);
	g_free((char *)keys[1].key);
	g_assert_no_error(error);
	g_assert_cmpuint(st.files, ==, 0);
	g_assert_cmpuint(st.dirs, ==, INDEX_DEPTH_MAX);
	g_assert_cmpuint(st.skipped_deep, ==, 2);

	idx = open_ok(path, "bkt", "");
	for (int i = 0; i < INDEX_DEPTH_MAX; i++)
		g_assert_true(index_lookup(idx, id, "d", 1, &id));
	g_assert_false(index_child_at(idx, id, 0, &id, NULL));
	back = index_key(idx, id);
	g_assert_cmpstr(back, ==, key->str);
	index_unref(idx);
}

/*
 * A file hidden by a directory far behind it: between "a" and "a/" lie
 * all the names "a" + a byte below '/', here enough of them that the
 * record of "a" is already on disk when "a/x" arrives.
 */
static void test_shadow_far(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "far.idx");
	g_autoptr(GError) error = NULL;
	g_autoptr(index_writer) w = index_writer_new(path, "bkt", "", &error);
	struct index_stats st;
	struct index *idx;
	index_id id;
	guint n = 5000;

	(void)data;
	g_assert_no_error(error);
	index_writer_add(w, "a", 100, 1, NULL, &error);
	g_assert_no_error(error);
	for (guint i = 0; i < n; i++) {
		g_autofree char *key = g_strdup_printf("a!%06u", i);

		index_writer_add(w, key, 1, 1, "W/odd", &error);
		g_assert_no_error(error);
	}
	index_writer_add(w, "a/x", 7, 1, NULL, &error);
	g_assert_no_error(error);
	index_writer_commit(w, &st, &error);
	g_assert_no_error(error);
	g_assert_cmpuint(st.shadowed, ==, 1);
	g_assert_cmpuint(st.files, ==, n + 1);
	g_assert_cmpuint(st.bytes, ==, n + 7);

	idx = open_ok(path, "bkt", "");
	g_assert_true(index_lookup(idx, INDEX_ROOT, "a", 1, &id));
	g_assert_true(index_is_dir(idx, id));
	g_assert_true(index_child_at(idx, INDEX_ROOT, n, &id, NULL));
	g_assert_cmpstr(index_name(idx, id, NULL), ==, "a");
	g_assert_false(index_child_at(idx, INDEX_ROOT, n + 1, &id, NULL));
	walk_strict(idx, INDEX_ROOT);
	index_unref(idx);
}

/* Times before 1970 are kept; beyond +-2^47 s they are clamped. */
static void test_mtime_range(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "t.idx");
	g_autoptr(GError) error = NULL;
	static const struct key keys[] = {
		{ "a", 1, -86400, NULL },
		{ "b", 1, G_MININT64, NULL },
		{ "c", 1, G_MAXINT64, NULL },
		{ "d/", 0, -1, NULL },
	};
	gint64 max = (G_GINT64_CONSTANT(1) << 47) - 1;
	struct index *idx;
	struct index_attr a;

	(void)data;
	build_keys(path, "bkt", "", keys, G_N_ELEMENTS(keys), NULL, &error);
	g_assert_no_error(error);
	idx = open_ok(path, "bkt", "");
	index_get_attr(idx, resolve(idx, "a"), &a);
	g_assert_cmpint(a.mtime, ==, -86400);
	index_get_attr(idx, resolve(idx, "b"), &a);
	g_assert_cmpint(a.mtime, ==, -max - 1);
	index_get_attr(idx, resolve(idx, "c"), &a);
	g_assert_cmpint(a.mtime, ==, max);
	index_get_attr(idx, resolve(idx, "d"), &a);
	g_assert_cmpint(a.mtime, ==, -1);
	index_unref(idx);
}

static void add_ok(struct index_writer *w, const char *key)
{
	g_autoptr(GError) error = NULL;

	index_writer_add(w, key, 1, 1, NULL, &error);
	g_assert_no_error(error);
}

static void add_fails(struct index_writer *w, const char *key, const char *etag,
		      const char *want)
{
	g_autoptr(GError) error = NULL;

	g_assert_false(index_writer_add(w, key, 1, 1, etag, &error));
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_nonnull(strstr(error->message, want));
}

/* Rejected keys leave the writer usable. */
static void test_order(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "order.idx");
	g_autoptr(GError) error = NULL;
	g_autofree char *huge = g_strnfill(70000, 'e');
	struct index_writer *w;
	struct index_stats st;
	struct index *idx;

	(void)data;
	w = index_writer_new(path, "bkt", "p/", &error);
	g_assert_no_error(error);
	add_ok(w, "p/b");
	add_fails(w, "p/a", NULL,
		  "key 'p/a' is not after the previous key 'p/b'");
	add_fails(w, "p/b", NULL, "key 'p/b' is not after");
	add_fails(w, "q/c", NULL, "key 'q/c' is not under the prefix 'p/'");
	add_fails(w, "p/\x01\n", NULL, "key 'p/\\x01\\x0a' is not after");
	add_fails(w, "p/c", huge, "ETag of 70000 bytes");
	add_ok(w, "p/c");
	index_writer_commit(w, &st, &error);
	g_assert_no_error(error);
	index_writer_free(w);
	g_assert_cmpuint(st.keys, ==, 2);
	idx = open_ok(path, "bkt", "p/");
	check_listing(idx, "", "b c ");
	index_unref(idx);

	w = index_writer_new(path, "bkt", "no-slash", &error);
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_null(w);
	g_clear_error(&error);
	w = index_writer_new(path, "b/kt", "", &error);
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_null(w);
}

/* Zero-padded so that name order is number order. */
static char *flat_key(guint i, guint n)
{
	return g_strdup_printf("train/img_%06u_of_%u.jpeg", i, n);
}

static void build_flat(const char *path, const char *bucket, const char *prefix,
		       guint n)
{
	g_autoptr(GError) error = NULL;
	g_autoptr(index_writer) w =
		index_writer_new(path, bucket, prefix, &error);
	struct index_stats st;

	g_assert_no_error(error);
	for (guint i = 0; i < n; i++) {
		g_autofree char *key = flat_key(i, n);

		index_writer_add(w, key, 322624, 1700000000 + i, MD5, &error);
		g_assert_no_error(error);
	}
	index_writer_commit(w, &st, &error);
	g_assert_no_error(error);
	g_assert_cmpuint(st.files, ==, n);
	g_assert_cmpuint(st.dirs, ==, *prefix ? 0 : 1);
}

#define FLAT_N 200000

static void check_flat_dir(struct index *idx, index_id dir, guint n)
{
	g_autoptr(GHashTable) inos =
		g_hash_table_new(g_int64_hash, g_int64_equal);
	g_autofree guint64 *ino = g_new(guint64, n);
	index_id first = NO_ID, child;
	guint64 next;
	struct index_attr a;

	index_get_attr(idx, dir, &a);
	g_assert_cmpuint(a.nchildren, ==, n);
	for (guint64 pos = 0; pos < n; pos++) {
		g_autofree char *want = flat_key(pos, n);
		g_autofree char *key = NULL;

		/* Resuming at any offset gives the same child. */
		g_assert_true(index_child_at(idx, dir, pos, &child, &next));
		g_assert_cmpuint(next, ==, pos + 1);
		if (first == NO_ID)
			first = child;
		g_assert_cmpuint(child, ==, first + pos);
		key = index_key(idx, child);
		g_assert_cmpstr(key + strlen(key) - strlen(want), ==, want);
		index_get_attr(idx, child, &a);
		g_assert_cmpint(a.mtime, ==, 1700000000 + (gint64)pos);
		ino[pos] = a.ino;
		g_assert_cmpuint(a.ino, >, 1);
		g_assert_true(g_hash_table_add(inos, &ino[pos]));
	}
	g_assert_false(index_child_at(idx, dir, n, &child, &next));
	g_assert_false(index_child_at(idx, dir, G_MAXUINT64, &child, &next));
}

static void check_flat_lookups(struct index *idx, index_id dir, guint n)
{
	index_id id;

	for (guint i = 0; i < n; i++) {
		g_autofree char *key = flat_key(i, n);
		const char *name = strrchr(key, '/') + 1;
		gsize len;

		g_assert_true(index_lookup(idx, dir, name, strlen(name), &id));
		g_assert_cmpstr(index_name(idx, id, &len), ==, name);
	}
	g_assert_false(index_lookup(idx, dir, "img_", 4, &id));
	g_assert_false(index_lookup(idx, dir, "zzz", 3, &id));
	g_assert_false(
		index_lookup(idx, dir, "img_000000_of_200000.jpeg!", 26, &id));
}

static void test_flat(struct fixture *f, gconstpointer data)
{
	g_autofree char *p1 = fpath(f, "flat1.idx");
	g_autofree char *p2 = fpath(f, "flat2.idx");
	g_autofree char *p3 = fpath(f, "flat3.idx");
	struct index *a, *b, *c;
	index_id da, db, id;
	struct index_attr x, y;

	(void)data;
	build_flat(p1, "bkt", "", FLAT_N);
	a = open_ok(p1, "bkt", "");
	g_assert_true(index_lookup(a, INDEX_ROOT, "train", 5, &da));
	check_flat_dir(a, da, FLAT_N);
	check_flat_lookups(a, da, FLAT_N);

	/* Another build gives the same inode numbers... */
	g_usleep(G_USEC_PER_SEC / 10);
	build_flat(p2, "bkt", "", FLAT_N);
	b = open_ok(p2, "bkt", "");
	g_assert_true(index_lookup(b, INDEX_ROOT, "train", 5, &db));
	for (guint i = 0; i < FLAT_N; i += 997) {
		index_get_attr(a, da + 1 + i, &x);
		index_get_attr(b, db + 1 + i, &y);
		g_assert_cmpuint(x.ino, ==, y.ino);
	}
	index_get_attr(a, da, &x);
	index_get_attr(b, db, &y);
	g_assert_cmpuint(x.ino, ==, y.ino);

	/* ...and so does a mount of the prefix: the key is the same. */
	build_flat(p3, "bkt", "train/", 1000);
	c = open_ok(p3, "bkt", "train/");
	g_assert_true(index_lookup(c, INDEX_ROOT, "img_000042_of_1000.jpeg", 23,
				   &id));
	index_get_attr(c, id, &y);
	g_assert_cmpuint(y.ino, ==,
			 index_key_ino("train/img_000042_of_1000.jpeg", -1));
	index_unref(a);
	index_unref(b);
	index_unref(c);
}

/* Known values of XXH64 with seed 0, which index_key_ino() is. */
static void test_ino_hash(void)
{
	g_assert_cmpuint(index_key_ino("", 0), ==,
			 G_GUINT64_CONSTANT(0xEF46DB3751D8E999));
	g_assert_cmpuint(index_key_ino("abc", -1), ==,
			 G_GUINT64_CONSTANT(0x44BC2CF5AD770999));
	g_assert_cmpuint(index_key_ino("a/", -1), !=, index_key_ino("a", -1));
}

/* --- bad files ------------------------------------------------------------ */

static void build_mapping(const char *path)
{
	g_autoptr(GError) error = NULL;

	build_keys(path, "bkt", "ds/", mapping_keys, G_N_ELEMENTS(mapping_keys),
		   NULL, &error);
	g_assert_no_error(error);
}

static void write_bytes(const char *path, const void *data, gsize len)
{
	g_autoptr(GError) error = NULL;

	g_file_set_contents(path, data, len, &error);
	g_assert_no_error(error);
}

static void open_fails(const char *path, const char *bucket, const char *prefix,
		       int code, const char *want)
{
	g_autoptr(GError) error = NULL;
	struct index *idx = index_open(path, bucket, prefix, &error);

	g_assert_null(idx);
	g_assert_error(error, BFS_ERROR, code);
	if (want && !strstr(error->message, want))
		g_error("'%s' does not hold '%s'", error->message, want);
	g_assert_cmpint(bfs_error_errno(error), ==, code);
}

/* Every accessor on everything reachable, bounded; nothing may crash. */
static void walk(struct index *idx, index_id dir, guint *budget)
{
	index_id child, id;
	guint64 pos = 0;

	while (*budget > 0 && index_child_at(idx, dir, pos, &child, &pos)) {
		struct index_attr a;
		gsize len;
		const char *name = index_name(idx, child, &len);
		(*budget)--;
		g_free(index_key(idx, child));
		g_free(index_etag(idx, child));
		index_get_attr(idx, child, &a);
		index_parent(idx, child);
		if (name)
			index_lookup(idx, dir, name, len, &id);
		if (index_is_dir(idx, child))
			walk(idx, child, budget);
	}
}

static void test_truncated(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "t.idx");
	g_autofree char *cut = fpath(f, "cut.idx");
	g_autofree char *buf = NULL;
	gsize len;

	(void)data;
	build_mapping(path);
	g_assert_true(g_file_get_contents(path, &buf, &len, NULL));
	for (gsize n = 0; n < len; n++) {
		write_bytes(cut, buf, n);
		open_fails(cut, "bkt", "ds/", EBADMSG, NULL);
	}
	write_bytes(cut, buf, len - 10);
	open_fails(cut, "bkt", "ds/", EBADMSG, "(truncated?)");
	write_bytes(cut, buf, 100);
	open_fails(cut, "bkt", "ds/", EBADMSG, "too short");
	/* Appended bytes are as bad as missing ones. */
	buf = g_realloc(buf, len + 1);
	buf[len] = 0;
	write_bytes(cut, buf, len + 1);
	open_fails(cut, "bkt", "ds/", EBADMSG, NULL);
}

/* Flips one bit at every offset: index_open() or index_verify() rejects. */
static void test_bitflip(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "b.idx");
	g_autofree char *bad = fpath(f, "bad.idx");
	g_autofree char *buf = NULL;
	gsize len;
	guint opened = 0;

	(void)data;
	build_mapping(path);
	g_assert_true(g_file_get_contents(path, &buf, &len, NULL));
	for (gsize off = 0; off < len; off++) {
		g_autoptr(GError) error = NULL;
		struct index *idx;
		guint budget = 1000;

		buf[off] ^= 1 << (off % 8);
		write_bytes(bad, buf, len);
		buf[off] ^= 1 << (off % 8);
		idx = index_open(bad, "bkt", "ds/", &error);
		if (!idx) {
			g_assert_true(error->code == EBADMSG ||
				      error->code == EPROTO ||
				      error->code == ESRCH);
			continue;
		}
		opened++;
		walk(idx, INDEX_ROOT, &budget);
		g_assert_false(index_verify(idx, &error));
		g_assert_error(error, BFS_ERROR, EBADMSG);
		index_unref(idx);
	}
	/* The body is only checked by index_verify(). */
	g_assert_cmpuint(opened, >, len / 2);
}

/*
 * Damage that keeps the checksums right (a buggy writer, or a forged
 * file): the accessors stay in bounds and index_verify() finds it.
 */
static void test_resealed_damage(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "r.idx");
	g_autofree char *bad = fpath(f, "bad.idx");
	g_autofree char *buf = NULL;
	gsize len;
	guint opened = 0, rejected = 0;
	static const guint8 values[] = { 0x00, 0xff, 0x01, 0x2f, 0x80 };

	(void)data;
	build_mapping(path);
	g_assert_true(g_file_get_contents(path, &buf, &len, NULL));
	for (gsize off = 0; off < len; off++) {
		g_autofree char *copy = g_memdup2(buf, len);
		g_autoptr(GError) error = NULL;
		struct index *idx;
		guint budget = 1000;

		copy[off] = values[off % G_N_ELEMENTS(values)];
		if (copy[off] == buf[off])
			continue;
		index_reseal(copy, len);
		write_bytes(bad, copy, len);
		idx = index_open(bad, NULL, NULL, &error);
		if (!idx)
			continue;
		opened++;
		walk(idx, INDEX_ROOT, &budget);
		if (!index_verify(idx, &error)) {
			g_assert_error(error, BFS_ERROR, EBADMSG);
			rejected++;
		} else {
			/* Sizes, times, MD5s, name bytes: undetectable. */
			walk_strict(idx, INDEX_ROOT);
		}
		index_unref(idx);
	}
	g_assert_cmpuint(opened, >, 0);
	g_assert_cmpuint(rejected, >, opened / 3);
}

static void test_version(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "v.idx");
	g_autofree char *buf = NULL;
	gsize len;

	(void)data;
	build_mapping(path);
	g_assert_true(g_file_get_contents(path, &buf, &len, NULL));
	buf[8] = 3; /* the version, little-endian */
	index_reseal(buf, len);
	write_bytes(path, buf, len);
	open_fails(path, "bkt", "ds/", EPROTO,
		   "format version 3, this bucketfs reads version 1");
	memcpy(buf, "NOTANIDX", 8);
	write_bytes(path, buf, len);
	open_fails(path, "bkt", "ds/", EBADMSG, "bad magic");
}

static void test_binding(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "bind.idx");
	g_autofree char *want = NULL;
	struct index *idx;

	(void)data;
	build_mapping(path);
	want = g_strdup_printf("index %s: was built for s3://bkt/ds/ not "
			       "s3://other/ds/",
			       path);
	open_fails(path, "other", "ds/", ESRCH, want);
	open_fails(path, "bkt", "", ESRCH, "not s3://bkt/");
	open_fails(path, "bkt", NULL, ESRCH, "not s3://bkt/");
	open_fails(path, "bkt", "ds/x/", ESRCH, "not s3://bkt/ds/x/");
	idx = open_ok(path, NULL, NULL);
	g_assert_cmpstr(index_bucket(idx), ==, "bkt");
	index_unref(idx);
}

static void test_missing(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "none.idx");

	(void)data;
	open_fails(path, "bkt", "", ENOENT, "No such file");
	open_fails(f->dir, "bkt", "", EINVAL, "not a regular file");
	write_bytes(path, "", 0);
	open_fails(path, "bkt", "", EBADMSG, "too short");
}

/* A planted symlink is refused by open and replaced, not followed, by
 * commit. */
static void test_symlink(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "link.idx");
	g_autofree char *target = fpath(f, "target.idx");
	g_autofree char *victim = fpath(f, "victim");
	g_autofree char *content = NULL;
	struct index *idx;
	struct stat st;

	(void)data;
	build_mapping(target);
	g_assert_cmpint(symlink(target, path), ==, 0);
	open_fails(path, "bkt", "ds/", ELOOP, "symbolic link");

	write_bytes(victim, "precious", 8);
	g_unlink(path);
	g_assert_cmpint(symlink(victim, path), ==, 0);
	build_mapping(path);
	g_assert_cmpint(lstat(path, &st), ==, 0);
	g_assert_true(S_ISREG(st.st_mode));
	g_assert_true(g_file_get_contents(victim, &content, NULL, NULL));
	g_assert_cmpstr(content, ==, "precious");
	idx = open_ok(path, "bkt", "ds/");
	index_unref(idx);
}

static void test_modes(struct fixture *f, gconstpointer data)
{
	g_autofree char *top = fpath(f, "cache");
	g_autofree char *sub = g_build_filename(top, "bucketfs", NULL);
	g_autofree char *path = g_build_filename(sub, "x.idx", NULL);
	mode_t old = umask(0);
	struct stat st;

	(void)data;
	build_mapping(path);
	umask(old);
	g_assert_cmpint(stat(top, &st), ==, 0);
	g_assert_cmpint(st.st_mode & 07777, ==, 0700);
	g_assert_cmpint(stat(sub, &st), ==, 0);
	g_assert_cmpint(st.st_mode & 07777, ==, 0700);
	g_assert_cmpint(stat(path, &st), ==, 0);
	g_assert_cmpint(st.st_mode & 07777, ==, 0600);
}

/* Aborted and failed builds leave nothing behind. */
static void test_no_temp_files(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "x.idx");
	g_autoptr(GError) error = NULL;
	struct index_writer *w;
	g_autofree char *ls1 = NULL;
	g_autofree char *ls2 = NULL;
	g_autofree char *ls3 = NULL;

	(void)data;
	w = index_writer_new(path, "bkt", "", &error);
	g_assert_no_error(error);
	for (guint i = 0; i < 20000; i++) {
		g_autofree char *key = flat_key(i, 20000);

		add_ok(w, key);
	}
	index_writer_free(w);
	ls1 = dir_listing(f->dir);
	g_assert_cmpstr(ls1, ==, "");

	/* Commit onto a directory fails at the rename. */
	g_assert_cmpint(g_mkdir(path, 0700), ==, 0);
	w = index_writer_new(path, "bkt", "", &error);
	g_assert_no_error(error);
	add_ok(w, "a");
	g_assert_false(index_writer_commit(w, NULL, &error));
	g_assert_nonnull(error);
	g_assert_nonnull(strstr(error->message, path));
	index_writer_free(w);
	ls2 = dir_listing(f->dir);
	g_assert_cmpstr(ls2, ==, "x.idx");
	g_rmdir(path);

	build_mapping(path);
	ls3 = dir_listing(f->dir);
	g_assert_cmpstr(ls3, ==, "x.idx");
}

/*
 * A full disk, in the stream (add) and in the layout (commit): ENOSPC
 * with the path, the old index untouched, no temporary file left.
 */
static void enospc_build(const char *path, guint n, gboolean fail_in_add)
{
	g_autoptr(GError) error = NULL;
	struct index_writer *w = index_writer_new(path, "bkt", "", &error);
	gboolean ok = TRUE;

	g_assert_no_error(error);
	for (guint i = 0; i < n && ok; i++) {
		g_autofree char *key = flat_key(i, n);

		ok = index_writer_add(w, key, 1, 1, MD5, &error);
	}
	g_assert_cmpint(!ok, ==, fail_in_add);
	if (ok) {
		g_assert_false(index_writer_commit(w, NULL, &error));
	} else {
		g_autoptr(GError) again = NULL;

		g_assert_false(index_writer_add(w, "zzz", 1, 1, NULL, &again));
		g_assert_error(again, BFS_ERROR, ENOSPC);
	}
	g_assert_error(error, BFS_ERROR, ENOSPC);
	g_assert_nonnull(strstr(error->message, path));
	index_writer_free(w);
}

static void test_enospc(struct fixture *f, gconstpointer data)
{
	g_autofree char *mnt = fpath(f, "tiny");
	g_autofree char *path = g_build_filename(mnt, "i.idx", NULL);
	g_autofree char *ls = NULL;
	struct index_stats before, after;
	struct index *idx;

	(void)data;
	g_assert_cmpint(g_mkdir(mnt, 0700), ==, 0);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m,mode=0700") < 0) {
		g_autofree char *why = g_strdup_printf(
			"cannot mount a tmpfs: %s", g_strerror(errno));

		g_test_skip(why);
		return;
	}
	build_mapping(path);
	idx = open_ok(path, "bkt", "ds/");
	index_get_stats(idx, &before);
	index_unref(idx);

	/* ~72 bytes a key in the stream, ~66 in the index: 9,000 keys fit
	 * in 1 MiB once but not twice, 20,000 not even once. */
	enospc_build(path, 9000, FALSE);
	enospc_build(path, 20000, TRUE);

	idx = open_ok(path, "bkt", "ds/");
	index_get_stats(idx, &after);
	g_assert_cmpmem(&before, sizeof(before), &after, sizeof(after));
	index_unref(idx);
	ls = dir_listing(mnt);
	g_assert_cmpstr(ls, ==, "i.idx");
	g_assert_cmpint(umount2(mnt, MNT_DETACH), ==, 0);
}

static void test_default_path(void)
{
	g_autofree char *a = index_default_path("ds", "train/");
	g_autofree char *b = index_default_path("ds", "train/");
	g_autofree char *c = index_default_path("ds", "");
	g_autofree char *d = index_default_path("ds", NULL);
	g_autofree char *e = index_default_path("..", "");
	g_autofree char *dir = g_build_filename(g_get_user_cache_dir(),
						"bucketfs", "ds", NULL);
	g_autofree char *base = g_path_get_basename(a);

	g_assert_cmpstr(a, ==, b);
	g_assert_cmpstr(a, !=, c);
	g_assert_cmpstr(c, ==, d);
	g_assert_true(g_str_has_prefix(a, dir));
	g_assert_cmpuint(strlen(base), ==, 16 + 4);
	g_assert_true(g_str_has_suffix(base, ".idx"));
	g_assert_null(strstr(e, "/../"));
}

/*
 * An index written before xxHash64 came from libxxhash (fixtures/index/,
 * made by bucketfs at 716b9a7; tests/integration/test_index_compat.py
 * says how): every checksum holds, and every key has the inode, size,
 * mtime and ETag that release showed.  The default path's hash too.
 */
static void test_written_before(void)
{
	g_autofree char *idx_path = g_test_build_filename(
		G_TEST_DIST, "fixtures", "index", "compat-716b9a7.idx", NULL);
	g_autofree char *tsv_path = g_test_build_filename(
		G_TEST_DIST, "fixtures", "index", "compat-716b9a7.tsv", NULL);
	g_autofree char *tsv = NULL;
	g_autofree char *path = index_default_path("demo", "train/");
	g_auto(GStrv) lines = NULL;
	g_autoptr(GError) error = NULL;
	struct index *idx;
	guint checked = 0;

	g_assert_true(g_str_has_suffix(path, "/767150048264ce84.idx"));
	g_assert_true(g_file_get_contents(tsv_path, &tsv, NULL, NULL));
	idx = index_open(idx_path, "compat", "", &error);
	g_assert_no_error(error);
	g_assert_true(index_verify(idx, &error));
	g_assert_no_error(error);
	lines = g_strsplit(tsv, "\n", -1);
	for (guint i = 0; lines[i]; i++) {
		g_auto(GStrv) f = g_strsplit(lines[i], "\t", -1);
		g_auto(GStrv) parts = NULL;
		g_autofree char *etag = NULL;
		index_id id = INDEX_ROOT;
		struct index_attr a;

		if (!*lines[i] || lines[i][0] == '#')
			continue;
		g_assert_cmpuint(g_strv_length(f), ==, 5);
		parts = g_strsplit(f[0], "/", -1);
		for (guint j = 0; parts[j]; j++)
			g_assert_true(index_lookup(idx, id, parts[j],
						   strlen(parts[j]), &id));
		index_get_attr(idx, id, &a);
		g_assert_false(a.is_dir);
		g_assert_cmpuint(a.size, ==, g_ascii_strtoull(f[1], NULL, 10));
		g_assert_cmpint(a.mtime, ==, g_ascii_strtoll(f[2], NULL, 10));
		g_assert_cmpuint(a.ino, ==, g_ascii_strtoull(f[3], NULL, 10));
		g_assert_cmpuint(index_key_ino(f[0], -1), ==, a.ino);
		etag = index_etag(idx, id);
		g_assert_cmpstr(etag, ==, f[4]);
		checked++;
	}
	g_assert_cmpuint(checked, >, 50);
	index_unref(idx);
}

/* Many threads share one index; refs outlive the opener's. */
static gpointer reader_thread(gpointer data)
{
	struct index *idx = data;
	index_id dir, id;

	for (guint i = 0; i < 20000; i++) {
		g_autofree char *key = flat_key(i % 5000, 5000);
		const char *name = strrchr(key, '/') + 1;
		struct index_attr a;

		g_assert_true(index_lookup(idx, INDEX_ROOT, "train", 5, &dir));
		g_assert_true(index_lookup(idx, dir, name, strlen(name), &id));
		index_get_attr(idx, id, &a);
		g_assert_cmpuint(a.ino, ==, index_key_ino(key, -1));
	}
	index_unref(idx);
	return NULL;
}

static void test_threads(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "th.idx");
	GThread *threads[4];
	struct index *idx;

	(void)data;
	build_flat(path, "bkt", "", 5000);
	idx = open_ok(path, "bkt", "");
	for (guint i = 0; i < G_N_ELEMENTS(threads); i++)
		threads[i] =
			g_thread_new("reader", reader_thread, index_ref(idx));
	index_unref(idx);
	for (guint i = 0; i < G_N_ELEMENTS(threads); i++)
		g_thread_join(threads[i]);
}

/* Build, open and lookup figures for 1,000,000 RetinaNet-style keys. */
static void test_perf(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = fpath(f, "perf.idx");
	g_autoptr(GError) error = NULL;
	guint n = 1000000;
	g_autoptr(index_writer) w = NULL;
	struct index_stats st;
	struct index *idx;
	index_id dir, id;
	gdouble t;

	(void)data;
	g_test_timer_start();
	w = index_writer_new(path, "bkt", "", &error);
	for (guint i = 0; i < n; i++) {
		g_autofree char *key =
			g_strdup_printf("train/img_%07u_of_%u.jpeg", i, n);

		index_writer_add(w, key, 322624, 1700000000, MD5, &error);
		g_assert_no_error(error);
	}
	index_writer_commit(w, &st, &error);
	g_assert_no_error(error);
	t = g_test_timer_elapsed();
	g_test_minimized_result(t, "build of %u keys: %.2f s", n, t);
	g_test_minimized_result((double)st.file_size / n,
				"%.2f bytes/object (file %" G_GUINT64_FORMAT
				" bytes)",
				(double)st.file_size / n, st.file_size);

	g_test_timer_start();
	idx = index_open(path, "bkt", "", &error);
	g_assert_no_error(error);
	t = g_test_timer_elapsed();
	g_test_minimized_result(t * 1e6, "open: %.1f us", t * 1e6);

	g_assert_true(index_lookup(idx, INDEX_ROOT, "train", 5, &dir));
	g_test_timer_start();
	for (guint i = 0; i < n; i++) {
		char name[64];
		guint k = (i * 2654435761u) % n;
		int len = g_snprintf(name, sizeof(name), "img_%07u_of_%u.jpeg",
				     k, n);

		g_assert_true(index_lookup(idx, dir, name, len, &id));
	}
	t = g_test_timer_elapsed();
	g_test_minimized_result(t / n * 1e9, "lookup: %.0f ns", t / n * 1e9);

	g_test_timer_start();
	index_verify(idx, &error);
	g_assert_no_error(error);
	t = g_test_timer_elapsed();
	g_test_minimized_result(t, "verify: %.3f s", t);
	index_unref(idx);
}

#define ADD(name, fn)                                                          \
	g_test_add(name, struct fixture, NULL, fixture_setup, fn,              \
		   fixture_teardown)

int main(int argc, char **argv)
{
	g_autofree char *cache = NULL;

	/* Before anything asks GLib for the cache directory. */
	cache = g_build_filename(g_get_tmp_dir(), "bfs-index-cache", NULL);
	g_setenv("XDG_CACHE_HOME", cache, TRUE);
	g_test_init(&argc, &argv, NULL);

	ADD("/index/mapping", test_mapping);
	ADD("/index/empty", test_empty);
	ADD("/index/deep", test_deep);
	ADD("/index/order", test_order);
	ADD("/index/shadow-far", test_shadow_far);
	ADD("/index/mtime-range", test_mtime_range);
	ADD("/index/flat", test_flat);
	g_test_add_func("/index/ino-hash", test_ino_hash);
	ADD("/index/truncated", test_truncated);
	ADD("/index/bitflip", test_bitflip);
	ADD("/index/resealed-damage", test_resealed_damage);
	ADD("/index/version", test_version);
	ADD("/index/binding", test_binding);
	ADD("/index/missing", test_missing);
	ADD("/index/symlink", test_symlink);
	ADD("/index/modes", test_modes);
	ADD("/index/no-temp-files", test_no_temp_files);
	ADD("/index/enospc", test_enospc);
	g_test_add_func("/index/default-path", test_default_path);
	g_test_add_func("/index/written-before", test_written_before);
	ADD("/index/threads", test_threads);
	if (g_test_perf())
		ADD("/index/perf", test_perf);
	return g_test_run();
}
