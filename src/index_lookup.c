/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The mapped index read: entries, lookups by name, children, parents, keys,
 * attributes, ETags, and the reference count.
 */
#include <sys/mman.h>

#include "index_internal.h"

static gint64 mtime_decode(guint64 v)
{
	v &= (G_GUINT64_CONSTANT(1) << MTIME_BITS) - 1;
	if (v & (G_GUINT64_CONSTANT(1) << (MTIME_BITS - 1)))
		v |= ~((G_GUINT64_CONSTANT(1) << MTIME_BITS) - 1);
	return (gint64)v;
}

gboolean entry_read(const struct index *idx, index_id id, struct entry *e)
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

gboolean entry_is_dir(const struct entry *e)
{
	return (e->flags & F_DIR) != 0;
}

enum etag_kind entry_etag_kind(const struct entry *e)
{
	return (e->flags & F_ETAG_MASK) >> F_ETAG_SHIFT;
}

/* The bytes of the name, inside the mapping and NUL-terminated; or NULL. */
const char *entry_name_raw(const struct index *idx, const struct entry *e)
{
	if (e->name_off >= idx->names_len ||
	    e->name_len >= idx->names_len - e->name_off)
		return NULL;
	if (idx->names[e->name_off + e->name_len] != '\0')
		return NULL;
	return (const char *)idx->names + e->name_off;
}

/* Whether @len bytes at @s can be a name in a directory. */
gboolean name_acceptable(const char *s, gsize len)
{
	if (len == 0 || len > INDEX_NAME_MAX)
		return FALSE;
	if (s[0] == '.' && (len == 1 || (len == 2 && s[1] == '.')))
		return FALSE;
	return !memchr(s, '/', len) && !memchr(s, '\0', len);
}

guint64 dir_first_at(const struct index *idx, guint64 k)
{
	return get64(idx->dir_first + k * 8);
}

guint64 dir_entry_at(const struct index *idx, guint64 k)
{
	return get64(idx->dir_entry + k * 8);
}

/*
 * The children of directory @id (entry @e): ids first .. first + n - 1.
 * FALSE when it is not a directory or its records disagree: every check
 * that keeps the accessors inside the entries and keeps index_parent()
 * going strictly towards the root (children come after their directory).
 */
gboolean dir_range(const struct index *idx, index_id id, const struct entry *e,
		   guint64 *first, guint64 *n)
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
int sortkey_cmp(const guint8 *a, gsize alen, gboolean adir, const guint8 *b,
		gsize blen, gboolean bdir)
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

void index_free(struct index *idx)
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
