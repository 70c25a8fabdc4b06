/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * config_internal.h - what the pieces of the config module share; private
 * to src/config*.c.  The contract for everyone else is config.h.
 *
 *  config.c          init, clear, the mount keys, the environment
 *  config_options.c  the -o option table, its parsers and --help text
 *  config_url.c      s3://BUCKET[/PREFIX], bucket and region names,
 *                    endpoint URLs
 *  config_file.c     the config file: reading, checking, applying
 *  config_finish.c   config_finish(): the file, the environment, the
 *                    defaults, the checks; above the rest
 *  config_describe.c config_describe()
 *
 * Errors are BFS_ERROR/EINVAL, as in config.h, unless said otherwise.
 */
#ifndef BUCKETFS_CONFIG_INTERNAL_H
#define BUCKETFS_CONFIG_INTERNAL_H

#include <glib.h>

#include "config.h"

#define PREFIX_MAX 1024 /* bytes of a prefix, with its NUL */

/* A -o option: @value is NULL when none was given. */
typedef gboolean (*option_fn)(struct config *cfg, const char *name,
			      const char *value, GError **error);

struct option_def {
	const char *name;
	const char *metavar; /* NULL for a flag */
	option_fn apply;
};

/* config.c */

/* The value of environment variable @name; NULL when unset or empty. */
const char *config_env_get(const char *name);

/*
 * Whether @key names a mount option of config_mount_keys(); *@flag: it
 * is a flag.
 */
gboolean config_mount_key_find(const char *key, gboolean *flag);

/* config_options.c */

/* The -o options, in the order the config file applies them. */
extern const struct option_def config_option_defs[];
extern const gsize config_n_option_defs;

/* The option named @name, or NULL. */
const struct option_def *config_option_find(const char *name);

/* Whether @name could only carry a secret: refused everywhere. */
gboolean config_option_looks_secret(const char *name);

/*
 * Applies "name[=value]" as -o does.  @from_options: it came from -o, so
 * the config file must not override it.  Unknown options go to
 * @passthrough if not NULL, else are an error.
 */
gboolean config_option_apply(struct config *cfg, const char *item,
			     GPtrArray *passthrough, gboolean from_options,
			     GError **error);

/* config_url.c */

/* Letters, digits, '-', '_', '.'; 1 to 64 bytes. */
gboolean config_region_valid(const char *region);

/* Whether @bucket can be the first label(s) of a virtual-hosted name. */
gboolean config_bucket_dns_compatible(const char *bucket, gboolean allow_dots);

/*
 * Normalizes endpoint URL @url into *@out (newly allocated), as
 * struct config's endpoints say; errors quote @url without a user:password
 * part and say why: "'ftp://h': the scheme must be http or https".
 */
gboolean config_endpoint_parse(const char *url, char **out, GError **error);

/* Appends @url (taken) to @endpoints unless it is there already. */
void config_endpoints_add(GPtrArray *endpoints, char *url);

/* Whether normalized endpoint @url is one of AWS's. */
gboolean config_endpoint_is_aws(const char *url);

/* config_file.c */

/*
 * Reads the config files (config.h) and applies what they set for this
 * mount and neither -o nor the environment does.
 */
gboolean config_file_apply(struct config *cfg, GError **error);

#endif
