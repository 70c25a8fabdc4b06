/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * struct fs: its life, its index generations (one per index served since
 * the mount, kept while the kernel holds lookups on its nodes) and the set
 * of open handles.  The contract is fs.h and fs_internal.h.  The bottom
 * of the FUSE layer: it calls nothing of fs/ but stats.h and overlay.h.
 */
#include <linux/capability.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fs_internal.h"
#include "log.h"
#include "stats.h"

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
struct index *resolve(struct fs *fs, fuse_ino_t ino, index_id *id)
{
	guint64 number = ino >> GEN_SHIFT;
	struct index *idx = NULL, *cur = NULL;
	g_autofree char *key = NULL;
	struct gen *g;

	if (is_empty_dir(ino)) {
		const char *k = empty_dir_key(fs, ino);

		cur = k ? fs_current_index(fs) : NULL;
		if (cur && find_key(cur, k, id) && index_is_dir(cur, *id))
			return cur;
		index_unref(cur);
		return NULL;
	}
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
gboolean is_current(struct fs *fs, fuse_ino_t ino)
{
	gboolean cur;

	if (ino == FUSE_ROOT_ID)
		return TRUE;
	g_mutex_lock(&fs->lock);
	cur = (ino >> GEN_SHIFT) == fs->current->number;
	g_mutex_unlock(&fs->lock);
	return cur;
}

guint empty_dir_node(struct fs *fs, fuse_ino_t ino)
{
	guint64 n = ino & ID_MASK;

	if (!is_empty_dir(ino) || n < 1 || n > emptydirs_count(fs->ed))
		return 0;
	return (guint)n;
}

const char *empty_dir_key(struct fs *fs, fuse_ino_t ino)
{
	guint node = empty_dir_node(fs, ino);

	return node ? emptydirs_key(fs->ed, node) : NULL;
}

/* The node id of entry @id of @idx, counting one kernel lookup. */
fuse_ino_t node_for(struct fs *fs, struct index *idx, index_id id)
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

void forget_one(struct fs *fs, fuse_ino_t ino, guint64 n)
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

/* -- open files --------------------------------------------------------- */

/* A new open file, counted so that fs_stop() can close what the kernel
 * never released. */
struct handle *handle_new(struct fs *fs, char *key)
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

void handle_free(struct fs *fs, struct handle *h)
{
	pt_release(fs->pt, h->ino, h->pt_mode);
	g_mutex_lock(&fs->lock);
	g_hash_table_remove(fs->handles, h);
	g_mutex_unlock(&fs->lock);
	handle_destroy(h);
}

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
	fs->lookups = lookups_new(NULL);
	fs->gens = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL,
					 gen_free);
	fs->handles = g_hash_table_new(NULL, NULL);
	fs->pt = pt_new();
	return fs;
}

void fs_set_s3(struct fs *fs, struct s3 *s3)
{
	fs->s3 = s3;
	fs->ra = readahead_new(s3, &fs->opts.readahead);
	fs->ov = overlay_new(s3, fs->opts.write_max, fs->opts.part_size,
			     fs->opts.write_parts, fs->opts.negative_timeout);
}

void fs_set_empty_dirs(struct fs *fs, struct emptydirs *d)
{
	emptydirs_free(fs->ed);
	fs->ed = d;
}

void fs_set_session(struct fs *fs, struct fuse_session *se)
{
	fs->se = se;
}

/* Whether this process has CAP_SYS_ADMIN (effective), which
 * FUSE_DEV_IOC_BACKING_OPEN needs. */
static gboolean has_sys_admin(void)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = { 0 };

	if (syscall(SYS_capget, &hdr, data) != 0)
		return FALSE;
	return (data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective &
		CAP_TO_MASK(CAP_SYS_ADMIN)) != 0;
}

/* Why files fetched whole must not pass through, or NULL. */
static const char *passthrough_off(const struct fs *fs)
{
	if (!fs->opts.passthrough_on)
		return "-o passthrough=off";
	if (fs->opts.direct_io == FS_DIRECT_IO_SMALL ||
	    fs->opts.direct_io == FS_DIRECT_IO_ALL)
		return "-o direct_io= is small or all";
	if (fs->opts.direct_io == FS_DIRECT_IO_NONE &&
	    !fs->opts.passthrough_asked)
		return "-o direct_io=none keeps files in the page cache "
		       "(add -o passthrough=auto to pass them through)";
	if (!has_sys_admin())
		return "no CAP_SYS_ADMIN, which backing files need";
	return NULL;
}

void fs_session_mounted(struct fs *fs)
{
	g_autoptr(GError) error = NULL;

	fs->init.pt_off = passthrough_off(fs);
	if (!fuse_init_hook(fs->se, &error))
		log_error(LOG_LEVEL_INFO, error,
			  "FUSE INIT is libfuse's own: no "
			  "FUSE_DIRECT_IO_ALLOW_MMAP and no passthrough, every "
			  "file goes through the page cache unless direct_io= "
			  "says otherwise");
}

void fs_stop(struct fs *fs)
{
	struct stats_sources src;
	GList *open, *l;

	if (!fs->s3 || fs->stopped)
		return;
	fs->stopped = TRUE;
	g_mutex_lock(&fs->lock);
	open = g_hash_table_get_keys(fs->handles);
	g_mutex_unlock(&fs->lock);
	/* Files still open for writing are half written: not uploaded
	 * (their uploads aborted), logged as lost. */
	for (l = open; l; l = l->next) {
		struct handle *h = l->data;

		if (h->of) {
			overlay_stop(h->of);
			h->of = NULL;
		}
	}
	g_list_free(open);
	overlay_quiesce(fs->ov);
	fs_get_stats_sources(fs, &src);
	stats_log_summary(&src);
	stats_sources_clear(&src);
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
	emptydirs_free(fs->ed);
	s3_free(fs->s3);
	readahead_free(fs->ra);
	streams_free(fs->streams);
	lookups_free(fs->lookups);
	pt_free(fs->pt);
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
	emptydirs_report(fs->ed, idx);
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

void fs_get_stats_sources(struct fs *fs, struct stats_sources *out)
{
	guint i;

	memset(out, 0, sizeof(*out));
	out->http = s3_get_http(fs->s3);
	out->ra = fs->ra;
	g_mutex_lock(&fs->lock);
	out->idx = index_ref(fs->current->idx);
	out->generation = fs->current->number;
	out->open = g_hash_table_size(fs->handles);
	if (fs->streams)
		streams_get_stats(fs->streams, &out->streams);
	g_mutex_unlock(&fs->lock);
	lookups_get_stats(fs->lookups, &out->lookups);
	out->reads = __atomic_load_n(&fs->reads, __ATOMIC_RELAXED);
	out->handed_over = __atomic_load_n(&fs->handed_over, __ATOMIC_RELAXED);
	pt_get_stats(fs->pt, &out->pt);
	for (i = 0; i < STATS_OPS; i++)
		out->ops[i] = __atomic_load_n(&fs->ops[i], __ATOMIC_RELAXED);
	out->parallel_dirops = g_atomic_int_get(&fs->init.parallel_dirops);
	out->direct_io_allow_mmap = g_atomic_int_get(&fs->init.allow_mmap);
}
