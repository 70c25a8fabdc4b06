/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuzz_index - libFuzzer target for the index: whatever the bytes of an
 * index file, index_open(), the accessors and index_verify() must not
 * crash, leak or read outside the mapping; whatever the keys, the writer
 * must build an index that verifies and follows the key -> path rules.
 *
 * The first input byte picks the mode (modulo 4); the rest is:
 *   0  an index file, written as it is and opened;
 *   1  the same after index_reseal() fixed its checksums, so that
 *      a damaged body gets past index_open() to the accessors;
 *   2  keys separated by '\n' or NUL (sorted and deduplicated here), built
 *      into an index under the prefix "p/" when the next byte is odd: it
 *      must open and verify, every entry must be consistent, and the files
 *      shown must be exactly those a simple model of the rules predicts;
 *   3  (offset, value) patches of three bytes each, applied to a valid
 *      index built at start-up, resealed when the next byte is odd.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE \
 *	-Isrc src/error.c src/log.c src/index.c tests/unit/fuzz_index.c \
 *	$(pkg-config --cflags --libs glib-2.0) -o fuzz_index
 *   TMPDIR=/dev/shm ./fuzz_index -max_total_time=600 corpus/
 *
 * Files go to a g_dir_make_tmp() directory (under TMPDIR), removed at
 * exit.  A violated expectation calls abort().
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>

#include "fuzz.h"
#include "index.h"
#include "index_reseal.h"

#define WALK_BUDGET 4096
#define MAX_KEYS    4096

static char *work_dir;
static char *work_path;
static guint8 *base; /* the index that mode 3 patches */
static gsize base_len;

static void cleanup(void)
{
	GDir *dir = g_dir_open(work_dir, 0, NULL);
	const char *name;

	while (dir && (name = g_dir_read_name(dir))) {
		g_autofree char *p = g_build_filename(work_dir, name, NULL);

		g_unlink(p);
	}
	if (dir)
		g_dir_close(dir);
	g_rmdir(work_dir);
}

static void write_file(const guint8 *data, gsize len)
{
	CHECK(g_file_set_contents(work_path, (const char *)data, len, NULL));
}

/* Every accessor over what is reachable; the answers may be nonsense. */
static void walk_any(struct index *idx, index_id dir, guint *budget)
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
		if (name) {
			CHECK(strlen(name) == len && !memchr(name, '/', len));
			index_lookup(idx, dir, name, len, &id);
		}
		if (index_is_dir(idx, child))
			walk_any(idx, child, budget);
	}
	/* Ids past the end and odd positions must be harmless too. */
	index_child_at(idx, dir, G_MAXUINT64, &child, &pos);
	index_lookup(idx, G_MAXUINT64, "a", 1, &id);
}

static void open_and_walk(gboolean expect_ok)
{
	g_autoptr(GError) error = NULL;
	struct index *idx = index_open(work_path, NULL, NULL, &error);
	struct index_stats st;
	guint budget = WALK_BUDGET;

	CHECK(!expect_ok || idx);
	if (!idx) {
		CHECK(error && error->message && error->code > 0);
		return;
	}
	index_get_stats(idx, &st);
	walk_any(idx, INDEX_ROOT, &budget);
	for (index_id id = 0; id < 64 && id < st.entries + 2; id++) {
		struct index_attr a;

		g_free(index_key(idx, id));
		g_free(index_etag(idx, id));
		index_get_attr(idx, id, &a);
		index_parent(idx, id);
		index_name(idx, id, NULL);
	}
	if (!index_verify(idx, &error))
		CHECK(!expect_ok && error);
	index_unref(idx);
}

/* --- mode 2: keys, and a model of which of them are files ----------------- */

