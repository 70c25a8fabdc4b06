/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "index_life.h"
#include "lister.h"
#include "log.h"

/* -- the index ---------------------------------------------------------- */

/* Lists the bucket into a new index at m->index_path. */
static gboolean build_index(struct mount *m, struct s3 *s3,
			    gboolean interactive, GError **error)
{
	g_autofree char *p = log_escape(m->cfg.prefix, -1);
	g_autofree char *what =
		g_strdup_printf("listing s3://%s/%s", m->cfg.bucket, p);
	struct lister_options o = { .workers = m->list_workers };
	struct index_stats st;
	gint64 t0 = g_get_monotonic_time();
	double secs;

	if (interactive && isatty(STDERR_FILENO)) {
		o.progress = lister_progress_print;
		o.user = what;
	}
	if (!lister_build(s3, m->cfg.prefix, m->index_path, &o, &st, error))
		return FALSE;
	secs = (g_get_monotonic_time() - t0) / 1e6;
	log_msg(LOG_LEVEL_NOTICE,
		"indexed s3://%s/%s: %" G_GUINT64_FORMAT " keys in %.1f s "
		"(%.0f/s) into %s",
		m->cfg.bucket, p, st.keys, secs, secs > 0 ? st.keys / secs : 0,
		m->index_path);
	return TRUE;
}

/* Logs, once, the keys the tree cannot show. */
void index_life_report_hidden(struct index *idx)
{
	struct index_stats s;
	guint64 hidden;

	index_get_stats(idx, &s);
	hidden = s.skipped_empty + s.skipped_dot + s.skipped_long +
		 s.skipped_deep + s.shadowed;
	if (!hidden)
		return;
	log_msg(LOG_LEVEL_WARNING,
		"%" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " keys cannot be "
		"shown as paths: %" G_GUINT64_FORMAT " with an empty component "
		"('a//b'), %" G_GUINT64_FORMAT
		" with '.' or '..', %" G_GUINT64_FORMAT
		" with a name over 255 bytes, %" G_GUINT64_FORMAT
		" too deep, %" G_GUINT64_FORMAT " hidden by a "
		"directory of the same name (see bucketfs(1), KEYS AND PATHS)",
		hidden, s.keys, s.skipped_empty, s.skipped_dot, s.skipped_long,
		s.skipped_deep, s.shadowed);
}

/* -- the published index (index_url) ----------------------------------- */

/*
 * "<index>.source" says which published object the local index is:
 * "URL\tETAG\tCREATED\tFILE_SIZE\n".  The header's creation time and size
 * tie it to the file, so an index rebuilt locally at the same path since
 * does not pass for the published one.
 */
static char *source_path(const struct mount *m)
{
	return g_strconcat(m->index_path, ".source", NULL);
}

static char *source_line(const struct mount *m, const char *etag,
			 const struct index_stats *s)
{
	return g_strdup_printf("%s\t%s\t%" G_GINT64_FORMAT
			       "\t%" G_GUINT64_FORMAT "\n",
			       m->index_url, etag, s->created, s->file_size);
}

/* Whether the local index is the published object with ETag @etag. */
static struct index *local_copy_of(struct mount *m, const char *etag)
{
	g_autofree char *path = source_path(m);
	g_autofree char *want = NULL;
	char buf[4096];
	struct index_stats s;
	struct index *idx;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return NULL;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	idx = index_open(m->index_path, m->cfg.bucket, m->cfg.prefix, NULL);
	if (!idx)
		return NULL;
	index_get_stats(idx, &s);
	want = source_line(m, etag, &s);
	if (strcmp(buf, want) != 0)
		g_clear_pointer(&idx, index_unref);
	return idx;
}

/* Writes @data to a new 0600 file beside @path and renames it there. */
static gboolean write_atomically(const char *path, const char *data,
				 GError **error)
{
	g_autofree char *tmp = g_strconcat(path, ".XXXXXX", NULL);
	gsize len = strlen(data);
	int fd = g_mkstemp_full(tmp, O_RDWR | O_CLOEXEC, 0600);
	int e;

	if (fd < 0)
		goto fail;
	errno = EIO; /* a short write sets none */
	if (write(fd, data, len) != (ssize_t)len || fsync(fd) != 0) {
		e = errno;
		close(fd);
		unlink(tmp);
		errno = e;
		goto fail;
	}
	close(fd);
	if (rename(tmp, path) == 0)
		return TRUE;
	e = errno;
	unlink(tmp);
	errno = e;
fail:
	e = errno;
	g_set_error(error, BFS_ERROR, e, "writing %s: %s", path, g_strerror(e));
	return FALSE;
}

