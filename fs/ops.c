/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

#include "error.h"
#include "log.h"
#include "ops.h"
#include "http.h"
#include "overlay.h"
#include "readahead.h"
#include "streams.h"

#define GEN_SHIFT	 40
#define ID_MASK		 ((G_GUINT64_CONSTANT(1) << GEN_SHIFT) - 1)
#define BLOCK		 4096
#define PIB		 (G_GUINT64_CONSTANT(1) << 50)
#define NEGATIVE_TIMEOUT 10.0
/* Writable mode: node ids of names the index doesn't have (overlay.h),
 * and readdir offsets of those names after a directory's indexed ones. */
#define OVERLAY_GEN	((G_GUINT64_CONSTANT(1) << (64 - GEN_SHIFT)) - 1)
#define OVERLAY_DIROFF	(G_GUINT64_CONSTANT(1) << 62)
#define OVERLAY_TIMEOUT 1.0

/* An index and how many kernel lookups its nodes hold. */
struct gen {
	guint64 number;
	struct index *idx;
	guint64 lookups; /* protected by fs->lock */
};

struct fs {
	struct s3 *s3;		 /* set before the loop, then immutable */
	struct readahead *ra;	 /* likewise */
	struct overlay *ov;	 /* likewise; NULL unless writable */
	struct fuse_session *se; /* likewise */
	struct fs_options opts;

	GMutex lock;
	struct gen *current; /* protected by lock */
	GHashTable *gens;    /* protected by lock: number -> struct gen */
	GHashTable *handles; /* protected by lock: open struct handle set */
	gboolean stopped;    /* fs_stop() ran; main thread */
	guint64 next_gen;    /* protected by lock */
	/* Listing-order streams (streams.h) over index entries; made at the
	 * first open.  Protected by lock. */
	struct streams *streams;
	guint64 reads;	     /* atomic: FUSE reads of files */
	guint64 handed_over; /* atomic: files stored in the page cache */
};

/* An open file: its key (for logs) and its readahead handle. */
struct handle {
	char *key;
	struct ra_file *rf;
	struct ov_file *of; /* instead of rf, for an overlay file */
};

