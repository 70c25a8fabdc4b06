/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bucketfs - mount an S3 bucket (or a prefix) as a read-only POSIX tree.
 *
 *   bucketfs [-f] [-d] [-o OPT[,OPT...]]... s3://BUCKET[/PREFIX] MOUNTPOINT
 *
 * Start-up: options, then the persisted index (opened if valid, else
 * listed and built, with progress on a terminal), then the kernel mount,
 * then (in the background unless -f) the S3 client and the FUSE loop.  The
 * parent returns once the mount exists.  SIGHUP reopens the index file and
 * switches the live mount onto it; SIGTERM, SIGINT and fusermount3 -u
 * unmount cleanly.
 *
 * With -o index_url=s3://B/KEY the index comes from an index another host
 * published (bucketfs-index publish) instead of a listing: a HEAD tells
 * whether the local copy is that object (its ETag is remembered in
 * "<index>.source"); if not, it is downloaded beside the index path, fully
 * verified (every checksum; built for this bucket and prefix) and only then
 * renamed into place.  When it cannot be had (missing, unreachable,
 * corrupt, another bucket's), the cause is logged and the mount falls
 * back to a valid local index, else to listing, unless
 * index_url_fallback=fail.  SIGHUP and index_max_age fetch again.
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "config.h"
#include "emptydirs.h"
#include "error.h"
#include "index.h"
#include "lister.h"
#include "log.h"
#include "ops.h"
#include "s3.h"
#include "version.h"

#define DEFAULT_ENTRY_TIMEOUT	3600.0
#define MAX_CONNECTIONS_DEFAULT 1024

struct mount {
	struct config cfg;
	struct fs_options fs;
	char *mountpoint;
	char *index_path;
	gboolean foreground;
	gboolean debug;
	guint list_workers;
	double index_max_age; /* seconds, 0 = never rebuild in the background */
	GPtrArray *fuse_opts; /* of char *: options FUSE itself takes */
	char *index_url;      /* -o index_url=, or NULL */
	char *pub_bucket;     /* index_url split */
	char *pub_key;
	gboolean fallback_fail; /* index_url_fallback=fail */
	GMutex fetch_lock;	/* one fetch of index_url at a time */
};

/* clang-format off */
static const char usage[] =
"usage: bucketfs [-f] [-d] [-o OPT[,OPT...]]... s3://BUCKET[/PREFIX] MOUNTPOINT\n"
"\n"
"Mounts an S3 bucket, or a prefix of one, as a read-only POSIX tree.  The\n"
"bucket is listed once into a persisted index (see bucketfs-index(1));\n"
"later mounts open it in well under a second and answer every metadata\n"
"operation from it without a request.  Reads are GETs with If-Match set\n"
"to the indexed ETag.  Returns once the mount is ready (see -f).\n"
"\n"
"    -f                    stay in the foreground, log to stderr too\n"
"    -d                    debug: -f, and log every request and retry\n"
"    -h, --help            this help\n"
"    -V, --version         the version\n"
"\n";

static const char mount_help[] =
"Mount options:\n"
"    entry_timeout=SECS    how long the kernel caches names and\n"
"                          attributes (default 3600)\n"
"    free_space=BYTES      free space statfs reports (default: the\n"
"                          dataset's size, at least 1 PiB)\n"
"    list_workers=N        parallel listings when building the index\n"
"                          (default 4 per endpoint)\n"
"    index_max_age=SECS    rebuild an index older than SECS in the\n"
"                          background and switch to it (default: never);\n"
"                          with index_url, fetch it again every SECS\n"
"    index_url=s3://B/KEY  use the index published there (bucketfs-index\n"
"                          publish) instead of listing the bucket; it is\n"
"                          verified before use, and downloaded only when\n"
"                          its ETag changed\n"
"    index_url_fallback=list|fail  when the published index is missing,\n"
"                          unreachable, corrupt or another bucket's: use\n"
"                          a valid local index or list the bucket (list,\n"
"                          the default), or refuse to mount (fail)\n"
"    whole_max=BYTES       objects up to this size are fetched whole at\n"
"                          open (default 8 MiB)\n"
"    window_max=BYTES      largest sequential readahead window of a\n"
"                          larger object (default 64 MiB)\n"
"    memory_max=BYTES      all prefetch buffers together (default 1 GiB)\n"
"    prefetch_depth=N      announced files fetched ahead (default 64)\n"
"    direct_io=small|all|none  which files bypass the kernel's page\n"
"                          cache: those fetched whole (small, the\n"
"                          default: one copy less, but mmap(MAP_SHARED)\n"
"                          of them fails with ENODEV), every file, or\n"
"                          none\n"
"    writable              let names the index doesn't have be created,\n"
"                          written (uploaded whole with one PUT at\n"
"                          close), removed, and looked up on S3; mkdir\n"
"                          makes a \"DIR/\" marker; indexed objects stay\n"
"                          read-only; rename and link give EXDEV\n"
"    write_max=BYTES       largest file in writable mode (64 MiB)\n"
"    uid=USER              owner of every file and directory, a number\n"
"                          or a name (default: the user who mounted)\n"
"    gid=GROUP             their group (default: the mounting user's)\n"
"    file_mode=OCTAL       permissions of files (default 0644)\n"
"    dir_mode=OCTAL        permissions of directories (default 0755);\n"
"                          write bits show only where writes can work:\n"
"                          none on a read-only mount, none on indexed\n"
"                          objects; the kernel enforces them\n"
"                          (default_permissions)\n"
"    allow_other           let other users see the mount (FUSE)\n"
"    and FUSE's generic options (fsname=, auto_unmount, ...)\n"
"\n"
"SIGHUP makes a mounted bucketfs reopen its index file and switch to it\n"
"(after bucketfs-index build), or fetch index_url again; open files keep\n"
"working.\n";
/* clang-format on */

static void print_help(void)
{
	printf("%s%s\n%s", usage, config_options_help(), mount_help);
}

/* -- options ------------------------------------------------------------ */

static gboolean parse_number(const char *name, const char *v, double max,
			     double *out, GError **error)
{
	char *end;
	double d = g_ascii_strtod(v, &end);

	if (!*v || *end || d < 0 || d > max) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option '%s': '%s' is not a number between 0 and "
			    "%.0f",
			    name, v, max);
		return FALSE;
	}
	*out = d;
	return TRUE;
}

