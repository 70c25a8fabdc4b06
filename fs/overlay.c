/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * overlay.c - the names the index lacks (overlay.h): the tables of nodes
 * and the keys known missing, lookups on S3, create, mkdir, unlink and
 * rmdir, opens, and the uploads at close or fsync (a file buffered whole
 * goes up with one PUT; a streamed one is completed by
 * overlay_stream.c).  Writes and size changes are overlay_write.c's.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "index.h"
#include "log.h"
#include "ov_buf.h"
#include "overlay_stream.h"
#include "overlay_tables.h"
#include "upload.h"

static void onode_free(void *p)
{
	struct onode *n = p;

	g_free(n->key);
	g_free(n->etag);
	if (n->data)
		ov_buf_free(n->data);
	g_clear_error(&n->broken);
	g_free(n->s3_etag);
	g_mutex_clear(&n->wlock);
	g_free(n);
}

struct overlay *overlay_new(struct s3 *s3, guint64 write_max, guint64 part_size,
			    guint parts_max, double negative_timeout)
{
	struct overlay *ov = g_new0(struct overlay, 1);

	ov->s3 = s3;
	ov->up = uploader_new(s3, part_size, parts_max);
	ov->write_max = write_max ? write_max : OVERLAY_DEFAULT_WRITE_MAX;
	g_mutex_init(&ov->lock);
	g_cond_init(&ov->idle);
	ov->by_node = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL,
					    onode_free);
	ov->by_key = g_hash_table_new(g_str_hash, g_str_equal);
	ov->missing =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	ov->negative_us = (gint64)(negative_timeout * G_USEC_PER_SEC);
	return ov;
}

void overlay_free(struct overlay *ov)
{
	if (!ov)
		return;
	g_hash_table_unref(ov->missing);
	g_hash_table_unref(ov->by_key);
	g_hash_table_unref(ov->by_node);
	uploader_free(ov->up);
	g_cond_clear(&ov->idle);
	g_mutex_clear(&ov->lock);
	g_free(ov);
}

/* -- the table (under ov->lock) ----------------------------------------- */

static void fill_attr(const struct onode *n, struct ov_attr *out)
{
	out->node = n->node;
	out->is_dir = n->is_dir;
	out->size = n->is_dir ? 0 : n->size;
	out->mtime = n->mtime;
	if (n->is_dir) {
		g_autofree char *marker = g_strconcat(n->key, "/", NULL);

		out->ino = index_key_ino(marker, -1);
	} else {
		out->ino = index_key_ino(n->key, -1);
	}
}

/* Drops @n from the names; it stays reachable by number. */
static void node_unname(struct overlay *ov, struct onode *n)
{
	if (!n->removed && g_hash_table_lookup(ov->by_key, n->key) == n)
		g_hash_table_remove(ov->by_key, n->key);
	n->removed = TRUE;
}

/* Drops @n from the names; freed (now or later) once nothing refers to
 * it.  @n may be gone on return. */
static void node_remove(struct overlay *ov, struct onode *n)
{
	node_unname(ov, n);
	if (!n->lookups && !n->opens)
		g_hash_table_remove(ov->by_node, &n->node);
}

/* The node named @key, or a new one. */
static struct onode *node_get(struct overlay *ov, const char *key,
			      gboolean is_dir)
{
	struct onode *n = g_hash_table_lookup(ov->by_key, key);

	if (n && n->is_dir == is_dir)
		return n;
	if (n) /* a file became a directory, or the reverse */
		node_remove(ov, n);
	g_hash_table_remove(ov->missing, key);
	n = g_new0(struct onode, 1);
	n->node = ++ov->next_node;
	n->key = g_strdup(key);
	n->is_dir = is_dir;
	g_mutex_init(&n->wlock);
	n->mtime = g_get_real_time() / G_USEC_PER_SEC;
	g_hash_table_insert(ov->by_node, &n->node, n);
	g_hash_table_insert(ov->by_key, n->key, n);
	return n;
}

