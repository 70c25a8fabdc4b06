/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * credentials.h - where the S3 keys come from.
 *
 * The resolution order follows the AWS CLI:
 *
 *  1. anonymous: no keys, requests go unsigned;
 *  2. if no profile was named explicitly (the @profile argument, i.e.
 *     -o profile=NAME): AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, with
 *     AWS_SESSION_TOKEN if set (an empty variable counts as unset);
 *  3. the profile @profile, else $AWS_PROFILE, else "default":
 *     a. section [NAME] of the shared credentials file
 *        ($AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials);
 *     b. else section [profile NAME] (or [default] / [profile default])
 *        of the config file ($AWS_CONFIG_FILE, default ~/.aws/config).
 *     The keys aws_access_key_id and aws_secret_access_key (and optionally
 *     aws_session_token) must come together from the same file.
 *
 * This module is the static layer: keys that are written down.  Roles,
 * credential_process, web identity, containers and the instance metadata
 * service are resolved by cred_chain.h, which reads their settings with
 * aws_profile_read() and comes here for static keys.
 *
 * The files are read with a small parser of the format the AWS CLI accepts
 * (Python's configparser): "[section]" headers, "key = value" or
 * "key: value" lines (key names are case-insensitive), full-line comments
 * starting with '#' or ';' (there are no inline comments), and indented
 * continuation lines, which hold nested settings ("s3 =" followed by
 * indented lines) and are skipped.  A repeated section or key: the last
 * value wins.
 *
 * Secrets (the secret key and the session token) never appear in a log
 * line or an error message; parse errors give file:line and the problem,
 * never the line.  Buffers that held them are wiped before being freed.
 */
#ifndef BUCKETFS_CREDENTIALS_H
#define BUCKETFS_CREDENTIALS_H

#include <glib.h>

/* Plain data, owned by whoever loaded it; free with credentials_free(). */
struct credentials {
	char *access_key_id;	 /* NULL if anonymous */
	char *secret_access_key; /* never logged, never in an error */
	char *session_token;	 /* NULL if none */
	/*
	 * For humans: "environment (AWS_ACCESS_KEY_ID)",
	 * "profile 'dev' in /root/.aws/credentials", "anonymous".
	 */
	char *source;
	/*
	 * Which provider answered, one word for logs and the doctor:
	 * "environment", "profile", "web-identity", "assume-role",
	 * "credential-process", "container", "imds", "anonymous".
	 */
	char *provider;
	char *role;	   /* the role ARN or IMDS role name, or NULL */
	gint64 expiration; /* Unix seconds; 0: they do not expire */
	gboolean anonymous;
};

/*
 * New credentials: copies @access_key_id, @secret_access_key,
 * @session_token (NULL if none) and @provider, and takes @source.  The
 * caller sets role and expiration.  Any thread.
 */
struct credentials *credentials_new(const char *access_key_id,
				    const char *secret_access_key,
				    const char *session_token,
				    const char *provider, char *source);

/*
 * Resolves the credentials as described above.  @profile (borrowed, may be
 * NULL) is a profile named explicitly by the user; NULL lets the
 * environment keys and then $AWS_PROFILE decide.  Returns newly allocated
 * credentials, or NULL with @error set (domain BFS_ERROR):
 *
 *  - EINVAL: only one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is set;
 *    the profile lacks one of the two keys, or one is empty; a key contains
 *    a control character; a file does not parse (file:line and the
 *    problem);
 *  - ENOENT: a named profile (argument or $AWS_PROFILE) is in neither file
 *    ("profile 'x' not found in /path/credentials or /path/config"); or,
 *    with nothing named, there are no credentials at all (the message
 *    lists the ways to provide them);
 *  - another errno: a file exists but cannot be read (the path and
 *    strerror); EFBIG if it is larger than 1 MiB.
 *
 * A missing file is not an error in itself.  Reads the environment, so call
 * it before starting threads that may change it (any thread otherwise).
 */
struct credentials *credentials_load(const char *profile, gboolean anonymous,
				     GError **error);

/*
 * Step 2 of credentials_load() alone: TRUE with *@out NULL when neither
 * AWS_ACCESS_KEY_ID nor AWS_SECRET_ACCESS_KEY is set, TRUE with new
 * credentials, or FALSE with @error as credentials_load() (EINVAL).
 */
gboolean credentials_from_environment(struct credentials **out, GError **error);

/*
 * The environment variable @name, borrowed from the environment until it
 * changes; NULL when unset or empty (an empty variable counts as unset, as
 * with the AWS CLI).  The provider chain (cred_chain.h) reads its variables
 * with it too, so that every provider agrees on what is set.  Any thread
 * while none changes the environment (see credentials_load()); no errors.
 */
const char *credentials_env_get(const char *name);

/* TRUE when @a and @b hold the same keys and token (or are both anonymous). */
gboolean credentials_equal(const struct credentials *a,
			   const struct credentials *b);

/* Wipes the secrets (explicit_bzero) and frees @creds.  NULL is ignored. */
void credentials_free(struct credentials *creds);

/* Wipes the string @s (explicit_bzero) and frees it.  NULL is ignored. */
void credentials_secret_free(char *s);

/*
 * The settings of one profile that are not static keys, merged from both
 * files as the AWS CLI does (the credentials file wins).  Plain data; every
 * string is newly allocated or NULL when absent or empty.
 */
struct aws_profile {
	char *name;
	char *cred_path; /* the files that were read */
	char *conf_path;
	gboolean found;	   /* the section is in either file */
	gboolean has_keys; /* aws_access_key_id or _secret_ in either */
	gboolean has_sso;  /* sso_start_url or sso_session */
	char *role_arn;
	char *source_profile;
	char *credential_source;
	char *credential_process; /* a command line: not a secret */
	char *web_identity_token_file;
	char *role_session_name;
	char *external_id;
	char *duration_seconds;
	char *region;
};

/*
 * Reads profile @name (borrowed) from the credentials file and the config
 * file (paths as for credentials_load()) into @out, which the caller
 * clears with aws_profile_clear() after a TRUE return (a FALSE return
 * leaves it cleared).  A missing file or section is not an error
 * (@out->found says).  Errors as for credentials_load(): EINVAL for a file
 * that does not parse, the errno of one that cannot be read.  Any thread
 * (reads the environment for the paths).
 */
gboolean aws_profile_read(const char *name, struct aws_profile *out,
			  GError **error);
void aws_profile_clear(struct aws_profile *p);

/*
 * The region setting of @profile (NULL: $AWS_PROFILE, else "default") in
 * the config file, newly allocated; NULL without an error when the file,
 * the profile or the setting is absent (or empty).  Errors as for
 * credentials_load(): EINVAL for a file that does not parse, the errno of
 * a file that exists but cannot be read.  Any thread (see above).
 */
char *credentials_profile_region(const char *profile, GError **error);

#endif