/* uid= and gid=: a number, or a name this host knows. */
static gboolean parse_owner(const char *name, const char *v, guint32 *out,
			    GError **error)
{
	guint64 n;
	char buf[4096];
	struct passwd pw, *pwp = NULL;
	struct group gr, *grp = NULL;
	gboolean is_uid = !strcmp(name, "uid");
	g_autofree char *e = NULL;

	if (*v && strspn(v, "0123456789") == strlen(v)) {
		if (g_ascii_string_to_unsigned(v, 10, 0, G_MAXUINT32 - 1, &n,
					       NULL)) {
			*out = (guint32)n;
			return TRUE;
		}
	} else if (*v && is_uid) {
		if (getpwnam_r(v, &pw, buf, sizeof(buf), &pwp) == 0 && pwp) {
			*out = pwp->pw_uid;
			return TRUE;
		}
	} else if (*v) {
		if (getgrnam_r(v, &gr, buf, sizeof(buf), &grp) == 0 && grp) {
			*out = grp->gr_gid;
			return TRUE;
		}
	}
	e = log_escape(v, -1);
	g_set_error(error, BFS_ERROR, EINVAL,
		    "option '%s': '%s' is not a %s id (0 to 4294967294) nor "
		    "the name of a %s on this host",
		    name, e, is_uid ? "user" : "group",
		    is_uid ? "user" : "group");
	return FALSE;
}

/* file_mode= and dir_mode=: permission bits, in octal. */
static gboolean parse_mode(const char *name, const char *v, guint32 *out,
			   GError **error)
{
	guint64 n;
	g_autofree char *e = NULL;

	if (*v && strlen(v) <= 6 && strspn(v, "01234567") == strlen(v) &&
	    g_ascii_string_to_unsigned(v, 8, 0, 0777, &n, NULL)) {
		*out = (guint32)n;
		return TRUE;
	}
	e = log_escape(v, -1);
	g_set_error(error, BFS_ERROR, EINVAL,
		    "option '%s': '%s' is not an octal mode from 0 to 0777",
		    name, e);
	return FALSE;
}