static struct fs *data(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* -- overlay nodes (writable mode) -------------------------------------- */

static gboolean is_overlay(fuse_ino_t ino)
{
	return (ino >> GEN_SHIFT) == OVERLAY_GEN;
}

static fuse_ino_t ov_ino(guint64 node)
{
	return (OVERLAY_GEN << GEN_SHIFT) | node;
}

static void ov_fill_stat(const struct ov_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	/* Anyone the mount lets in may make and remove names (allow_other
	 * decides who): owners and modes are not stored. */
	st->st_mode = a->is_dir ? S_IFDIR | 0777 : S_IFREG | 0666;
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
	ov_fill_stat(a, &e.attr);
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

/* -- generations -------------------------------------------------------- */

static void gen_free(void *p)
{
	struct gen *g = p;

	index_unref(g->idx);
	g_free(g);
}

/* Drops an old generation nobody looks at any more.  Under fs->lock. */
static void gen_maybe_drop(struct fs *fs, struct gen *g)
{
	if (g != fs->current && g->lookups == 0)
		g_hash_table_remove(fs->gens, &g->number);
}

/*
 * The entry of @key (prefix included; directories end with '/') in @idx,
 * found by walking its components from the root.
 */
static gboolean find_key(struct index *idx, const char *key, index_id *out)
{
	const char *p = key + strlen(index_prefix(idx));
	index_id cur = INDEX_ROOT;

	if (strncmp(key, index_prefix(idx), strlen(index_prefix(idx))) != 0)
		return FALSE;
	while (*p) {
		const char *slash = strchr(p, '/');
		gsize len = slash ? (gsize)(slash - p) : strlen(p);

		if (!index_lookup(idx, cur, p, len, &cur))
			return FALSE;
		p += len + (slash ? 1 : 0);
	}
	*out = cur;
	return TRUE;
}

/*
 * The index and entry behind @ino, with a reference on the index (unref
 * it); NULL for a node id that names no live generation.  A node of an
 * older index is answered from the current one when its key is still
 * there, so a SIGHUP refresh reaches names the kernel already knows.
 */
static struct index *resolve(struct fs *fs, fuse_ino_t ino, index_id *id)
{
	guint64 number = ino >> GEN_SHIFT;
	struct index *idx = NULL, *cur = NULL;
	g_autofree char *key = NULL;
	struct gen *g;

	g_mutex_lock(&fs->lock);
	if (ino == FUSE_ROOT_ID) {
		g = fs->current;
		*id = INDEX_ROOT;
	} else {
		g = g_hash_table_lookup(fs->gens, &number);
		*id = ino & ID_MASK;
	}
	if (g)
		idx = index_ref(g->idx);
	if (g && g != fs->current)
		cur = index_ref(fs->current->idx);
	g_mutex_unlock(&fs->lock);
	if (!cur)
		return idx;
	key = index_key(idx, *id);
	if (key && find_key(cur, key, id)) {
		index_unref(idx);
		return cur;
	}
	index_unref(cur);
	return idx;
}

/*
 * Whether the kernel's caches for @ino can be trusted: its node belongs to
 * the current index.
 */
static gboolean is_current(struct fs *fs, fuse_ino_t ino)
{
	gboolean cur;

	if (ino == FUSE_ROOT_ID)
		return TRUE;
	g_mutex_lock(&fs->lock);
	cur = (ino >> GEN_SHIFT) == fs->current->number;
	g_mutex_unlock(&fs->lock);
	return cur;
}

/* The node id of entry @id of @idx, counting one kernel lookup. */
static fuse_ino_t node_for(struct fs *fs, struct index *idx, index_id id)
{
	GHashTableIter it;
	struct gen *g = NULL, *x;

	if (id == INDEX_ROOT)
		return FUSE_ROOT_ID;
	g_mutex_lock(&fs->lock);
	if (fs->current->idx == idx) {
		g = fs->current;
	} else {
		g_hash_table_iter_init(&it, fs->gens);
		while (g_hash_table_iter_next(&it, NULL, (gpointer *)&x))
			if (x->idx == idx)
				g = x;
	}
	g->lookups++;
	g_mutex_unlock(&fs->lock);
	return (g->number << GEN_SHIFT) | id;
}

static void forget_one(struct fs *fs, fuse_ino_t ino, guint64 n)
{
	guint64 number = ino >> GEN_SHIFT;
	struct gen *g;

	if (ino == FUSE_ROOT_ID)
		return;
	if (is_overlay(ino)) {
		if (fs->ov)
			overlay_forget(fs->ov, ino & ID_MASK, n);
		return;
	}
	g_mutex_lock(&fs->lock);
	g = g_hash_table_lookup(fs->gens, &number);
	if (g) {
		g->lookups -= MIN(n, g->lookups);
		gen_maybe_drop(fs, g);
	}
	g_mutex_unlock(&fs->lock);
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
	if (!idx)
		return NULL;
	*err = ENOTDIR;
	if (index_is_dir(idx, id))
		dir = index_key(idx, id);
	index_unref(idx);
	return dir ? g_strconcat(dir, name, NULL) : NULL;
}

/* Writable mode: a name the index doesn't have, from the overlay or S3. */
static void lookup_overlay(fuse_req_t req, struct fs *fs, fuse_ino_t parent,
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
		/* Not cached: another host may make the name any time. */
		struct fuse_entry_param neg = { 0 };

		fuse_reply_entry(req, &neg);
	} else {
		reply_ov_error(req, error, "lookup", key);
	}
}

/* -- attributes --------------------------------------------------------- */

static void fill_stat(struct index *idx, index_id id, gboolean writable,
		      struct stat *st)
{
	struct index_attr a;

	index_get_attr(idx, id, &a);
	memset(st, 0, sizeof(*st));
	st->st_ino = a.ino;
	/* In writable mode, directories take new names (overlay.h). */
	st->st_mode =
		a.is_dir ? S_IFDIR | (writable ? 0777 : 0555) : S_IFREG | 0444;
	st->st_nlink = a.is_dir ? 2 : 1;
	st->st_size = (off_t)a.size;
	st->st_blksize = BLOCK;
	st->st_blocks = (blkcnt_t)((a.size + 511) / 512);
	st->st_mtime = st->st_ctime = st->st_atime = (time_t)a.mtime;
}

static void reply_entry(fuse_req_t req, struct fs *fs, struct index *idx,
			index_id id)
{
	struct fuse_entry_param e = { 0 };

	e.ino = node_for(fs, idx, id);
	e.generation = 1;
	e.attr_timeout = fs->opts.entry_timeout;
	e.entry_timeout = fs->opts.entry_timeout;
	fill_stat(idx, id, fs->ov != NULL, &e.attr);
	if (fuse_reply_entry(req, &e) != 0)
		forget_one(fs, e.ino, 1);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = data(req);
	index_id dir, child;
	struct index *idx;

	if (fs->ov && is_overlay(parent)) {
		lookup_overlay(req, fs, parent, name);
		return;
	}
	idx = resolve(fs, parent, &dir);
	if (!idx) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	if (index_lookup(idx, dir, name, strlen(name), &child)) {
		reply_entry(req, fs, idx, child);
	} else if (fs->ov) {
		lookup_overlay(req, fs, parent, name);
	} else {
		struct fuse_entry_param neg = {
			.entry_timeout =
				MIN(fs->opts.entry_timeout, NEGATIVE_TIMEOUT),
		};

		/* A cached negative entry, but not for long: a SIGHUP
		 * refresh may bring the name. */
		fuse_reply_entry(req, &neg);
	}
	index_unref(idx);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(data(req), ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	size_t i;

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
	if (is_overlay(ino)) {
		struct ov_attr a;

		if (!fs->ov || !overlay_getattr(fs->ov, ino & ID_MASK, &a)) {
			fuse_reply_err(req, ENOENT);
			return;
		}
		ov_fill_stat(&a, &st);
		fuse_reply_attr(req, &st, OVERLAY_TIMEOUT);
		return;
	}
	idx = resolve(fs, ino, &id);
	if (!idx) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	fill_stat(idx, id, fs->ov != NULL, &st);
	fuse_reply_attr(req, &st, fs->opts.entry_timeout);
	index_unref(idx);
}

/* -- directories -------------------------------------------------------- */

static void op_opendir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	index_id id;
	struct index *idx;

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

/* A readdir reply being filled. */
struct dirbuf {
	fuse_req_t req;
	gboolean plus;
	char *buf;
	size_t size, used;
};

/* Adds one entry followed by offset @next; FALSE when it doesn't fit. */
static gboolean dirbuf_add(struct dirbuf *db, const char *name,
			   const struct fuse_entry_param *e, off_t next)
{
	size_t n, room = db->size - db->used;

	n = db->plus ? fuse_add_direntry_plus(db->req, db->buf + db->used, room,
					      name, e, next)
		     : fuse_add_direntry(db->req, db->buf + db->used, room,
					 name, &e->attr, next);
	if (n > room)
		return FALSE;
	db->used += n;
	return TRUE;
}

/* "." and "..", at offsets 0 and 1; FALSE when the buffer is full. */
static gboolean dirbuf_dots(struct dirbuf *db, off_t *off, ino_t self,
			    ino_t parent)
{
	for (; *off < 2; (*off)++) {
		struct fuse_entry_param e = { 0 };

		e.attr.st_ino = *off == 0 ? self : parent;
		e.attr.st_mode = S_IFDIR;
		if (!dirbuf_add(db, *off == 0 ? "." : "..", &e, *off + 1))
			return FALSE;
	}
	return TRUE;
}

/*
 * Writable mode: the overlay's names in directory @dir_key, after the
 * indexed ones (those win a clash), at offsets OVERLAY_DIROFF + i + 1.
 * readdirplus hands no lookup for them (node id 0): the kernel looks
 * them up when used.
 */
static void dirbuf_overlay(struct dirbuf *db, struct fs *fs, off_t off,
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
		ov_fill_stat(&d->attr, &e.attr);
		if (!dirbuf_add(db, d->name, &e, OVERLAY_DIROFF + i + 1))
			return;
	}
}

static void readdir_overlay(struct dirbuf *db, struct fs *fs, fuse_ino_t ino,
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

	if (is_overlay(ino) && fs->ov) {
		readdir_overlay(&db, fs, ino, off);
		return;
	}
	idx = resolve(fs, ino, &dir);
	if (!idx) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	full = !dirbuf_dots(&db, &off, dir_ino(idx, dir),
			    dir_ino(idx, index_parent(idx, dir)));
	pos = (guint64)off - 2;
	while (!full && (guint64)off < OVERLAY_DIROFF &&
	       index_child_at(idx, dir, pos, &child, &next)) {
		struct fuse_entry_param e = { 0 };
		const char *name = index_name(idx, child, NULL);

		pos = next;
		if (!name)
			continue;
		fill_stat(idx, child, fs->ov != NULL, &e.attr);
		if (plus) {
			/* readdirplus hands the kernel a lookup: count it
			 * only if the entry fits. */
			e.attr_timeout = e.entry_timeout =
				fs->opts.entry_timeout;
			e.generation = 1;
			e.ino = node_for(fs, idx, child);
		}
		full = !dirbuf_add(&db, name, &e, (off_t)next + 2);
		if (full && plus)
			forget_one(fs, e.ino, 1);
	}
	if (!full && fs->ov) {
		g_autofree char *dir_key = index_key(idx, dir);

		if (dir_key)
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

/* A new open file, counted so that fs_stop() can close what the kernel
 * never released. */
static struct handle *handle_new(struct fs *fs, char *key)
{
	struct handle *h = g_new0(struct handle, 1);

	h->key = key;
	g_mutex_lock(&fs->lock);
	g_hash_table_add(fs->handles, h);
	g_mutex_unlock(&fs->lock);
	return h;
}

static void handle_destroy(struct handle *h)
{
	if (h->of)
		overlay_release(h->of);
	else if (h->rf)
		readahead_release(h->rf);
	g_free(h->key);
	g_free(h);
}

static void handle_free(struct fs *fs, struct handle *h)
{
	g_mutex_lock(&fs->lock);
	g_hash_table_remove(fs->handles, h);
	g_mutex_unlock(&fs->lock);
	handle_destroy(h);
}

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
	g_autoptr(GArray) ahead = g_array_new(FALSE, FALSE, sizeof(guint64));
	guint i;

	g_mutex_lock(&fs->lock);
	if (!fs->streams) {
		/* The streams share the guesses' depth (readahead.h). */
		struct streams_options o = {
			.budget = readahead_prefetch_depth(fs->ra),
		};

		fs->streams = streams_new(&o);
	}
	/* Entries of another index are another sequence. */
	streams_open(fs->streams, (guint64)(guintptr)idx, id, reader, ahead);
	g_mutex_unlock(&fs->lock);
	for (i = 0; i < ahead->len; i++)
		announce_entry(fs, idx, g_array_index(ahead, guint64, i), TRUE);
}

/*
 * Whether reads of an object of @size skip the kernel's page cache: the
 * reply is then copied straight into the reader's buffer, one copy instead
 * of a copy into fresh page-cache pages plus another out of them, and one
 * FUSE read per read(2) instead of the kernel's readahead pieces.  Objects
 * fetched whole are read once per epoch, so the cache gains them nothing;
 * large ones keep it by default, for mmap(MAP_SHARED), which a direct_io
 * file refuses with ENODEV.
 */
static gboolean bypasses_page_cache(struct fs *fs, guint64 size)
{
	switch (fs->opts.direct_io) {
	case FS_DIRECT_IO_ALL:
		return TRUE;
	case FS_DIRECT_IO_NONE:
		return FALSE;
	default:
		return size <= readahead_whole_max(fs->ra);
	}
}

/* A handle on an overlay file: always direct, always flushed at close. */
static void reply_ov_open(fuse_req_t req, struct fs *fs, struct ov_file *of,
			  const char *key, struct fuse_file_info *fi,
			  const struct ov_attr *created)
{
	struct handle *h = handle_new(fs, g_strdup(key));

	h->of = of;
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	fi->keep_cache = 0;
	if (created) {
		struct fuse_entry_param e = { 0 };

		e.ino = ov_ino(created->node);
		e.generation = 1;
		e.attr_timeout = e.entry_timeout = OVERLAY_TIMEOUT;
		ov_fill_stat(created, &e.attr);
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

static void open_overlay(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
			 struct fuse_file_info *fi)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *key = overlay_key(fs->ov, ino & ID_MASK);
	gboolean wr = (fi->flags & O_ACCMODE) != O_RDONLY;
	struct ov_file *of;

	if (!key) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	of = overlay_open(fs->ov, ino & ID_MASK, wr, !!(fi->flags & O_TRUNC),
			  &error);
	if (!of)
		reply_ov_error(req, error, "open", key);
	else
		reply_ov_open(req, fs, of, key, fi, NULL);
}

/*
 * Hands the bytes of @rf's object to the kernel's page cache for node
 * @ino, if the object is fetched whole, here already (fetched ahead) and
 * no other file is open on it; TRUE if it did.  The kernel then answers
 * every read itself: DLIO's reads of 4 KiB, 60 KiB and 64 KiB are a FUSE
 * round trip each otherwise.  Only while the node's pages can be trusted
 * (it is of the current index), and not with direct_io=all.  From open,
 * before the reply: no read of this file is in flight, and none of
 * another file (none is open), so no page is locked under the store.
 */
static gboolean hand_over(struct fs *fs, fuse_ino_t ino, struct ra_file *rf,
			  guint64 size)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
	g_autoptr(GBytes) whole = NULL;
	gboolean alone = FALSE;

	if (!fs->se || fs->opts.direct_io == FS_DIRECT_IO_ALL || size == 0 ||
	    size > readahead_whole_max(fs->ra) || !is_current(fs, ino))
		return FALSE;
	whole = readahead_peek_whole(rf, &alone);
	if (!whole || !alone || g_bytes_get_size(whole) != size)
		return FALSE;
	bv.buf[0].mem = (void *)g_bytes_get_data(whole, NULL);
	if (fuse_lowlevel_notify_store(fs->se, ino, 0, &bv, 0) != 0)
		return FALSE;
	__atomic_add_fetch(&fs->handed_over, 1, __ATOMIC_RELAXED);
	return TRUE;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = data(req);
	index_id id;
	struct index *idx;
	struct index_attr a;
	struct handle *h;

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
	h = handle_new(fs, index_key(idx, id));
	{
		g_autofree char *etag = index_etag(idx, id);

		h->rf = readahead_open(fs->ra, h->key, etag, a.size);
	}
	follow_listing(fs, idx, id, (guint64)fuse_req_ctx(req)->pid);
	fi->fh = (uint64_t)(uintptr_t)h;
	/* Pages stay valid while the object can't change under the index:
	 * the GET's If-Match guarantees it. */
	fi->direct_io = !hand_over(fs, ino, h->rf, a.size) &&
			bypasses_page_cache(fs, a.size);
	fi->keep_cache = !fi->direct_io && is_current(fs, ino);
	fi->noflush = 1;
	if (fuse_reply_open(req, fi) != 0)
		handle_free(fs, h);
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

/*
 * libfuse calls this with the request's lock held, which
 * fuse_req_interrupt_func() takes too: read_done() clears the hook that
 * way before it replies, so the two never run at once.  The GET goes on;
 * its bytes serve the next read of the file.
 */
static void read_interrupted(fuse_req_t req, void *data)
{
	struct read_call *rc = data;

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
		const char *hint = read_hint(bfs_error_errno(error));
		g_autofree char *k = log_escape(rc->key, -1);

		log_error(LOG_LEVEL_ERR, error, "read '%s'%s%s", k,
			  hint ? ": " : "", hint ? hint : "");
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
	fuse_req_interrupt_func(req, read_interrupted, rc);
	readahead_read(h->rf, (guint64)off, size, read_done, rc);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		     size_t size, off_t off, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	g_autoptr(GError) error = NULL;

	(void)ino;
	if (!h->of)
		fuse_reply_err(req, EROFS);
	else if (off < 0)
		fuse_reply_err(req, EINVAL);
	else if (!overlay_write(h->of, (guint64)off, buf, size, &error))
		reply_ov_error(req, error, "write", h->key);
	else
		fuse_reply_write(req, size);
}

/* close(): a written overlay file is uploaded here, so close() says how
 * the upload went. */
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	g_autoptr(GError) error = NULL;

	(void)ino;
	if (h->of && !overlay_flush(h->of, &error))
		reply_ov_error(req, error, "close", h->key);
	else
		fuse_reply_err(req, 0);
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
	/* Writable mode takes new names: say there is room for them. */
	st.f_ffree = st.f_favail = fs->ov ? G_MAXUINT32 : 0;
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

static void reply_sized(fuse_req_t req, const char *value, size_t len,
			size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, value, len);
}

/* The mount root's own attributes: counters, and the prefetch hint. */
#define XATTR_STATS    "user.bucketfs.stats"
#define XATTR_PREFETCH "user.bucketfs.prefetch"
static const char root_xattrs[] = "user.s3.key\0user.s3.uri\0" XATTR_STATS "\0";

static void get_stream_stats(struct fs *fs, struct streams_stats *out)
{
	memset(out, 0, sizeof(*out));
	g_mutex_lock(&fs->lock);
	if (fs->streams)
		streams_get_stats(fs->streams, out);
	g_mutex_unlock(&fs->lock);
}

/* Live counters as JSON: per endpoint, the readahead engine's, and the
 * stream detector's. */
static char *stats_json(struct fs *fs)
{
	struct http *http = s3_get_http(fs->s3);
	guint n = http_endpoint_count(http), i;
	g_autofree struct http_endpoint_stats *es =
		g_new0(struct http_endpoint_stats, n);
	struct ra_stats rs;
	struct streams_stats ss;
	GString *out = g_string_new("{\"endpoints\": [");

	http_get_stats(http, es);
	for (i = 0; i < n; i++)
		g_string_append_printf(
			out,
			"%s\n  {\"url\": \"%s\", \"requests\": "
			"%" G_GUINT64_FORMAT ", \"bytes\": %" G_GUINT64_FORMAT
			", \"errors\": %" G_GUINT64_FORMAT
			", \"hedges\": %" G_GUINT64_FORMAT
			", \"ejections\": %" G_GUINT64_FORMAT
			", \"inflight\": %u, \"ejected\": %s"
			", \"p50_ms\": %.2f, \"p99_ms\": %.2f}",
			i ? "," : "", es[i].url, es[i].requests, es[i].bytes,
			es[i].errors, es[i].hedges, es[i].ejections,
			es[i].inflight, es[i].ejected ? "true" : "false",
			es[i].p50_ms, es[i].p99_ms);
	readahead_get_stats(fs->ra, &rs);
	get_stream_stats(fs, &ss);
	g_string_append_printf(
		out,
		"],\n \"queued\": %u,\n \"readahead\": {\"objects_fetched\": "
		"%" G_GUINT64_FORMAT ", \"parts_fetched\": %" G_GUINT64_FORMAT
		", \"direct_reads\": %" G_GUINT64_FORMAT
		", \"prefetch_hits\": %" G_GUINT64_FORMAT
		", \"prefetch_wasted\": %" G_GUINT64_FORMAT
		", \"prefetch_late\": %" G_GUINT64_FORMAT
		", \"prefetch_queued\": %u, \"prefetch_unopened\": %u"
		", \"stream_fetched\": %" G_GUINT64_FORMAT
		", \"stream_hits\": %" G_GUINT64_FORMAT
		", \"stream_wasted\": %" G_GUINT64_FORMAT
		", \"stream_late\": %" G_GUINT64_FORMAT
		", \"memory_used\": %" G_GUINT64_FORMAT
		", \"memory_max\": %" G_GUINT64_FORMAT "},\n",
		http_queued(http), rs.objects_fetched, rs.parts_fetched,
		rs.direct_reads, rs.prefetch_hits, rs.prefetch_wasted,
		rs.prefetch_late, rs.prefetch_queued, rs.prefetch_unopened,
		rs.stream_fetched, rs.stream_hits, rs.stream_wasted,
		rs.stream_late, rs.memory_used, rs.memory_max);
	g_string_append_printf(
		out,
		" \"files\": {\"reads\": %" G_GUINT64_FORMAT
		", \"handed_over\": %" G_GUINT64_FORMAT "},\n",
		__atomic_load_n(&fs->reads, __ATOMIC_RELAXED),
		__atomic_load_n(&fs->handed_over, __ATOMIC_RELAXED));
	g_string_append_printf(
		out,
		" \"streams\": {\"opens\": %" G_GUINT64_FORMAT
		", \"continued\": %" G_GUINT64_FORMAT
		", \"confirmed\": %" G_GUINT64_FORMAT
		", \"announced\": %" G_GUINT64_FORMAT
		", \"jumps\": %" G_GUINT64_FORMAT
		", \"batch_len\": %" G_GUINT64_FORMAT
		", \"batch_jump\": %" G_GUINT64_FORMAT ", \"tracked\": %u}}\n",
		ss.opens, ss.continued, ss.confirmed, ss.announced, ss.jumps,
		ss.batch_len, ss.batch_jump, ss.tracked);
	return g_string_free(out, FALSE);
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

	if (is_overlay(ino)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	idx = resolve(data(req), ino, &id);
	if (!idx) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	if (ino == FUSE_ROOT_ID && !strcmp(name, XATTR_STATS))
		v = stats_json(data(req));
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

	if (is_overlay(ino)) {
		reply_sized(req, "", 0, size);
		return;
	}
	idx = resolve(data(req), ino, &id);
	if (!idx) {
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
	(void)userdata;
	conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	conn->max_read = 1u << 20;
	conn->max_readahead = 1u << 20;
}

/*
 * Writes.  A read-only mount (the default) answers EROFS to all of them.
 * In writable mode (overlay.h) names the index doesn't have can be made,
 * written and removed; indexed objects stay read-only; rename and link
 * answer EXDEV, so mv copies and a hard link is refused as if across
 * filesystems.
 */

/* Whether @parent's @name is in the index: such names stay read-only. */
static gboolean indexed(struct fs *fs, fuse_ino_t parent, const char *name)
{
	index_id dir, child;
	struct index *idx;
	gboolean found;

	if (is_overlay(parent))
		return FALSE;
	idx = resolve(fs, parent, &dir);
	if (!idx)
		return FALSE;
	found = index_lookup(idx, dir, name, strlen(name), &child);
	index_unref(idx);
	return found;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	struct fs *fs = data(req);
	g_autoptr(GError) error = NULL;
	struct ov_attr a;
	struct stat st;

	(void)fi;
	if (!fs->ov || !is_overlay(ino)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* Modes, owners and times are not stored: accepted, unchanged. */
	if ((to_set & FUSE_SET_ATTR_SIZE) &&
	    !overlay_truncate(fs->ov, ino & ID_MASK, (guint64)attr->st_size,
			      &error)) {
		g_autofree char *key = overlay_key(fs->ov, ino & ID_MASK);

		reply_ov_error(req, error, "truncate", key ? key : "?");
		return;
	}
	if (!overlay_getattr(fs->ov, ino & ID_MASK, &a)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	ov_fill_stat(&a, &st);
	fuse_reply_attr(req, &st, OVERLAY_TIMEOUT);
}

/*
 * The key of a new name @name in @parent, or NULL after replying why not:
 * EROFS on a read-only mount, EEXIST for an indexed name.
 */
static char *new_name_key(fuse_req_t req, struct fs *fs, fuse_ino_t parent,
			  const char *name)
{
	char *key;
	int err;

	if (!fs->ov) {
		fuse_reply_err(req, EROFS);
		return NULL;
	}
	if (indexed(fs, parent, name)) {
		fuse_reply_err(req, EEXIST);
		return NULL;
	}
	key = child_key(fs, parent, name, &err);
	if (!key)
		fuse_reply_err(req, err);
	return key;
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
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

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
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

	if (!fs->ov || indexed(fs, parent, name)) {
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

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, FALSE);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, TRUE);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	(void)parent, (void)name, (void)mode, (void)rdev;
	fuse_reply_err(req, data(req)->ov ? EPERM : EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	(void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
	fuse_reply_err(req, data(req)->ov ? EXDEV : EROFS);
}

/* Hard links never: EXDEV, what benchmark tools expect of object stores. */
static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	(void)ino, (void)newparent, (void)newname;
	fuse_reply_err(req, EXDEV);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	(void)link, (void)parent, (void)name;
	fuse_reply_err(req, data(req)->ov ? EPERM : EROFS);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino, (void)name;
	fuse_reply_err(req, EROFS);
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

/* -- lifecycle ---------------------------------------------------------- */

static struct gen *gen_new(struct fs *fs, struct index *idx)
{
	struct gen *g = g_new0(struct gen, 1);

	g->number = ++fs->next_gen;
	g->idx = index_ref(idx);
	g_hash_table_insert(fs->gens, &g->number, g);
	return g;
}

struct fs *fs_new(const struct fs_options *opts)
{
	struct fs *fs = g_new0(struct fs, 1);

	fs->opts = *opts;
	g_mutex_init(&fs->lock);
	fs->gens = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL,
					 gen_free);
	fs->handles = g_hash_table_new(NULL, NULL);
	return fs;
}

void fs_set_s3(struct fs *fs, struct s3 *s3)
{
	fs->s3 = s3;
	fs->ra = readahead_new(s3, &fs->opts.readahead);
	if (fs->opts.writable)
		fs->ov = overlay_new(s3, fs->opts.write_max);
}

/* One syslog line per endpoint, and one for readahead, at unmount. */
static void log_summary(struct fs *fs)
{
	struct http *http = s3_get_http(fs->s3);
	guint n = http_endpoint_count(http), i;
	g_autofree struct http_endpoint_stats *es =
		g_new0(struct http_endpoint_stats, n);
	struct ra_stats rs;
	struct streams_stats ss;

	http_get_stats(http, es);
	for (i = 0; i < n; i++)
		log_msg(LOG_LEVEL_NOTICE,
			"endpoint %s: %" G_GUINT64_FORMAT
			" requests, %" G_GUINT64_FORMAT
			" bytes, %" G_GUINT64_FORMAT
			" errors, %" G_GUINT64_FORMAT
			" hedges, %" G_GUINT64_FORMAT
			" ejections, p50 %.1f ms, p99 %.1f ms",
			es[i].url, es[i].requests, es[i].bytes, es[i].errors,
			es[i].hedges, es[i].ejections, es[i].p50_ms,
			es[i].p99_ms);
	readahead_get_stats(fs->ra, &rs);
	log_msg(LOG_LEVEL_NOTICE,
		"readahead: %" G_GUINT64_FORMAT
		" whole objects, %" G_GUINT64_FORMAT
		" parts, %" G_GUINT64_FORMAT " direct reads, %" G_GUINT64_FORMAT
		" prefetch hits, %" G_GUINT64_FORMAT
		" prefetches unused, %" G_GUINT64_FORMAT
		" announced files read before their prefetch",
		rs.objects_fetched, rs.parts_fetched, rs.direct_reads,
		rs.prefetch_hits, rs.prefetch_wasted, rs.prefetch_late);
	get_stream_stats(fs, &ss);
	log_msg(LOG_LEVEL_NOTICE,
		"streams: %" G_GUINT64_FORMAT " confirmed in %" G_GUINT64_FORMAT
		" opens, %" G_GUINT64_FORMAT
		" files guessed ahead, %" G_GUINT64_FORMAT
		" fetched: %" G_GUINT64_FORMAT " hits, %" G_GUINT64_FORMAT
		" unused, %" G_GUINT64_FORMAT
		" unopened at unmount, %" G_GUINT64_FORMAT
		" opened before their fetch",
		ss.confirmed, ss.opens, ss.announced, rs.stream_fetched,
		rs.stream_hits, rs.stream_wasted,
		rs.stream_fetched - rs.stream_hits - rs.stream_wasted,
		rs.stream_late);
}

void fs_set_session(struct fs *fs, struct fuse_session *se)
{
	fs->se = se;
}

void fs_stop(struct fs *fs)
{
	GList *open, *l;

	if (!fs->s3 || fs->stopped)
		return;
	fs->stopped = TRUE;
	g_mutex_lock(&fs->lock);
	open = g_hash_table_get_keys(fs->handles);
	g_mutex_unlock(&fs->lock);
	/* Written files still open are uploaded now, or logged as lost. */
	for (l = open; l; l = l->next) {
		struct handle *h = l->data;

		if (h->of) {
			overlay_release(h->of);
			h->of = NULL;
		}
	}
	g_list_free(open);
	log_summary(fs);
	/* Reads in flight are answered (cancelled) while the kernel still
	 * listens, and the background threads' requests fail at once. */
	s3_shutdown(fs->s3);
}

void fs_free(struct fs *fs)
{
	GHashTableIter it;
	struct handle *h;

	if (!fs)
		return;
	fs_stop(fs);
	/* The files the kernel never released. */
	g_hash_table_iter_init(&it, fs->handles);
	while (g_hash_table_iter_next(&it, (gpointer *)&h, NULL))
		handle_destroy(h);
	g_hash_table_unref(fs->handles);
	overlay_free(fs->ov);
	s3_free(fs->s3);
	readahead_free(fs->ra);
	streams_free(fs->streams);
	g_hash_table_unref(fs->gens);
	g_mutex_clear(&fs->lock);
	g_free(fs);
}

void fs_switch_index(struct fs *fs, struct index *idx)
{
	struct gen *old;

	g_mutex_lock(&fs->lock);
	old = fs->current;
	fs->current = gen_new(fs, idx);
	if (old)
		gen_maybe_drop(fs, old);
	g_mutex_unlock(&fs->lock);
	/* The root's cached listing and attributes are stale now; other
	 * nodes answer from the new index (see resolve()) and drop their
	 * page caches at the next open. */
	if (fs->se)
		fuse_lowlevel_notify_inval_inode(fs->se, FUSE_ROOT_ID, 0, 0);
}

struct index *fs_current_index(struct fs *fs)
{
	struct index *idx;

	g_mutex_lock(&fs->lock);
	idx = index_ref(fs->current->idx);
	g_mutex_unlock(&fs->lock);
	return idx;
}
