/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <string.h>

#include "emptydirs.h"
#include "log.h"

struct enode {
	char *key; /* full key, ending with '/' */
	char *name;
	char *parent_key;
};

struct emptydirs {
	GPtrArray *nodes;    /* of struct enode *; node n is nodes[n - 1] */
	GHashTable *by_key;  /* key -> node number */
	GHashTable *kids;    /* parent key -> GArray of node numbers */
	GPtrArray *declared; /* of char *: the paths as given */
};

static void enode_free(gpointer p)
{
	struct enode *n = p;

	g_free(n->key);
	g_free(n->name);
	g_free(n->parent_key);
	g_free(n);
}

static void kids_free(gpointer p)
{
	g_array_unref(p);
}

/* The node for @key (parent @parent_key), made if new. */
static guint node_add(struct emptydirs *d, const char *key,
		      const char *parent_key)
{
	gpointer v = g_hash_table_lookup(d->by_key, key);
	struct enode *n;
	GArray *kids;
	guint num;

	if (v)
		return GPOINTER_TO_UINT(v);
	n = g_new0(struct enode, 1);
	n->key = g_strdup(key);
	n->parent_key = g_strdup(parent_key);
	/* The last component, without the trailing '/'. */
	n->name = g_strndup(key + strlen(parent_key),
			    strlen(key) - strlen(parent_key) - 1);
	g_ptr_array_add(d->nodes, n);
	num = d->nodes->len;
	g_hash_table_insert(d->by_key, n->key, GUINT_TO_POINTER(num));
	kids = g_hash_table_lookup(d->kids, parent_key);
	if (!kids) {
		kids = g_array_new(FALSE, FALSE, sizeof(guint));
		g_hash_table_insert(d->kids, n->parent_key, kids);
	}
	g_array_append_val(kids, num);
	return num;
}

static const struct enode *node_get(const struct emptydirs *d, guint node)
{
	g_assert(node >= 1 && node <= d->nodes->len);
	return g_ptr_array_index(d->nodes, node - 1);
}

/* Names compare as bytes, and as a directory's sort key ("name/"). */
static gint node_cmp(gconstpointer a, gconstpointer b, gpointer user)
{
	const struct emptydirs *d = user;

	return strcmp(node_get(d, *(const guint *)a)->key,
		      node_get(d, *(const guint *)b)->key);
}

struct emptydirs *emptydirs_new(const char *prefix, const GPtrArray *paths)
{
	struct emptydirs *d = g_new0(struct emptydirs, 1);
	GHashTableIter it;
	gpointer kids;
	guint i;

	d->nodes = g_ptr_array_new_with_free_func(enode_free);
	d->by_key = g_hash_table_new(g_str_hash, g_str_equal);
	d->kids =
		g_hash_table_new_full(g_str_hash, g_str_equal, NULL, kids_free);
	d->declared = g_ptr_array_new_with_free_func(g_free);
	for (i = 0; paths && i < paths->len; i++) {
		const char *path = g_ptr_array_index(paths, i);
		g_autofree char *parent = g_strdup(prefix);
		const char *p = path;

		g_ptr_array_add(d->declared, g_strdup(path));
		for (;;) {
			const char *slash = strchr(p, '/');
			gsize end =
				slash ? (gsize)(slash - path) : strlen(path);
			g_autofree char *key = g_strdup_printf(
				"%s%.*s/", prefix, (int)end, path);

			node_add(d, key, parent);
			if (!slash)
				break;
			g_free(parent);
			parent = g_steal_pointer(&key);
			p = slash + 1;
		}
	}
	/* Sorted once all are in: node numbers stay in the order made. */
	g_hash_table_iter_init(&it, d->kids);
	while (g_hash_table_iter_next(&it, NULL, &kids))
		g_array_sort_with_data(kids, node_cmp, d);
	return d;
}

void emptydirs_free(struct emptydirs *d)
{
	if (!d)
		return;
	g_hash_table_unref(d->kids);
	g_hash_table_unref(d->by_key);
	g_ptr_array_unref(d->nodes);
	g_ptr_array_unref(d->declared);
	g_free(d);
}

guint emptydirs_count(const struct emptydirs *d)
{
	return d ? d->nodes->len : 0;
}

guint emptydirs_child(const struct emptydirs *d, const char *dir_key,
		      const char *name)
{
	g_autofree char *key = NULL;

	if (!d || !d->nodes->len)
		return 0;
	key = g_strconcat(dir_key, name, "/", NULL);
	return GPOINTER_TO_UINT(g_hash_table_lookup(d->by_key, key));
}