static void fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

static void fetch_progress(guint64 done, guint64 total, void *user)
{
	fprintf(stderr, "\r%s: %.1f of %.1f MiB", (const char *)user,
		done / 1048576.0, total / 1048576.0);
	if (done == total)
		fputc('\n', stderr);
}

/*
 * Downloads the published index (HEAD gave @meta) to a new 0600 file in
 * the index's 0700 directory, checks all of it, and renames it into place.
 * Nothing unchecked is ever at m->index_path.
 */
static gboolean download_published(struct mount *m, struct s3 *pub,
				   const struct s3_object_meta *meta,
				   gboolean interactive, GError **error)
{
	g_autofree char *dir = g_path_get_dirname(m->index_path);
	g_autofree char *tmp =
		g_strconcat(m->index_path, ".fetch-XXXXXX", NULL);
	g_autofree char *src = source_path(m);
	g_autofree char *line = NULL;
	struct index *idx = NULL;
	struct index_stats s;
	struct stat st;
	int fd, e;

	/* As for a listing (index_life_load()): a symlink or a directory at the
	 * index path is the user's, never replaced. */
	if (lstat(m->index_path, &st) == 0 && !S_ISREG(st.st_mode)) {
		g_set_error(
			error, BFS_ERROR, S_ISLNK(st.st_mode) ? ELOOP : EINVAL,
			"index %s: %s (refused, not replaced)", m->index_path,
			S_ISLNK(st.st_mode) ? "is a symbolic link"
					    : "not a regular file");
		return FALSE;
	}
	if (g_mkdir_with_parents(dir, 0700) < 0) {
		e = errno;
		g_set_error(error, BFS_ERROR, e, "creating %s: %s", dir,
			    g_strerror(e));
		return FALSE;
	}
	fd = g_mkstemp_full(tmp, O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		e = errno;
		g_set_error(error, BFS_ERROR, e, "creating %s: %s", tmp,
			    g_strerror(e));
		return FALSE;
	}
	if (!s3_get_to_fd(pub, m->pub_key, meta->size, meta->etag, 0, fd,
			  interactive && isatty(STDERR_FILENO) ? fetch_progress
							       : NULL,
			  m->index_url, error))
		goto fail;
	if (fsync(fd) != 0) {
		e = errno;
		g_set_error(error, BFS_ERROR, e, "fsync %s: %s", tmp,
			    g_strerror(e));
		goto fail;
	}
	close(fd);
	fd = -1;
	idx = index_open(tmp, m->cfg.bucket, m->cfg.prefix, error);
	if (!idx || !index_verify(idx, error)) {
		g_prefix_error(error, "refusing it: ");
		goto fail;
	}
	index_get_stats(idx, &s);
	g_clear_pointer(&idx, index_unref);
	/* The old .source must not vouch for the new file, even briefly. */
	unlink(src);
	if (rename(tmp, m->index_path) != 0) {
		e = errno;
		g_set_error(error, BFS_ERROR, e, "renaming %s to %s: %s", tmp,
			    m->index_path, g_strerror(e));
		goto fail;
	}
	fsync_dir(dir);
	line = source_line(m, meta->etag, &s);
	if (!write_atomically(src, line, error)) {
		g_prefix_error(error, "fetched, but ");
		return FALSE;
	}
	return TRUE;
fail:
	index_unref(idx);
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return FALSE;
}

/*
 * The published index, checked, at m->index_path: the local copy when it
 * is the current object, else downloaded.  *@fresh tells which.
 */
