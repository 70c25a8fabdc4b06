/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The op table and its dispatch: each op asks the namespace its node
 * belongs to (the index, the declared directories of emptydir_ops.h, the
 * overlay of overlay_ops.h), and answers the index's itself.  The layers
 * are in ops.h.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

#include "attr.h"
#include "emptydir_ops.h"
#include "error.h"
#include "fs_internal.h"
#include "log.h"
#include "open_path.h"
#include "overlay_ops.h"
#include "stats.h"

#define PIB (G_GUINT64_CONSTANT(1) << 50)

/* -- attributes --------------------------------------------------------- */

/*
 * Whether the fetch of a file just looked up (node @ino, attributes @st)
 * starts before its OPEN: while lookups.h says opens follow lookups, it is
 * the reader's round trip and wake-up ahead.  Not while hints or streams
 * are ahead of the readers: the guess would only repeat theirs (and cost
 * 0.02 ms of the daemon's CPU per file in announced order).
 */
static gboolean guess_open(struct fs *fs, fuse_ino_t ino, const struct stat *st)
{
	guint64 size = (guint64)st->st_size;

	if (!S_ISREG(st->st_mode) || size == 0 ||
	    size > readahead_whole_max(fs->ra) ||
	    !readahead_source_on(fs->ra, RA_LOOKUPS) ||
	    readahead_others_ahead(fs->ra))
		return FALSE;
	return lookups_seen(fs->lookups, ino, g_get_monotonic_time());
}

/* Answers a lookup with entry @id of @idx; a file's fetch may start first
 * (guess_open()).  First, not after: the OPEN may come at once, and must
 * find its lookup counted and its fetch announced (announced after a
 * reader had opened, read and closed the file, it would fetch it again). */