gboolean emptydirs_child_at(const struct emptydirs *d, const char *dir_key,
			    guint64 pos, guint *node)
{
	GArray *kids = d ? g_hash_table_lookup(d->kids, dir_key) : NULL;

	if (!kids || pos >= kids->len)
		return FALSE;
	*node = g_array_index(kids, guint, pos);
	return TRUE;
}

const char *emptydirs_key(const struct emptydirs *d, guint node)
{
	return node_get(d, node)->key;
}

const char *emptydirs_name(const struct emptydirs *d, guint node)
{
	return node_get(d, node)->name;
}

const char *emptydirs_parent_key(const struct emptydirs *d, guint node)
{
	return node_get(d, node)->parent_key;
}

guint emptydirs_declared_count(const struct emptydirs *d)
{
	return d ? d->declared->len : 0;
}

const char *emptydirs_declared(const struct emptydirs *d, guint i)
{
	g_return_val_if_fail(i < d->declared->len, NULL);
	return g_ptr_array_index(d->declared, i);
}

enum emptydirs_state emptydirs_state(const struct emptydirs *d, guint i,
				     const struct index *idx, char **object)
{
	const char *p = emptydirs_declared(d, i);
	index_id cur = INDEX_ROOT;

	if (object)
		*object = NULL;
	while (*p) {
		const char *slash = strchr(p, '/');
		gsize len = slash ? (gsize)(slash - p) : strlen(p);

		if (!index_lookup(idx, cur, p, len, &cur))
			return EMPTYDIRS_SHOWN;
		if (!index_is_dir(idx, cur)) {
			if (object)
				*object = index_key(idx, cur);
			return EMPTYDIRS_OBJECT;
		}
		p += len + (slash ? 1 : 0);
	}
	return EMPTYDIRS_INDEXED;
}

void emptydirs_report(const struct emptydirs *d, const struct index *idx)
{
	guint i, n = d ? emptydirs_declared_count(d) : 0;

	for (i = 0; i < n; i++) {
		g_autofree char *object = NULL;
		g_autofree char *path =
			log_escape(emptydirs_declared(d, i), -1);
		enum emptydirs_state st = emptydirs_state(d, i, idx, &object);
		g_autofree char *o = object ? log_escape(object, -1) : NULL;

		if (st == EMPTYDIRS_OBJECT)
			log_msg(LOG_LEVEL_NOTICE,
				"empty_dirs: '%s' is not shown as a "
				"directory: the object s3://%s/%s is on its "
				"path, and objects win",
				path, index_bucket(idx), o);
		else
			log_msg(LOG_LEVEL_DEBUG, "empty_dirs: '%s' %s", path,
				st == EMPTYDIRS_INDEXED
					? "is a directory of the index"
					: "is not in the index: shown empty");
	}
}

enum emptydirs_dlio emptydirs_dlio(gboolean train, gboolean valid,
				   const GPtrArray *declared,
				   const char *bucket, const char *prefix,
				   char **detail)
{
	*detail = NULL;
	if (!train || valid)
		return EMPTYDIRS_DLIO_NONE;
	/* GLib's find takes no const array; it does not change it. */
	if (declared &&
	    g_ptr_array_find_with_equal_func((GPtrArray *)declared, "valid",
					     g_str_equal, NULL)) {
		*detail = g_strdup_printf("s3://%s/%svalid/ has no key; "
					  "-o empty_dirs=valid declares it",
					  bucket, prefix);
		return EMPTYDIRS_DLIO_DECLARED;
	}
	*detail = g_strdup_printf(
		"s3://%s/%strain/ has keys and s3://%s/%svalid/ none: DLIO and "
		"MLPerf Storage open valid/ too, and would stop with ENOENT",
		bucket, prefix, bucket, prefix);
	return EMPTYDIRS_DLIO_MISSING;
}

/* Whether @name is a directory of @idx's root. */
static gboolean root_has_dir(const struct index *idx, const char *name)
{
	index_id id;

	return index_lookup(idx, INDEX_ROOT, name, strlen(name), &id) &&
	       index_is_dir(idx, id);
}

enum emptydirs_dlio emptydirs_dlio_of_index(const struct index *idx,
					    const GPtrArray *declared,
					    char **detail)
{
	return emptydirs_dlio(root_has_dir(idx, "train"),
			      root_has_dir(idx, "valid"), declared,
			      index_bucket(idx), index_prefix(idx), detail);
}