/* Our own mount options out of what config passed through; the rest is
 * FUSE's to judge. */
static gboolean take_mount_option(struct mount *m, const char *opt,
				  GError **error)
{
	const char *eq = strchr(opt, '=');
	g_autofree char *name = eq ? g_strndup(opt, eq - opt) : g_strdup(opt);
	const char *v = eq ? eq + 1 : "";
	double d;

	if (!strcmp(name, "entry_timeout"))
		return parse_number(name, v, 1e9, &m->fs.entry_timeout, error);
	if (!strcmp(name, "free_space")) {
		if (!parse_number(name, v, 1e19, &d, error))
			return FALSE;
		m->fs.free_space = (guint64)d;
		return TRUE;
	}
	if (!strcmp(name, "whole_max") || !strcmp(name, "window_max") ||
	    !strcmp(name, "memory_max")) {
		if (!parse_number(name, v, 1e15, &d, error))
			return FALSE;
		if (!strcmp(name, "whole_max"))
			m->fs.readahead.whole_max = (guint64)d;
		else if (!strcmp(name, "window_max"))
			m->fs.readahead.window_max = (guint64)d;
		else
			m->fs.readahead.memory_max = (guint64)d;
		return TRUE;
	}
	if (!strcmp(name, "prefetch_depth")) {
		if (!parse_number(name, v, 65536, &d, error))
			return FALSE;
		m->fs.readahead.prefetch_depth = (guint)d;
		return TRUE;
	}
	if (!strcmp(name, "index_max_age"))
		return parse_number(name, v, 1e9, &m->index_max_age, error);
	if (!strcmp(name, "uid"))
		return parse_owner(name, v, &m->fs.uid, error);
	if (!strcmp(name, "gid"))
		return parse_owner(name, v, &m->fs.gid, error);
	if (!strcmp(name, "file_mode"))
		return parse_mode(name, v, &m->fs.file_mode, error);
	if (!strcmp(name, "dir_mode"))
		return parse_mode(name, v, &m->fs.dir_mode, error);
	if (!strcmp(name, "writable") && !eq) {
		m->fs.writable = TRUE;
		return TRUE;
	}
	if (!strcmp(name, "write_max")) {
		if (!parse_number(name, v, 5e9, &d, error) || d < 1) {
			g_clear_error(error);
			g_set_error(error, BFS_ERROR, EINVAL,
				    "option 'write_max': '%s' is not a size "
				    "between 1 byte and 5 GB",
				    v);
			return FALSE;
		}
		m->fs.write_max = (guint64)d;
		return TRUE;
	}
	if (!strcmp(name, "direct_io")) {
		static const char *const modes[] = { "small", "all", "none" };
		guint i;

		for (i = 0; i < G_N_ELEMENTS(modes); i++)
			if (!strcmp(v, modes[i])) {
				m->fs.direct_io = (enum fs_direct_io)i;
				return TRUE;
			}
		{
			g_autofree char *e = log_escape(v, -1);

			g_set_error(error, BFS_ERROR, EINVAL,
				    "option 'direct_io': '%s' is not 'small', "
				    "'all' or 'none'",
				    e);
		}
		return FALSE;
	}
	if (!strcmp(name, "index_url")) {
		g_clear_pointer(&m->pub_bucket, g_free);
		g_clear_pointer(&m->pub_key, g_free);
		g_free(m->index_url);
		m->index_url = g_strdup(v);
		if (s3_parse_object_url(v, &m->pub_bucket, &m->pub_key, error))
			return TRUE;
		g_prefix_error(error, "option 'index_url': ");
		return FALSE;
	}
	if (!strcmp(name, "index_url_fallback")) {
		if (strcmp(v, "list") != 0 && strcmp(v, "fail") != 0) {
			g_autofree char *e = log_escape(v, -1);

			g_set_error(error, BFS_ERROR, EINVAL,
				    "option 'index_url_fallback': '%s' is "
				    "not 'list' or 'fail'",
				    e);
			return FALSE;
		}
		m->fallback_fail = !strcmp(v, "fail");
		return TRUE;
	}
	if (!strcmp(name, "list_workers")) {
		if (!parse_number(name, v, 32, &d, error) || d < 1) {
			g_clear_error(error);
			g_set_error(error, BFS_ERROR, EINVAL,
				    "option 'list_workers': '%s' is not an "
				    "integer between 1 and 32",
				    v);
			return FALSE;
		}
		m->list_workers = (guint)d;
		return TRUE;
	}
	/* mount(8) and fstab bookkeeping that means nothing to us. */
	if (!strcmp(name, "defaults") || !strcmp(name, "nofail") ||
	    !strcmp(name, "_netdev") || g_str_has_prefix(name, "x-") ||
	    !strcmp(name, "auto") || !strcmp(name, "noauto") ||
	    !strcmp(name, "user") || !strcmp(name, "users") ||
	    !strcmp(name, "nouser"))
		return TRUE;
	if (!strcmp(name, "default_permissions") || !strcmp(name, "ro"))
		return TRUE; /* always set */
	g_ptr_array_add(m->fuse_opts, g_strdup(opt));
	return TRUE;
}

