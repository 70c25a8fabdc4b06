/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Opening an index file: mapping it, and checking its header, its binding
 * to a bucket and prefix, and its sections' bounds before any lookup.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "index_internal.h"
#include "log.h"

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
