/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The names the index lacks in the FUSE tree, and the write ops of every
 * mount: a namespace beside the declared directories, below the dispatch
 * of ops.c.  Names of the index or declared by -o empty_dirs= win over
 * the overlay's (emptydirs.h is asked directly).  The contract is
 * overlay_ops.h.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "attr.h"
#include "error.h"
#include "log.h"
#include "open_path.h"
#include "overlay_ops.h"
#include "readahead.h"

void ov_fill_stat(const struct fs *fs, const struct ov_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	/* Owners and modes are not stored: every name shows the mount's
	 * (uid=, file_mode=...), and the kernel lets in whom they allow. */
	fill_mode(fs, st, a->is_dir, fs_writes(fs));
	st->st_nlink = a->is_dir ? 2 : 1;
	st->st_size = (off_t)a->size;
	st->st_blksize = BLOCK;
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_mtime = st->st_ctime = st->st_atime = (time_t)a->mtime;
}

static void reply_ov_entry(fuse_req_t req, struct fs *fs,
			   const struct ov_attr *a)
{
	struct fuse_entry_param e = { 0 };

	e.ino = ov_ino(a->node);
	e.generation = 1;
	e.attr_timeout = e.entry_timeout = OVERLAY_TIMEOUT;
	ov_fill_stat(fs, a, &e.attr);
	if (fuse_reply_entry(req, &e) != 0)
		overlay_forget(fs->ov, a->node, 1);
}

/* Logs a failed writable-mode operation with its cause; replies errno. */
static void reply_ov_error(fuse_req_t req, const GError *error,
			   const char *what, const char *name)
{
	int code = bfs_error_errno(error);

	if (code != ENOENT && code != EEXIST && code != ENOTEMPTY) {
		g_autofree char *n = log_escape(name, -1);

		log_error(LOG_LEVEL_ERR, error, "%s '%s'", what, n);
	}
	fuse_reply_err(req, code);
}

/*
 * The key of a child of directory @parent, prefix included: the
 * directory's key ("" or ending with '/') followed by @name.  NULL with
 * *@err set when @parent is gone or is not a directory.
 */
static char *child_key(struct fs *fs, fuse_ino_t parent, const char *name,
		       int *err)
{
	g_autofree char *dir = NULL;
	index_id id;
	struct index *idx;

	*err = ENOENT;
	if (is_overlay(parent)) {
		struct ov_attr a;

		if (!fs->ov || !overlay_getattr(fs->ov, parent & ID_MASK, &a))
			return NULL;
		*err = ENOTDIR;
		if (!a.is_dir)
			return NULL;
		dir = overlay_key(fs->ov, parent & ID_MASK);
		return dir ? g_strconcat(dir, "/", name, NULL) : NULL;
	}
	idx = resolve(fs, parent, &id);
	if (!idx && empty_dir_key(fs, parent))
		return g_strconcat(empty_dir_key(fs, parent), name, NULL);
	if (!idx)
		return NULL;
	*err = ENOTDIR;
	if (index_is_dir(idx, id))
		dir = index_key(idx, id);
	index_unref(idx);
	return dir ? g_strconcat(dir, name, NULL) : NULL;
}

/* A name the index doesn't have, from the overlay or S3. */
void lookup_overlay(fuse_req_t req, struct fs *fs, fuse_ino_t parent,
		    const char *name)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *key = NULL;
	struct ov_attr a;
	int err;

	key = child_key(fs, parent, name, &err);
	if (!key) {
		fuse_reply_err(req, err);
	} else if (overlay_lookup(fs->ov, key, TRUE, &a, &error)) {
		reply_ov_entry(req, fs, &a);
	} else if (bfs_error_errno(error) == ENOENT) {
		/* Cached briefly: another host may make the name any time
		 * (the overlay keeps the answer as long). */
		struct fuse_entry_param neg = {
			.entry_timeout = fs->opts.negative_timeout,
		};

		fuse_reply_entry(req, &neg);
	} else {
		reply_ov_error(req, error, "lookup", key);
	}
}

/*
 * The overlay's names in directory @dir_key, after the
 * indexed ones (those win a clash), at offsets OVERLAY_DIROFF + i + 1.
 * readdirplus hands no lookup for them (node id 0): the kernel looks
 * them up when used.
 */
