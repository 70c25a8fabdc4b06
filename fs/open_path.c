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
 * (FOPEN_DIRECT_IO): the daemon copies each READ straight into the
 * reader's buffer, where a store at open allocates, charges and fills a
 * page-cache page per 4 KiB that the reader then copies out of again.
 * mmap(MAP_SHARED) of such a file needs FUSE_DIRECT_IO_ALLOW_MMAP
 * (fuse_init.h) and gets ENODEV without it, so auto, the default, takes
 * it for objects fetched whole only where INIT negotiated that: on the
 * RetinaNet load it measured 1.18-1.21x the files/s of the store at open
 * with the daemon on a core of its own, in one read() and in DLIO's
 * chunks (docs/PERFORMANCE.md).  Larger objects
 * keep the page cache: there the kernel's readahead turns a reader's
 * small reads into 1 MiB READs.  Where passthrough is on, auto still
 * answers this way an open whose object is not here yet (open_answer()).
 */
static gboolean bypasses_page_cache(struct fs *fs, guint64 size)
{
	gboolean whole = size <= readahead_whole_max(fs->ra);

	switch (fs->opts.direct_io) {
	case FS_DIRECT_IO_ALL:
		return TRUE;
	case FS_DIRECT_IO_SMALL:
		return whole;
	case FS_DIRECT_IO_AUTO:
		return whole && g_atomic_int_get(&fs->init.allow_mmap);
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
	char *etag;
	gint answered; /* atomic */
};

static void open_call_free(struct open_call *oc)
{
	g_free(oc->etag);
	g_free(oc);
}

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
 * Answers the open @req of @h with @f, as recorded in h->pt_mode (with
 * backing id @id if PT_PASSTHROUGH).  Neither @h nor @req is touched
 * after a reply that opened the file: its RELEASE may free @h at once.
 */
static void reply_open(fuse_req_t req, struct fs *fs, struct handle *h,
		       struct fuse_file_info *f, int id)
{
	gboolean passed = FALSE;

	if (h->pt_mode != PT_PASSTHROUGH) {
		if (fuse_reply_open(req, f) != 0)
			handle_free(fs, h);
		return;
	}
	/* FOPEN_PASSTHROUGH does not go with keep_cache; direct_io opens
	 * are never recorded in passthrough. */
	f->keep_cache = 0;
	f->direct_io = 0;
	if (fuse_init_reply_open(req, f, id, &passed) != 0 || !passed) {
		/* Not opened (the write failed, or the hook answered EIO):
		 * no RELEASE comes. */
		if (!passed)
			pt_count_fallback(fs->pt, PT_FB_REPLY);
		handle_free(fs, h);
	}
}

/* Whether the record refused the open of @h (@err, from pt_open()); it
 * is then answered with @err and @h freed. */
static gboolean refused(fuse_req_t req, struct fs *fs, struct handle *h,
			int err)
{
	g_autofree char *k = NULL;

	if (!err)
		return FALSE;
	k = log_escape(h->key, -1);
	log_msg(LOG_LEVEL_WARNING,
		"open '%s': %s: another reader holds the file open in FUSE "
		"passthrough with the object the index named before its "
		"refresh (SIGHUP), and the kernel would give this open that "
		"object's bytes; it opens once those readers close it",
		k, g_strerror(err));
	fuse_reply_err(req, err);
	handle_free(fs, h);
	return TRUE;
}

/* The whole object is here (@buf, borrowed), or its GET failed. */
static void open_ready(const void *buf, gsize len, const GError *error,
		       void *user)
{
	struct open_call *oc = user;

	struct fs *fs = oc->fs;
	struct handle *h = oc->h;
	GBytes *whole;
	gboolean alone;
	int id = -1, err;

	if (!g_atomic_int_compare_and_exchange(&oc->answered, 0, 1)) {
		/* Interrupted and answered: nobody holds the file. */
		handle_free(oc->fs, oc->h);
		open_call_free(oc);
		return;
	}
	/* Returns once a running open_interrupted() has; none comes later. */
	fuse_req_interrupt_func(oc->req, NULL, NULL);
	if (error) {
		open_log_read_error(oc->h->key, error);
		fuse_reply_err(oc->req, bfs_error_errno(error));
		handle_free(oc->fs, oc->h);
		open_call_free(oc);
		return;
	}
	h->ino = oc->ino;
	/* The GET's body, if it is still the object's: its memory may be
	 * the backing file itself. */
	whole = readahead_peek_whole(h->rf, &alone);
	if (whole && (len != oc->size || g_bytes_get_size(whole) != len ||
		      g_bytes_get_data(whole, NULL) != buf))
		g_clear_pointer(&whole, g_bytes_unref);
	/* Not the whole object: no memfd of it, but a node in passthrough
	 * stays so (its other open's memfd holds the object). */
	h->pt_mode = pt_open(fs->pt, oc->ino, oc->etag, whole,
			     len == oc->size ? buf : NULL, len, &id, &err);
	g_clear_pointer(&whole, g_bytes_unref);
	if (refused(oc->req, fs, h, err)) {
		open_call_free(oc);
		return;
	}
	if (h->pt_mode == PT_DIRECT) {
		/* Another open of the node is direct_io: so is this one. */
		oc->fi.direct_io = 1;
		oc->fi.keep_cache = 0;
	} else if (h->pt_mode != PT_PASSTHROUGH) {
		store(oc, buf, len);
		/* Stored or not, the pages of a current node are right: the
		 * GET's If-Match guarantees it.  An older node's are dropped
		 * at open. */
		oc->fi.keep_cache = is_current(fs, oc->ino);
	}
	reply_open(oc->req, fs, h, &oc->fi, id);
	open_call_free(oc);
}

/*
 * With passthrough negotiated and direct_io=auto, how an open of a file
 * fetched whole (@f: direct_io so far) is answered: if passthrough is on
 * and its object is here already or on its way (fetched ahead: announced,
 * guessed at a stream or at its LOOKUP, or another open's), in
 * passthrough from it once it is here (f->direct_io cleared, the caller
 * goes on to wait for it whole).  The first READ would wait for that same
 * GET; this way no READ reaches the daemon at all, the one at end of file
 * included (docs/PERFORMANCE.md).  If not (its
 * GET starts at this open), with direct_io, so that the open returns at
 * once and the reader's next calls overlap the GET,
 * recorded so that no passthrough open of the node starts meanwhile, or
 * in passthrough if the node is already (pt_open_direct()).  Returns
 * FALSE if it answered the open (refused, or joined the node's backing
 * file).
 */
static gboolean direct_or_here(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
			       struct handle *h, struct fuse_file_info *f,
			       const char *etag)
{
	gboolean alone;
	GBytes *here = readahead_peek_whole(h->rf, &alone);
	int id = -1, err;

	if ((here || readahead_fetched_ahead(h->rf)) && pt_on(fs->pt)) {
		g_clear_pointer(&here, g_bytes_unref);
		f->direct_io = 0;
		return TRUE;
	}
	g_clear_pointer(&here, g_bytes_unref);
	h->ino = ino;
	h->pt_mode = pt_open_direct(fs->pt, ino, etag, &id, &err);
	if (refused(req, fs, h, err))
		return FALSE;
	if (h->pt_mode != PT_PASSTHROUGH)
		return TRUE;
	reply_open(req, fs, h, f, id);
	return FALSE;
}

void open_answer(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
		 struct handle *h, const struct fuse_file_info *fi,
		 guint64 size, const char *etag)
{
	struct fuse_file_info f = *fi;
	struct open_call *oc;
	int id = -1, err = 0;

	f.direct_io = bypasses_page_cache(fs, size);
	/* Negotiated, even if turned off since: a node may still be in
	 * passthrough, and a direct_io open of it would fail. */
	if (f.direct_io && fs->opts.direct_io == FS_DIRECT_IO_AUTO &&
	    pt_negotiated(fs->pt) && !is_overlay(ino)) {
		if (fs->opts.passthrough_always && pt_on(fs->pt))
			f.direct_io = 0;
		else if (!direct_or_here(req, fs, ino, h, &f, etag))
			return;
	}
	if (!fs->se || size == 0 || size > readahead_whole_max(fs->ra) ||
	    f.direct_io) {
		f.keep_cache = !f.direct_io && is_current(fs, ino);
		/* Not fetched whole, but the kernel refuses a cached open of
		 * a node in passthrough (after SIGHUP, a node id may name a
		 * larger object): recorded too. */
		if (fs->se && !f.direct_io && !is_overlay(ino)) {
			h->ino = ino;
			h->pt_mode =
				pt_open_unfetched(fs->pt, ino, etag, &id, &err);
			if (refused(req, fs, h, err))
				return;
		}
		reply_open(req, fs, h, &f, id);
		return;
	}
	oc = g_new0(struct open_call, 1);
	oc->req = req;
	oc->fs = fs;
	oc->ino = ino;
	oc->h = h;
	oc->fi = f;
	oc->size = size;
	oc->etag = g_strdup(etag);
	/* Before the wait starts: it may end (and free @oc) at once. */
	if (interrupt_hook(req, open_interrupted, oc)) {
		fuse_reply_err(req, EINTR);
		handle_free(fs, h);
		open_call_free(oc);
		return;
	}
	readahead_read(h->rf, 0, size, open_ready, oc);
}