static void reply_entry(fuse_req_t req, struct fs *fs, struct index *idx,
			index_id id)
{
	struct fuse_entry_param e = { 0 };

	e.ino = node_for(fs, idx, id);
	e.generation = 1;
	e.attr_timeout = fs->opts.entry_timeout;
	e.entry_timeout = fs->opts.entry_timeout;
	fill_stat(fs, idx, id, &e.attr);
	if (guess_open(fs, e.ino, &e.attr)) {
		g_autofree char *key = index_key(idx, id);
		g_autofree char *etag = index_etag(idx, id);

		readahead_guess_lookup(fs->ra, key, etag,
				       (guint64)e.attr.st_size);
	}
	if (fuse_reply_entry(req, &e) != 0)
		forget_one(fs, e.ino, 1);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = data(req);
	index_id dir, child;
	struct index *idx;

	count_op(fs, STATS_LOOKUP, 1);
	if (is_overlay(parent)) {
		lookup_overlay(req, fs, parent, name);
		return;
	}
	idx = resolve(fs, parent, &dir);
	if (!idx && !empty_dir_key(fs, parent)) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	if (idx && index_lookup(idx, dir, name, strlen(name), &child)) {
		reply_entry(req, fs, idx, child);
	} else if (fs->ed &&
		   empty_dir_lookup(req, fs, idx, dir, parent, name)) {
		/* A directory of -o empty_dirs= the index lacks: replied. */
	} else {
		/* Another host may have made it: asked of S3. */
		lookup_overlay(req, fs, parent, name);
	}
	index_unref(idx);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	count_op(data(req), STATS_FORGET, 1);
	forget_one(data(req), ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	size_t i;

	count_op(data(req), STATS_FORGET, count);
	for (i = 0; i < count; i++)
		forget_one(data(req), forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct fs *fs = data(req);
	index_id id;
	struct index *idx;
	struct stat st;

	(void)fi;
	count_op(fs, STATS_GETATTR, 1);
	if (is_overlay(ino)) {
		struct ov_attr a;

		if (!fs->ov || !overlay_getattr(fs->ov, ino & ID_MASK, &a)) {
			fuse_reply_err(req, ENOENT);
			return;
		}
		ov_fill_stat(fs, &a, &st);
		fuse_reply_attr(req, &st, OVERLAY_TIMEOUT);
		return;
	}
	idx = resolve(fs, ino, &id);
	if (!idx) {
		if (!empty_dir_getattr(req, fs, ino))
			fuse_reply_err(req, ESTALE);
		return;
	}
	fill_stat(fs, idx, id, &st);
	fuse_reply_attr(req, &st, fs->opts.entry_timeout);
	index_unref(idx);
}

/* -- directories -------------------------------------------------------- */

static void op_opendir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	index_id id;
	struct index *idx;

	count_op(data(req), STATS_OPENDIR, 1);
	if (is_overlay(ino)) {
		struct ov_attr a;
		struct fs *fs = data(req);

		if (!fs->ov || !overlay_getattr(fs->ov, ino & ID_MASK, &a))
			fuse_reply_err(req, ENOENT);
		else if (!a.is_dir)
			fuse_reply_err(req, ENOTDIR);
		else
			fuse_reply_open(req, fi);
		return;
	}
	idx = resolve(data(req), ino, &id);
	if (!idx) {
		if (!empty_dir_opendir(req, data(req), ino, fi))
			fuse_reply_err(req, ESTALE);
		return;
	}
	if (!index_is_dir(idx, id)) {
		fuse_reply_err(req, ENOTDIR);
	} else {
		/* Listings are cheap from the mapped index; a cached one
		 * could outlive a SIGHUP switch, so each opendir reads
		 * afresh (the cache serves the rest of that open). */
		fi->keep_cache = 0;
		fi->cache_readdir = 1;
		fuse_reply_open(req, fi);
	}
	index_unref(idx);
}

static ino_t dir_ino(struct index *idx, index_id id)
{
	struct index_attr a;

	index_get_attr(idx, id, &a);
	return a.ino;
}

/* readdir of a node the index lacks: a declared directory, or stale. */
static void readdir_declared(struct dirbuf *db, struct fs *fs, fuse_ino_t ino,
			     off_t off)
{
	const char *key = empty_dir_key(fs, ino);

	if (!key) {
		fuse_reply_err(db->req, ESTALE);
		return;
	}
	if (dirbuf_empty_dir(db, fs, ino, &off) && fs->ov)
		dirbuf_overlay(db, fs, off, key, NULL, 0);
	fuse_reply_buf(db->req, db->buf, db->used);
}

/*
 * Offsets: 1 and 2 follow "." and ".."; a child at position p is followed
 * by offset p + 3.  Positions are fixed for the life of the index, so
 * offsets stay valid across calls.
 */
static void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, gboolean plus)
{
	struct fs *fs = data(req);
	index_id dir, child;
	struct index *idx;
	g_autofree char *buf = g_malloc(size);
	struct dirbuf db = { req, plus, buf, size, 0 };
	gboolean full = FALSE;
	guint64 pos, next;

	count_op(fs, plus ? STATS_READDIRPLUS : STATS_READDIR, 1);
	if (is_overlay(ino) && fs->ov) {
		readdir_overlay(&db, fs, ino, off);
		return;
	}
	idx = resolve(fs, ino, &dir);
	if (!idx) {
		readdir_declared(&db, fs, ino, off);
		return;
	}
	full = !dirbuf_dots(&db, &off, dir_ino(idx, dir),
			    dir_ino(idx, index_parent(idx, dir)));
	pos = (guint64)off - 2;
	while (!full && (guint64)off < EMPTY_DIROFF &&
	       index_child_at(idx, dir, pos, &child, &next)) {
		struct fuse_entry_param e = { 0 };
		const char *name = index_name(idx, child, NULL);

		pos = next;
		if (!name)
			continue;
		fill_stat(fs, idx, child, &e.attr);
		if (plus) {
			/* readdirplus hands the kernel a lookup: count it
			 * only if the entry fits. */
			e.attr_timeout = e.entry_timeout =
				fs->opts.entry_timeout;
			e.generation = 1;
			e.ino = node_for(fs, idx, child);
		}
		full = !dirbuf_add(&db, name, &e, (off_t)next + 2);
		if (!full)
			count_op(fs,
				 plus ? STATS_READDIRPLUS_ENTRIES
				      : STATS_READDIR_ENTRIES,
				 1);
		else if (plus)
			forget_one(fs, e.ino, 1);
	}
	if (!full && (fs->ov || fs->ed)) {
		g_autofree char *dir_key = index_key(idx, dir);

		if (dir_key && fs->ed)
			full = !dirbuf_empty_dirs(&db, fs, off, dir_key, idx,
						  dir);
		if (dir_key && !full && fs->ov)
			dirbuf_overlay(&db, fs, off, dir_key, idx, dir);
	}
	fuse_reply_buf(req, buf, db.used);
	index_unref(idx);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	readdir_common(req, ino, size, off, FALSE);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	readdir_common(req, ino, size, off, TRUE);
}

/* -- files -------------------------------------------------------------- */

/* Announces file @id of @idx to the readahead engine, as a promise (a
 * hint) or as a @guess (a stream's lookahead). */