void dirbuf_overlay(struct dirbuf *db, struct fs *fs, off_t off,
		    const char *dir_key, struct index *idx, index_id dir)
{
	g_autoptr(GPtrArray) kids = overlay_children(fs->ov, dir_key);
	guint64 i = (guint64)off > OVERLAY_DIROFF ? off - OVERLAY_DIROFF : 0;
	index_id shadow;

	for (; i < kids->len; i++) {
		const struct ov_dirent *d = kids->pdata[i];
		struct fuse_entry_param e = { 0 };

		if (idx &&
		    index_lookup(idx, dir, d->name, strlen(d->name), &shadow))
			continue;
		if (emptydirs_child(fs->ed, dir_key, d->name))
			continue;
		ov_fill_stat(fs, &d->attr, &e.attr);
		if (!dirbuf_add(db, d->name, &e, OVERLAY_DIROFF + i + 1))
			return;
	}
}

void readdir_overlay(struct dirbuf *db, struct fs *fs, fuse_ino_t ino,
		     off_t off)
{
	g_autofree char *key = overlay_key(fs->ov, ino & ID_MASK);
	g_autofree char *dir_key = NULL;
	struct ov_attr a;

	if (!key || !overlay_getattr(fs->ov, ino & ID_MASK, &a)) {
		fuse_reply_err(db->req, ENOENT);
		return;
	}
	dir_key = g_strconcat(key, "/", NULL);
	if (dirbuf_dots(db, &off, a.ino, FUSE_ROOT_ID))
		dirbuf_overlay(db, fs, off, dir_key, NULL, 0);
	fuse_reply_buf(db->req, db->buf, db->used);
}

/*
 * The process (thread group) of @req's caller: FUSE passes the thread,
 * and a file opened by one thread may be closed by another.
 */
static guint req_process(fuse_req_t req)
{
	guint tid = (guint)fuse_req_ctx(req)->pid;
	g_autofree char *path = g_strdup_printf("/proc/%u/status", tid);
	g_autofree char *text = NULL;
	const char *p;

	if (!g_file_get_contents(path, &text, NULL, NULL))
		return tid;
	p = strstr(text, "\nTgid:");
	return p ? (guint)g_ascii_strtoull(p + 6, NULL, 10) : tid;
}

/* A handle on an overlay file: always direct, always flushed at close. */
static void reply_ov_open(fuse_req_t req, struct fs *fs, struct ov_file *of,
			  const char *key, struct fuse_file_info *fi,
			  const struct ov_attr *created)
{
	struct handle *h = handle_new(fs, g_strdup(key));

	h->of = of;
	overlay_set_owner(of, req_process(req));
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	fi->keep_cache = 0;
	if (created) {
		struct fuse_entry_param e = { 0 };

		e.ino = ov_ino(created->node);
		e.generation = 1;
		e.attr_timeout = e.entry_timeout = OVERLAY_TIMEOUT;
		ov_fill_stat(fs, created, &e.attr);
		if (fuse_reply_create(req, &e, fi) != 0) {
			/* creat() failed for the caller: nothing to upload. */
			overlay_discard(h->of);
			h->of = NULL;
			overlay_forget(fs->ov, created->node, 1);
			handle_free(fs, h);
		}
	} else if (fuse_reply_open(req, fi) != 0) {
		handle_free(fs, h);
	}
}

void open_overlay(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
		  struct fuse_file_info *fi)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *key = overlay_key(fs->ov, ino & ID_MASK);
	gboolean wr = (fi->flags & O_ACCMODE) != O_RDONLY;
	struct ov_file *of;
	g_autofree char *etag = NULL;
	guint64 size;

	if (!key) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if ((wr || (fi->flags & O_TRUNC)) && !fs_writes(fs)) {
		fuse_reply_err(req, EROFS); /* -o ro */
		return;
	}
	if (!wr && !(fi->flags & O_TRUNC) &&
	    overlay_large_file(fs->ov, ino & ID_MASK, &size, &etag)) {
		/* A large file written (or found) on S3 reads like an
		 * indexed one: through the readahead, not fetched whole. */
		struct handle *h = handle_new(fs, g_strdup(key));

		h->rf = readahead_open(fs->ra, h->key, etag, size);
		fi->fh = (uint64_t)(uintptr_t)h;
		fi->noflush = 1;
		open_answer(req, fs, ino, h, fi, size, etag);
		return;
	}
	of = overlay_open(fs->ov, ino & ID_MASK, wr, !!(fi->flags & O_TRUNC),
			  &error);
	if (!of)
		reply_ov_error(req, error, "open", key);
	else
		reply_ov_open(req, fs, of, key, fi, NULL);
}