/* Whether S3 said it lacks @key less than negative_timeout ago. */
static gboolean missing_known(struct overlay *ov, const char *key)
{
	gpointer until;

	if (!g_hash_table_lookup_extended(ov->missing, key, NULL, &until))
		return FALSE;
	if ((gsize)g_get_monotonic_time() < GPOINTER_TO_SIZE(until))
		return TRUE;
	g_hash_table_remove(ov->missing, key);
	return FALSE;
}

static gboolean missing_expired(gpointer key, gpointer until, gpointer now)
{
	(void)key;
	return GPOINTER_TO_SIZE(until) <= GPOINTER_TO_SIZE(now);
}

/* Remembers that S3 lacks @key; when full, the expired go, else all. */
static void missing_add(struct overlay *ov, const char *key)
{
	gint64 now = g_get_monotonic_time();

	if (ov->negative_us <= 0)
		return;
	if (g_hash_table_size(ov->missing) >= OV_MISSING_MAX) {
		g_hash_table_foreach_remove(ov->missing, missing_expired,
					    GSIZE_TO_POINTER(now));
		if (g_hash_table_size(ov->missing) >= OV_MISSING_MAX)
			g_hash_table_remove_all(ov->missing);
	}
	g_hash_table_insert(ov->missing, g_strdup(key),
			    GSIZE_TO_POINTER(now + ov->negative_us));
}

/* -- S3 (no lock held) -------------------------------------------------- */

/* Whether some key starts with @key + "/": a directory on S3. */
static gboolean probe_dir(struct overlay *ov, const char *key, gboolean *found,
			  GError **error)
{
	g_autofree char *prefix = g_strconcat(key, "/", NULL);
	struct s3_list_args args = { .prefix = prefix,
				     .max_keys = 1,
				     .endpoint = -1 };
	struct s3_list_page *page = s3_list(ov->s3, &args, NULL, error);

	if (!page)
		return FALSE;
	*found = page->objects->len > 0 || page->common_prefixes->len > 0;
	s3_list_page_free(page);
	return TRUE;
}

gboolean overlay_lookup(struct overlay *ov, const char *key, gboolean probe,
			struct ov_attr *out, GError **error)
{
	struct s3_object_meta meta = { 0 };
	g_autoptr(GError) err = NULL;
	gboolean is_dir = FALSE, found = FALSE;
	struct onode *n;

	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_key, key);
	/* What this mount wrote, it knows; what others did, S3 says. */
	if (n && !n->removed && (n->is_dir || n->etag == NULL || n->opens)) {
		n->lookups++;
		fill_attr(n, out);
		g_mutex_unlock(&ov->lock);
		return TRUE;
	}
	if (!probe || missing_known(ov, key)) {
		g_mutex_unlock(&ov->lock);
		g_set_error(error, BFS_ERROR, ENOENT, "no such name");
		return FALSE;
	}
	g_mutex_unlock(&ov->lock);
	if (s3_head(ov->s3, key, -1, &meta, &err)) {
		found = TRUE;
	} else if (bfs_error_errno(err) != ENOENT) {
		g_propagate_error(error, g_steal_pointer(&err));
		return FALSE;
	} else if (!probe_dir(ov, key, &is_dir, error)) {
		return FALSE;
	}
	g_mutex_lock(&ov->lock);
	if (!found && !is_dir) {
		/* Unless this mount made it meanwhile. */
		if (!g_hash_table_lookup(ov->by_key, key))
			missing_add(ov, key);
		g_mutex_unlock(&ov->lock);
		g_set_error(error, BFS_ERROR, ENOENT, "no object '%s' on S3",
			    key);
		return FALSE;
	}
	n = node_get(ov, key, is_dir);
	if (found && !n->opens) {
		n->size = meta.size;
		n->mtime = meta.mtime ? meta.mtime : n->mtime;
		g_free(n->etag);
		n->etag = g_strdup(meta.etag ? meta.etag : "");
		n->version = n->uploaded;
	}
	n->lookups++;
	fill_attr(n, out);
	g_mutex_unlock(&ov->lock);
	s3_object_meta_clear(&meta);
	return TRUE;
}