static void announce_entry(struct fs *fs, struct index *idx, index_id id,
			   gboolean guess)
{
	struct index_attr a;
	g_autofree char *key = NULL;
	g_autofree char *etag = NULL;

	if (index_is_dir(idx, id))
		return;
	index_get_attr(idx, id, &a);
	if (a.ino == 0)
		return; /* not an entry */
	key = index_key(idx, id);
	etag = index_etag(idx, id);
	if (guess)
		readahead_guess(fs->ra, key, etag, a.size);
	else
		readahead_prefetch(fs->ra, key, etag, a.size);
}

static void announce(struct fs *fs, struct index *idx, index_id id)
{
	announce_entry(fs, idx, id, FALSE);
}

/*
 * Files opened in listing order (cp -r, tar, cat *; a data loader's
 * workers, each on its own run of files) have consecutive entries: the
 * stream detector says which to fetch ahead.  @reader is the opening
 * thread: a loader worker's jump to its next batch is learned per reader.
 */
static void follow_listing(struct fs *fs, struct index *idx, index_id id,
			   guint64 reader)
{
	g_autoptr(GArray) ahead = NULL;
	guint i;

	if (!readahead_source_on(fs->ra, RA_STREAMS))
		return; /* -o readahead= without streams */
	ahead = g_array_new(FALSE, FALSE, sizeof(guint64));
	g_mutex_lock(&fs->lock);
	if (!fs->streams) {
		/* The streams share the guesses' depth (readahead.h). */
		struct streams_options o = {
			.budget = readahead_guess_depth(fs->ra),
		};

		fs->streams = streams_new(&o);
	}
	/* Entries of another index are another sequence. */
	streams_open(fs->streams, (guint64)(guintptr)idx, id, reader, ahead);
	g_mutex_unlock(&fs->lock);
	for (i = 0; i < ahead->len; i++)
		announce_entry(fs, idx, g_array_index(ahead, guint64, i), TRUE);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = data(req);
	index_id id;
	struct index *idx;
	struct index_attr a;
	struct handle *h;
	g_autofree char *etag = NULL;

	if (is_overlay(ino) && fs->ov) {
		open_overlay(req, fs, ino, fi);
		return;
	}
	idx = resolve(fs, ino, &id);
	if (!idx) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	index_get_attr(idx, id, &a);
	if (a.is_dir) {
		fuse_reply_err(req, EISDIR);
		goto out;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		goto out;
	}
	lookups_opened(fs->lookups, ino, g_get_monotonic_time());
	h = handle_new(fs, index_key(idx, id));
	etag = index_etag(idx, id);
	h->rf = readahead_open(fs->ra, h->key, etag, a.size);
	follow_listing(fs, idx, id, (guint64)fuse_req_ctx(req)->pid);
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->noflush = 1;
	open_answer(req, fs, ino, h, fi, a.size, etag);
out:
	index_unref(idx);
}

/*
 * A read waiting for its bytes.  It is answered once: by read_done(), or
 * with EINTR by read_interrupted() when the kernel passes on a signal the
 * reader caught (FUSE INTERRUPT); whoever sets @answered first replies.
 */
struct read_call {
	fuse_req_t req;
	char *key;
	gint answered; /* atomic */
};

/*
 * libfuse calls this with the request's lock held, which
 * fuse_req_interrupt_func() takes too: read_done() clears the hook that
 * way before it replies, so the two never run at once.  The GET goes on;
 * its bytes serve the next read of the file.
 */
static void read_interrupted(fuse_req_t req, void *data)
{
	struct read_call *rc = data;

	if (interrupt_deferred())
		return;
	if (g_atomic_int_compare_and_exchange(&rc->answered, 0, 1))
		fuse_reply_err(req, EINTR);
}

static void read_done(const void *buf, gsize len, const GError *error,
		      void *user)
{
	struct read_call *rc = user;

	if (!g_atomic_int_compare_and_exchange(&rc->answered, 0, 1)) {
		/* Interrupted and answered: the request is gone. */
		g_free(rc->key);
		g_free(rc);
		return;
	}
	/* Returns once a running read_interrupted() has; none comes later. */
	fuse_req_interrupt_func(rc->req, NULL, NULL);
	if (error) {
		open_log_read_error(rc->key, error);
		fuse_reply_err(rc->req, bfs_error_errno(error));
	} else {
		fuse_reply_buf(rc->req, buf, len);
	}
	g_free(rc->key);
	g_free(rc);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	struct read_call *rc;

	(void)ino;
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (h->of) {
		g_autofree char *buf = g_malloc(size);

		fuse_reply_buf(req, buf,
			       overlay_read(h->of, (guint64)off, size, buf));
		return;
	}
	rc = g_new0(struct read_call, 1);
	rc->req = req;
	rc->key = g_strdup(h->key);
	__atomic_add_fetch(&data(req)->reads, 1, __ATOMIC_RELAXED);
	/* Before the read starts: it may end (and free @rc) at once. */
	if (interrupt_hook(req, read_interrupted, rc)) {
		fuse_reply_err(req, EINTR);
		g_free(rc->key);
		g_free(rc);
		return;
	}
	readahead_read(h->rf, (guint64)off, size, read_done, rc);
}