/* A write that may wait for a part slot, and the signal that ends it. */
struct write_call {
	struct overlay *ov;
	gint stop; /* atomic */
};

/*
 * The kernel passes on a signal the writer caught (FUSE INTERRUPT): the
 * wait ends, and op_write() answers EINTR.  libfuse calls this under the
 * request's lock; op_write() clears the hook (that lock) before replying.
 */
static void write_interrupted(fuse_req_t req, void *data)
{
	struct write_call *wc = data;

	(void)req;
	if (interrupt_deferred())
		return;
	g_atomic_int_set(&wc->stop, 1);
	overlay_wake(wc->ov);
}

void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
	      off_t off, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	struct write_call wc = { .ov = data(req)->ov };
	g_autoptr(GError) error = NULL;
	gboolean ok;

	(void)ino;
	if (!h->of) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (interrupt_hook(req, write_interrupted, &wc)) {
		fuse_reply_err(req, EINTR); /* nothing taken */
		return;
	}
	ok = overlay_write(h->of, (guint64)off, buf, size, &wc.stop, &error);
	/* Returns once a running write_interrupted() has. */
	fuse_req_interrupt_func(req, NULL, NULL);
	if (!ok)
		reply_ov_error(req, error, "write", h->key);
	else
		fuse_reply_write(req, size);
}

/* close(): a written overlay file is uploaded here, so close() says how
 * the upload went; only the opener's close does it (overlay_close()). */
void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	struct write_call wc = { .ov = data(req)->ov };
	g_autoptr(GError) error = NULL;
	gboolean ok = TRUE;

	(void)ino;
	/* A signal to the closer (FUSE INTERRUPT) ends the wait for the
	 * parts in flight: close() says EINTR, the upload is aborted. */
	if (h->of && interrupt_hook(req, write_interrupted, &wc))
		g_atomic_int_set(&wc.stop, 1);
	if (h->of)
		ok = overlay_close(h->of, req_process(req), &wc.stop, &error);
	/* Returns once a running write_interrupted() has. */
	fuse_req_interrupt_func(req, NULL, NULL);
	if (!ok)
		reply_ov_error(req, error, "close", h->key);
	else
		fuse_reply_err(req, 0);
}

/*
 * fsync(): the upload happens now, as at close, and fsync() says how it
 * went; a streamed file is then complete on S3 and takes no more writes
 * (EBADF), as with mountpoint-s3.
 */
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
	      struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	struct write_call wc = { .ov = data(req)->ov };
	g_autoptr(GError) error = NULL;
	gboolean ok = TRUE;

	(void)ino, (void)datasync;
	/* Interrupted, as close(): EINTR and the upload aborted. */
	if (h->of && interrupt_hook(req, write_interrupted, &wc))
		g_atomic_int_set(&wc.stop, 1);
	if (h->of)
		ok = overlay_flush(h->of, &wc.stop, &error);
	fuse_req_interrupt_func(req, NULL, NULL);
	if (!ok)
		reply_ov_error(req, error, "fsync", h->key);
	else
		fuse_reply_err(req, 0);
}

/*
 * Whether @parent's @name is in the index or declared by empty_dirs=:
 * such names stay read-only.
 */
