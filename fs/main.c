/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bucketfs - mount an S3 bucket (or a prefix) as a POSIX tree.
 *
 *   bucketfs [-f] [-d] [-o OPT[,OPT...]]... s3://BUCKET[/PREFIX] MOUNTPOINT
 *
 * Start-up: options, then the persisted index (opened if valid, else
 * listed and built, with progress on a terminal, or fetched from
 * index_url: index_life.h), then the kernel mount, then (in the background
 * unless -f) the S3 client, the reloader's threads and the FUSE loop.  The
 * parent returns once the mount exists.  SIGHUP reopens the index file and
 * switches the live mount onto it; SIGTERM, SIGINT and fusermount3 -u
 * unmount cleanly.
 */
#include <errno.h>
#include <grp.h>
#include <malloc.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "bdi.h"
#include "config.h"
#include "emptydirs.h"
#include "error.h"
#include "index.h"
#include "index_life.h"
#include "log.h"
#include "mount.h"
#include "mount_opts.h"
#include "ops.h"
#include "s3.h"
#include "upload.h"
#include "version.h"

#define DEFAULT_ENTRY_TIMEOUT 3600.0
/* -o negative_timeout=: a missing name is asked for again after this. */
#define DEFAULT_NEGATIVE_TIMEOUT 1.0
#define KERNEL_RA_DEFAULT	 (2u << 20)
#define SCHED_SLICE_DEFAULT_US	 100 /* -o sched_slice= */

/* clang-format off */
static const char usage[] =
"usage: bucketfs [-f] [-d] [-o OPT[,OPT...]]... s3://BUCKET[/PREFIX] MOUNTPOINT\n"
"\n"
"Mounts an S3 bucket, or a prefix of one, as a POSIX tree.  The\n"
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
"                          larger object (default 256 MiB)\n"
"    memory_max=BYTES      all prefetch buffers together (default 1 GiB)\n"
"    kernel_readahead=BYTES  how far the kernel reads ahead of a\n"
"                          sequential reader (default 2 MiB; the mount's\n"
"                          read_ahead_kb, which only root may raise above\n"
"                          FUSE's 128 KiB; 0 leaves it alone)\n"
"    sched_slice=USECS     the CPU time the daemon's threads ask of the\n"
"                          kernel's scheduler before a woken thread may\n"
"                          preempt them, 100 to 100000 (default 100; 0:\n"
"                          the kernel's own, 1.4-2.8 ms; Linux >= 6.12)\n"
"    prefetch_depth=N      announced files fetched ahead (default 256);\n"
"                          streams in listing order get as many\n"
"    readahead=all|none|SOURCE[+SOURCE...]  which prefetch sources are\n"
"                          on: all (the default), none (an open still\n"
"                          fetches its file whole), or those named:\n"
"                          hints (the announced order: setxattr\n"
"                          user.bucketfs.prefetch), streams (guesses of\n"
"                          streams in listing order), lookups (a file\n"
"                          looked up is fetched before its open, while\n"
"                          opens follow lookups)\n"
"    direct_io=auto|none|small|all  which files bypass the kernel's\n"
"                          page cache: auto (the default: files fetched\n"
"                          whole, where the kernel maps such files,\n"
"                          Linux >= 6.6; else as none), none (a file\n"
"                          fetched whole is stored there at open; a\n"
"                          re-read is served from it), those fetched\n"
"                          whole, or every file (mmap(MAP_SHARED) of\n"
"                          them fails with ENODEV before Linux 6.6)\n"
"    passthrough=off|auto|always  files fetched whole (direct_io=auto or\n"
"                          none) read by the kernel from a memfd (the GET's\n"
"                          own body), without a request to the daemon,\n"
"                          where the kernel offers FUSE passthrough (Linux\n"
"                          >= 6.9) and the daemon has CAP_SYS_ADMIN: auto,\n"
"                          those fetched or on their way when opened (the\n"
"                          others direct_io, so that the open overlaps the\n"
"                          GET); always, every one; or never (off).  The\n"
"                          default is auto, with direct_io=auto\n"
"                          (direct_io=none keeps the page cache unless\n"
"                          passthrough is given)\n"
"    readdirplus=auto|always|lookups  whether a listing hands the kernel\n"
"                          each name's attributes: always (an inode per\n"
"                          name in kernel memory; an open or stat after\n"
"                          the listing needs no lookup), or only where\n"
"                          lookups follow (lookups: ls -l gets them,\n"
"                          ls -f and os.listdir get names alone), or\n"
"                          auto, the default: always for an index of\n"
"                          at most 100,000 entries, lookups above\n"
"    negative_timeout=SECS how long a name found neither in the index\n"
"                          nor on S3 is known to be missing, by the\n"
"                          kernel and the daemon (default 1; 0: ask S3\n"
"                          every time)\n"
"    writable              for mounts that write much: close, fsync and\n"
"                          unlink may wait in up to 64 FUSE workers\n"
"                          (the default is one per CPU)\n"
"    write_max=BYTES       largest file reopened for writing without\n"
"                          O_TRUNC, buffered whole (64 MiB)\n"
"    part_size=BYTES       multipart part size, 8 to 64 MiB (16 MiB)\n"
"    write_parts=N         parts in flight for the whole mount, 1 to 64\n"
"                          (4): memory for writes is about\n"
"                          (N + files being written) x part_size\n"
"    uid=USER              owner of every file and directory, a number\n"
"                          or a name (default: the user who mounted)\n"
"    gid=GROUP             their group (default: the mounting user's)\n"
"    file_mode=OCTAL       permissions of files (default 0644)\n"
"    dir_mode=OCTAL        permissions of directories (default 0755);\n"
"                          write bits show only where writes can work:\n"
"                          none with ro, none on indexed\n"
"                          objects; the kernel enforces them\n"
"                          (default_permissions)\n"
"    allow_other           let other users see the mount (FUSE)\n"
"    and FUSE's generic options (fsname=, auto_unmount, ...)\n"
"\n"
"Names the index lacks are looked up on S3 (HEAD, then a one-key LIST\n"
"for a directory), so files other hosts make are seen.  Unless ro is\n"
"given they may be created, written (a new file streams as a multipart\n"
"upload once past one part, sequentially; smaller ones go as one PUT;\n"
"close and fsync complete it) and removed; mkdir makes a \"DIR/\"\n"
"marker.  The index's objects stay read-only (EROFS) and pinned to\n"
"their ETag; rename and link give EXDEV.\n"
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

