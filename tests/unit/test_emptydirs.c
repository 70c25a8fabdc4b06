/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_emptydirs - -o empty_dirs=: the paths config_options.c accepts and the
 * errors for those it refuses (nothing taken from a bad value), and the
 * declared tree (ancestors, children in name order, keys under a prefix)
 * and its state against a real index file (shown, indexed, hidden by an
 * object).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "config.h"
#include "emptydirs.h"
#include "error.h"
#include "index.h"

static void parse_ok(struct config *cfg, const char *opts)
{
	g_autoptr(GError) error = NULL;

	g_assert_true(config_parse_options(cfg, opts, NULL, &error));
	g_assert_no_error(error);
}

static void assert_dirs(const struct config *cfg, const char *const *want)
{
	guint i;

	for (i = 0; want[i]; i++) {
		g_assert_cmpuint(i, <, cfg->empty_dirs->len);
		g_assert_cmpstr(g_ptr_array_index(cfg->empty_dirs, i), ==,
				want[i]);
	}
	g_assert_cmpuint(cfg->empty_dirs->len, ==, i);
}

static void test_parse(void)
{
	struct config cfg;
	static const char *const want[] = { "valid", "test", "a/b/c", "x",
					    NULL };

	config_init(&cfg);
	g_assert_cmpuint(cfg.empty_dirs->len, ==, 0);
	parse_ok(&cfg, "empty_dirs=valid:test");
	/* Repeatable: adds; duplicates and a trailing '/' fold. */
	parse_ok(&cfg, "empty_dirs=a/b/c:valid/,empty_dirs=x");
	assert_dirs(&cfg, want);
	config_clear(&cfg);
}

static void test_refused(void)
{
	static const struct {
		const char *value, *message;
	} bad[] = {
		{ "valid::test", "option 'empty_dirs': 'valid::test' has an "
				 "empty path" },
		{ "valid:", "option 'empty_dirs': 'valid:' has an empty path" },
		{ "ok:/abs", "option 'empty_dirs': '/abs' is absolute: paths "
			     "are relative to the mount's root" },
		{ "/", "option 'empty_dirs': '/' is absolute: paths are "
		       "relative to the mount's root" },
		{ "a//b", "option 'empty_dirs': 'a//b' has an empty "
			  "component ('a//b')" },
		{ "a/../b", "option 'empty_dirs': 'a/../b' has a '.' or '..' "
			    "component" },
		{ "..", "option 'empty_dirs': '..' has a '.' or '..' "
			"component" },
		{ "./x", "option 'empty_dirs': './x' has a '.' or '..' "
			 "component" },
		{ "ok:a\x01/", NULL }, /* control bytes are names: accepted */
	};
	guint i;

	for (i = 0; i < G_N_ELEMENTS(bad); i++) {
		g_autoptr(GError) error = NULL;
		g_autofree char *opt =
			g_strdup_printf("empty_dirs=%s", bad[i].value);
		struct config cfg;
		gboolean ok;

		config_init(&cfg);
		ok = config_parse_options(&cfg, opt, NULL, &error);
		if (!bad[i].message) {
			g_assert_no_error(error);
			g_assert_cmpuint(cfg.empty_dirs->len, ==, 2);
		} else {
			g_assert_false(ok);
			g_assert_error(error, BFS_ERROR, EINVAL);
			g_assert_cmpstr(error->message, ==, bad[i].message);
			/* All or nothing: "ok" was not taken either. */
			g_assert_cmpuint(cfg.empty_dirs->len, ==, 0);
		}
		config_clear(&cfg);
	}
}

static void test_long_component(void)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *name = g_strnfill(256, 'n');
	g_autofree char *opt = g_strdup_printf("empty_dirs=a/%s", name);
	g_autofree char *ok = g_strdup_printf("empty_dirs=%.255s", name);
	struct config cfg;

	config_init(&cfg);
	g_assert_false(config_parse_options(&cfg, opt, NULL, &error));
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_nonnull(strstr(error->message, "has a component over 255 "
						"bytes"));
	parse_ok(&cfg, ok);
	g_assert_cmpuint(cfg.empty_dirs->len, ==, 1);
	config_clear(&cfg);
}

static GPtrArray *paths(const char *const *p)
{
	GPtrArray *a = g_ptr_array_new_with_free_func(g_free);

	for (; *p; p++)
		g_ptr_array_add(a, g_strdup(*p));
	return a;
}

