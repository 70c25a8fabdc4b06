/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the pieces of the index share: the on-disk layout (docs/INDEX-FORMAT.md;
 * keep the two in step), the mapped index, and the helpers more than one
 * piece calls.  Everything on disk is little-endian and read through
 * get64()/get32(), never through a struct cast, so that no accessor depends
 * on the mapping's contents being sane or aligned.
 */
#ifndef BUCKETFS_INDEX_INTERNAL_H
#define BUCKETFS_INDEX_INTERNAL_H

#include <string.h>

#include <glib.h>

/*
 * XXH64 with seed 0 (libxxhash, the reference implementation) makes the
 * checksums and the inode numbers, both part of the format: its output
 * is specified and fixed, whatever the library's version.  States live
 * on the stack (static linking only, in xxhash.h's words): lookups hash
 * a key each, and an allocation each would cost more than the hash.
 */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "index.h"

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
extern const char *const section_names[SEC_COUNT];

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

/* index.c: the format's checksums and errors. */
guint64 header_checksum(const guint8 *h, gsize hlen);
gboolean set_errno_error(GError **error, int err, const char *path,
			 const char *what);
gboolean corrupt(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* index_lookup.c: entries in the mapping. */
gboolean entry_read(const struct index *idx, index_id id, struct entry *e);
gboolean entry_is_dir(const struct entry *e);
enum etag_kind entry_etag_kind(const struct entry *e);
const char *entry_name_raw(const struct index *idx, const struct entry *e);
gboolean name_acceptable(const char *s, gsize len);
guint64 dir_first_at(const struct index *idx, guint64 k);
guint64 dir_entry_at(const struct index *idx, guint64 k);
gboolean dir_range(const struct index *idx, index_id id, const struct entry *e,
		   guint64 *first, guint64 *n);
int sortkey_cmp(const guint8 *a, gsize alen, gboolean adir, const guint8 *b,
		gsize blen, gboolean bdir);
void index_free(struct index *idx);

#endif
