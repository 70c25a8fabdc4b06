/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Building happens in two phases.  index_writer_add() appends one record
 * per new file or directory to the stream of its depth; the streams share
 * one unlinked temporary file in chunks of STREAM_CHUNK bytes, so memory is
 * one chunk per depth however many keys there are.  Because keys come in
 * listing order, each depth's stream holds its nodes grouped by parent, in
 * parent order, and sorted within a parent: exactly the breadth-first
 * order of the final entries.  index_writer_commit() then reads depth 1,
 * 2, ... once each and writes every section sequentially at offsets known
 * in advance from the counts.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "error.h"
#include "index_build.h"
#include "log.h"

/* A file that a later directory of the same name would hide. */
struct cand {
	guint64 where; /* the record's offset in its depth's stream */
	guint64 size;
	guint32 etag_len;
	guint32 len;
	char name[INDEX_NAME_MAX];
};

/* A directory on the path of the last key; [0] is the root. */
struct level {
	guint64 ord; /* rank among the directories of its depth */
	guint32 len;
	char name[INDEX_NAME_MAX];
};

/* A parsed ETag. */
struct etag_val {
	enum etag_kind kind;
	guint8 md5[16];
	guint16 parts;
	const char *str;
	gsize len;
};
static void dstream_free(gpointer data)
{
	struct dstream *ds = data;

	if (!ds)
		return;
	g_free(ds->buf);
	g_array_unref(ds->chunks);
	g_array_unref(ds->cands);
	g_free(ds);
}

static struct dstream *depth_get(struct index_writer *w, guint d)
{
	struct dstream *ds;

	while (w->depths->len <= d)
		g_ptr_array_add(w->depths, NULL);
	ds = w->depths->pdata[d];
	if (ds)
		return ds;
	ds = g_new0(struct dstream, 1);
	ds->buf = g_malloc(STREAM_CHUNK);
	ds->chunks = g_array_new(FALSE, FALSE, sizeof(guint64));
	ds->cands = g_array_new(FALSE, FALSE, sizeof(struct cand));
	w->depths->pdata[d] = ds;
	return ds;
}

int pwrite_all(int fd, const void *buf, gsize len, guint64 off)
{
	const guint8 *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			return EIO;
		p += n;
		len -= n;
		off += n;
	}
	return 0;
}

