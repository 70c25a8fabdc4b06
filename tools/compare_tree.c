/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * compare_tree.c - names and sizes: the listing against the walk of the
 * mount.  The key rules are compare_keys.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compare.h"
#include "error.h"

static int object_cmp(gconstpointer a, gconstpointer b)
{
	const struct s3_object *x = *(struct s3_object *const *)a;
	const struct s3_object *y = *(struct s3_object *const *)b;

	return strcmp(x->key, y->key);
}

/* -- the listing ---------------------------------------------------------- */

static void expect_dirs(struct compare *t, const char *rel, gsize dir_len,
			GString *last)
{
	gsize i;

	/* Listings are sorted, so keys of one directory come together:
	 * skip the work when the directories are those of the last key. */
	if (dir_len == 0 ||
	    (last->len == dir_len && !memcmp(last->str, rel, dir_len)))
		return;
	g_string_truncate(last, 0);
	g_string_append_len(last, rel, dir_len);
	for (i = 1; i <= dir_len; i++) {
		char *d;

		if (i < dir_len && rel[i] != '/')
			continue;
		d = g_strndup(rel, i);
		if (g_hash_table_contains(t->expected_dirs, d))
			g_free(d);
		else
			g_hash_table_add(t->expected_dirs, d);
	}
}

static void note_hidden(struct compare *t, const char *rel, const char *reason,
			const char *id)
{
	struct hidden *h;

	if (t->hidden->len >= EXAMPLES_MAX)
		return;
	h = g_new0(struct hidden, 1);
	h->key = g_strdup(rel);
	h->reason = reason;
	h->reason_id = id;
	g_ptr_array_add(t->hidden, h);
}

static gboolean on_page(struct s3_list_page *page, void *user, GError **error)
{
	struct compare *t = user;
	guint i;

	(void)error;
	for (i = 0; i < page->objects->len; i++)
		g_ptr_array_add(t->objects,
				g_steal_pointer(&page->objects->pdata[i]));
	g_ptr_array_set_size(page->objects, 0);
	compare_progress(t, FALSE, "listing: %u keys", t->objects->len);
	return TRUE;
}

/*
 * -o empty_dirs=: the mount shows each declared directory and those above
 * it, unless an object has the name (emptydirs.h): expected too.
 */
static void expect_declared(struct compare *t)
{
	guint i;

	for (i = 0; i < t->cfg.empty_dirs->len; i++) {
		const char *path = g_ptr_array_index(t->cfg.empty_dirs, i);
		const char *slash = path;

		do {
			g_autofree char *d = NULL;

			slash = strchr(slash + 1, '/');
			d = slash ? g_strndup(path, slash - path)
				  : g_strdup(path);
			if (g_hash_table_contains(t->expected_files, d))
				break;
			if (!g_hash_table_contains(t->expected_dirs, d))
				g_hash_table_add(t->expected_dirs,
						 g_steal_pointer(&d));
		} while (slash);
	}
}

/* What the mount must show. */
gboolean compare_load_listing(struct compare *t, GError **error)
{
	struct s3_list_args la = {
		.prefix = *t->cfg.prefix ? t->cfg.prefix : NULL,
		.endpoint = -1,
	};
	g_autoptr(GString) last = g_string_new(NULL);
	guint i;

	/* Its errors already say "listing s3://B/P, page N: ". */
	if (!s3_list_all(t->s3, &la, on_page, t, error))
		return FALSE;
	compare_progress(t, TRUE, "listing: %u keys", t->objects->len);
	t->plen = strlen(t->cfg.prefix);
	for (i = 0; i < t->objects->len; i++) {
		struct s3_object *o = t->objects->pdata[i];
		const char *rel;
		gsize dir_len;
		enum compare_key_kind k;

		if (!g_str_has_prefix(o->key, t->cfg.prefix))
			continue; /* a server ignoring the prefix */
		rel = o->key + t->plen;
		k = compare_key_classify(rel, strlen(rel), &dir_len);
		expect_dirs(t, rel, dir_len, last);
		if (k == COMPARE_KEY_FILE) {
			g_hash_table_insert(t->expected_files, (char *)rel, o);
		} else if (k == COMPARE_KEY_ROOT || k == COMPARE_KEY_MARKER) {
			if (o->size == 0) {
				t->markers++;
				continue;
			}
			t->shadowed++;
			note_hidden(t, rel,
				    "a directory marker with data (the "
				    "directory is shown, its data is not)",
				    "marker_with_data");
		} else {
			t->hidden_count[k]++;
			note_hidden(t, rel, compare_key_reason(k),
				    compare_key_reason_id(k));
		}
	}
	/* An object and a directory of the same name: the directory wins. */
	for (i = 0; i < t->objects->len; i++) {
		struct s3_object *o = t->objects->pdata[i];
		const char *rel = o->key + t->plen;

		if (strlen(o->key) < t->plen)
			continue;
		if (g_hash_table_lookup(t->expected_files, rel) == o &&
		    g_hash_table_contains(t->expected_dirs, rel)) {
			g_hash_table_remove(t->expected_files, rel);
			t->shadowed++;
			note_hidden(t, rel,
				    "hidden by a directory of the same name",
				    "shadowed_by_directory");
		}
	}
	expect_declared(t);
	return TRUE;
}