gboolean overlay_getattr(struct overlay *ov, guint64 node, struct ov_attr *out)
{
	struct onode *n;
	gboolean ok;

	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_node, &node);
	ok = n && !n->removed;
	if (ok)
		fill_attr(n, out);
	g_mutex_unlock(&ov->lock);
	return ok;
}

char *overlay_key(struct overlay *ov, guint64 node)
{
	struct onode *n;
	char *key = NULL;

	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_node, &node);
	if (n && !n->removed)
		key = g_strdup(n->key);
	g_mutex_unlock(&ov->lock);
	return key;
}

void overlay_forget(struct overlay *ov, guint64 node, guint64 nlookup)
{
	struct onode *n;

	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_node, &node);
	if (n) {
		n->lookups -= MIN(n->lookups, nlookup);
		/* A name found on S3, unchanged here, is asked for again
		 * next time; names made here stay, to be listed. */
		if (!n->lookups && !n->opens && n->etag &&
		    n->version == n->uploaded && !n->uploading)
			node_remove(ov, n);
		else if (n->removed && !n->lookups && !n->opens)
			g_hash_table_remove(ov->by_node, &n->node);
	}
	g_mutex_unlock(&ov->lock);
}

static struct ov_file *file_new(struct overlay *ov, struct onode *n,
				gboolean writable)
{
	struct ov_file *f = g_new0(struct ov_file, 1);

	f->ov = ov;
	f->n = n;
	f->writable = writable;
	n->opens++;
	if (writable) {
		/* A writer with none in use: the handles closed before it
		 * are stale (ov_stale()). */
		if (!ov_writers(n))
			n->wgen++;
		f->wgen = n->wgen;
		n->writers++;
	}
	return f;
}

gboolean overlay_create(struct overlay *ov, const char *key,
			struct ov_attr *out, struct ov_file **file,
			GError **error)
{
	struct onode *n;

	g_mutex_lock(&ov->lock);
	n = node_get(ov, key, FALSE);
	if (ov_writers(n) && n->streamable) {
		g_mutex_unlock(&ov->lock);
		g_set_error(error, BFS_ERROR, EBUSY,
			    "'%s' is being written by another handle", key);
		return FALSE;
	}
	n->streamable = TRUE;
	n->sealed = FALSE;
	n->base = 0;
	if (!n->data)
		n->data = ov_buf_new();
	ov_buf_set_size(n->data, 0);
	n->size = 0;
	g_clear_error(&n->broken);
	n->mtime = g_get_real_time() / G_USEC_PER_SEC;
	/* Created empty: uploaded at the first flush, even if nothing is
	 * written, so the name exists for other hosts too. */
	n->version = n->uploaded + 1;
	n->lookups++;
	fill_attr(n, out);
	*file = file_new(ov, n, TRUE);
	g_mutex_unlock(&ov->lock);
	return TRUE;
}

gboolean overlay_mkdir(struct overlay *ov, const char *key, struct ov_attr *out,
		       GError **error)
{
	g_autofree char *marker = g_strconcat(key, "/", NULL);
	g_autoptr(GBytes) empty = g_bytes_new_static("", 0);
	struct onode *n;

	if (!s3_put(ov->s3, marker, empty, "application/x-directory", NULL,
		    error)) {
		g_prefix_error(error, "mkdir: ");
		return FALSE;
	}
	g_mutex_lock(&ov->lock);
	n = node_get(ov, key, TRUE);
	n->lookups++;
	fill_attr(n, out);
	g_mutex_unlock(&ov->lock);
	return TRUE;
}

