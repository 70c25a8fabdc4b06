/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The format is docs/INDEX-FORMAT.md; keep the two in step.  Everything on
 * disk is little-endian and read through get64()/get32(), never through a
 * struct cast, so that no accessor depends on the mapping's contents being
 * sane or aligned.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>
/*
 * XXH64 with seed 0 (libxxhash, the reference implementation) makes the
 * checksums and the inode numbers, both part of the format: its output
 * is specified and fixed, whatever the library's version.  States live
 * on the stack (static linking only, in xxhash.h's words): lookups hash
 * a key each, and an allocation each would cost more than the hash.
 */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "error.h"
#include "index.h"
#include "log.h"

/* --- little-endian fields --------------------------------------------- */

static inline guint64 get64(const guint8 *p)
{
	guint64 v;

	memcpy(&v, p, sizeof(v));
	return GUINT64_FROM_LE(v);
}

static inline guint32 get32(const guint8 *p)
{
	guint32 v;

	memcpy(&v, p, sizeof(v));
	return GUINT32_FROM_LE(v);
}

static inline void put64(guint8 *p, guint64 v)
{
	v = GUINT64_TO_LE(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put32(guint8 *p, guint32 v)
{
	v = GUINT32_TO_LE(v);
	memcpy(p, &v, sizeof(v));
}

/* --- the format ----------------------------------------------------------- */

#define INDEX_MAGIC "BFSINDX\n"
#define MAGIC_LEN   8

/* Byte offsets in the header; see docs/INDEX-FORMAT.md. */
#define H_VERSION	8
#define H_HEADER_LEN	12
#define H_CHECKSUM	16
#define H_FILE_SIZE	24
#define H_CREATED	32
#define H_KEYS		40
#define H_FILES		48
#define H_DIRS		56
#define H_MARKERS	64
#define H_BYTES		72
#define H_SKIPPED_EMPTY 80
#define H_SKIPPED_DOT	88
#define H_SKIPPED_LONG	96
#define H_SKIPPED_DEEP	104
#define H_SHADOWED	112
#define H_ENTRIES	120
#define H_NDIRS		128
#define H_BUCKET_LEN	136
#define H_PREFIX_LEN	140
#define H_SECTIONS	144
#define SECTION_DESC	24
#define HEADER_FIXED	(H_SECTIONS + SEC_COUNT * SECTION_DESC)
#define HEADER_MAX	65536
#define BUCKET_MAX	255
#define PREFIX_MAX	4096

enum section {
	SEC_ENTRIES,
	SEC_DIR_FIRST,
	SEC_DIR_ENTRY,
	SEC_NAMES,
	SEC_ETAGS,
	SEC_COUNT,
};

static const char *const section_names[SEC_COUNT] = {
	[SEC_ENTRIES] = "entries",     [SEC_DIR_FIRST] = "dir_first",
	[SEC_DIR_ENTRY] = "dir_entry", [SEC_NAMES] = "names",
	[SEC_ETAGS] = "etags",
};

/*
 * An entry is 40 bytes:
 *   0  u64 size (files) or directory number (directories)
 *   8  u64 mtime (bits 0-47, signed) | multipart part count (bits 48-63)
 *  16  16 bytes: binary MD5, or u64 offset + u32 length into 'etags'
 *  32  u64 name offset (bits 0-39) | name length (40-47) | flags (48-55)
 */
#define ENTRY_SIZE 40
#define E_SIZE	   0
#define E_MTIME	   8
#define E_ETAG	   16
#define E_NAME	   32

#define NAME_OFF_BITS 40
#define NAME_OFF_MAX  ((G_GUINT64_CONSTANT(1) << NAME_OFF_BITS) - 1)
#define MTIME_BITS    48
#define MTIME_MAX     ((G_GINT64_CONSTANT(1) << (MTIME_BITS - 1)) - 1)
#define MTIME_MIN     (-MTIME_MAX - 1)

#define F_DIR	     0x01
#define F_ETAG_SHIFT 1
#define F_ETAG_MASK  0x06
#define F_KNOWN	     0x07

enum etag_kind {
	ETAG_NONE,
	ETAG_MD5,    /* 32 lower-case hex digits */
	ETAG_MULTI,  /* the same, '-', the part count */
	ETAG_STRING, /* anything else, in the 'etags' blob */
};

#define ETAG_STRING_MAX 65535
#define PARTS_MAX	65535

/* An entry, decoded. */
struct entry {
	guint64 size; /* or the directory number */
	gint64 mtime;
	guint32 parts;
	const guint8 *etag; /* 16 bytes in the mapping */
	guint64 name_off;
	guint32 name_len;
	guint32 flags;
};

static void entry_encode(guint8 *p, const struct entry *e)
{
	guint64 mt = (guint64)e->mtime & ((G_GUINT64_CONSTANT(1) << 48) - 1);

	put64(p + E_SIZE, e->size);
	put64(p + E_MTIME, mt | (guint64)e->parts << MTIME_BITS);
	memcpy(p + E_ETAG, e->etag, 16);
	put64(p + E_NAME, e->name_off | (guint64)e->name_len << NAME_OFF_BITS |
				  (guint64)e->flags << 48);
}

static gint64 mtime_decode(guint64 v)
{
	v &= (G_GUINT64_CONSTANT(1) << MTIME_BITS) - 1;
	if (v & (G_GUINT64_CONSTANT(1) << (MTIME_BITS - 1)))
		v |= ~((G_GUINT64_CONSTANT(1) << MTIME_BITS) - 1);
	return (gint64)v;
}

static guint64 header_checksum(const guint8 *h, gsize hlen)
{
	XXH64_state_t s;
	static const guint8 zero[8];

	XXH64_reset(&s, 0);
	XXH64_update(&s, h, H_CHECKSUM);
	XXH64_update(&s, zero, sizeof(zero));
	XXH64_update(&s, h + H_CHECKSUM + 8, hlen - H_CHECKSUM - 8);
	return XXH64_digest(&s);
}

guint64 index_key_ino(const char *key, gssize len)
{
	guint64 h;

	g_return_val_if_fail(key != NULL || len == 0, 0);
	h = XXH64(key, len < 0 ? strlen(key) : (gsize)len, 0);
	/* 0 is no inode and 1 is the root. */
	return h < 2 ? h + 2 : h;
}

static gboolean set_errno_error(GError **error, int err, const char *path,
				const char *what)
{
	g_autofree char *p = log_escape(path, -1);

	g_set_error(error, BFS_ERROR, err, "index %s: %s: %s", p, what,
		    g_strerror(err));
	return FALSE;
}

/* --- reading ---------------------------------------------------------- */

struct index {
	/*
	 * Used through g_atomic_int_*(), which expand inline, rather than
	 * g_atomic_ref_count_*(), which are calls into GLib where TSan cannot
	 * see the ordering.
	 */
	gatomicrefcount ref;
	char *path;
	char *shown; /* path, escaped for messages */
	char *bucket;
	char *prefix;
	const guint8 *map;
	gsize map_len;
	guint64 header_len;
	struct index_stats stats;
	guint64 n_entries;
	guint64 n_dirs;
	guint64 sec_off[SEC_COUNT];
	guint64 sec_len[SEC_COUNT];
	guint64 sec_sum[SEC_COUNT];
	const guint8 *entries;
	const guint8 *dir_first; /* n_dirs + 1 u64 */
	const guint8 *dir_entry; /* n_dirs u64 */
	const guint8 *names;
	guint64 names_len;
	const guint8 *etags;
	guint64 etags_len;
};

char *index_default_path(const char *bucket, const char *prefix)
{
	g_autofree char *safe = NULL;
	g_autofree char *file = NULL;
	XXH64_state_t s;

	g_return_val_if_fail(bucket != NULL, NULL);
	if (!prefix)
		prefix = "";
	safe = g_strdup(*bucket ? bucket : "_");
	for (char *p = safe; *p; p++) {
		if (!g_ascii_isalnum(*p) && *p != '-' && *p != '_')
			*p = '_';
	}
	XXH64_reset(&s, 0);
	XXH64_update(&s, bucket, strlen(bucket) + 1);
	XXH64_update(&s, prefix, strlen(prefix));
	file = g_strdup_printf("%016" G_GINT64_MODIFIER "x.idx",
			       (guint64)XXH64_digest(&s));
	return g_build_filename(g_get_user_cache_dir(), "bucketfs", safe, file,
				NULL);
}

static gboolean entry_read(const struct index *idx, index_id id,
			   struct entry *e)
{
	const guint8 *p;
	guint64 v;

	if (id >= idx->n_entries)
		return FALSE;
	p = idx->entries + id * ENTRY_SIZE;
	v = get64(p + E_NAME);
	/* Unknown flags or reserved bits: a damaged entry. */
	if ((v >> 48) & ~(guint64)F_KNOWN)
		return FALSE;
	e->size = get64(p + E_SIZE);
	e->mtime = mtime_decode(get64(p + E_MTIME));
	e->parts = get64(p + E_MTIME) >> MTIME_BITS;
	e->etag = p + E_ETAG;
	e->name_off = v & NAME_OFF_MAX;
	e->name_len = (v >> NAME_OFF_BITS) & 0xff;
	e->flags = (v >> 48) & 0xff;
	return TRUE;
}

static gboolean entry_is_dir(const struct entry *e)
{
	return (e->flags & F_DIR) != 0;
}

static enum etag_kind entry_etag_kind(const struct entry *e)
{
	return (e->flags & F_ETAG_MASK) >> F_ETAG_SHIFT;
}

/* The bytes of the name, inside the mapping and NUL-terminated; or NULL. */
static const char *entry_name_raw(const struct index *idx,
				  const struct entry *e)
{
	if (e->name_off >= idx->names_len ||
	    e->name_len >= idx->names_len - e->name_off)
		return NULL;
	if (idx->names[e->name_off + e->name_len] != '\0')
		return NULL;
	return (const char *)idx->names + e->name_off;
}

/* Whether @len bytes at @s can be a name in a directory. */
static gboolean name_acceptable(const char *s, gsize len)
{
	if (len == 0 || len > INDEX_NAME_MAX)
		return FALSE;
	if (s[0] == '.' && (len == 1 || (len == 2 && s[1] == '.')))
		return FALSE;
	return !memchr(s, '/', len) && !memchr(s, '\0', len);
}

static guint64 dir_first_at(const struct index *idx, guint64 k)
{
	return get64(idx->dir_first + k * 8);
}

static guint64 dir_entry_at(const struct index *idx, guint64 k)
{
	return get64(idx->dir_entry + k * 8);
}

/*
 * The children of directory @id (entry @e): ids first .. first + n - 1.
 * FALSE when it is not a directory or its records disagree: every check
 * that keeps the accessors inside the entries and keeps index_parent()
 * going strictly towards the root (children come after their directory).
 */
static gboolean dir_range(const struct index *idx, index_id id,
			  const struct entry *e, guint64 *first, guint64 *n)
{
	guint64 k = e->size;
	guint64 f, next;

	if (!entry_is_dir(e) || k >= idx->n_dirs)
		return FALSE;
	if (dir_entry_at(idx, k) != id)
		return FALSE;
	f = dir_first_at(idx, k);
	next = dir_first_at(idx, k + 1);
	if (f <= id || f > next || next > idx->n_entries)
		return FALSE;
	*first = f;
	*n = next - f;
	return TRUE;
}

/* A child that readdir shows: a sane name and, for a directory, range. */
static gboolean entry_visible(const struct index *idx, index_id id,
			      struct entry *e)
{
	const char *name;
	guint64 first, n;

	if (!entry_read(idx, id, e))
		return FALSE;
	name = entry_name_raw(idx, e);
	if (!name || !name_acceptable(name, e->name_len))
		return FALSE;
	return !entry_is_dir(e) || dir_range(idx, id, e, &first, &n);
}

/*
 * Order of names in a directory: by bytes, a directory's name taken with a
 * '/' after it.  That is the order of the keys in an S3 listing.
 */
static int sortkey_cmp(const guint8 *a, gsize alen, gboolean adir,
		       const guint8 *b, gsize blen, gboolean bdir)
{
	gsize m = MIN(alen, blen);
	gsize la = alen + (adir ? 1 : 0);
	gsize lb = blen + (bdir ? 1 : 0);
	int c = m > 0 ? memcmp(a, b, m) : 0;

	if (c != 0)
		return c;
	for (gsize i = m; i < la && i < lb; i++) {
		int x = i < alen ? a[i] : '/';
		int y = i < blen ? b[i] : '/';

		if (x != y)
			return x - y;
	}
	return la < lb ? -1 : la > lb;
}

/* The first position in [lo, hi) whose entry sorts at or after the query. */
static guint64 lower_bound(const struct index *idx, guint64 lo, guint64 hi,
			   const char *q, gsize qlen, gboolean qdir)
{
	while (lo < hi) {
		guint64 mid = lo + (hi - lo) / 2;
		struct entry e;
		const char *name = NULL;
		gsize len = 0;
		gboolean dir = FALSE;

		if (entry_read(idx, mid, &e)) {
			name = entry_name_raw(idx, &e);
			len = name ? e.name_len : 0;
			dir = entry_is_dir(&e);
		}
		if (sortkey_cmp((const guint8 *)(name ? name : ""), len, dir,
				(const guint8 *)q, qlen, qdir) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Whether entry @id is called @q (and, if @want_dir, is a directory). */
static gboolean entry_named(const struct index *idx, index_id id, const char *q,
			    gsize qlen, gboolean want_dir)
{
	struct entry e;
	const char *name;

	if (!entry_read(idx, id, &e) || (want_dir && !entry_is_dir(&e)))
		return FALSE;
	name = entry_name_raw(idx, &e);
	return name && e.name_len == qlen && memcmp(name, q, qlen) == 0;
}

gboolean index_lookup(const struct index *idx, index_id dir, const char *name,
		      gsize len, index_id *out)
{
	struct entry d, e;
	guint64 first, n, end, pos;
	const char *found;

	g_return_val_if_fail(idx != NULL && out != NULL, FALSE);
	if (!name || !name_acceptable(name, len))
		return FALSE;
	if (!entry_read(idx, dir, &d) || !dir_range(idx, dir, &d, &first, &n))
		return FALSE;
	end = first + n;
	/* A file sorts where its name does, a directory at name + '/'. */
	pos = lower_bound(idx, first, end, name, len, FALSE);
	if (pos >= end || !entry_read(idx, pos, &e))
		return FALSE;
	found = entry_name_raw(idx, &e);
	if (!found)
		return FALSE;
	if (!(e.name_len == len && memcmp(found, name, len) == 0)) {
		/* Only names that extend it with a byte < '/' lie between. */
		if (e.name_len <= len || memcmp(found, name, len) != 0 ||
		    (guchar)found[len] >= '/')
			return FALSE;
		pos = lower_bound(idx, pos, end, name, len, TRUE);
		if (pos >= end || !entry_named(idx, pos, name, len, TRUE))
			return FALSE;
	}
	if (!entry_visible(idx, pos, &e))
		return FALSE;
	*out = pos;
	return TRUE;
}

gboolean index_is_dir(const struct index *idx, index_id id)
{
	struct entry e;

	g_return_val_if_fail(idx != NULL, FALSE);
	return entry_read(idx, id, &e) && entry_is_dir(&e);
}

const char *index_name(const struct index *idx, index_id id, gsize *len)
{
	struct entry e;
	const char *name;

	g_return_val_if_fail(idx != NULL, NULL);
	if (len)
		*len = 0;
	if (id == INDEX_ROOT)
		return "";
	if (!entry_read(idx, id, &e))
		return NULL;
	name = entry_name_raw(idx, &e);
	if (!name || !name_acceptable(name, e.name_len))
		return NULL;
	if (len)
		*len = e.name_len;
	return name;
}

gboolean index_child_at(const struct index *idx, index_id dir, guint64 pos,
			index_id *child, guint64 *next_pos)
{
	struct entry d, e;
	guint64 first, n;

	g_return_val_if_fail(idx != NULL && child != NULL, FALSE);
	if (!entry_read(idx, dir, &d) || !dir_range(idx, dir, &d, &first, &n))
		return FALSE;
	for (; pos < n; pos++) {
		if (entry_visible(idx, first + pos, &e)) {
			*child = first + pos;
			if (next_pos)
				*next_pos = pos + 1;
			return TRUE;
		}
	}
	return FALSE;
}

index_id index_parent(const struct index *idx, index_id id)
{
	guint64 lo = 0, hi, k, p, first, n;
	struct entry e;

	g_return_val_if_fail(idx != NULL, INDEX_ROOT);
	if (id == INDEX_ROOT || id >= idx->n_entries)
		return INDEX_ROOT;
	/* The last directory whose children start at or before @id. */
	hi = idx->n_dirs;
	while (lo < hi) {
		guint64 mid = lo + (hi - lo) / 2;

		if (dir_first_at(idx, mid) <= id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return INDEX_ROOT;
	k = lo - 1;
	p = dir_entry_at(idx, k);
	if (!entry_read(idx, p, &e) || e.size != k ||
	    !dir_range(idx, p, &e, &first, &n) || id < first || id >= first + n)
		return INDEX_ROOT;
	return p;
}

/* Where the bytes of a key go: a string, a hash, or both. */
struct key_sink {
	GString *str;
	XXH64_state_t *hash;
};

static void key_sink_add(struct key_sink *ks, const char *s, gsize len)
{
	if (ks->str)
		g_string_append_len(ks->str, s, len);
	if (ks->hash)
		XXH64_update(ks->hash, s, len);
}

/*
 * Feeds the key of @id to @ks: the prefix, then each name below the root
 * with a '/' after every directory's.  FALSE if @id is not an entry or a
 * name on the way is damaged.
 */
static gboolean key_walk(const struct index *idx, index_id id,
			 struct key_sink *ks)
{
	index_id local[64];
	g_autofree index_id *heap = NULL;
	index_id *chain = local;
	gsize n = 0, cap = G_N_ELEMENTS(local);
	index_id cur;

	if (id >= idx->n_entries)
		return FALSE;
	for (cur = id; cur != INDEX_ROOT; cur = index_parent(idx, cur)) {
		if (n == cap) {
			if (cap > INDEX_DEPTH_MAX)
				return FALSE;
			heap = g_renew(index_id, heap, cap * 2);
			if (chain == local)
				memcpy(heap, local, sizeof(local));
			chain = heap;
			cap *= 2;
		}
		chain[n++] = cur;
	}
	key_sink_add(ks, idx->prefix, strlen(idx->prefix));
	while (n > 0) {
		gsize len;
		const char *name = index_name(idx, chain[--n], &len);

		if (!name)
			return FALSE;
		key_sink_add(ks, name, len);
		if (index_is_dir(idx, chain[n]))
			key_sink_add(ks, "/", 1);
	}
	return TRUE;
}

char *index_key(const struct index *idx, index_id id)
{
	g_autoptr(GString) str = g_string_new(NULL);
	struct key_sink ks = { .str = str };

	g_return_val_if_fail(idx != NULL, NULL);
	if (!key_walk(idx, id, &ks))
		return NULL;
	return g_string_free(g_steal_pointer(&str), FALSE);
}

void index_get_attr(const struct index *idx, index_id id,
		    struct index_attr *out)
{
	struct entry e;
	XXH64_state_t h;
	struct key_sink ks = { .hash = &h };
	guint64 first, n;

	g_return_if_fail(idx != NULL && out != NULL);
	memset(out, 0, sizeof(*out));
	out->is_dir = TRUE;
	if (!entry_read(idx, id, &e))
		return;
	out->is_dir = entry_is_dir(&e);
	out->mtime = e.mtime;
	if (!out->is_dir)
		out->size = e.size;
	else if (dir_range(idx, id, &e, &first, &n))
		out->nchildren = n;
	if (id == INDEX_ROOT) {
		out->ino = INDEX_ROOT_INO;
		return;
	}
	XXH64_reset(&h, 0);
	if (key_walk(idx, id, &ks)) {
		out->ino = XXH64_digest(&h);
		if (out->ino < 2)
			out->ino += 2;
	}
}

char *index_etag(const struct index *idx, index_id id)
{
	struct entry e;
	char hex[33];
	guint64 off;
	guint32 len;

	g_return_val_if_fail(idx != NULL, NULL);
	if (!entry_read(idx, id, &e) || entry_is_dir(&e))
		return NULL;
	switch (entry_etag_kind(&e)) {
	case ETAG_NONE:
		return NULL;
	case ETAG_MD5:
	case ETAG_MULTI:
		for (int i = 0; i < 16; i++) {
			hex[2 * i] = "0123456789abcdef"[e.etag[i] >> 4];
			hex[2 * i + 1] = "0123456789abcdef"[e.etag[i] & 15];
		}
		hex[32] = '\0';
		if (entry_etag_kind(&e) == ETAG_MD5)
			return g_strdup(hex);
		return g_strdup_printf("%s-%u", hex, e.parts);
	case ETAG_STRING:
		break;
	}
	off = get64(e.etag);
	len = get32(e.etag + 8);
	if (len == 0 || off > idx->etags_len || len > idx->etags_len - off)
		return NULL;
	return g_strndup((const char *)idx->etags + off, len);
}

void index_get_stats(const struct index *idx, struct index_stats *out)
{
	g_return_if_fail(idx != NULL && out != NULL);
	*out = idx->stats;
}

const char *index_bucket(const struct index *idx)
{
	g_return_val_if_fail(idx != NULL, NULL);
	return idx->bucket;
}

const char *index_prefix(const struct index *idx)
{
	g_return_val_if_fail(idx != NULL, NULL);
	return idx->prefix;
}

const char *index_path(const struct index *idx)
{
	g_return_val_if_fail(idx != NULL, NULL);
	return idx->path;
}

struct index *index_ref(struct index *idx)
{
	g_return_val_if_fail(idx != NULL, NULL);
	g_atomic_int_inc(&idx->ref);
	return idx;
}

static void index_free(struct index *idx)
{
	if (idx->map)
		munmap((void *)idx->map, idx->map_len);
	g_free(idx->path);
	g_free(idx->shown);
	g_free(idx->bucket);
	g_free(idx->prefix);
	g_free(idx);
}

void index_unref(struct index *idx)
{
	if (idx && g_atomic_int_dec_and_test(&idx->ref))
		index_free(idx);
}

static gboolean corrupt(GError **error, const char *fmt, ...)
	G_GNUC_PRINTF(2, 3);

static gboolean corrupt(GError **error, const char *fmt, ...)
{
	va_list ap;
	g_autofree char *msg = NULL;

	va_start(ap, fmt);
	msg = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	g_set_error_literal(error, BFS_ERROR, EBADMSG, msg);
	return FALSE;
}

static void header_read_stats(struct index *idx, const guint8 *h)
{
	struct index_stats *st = &idx->stats;

	st->version = get32(h + H_VERSION);
	st->file_size = get64(h + H_FILE_SIZE);
	st->created = (gint64)get64(h + H_CREATED);
	st->keys = get64(h + H_KEYS);
	st->files = get64(h + H_FILES);
	st->dirs = get64(h + H_DIRS);
	st->markers = get64(h + H_MARKERS);
	st->bytes = get64(h + H_BYTES);
	st->skipped_empty = get64(h + H_SKIPPED_EMPTY);
	st->skipped_dot = get64(h + H_SKIPPED_DOT);
	st->skipped_long = get64(h + H_SKIPPED_LONG);
	st->skipped_deep = get64(h + H_SKIPPED_DEEP);
	st->shadowed = get64(h + H_SHADOWED);
	st->entries = get64(h + H_ENTRIES);
	idx->n_entries = st->entries;
	idx->n_dirs = get64(h + H_NDIRS);
}

/* The fixed part: magic, header length and checksum, version, size. */
static gboolean header_check_frame(struct index *idx, GError **error)
{
	const guint8 *h = idx->map;
	guint32 hlen, version;
	guint64 sum, want;

	if (memcmp(h, INDEX_MAGIC, MAGIC_LEN) != 0)
		return corrupt(error, "not a bucketfs index (bad magic)");
	hlen = get32(h + H_HEADER_LEN);
	if (hlen < HEADER_FIXED || hlen > HEADER_MAX || hlen % 8 != 0)
		return corrupt(error, "header length %u is impossible", hlen);
	if (hlen > idx->map_len)
		return corrupt(error,
			       "the header ends at byte %u but the file has "
			       "%zu bytes (truncated?)",
			       hlen, idx->map_len);
	sum = get64(h + H_CHECKSUM);
	want = header_checksum(h, hlen);
	if (sum != want)
		return corrupt(error,
			       "header checksum mismatch: stored "
			       "%016" G_GINT64_MODIFIER
			       "x, computed %016" G_GINT64_MODIFIER
			       "x (corrupt)",
			       sum, want);
	version = get32(h + H_VERSION);
	if (version != INDEX_FORMAT_VERSION) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "format version %u, this bucketfs reads version %d",
			    version, INDEX_FORMAT_VERSION);
		return FALSE;
	}
	idx->header_len = hlen;
	header_read_stats(idx, h);
	if (idx->stats.file_size != idx->map_len)
		return corrupt(error,
			       "the header says the file has %" G_GUINT64_FORMAT
			       " bytes but it has %zu (truncated?)",
			       idx->stats.file_size, idx->map_len);
	return TRUE;
}

static gboolean header_read_binding(struct index *idx, GError **error)
{
	const guint8 *h = idx->map;
	guint32 blen = get32(h + H_BUCKET_LEN);
	guint32 plen = get32(h + H_PREFIX_LEN);
	const char *b = (const char *)h + HEADER_FIXED;

	if (blen == 0 || blen > BUCKET_MAX || plen > PREFIX_MAX ||
	    HEADER_FIXED + blen + plen > idx->header_len)
		return corrupt(error,
			       "bucket (%u bytes) or prefix (%u bytes) "
			       "does not fit in the header",
			       blen, plen);
	if (memchr(b, '\0', blen) || memchr(b + blen, '\0', plen))
		return corrupt(error, "a NUL byte in the bucket or prefix");
	idx->bucket = g_strndup(b, blen);
	idx->prefix = g_strndup(b + blen, plen);
	return TRUE;
}

static guint64 add_sat(guint64 a, guint64 b)
{
	return a > G_MAXUINT64 - b ? G_MAXUINT64 : a + b;
}

/* Every section follows the one before it, up to the end of the file. */
static gboolean header_read_sections(struct index *idx, GError **error)
{
	const guint8 *h = idx->map;
	guint64 expect = idx->header_len;

	for (int k = 0; k < SEC_COUNT; k++) {
		const guint8 *d = h + H_SECTIONS + k * SECTION_DESC;
		guint64 off = get64(d), len = get64(d + 8);

		if (off != expect)
			return corrupt(
				error,
				"section '%s' starts at byte %" G_GUINT64_FORMAT
				", expected %" G_GUINT64_FORMAT,
				section_names[k], off, expect);
		if (len > idx->map_len - off)
			return corrupt(
				error,
				"section '%s' ends at byte %" G_GUINT64_FORMAT
				" but the file has %zu bytes (truncated?)",
				section_names[k], add_sat(off, len),
				idx->map_len);
		idx->sec_off[k] = off;
		idx->sec_len[k] = len;
		idx->sec_sum[k] = get64(d + 16);
		expect = off + len;
	}
	if (expect != idx->map_len)
		return corrupt(error,
			       "%" G_GUINT64_FORMAT " bytes after the last "
			       "section",
			       (guint64)idx->map_len - expect);
	idx->entries = h + idx->sec_off[SEC_ENTRIES];
	idx->dir_first = h + idx->sec_off[SEC_DIR_FIRST];
	idx->dir_entry = h + idx->sec_off[SEC_DIR_ENTRY];
	idx->names = h + idx->sec_off[SEC_NAMES];
	idx->names_len = idx->sec_len[SEC_NAMES];
	idx->etags = h + idx->sec_off[SEC_ETAGS];
	idx->etags_len = idx->sec_len[SEC_ETAGS];
	return TRUE;
}

static gboolean section_len_is(struct index *idx, enum section k, guint64 count,
			       guint64 size, GError **error)
{
	if (count > G_MAXUINT64 / size || idx->sec_len[k] != count * size)
		return corrupt(error,
			       "section '%s' has %" G_GUINT64_FORMAT " bytes, "
			       "not %" G_GUINT64_FORMAT " x %" G_GUINT64_FORMAT,
			       section_names[k], idx->sec_len[k], count, size);
	return TRUE;
}

/* The counts agree with each other and with the section lengths. */
static gboolean header_check_counts(struct index *idx, GError **error)
{
	const struct index_stats *st = &idx->stats;
	struct entry root;

	if (idx->n_entries == 0 || idx->n_dirs == 0 ||
	    idx->n_dirs > idx->n_entries || idx->n_dirs - 1 != st->dirs ||
	    idx->n_entries - idx->n_dirs != st->files)
		return corrupt(
			error,
			"%" G_GUINT64_FORMAT " entries and %" G_GUINT64_FORMAT
			" directories do not add up "
			"to %" G_GUINT64_FORMAT " files and %" G_GUINT64_FORMAT
			" directories",
			idx->n_entries, idx->n_dirs, st->files, st->dirs);
	if (!section_len_is(idx, SEC_ENTRIES, idx->n_entries, ENTRY_SIZE,
			    error) ||
	    !section_len_is(idx, SEC_DIR_FIRST, idx->n_dirs + 1, 8, error) ||
	    !section_len_is(idx, SEC_DIR_ENTRY, idx->n_dirs, 8, error))
		return FALSE;
	if (idx->names_len == 0 || idx->names[0] != '\0' ||
	    !entry_read(idx, INDEX_ROOT, &root) || !entry_is_dir(&root) ||
	    root.size != 0 || root.name_len != 0 ||
	    dir_entry_at(idx, 0) != INDEX_ROOT || dir_first_at(idx, 0) != 1 ||
	    dir_first_at(idx, idx->n_dirs) != idx->n_entries)
		return corrupt(error, "the root directory's records are "
				      "damaged");
	return TRUE;
}

static gboolean header_parse(struct index *idx, GError **error)
{
	return header_check_frame(idx, error) &&
	       header_read_binding(idx, error) &&
	       header_read_sections(idx, error) &&
	       header_check_counts(idx, error);
}

static gboolean check_binding(struct index *idx, const char *bucket,
			      const char *prefix, GError **error)
{
	g_autofree char *have = NULL;
	g_autofree char *want = NULL;
	g_autofree char *have_esc = NULL;
	g_autofree char *want_esc = NULL;

	if (!prefix)
		prefix = "";
	if (strcmp(idx->bucket, bucket) == 0 &&
	    strcmp(idx->prefix, prefix) == 0)
		return TRUE;
	have = g_strdup_printf("s3://%s/%s", idx->bucket, idx->prefix);
	want = g_strdup_printf("s3://%s/%s", bucket, prefix);
	have_esc = log_escape(have, -1);
	want_esc = log_escape(want, -1);
	g_set_error(error, BFS_ERROR, ESRCH, "was built for %s not %s",
		    have_esc, want_esc);
	return FALSE;
}

static int open_file(const char *path, struct stat *st, GError **error)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	int err;

	if (fd < 0) {
		err = errno;
		if (err == ELOOP) {
			g_set_error(error, BFS_ERROR, ELOOP,
				    "is a symbolic link (refused, not "
				    "followed)");
			return -1;
		}
		g_set_error(error, BFS_ERROR, err, "%s", g_strerror(err));
		return -1;
	}
	if (fstat(fd, st) < 0) {
		err = errno;
		close(fd);
		g_set_error(error, BFS_ERROR, err, "fstat: %s",
			    g_strerror(err));
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		g_set_error(error, BFS_ERROR, EINVAL, "not a regular file");
		return -1;
	}
	return fd;
}

static gboolean index_map(struct index *idx, GError **error)
{
	struct stat st;
	void *map;
	int fd, err;

	fd = open_file(idx->path, &st, error);
	if (fd < 0)
		return FALSE;
	if ((guint64)st.st_size < HEADER_FIXED) {
		close(fd);
		return corrupt(error,
			       "%" G_GINT64_FORMAT " bytes, too short for an "
			       "index header (%d bytes; truncated?)",
			       (gint64)st.st_size, HEADER_FIXED);
	}
	map = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	err = errno;
	close(fd);
	if (map == MAP_FAILED) {
		g_set_error(error, BFS_ERROR, err, "mmap: %s", g_strerror(err));
		return FALSE;
	}
	idx->map = map;
	idx->map_len = st.st_size;
	return TRUE;
}

struct index *index_open(const char *path, const char *bucket,
			 const char *prefix, GError **error)
{
	struct index *idx;

	g_return_val_if_fail(path != NULL, NULL);
	g_return_val_if_fail(error == NULL || *error == NULL, NULL);

	idx = g_new0(struct index, 1);
	idx->ref = 1;
	idx->path = g_strdup(path);
	idx->shown = log_escape(path, -1);
	if (!index_map(idx, error) || !header_parse(idx, error))
		goto fail;
	if (bucket && !check_binding(idx, bucket, prefix, error))
		goto fail;
	return idx;

fail:
	g_prefix_error(error, "index %s: ", idx->shown);
	index_free(idx);
	return NULL;
}

/* --- verify ------------------------------------------------------------- */

/* What a walk over all the entries has seen so far. */
struct verify_state {
	guint64 name_next; /* where the next name must start */
	guint64 etag_next; /* where the next string ETag must start */
	guint64 files;
	guint64 dirs;
	guint64 bytes;
};

static gboolean verify_etag(const struct index *idx, index_id id,
			    const struct entry *e, struct verify_state *vs,
			    GError **error)
{
	enum etag_kind kind = entry_etag_kind(e);
	guint64 off;
	guint32 len;

	gboolean bad;

	if (entry_is_dir(e))
		bad = kind != ETAG_NONE || e->parts != 0;
	else
		bad = (kind == ETAG_MULTI) != (e->parts != 0);
	if (bad)
		return corrupt(error, "entry %" G_GUINT64_FORMAT ": bad ETag",
			       id);
	if (kind != ETAG_STRING)
		return TRUE;
	off = get64(e->etag);
	len = get32(e->etag + 8);
	if (off != vs->etag_next || len == 0 || len > ETAG_STRING_MAX ||
	    len > idx->etags_len - off || get32(e->etag + 12) != 0)
		return corrupt(error,
			       "entry %" G_GUINT64_FORMAT
			       ": ETag at %" G_GUINT64_FORMAT
			       " (%u bytes) is out of place",
			       id, off, len);
	vs->etag_next = off + len;
	return TRUE;
}

static gboolean verify_entry(const struct index *idx, index_id id,
			     struct verify_state *vs, GError **error)
{
	struct entry e;
	const char *name;
	guint64 first, n;

	if (!entry_read(idx, id, &e))
		return corrupt(error,
			       "entry %" G_GUINT64_FORMAT ": unknown "
			       "flags",
			       id);
	name = entry_name_raw(idx, &e);
	if (!name || e.name_off != vs->name_next ||
	    (id == INDEX_ROOT ? e.name_len != 0
			      : !name_acceptable(name, e.name_len)))
		return corrupt(error, "entry %" G_GUINT64_FORMAT ": bad name",
			       id);
	vs->name_next = e.name_off + e.name_len + 1;
	if (entry_is_dir(&e)) {
		if (!dir_range(idx, id, &e, &first, &n))
			return corrupt(error,
				       "entry %" G_GUINT64_FORMAT ": bad "
				       "directory records",
				       id);
		if (id != INDEX_ROOT)
			vs->dirs++;
	} else {
		vs->files++;
		vs->bytes += e.size;
	}
	return verify_etag(idx, id, &e, vs, error);
}

/* The children of directory number @k are strictly sorted. */
static gboolean verify_dir_order(const struct index *idx, guint64 k,
				 GError **error)
{
	guint64 first = dir_first_at(idx, k);
	guint64 end = dir_first_at(idx, k + 1);
	struct entry a, b;

	for (guint64 i = first; i + 1 < end; i++) {
		const char *na, *nb;

		if (!entry_read(idx, i, &a) || !entry_read(idx, i + 1, &b))
			return corrupt(
				error,
				"entry %" G_GUINT64_FORMAT ": unreadable", i);
		na = entry_name_raw(idx, &a);
		nb = entry_name_raw(idx, &b);
		if (!na || !nb ||
		    sortkey_cmp((const guint8 *)na, a.name_len,
				entry_is_dir(&a), (const guint8 *)nb,
				b.name_len, entry_is_dir(&b)) >= 0)
			return corrupt(error,
				       "entries %" G_GUINT64_FORMAT
				       " and %" G_GUINT64_FORMAT
				       " are out of order",
				       i, i + 1);
	}
	return TRUE;
}

/*
 * The directory records tile the entries after the root in breadth-first
 * order: the first children start at 1, each directory's start where the
 * previous one's end, the last end at the last entry, and the directories
 * themselves come in increasing id order.
 */
static gboolean verify_dirs(const struct index *idx, GError **error)
{
	guint64 prev_entry = 0;

	for (guint64 k = 0; k < idx->n_dirs; k++) {
		guint64 e = dir_entry_at(idx, k);
		struct entry d;
		guint64 first, n;

		if ((k > 0 && e <= prev_entry) || !entry_read(idx, e, &d) ||
		    d.size != k || !dir_range(idx, e, &d, &first, &n))
			return corrupt(error,
				       "directory %" G_GUINT64_FORMAT
				       " (entry %" G_GUINT64_FORMAT
				       ") is damaged",
				       k, e);
		if (!verify_dir_order(idx, k, error))
			return FALSE;
		prev_entry = e;
	}
	return TRUE;
}

static gboolean verify_structure(const struct index *idx, GError **error)
{
	struct verify_state vs = { 0 };

	if (!verify_dirs(idx, error))
		return FALSE;
	for (guint64 id = 0; id < idx->n_entries; id++) {
		if (!verify_entry(idx, id, &vs, error))
			return FALSE;
	}
	if (vs.name_next != idx->names_len || vs.etag_next != idx->etags_len)
		return corrupt(error,
			       "names or ETags have bytes no entry uses");
	if (vs.files != idx->stats.files || vs.dirs != idx->stats.dirs ||
	    vs.bytes != idx->stats.bytes)
		return corrupt(error, "the entries do not add up to the counts "
				      "in the header");
	return TRUE;
}

gboolean index_verify(struct index *idx, GError **error)
{
	guint64 sum;

	g_return_val_if_fail(idx != NULL, FALSE);
	g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

	if (get64(idx->map + H_CHECKSUM) !=
	    header_checksum(idx->map, idx->header_len)) {
		corrupt(error, "header checksum mismatch (corrupt)");
		goto fail;
	}
	for (int k = 0; k < SEC_COUNT; k++) {
		sum = XXH64(idx->map + idx->sec_off[k], idx->sec_len[k], 0);
		if (sum == idx->sec_sum[k])
			continue;
		corrupt(error,
			"section '%s' (bytes %" G_GUINT64_FORMAT
			"-%" G_GUINT64_FORMAT
			") checksum mismatch: stored %016" G_GINT64_MODIFIER
			"x, computed %016" G_GINT64_MODIFIER "x (corrupt)",
			section_names[k], idx->sec_off[k],
			idx->sec_off[k] + idx->sec_len[k], idx->sec_sum[k],
			sum);
		goto fail;
	}
	if (!verify_structure(idx, error))
		goto fail;
	return TRUE;

fail:
	g_prefix_error(error, "index %s: ", idx->shown);
	return FALSE;
}

/* --- writing ------------------------------------------------------------ */

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
#define STREAM_CHUNK (64 * 1024)
#define READ_BUF     (4 * STREAM_CHUNK)
#define SECTION_BUF  (256 * 1024)

/* A stream record; the name and a string ETag follow it. */
struct rec {
	guint8 kind; /* REC_*; first, so it can be patched */
	guint8 etag_kind;
	guint8 name_len;
	guint8 pad;
	guint16 parts;
	guint16 etag_len;   /* of a string ETag */
	guint64 parent_ord; /* the parent's rank among its depth's dirs */
	guint64 size;
	gint64 mtime;
	guint8 etag[16];
};

#define REC_FILE   0x01
#define REC_DIR	   0x02
#define REC_HIDDEN 0x80 /* a file shadowed by a directory */

/* A file that a later directory of the same name would hide. */
struct cand {
	guint64 where; /* the record's offset in its depth's stream */
	guint64 size;
	guint32 etag_len;
	guint32 len;
	char name[INDEX_NAME_MAX];
};

/* The records of one depth. */
struct dstream {
	guint8 *buf; /* STREAM_CHUNK bytes not yet in the file */
	gsize used;
	guint64 flushed; /* stream bytes before buf[0] */
	GArray *chunks;	 /* guint64 file offset of each full chunk */
	guint64 ndirs;	 /* directories at this depth */
	GArray *cands;	 /* struct cand, a stack */
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

struct index_writer {
	char *path;
	char *shown; /* path, escaped for messages */
	char *bucket;
	char *prefix;
	gsize prefix_len;
	int sfd;	   /* the stream file, already unlinked */
	guint64 send;	   /* its length */
	GPtrArray *depths; /* struct dstream *, [d] for depth d >= 1 */
	GArray *levels;	   /* struct level, the path of the last key */
	GString *prev;	   /* the last key */
	gboolean have_prev;
	struct index_stats st;
	guint64 names_len; /* of the final 'names' section */
	guint64 etags_len;
	gint64 root_mtime;
	GError *failed; /* the I/O error that ended the build */
	gboolean done;	/* commit was called */
	char *tmp_path; /* the final file while it is written */
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

static int pwrite_all(int fd, const void *buf, gsize len, guint64 off)
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

static int pread_all(int fd, void *buf, gsize len, guint64 off)
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
static gboolean writer_fail(struct index_writer *w, int err, const char *what,
			    GError **error)
{
	GError *e = NULL;

	set_errno_error(&e, err, w->path, what);
	if (!w->failed)
		w->failed = g_error_copy(e);
	g_propagate_error(error, e);
	return FALSE;
}

static gboolean dstream_flush(struct index_writer *w, struct dstream *ds,
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

static gboolean writer_usable(struct index_writer *w, GError **error)
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
static void remove_stale_temps(const char *path)
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

/* --- commit: the layout pass ---------------------------------------------- */

/* A section being written sequentially at its place in the final file. */
struct swriter {
	guint64 off;	 /* file offset of buf[0] */
	guint64 written; /* bytes handed to it */
	guint8 *buf;
	gsize used;
	XXH64_state_t hash;
};

/* What commit works with. */
struct layout {
	struct index_writer *w;
	int fd;
	guint64 off[SEC_COUNT];
	guint64 len[SEC_COUNT];
	struct swriter sec[SEC_COUNT];
	guint64 next_id;  /* the next entry's id */
	guint64 next_dir; /* the next directory's number */
	guint8 *rbuf;	  /* the stream being read */
	gsize rstart, rend;
	guint64 rloaded; /* stream bytes of this depth read so far */
};

static gboolean sec_flush(struct layout *l, struct swriter *s, GError **error)
{
	int err = pwrite_all(l->fd, s->buf, s->used, s->off);

	if (err)
		return writer_fail(l->w, err, "writing", error);
	s->off += s->used;
	s->used = 0;
	return TRUE;
}

static gboolean sec_put(struct layout *l, enum section k, const void *data,
			gsize len, GError **error)
{
	struct swriter *s = &l->sec[k];
	const guint8 *p = data;

	XXH64_update(&s->hash, data, len);
	s->written += len;
	while (len > 0) {
		gsize n = MIN(len, SECTION_BUF - s->used);

		memcpy(s->buf + s->used, p, n);
		s->used += n;
		p += n;
		len -= n;
		if (s->used == SECTION_BUF && !sec_flush(l, s, error))
			return FALSE;
	}
	return TRUE;
}

static gboolean sec_put64(struct layout *l, enum section k, guint64 v,
			  GError **error)
{
	guint8 b[8];

	put64(b, v);
	return sec_put(l, k, b, sizeof(b), error);
}

/* Makes @n bytes of the stream of @ds available at l->rbuf + l->rstart. */
static gboolean stream_need(struct layout *l, struct dstream *ds, gsize n,
			    GError **error)
{
	guint64 total = ds->flushed;

	while (l->rend - l->rstart < n) {
		guint64 chunk = l->rloaded / STREAM_CHUNK;
		gsize len;
		int err;

		if (l->rloaded >= total) {
			g_set_error(error, BFS_ERROR, EIO,
				    "index %s: the key stream ends early",
				    l->w->shown);
			return FALSE;
		}
		if (l->rstart > 0) {
			memmove(l->rbuf, l->rbuf + l->rstart,
				l->rend - l->rstart);
			l->rend -= l->rstart;
			l->rstart = 0;
		}
		len = MIN(STREAM_CHUNK, total - l->rloaded);
		g_assert(l->rend + len <= READ_BUF);
		err = pread_all(l->w->sfd, l->rbuf + l->rend, len,
				g_array_index(ds->chunks, guint64, chunk));
		if (err)
			return writer_fail(l->w, err, "reading the key stream",
					   error);
		l->rend += len;
		l->rloaded += len;
	}
	return TRUE;
}

static gboolean layout_entry(struct layout *l, const struct rec *r,
			     const char *name, const char *etag, GError **error)
{
	struct entry e = { 0 };
	guint8 buf[ENTRY_SIZE];
	guint8 blob[16] = { 0 };
	static const guint8 nul;

	e.name_off = l->sec[SEC_NAMES].written;
	e.name_len = r->name_len;
	e.mtime = r->mtime;
	e.etag = blob;
	if (r->kind & REC_DIR) {
		e.flags = F_DIR;
		e.size = l->next_dir++;
		if (!sec_put64(l, SEC_DIR_ENTRY, l->next_id, error))
			return FALSE;
	} else {
		e.size = r->size;
		e.parts = r->etag_kind == ETAG_MULTI ? r->parts : 0;
		e.flags = r->etag_kind << F_ETAG_SHIFT;
		if (r->etag_kind == ETAG_STRING) {
			put64(blob, l->sec[SEC_ETAGS].written);
			put32(blob + 8, r->etag_len);
			if (!sec_put(l, SEC_ETAGS, etag, r->etag_len, error))
				return FALSE;
		} else {
			memcpy(blob, r->etag, 16);
		}
	}
	entry_encode(buf, &e);
	l->next_id++;
	return sec_put(l, SEC_ENTRIES, buf, sizeof(buf), error) &&
	       sec_put(l, SEC_NAMES, name, r->name_len, error) &&
	       sec_put(l, SEC_NAMES, &nul, 1, error);
}

/*
 * Writes the entries of depth @d, the entries of its directories, and the
 * first child of each of the @nparents directories of depth @d - 1.
 */
static gboolean layout_depth(struct layout *l, guint d, guint64 nparents,
			     GError **error)
{
	struct dstream *ds =
		d < l->w->depths->len ? l->w->depths->pdata[d] : NULL;
	guint64 total = ds ? ds->flushed : 0;
	guint64 consumed = 0, next_parent = 0;

	l->rstart = l->rend = 0;
	l->rloaded = 0;
	while (consumed < total) {
		struct rec r;
		const char *name;

		if (!stream_need(l, ds, sizeof(r), error))
			return FALSE;
		memcpy(&r, l->rbuf + l->rstart, sizeof(r));
		if (!stream_need(l, ds, sizeof(r) + r.name_len + r.etag_len,
				 error))
			return FALSE;
		name = (const char *)l->rbuf + l->rstart + sizeof(r);
		l->rstart += sizeof(r) + r.name_len + r.etag_len;
		consumed += sizeof(r) + r.name_len + r.etag_len;
		if (r.kind & REC_HIDDEN)
			continue;
		g_assert(r.parent_ord < nparents);
		for (; next_parent <= r.parent_ord; next_parent++) {
			if (!sec_put64(l, SEC_DIR_FIRST, l->next_id, error))
				return FALSE;
		}
		if (!layout_entry(l, &r, name, name + r.name_len, error))
			return FALSE;
	}
	for (; next_parent < nparents; next_parent++) {
		if (!sec_put64(l, SEC_DIR_FIRST, l->next_id, error))
			return FALSE;
	}
	return TRUE;
}

static gboolean layout_root(struct layout *l, GError **error)
{
	struct rec r = { .kind = REC_DIR, .mtime = l->w->root_mtime };

	return layout_entry(l, &r, "", NULL, error);
}

static void header_build(struct layout *l, guint8 *h, gsize hlen)
{
	struct index_writer *w = l->w;
	const struct index_stats *st = &w->st;
	gsize blen = strlen(w->bucket);

	memset(h, 0, hlen);
	memcpy(h, INDEX_MAGIC, MAGIC_LEN);
	put32(h + H_VERSION, INDEX_FORMAT_VERSION);
	put32(h + H_HEADER_LEN, hlen);
	put64(h + H_FILE_SIZE, st->file_size);
	put64(h + H_CREATED, st->created);
	put64(h + H_KEYS, st->keys);
	put64(h + H_FILES, st->files);
	put64(h + H_DIRS, st->dirs);
	put64(h + H_MARKERS, st->markers);
	put64(h + H_BYTES, st->bytes);
	put64(h + H_SKIPPED_EMPTY, st->skipped_empty);
	put64(h + H_SKIPPED_DOT, st->skipped_dot);
	put64(h + H_SKIPPED_LONG, st->skipped_long);
	put64(h + H_SKIPPED_DEEP, st->skipped_deep);
	put64(h + H_SHADOWED, st->shadowed);
	put64(h + H_ENTRIES, st->entries);
	put64(h + H_NDIRS, st->dirs + 1);
	put32(h + H_BUCKET_LEN, blen);
	put32(h + H_PREFIX_LEN, w->prefix_len);
	for (int k = 0; k < SEC_COUNT; k++) {
		guint8 *d = h + H_SECTIONS + k * SECTION_DESC;

		put64(d, l->off[k]);
		put64(d + 8, l->len[k]);
		put64(d + 16, XXH64_digest(&l->sec[k].hash));
	}
	memcpy(h + HEADER_FIXED, w->bucket, blen);
	memcpy(h + HEADER_FIXED + blen, w->prefix, w->prefix_len);
	put64(h + H_CHECKSUM, header_checksum(h, hlen));
}

/* Sizes and places every section from the counts of phase one. */
static gboolean layout_plan(struct layout *l, GError **error)
{
	struct index_writer *w = l->w;
	guint64 hlen = HEADER_FIXED + strlen(w->bucket) + w->prefix_len;
	guint64 n_dirs = w->st.dirs + 1;

	if (w->names_len - 1 > NAME_OFF_MAX) {
		g_set_error(error, BFS_ERROR, EFBIG,
			    "index %s: %" G_GUINT64_FORMAT " bytes of names; "
			    "the format holds at most %" G_GUINT64_FORMAT,
			    w->shown, w->names_len, NAME_OFF_MAX);
		return FALSE;
	}
	w->st.entries = w->st.files + n_dirs;
	l->len[SEC_ENTRIES] = w->st.entries * ENTRY_SIZE;
	l->len[SEC_DIR_FIRST] = (n_dirs + 1) * 8;
	l->len[SEC_DIR_ENTRY] = n_dirs * 8;
	l->len[SEC_NAMES] = w->names_len;
	l->len[SEC_ETAGS] = w->etags_len;
	l->off[0] = (hlen + 7) & ~(guint64)7;
	for (int k = 1; k < SEC_COUNT; k++)
		l->off[k] = l->off[k - 1] + l->len[k - 1];
	w->st.file_size = l->off[SEC_COUNT - 1] + l->len[SEC_COUNT - 1];
	for (int k = 0; k < SEC_COUNT; k++) {
		l->sec[k].off = l->off[k];
		l->sec[k].buf = g_malloc(SECTION_BUF);
		XXH64_reset(&l->sec[k].hash, 0);
	}
	return TRUE;
}

static gboolean layout_write(struct layout *l, GError **error)
{
	struct index_writer *w = l->w;
	guint64 nparents = 1;
	guint maxdepth = w->depths->len ? w->depths->len - 1 : 0;

	if (!layout_root(l, error))
		return FALSE;
	for (guint d = 1; d <= maxdepth + 1; d++) {
		struct dstream *ds =
			d < w->depths->len ? w->depths->pdata[d] : NULL;

		if (!layout_depth(l, d, nparents, error))
			return FALSE;
		nparents = ds ? ds->ndirs : 0;
	}
	if (!sec_put64(l, SEC_DIR_FIRST, w->st.entries, error))
		return FALSE;
	for (int k = 0; k < SEC_COUNT; k++) {
		if (!sec_flush(l, &l->sec[k], error))
			return FALSE;
		/* The counts of phase one must match what was laid out. */
		g_assert(l->sec[k].written == l->len[k]);
	}
	return TRUE;
}

static gboolean layout_header(struct layout *l, GError **error)
{
	gsize hlen = l->off[0];
	g_autofree guint8 *h = g_malloc(hlen);
	int err;

	header_build(l, h, hlen);
	err = pwrite_all(l->fd, h, hlen, 0);
	if (err)
		return writer_fail(l->w, err, "writing", error);
	return TRUE;
}

/*
 * A new temporary file beside the index, locked (flock) for as long as it
 * is open so that remove_stale_temps() in another build leaves it alone.
 * Sets w->tmp_path; returns the descriptor or -1 with errno set.
 */
static int temp_create(struct index_writer *w)
{
	g_autofree char *dir = g_path_get_dirname(w->path);
	g_autofree char *base = g_path_get_basename(w->path);

	for (int tries = 0; tries < 8; tries++) {
		struct stat st;
		int fd, err;

		g_free(w->tmp_path);
		w->tmp_path = g_strdup_printf("%s/.%s.tmp-XXXXXX", dir, base);
		fd = g_mkstemp_full(w->tmp_path, O_RDWR | O_CLOEXEC, 0600);
		if (fd < 0)
			break;
		/* A cleaner may have taken it between mkstemp and flock:
		 * then it is locked, or already unlinked; take another. */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 &&
		    st.st_nlink > 0)
			return fd;
		err = errno;
		close(fd);
		errno = err;
	}
	g_clear_pointer(&w->tmp_path, g_free);
	return -1;
}

/* Creates the final file under a temporary name, at its full size. */
static gboolean layout_create(struct layout *l, GError **error)
{
	struct index_writer *w = l->w;
	int err;

	l->fd = temp_create(w);
	if (l->fd < 0) {
		err = errno ? errno : EEXIST;
		return writer_fail(w, err, "creating the temporary file",
				   error);
	}
	if (fchmod(l->fd, 0600) < 0) {
		err = errno;
		return writer_fail(w, err, "chmod", error);
	}
	/* Fail early on a full disk rather than after gigabytes. */
	err = posix_fallocate(l->fd, 0, w->st.file_size);
	if (err && err != EOPNOTSUPP && err != EINVAL)
		return writer_fail(w, err, "allocating space", error);
	return TRUE;
}

static void fsync_dir(const char *path)
{
	g_autofree char *dir = g_path_get_dirname(path);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err = 0;

	if (fd < 0 || fsync(fd) < 0)
		err = errno;
	if (fd >= 0)
		close(fd);
	/* The rename is done: failing now would misreport the index. */
	if (err) {
		g_autofree char *d = log_escape(dir, -1);

		log_msg(LOG_LEVEL_WARNING, "index: fsync of directory %s: %s",
			d, g_strerror(err));
	}
}

static gboolean layout_finish(struct layout *l, GError **error)
{
	struct index_writer *w = l->w;
	int fd = l->fd;
	int err;

	l->fd = -1;
	if (fsync(fd) < 0) {
		err = errno;
		close(fd);
		return writer_fail(w, err, "fsync", error);
	}
	/* Renamed while still open, so still locked: see temp_create(). */
	if (rename(w->tmp_path, w->path) < 0) {
		err = errno;
		close(fd);
		return writer_fail(w, err, "renaming into place", error);
	}
	g_clear_pointer(&w->tmp_path, g_free);
	if (close(fd) < 0)
		log_msg(LOG_LEVEL_WARNING, "index %s: close: %s", w->shown,
			g_strerror(errno));
	fsync_dir(w->path);
	return TRUE;
}

static void layout_clear(struct layout *l)
{
	for (int k = 0; k < SEC_COUNT; k++)
		g_free(l->sec[k].buf);
	g_free(l->rbuf);
	if (l->fd >= 0)
		close(l->fd);
}

gboolean index_writer_commit(struct index_writer *w, struct index_stats *stats,
			     GError **error)
{
	struct layout l = { .w = w, .fd = -1 };
	gboolean ok = FALSE;

	g_return_val_if_fail(w != NULL && !w->done, FALSE);
	g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

	w->done = TRUE;
	if (!writer_usable(w, error))
		return FALSE;
	for (guint d = 1; d < w->depths->len; d++) {
		if (w->depths->pdata[d] &&
		    !dstream_flush(w, w->depths->pdata[d], error))
			return FALSE;
	}
	l.rbuf = g_malloc(READ_BUF);
	if (!layout_plan(&l, error) || !layout_create(&l, error) ||
	    !layout_write(&l, error) || !layout_header(&l, error) ||
	    !layout_finish(&l, error))
		goto out;
	if (stats)
		*stats = w->st;
	ok = TRUE;

out:
	layout_clear(&l);
	if (!ok && w->tmp_path) {
		g_unlink(w->tmp_path);
		g_clear_pointer(&w->tmp_path, g_free);
	}
	close(w->sfd);
	w->sfd = -1;
	return ok;
}