/* The config file's mount options, through the same parser as -o. */
static gboolean file_mount_option(void *user, const char *opt, GError **error)
{
	return mount_option_take(user, opt, error);
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
		if (!mount_option_take(m, g_ptr_array_index(pass, j), error))
			return FALSE;
	if (!config_parse_url(&m->cfg, url, error) ||
	    !config_finish(&m->cfg, error))
		return FALSE;
	m->fs.read_only = m->cfg.read_only;
	if (m->fs.read_only && m->fs.writable) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "options 'ro' and 'writable' contradict each "
			    "other: choose one");
		return FALSE;
	}
	return TRUE;
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
		cfg->max_connections = config_mount_connections(rl.rlim_cur);
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
	 * us.  Every write operation still gets EROFS, from overlay_ops.c. */
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
 * Before the session loop: INIT, which follows, keeps it (bdi.h).  @real
 * is the mount point with its symlinks resolved, as mountinfo shows it,
 * taken before mounting (once mounted, resolving it would wait on this
 * very loop).
 */
static void raise_kernel_readahead(struct mount *m, const char *real)
{
	g_autoptr(GError) error = NULL;
	guint64 bytes = m->fs.readahead.kernel_ra;

	if (!bytes)
		return;
	if (bdi_set_readahead(real ? real : m->mountpoint, "fuse.bucketfs",
			      bytes, &error))
		log_msg(LOG_LEVEL_DEBUG,
			"kernel readahead %" G_GUINT64_FORMAT " KiB",
			bytes >> 10);
	else
		log_error(LOG_LEVEL_INFO, error,
			  "the kernel's readahead stays at FUSE's 128 KiB "
			  "(large files read sequentially are slower; "
			  "kernel_readahead needs root)");
}

/*
 * How many libfuse workers a mount may start.  libfuse 3.14 starts one
 * more whenever a request arrives and none is idle, up to this bound,
 * and never stops one (max_idle_threads stays -1, which libfuse
 * advises: starting threads costs more than keeping them).  So the pool
 * grows to the most requests ever in a handler at once and a soak
 * shows a slow climb to that peak (23 to 36 threads over 30 minutes
 * with a bound of 64).  On the read path no handler waits for the
 * network: open and read are answered later, from the event and
 * completion threads, lookup, getattr and readdir from the index in
 * memory.  A worker there is busy only while it runs or waits for a
 * lock, so one per online CPU can keep every CPU busy (at least 2, at
 * most 64), a bound the first seconds of a busy mount reach.  More only
 * cost wake-ups: each request that finds a worker asleep in read() wakes
 * it, and one that finds them all busy is taken by the next free one
 * without a sleep.  Measured on the small files (2 CPUs, 32 readers),
 * 8 workers cost the daemon 5.6-6.1 context switches per file, 2 cost
 * 4.5 (docs/PERFORMANCE.md).  A lookup of a name the index lacks, and a
 * write's close, fsync and unlink, wait for S3 in the worker: rare on a
 * dataset mount; -o writable, for mounts that write much, keeps 64.
 */
static unsigned int fuse_workers(const struct mount *m)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (m->fs.writable)
		return 64;
	return (unsigned int)CLAMP(cpus, 2, 64);
}