static void op_release(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	(void)ino;
	handle_free(data(req), (struct handle *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* -- the rest ----------------------------------------------------------- */

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = data(req);
	struct index *idx = fs_current_index(fs);
	struct index_stats s;
	struct statvfs st = { 0 };
	guint64 free_bytes;

	(void)ino;
	index_get_stats(idx, &s);
	/* Benchmark tools refuse a filesystem that looks too full for the
	 * dataset: report free space of at least its size. */
	free_bytes =
		fs->opts.free_space ? fs->opts.free_space : MAX(s.bytes, PIB);
	st.f_bsize = BLOCK;
	st.f_frsize = BLOCK;
	st.f_blocks = (s.bytes + free_bytes + BLOCK - 1) / BLOCK;
	st.f_bfree = st.f_bavail = free_bytes / BLOCK;
	st.f_files = s.entries;
	/* New names can be made (not -o ro): say there is room for them. */
	st.f_ffree = st.f_favail = fs_writes(fs) ? G_MAXUINT32 : 0;
	st.f_files += st.f_ffree;
	st.f_namemax = INDEX_NAME_MAX;
	fuse_reply_statfs(req, &st);
	index_unref(idx);
}

/* The extended attributes every file has: "user.s3.*". */
static const char xattr_names[] = "user.s3.etag\0user.s3.key\0"
				  "user.s3.uri\0";

static char *xattr_value(struct index *idx, index_id id, const char *name)
{
	g_autofree char *key = index_key(idx, id);

	if (!strcmp(name, "user.s3.etag"))
		return index_etag(idx, id);
	if (!strcmp(name, "user.s3.key"))
		return g_steal_pointer(&key);
	if (!strcmp(name, "user.s3.uri"))
		return g_strdup_printf("s3://%s/%s", index_bucket(idx),
				       key ? key : "");
	return NULL;
}

/* The namespace of every extended attribute the mount has. */
#define XATTR_USER "user."

/* The mount root's own attributes: counters, and the prefetch hint. */
#define XATTR_STATS    "user.bucketfs.stats"
#define XATTR_PREFETCH "user.bucketfs.prefetch"
static const char root_xattrs[] = "user.s3.key\0user.s3.uri\0" XATTR_STATS "\0";

static char *stats_of(struct fs *fs)
{
	struct stats_sources src;
	char *json;

	fs_get_stats_sources(fs, &src);
	json = stats_json(&src);
	stats_sources_clear(&src);
	return json;
}

/*
 * The hint: setxattr(MOUNTPOINT, "user.bucketfs.prefetch", "a/b\nc/d\n")
 * announces files (paths relative to the mount) that will be read next,
 * in that order; an empty value drops what is announced and not started.
 */
static int take_hint(struct fs *fs, const char *value, size_t size)
{
	struct index *idx = fs_current_index(fs);
	const char *p = value, *end = value + size;

	if (size == 0)
		readahead_forget_prefetches(fs->ra);
	while (p < end) {
		const char *nl = memchr(p, '\n', end - p);
		const char *line_end = nl ? nl : end;
		index_id cur = INDEX_ROOT;
		const char *c = p;

		while (c < line_end && cur != G_MAXUINT64) {
			const char *slash = memchr(c, '/', line_end - c);
			const char *ce = slash ? slash : line_end;

			if (ce > c && !index_lookup(idx, cur, c, ce - c, &cur))
				cur = G_MAXUINT64;
			c = ce + 1;
		}
		if (cur != G_MAXUINT64 && cur != INDEX_ROOT)
			announce(fs, idx, cur);
		p = line_end + 1;
	}
	index_unref(idx);
	return 0;
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	(void)flags;
	if (ino == FUSE_ROOT_ID && !strcmp(name, XATTR_PREFETCH))
		fuse_reply_err(req, take_hint(data(req), value, size));
	else if (is_overlay(ino))
		fuse_reply_err(req, ENOTSUP);
	else
		fuse_reply_err(req, EROFS);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	index_id id;
	struct index *idx;
	g_autofree char *v = NULL;

	count_op(data(req), STATS_GETXATTR, 1);
	if (strncmp(name, XATTR_USER, strlen(XATTR_USER)) != 0) {
		/* Only user.* is kept; saying so for the other namespaces
		 * (security.selinux, system.posix_acl_access: ls -l asks
		 * for both of each file) lets ls stop asking for the rest
		 * of the mount: it remembers a device that answered
		 * ENOTSUP.  ENODATA would be asked again for each file. */
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (is_overlay(ino)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	idx = resolve(data(req), ino, &id);
	if (!idx) {
		/* A declared directory has no object: no user.s3.*. */
		fuse_reply_err(req, empty_dir_key(data(req), ino) ? ENODATA
								  : ESTALE);
		return;
	}
	if (ino == FUSE_ROOT_ID && !strcmp(name, XATTR_STATS))
		v = stats_of(data(req));
	else
		v = xattr_value(idx, id, name);
	if (!v)
		fuse_reply_err(req, ENODATA);
	else
		reply_sized(req, v, strlen(v), size);
	index_unref(idx);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	index_id id;
	struct index *idx;

	count_op(data(req), STATS_LISTXATTR, 1);
	if (is_overlay(ino)) {
		reply_sized(req, "", 0, size);
		return;
	}
	idx = resolve(data(req), ino, &id);
	if (!idx) {
		/* A declared directory has no object: no user.s3.*. */
		if (empty_dir_key(data(req), ino))
			reply_sized(req, "", 0, size);
		else
			fuse_reply_err(req, ESTALE);
		return;
	}
	if (ino == FUSE_ROOT_ID)
		reply_sized(req, root_xattrs, sizeof(root_xattrs) - 1, size);
	else if (index_is_dir(idx, id))
		reply_sized(req, "user.s3.key\0user.s3.uri", 24, size);
	else
		reply_sized(req, xattr_names, sizeof(xattr_names) - 1, size);
	index_unref(idx);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs *fs = userdata;

	conn->want |= FUSE_CAP_ASYNC_READ;
	/* LOOKUPS is the kernel's AUTO mode: it asks for readdirplus for a
	 * listing's first batch, and for the next after a lookup or a
	 * readdirplus entry was used (ls -l); ls -f, os.listdir and
	 * find -name get names alone and build no kernel inode per name
	 * (docs/SCALE.md).  A loader that lists, then opens (DLIO), and tools
	 * that stat after the whole listing (du, find -size: fts) then send a
	 * lookup per name; ALWAYS spares them that, for ~1.1 KiB of kernel
	 * memory per listed name.  AUTO picks by the index's size at the
	 * mount; a refresh (SIGHUP) does not change the choice. */
	if (fs->opts.readdirplus == FS_READDIRPLUS_AUTO) {
		struct index *idx = fs_current_index(fs);
		struct index_stats s;

		index_get_stats(idx, &s);
		index_unref(idx);
		fs->opts.readdirplus = s.entries <= FS_READDIRPLUS_SMALL
					       ? FS_READDIRPLUS_ALWAYS
					       : FS_READDIRPLUS_LOOKUPS;
		log_msg(LOG_LEVEL_INFO,
			"readdirplus=auto chose %s (the index has "
			"%" G_GUINT64_FORMAT " entries; always up to %d)",
			fs->opts.readdirplus == FS_READDIRPLUS_ALWAYS
				? "always"
				: "lookups",
			s.entries, FS_READDIRPLUS_SMALL);
	}
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	if ((conn->capable & FUSE_CAP_READDIRPLUS_AUTO) &&
	    fs->opts.readdirplus == FS_READDIRPLUS_LOOKUPS)
		conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
	else
		conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	conn->max_read = 1u << 20;
	/* The kernel sends RELEASE in the background, and lets at most
	 * max_background background requests reach the daemon at once (12
	 * unless told): behind thousands of readers' requests, 12 RELEASEs
	 * at a time fall behind the opens, and each file not yet released
	 * holds its handle and its object here (the ASan soak with 4,096
	 * readers: 200,000 handles, and no object ever let go; see
	 * docs/PERFORMANCE.md).  The congestion
	 * threshold that stops the kernel's async readahead is 3/4 of it
	 * (libfuse's default). */
	conn->max_background = FS_MAX_BACKGROUND;
	/* The kernel keeps the smaller of this and the bdi's read_ahead_kb,
	 * which main.c raised to the same value if it could (bdi.h). */
	conn->max_readahead =
		(unsigned)MIN(MAX(fs->opts.readahead.kernel_ra, 1u << 20),
			      G_MAXUINT32 & ~0xfffu);
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.fsync = op_fsync,
	.release = op_release,
	.statfs = op_statfs,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.create = op_create,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
};