/* The config file's mount options, through the same parser as -o. */
static gboolean file_mount_option(void *user, const char *opt, GError **error)
{
	return take_mount_option(user, opt, error);
}

static gboolean parse_args(struct mount *m, int argc, char **argv,
			   GError **error)
{
	g_autoptr(GPtrArray) pass = g_ptr_array_new_with_free_func(g_free);
	const char *url = NULL;
	int i;
	guint j;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			print_help();
			exit(0);
		} else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			printf("bucketfs %s (libfuse %s)\n", BUCKETFS_VERSION,
			       fuse_pkgversion());
			exit(0);
		} else if (!strcmp(a, "-f")) {
			m->foreground = TRUE;
		} else if (!strcmp(a, "-d")) {
			m->foreground = m->debug = TRUE;
		} else if (!strcmp(a, "-o") || g_str_has_prefix(a, "-o")) {
			const char *o = a[2] ? a + 2 : argv[++i];

			if (!o) {
				g_set_error(error, BFS_ERROR, EINVAL,
					    "option '-o' needs a value");
				return FALSE;
			}
			if (!config_parse_options(&m->cfg, o, pass, error))
				return FALSE;
		} else if (a[0] == '-') {
			g_set_error(error, BFS_ERROR, EINVAL,
				    "unknown argument '%s' (see --help)", a);
			return FALSE;
		} else if (!url) {
			url = a;
		} else if (!m->mountpoint) {
			m->mountpoint = g_strdup(a);
		} else {
			g_set_error(error, BFS_ERROR, EINVAL,
				    "unexpected argument '%s' (see --help)", a);
			return FALSE;
		}
	}
	if (!url || !m->mountpoint) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "expected s3://BUCKET[/PREFIX] and MOUNTPOINT "
			    "(see --help)");
		return FALSE;
	}
	for (j = 0; j < pass->len; j++)
		if (!take_mount_option(m, g_ptr_array_index(pass, j), error))
			return FALSE;
	return config_parse_url(&m->cfg, url, error) &&
	       config_finish(&m->cfg, error);
}

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
static void report_hidden(struct index *idx)
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

	/* As for a listing (load_index()): a symlink or a directory at the
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
static struct index *load_index(struct mount *m, struct s3 *s3, GError **error)
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

/* -- signals ------------------------------------------------------------ */

/*
 * The threads that change the served index: SIGHUP, the check after
 * mounting, index_max_age.  They use the mount, the fs and the S3 client,
 * so reloader_stop() ends and joins them before those go.
 */
struct reloader {
	struct mount *m;
	struct fs *fs;
	struct s3 *s3; /* borrowed from fs */
	GMutex lock;
	GCond cond;
	gboolean stopping; /* protected by lock */
	pthread_t hup;	   /* sigwait()s for SIGHUP */
	gboolean hup_started;
	GThread *verify, *refresh;
};

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
	report_hidden(idx);
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
	fs_switch_index(r->fs, idx);
	log_msg(LOG_LEVEL_NOTICE, "%s: now serving %s", why, index_path(idx));
	report_hidden(idx);
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
 * A mount must not fail for lack of descriptors: take the hard limit, and
 * unless -o max_connections= says otherwise, budget half of it for
 * sockets (at most 1024), leaving the rest for FUSE, the index and logs.
 */