/* Mounts and runs the session until unmounted; returns the exit status. */
static int serve(struct mount *m, struct fuse_session *se, struct fs *fs)
{
	struct fuse_loop_config *lc = NULL;
	struct reloader r = { .m = m, .fs = fs };
	g_autoptr(GError) error = NULL;
	g_autofree char *real = realpath(m->mountpoint, NULL);
	struct s3 *s3;
	int rc = 1;

	if (fuse_set_signal_handlers(se) != 0)
		return 1;
	if (fuse_session_mount(se, m->mountpoint) != 0)
		goto out_handlers;
	fs_session_mounted(fs);
	/* The parent returns here: the mount exists. */
	fuse_daemonize(m->foreground);
	raise_kernel_readahead(m, real);

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
	fuse_loop_cfg_set_max_threads(lc, fuse_workers(m));
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
 * What bucketfs-doctor warns of, said at mount time too: a bucket with
 * train/ and no valid/ stops DLIO at once (emptydirs_dlio()).
 */
static void report_dlio_layout(const struct mount *m, const struct index *idx)
{
	g_autofree char *detail = NULL;

	if (emptydirs_dlio_of_index(idx, m->cfg.empty_dirs, &detail) ==
	    EMPTYDIRS_DLIO_MISSING)
		log_msg(LOG_LEVEL_WARNING, "DLIO layout: %s: %s", detail,
			EMPTYDIRS_DLIO_FIX);
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

/* struct sched_attr of sched_setattr(2); glibc 2.36 declares neither. */
struct sched_attr_v1 {
	guint32 size;
	guint32 sched_policy;
	guint64 sched_flags;
	gint32 sched_nice;
	guint32 sched_priority;
	guint64 sched_runtime;
	guint64 sched_deadline;
	guint64 sched_period;
	guint32 sched_util_min;
	guint32 sched_util_max;
};

/*
 * -o sched_slice=: asks the scheduler (EEVDF, Linux >= 6.12) for a short
 * slice for this thread, and so for every thread it starts.  A FUSE
 * request is a chain of wake-ups (the worker that takes it, the event
 * thread that fetches, the thread that replies); with the kernel's slice
 * of 1.4-2.8 ms, and ticks 4 ms apart at HZ=250, each thread woken on a
 * core another of them holds waits out that slice.  A short slice lets
 * the woken thread run first: pinned to one core, 32 readers at 20 ms
 * gained 1.05x files/s (docs/PERFORMANCE.md).  The policy
 * and nice level stay as they are; older kernels ignore the runtime of a
 * normal thread, and a failure only costs that latency, so both are said
 * at debug level.
 */
static void set_sched_slice(guint slice_us)
{
	struct sched_attr_v1 attr = { 0 };

	if (!slice_us)
		return;
	if (syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) != 0) {
		log_msg(LOG_LEVEL_DEBUG, "sched_slice: sched_getattr: %s",
			g_strerror(errno));
		return;
	}
	if (attr.sched_policy != SCHED_OTHER &&
	    attr.sched_policy != SCHED_BATCH) {
		log_msg(LOG_LEVEL_DEBUG,
			"sched_slice: left alone, the "
			"daemon runs under policy %u",
			attr.sched_policy);
		return;
	}
	attr.size = sizeof(attr);
	attr.sched_flags = 0;
	attr.sched_runtime = (guint64)slice_us * 1000;
	if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0)
		log_msg(LOG_LEVEL_DEBUG, "sched_slice=%u: sched_setattr: %s",
			slice_us, g_strerror(errno));
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
	int rc = 1;

	tune_malloc();
	/* Before any thread starts: all of them inherit it. */
	index_life_block_signals();
	config_init(&m.cfg);
	config_set_mount_handler(&m.cfg, file_mount_option, &m);
	g_mutex_init(&m.fetch_lock);
	m.fs.entry_timeout = DEFAULT_ENTRY_TIMEOUT;
	m.fs.negative_timeout = DEFAULT_NEGATIVE_TIMEOUT;
	/* The mounting user's, as every peer does; modes let others read. */
	m.fs.uid = getuid();
	m.fs.gid = getgid();
	m.fs.file_mode = 0644;
	m.fs.dir_mode = 0755;
	m.fs.readahead.kernel_ra = KERNEL_RA_DEFAULT;
	m.fs.passthrough_on = TRUE; /* auto, where direct_io is (fs.h) */
	m.sched_slice_us = SCHED_SLICE_DEFAULT_US;
	m.fuse_opts = g_ptr_array_new_with_free_func(g_free);
	if (!parse_args(&m, argc, argv, &error)) {
		fprintf(stderr, "bucketfs: %s\n", error->message);
		rc = 2;
		goto out;
	}
	log_init("bucketfs", m.foreground,
		 m.debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO);
	raise_nofile(&m.cfg);
	/* Before any thread starts: all of them inherit it. */
	set_sched_slice(m.sched_slice_us);
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
		idx = index_life_load(&m, s3, &error);
	s3_free(s3);
	if (!idx) {
		log_error(LOG_LEVEL_ERR, error, "cannot mount s3://%s/%s",
			  m.cfg.bucket, m.cfg.prefix);
		if (!m.foreground)
			fprintf(stderr, "bucketfs: %s\n", error->message);
		goto out;
	}
	index_life_report_hidden(idx);
	report_dlio_layout(&m, idx);
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