static gboolean indexed(struct fs *fs, fuse_ino_t parent, const char *name)
{
	g_autofree char *dir_key = NULL;
	index_id dir, child;
	struct index *idx;
	gboolean found;

	if (is_overlay(parent))
		return FALSE;
	idx = resolve(fs, parent, &dir);
	if (!idx)
		return empty_dir_key(fs, parent) &&
		       emptydirs_child(fs->ed, empty_dir_key(fs, parent), name);
	found = index_lookup(idx, dir, name, strlen(name), &child);
	if (!found && fs->ed) {
		dir_key = index_key(idx, dir);
		found = dir_key && emptydirs_child(fs->ed, dir_key, name);
	}
	index_unref(idx);
	return found;
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		struct fuse_file_info *fi)
{
	struct fs *fs = data(req);
	struct handle *h = fi ? (struct handle *)(uintptr_t)fi->fh : NULL;
	g_autoptr(GError) error = NULL;
	guint64 size = (guint64)attr->st_size;
	struct ov_attr a;
	struct stat st;

	if (!fs_writes(fs) || !is_overlay(ino)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* Modes, owners and times are not stored: accepted, unchanged.
	 * ftruncate() goes through its own handle, the writer's. */
	if ((to_set & FUSE_SET_ATTR_SIZE) &&
	    !(h && h->of ? overlay_ftruncate(h->of, size, &error)
			 : overlay_truncate(fs->ov, ino & ID_MASK, size,
					    &error))) {
		g_autofree char *key = overlay_key(fs->ov, ino & ID_MASK);

		reply_ov_error(req, error, "truncate", key ? key : "?");
		return;
	}
	if (!overlay_getattr(fs->ov, ino & ID_MASK, &a)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	ov_fill_stat(fs, &a, &st);
	fuse_reply_attr(req, &st, OVERLAY_TIMEOUT);
}

/*
 * The key of a new name @name in @parent, or NULL after replying why not:
 * EROFS on a -o ro mount, EEXIST for an indexed name.
 */
static char *new_name_key(fuse_req_t req, struct fs *fs, fuse_ino_t parent,
			  const char *name)
{
	char *key;
	int err;

	if (!fs_writes(fs)) {
		fuse_reply_err(req, EROFS);
		return NULL;
	}
	if (indexed(fs, parent, name)) {
		g_autofree char *n = log_escape(name, -1);

		/* An indexed object is never overwritten through the mount. */
		log_msg(LOG_LEVEL_NOTICE,
			"create '%s': an object of the index, read-only "
			"(EEXIST)",
			n);
		fuse_reply_err(req, EEXIST);
		return NULL;
	}
	key = child_key(fs, parent, name, &err);
	if (!key)
		fuse_reply_err(req, err);
	return key;
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi)
{
	struct fs *fs = data(req);
	g_autoptr(GError) error = NULL;
	g_autofree char *key = new_name_key(req, fs, parent, name);
	struct ov_file *of;
	struct ov_attr a;

	(void)mode;
	if (!key)
		return;
	if (!overlay_create(fs->ov, key, &a, &of, &error))
		reply_ov_error(req, error, "create", key);
	else
		reply_ov_open(req, fs, of, key, fi, &a);
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct fs *fs = data(req);
	g_autoptr(GError) error = NULL;
	g_autofree char *key = new_name_key(req, fs, parent, name);
	struct ov_attr a;

	(void)mode;
	if (!key) {
		return;
	} else if (overlay_lookup(fs->ov, key, TRUE, &a, &error)) {
		overlay_forget(fs->ov, a.node, 1);
		fuse_reply_err(req, EEXIST);
	} else if (bfs_error_errno(error) != ENOENT) {
		reply_ov_error(req, error, "mkdir", key);
	} else {
		g_clear_error(&error);
		if (overlay_mkdir(fs->ov, key, &a, &error))
			reply_ov_entry(req, fs, &a);
		else
			reply_ov_error(req, error, "mkdir", key);
	}
}

static void remove_name(fuse_req_t req, fuse_ino_t parent, const char *name,
			gboolean is_dir)
{
	struct fs *fs = data(req);
	g_autoptr(GError) error = NULL;
	g_autofree char *key = NULL;
	gboolean ok;
	int err;

	if (!fs_writes(fs) || indexed(fs, parent, name)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	key = child_key(fs, parent, name, &err);
	if (!key) {
		fuse_reply_err(req, err);
		return;
	}
	ok = is_dir ? overlay_rmdir(fs->ov, key, &error)
		    : overlay_unlink(fs->ov, key, &error);
	if (ok)
		fuse_reply_err(req, 0);
	else
		reply_ov_error(req, error, is_dir ? "rmdir" : "unlink", key);
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, FALSE);
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, TRUE);
}

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	      dev_t rdev)
{
	(void)parent, (void)name, (void)mode, (void)rdev;
	fuse_reply_err(req, fs_writes(data(req)) ? EPERM : EROFS);
}

void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
	       fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	(void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
	fuse_reply_err(req, fs_writes(data(req)) ? EXDEV : EROFS);
}

/* Hard links never: EXDEV, what benchmark tools expect of object stores. */
void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
	     const char *newname)
{
	(void)ino, (void)newparent, (void)newname;
	fuse_reply_err(req, EXDEV);
}

void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		const char *name)
{
	(void)link, (void)parent, (void)name;
	fuse_reply_err(req, fs_writes(data(req)) ? EPERM : EROFS);
}

void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino, (void)name;
	fuse_reply_err(req, EROFS);
}