static void raise_nofile(struct config *cfg)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t soft = rl.rlim_cur;

		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			rl.rlim_cur = soft;
	}
	if (!cfg->max_connections)
		cfg->max_connections = (guint)CLAMP(rl.rlim_cur / 2, 8,
						    MAX_CONNECTIONS_DEFAULT);
	log_msg(LOG_LEVEL_INFO,
		"RLIMIT_NOFILE: soft %llu, hard %llu; up to %u connections",
		(unsigned long long)rl.rlim_cur,
		(unsigned long long)rl.rlim_max, cfg->max_connections);
}

/* -- FUSE --------------------------------------------------------------- */

static struct fuse_args fuse_args_for(struct mount *m)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	g_autofree char *fsname = NULL;
	guint i;

	fuse_opt_add_arg(&args, "bucketfs");
	if (m->debug)
		fuse_opt_add_arg(&args, "-d");
	fsname = g_strdup_printf("fsname=s3://%s/%s", m->cfg.bucket,
				 m->cfg.prefix);
	fuse_opt_add_arg(&args, "-o");
	/* Not the kernel's "ro": setxattr of the prefetch hint must reach
	 * us.  Every write operation still gets EROFS, from fs/ops.c. */
	fuse_opt_add_arg(&args, "default_permissions,subtype=bucketfs,"
				"max_read=1048576");
	fuse_opt_add_opt_escaped(&args.argv[args.argc - 1], fsname);
	for (i = 0; i < m->fuse_opts->len; i++) {
		fuse_opt_add_arg(&args, "-o");
		fuse_opt_add_arg(&args, g_ptr_array_index(m->fuse_opts, i));
	}
	return args;
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

/* Mounts and runs the session until unmounted; returns the exit status. */
static void reloader_start(struct reloader *r)
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
static void reloader_stop(struct reloader *r)
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

static int serve(struct mount *m, struct fuse_session *se, struct fs *fs)
{
	struct fuse_loop_config *lc = NULL;
	struct reloader r = { .m = m, .fs = fs };
	g_autoptr(GError) error = NULL;
	struct s3 *s3;
	int rc = 1;

	if (fuse_set_signal_handlers(se) != 0)
		return 1;
	if (fuse_session_mount(se, m->mountpoint) != 0)
		goto out_handlers;
	/* The parent returns here: the mount exists. */
	fuse_daemonize(m->foreground);

	/* Threads start only now: they do not survive the fork. */
	s3 = s3_new(&m->cfg, &error);
	if (!s3) {
		log_error(LOG_LEVEL_ERR, error, "cannot start the S3 client");
		goto out_unmount;
	}
	fs_set_s3(fs, s3);
	r.s3 = s3;
	g_mutex_init(&r.lock);
	g_cond_init(&r.cond);
	reloader_start(&r);
	log_msg(LOG_LEVEL_NOTICE, "mounted s3://%s/%s on %s (index %s)",
		m->cfg.bucket, m->cfg.prefix, m->mountpoint, m->index_path);
	lc = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(lc, 64);
	rc = fuse_session_loop_mt(se, lc);
	/* libfuse's signal handlers end the loop with the signal's number:
	 * SIGTERM and SIGINT ask for a clean unmount, which this is.  After
	 * a lazy unmount (umount -l, fusermount3 -uz) the kernel may end
	 * the connection with ECONNABORTED instead of ENODEV once the last
	 * user is gone: unmounted as asked, too. */
	if (rc == -ECONNABORTED)
		log_msg(LOG_LEVEL_NOTICE, "the kernel closed the connection "
					  "(the mount was detached)");
	rc = rc == 0 || rc == SIGTERM || rc == SIGINT || rc == -ECONNABORTED
		     ? 0
		     : 1;
	fuse_loop_cfg_destroy(lc);
	log_msg(LOG_LEVEL_NOTICE, "unmounting %s", m->mountpoint);
	/* S3 first: a background rebuild or fetch then fails at once
	 * instead of keeping the mount attached and unserved. */
	fs_stop(fs);
	reloader_stop(&r);
	g_mutex_clear(&r.lock);
	g_cond_clear(&r.cond);
out_unmount:
	fuse_session_unmount(se);
out_handlers:
	fuse_remove_signal_handlers(se);
	return rc;
}