static struct index *fetch_published(struct mount *m, gboolean interactive,
				     gboolean *fresh, GError **error)
{
	struct s3_object_meta meta = { 0 };
	struct s3 *pub = NULL;
	struct index *idx = NULL;
	gint64 t0 = g_get_monotonic_time();

	*fresh = FALSE;
	g_mutex_lock(&m->fetch_lock);
	pub = s3_new_for_bucket(&m->cfg, m->pub_bucket, error);
	if (!pub || !s3_head(pub, m->pub_key, -1, &meta, error))
		goto out;
	if (!meta.etag || !meta.size) {
		g_set_error(error, BFS_ERROR, EBADMSG, "HEAD s3://%s/%s: %s",
			    m->pub_bucket, m->pub_key,
			    meta.size ? "no ETag" : "an empty object");
		goto out;
	}
	idx = local_copy_of(m, meta.etag);
	if (idx) {
		log_msg(LOG_LEVEL_INFO,
			"published index %s unchanged (ETag %s): using %s",
			m->index_url, meta.etag, m->index_path);
		goto out;
	}
	if (!download_published(m, pub, &meta, interactive, error))
		goto out;
	idx = index_open(m->index_path, m->cfg.bucket, m->cfg.prefix, error);
	if (idx) {
		*fresh = TRUE;
		log_msg(LOG_LEVEL_NOTICE,
			"fetched and verified the published index %s (ETag "
			"%s, %" G_GUINT64_FORMAT " bytes) in %.1f s into %s",
			m->index_url, meta.etag, meta.size,
			(g_get_monotonic_time() - t0) / 1e6, m->index_path);
	}
out:
	if (!idx)
		g_prefix_error(error, "published index %s: ", m->index_url);
	s3_free(pub);
	s3_object_meta_clear(&meta);
	g_mutex_unlock(&m->fetch_lock);
	return idx;
}

/*
 * The index to serve: the file at m->index_path if it is valid for this
 * bucket and prefix; otherwise (missing, corrupt, truncated, another
 * version or bucket) the reason is logged and the index rebuilt.
 */
struct index *index_life_load(struct mount *m, struct s3 *s3, GError **error)
{
	g_autoptr(GError) why = NULL;
	struct index *idx;
	gboolean fresh;

	if (m->index_url) {
		idx = fetch_published(m, TRUE, &fresh, &why);
		if (idx)
			return idx;
		if (m->fallback_fail) {
			g_propagate_error(error, g_steal_pointer(&why));
			g_prefix_error(error, "index_url_fallback=fail: ");
			return NULL;
		}
		log_error(LOG_LEVEL_WARNING, why,
			  "not using the published index; falling back to "
			  "the local index or a listing");
		g_clear_error(&why);
	}
	idx = index_open(m->index_path, m->cfg.bucket, m->cfg.prefix, &why);
	if (idx)
		return idx;
	if (why->code == ENOENT)
		log_msg(LOG_LEVEL_NOTICE,
			"no index at %s yet: listing the "
			"bucket once",
			m->index_path);
	else if (why->code == ELOOP || why->code == EACCES ||
		 why->code == EINVAL) {
		/* Not ours to replace: a symlink, a directory, no access. */
		g_propagate_error(error, g_steal_pointer(&why));
		return NULL;
	} else
		log_error(LOG_LEVEL_WARNING, why,
			  "not serving the index; "
			  "rebuilding it");
	if (!build_index(m, s3, TRUE, error))
		return NULL;
	return index_open(m->index_path, m->cfg.bucket, m->cfg.prefix, error);
}

/* -- the reloader ------------------------------------------------------- */

void index_life_block_signals(void)
{
	sigset_t hup;

	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &hup, NULL);
}

/* Sleeps @seconds unless told to stop; TRUE when stopping. */
static gboolean sleep_or_stop(struct reloader *r, gint64 seconds)
{
	gint64 until = g_get_monotonic_time() + seconds * G_USEC_PER_SEC;
	gboolean stop;

	g_mutex_lock(&r->lock);
	while (!r->stopping && g_cond_wait_until(&r->cond, &r->lock, until))
		;
	stop = r->stopping;
	g_mutex_unlock(&r->lock);
	return stop;
}

static gboolean stopping(struct reloader *r)
{
	return sleep_or_stop(r, 0);
}

static void serve_index(struct reloader *r, struct index *idx, const char *why)
{
	fs_switch_index(r->fs, idx);
	log_msg(LOG_LEVEL_NOTICE, "%s: now serving %s", why, index_path(idx));
	index_life_report_hidden(idx);
}

/*
 * With index_url: fetch it again and switch to it if it changed (or
 * always, with @force).  On failure the current index stays.
 */
static void refetch(struct reloader *r, const char *why, gboolean force)
{
	g_autoptr(GError) error = NULL;
	gboolean fresh;
	struct index *idx = fetch_published(r->m, FALSE, &fresh, &error);

	if (!idx) {
		log_error(LOG_LEVEL_ERR, error, "%s: keeping the current index",
			  why);
		return;
	}
	if (fresh || force)
		serve_index(r, idx, why);
	index_unref(idx);
}