gboolean overlay_unlink(struct overlay *ov, const char *key, GError **error)
{
	struct onode *n;
	gboolean known;

	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_key, key);
	/* An upload still in flight would bring the object back. */
	while (n && n->uploading) {
		g_cond_wait(&ov->idle, &ov->lock);
		n = g_hash_table_lookup(ov->by_key, key);
	}
	known = n && !n->removed && !n->is_dir;
	/* Still written: gone now, so its close uploads nothing (it would
	 * bring the object back after the DELETE). */
	if (known && n->writers)
		node_unname(ov, n);
	g_mutex_unlock(&ov->lock);
	if (!known) {
		g_set_error(error, BFS_ERROR, EPERM,
			    "'%s' is not a file the index lacks", key);
		return FALSE;
	}
	if (!s3_delete(ov->s3, key, NULL, error)) {
		g_prefix_error(error, "unlink: ");
		return FALSE;
	}
	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_key, key);
	if (n && !n->is_dir)
		node_remove(ov, n);
	g_mutex_unlock(&ov->lock);
	return TRUE;
}

/* Whether anything but @marker is under it (two keys are enough). */
static gboolean dir_empty(struct overlay *ov, const char *marker,
			  gboolean *empty, GError **error)
{
	struct s3_list_args args = { .prefix = marker,
				     .max_keys = 2,
				     .endpoint = -1 };
	struct s3_list_page *page = s3_list(ov->s3, &args, NULL, error);
	guint i;

	if (!page)
		return FALSE;
	*empty = page->common_prefixes->len == 0;
	for (i = 0; i < page->objects->len; i++) {
		const struct s3_object *o = page->objects->pdata[i];

		if (strcmp(o->key, marker) != 0)
			*empty = FALSE;
	}
	s3_list_page_free(page);
	return TRUE;
}

gboolean overlay_rmdir(struct overlay *ov, const char *key, GError **error)
{
	g_autofree char *marker = g_strconcat(key, "/", NULL);
	struct onode *n;
	gboolean known, empty = FALSE;

	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_key, key);
	known = n && !n->removed && n->is_dir;
	g_mutex_unlock(&ov->lock);
	if (!known) {
		g_set_error(error, BFS_ERROR, EPERM,
			    "'%s' is not a directory the index lacks", key);
		return FALSE;
	}
	if (!dir_empty(ov, marker, &empty, error)) {
		g_prefix_error(error, "rmdir: ");
		return FALSE;
	}
	if (!empty) {
		g_set_error(error, BFS_ERROR, ENOTEMPTY,
			    "rmdir: keys remain under '%s'", marker);
		return FALSE;
	}
	if (!s3_delete(ov->s3, marker, NULL, error)) {
		g_prefix_error(error, "rmdir: ");
		return FALSE;
	}
	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_key, key);
	if (n && n->is_dir)
		node_remove(ov, n);
	g_mutex_unlock(&ov->lock);
	return TRUE;
}

/* -- files -------------------------------------------------------------- */