/*
 * Object buffers are a few hundred KiB each and live for milliseconds.
 * glibc would map each one fresh (or trim the heap under it), so every
 * copy into it would first fault in and zero new pages: 1.2x the files/s
 * of the DLIO load without that.  Buffers come from the heap, and up to
 * 128 MiB of it stays mapped when they are freed.
 */
static void tune_malloc(void)
{
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 128 << 20);
}

int main(int argc, char **argv)
{
	struct mount m = { 0 };
	g_autoptr(GError) error = NULL;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se = NULL;
	struct index *idx = NULL;
	struct s3 *s3 = NULL;
	struct fs *fs = NULL;
	char *abs_mnt;
	sigset_t hup;
	int rc = 1;

	tune_malloc();
	/* SIGHUP is taken by sigwait() in reload_thread(): blocked from the
	 * start in every thread, so it is never lost nor handled elsewhere
	 * (libfuse would end the session on it). */
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &hup, NULL);
	config_init(&m.cfg);
	config_set_mount_handler(&m.cfg, file_mount_option, &m);
	g_mutex_init(&m.fetch_lock);
	m.fs.entry_timeout = DEFAULT_ENTRY_TIMEOUT;
	/* The mounting user's, as every peer does; modes let others read. */
	m.fs.uid = getuid();
	m.fs.gid = getgid();
	m.fs.file_mode = 0644;
	m.fs.dir_mode = 0755;
	m.fuse_opts = g_ptr_array_new_with_free_func(g_free);
	if (!parse_args(&m, argc, argv, &error)) {
		fprintf(stderr, "bucketfs: %s\n", error->message);
		rc = 2;
		goto out;
	}
	log_init("bucketfs", m.foreground,
		 m.debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO);
	raise_nofile(&m.cfg);
	if (m.cfg.rw_ignored)
		log_msg(LOG_LEVEL_NOTICE, "option 'rw' ignored: bucketfs is "
					  "read-only, writes get EROFS");
	/* libfuse works from "/" once mounted: no relative paths after. */
	m.index_path = m.cfg.index_path
			       ? g_canonicalize_filename(m.cfg.index_path, NULL)
			       : index_default_path(m.cfg.bucket, m.cfg.prefix);
	abs_mnt = g_canonicalize_filename(m.mountpoint, NULL);
	g_free(m.mountpoint);
	m.mountpoint = g_steal_pointer(&abs_mnt);

	/* FUSE judges its options now, before any listing. */
	fs = fs_new(&m.fs);
	if (m.cfg.empty_dirs->len)
		fs_set_empty_dirs(
			fs, emptydirs_new(m.cfg.prefix, m.cfg.empty_dirs));
	args = fuse_args_for(&m);
	se = fuse_session_new(&args, &fs_ops, sizeof(fs_ops), fs);
	if (!se) {
		rc = 2; /* libfuse said why on stderr */
		goto out;
	}
	fs_set_session(fs, se);

	/* A client now, for the listing and to fail early on bad
	 * credentials; its threads die at the fork, so it goes first. */
	s3 = s3_new(&m.cfg, &error);
	if (s3)
		idx = load_index(&m, s3, &error);
	s3_free(s3);
	if (!idx) {
		log_error(LOG_LEVEL_ERR, error, "cannot mount s3://%s/%s",
			  m.cfg.bucket, m.cfg.prefix);
		if (!m.foreground)
			fprintf(stderr, "bucketfs: %s\n", error->message);
		goto out;
	}
	report_hidden(idx);
	fs_switch_index(fs, idx);
	index_unref(idx);
	rc = serve(&m, se, fs);
out:
	/* Replies of cancelled reads still need the session: fs first. */
	fs_free(fs);
	if (se)
		fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	log_shutdown();
	g_ptr_array_unref(m.fuse_opts);
	g_free(m.mountpoint);
	g_free(m.index_path);
	g_free(m.index_url);
	g_free(m.pub_bucket);
	g_free(m.pub_key);
	g_mutex_clear(&m.fetch_lock);
	config_clear(&m.cfg);
	return rc;
}