int pread_all(int fd, void *buf, gsize len, guint64 off)
{
	guint8 *p = buf;

	while (len > 0) {
		ssize_t n = pread(fd, p, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			return EIO;
		p += n;
		len -= n;
		off += n;
	}
	return 0;
}

/* Records an I/O error that ends the build, and reports it. */
gboolean writer_fail(struct index_writer *w, int err, const char *what,
		     GError **error)
{
	GError *e = NULL;

	set_errno_error(&e, err, w->path, what);
	if (!w->failed)
		w->failed = g_error_copy(e);
	g_propagate_error(error, e);
	return FALSE;
}

gboolean dstream_flush(struct index_writer *w, struct dstream *ds,
		       GError **error)
{
	int err;

	if (ds->used == 0)
		return TRUE;
	err = pwrite_all(w->sfd, ds->buf, ds->used, w->send);
	if (err)
		return writer_fail(w, err, "writing the key stream", error);
	g_array_append_val(ds->chunks, w->send);
	w->send += ds->used;
	ds->flushed += ds->used;
	ds->used = 0;
	return TRUE;
}

static gboolean dstream_append(struct index_writer *w, struct dstream *ds,
			       const void *data, gsize len, GError **error)
{
	const guint8 *p = data;

	while (len > 0) {
		gsize n = MIN(len, STREAM_CHUNK - ds->used);

		memcpy(ds->buf + ds->used, p, n);
		ds->used += n;
		p += n;
		len -= n;
		if (ds->used == STREAM_CHUNK && !dstream_flush(w, ds, error))
			return FALSE;
	}
	return TRUE;
}

/* Marks the record at @where of @ds hidden, in memory or in the file. */
static gboolean dstream_hide(struct index_writer *w, struct dstream *ds,
			     guint64 where, GError **error)
{
	guint8 kind = REC_FILE | REC_HIDDEN;
	guint64 off;
	int err;

	if (where >= ds->flushed) {
		ds->buf[where - ds->flushed] = kind;
		return TRUE;
	}
	off = g_array_index(ds->chunks, guint64, where / STREAM_CHUNK) +
	      where % STREAM_CHUNK;
	err = pwrite_all(w->sfd, &kind, 1, off);
	if (err)
		return writer_fail(w, err, "writing the key stream", error);
	return TRUE;
}

static gboolean stream_put(struct index_writer *w, guint d, const struct rec *r,
			   const char *name, const char *etag, guint64 *where,
			   GError **error)
{
	struct dstream *ds = depth_get(w, d);

	if (where)
		*where = ds->flushed + ds->used;
	return dstream_append(w, ds, r, sizeof(*r), error) &&
	       dstream_append(w, ds, name, r->name_len, error) &&
	       dstream_append(w, ds, etag, r->etag_len, error);
}

static struct level *level_at(struct index_writer *w, guint d)
{
	return &g_array_index(w->levels, struct level, d);
}

/* Leaves the directories below depth @d (the candidates go with them). */
static void path_pop_to(struct index_writer *w, guint d)
{
	for (guint j = d + 1; j < w->levels->len; j++) {
		if (j + 1 < w->depths->len && w->depths->pdata[j + 1]) {
			struct dstream *ds = w->depths->pdata[j + 1];

			g_array_set_size(ds->cands, 0);
		}
	}
	g_array_set_size(w->levels, d + 1);
}

/* Pops the candidates at depth @d that sort before @name (+ '/' if dir). */
static void cands_pop_before(struct dstream *ds, const char *name, gsize len,
			     gboolean dir)
{
	while (ds->cands->len > 0) {
		struct cand *c = &g_array_index(ds->cands, struct cand,
						ds->cands->len - 1);

		if (sortkey_cmp((const guint8 *)c->name, c->len, TRUE,
				(const guint8 *)name, len, dir) >= 0)
			return;
		g_array_set_size(ds->cands, ds->cands->len - 1);
	}
}

/* A directory @name appears at depth @d: hide the file it shadows. */
static gboolean shadow_check(struct index_writer *w, guint d, const char *name,
			     gsize len, GError **error)
{
	struct dstream *ds = depth_get(w, d);
	struct cand *c;

	cands_pop_before(ds, name, len, TRUE);
	if (ds->cands->len == 0)
		return TRUE;
	c = &g_array_index(ds->cands, struct cand, ds->cands->len - 1);
	if (c->len != len || memcmp(c->name, name, len) != 0)
		return TRUE;
	if (!dstream_hide(w, ds, c->where, error))
		return FALSE;
	w->st.files--;
	w->st.bytes -= c->size;
	w->st.shadowed++;
	w->names_len -= c->len + 1;
	w->etags_len -= c->etag_len;
	g_array_set_size(ds->cands, ds->cands->len - 1);
	return TRUE;
}

/*
 * Makes the directory @name at depth @d the current one there, creating
 * it unless it already is.  A marker's mtime (@has_mtime) only counts when
 * the marker creates the directory, which is always the case for a valid
 * listing: "a/" sorts before every other key under "a/".
 */
static gboolean dir_enter(struct index_writer *w, guint d, const char *name,
			  gsize len, gboolean has_mtime, gint64 mtime,
			  GError **error)
{
	struct level *parent, *lv;
	struct rec r = { .kind = REC_DIR };

	if (d < w->levels->len) {
		lv = level_at(w, d);
		if (lv->len == len && memcmp(lv->name, name, len) == 0)
			return TRUE;
	}
	path_pop_to(w, d - 1);
	if (!shadow_check(w, d, name, len, error))
		return FALSE;
	parent = level_at(w, d - 1);
	r.name_len = len;
	r.parent_ord = parent->ord;
	r.mtime =
		has_mtime ? CLAMP(mtime, MTIME_MIN, MTIME_MAX) : w->st.created;
	if (!stream_put(w, d, &r, name, NULL, NULL, error))
		return FALSE;
	g_array_set_size(w->levels, d + 1);
	lv = level_at(w, d);
	lv->ord = depth_get(w, d)->ndirs++;
	lv->len = len;
	memcpy(lv->name, name, len);
	w->st.dirs++;
	w->names_len += len + 1;
	return TRUE;
}

static gboolean file_place(struct index_writer *w, guint d, const char *name,
			   gsize len, guint64 size, gint64 mtime,
			   const struct etag_val *ev, GError **error)
{
	struct dstream *ds;
	struct cand c = { 0 };
	struct rec r = { .kind = REC_FILE };

	path_pop_to(w, d - 1);
	ds = depth_get(w, d);
	cands_pop_before(ds, name, len, FALSE);
	r.name_len = len;
	r.parent_ord = level_at(w, d - 1)->ord;
	r.size = size;
	r.mtime = CLAMP(mtime, MTIME_MIN, MTIME_MAX);
	r.etag_kind = ev->kind;
	r.parts = ev->parts;
	memcpy(r.etag, ev->md5, 16);
	if (ev->kind == ETAG_STRING)
		r.etag_len = ev->len;
	if (!stream_put(w, d, &r, name, ev->str, &c.where, error))
		return FALSE;
	c.size = size;
	c.etag_len = r.etag_len;
	c.len = len;
	memcpy(c.name, name, len);
	g_array_append_val(ds->cands, c);
	w->st.files++;
	w->st.bytes += size;
	w->names_len += len + 1;
	w->etags_len += r.etag_len;
	return TRUE;
}

/* The counter of the reason a component cannot be a name, or NULL. */
enum index_component index_component_check(const char *s, gsize len)
{
	if (len == 0)
		return INDEX_COMPONENT_EMPTY;
	if (s[0] == '.' && (len == 1 || (len == 2 && s[1] == '.')))
		return INDEX_COMPONENT_DOT;
	if (len > INDEX_NAME_MAX)
		return INDEX_COMPONENT_LONG;
	return INDEX_COMPONENT_OK;
}

/* The counter of keys skipped for component @s, or NULL if it's a name. */
static guint64 *component_reason(struct index_writer *w, const char *s,
				 gsize len)
{
	switch (index_component_check(s, len)) {
	case INDEX_COMPONENT_EMPTY:
		return &w->st.skipped_empty;
	case INDEX_COMPONENT_DOT:
		return &w->st.skipped_dot;
	case INDEX_COMPONENT_LONG:
		return &w->st.skipped_long;
	default:
		return NULL;
	}
}

/*
 * Places the key @r (relative to the prefix) in the tree.  See
 * docs/INDEX-FORMAT.md, "From keys to paths".
 */
static gboolean key_place(struct index_writer *w, const char *r, gsize rlen,
			  guint64 size, gint64 mtime, const struct etag_val *ev,
			  GError **error)
{
	gboolean marker = rlen > 0 && r[rlen - 1] == '/';
	const char *p = r;
	const char *end = r + (marker ? rlen - 1 : rlen);
	guint d = 0;

	if (rlen == 0) {
		/* The prefix itself: the root's marker. */
		w->root_mtime = CLAMP(mtime, MTIME_MIN, MTIME_MAX);
		*(size == 0 ? &w->st.markers : &w->st.shadowed) += 1;
		return TRUE;
	}
	for (;;) {
		const char *slash = memchr(p, '/', end - p);
		const char *stop = slash ? slash : end;
		guint64 *reason = component_reason(w, p, stop - p);

		if (!reason && d + 1 > INDEX_DEPTH_MAX)
			reason = &w->st.skipped_deep;
		if (reason) {
			(*reason)++;
			return TRUE;
		}
		if (!slash && !marker)
			return file_place(w, d + 1, p, stop - p, size, mtime,
					  ev, error);
		if (!dir_enter(w, d + 1, p, stop - p, !slash, mtime, error))
			return FALSE;
		d++;
		if (!slash)
			break;
		p = slash + 1;
	}
	*(size == 0 ? &w->st.markers : &w->st.shadowed) += 1;
	return TRUE;
}

static gboolean is_lower_hex(const char *s, gsize len)
{
	for (gsize i = 0; i < len; i++) {
		if (!g_ascii_isdigit(s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return FALSE;
	}
	return TRUE;
}

/* "1" .. "65535", no sign, no leading zero. */
static gboolean parse_parts(const char *s, gsize len, guint16 *out)
{
	guint32 v = 0;

	if (len == 0 || len > 5 || s[0] == '0')
		return FALSE;
	for (gsize i = 0; i < len; i++) {
		if (!g_ascii_isdigit(s[i]))
			return FALSE;
		v = v * 10 + (s[i] - '0');
	}
	if (v > PARTS_MAX)
		return FALSE;
	*out = v;
	return TRUE;
}

static void etag_parse(const char *etag, struct etag_val *ev)
{
	gsize len = etag ? strlen(etag) : 0;

	memset(ev, 0, sizeof(*ev));
	if (len >= 2 && etag[0] == '"' && etag[len - 1] == '"') {
		etag++;
		len -= 2;
	}
	if (len == 0)
		return;
	ev->str = etag;
	ev->len = len;
	ev->kind = ETAG_STRING;
	if (len < 32 || !is_lower_hex(etag, 32))
		return;
	if (len == 32)
		ev->kind = ETAG_MD5;
	else if (etag[32] == '-' &&
		 parse_parts(etag + 33, len - 33, &ev->parts))
		ev->kind = ETAG_MULTI;
	else
		return;
	for (int i = 0; i < 16; i++)
		ev->md5[i] = g_ascii_xdigit_value(etag[2 * i]) << 4 |
			     g_ascii_xdigit_value(etag[2 * i + 1]);
}

static gboolean writer_check_key(struct index_writer *w, const char *key,
				 const struct etag_val *ev, GError **error)
{
	g_autofree char *k = NULL;
	g_autofree char *other = NULL;

	if (strncmp(key, w->prefix, w->prefix_len) != 0) {
		k = log_escape(key, -1);
		other = log_escape(w->prefix, -1);
		g_set_error(error, BFS_ERROR, EINVAL,
			    "index %s: key '%s' is not under the prefix '%s'",
			    w->shown, k, other);
		return FALSE;
	}
	if (w->have_prev && strcmp(key, w->prev->str) <= 0) {
		k = log_escape(key, -1);
		other = log_escape(w->prev->str, w->prev->len);
		g_set_error(error, BFS_ERROR, EINVAL,
			    "index %s: key '%s' is not after the previous key "
			    "'%s' (keys must come in strictly increasing byte "
			    "order)",
			    w->shown, k, other);
		return FALSE;
	}
	if (ev->kind == ETAG_STRING && ev->len > ETAG_STRING_MAX) {
		k = log_escape(key, -1);
		g_set_error(error, BFS_ERROR, EINVAL,
			    "index %s: key '%s': ETag of %zu bytes (at most "
			    "%d)",
			    w->shown, k, ev->len, ETAG_STRING_MAX);
		return FALSE;
	}
	return TRUE;
}

gboolean writer_usable(struct index_writer *w, GError **error)
{
	if (w->failed) {
		g_set_error(error, BFS_ERROR, w->failed->code,
			    "the build failed earlier: %s", w->failed->message);
		return FALSE;
	}
	return TRUE;
}

gboolean index_writer_add(struct index_writer *w, const char *key, guint64 size,
			  gint64 mtime, const char *etag, GError **error)
{
	struct etag_val ev;
	gsize klen;

	g_return_val_if_fail(w != NULL && key != NULL, FALSE);
	g_return_val_if_fail(!w->done, FALSE);
	g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

	if (!writer_usable(w, error))
		return FALSE;
	etag_parse(etag, &ev);
	if (!writer_check_key(w, key, &ev, error))
		return FALSE;
	klen = strlen(key);
	g_string_assign(w->prev, key);
	w->have_prev = TRUE;
	w->st.keys++;
	return key_place(w, key + w->prefix_len, klen - w->prefix_len, size,
			 mtime, &ev, error);
}

static gboolean prefix_valid(const char *prefix)
{
	gsize len = strlen(prefix);

	return len <= PREFIX_MAX && (len == 0 || prefix[len - 1] == '/');
}

static gboolean bucket_valid(const char *bucket)
{
	gsize len = strlen(bucket);

	return len > 0 && len <= BUCKET_MAX && !strchr(bucket, '/');
}

static int stream_file_open(const char *path, GError **error)
{
	g_autofree char *dir = g_path_get_dirname(path);
	g_autofree char *base = g_path_get_basename(path);
	g_autofree char *tmpl =
		g_strdup_printf("%s/.%s.stream-XXXXXX", dir, base);
	int fd, err;

	fd = g_mkstemp_full(tmpl, O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = errno;
		set_errno_error(error, err, path, "creating the stream file");
		return -1;
	}
	if (unlink(tmpl) < 0 && errno != ENOENT) {
		err = errno;
		close(fd);
		set_errno_error(error, err, path, "unlinking the stream file");
		return -1;
	}
	return fd;
}

/*
 * Whether @name is a temporary file of a build of the index called @base:
 * ".BASE.tmp-XXXXXX" (the final file being written), ".BASE.stream-XXXXXX"
 * (the key stream, unlinked as soon as it is made) or ".BASE.spool-XXXXXX"
 * (the lister's spools where O_TMPFILE is missing).
 */
static gboolean is_build_temp(const char *name, const char *base)
{
	static const char *const kinds[] = { ".tmp-", ".stream-", ".spool-" };
	gsize blen = strlen(base);

	if (name[0] != '.' || strncmp(name + 1, base, blen) != 0)
		return FALSE;
	name += 1 + blen;
	for (guint i = 0; i < G_N_ELEMENTS(kinds); i++) {
		gsize klen = strlen(kinds[i]);

		if (!strncmp(name, kinds[i], klen) && strlen(name + klen) == 6)
			return TRUE;
	}
	return FALSE;
}

/*
 * Removes the temporary files that builds killed mid-way (SIGKILL, a
 * crash, a power cut) left beside @path.  A live build holds an flock on
 * its temporary file, so only the dead ones can be locked here; the inode
 * is checked again under the lock, so a file renamed into place meanwhile
 * is never touched.
 */
void remove_stale_temps(const char *path)
{
	g_autofree char *dir = g_path_get_dirname(path);
	g_autofree char *base = g_path_get_basename(path);
	GDir *d = g_dir_open(dir, 0, NULL);
	const char *name;

	if (!d)
		return;
	while ((name = g_dir_read_name(d))) {
		g_autofree char *p = NULL;
		struct stat a, b;
		int fd;

		if (!is_build_temp(name, base))
			continue;
		p = g_build_filename(dir, name, NULL);
		fd = open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &a) == 0 && S_ISREG(a.st_mode) &&
		    flock(fd, LOCK_EX | LOCK_NB) == 0 && lstat(p, &b) == 0 &&
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
		    unlink(p) == 0) {
			g_autofree char *shown = log_escape(p, -1);

			log_msg(LOG_LEVEL_NOTICE,
				"index: removed %s, left by an interrupted "
				"build",
				shown);
		}
		close(fd);
	}
	g_dir_close(d);
}

struct index_writer *index_writer_new(const char *path, const char *bucket,
				      const char *prefix, GError **error)
{
	struct index_writer *w;
	g_autofree char *dir = NULL;
	int sfd, err;

	g_return_val_if_fail(path != NULL && bucket != NULL, NULL);
	g_return_val_if_fail(error == NULL || *error == NULL, NULL);

	if (!prefix)
		prefix = "";
	if (!bucket_valid(bucket) || !prefix_valid(prefix)) {
		g_autofree char *p = log_escape(path, -1);
		g_autofree char *b = log_escape(bucket, -1);
		g_autofree char *x = log_escape(prefix, -1);

		g_set_error(error, BFS_ERROR, EINVAL,
			    "index %s: bad bucket '%s' or prefix '%s' (the "
			    "prefix must be empty or end with '/')",
			    p, b, x);
		return NULL;
	}
	dir = g_path_get_dirname(path);
	if (g_mkdir_with_parents(dir, 0700) < 0) {
		err = errno;
		set_errno_error(error, err, path, "creating its directory");
		return NULL;
	}
	remove_stale_temps(path);
	sfd = stream_file_open(path, error);
	if (sfd < 0)
		return NULL;

	w = g_new0(struct index_writer, 1);
	w->sfd = sfd;
	w->path = g_strdup(path);
	w->shown = log_escape(path, -1);
	w->bucket = g_strdup(bucket);
	w->prefix = g_strdup(prefix);
	w->prefix_len = strlen(prefix);
	w->depths = g_ptr_array_new_with_free_func(dstream_free);
	w->levels = g_array_new(FALSE, TRUE, sizeof(struct level));
	g_array_set_size(w->levels, 1);
	w->prev = g_string_new(NULL);
	w->st.created = g_get_real_time() / G_USEC_PER_SEC;
	w->st.version = INDEX_FORMAT_VERSION;
	w->root_mtime = w->st.created;
	w->names_len = 1; /* the root's empty name */
	return w;
}

void index_writer_free(struct index_writer *w)
{
	if (!w)
		return;
	if (w->sfd >= 0)
		close(w->sfd);
	if (w->tmp_path)
		g_unlink(w->tmp_path);
	g_free(w->tmp_path);
	g_free(w->path);
	g_free(w->shown);
	g_free(w->bucket);
	g_free(w->prefix);
	if (w->depths)
		g_ptr_array_unref(w->depths);
	if (w->levels)
		g_array_unref(w->levels);
	if (w->prev)
		g_string_free(w->prev, TRUE);
	if (w->failed)
		g_error_free(w->failed);
	g_free(w);
}