static void assert_children(const struct emptydirs *d, const char *key,
			    const char *const *names)
{
	guint i, node;

	for (i = 0; names[i]; i++) {
		g_assert_true(emptydirs_child_at(d, key, i, &node));
		g_assert_cmpstr(emptydirs_name(d, node), ==, names[i]);
		g_assert_cmpstr(emptydirs_parent_key(d, node), ==, key);
		g_assert_cmpuint(emptydirs_child(d, key, names[i]), ==, node);
	}
	g_assert_false(emptydirs_child_at(d, key, i, &node));
}

static void test_tree(void)
{
	static const char *const decl[] = { "valid", "test", "a/b/c",
					    "a/b2",  "a-",   NULL };
	static const char *const top[] = { "a-", "a", "test", "valid", NULL };
	static const char *const under_a[] = { "b", "b2", NULL };
	static const char *const under_b[] = { "c", NULL };
	static const char *const none[] = { NULL };
	g_autoptr(GPtrArray) p = paths(decl);
	struct emptydirs *d = emptydirs_new("pre/", p);
	guint n;

	/* valid, test, a, a/b, a/b/c, a/b2, a-. */
	g_assert_cmpuint(emptydirs_count(d), ==, 7);
	g_assert_cmpuint(emptydirs_declared_count(d), ==, 5);
	g_assert_cmpstr(emptydirs_declared(d, 2), ==, "a/b/c");
	/* In the index's order: "a-/" sorts before "a/". */
	assert_children(d, "pre/", top);
	assert_children(d, "pre/a/", under_a);
	assert_children(d, "pre/a/b/", under_b);
	assert_children(d, "pre/a/b/c/", none);
	assert_children(d, "pre/valid/", none);
	n = emptydirs_child(d, "pre/a/b/", "c");
	g_assert_cmpstr(emptydirs_key(d, n), ==, "pre/a/b/c/");
	g_assert_cmpuint(emptydirs_child(d, "pre/", "b"), ==, 0);
	g_assert_cmpuint(emptydirs_child(d, "", "valid"), ==, 0);
	emptydirs_free(d);

	/* None declared: nothing found, and NULL is an empty set. */
	g_ptr_array_set_size(p, 0);
	d = emptydirs_new("", p);
	g_assert_cmpuint(emptydirs_count(d), ==, 0);
	g_assert_cmpuint(emptydirs_child(d, "", "valid"), ==, 0);
	g_assert_false(emptydirs_child_at(d, "", 0, &n));
	emptydirs_free(d);
	g_assert_cmpuint(emptydirs_count(NULL), ==, 0);
	g_assert_cmpuint(emptydirs_child(NULL, "", "valid"), ==, 0);
}

static void test_state(void)
{
	static const char *const keys[] = { "p/a", "p/train/img_0",
					    "p/train/img_1", "p/x/y/z" };
	static const char *const decl[] = { "valid", "train", "a/b", "a",
					    "x/y",   "x/q",   NULL };
	static const enum emptydirs_state want[] = {
		EMPTYDIRS_SHOWN,  EMPTYDIRS_INDEXED, EMPTYDIRS_OBJECT,
		EMPTYDIRS_OBJECT, EMPTYDIRS_INDEXED, EMPTYDIRS_SHOWN,
	};
	g_autoptr(GError) error = NULL;
	g_autofree char *dir = g_dir_make_tmp("bfs-emptydirs-XXXXXX", NULL);
	g_autofree char *path = g_build_filename(dir, "i.idx", NULL);
	g_autoptr(GPtrArray) p = paths(decl);
	g_autoptr(index_writer) w = index_writer_new(path, "bkt", "p/", &error);
	struct emptydirs *d;
	struct index *idx;
	guint i;

	g_assert_no_error(error);
	for (i = 0; i < G_N_ELEMENTS(keys); i++)
		g_assert_true(index_writer_add(w, keys[i], 1, 0, NULL, &error));
	g_assert_true(index_writer_commit(w, NULL, &error));
	idx = index_open(path, "bkt", "p/", &error);
	g_assert_no_error(error);
	d = emptydirs_new("p/", p);
	for (i = 0; i < G_N_ELEMENTS(want); i++) {
		g_autofree char *object = NULL;

		g_assert_cmpint(emptydirs_state(d, i, idx, &object), ==,
				want[i]);
		if (want[i] == EMPTYDIRS_OBJECT)
			g_assert_cmpstr(object, ==, "p/a");
		else
			g_assert_null(object);
	}
	emptydirs_free(d);
	index_unref(idx);
	g_unlink(path);
	g_rmdir(dir);
}