struct ov_file *overlay_open(struct overlay *ov, guint64 node,
			     gboolean writable, gboolean truncate,
			     GError **error)
{
	struct s3_get_args args = { .endpoint = -1 };
	g_autofree char *key = NULL;
	g_autoptr(GBytes) bytes = NULL;
	struct ov_file *f = NULL;
	struct onode *n;
	gsize len;

	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_node, &node);
	if (!n || n->removed) {
		g_mutex_unlock(&ov->lock);
		g_set_error(error, BFS_ERROR, ENOENT, "removed");
		return NULL;
	}
	if (n->is_dir) {
		g_mutex_unlock(&ov->lock);
		g_set_error(error, BFS_ERROR, EISDIR, "a directory");
		return NULL;
	}
	/* Written now: parts of it are on S3 already (base), or it would
	 * get a second writer. */
	if (n->streamable && ov_writers(n) && (n->base || writable)) {
		g_mutex_unlock(&ov->lock);
		g_set_error(error, BFS_ERROR, EBUSY,
			    "'%s' is being written as a multipart upload: "
			    "readable once closed, one writer at a time",
			    n->key);
		return NULL;
	}
	if (writable && !ov_writers(n)) {
		/* Written again from its start, it streams again; changed in
		 * place, it is buffered whole (write_max). */
		n->streamable = truncate;
		n->sealed = FALSE;
		n->base = 0;
	}
	if (n->data || truncate) {
		if (!n->data)
			n->data = ov_buf_new();
		/* Emptied: S3 gets the empty file at close, even when the
		 * old bytes were never fetched. */
		if (truncate)
			g_clear_error(&n->broken);
		if (truncate && (n->data->len || n->size)) {
			ov_buf_set_size(n->data, 0);
			n->size = 0;
			n->version++;
		}
		f = file_new(ov, n, writable);
		g_mutex_unlock(&ov->lock);
		return f;
	}
	if (n->size > ov->write_max) {
		g_mutex_unlock(&ov->lock);
		g_set_error(error, BFS_ERROR, EFBIG,
			    "'%s' is larger than write_max (%" G_GUINT64_FORMAT
			    " bytes)",
			    n->key, ov->write_max);
		return NULL;
	}
	key = g_strdup(n->key);
	args.if_match = n->etag && *n->etag ? g_strdup(n->etag) : NULL;
	/* The size S3 gave, so the body limit fits it (0: to the end). */
	args.length = n->size;
	n->opens++; /* keeps the node while we fetch */
	g_mutex_unlock(&ov->lock);

	bytes = s3_get(ov->s3, key, &args, NULL, error);
	g_free((char *)args.if_match);
	g_mutex_lock(&ov->lock);
	n->opens--;
	if (bytes && !n->removed) {
		if (!n->data) {
			const guint8 *p = g_bytes_get_data(bytes, &len);

			n->data = ov_buf_new();
			ov_buf_set_size(n->data, len);
			if (len) /* an empty buffer has no data to copy to */
				memcpy(n->data->data, p, len);
			n->size = len;
		}
		f = file_new(ov, n, writable);
	} else if (bytes) {
		g_set_error(error, BFS_ERROR, ENOENT, "removed");
	}
	if (!f && n->removed && !n->lookups && !n->opens)
		g_hash_table_remove(ov->by_node, &n->node);
	g_mutex_unlock(&ov->lock);
	return f;
}

gsize overlay_read(struct ov_file *f, guint64 off, gsize size, char *buf)
{
	struct onode *n = f->n;
	gsize got = 0;

	g_mutex_lock(&f->ov->lock);
	/* A streamed file's parts sent are no longer here. */
	if (n->data && off >= n->base && off - n->base < n->data->len) {
		got = MIN(size, n->data->len - (off - n->base));
		memcpy(buf, n->data->data + (off - n->base), got);
	}
	g_mutex_unlock(&f->ov->lock);
	return got;
}

void overlay_wake(struct overlay *ov)
{
	uploader_wake(ov->up);
}

static gboolean flush_put(struct ov_file *f, GError **error);

void overlay_set_owner(struct ov_file *f, guint pid)
{
	f->owner = pid;
}

gboolean overlay_close(struct ov_file *f, guint pid, const gint *stop,
		       GError **error)
{
	GError *err = NULL;
	gboolean ok;

	if (f->writable && f->owner && pid != f->owner)
		return TRUE;
	ok = overlay_flush(f, stop, &err);
	g_mutex_lock(&f->ov->lock);
	/* Another handle's file now: nothing of this one's to send. */
	if (!ok && ov_stale(f)) {
		g_clear_error(&err);
		ok = TRUE;
	}
	/* Closed by its opener: the name may be opened for writing again
	 * before the kernel releases this handle. */
	if (f->writable && f->owner)
		ov_set_closed(f, TRUE);
	g_mutex_unlock(&f->ov->lock);
	if (err)
		g_propagate_error(error, err);
	return ok;
}

gboolean overlay_flush(struct ov_file *f, const gint *stop, GError **error)
{
	struct onode *n = f->n;
	gboolean ok;

	/* Not under ov->lock: wlock comes first. */
	g_mutex_lock(&n->wlock);
	if (f->writable && n->up)
		ok = ov_stream_complete(f, stop, error);
	else
		ok = flush_put(f, error);
	g_mutex_unlock(&n->wlock);
	return ok;
}