static void switch_to(struct reloader *r, const char *why)
{
	g_autoptr(GError) error = NULL;
	struct index *idx;

	idx = index_open(r->m->index_path, r->m->cfg.bucket, r->m->cfg.prefix,
			 &error);
	if (!idx) {
		log_error(LOG_LEVEL_ERR, error, "%s: keeping the current index",
			  why);
		return;
	}
	serve_index(r, idx, why);
	index_unref(idx);
}

/* With index_max_age: rebuild the index when it gets that old. */
static gpointer refresh_thread(gpointer data)
{
	struct reloader *r = data;
	gint64 max_age = (gint64)r->m->index_max_age;

	for (;;) {
		g_autoptr(GError) error = NULL;
		struct index *idx = fs_current_index(r->fs);
		struct index_stats s;
		gint64 age, wait;

		index_get_stats(idx, &s);
		index_unref(idx);
		age = g_get_real_time() / G_USEC_PER_SEC - s.created;
		wait = MAX(1, max_age - age);
		if (r->m->index_url) {
			/* A published index is as old as its publisher made
			 * it: look for a new one every max_age instead. */
			if (sleep_or_stop(r, MAX(1, max_age)))
				break;
			refetch(r, "index_max_age", FALSE);
			continue;
		}
		if (sleep_or_stop(r, MIN(wait, 3600)))
			break;
		if (wait > 3600)
			continue;
		if (!build_index(r->m, r->s3, FALSE, &error)) {
			log_error(LOG_LEVEL_ERR, error,
				  "index_max_age: "
				  "background rebuild failed, still serving "
				  "the old index");
			if (sleep_or_stop(r, MIN(max_age, 300)))
				break;
			continue;
		}
		switch_to(r, "index_max_age");
	}
	return NULL;
}

/* SIGHUP is blocked in every thread; this one takes it synchronously. */
static void *reload_thread(void *data)
{
	struct reloader *r = data;
	sigset_t set;
	int sig;

	pthread_setname_np(pthread_self(), "bfs-sighup");
	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (stopping(r))
			break;
		if (r->m->index_url)
			refetch(r, "SIGHUP", TRUE);
		else
			switch_to(r, "SIGHUP");
	}
	return NULL;
}

/*
 * A full check of the index being served, after the mount is up (it reads
 * the whole file).  A corrupt one is rebuilt and replaced.
 */
static gpointer verify_thread(gpointer data)
{
	struct reloader *r = data;
	struct index *idx = fs_current_index(r->fs);
	g_autoptr(GError) error = NULL;

	if (!index_verify(idx, &error) && !stopping(r)) {
		g_autofree char *src = source_path(r->m);

		log_error(LOG_LEVEL_ERR, error,
			  "the index being served is "
			  "corrupt; %s it",
			  r->m->index_url ? "fetching" : "rebuilding");
		g_clear_error(&error);
		if (r->m->index_url) {
			/* Whatever the .source says, this copy is bad. */
			unlink(src);
			refetch(r, "fetched after a failed check", TRUE);
		} else if (build_index(r->m, r->s3, FALSE, &error))
			switch_to(r, "rebuilt after a failed check");
		else
			log_error(LOG_LEVEL_ERR, error, "rebuild failed");
	}
	index_unref(idx);
	return NULL;
}

void reloader_start(struct reloader *r)
{
	r->hup_started = pthread_create(&r->hup, NULL, reload_thread, r) == 0;
	if (!r->hup_started)
		log_msg(LOG_LEVEL_WARNING, "cannot start the SIGHUP thread: "
					   "SIGHUP will not reload the index");
	r->verify = g_thread_new("bfs-verify", verify_thread, r);
	if (r->m->index_max_age > 0)
		r->refresh = g_thread_new("bfs-refresh", refresh_thread, r);
}

/* Ends the reloader's threads (after s3_shutdown(): their requests fail at
 * once; a running index check ends first). */
void reloader_stop(struct reloader *r)
{
	g_mutex_lock(&r->lock);
	r->stopping = TRUE;
	g_cond_broadcast(&r->cond);
	g_mutex_unlock(&r->lock);
	if (r->hup_started) {
		pthread_kill(r->hup, SIGHUP);
		pthread_join(r->hup, NULL);
	}
	if (r->verify)
		g_thread_join(r->verify);
	if (r->refresh)
		g_thread_join(r->refresh);
}
