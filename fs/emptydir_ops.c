/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "emptydir_ops.h"
#include "log.h"
#include "overlay_ops.h"

static guint node_of(struct fs *fs, fuse_ino_t ino)
{
	guint64 n = ino & ID_MASK;

	if (!is_empty_dir(ino) || n < 1 || n > emptydirs_count(fs->ed))
		return 0;
	return (guint)n;
}

static fuse_ino_t node_id(guint node)
{
	return (EMPTY_GEN << GEN_SHIFT) | node;
}

/* st_ino of the directory with key @key: the root's for the prefix. */
static ino_t key_ino(struct fs *fs, const char *key)
{
	struct index *idx = fs_current_index(fs);
	ino_t ino = strcmp(key, index_prefix(idx)) == 0
			    ? INDEX_ROOT_INO
			    : index_key_ino(key, -1);

	index_unref(idx);
	return ino;
}

const char *empty_dir_key(struct fs *fs, fuse_ino_t ino)
{
	guint node = node_of(fs, ino);

	return node ? emptydirs_key(fs->ed, node) : NULL;
}

static void node_stat(struct fs *fs, guint node, struct stat *st)
{
	struct index *idx = fs_current_index(fs);
	struct index_stats s;

	index_get_stats(idx, &s);
	index_unref(idx);
	memset(st, 0, sizeof(*st));
	st->st_ino = index_key_ino(emptydirs_key(fs->ed, node), -1);
	fill_mode(fs, st, TRUE, fs->ov != NULL);
	st->st_nlink = 2;
	st->st_blksize = BLOCK;
	st->st_mtime = st->st_ctime = st->st_atime = (time_t)s.created;
}

gboolean empty_dir_getattr(fuse_req_t req, struct fs *fs, fuse_ino_t ino)
{
	guint node = node_of(fs, ino);
	struct stat st;

	if (!node)
		return FALSE;
	node_stat(fs, node, &st);
	fuse_reply_attr(req, &st, fs->opts.entry_timeout);
	return TRUE;
}

gboolean empty_dir_opendir(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
			   struct fuse_file_info *fi)
{
	if (!node_of(fs, ino))
		return FALSE;
	fi->cache_readdir = 1;
	fuse_reply_open(req, fi);
	return TRUE;
}

gboolean empty_dir_declared(struct fs *fs, const char *dir_key,
			    const char *name)
{
	return emptydirs_child(fs->ed, dir_key, name) != 0;
}

gboolean empty_dir_lookup(fuse_req_t req, struct fs *fs, struct index *idx,
			  index_id dir, fuse_ino_t parent, const char *name)
{
	g_autofree char *key = idx ? index_key(idx, dir) : NULL;
	const char *dir_key = idx ? key : empty_dir_key(fs, parent);
	guint node = dir_key ? emptydirs_child(fs->ed, dir_key, name) : 0;
	struct fuse_entry_param e = { 0 };

	if (!node)
		return FALSE;
	/* Fixed for the mount's life: no lookup to count. */
	e.ino = node_id(node);
	e.generation = 1;
	e.attr_timeout = e.entry_timeout = fs->opts.entry_timeout;
	node_stat(fs, node, &e.attr);
	fuse_reply_entry(req, &e);
	return TRUE;
}

gboolean dirbuf_empty_dirs(struct dirbuf *db, struct fs *fs, off_t off,
			   const char *dir_key, struct index *idx, index_id dir)
{
	guint64 i = (guint64)off > EMPTY_DIROFF ? off - EMPTY_DIROFF : 0;
	index_id shadow;
	guint node;

	if ((guint64)off >= OVERLAY_DIROFF)
		return TRUE;
	for (; emptydirs_child_at(fs->ed, dir_key, i, &node); i++) {
		const char *name = emptydirs_name(fs->ed, node);
		struct fuse_entry_param e = { 0 };

		if (idx && index_lookup(idx, dir, name, strlen(name), &shadow))
			continue;
		node_stat(fs, node, &e.attr);
		e.ino = node_id(node);
		e.generation = 1;
		e.attr_timeout = e.entry_timeout = fs->opts.entry_timeout;
		if (!dirbuf_add(db, name, &e, (off_t)(EMPTY_DIROFF + i + 1)))
			return FALSE;
	}
	return TRUE;
}

void readdir_empty_dir(struct dirbuf *db, struct fs *fs, fuse_ino_t ino,
		       off_t off)
{
	guint node = node_of(fs, ino);
	const char *key;

	if (!node) {
		fuse_reply_err(db->req, ESTALE);
		return;
	}
	key = emptydirs_key(fs->ed, node);
	if (dirbuf_dots(db, &off, index_key_ino(key, -1),
			key_ino(fs, emptydirs_parent_key(fs->ed, node))) &&
	    dirbuf_empty_dirs(db, fs, off, key, NULL, 0) && fs->ov)
		dirbuf_overlay(db, fs, off, key, NULL, 0);
	fuse_reply_buf(db->req, db->buf, db->used);
}

void empty_dirs_report(struct fs *fs, struct index *idx)
{
	guint i, n = emptydirs_declared_count(fs->ed);

	for (i = 0; i < n; i++) {
		g_autofree char *object = NULL;
		g_autofree char *path =
			log_escape(emptydirs_declared(fs->ed, i), -1);
		enum emptydirs_state st =
			emptydirs_state(fs->ed, i, idx, &object);
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