/* The file's bytes, whole in memory, PUT as one object. */
static gboolean flush_put(struct ov_file *f, GError **error)
{
	struct overlay *ov = f->ov;
	struct onode *n = f->n;
	struct s3_object_meta meta = { 0 };
	g_autoptr(GBytes) body = NULL;
	g_autofree char *key = NULL;
	guint64 version;
	gboolean ok;

	g_mutex_lock(&ov->lock);
	/* One upload of a node at a time, so the last version written is
	 * the last one S3 takes. */
	while (n->uploading)
		g_cond_wait(&ov->idle, &ov->lock);
	if (ov_stale(f)) {
		g_propagate_error(error, ov_stale_error(f));
		g_mutex_unlock(&ov->lock);
		return FALSE;
	}
	if (!f->writable || n->removed || n->version == n->uploaded) {
		g_mutex_unlock(&ov->lock);
		return TRUE;
	}
	if (n->broken) {
		/* Uploading what is buffered would publish a file cut short,
		 * complete to every reader. */
		g_set_error(error, BFS_ERROR, bfs_error_errno(n->broken),
			    "'%s' not uploaded: an earlier write failed: %s",
			    n->key, n->broken->message);
		g_mutex_unlock(&ov->lock);
		f->failed = TRUE;
		return FALSE;
	}
	version = n->version;
	body = g_bytes_new(n->data->data, n->data->len);
	key = g_strdup(n->key);
	n->uploading = TRUE;
	g_mutex_unlock(&ov->lock);

	ok = s3_put(ov->s3, key, body, NULL, &meta, error);
	g_mutex_lock(&ov->lock);
	n->uploading = FALSE;
	g_cond_broadcast(&ov->idle);
	if (!ok) {
		g_mutex_unlock(&ov->lock);
		g_prefix_error(error, "upload of '%s' at close: ", key);
		f->failed = TRUE;
		return FALSE;
	}
	if (version > n->uploaded) {
		n->uploaded = version;
		g_free(n->etag);
		/* A new name is ours until forgotten; see overlay_lookup(). */
		n->etag = NULL;
	}
	g_mutex_unlock(&ov->lock);
	s3_object_meta_clear(&meta);
	return TRUE;
}

void overlay_discard(struct ov_file *f)
{
	f->failed = TRUE;
	overlay_release(f);
}

void overlay_stop(struct ov_file *f)
{
	struct overlay *ov = f->ov;
	struct onode *n = f->n;
	struct upload *up;
	gboolean pending, broke;

	g_mutex_lock(&ov->lock);
	pending = !f->writable || ov_stale(f);
	g_mutex_unlock(&ov->lock);
	if (pending) {
		overlay_release(f);
		return;
	}
	g_mutex_lock(&n->wlock);
	up = g_steal_pointer(&n->up);
	g_mutex_lock(&ov->lock);
	pending = up || (n->version != n->uploaded && !n->removed);
	broke = n->broken != NULL;
	g_mutex_unlock(&ov->lock);
	if (pending) {
		g_autofree char *k = log_escape(n->key, -1);
		g_autoptr(GError) why =
			g_error_new(BFS_ERROR, ECANCELED,
				    "the daemon stopped mid-file (%s)",
				    up	    ? "upload aborted"
				    : broke ? "its upload was aborted "
					      "when a write failed"
					    : "nothing uploaded");

		log_error(LOG_LEVEL_ERR, why, "'%s' not on S3", k);
		if (up)
			upload_abort(up, NULL);
	}
	g_mutex_unlock(&n->wlock);
	/* Half-written: nothing of it goes up now. */
	overlay_discard(f);
}

void overlay_quiesce(struct overlay *ov)
{
	if (ov && !uploader_wait_aborts(ov->up, 30 * G_USEC_PER_SEC))
		log_msg(LOG_LEVEL_WARNING,
			"unmount: the aborts of interrupted uploads did not "
			"end in 30 s; those left stay on S3 (bucketfs-index "
			"uploads --abort)");
}

