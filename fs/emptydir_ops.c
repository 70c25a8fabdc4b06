/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The directories of -o empty_dirs= in the FUSE tree: a namespace beside
 * the overlay, below the dispatch of ops.c.  The contract is
 * emptydir_ops.h.
 */
#include <string.h>
#include <sys/stat.h>

#include "attr.h"
#include "emptydir_ops.h"

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

static void node_stat(struct fs *fs, guint node, struct stat *st)
{
	struct index *idx = fs_current_index(fs);
	struct index_stats s;

	index_get_stats(idx, &s);
	index_unref(idx);
	memset(st, 0, sizeof(*st));
	st->st_ino = index_key_ino(emptydirs_key(fs->ed, node), -1);
	fill_mode(fs, st, TRUE, fs_writes(fs));
	st->st_nlink = 2;
	st->st_blksize = BLOCK;
	st->st_mtime = st->st_ctime = st->st_atime = (time_t)s.created;
}

gboolean empty_dir_getattr(fuse_req_t req, struct fs *fs, fuse_ino_t ino)
{
	guint node = empty_dir_node(fs, ino);
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
	if (!empty_dir_node(fs, ino))
		return FALSE;
	fi->cache_readdir = 1;
	fuse_reply_open(req, fi);
	return TRUE;
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
	e.ino = empty_dir_ino(node);
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
		e.ino = empty_dir_ino(node);
		e.generation = 1;
		e.attr_timeout = e.entry_timeout = fs->opts.entry_timeout;
		if (!dirbuf_add(db, name, &e, (off_t)(EMPTY_DIROFF + i + 1)))
			return FALSE;
	}
	return TRUE;
}

gboolean dirbuf_empty_dir(struct dirbuf *db, struct fs *fs, fuse_ino_t ino,
			  off_t *off)
{
	guint node = empty_dir_node(fs, ino);
	const char *key;

	g_return_val_if_fail(node != 0, FALSE);
	key = emptydirs_key(fs->ed, node);
	return dirbuf_dots(db, off, index_key_ino(key, -1),
			   key_ino(fs, emptydirs_parent_key(fs->ed, node))) &&
	       dirbuf_empty_dirs(db, fs, *off, key, NULL, 0);
}
