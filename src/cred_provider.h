/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the files of the provider chain (cred_chain.h) share, private to
 * them: the state a provider is handed, what it can answer, the pieces
 * the providers have in common, and the providers themselves.
 * cred_chain.c asks the providers; they never call back into it.
 */
#ifndef BUCKETFS_CRED_PROVIDER_H
#define BUCKETFS_CRED_PROVIDER_H

#include <glib.h>

#include "cred_chain.h"
#include "credentials.h"

#define STS_VERSION "2011-06-15"
/* Token files and process output are small; this is plenty. */
#define SMALL_FILE_MAX (64 * 1024)

/* What one provider did. */
enum outcome {
	NOT_CONFIGURED, /* skip to the next one; a trace line says why */
	ANSWERED,
	FAILED, /* ends the chain */
};

struct chain {
	const struct cred_chain_options *o;
	GPtrArray *trace; /* may be NULL */
};

/* -- cred_provider.c: the shared pieces ---------------------------------- */

/* Appends one line to @c's trace, if it keeps one. */
void trace_add(struct chain *c, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/*
 * The one line of the small file @path (at most SMALL_FILE_MAX), stripped,
 * newly allocated: a secret, freed with credentials_secret_free().  NULL
 * with @error (BFS_ERROR: the open or read errno, EFBIG, EINVAL for an empty
 * or multi-line file), its message led by @what and @path.
 */
char *read_secret_file(const char *path, const char *what, GError **error);

/*
 * The providers.  Each returns ANSWERED with new credentials in *@out,
 * NOT_CONFIGURED with a trace line, or FAILED with @error.  Any thread;
 * they block for their I/O.
 */
enum outcome provider_environment(struct chain *c, struct credentials **out,
				  GError **error);

/* -- cred_sts.c ---------------------------------------------------------- */

/*
 * POSTs @action with @params (name, value pairs, NULL-terminated; a NULL
 * value leaves its name out) to STS, signed with @signer (NULL: unsigned).
 * New credentials with their source set, or NULL with @error.
 */
struct credentials *sts_call(const struct chain *c, const char *action,
			     const char *const *params,
			     const struct credentials *signer, GError **error);

/* "bucketfs-UNIXTIME", newly allocated. */
char *default_session_name(void);

/*
 * AssumeRoleWithWebIdentity of @role_arn with the token in @token_file,
 * read now; @session_name and @duration may be NULL.
 */
struct credentials *web_identity(const struct chain *c, const char *role_arn,
				 const char *token_file,
				 const char *session_name, const char *duration,
				 GError **error);

enum outcome provider_web_identity(struct chain *c, struct credentials **out,
				   GError **error);

/* -- cred_container.c, cred_imds.c --------------------------------------- */

enum outcome provider_container(struct chain *c, struct credentials **out,
				GError **error);

enum outcome provider_imds(struct chain *c, struct credentials **out,
			   GError **error);

/* -- cred_profile.c ------------------------------------------------------ */

/*
 * The credentials of profile @name, following its source_profile links
 * (@depth of them so far); @named: it was asked for by name, so a profile
 * without credentials is EINVAL rather than ENOENT.
 */
struct credentials *resolve_profile(struct chain *c, const char *name,
				    gboolean named, guint depth,
				    GError **error);

enum outcome provider_profile(struct chain *c, struct credentials **out,
			      GError **error);

#endif