static int strcmp_p(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The keys in @data, sorted, deduplicated, under @prefix. */
static GPtrArray *keys_parse(const guint8 *data, gsize len, const char *prefix)
{
	GPtrArray *keys = g_ptr_array_new_with_free_func(g_free);
	gsize start = 0;

	for (gsize i = 0; i <= len && keys->len < MAX_KEYS; i++) {
		if (i < len && data[i] != '\n' && data[i] != '\0')
			continue;
		g_ptr_array_add(keys,
				g_strdup_printf("%s%.*s", prefix,
						(int)(i - start),
						(const char *)data + start));
		start = i + 1;
	}
	g_ptr_array_sort(keys, strcmp_p);
	for (guint i = 1; i < keys->len;) {
		if (strcmp(keys->pdata[i - 1], keys->pdata[i]) == 0)
			g_ptr_array_remove_index(keys, i);
		else
			i++;
	}
	return keys;
}

static const char *etag_for(guint i)
{
	static const char *const etags[] = {
		NULL,
		"0123456789abcdef0123456789abcdef",
		"\"0123456789abcdef0123456789abcdef-7\"",
		"W/\"x\"",
		"",
	};

	return etags[i % G_N_ELEMENTS(etags)];
}

static char *etag_unquoted(guint i)
{
	const char *e = etag_for(i);
	gsize len = e ? strlen(e) : 0;

	if (len >= 2 && e[0] == '"' && e[len - 1] == '"')
		return g_strndup(e + 1, len - 2);
	return len ? g_strdup(e) : NULL;
}

static gboolean component_ok(const char *s, gsize len)
{
	if (len == 0 || len > INDEX_NAME_MAX)
		return FALSE;
	return !(s[0] == '.' && (len == 1 || (len == 2 && s[1] == '.')));
}

/* Whether some key starts with @p: they sort together. */
static gboolean any_key_under(GPtrArray *keys, const char *p)
{
	guint lo = 0, hi = keys->len;

	while (lo < hi) {
		guint mid = lo + (hi - lo) / 2;

		if (strcmp(keys->pdata[mid], p) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < keys->len && g_str_has_prefix(keys->pdata[lo], p);
}

/*
 * The rules, stated independently of the writer: a key is a file when it
 * does not end with '/', every component is a name, it is at most
 * INDEX_DEPTH_MAX deep, and no key lies below it (which would make it a
 * directory, and the directory wins).
 */
static gboolean model_is_file(GPtrArray *keys, guint i, gsize plen)
{
	const char *key = keys->pdata[i];
	const char *r = key + plen;
	gsize rlen = strlen(r);
	guint depth = 0;
	g_autofree char *below = NULL;

	if (rlen == 0 || r[rlen - 1] == '/')
		return FALSE;
	for (const char *p = r;; p++) {
		const char *slash = strchr(p, '/');
		gsize len = slash ? (gsize)(slash - p) : strlen(p);

		if (!component_ok(p, len) || ++depth > INDEX_DEPTH_MAX)
			return FALSE;
		if (!slash)
			break;
		p = slash;
	}
	below = g_strconcat(key, "/", NULL);
	return !any_key_under(keys, below);
}

static index_id resolve(struct index *idx, const char *rel)
{
	g_auto(GStrv) parts = g_strsplit(rel, "/", -1);
	index_id id = INDEX_ROOT;

	for (guint i = 0; parts[i]; i++) {
		if (!index_lookup(idx, id, parts[i], strlen(parts[i]), &id))
			return G_MAXUINT64;
	}
	return id;
}

/* What index_verify() promises: a tree where everything agrees. */
static guint64 walk_strict(struct index *idx, index_id dir)
{
	index_id child, id;
	guint64 pos = 0, want = 0, files = 0;
	struct index_attr da;

	index_get_attr(idx, dir, &da);
	while (index_child_at(idx, dir, pos, &child, &pos)) {
		struct index_attr a;
		gsize len;
		const char *name = index_name(idx, child, &len);
		g_autofree char *key = index_key(idx, child);

		CHECK(pos == ++want);
		CHECK(name && key && len > 0 && len <= INDEX_NAME_MAX);
		CHECK(strcmp(name, ".") != 0 && strcmp(name, "..") != 0);
		CHECK(index_lookup(idx, dir, name, len, &id) && id == child);
		CHECK(index_parent(idx, child) == dir);
		index_get_attr(idx, child, &a);
		CHECK(a.ino == index_key_ino(key, -1));
		files += a.is_dir ? walk_strict(idx, child) : 1;
	}
	CHECK(want == da.nchildren);
	return files;
}

static void check_model(struct index *idx, GPtrArray *keys, gsize plen)
{
	struct index_stats st;
	guint64 model_files = 0;

	index_get_stats(idx, &st);
	CHECK(st.keys == keys->len);
	CHECK(st.keys == st.files + st.markers + st.shadowed +
				 st.skipped_empty + st.skipped_dot +
				 st.skipped_long + st.skipped_deep);
	CHECK(walk_strict(idx, INDEX_ROOT) == st.files);
	for (guint i = 0; i < keys->len; i++) {
		const char *key = keys->pdata[i];
		index_id id;
		struct index_attr a;
		g_autofree char *back = NULL;
		g_autofree char *etag = NULL;
		g_autofree char *want_etag = NULL;

		if (!model_is_file(keys, i, plen))
			continue;
		model_files++;
		id = resolve(idx, key + plen);
		CHECK(id != G_MAXUINT64);
		index_get_attr(idx, id, &a);
		CHECK(!a.is_dir && a.size == i + 1 && a.mtime == i);
		back = index_key(idx, id);
		CHECK(strcmp(back, key) == 0);
		etag = index_etag(idx, id);
		want_etag = etag_unquoted(i);
		CHECK(g_strcmp0(etag, want_etag) == 0);
	}
	CHECK(model_files == st.files);
}

static void fuzz_keys(const guint8 *data, gsize len)
{
	const char *prefix = len > 0 && (data[0] & 1) ? "p/" : "";
	g_autoptr(GPtrArray) keys = NULL;
	g_autoptr(GError) error = NULL;
	g_autoptr(index_writer) w = NULL;
	struct index *idx;

	if (len > 0) {
		data++;
		len--;
	}
	keys = keys_parse(data, len, prefix);
	w = index_writer_new(work_path, "bkt", prefix, &error);
	CHECK(w);
	for (guint i = 0; i < keys->len; i++)
		CHECK(index_writer_add(w, keys->pdata[i], i + 1, i, etag_for(i),
				       &error));
	CHECK(index_writer_commit(w, NULL, &error));
	idx = index_open(work_path, "bkt", prefix, &error);
	CHECK(idx);
	if (!index_verify(idx, &error)) {
		fprintf(stderr, "%s\n", error->message);
		abort();
	}
	check_model(idx, keys, strlen(prefix));
	index_unref(idx);
}

/* --- mode 3: patches to a valid index ------------------------------------- */

static void build_base(void)
{
	static const char *const keys[] = {
		"d/",	 "d/.x",    "d/a",     "d/a!",	  "d/a/",  "d/a/b",
		"d/a/c", "d/b\x01", "d/c/d/e", "d/c/d/f", "d/e//", "d/z",
	};
	g_autoptr(GError) error = NULL;
	g_autoptr(index_writer) w =
		index_writer_new(work_path, "bkt", "d/", &error);
	char *contents;

	CHECK(w);
	for (guint i = 0; i < G_N_ELEMENTS(keys); i++)
		CHECK(index_writer_add(w, keys[i], i, i, etag_for(i), &error));
	CHECK(index_writer_commit(w, NULL, &error));
	CHECK(g_file_get_contents(work_path, &contents, &base_len, NULL));
	base = (guint8 *)contents;
}

static void fuzz_patches(const guint8 *data, gsize len)
{
	g_autofree guint8 *copy = g_memdup2(base, base_len);
	gboolean reseal = len > 0 && (data[0] & 1);

	for (gsize i = 1; i + 3 <= len; i += 3)
		copy[(data[i] | data[i + 1] << 8) % base_len] = data[i + 2];
	if (reseal)
		index_reseal(copy, base_len);
	write_file(copy, base_len);
	open_and_walk(len < 4);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	work_dir = g_dir_make_tmp("fuzz-index-XXXXXX", NULL);
	CHECK(work_dir);
	work_path = g_build_filename(work_dir, "f.idx", NULL);
	atexit(cleanup);
	build_base();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	g_autofree guint8 *copy = NULL;

	if (size == 0)
		return 0;
	switch (data[0] % 4) {
	case 0:
		write_file(data + 1, size - 1);
		open_and_walk(FALSE);
		break;
	case 1:
		copy = g_memdup2(data + 1, size - 1);
		index_reseal(copy, size - 1);
		write_file(copy, size - 1);
		open_and_walk(FALSE);
		break;
	case 2:
		fuzz_keys(data + 1, size - 1);
		break;
	case 3:
		fuzz_patches(data + 1, size - 1);
		break;
	}
	return 0;
}