/* -- the walk ------------------------------------------------------------- */

static void walk_dir(struct compare *t, int root, const char *rel, GQueue *todo)
{
	int fd = openat(root, *rel ? rel : ".",
			O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	struct dirent *de;
	DIR *dir;

	if (fd < 0 || !(dir = fdopendir(fd))) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		compare_diffs_add(
			&t->ns, DIFF_MOUNT_ERROR, rel, 0, 0,
			g_strdup_printf("cannot open the directory: %s",
					g_strerror(err)));
		return;
	}
	while ((errno = 0, de = readdir(dir))) {
		g_autofree char *path = NULL;
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		path = *rel ? g_strconcat(rel, "/", de->d_name, NULL)
			    : g_strdup(de->d_name);
		if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			compare_diffs_add(
				&t->ns, DIFF_MOUNT_ERROR, path, 0, 0,
				g_strdup_printf("listed but cannot stat: %s",
						g_strerror(errno)));
		} else if (S_ISDIR(st.st_mode)) {
			g_hash_table_add(t->mount_dirs, g_strdup(path));
			g_queue_push_tail(todo, g_steal_pointer(&path));
		} else if (S_ISREG(st.st_mode)) {
			guint64 *size = g_new(guint64, 1);

			*size = (guint64)st.st_size;
			g_hash_table_insert(t->mount_files,
					    g_steal_pointer(&path), size);
		} else {
			compare_diffs_add(
				&t->ns, DIFF_EXTRA, path, 0, 0,
				g_strdup_printf("not a regular file or a "
						"directory (mode %06o)",
						st.st_mode));
		}
	}
	if (errno)
		compare_diffs_add(&t->ns, DIFF_MOUNT_ERROR, rel, 0, 0,
				  g_strdup_printf("readdir failed: %s",
						  g_strerror(errno)));
	closedir(dir);
}

/* Breadth first, one directory open at a time: no descriptor pile-up. */
gboolean compare_walk_mount(struct compare *t, GError **error)
{
	int root = open(t->mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	GQueue todo = G_QUEUE_INIT;
	char *rel;

	if (root < 0) {
		int err = errno;

		g_set_error(error, BFS_ERROR, err, "cannot open '%s': %s",
			    t->mount, g_strerror(err));
		return FALSE;
	}
	g_queue_push_tail(&todo, g_strdup(""));
	while ((rel = g_queue_pop_head(&todo))) {
		walk_dir(t, root, rel, &todo);
		g_free(rel);
		compare_progress(t, FALSE,
				 "walking %s: %u files, %u directories",
				 t->mount, g_hash_table_size(t->mount_files),
				 g_hash_table_size(t->mount_dirs));
	}
	compare_progress(t, TRUE, "walking %s: %u files, %u directories",
			 t->mount, g_hash_table_size(t->mount_files),
			 g_hash_table_size(t->mount_dirs));
	close(root);
	return TRUE;
}

/* -- namespace ------------------------------------------------------------ */

void compare_namespace(struct compare *t)
{
	GHashTableIter it;
	gpointer k, v;

	g_hash_table_iter_init(&it, t->expected_files);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		const struct s3_object *o = v;
		guint64 *ms = g_hash_table_lookup(t->mount_files, k);

		if (ms && *ms == o->size)
			g_ptr_array_add(t->common, (gpointer)o);
		else if (ms)
			compare_diffs_add(&t->ns, DIFF_SIZE, k, o->size, *ms,
					  NULL);
		else if (g_hash_table_contains(t->mount_dirs, k))
			compare_diffs_add(
				&t->ns, DIFF_TYPE, k, o->size, 0,
				g_strdup("a file in S3, a directory on "
					 "the mount"));
		else
			compare_diffs_add(&t->ns, DIFF_MISSING, k, o->size, 0,
					  NULL);
	}
	g_hash_table_iter_init(&it, t->mount_files);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		if (g_hash_table_contains(t->expected_files, k))
			continue;
		if (g_hash_table_contains(t->expected_dirs, k))
			compare_diffs_add(
				&t->ns, DIFF_TYPE, k, 0, *(guint64 *)v,
				g_strdup("a directory in S3, a file on "
					 "the mount"));
		else
			compare_diffs_add(&t->ns, DIFF_EXTRA, k, 0,
					  *(guint64 *)v, NULL);
	}
	g_hash_table_iter_init(&it, t->expected_dirs);
	while (g_hash_table_iter_next(&it, &k, NULL))
		if (!g_hash_table_contains(t->mount_dirs, k) &&
		    !g_hash_table_contains(t->mount_files, k))
			compare_diffs_add(&t->ns, DIFF_DIR_MISSING, k, 0, 0,
					  NULL);
	g_hash_table_iter_init(&it, t->mount_dirs);
	while (g_hash_table_iter_next(&it, &k, NULL))
		if (!g_hash_table_contains(t->expected_dirs, k) &&
		    !g_hash_table_contains(t->expected_files, k))
			compare_diffs_add(&t->ns, DIFF_DIR_EXTRA, k, 0, 0,
					  NULL);
	compare_diffs_sort(&t->ns);
	g_ptr_array_sort(t->common, object_cmp);
}
