/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * config.h - the options of every bucketfs tool: the s3:// URL, the -o
 * options, the config file and the environment.
 *
 * Use:
 *
 *	struct config cfg;
 *
 *	config_init(&cfg);
 *	config_set_mount_handler(&cfg, fn, user);	(bucketfs only)
 *	for each -o argument:
 *		config_parse_options(&cfg, arg, fuse_opts, &error);
 *	config_parse_url(&cfg, "s3://bucket/prefix", &error);
 *	config_finish(&cfg, &error);
 *	... use cfg ...
 *	config_clear(&cfg);
 *
 * Precedence, highest first (an empty environment variable counts as
 * unset):
 *
 *  - endpoints: -o endpoint (repeatable) > S3_ENDPOINT_URIS (a comma list)
 *    > AWS_ENDPOINT_URL_S3 > AWS_ENDPOINT_URL > https://s3.REGION.amazonaws.com
 *    (.amazonaws.com.cn for cn-* regions);
 *  - region: -o region > AWS_REGION > AWS_DEFAULT_REGION > the region of
 *    the profile in the AWS config file > us-east-1;
 *  - ca_file: -o ca_file > AWS_CA_BUNDLE.  AWS_CA_BUNDLE is ignored when
 *    no endpoint uses https, so a bundle meant for other tools cannot break
 *    a plain-http mount;
 *  - profile: -o profile > AWS_PROFILE > "default".  cfg->profile holds
 *    only -o profile, and is what to pass to credentials_load(): with NULL
 *    the keys in the environment beat AWS_PROFILE, as with the AWS CLI.
 *
 * Secrets are deliberately never options: options show in ps(1) and
 * /proc/mounts.  An option whose name looks like one (secret, password,
 * token, access_key...) is an error even when unknown options are passed
 * through.
 *
 * The config file (see bucketfs.conf(5)) holds defaults for the -o
 * options, in a GLib key file: a [default] group and groups
 * [s3://BUCKET] and [s3://BUCKET/PREFIX], with keys named exactly like the
 * -o options (flags take true or false; endpoint takes a ';' list).  It is
 * read by config_finish(), so every tool gets it, from
 *
 *  - -o config=PATH, else $BUCKETFS_CONFIG (either may be "none": no file;
 *    a named file must exist), else
 *  - /etc/bucketfs/bucketfs.conf, then $XDG_CONFIG_HOME/bucketfs/
 *    bucketfs.conf (~/.config/...); both may be missing.
 *
 * Groups apply from the least to the most specific: [default], then
 * [s3://BUCKET], then every [s3://BUCKET/PREFIX] whose prefix is, by whole
 * components, a prefix of the mount's (shorter first); at equal
 * specificity the user's file beats the system's.  A key given with -o is
 * never taken from the file, and neither is one the environment sets
 * (endpoint: S3_ENDPOINT_URIS, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL;
 * region: AWS_REGION, AWS_DEFAULT_REGION; ca_file: AWS_CA_BUNDLE; profile:
 * AWS_PROFILE or AWS_ACCESS_KEY_ID): -o > environment > file > defaults.
 *
 * Each value goes through the -o parser, so errors are the same as for -o,
 * prefixed with "FILE:LINE: [GROUP]: ".  Unknown groups and keys (in any
 * group) are errors, and so are secrets (the file holds none: use
 * profile= and the AWS credentials file) and a file that is not owned by
 * root or the user, or that others may write (it chooses endpoints and
 * file paths for a daemon that often runs as root).  The mount options of
 * bucketfs (entry_timeout, whole_max, allow_other...; see
 * config_mount_keys()) go to the handler of config_set_mount_handler();
 * tools that set none check their names and ignore them.
 *
 * Errors are BFS_ERROR/EINVAL unless said otherwise, and name the option
 * (or variable) and the bad value, with control characters escaped and
 * never with a URL's user:password part.
 *
 * Threads: a struct config is plain data; these functions may be called
 * from any thread but not concurrently on the same struct.  The functions
 * that read the environment (config_finish()) belong before threads that
 * may change it.
 */
#ifndef BUCKETFS_CONFIG_H
#define BUCKETFS_CONFIG_H

#include <glib.h>

/* Connections when -o max_connections= is not given: the tools' (a
 * mount's is config_mount_connections()). */
#define CONFIG_DEFAULT_MAX_CONNECTIONS 64
/* The most a mount takes without -o max_connections=. */
#define CONFIG_MOUNT_MAX_CONNECTIONS  1024
#define CONFIG_DEFAULT_RETRY_DEADLINE 60 /* seconds: see retry_deadline */

enum addressing {
	ADDRESSING_AUTO,    /* only before config_finish() */
	ADDRESSING_PATH,    /* http://host/bucket/key */
	ADDRESSING_VIRTUAL, /* http://bucket.host/key */
};

/* The system-wide config file. */
#define CONFIG_SYSTEM_FILE "/etc/bucketfs/bucketfs.conf"

/*
 * Takes one mount option, "name" (a flag) or "name=value", exactly as if it
 * came from -o; returns FALSE with @error set (naming the option and the
 * bad value) to refuse it.  See config_set_mount_handler().
 */
typedef gboolean (*config_mount_fn)(void *user, const char *opt,
				    GError **error);

/* Plain data, owned by the caller; config_init() and config_clear(). */
struct config {
	char *bucket; /* from s3://BUCKET[/PREFIX] */
	char *prefix; /* "" or ends with '/' */
	/*
	 * Of char *: normalized "scheme://host[:port]" URLs: scheme and host
	 * in lower case, no default port, no trailing '/', no duplicates.
	 */
	GPtrArray *endpoints;
	char *region;
	/*
	 * Of char *: -o empty_dirs= (repeatable, ':'-separated): directories
	 * relative to the prefix, without a trailing '/', each component a
	 * name the index can show, no duplicates, in the order given.
	 */
	GPtrArray *empty_dirs;
	enum addressing addressing;
	char *ca_file;	  /* NULL = the system's default */
	char *index_path; /* NULL = the default location */
	char *profile;	  /* -o profile; NULL = AWS_PROFILE/default */
	gboolean anonymous;
	double connect_timeout; /* seconds, default 10 */
	double stall_timeout;	/* seconds without progress, default 30 */
	double request_timeout; /* 0 = none; bound for one attempt; default 0 */
	guint max_attempts;	/* default 10 */
	double retry_deadline;	/* seconds; 0 = none; default 60 (http.h) */
	guint max_connections;	/* 0 = derive later from RLIMIT_NOFILE */
	gboolean receive_curl;	/* http_receive=curl: no direct receive path */
	guint event_threads;	/* HTTP event threads, 1..64; 0 = a quarter of
				 * the cores, 1..16 (http.h) */
	gboolean read_only;	/* -o ro: no writes at all (fs.h) */
	gboolean rw_ignored;	/* "rw" was given (mount(8) passes it to
				 * every helper): the default */
	/* Informational, for config_describe() and error messages. */
	gboolean endpoints_from_options;
	/*
	 * Where the endpoints came from: "-o endpoint", "S3_ENDPOINT_URIS",
	 * "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL" or "default for region
	 * us-east-1".  Set by config_finish().
	 */
	char *endpoint_source;
	/*
	 * Where the region came from: "-o region", "AWS_REGION",
	 * "AWS_DEFAULT_REGION", "profile 'dev' in the AWS config file" or
	 * "default".
	 */
	char *region_source;

	/* Private to src/config*.c. */
	char *config_file;     /* -o config=PATH, or NULL */
	GHashTable *given;     /* option names given with -o: the file yields */
	GPtrArray *files_read; /* of char *: the config files read */
	config_mount_fn mount_fn;
	void *mount_user;
};

/* Sets @cfg to the defaults, with an empty endpoint list. */
void config_init(struct config *cfg);

/* Frees what @cfg owns and zeroes it.  Safe to call twice. */
void config_clear(struct config *cfg);

/*
 * Sets the bucket and prefix from "s3://BUCKET[/PREFIX]" (scheme case
 * insensitive).  A prefix without a trailing '/' gets one; "s3://b" and
 * "s3://b/" have the prefix "".  Bucket names are checked loosely: 3 to 63
 * letters (either case), digits, '.', '-' or '_'.  The prefix must be valid
 * UTF-8 and at most 1024 bytes.  Errors: EINVAL, e.g.
 * "'s3:/bucket': expected s3://BUCKET[/PREFIX]".
 */
gboolean config_parse_url(struct config *cfg, const char *url, GError **error);

/*
 * Parses one -o argument "opt[=val][,opt...]"; may be called several
 * times.  endpoint= accumulates, any other repeated option: the last one
 * wins.  In a value (or a name) "\," is a comma and "\\" a backslash; any
 * other backslash is kept as it is; empty items are ignored.
 *
 * Options it does not know are appended to @passthrough (unescaped, newly
 * allocated: give the array g_free as free function; rebuild an -o string
 * with fuse_opt_add_opt_escaped()) if @passthrough is not NULL, and are
 * otherwise an error "unknown option 'x'".  Errors (EINVAL) name the option
 * and the bad value: "option 'max_attempts': '3x' is not an integer between
 * 1 and 100".  On error, @cfg may have taken the options before the bad
 * one.
 */
gboolean config_parse_options(struct config *cfg, const char *opts,
			      GPtrArray *passthrough, GError **error);

/*
 * Makes config_finish() hand the mount options of the config file (the
 * keys named by config_mount_keys()) that were not given with -o to @fn, one
 * by one, "name" or "name=value"; its errors get the file, line and group
 * prepended.  -o mount options reach the caller through @passthrough of
 * config_parse_options() instead, and are remembered there so the file
 * yields to them whatever the order of the calls.  Call before
 * config_finish(), which calls @fn on its own thread; @user is borrowed
 * until then.
 */
void config_set_mount_handler(struct config *cfg, config_mount_fn fn,
			      void *user);

/*
 * The mount options (fs/main.c) a config file may hold, beyond the options
 * of config_parse_options(), as a NULL-terminated list; those ending in '?'
 * are flags (true or false in the file).  Static.
 */
const char *const *config_mount_keys(void);

/*
 * Applies the config file (see above), the environment and the defaults
 * once all -o options and the URL are parsed (see the precedence above),
 * resolves ADDRESSING_AUTO (virtual when every endpoint is AWS's and the
 * bucket name is a valid DNS name without dots, else path), and validates
 * the whole: a bucket was given, endpoints from the environment, the
 * region, addressing=virtual with a bucket name that cannot be a host
 * name, ca_file.  Reads the config files, the environment and, for the
 * region, the AWS config file.  Call once.
 *
 * Errors: EINVAL naming the option or variable and the bad value; for
 * ca_file, the errno of opening it (with strerror); for the profile's
 * region, the errors of credentials_profile_region().  For the config
 * file: the errno of opening or reading it, EACCES for an untrusted owner
 * or mode, EINVAL for its syntax, groups, keys and values (with the file,
 * line and group), and the errors of the mount handler.
 */
gboolean config_finish(struct config *cfg, GError **error);

/*
 * A human, multi-line summary for --verbose and bucketfs-doctor, newly
 * allocated, each line ending in '\n'.  Never includes secrets (@cfg holds
 * none).  Works before config_finish() too, showing what is unresolved.
 */
char *config_describe(const struct config *cfg);

/* A mount's connection budget without -o max_connections=: half its
 * descriptor limit @nofile (the rest for FUSE, the index and logs), 8 to
 * CONFIG_MOUNT_MAX_CONNECTIONS. */
guint config_mount_connections(unsigned long long nofile);

/*
 * The help text for the -o options common to all tools, for --help, so
 * that help and behaviour do not drift.  Static; lines end in '\n', are at
 * most 72 columns wide, and start with a heading line.
 */
const char *config_options_help(void);

#endif
