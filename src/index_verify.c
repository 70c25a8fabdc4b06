/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * index_verify(): the whole-file check, every entry, name and ETag, the
 * order within each directory, and each section's checksum.
 */
#include "error.h"
#include "index_internal.h"

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
