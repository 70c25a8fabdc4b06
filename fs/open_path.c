/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * open_path.c - the open of an indexed file: see open_path.h.
 */
#include <errno.h>

#include "attr.h"
#include "error.h"
#include "fs_internal.h"
#include "log.h"
#include "open_path.h"

/* How a failed read reads in the log, past the cause chain. */
static const char *read_hint(int code)
{
	switch (code) {
	case ESTALE:
		return "the object changed after the index was built "
		       "(rebuild it: bucketfs-index build, then SIGHUP)";
	case ENOENT:
		return "the object vanished after the index was built";
	default:
		return NULL;
	}
}

void open_log_read_error(const char *key, const GError *error)
{
	const char *hint = read_hint(bfs_error_errno(error));
	g_autofree char *k = log_escape(key, -1);

	log_error(LOG_LEVEL_ERR, error, "read '%s'%s%s", k, hint ? ": " : "",
		  hint ? hint : "");
}

/*
 * Whether reads of an object of @size skip the kernel's page cache
 * (FOPEN_DIRECT_IO): one copy instead of two.  mmap(MAP_SHARED) of such a
 * file needs FUSE_DIRECT_IO_ALLOW_MMAP (fuse_init.h) and gets ENODEV
 * without it.  Only when asked: direct_io=small (objects fetched whole) or
 * all; on the 2 GiB dd the page cache measured as cheap and as fast
 * (docs/PERFORMANCE.md, session 9).
 */
static gboolean bypasses_page_cache(struct fs *fs, guint64 size)
{
	switch (fs->opts.direct_io) {
	case FS_DIRECT_IO_ALL:
		return TRUE;
	case FS_DIRECT_IO_SMALL:
		return size <= readahead_whole_max(fs->ra);
	default:
		return FALSE;
	}
}

/*
 * An open waiting for its object.  It is answered once: by open_ready(),
 * or with EINTR by open_interrupted(); whoever sets @answered first
 * replies, and open_ready() frees it either way.
 */
struct open_call {
	fuse_req_t req;
	struct fs *fs;
	fuse_ino_t ino;
	struct handle *h;
	struct fuse_file_info fi;
	guint64 size;
	gint answered; /* atomic */
};

/* Called with the request's lock held: see read_interrupted() in ops.c.
 * The GET goes on; open_ready() lets go of the handle. */
static void open_interrupted(fuse_req_t req, void *data)
{
	struct open_call *oc = data;

	if (interrupt_deferred())
		return;
	if (g_atomic_int_compare_and_exchange(&oc->answered, 0, 1))
		fuse_reply_err(req, EINTR);
}

/*
 * Stores the @len bytes of @oc's object in the page cache of its node;
 * TRUE if it did.  No read of the file can be in flight (its open is not
 * answered), and no other file is open on the object, so no page of the
 * node is locked under the store.
 */
static gboolean store(struct open_call *oc, const void *buf, gsize len)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);
	struct fs *fs = oc->fs;
	gboolean alone = FALSE;
	GBytes *whole = readahead_peek_whole(oc->h->rf, &alone);

	/* Only asked for @alone: @buf is the object's bytes already. */
	g_clear_pointer(&whole, g_bytes_unref);
	if (!alone || len != oc->size || !is_current(fs, oc->ino))
		return FALSE;
	bv.buf[0].mem = (void *)buf;
	if (fuse_lowlevel_notify_store(fs->se, oc->ino, 0, &bv, 0) != 0)
		return FALSE;
	__atomic_add_fetch(&fs->handed_over, 1, __ATOMIC_RELAXED);
	return TRUE;
}

/*
 * Answers @oc's open in passthrough from a memfd of @buf (passthrough.h)
 * if it may be; TRUE if it answered (or the request is gone).  Otherwise
 * the open is recorded as cached where passthrough is on, and left to the
 * caller.
 */
static gboolean pass_through(struct open_call *oc, const void *buf, gsize len)
{
	struct fs *fs = oc->fs;
	struct handle *h = oc->h;
	struct fuse_file_info f = oc->fi;
	gboolean passed = FALSE;
	int id = -1;

	h->ino = oc->ino;
	/* Not the whole object: no memfd of it, but a node in passthrough
	 * stays so (its other open's memfd holds the object). */
	h->pt_mode = pt_open(fs->pt, oc->ino, len == oc->size ? buf : NULL, len,
			     &id);
	if (h->pt_mode != PT_PASSTHROUGH)
		return FALSE;
	/* The kernel allows neither with FOPEN_PASSTHROUGH. */
	f.keep_cache = 0;
	f.direct_io = 0;
	/* Neither @h nor @oc's request are touched after a reply that
	 * opened the file: its RELEASE may free @h at once. */
	if (fuse_init_reply_open(oc->req, &f, id, &passed) != 0 || !passed) {
		/* Not opened (the write failed, or the hook answered EIO):
		 * no RELEASE comes. */
		if (!passed)
			pt_count_fallback(fs->pt, PT_FB_REPLY);
		handle_free(fs, h);
	}
	return TRUE;
}

/* The whole object is here (@buf, borrowed), or its GET failed. */
static void open_ready(const void *buf, gsize len, const GError *error,
		       void *user)
{
	struct open_call *oc = user;

	if (!g_atomic_int_compare_and_exchange(&oc->answered, 0, 1)) {
		/* Interrupted and answered: nobody holds the file. */
		handle_free(oc->fs, oc->h);
		g_free(oc);
		return;
	}
	/* Returns once a running open_interrupted() has; none comes later. */
	fuse_req_interrupt_func(oc->req, NULL, NULL);
	if (error) {
		open_log_read_error(oc->h->key, error);
		fuse_reply_err(oc->req, bfs_error_errno(error));
		handle_free(oc->fs, oc->h);
		g_free(oc);
		return;
	}
	if (pass_through(oc, buf, len)) {
		g_free(oc);
		return;
	}
	store(oc, buf, len);
	/* Stored or not, the pages of a current node are right: the GET's
	 * If-Match guarantees it.  An older node's are dropped at open. */
	oc->fi.keep_cache = is_current(oc->fs, oc->ino);
	if (fuse_reply_open(oc->req, &oc->fi) != 0)
		handle_free(oc->fs, oc->h);
	g_free(oc);
}

void open_answer(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
		 struct handle *h, const struct fuse_file_info *fi,
		 guint64 size)
{
	struct fuse_file_info f = *fi;
	struct open_call *oc;

	if (!fs->se || fs->opts.direct_io != FS_DIRECT_IO_NONE || size == 0 ||
	    size > readahead_whole_max(fs->ra)) {
		f.direct_io = bypasses_page_cache(fs, size);
		f.keep_cache = !f.direct_io && is_current(fs, ino);
		if (fuse_reply_open(req, &f) != 0)
			handle_free(fs, h);
		return;
	}
	oc = g_new0(struct open_call, 1);
	oc->req = req;
	oc->fs = fs;
	oc->ino = ino;
	oc->h = h;
	oc->fi = f;
	oc->size = size;
	/* Before the wait starts: it may end (and free @oc) at once. */
	if (interrupt_hook(req, open_interrupted, oc)) {
		fuse_reply_err(req, EINTR);
		handle_free(fs, h);
		g_free(oc);
		return;
	}
	readahead_read(h->rf, 0, size, open_ready, oc);
}