/* An index of @keys under "p/" of bucket "bkt", opened. */
static struct index *index_of(const char *dir, const char *const *keys, guint n)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *path = g_build_filename(dir, "dlio.idx", NULL);
	g_autoptr(index_writer) w = index_writer_new(path, "bkt", "p/", &error);
	struct index *idx;

	g_assert_no_error(error);
	for (guint i = 0; i < n; i++)
		g_assert_true(index_writer_add(w, keys[i], 1, 0, NULL, &error));
	g_assert_true(index_writer_commit(w, NULL, &error));
	idx = index_open(path, "bkt", "p/", &error);
	g_assert_no_error(error);
	g_unlink(path);
	return idx;
}

/* The doctor's DLIO check and the mount's are one: emptydirs_dlio(). */
static void test_dlio(void)
{
	static const char *const only_train[] = { "p/train/a", "p/x" };
	static const char *const both[] = { "p/train/a", "p/valid/b" };
	static const char *const valid_file[] = { "p/train/a", "p/valid" };
	static const char *const no_train[] = { "p/valid/b", "p/x/train" };
	static const char *const decl[] = { "test", "valid", NULL };
	g_autofree char *dir = g_dir_make_tmp("bfs-emptydirs-XXXXXX", NULL);
	g_autoptr(GPtrArray) p = paths(decl);
	g_autofree char *detail = NULL;
	struct index *idx;

	g_assert_cmpint(emptydirs_dlio(TRUE, FALSE, NULL, "b", "d/", &detail),
			==, EMPTYDIRS_DLIO_MISSING);
	g_assert_cmpstr(detail, ==,
			"s3://b/d/train/ has keys and s3://b/d/valid/ none: "
			"DLIO and MLPerf Storage open valid/ too, and would "
			"stop with ENOENT");
	g_clear_pointer(&detail, g_free);
	g_assert_cmpint(emptydirs_dlio(TRUE, FALSE, p, "b", "", &detail), ==,
			EMPTYDIRS_DLIO_DECLARED);
	g_assert_cmpstr(detail, ==,
			"s3://b/valid/ has no key; -o empty_dirs=valid "
			"declares it");
	g_clear_pointer(&detail, g_free);
	g_assert_cmpint(emptydirs_dlio(TRUE, TRUE, NULL, "b", "", &detail), ==,
			EMPTYDIRS_DLIO_NONE);
	g_assert_null(detail);
	g_assert_cmpint(emptydirs_dlio(FALSE, FALSE, NULL, "b", "", &detail),
			==, EMPTYDIRS_DLIO_NONE);
	g_assert_null(detail);

	idx = index_of(dir, only_train, G_N_ELEMENTS(only_train));
	g_assert_cmpint(emptydirs_dlio_of_index(idx, NULL, &detail), ==,
			EMPTYDIRS_DLIO_MISSING);
	g_assert_true(strstr(detail, "s3://bkt/p/valid/ none") != NULL);
	g_clear_pointer(&detail, g_free);
	g_assert_cmpint(emptydirs_dlio_of_index(idx, p, &detail), ==,
			EMPTYDIRS_DLIO_DECLARED);
	g_clear_pointer(&detail, g_free);
	index_unref(idx);
	idx = index_of(dir, both, G_N_ELEMENTS(both));
	g_assert_cmpint(emptydirs_dlio_of_index(idx, NULL, &detail), ==,
			EMPTYDIRS_DLIO_NONE);
	index_unref(idx);
	/* A file "valid" is no directory: DLIO would still fail. */
	idx = index_of(dir, valid_file, G_N_ELEMENTS(valid_file));
	g_assert_cmpint(emptydirs_dlio_of_index(idx, NULL, &detail), ==,
			EMPTYDIRS_DLIO_MISSING);
	g_clear_pointer(&detail, g_free);
	index_unref(idx);
	idx = index_of(dir, no_train, G_N_ELEMENTS(no_train));
	g_assert_cmpint(emptydirs_dlio_of_index(idx, NULL, &detail), ==,
			EMPTYDIRS_DLIO_NONE);
	index_unref(idx);
	g_rmdir(dir);
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/emptydirs/parse", test_parse);
	g_test_add_func("/emptydirs/refused", test_refused);
	g_test_add_func("/emptydirs/long-component", test_long_component);
	g_test_add_func("/emptydirs/tree", test_tree);
	g_test_add_func("/emptydirs/state", test_state);
	g_test_add_func("/emptydirs/dlio", test_dlio);
	return g_test_run();
}