void overlay_release(struct ov_file *f)
{
	struct overlay *ov = f->ov;
	struct onode *n = f->n;
	g_autoptr(GError) err = NULL;
	gboolean closed;

	/* A stale handle (ov_stale()) is a closed one. */
	g_mutex_lock(&ov->lock);
	closed = f->closed;
	g_mutex_unlock(&ov->lock);
	/* After a failed upload that close() reported, no second try: the
	 * writer was told the file is not on S3.  Closed by its opener and
	 * unused since, it was flushed then; its name may be another
	 * handle's upload by now. */
	if (!f->failed && !closed && !overlay_flush(f, NULL, &err)) {
		g_autofree char *k = log_escape(n->key, -1);

		log_error(LOG_LEVEL_ERR, err, "'%s' is not on S3", k);
	}
	g_mutex_lock(&ov->lock);
	n->opens--;
	if (f->writable)
		n->writers--;
	ov_set_closed(f, FALSE);
	/* The last writer gone, completed or failed, nothing of it is
	 * streaming any more: the name can be opened again. */
	if (!n->writers)
		n->base = 0;
	if (!n->opens && f->failed && n->version != n->uploaded) {
		/* What S3 has is the truth: a name never uploaded goes, an
		 * older upload is looked up again. */
		if (!n->uploaded && !n->etag) {
			node_unname(ov, n);
		} else {
			n->version = n->uploaded;
			g_free(n->etag);
			n->etag = g_strdup("");
		}
	}
	if (!n->opens && n->version == n->uploaded && n->data) {
		/* Nothing to keep: the next open fetches it again. */
		ov_buf_free(n->data);
		n->data = NULL;
	}
	if (n->removed && !n->lookups && !n->opens)
		g_hash_table_remove(ov->by_node, &n->node);
	g_mutex_unlock(&ov->lock);
	g_free(f);
}

/* -- listing ------------------------------------------------------------ */

static gint dirent_cmp(gconstpointer a, gconstpointer b)
{
	const struct ov_dirent *x = *(struct ov_dirent *const *)a;
	const struct ov_dirent *y = *(struct ov_dirent *const *)b;

	return strcmp(x->name, y->name);
}

static void dirent_free(void *p)
{
	struct ov_dirent *d = p;

	g_free(d->name);
	g_free(d);
}

GPtrArray *overlay_children(struct overlay *ov, const char *dir_key)
{
	GPtrArray *out = g_ptr_array_new_with_free_func(dirent_free);
	gsize plen = strlen(dir_key);
	GHashTableIter it;
	struct onode *n;

	g_mutex_lock(&ov->lock);
	g_hash_table_iter_init(&it, ov->by_key);
	while (g_hash_table_iter_next(&it, NULL, (gpointer *)&n)) {
		struct ov_dirent *d;

		if (n->removed || strncmp(n->key, dir_key, plen) != 0 ||
		    !n->key[plen] || strchr(n->key + plen, '/'))
			continue;
		d = g_new0(struct ov_dirent, 1);
		d->name = g_strdup(n->key + plen);
		fill_attr(n, &d->attr);
		g_ptr_array_add(out, d);
	}
	g_mutex_unlock(&ov->lock);
	g_ptr_array_sort(out, dirent_cmp);
	return out;
}

gboolean overlay_large_file(struct overlay *ov, guint64 node, guint64 *size,
			    char **etag)
{
	struct onode *n;
	gboolean ok;

	g_mutex_lock(&ov->lock);
	n = g_hash_table_lookup(ov->by_node, &node);
	/* Nothing buffered: all of it is on S3 (after an fsync, its writer
	 * may still hold it open). */
	ok = n && !n->removed && !n->is_dir && !n->data &&
	     n->version == n->uploaded && n->size > ov->write_max;
	if (ok) {
		*size = n->size;
		/* RGW 16.2 completes with an empty <ETag>: no If-Match. */
		const char *e = n->etag && *n->etag ? n->etag : n->s3_etag;

		*etag = e && *e ? g_strdup(e) : NULL;
	}
	g_mutex_unlock(&ov->lock);
	return ok;
}
