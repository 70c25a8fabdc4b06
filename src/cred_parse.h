/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * cred_parse.h - the answers of the credential providers, parsed: the
 * JSON of the instance metadata service, of the container endpoint and of
 * a credential_process, and the XML of STS.  No I/O, no clock.
 *
 * Errors never quote a value of the document: any of them may be a
 * secret.  They name the field and the problem, with @what (borrowed, "IMDS
 * response", "credential_process output"...) first.
 */
#ifndef BUCKETFS_CRED_PARSE_H
#define BUCKETFS_CRED_PARSE_H

#include <glib.h>

#include "credentials.h"

/* Which JSON dialect: the names and rules differ a little. */
enum cred_json_kind {
	CRED_JSON_IMDS,	     /* Code "Success", Token, Expiration required */
	CRED_JSON_CONTAINER, /* Token, Expiration required */
	CRED_JSON_PROCESS,   /* Version 1, SessionToken; Expiration optional */
};

/*
 * Parses credentials JSON (@len bytes of @json, borrowed) of @kind.
 * Returns new credentials with expiration set (0 when a process gave
 * none) and provider, source and role NULL for the caller to fill, or NULL
 * with @error (BFS_ERROR/EPROTO): not JSON, not an object, a field missing
 * or not a string, an Expiration that is not ISO 8601, IMDS's Code other
 * than "Success" (which it then names: it is not a secret), a process's
 * Version other than 1.  Any thread.
 */
struct credentials *cred_parse_json(const char *json, gsize len,
				    enum cred_json_kind kind, const char *what,
				    GError **error);

/*
 * Parses the answer to STS AssumeRole or AssumeRoleWithWebIdentity
 * (@action names the result element: "AssumeRoleResult"...).  Returns new
 * credentials with expiration set and role set to the AssumedRoleUser's
 * Arn when there is one, or NULL with @error (BFS_ERROR/EPROTO) as for
 * cred_parse_json().  Any thread.
 */
struct credentials *cred_parse_sts(const char *xml, gsize len,
				   const char *action, GError **error);

/*
 * The Code and Message of an STS ErrorResponse, newly allocated (either
 * may be NULL), with control characters escaped.  FALSE when @xml is not
 * one.  Any thread.
 */
gboolean cred_parse_sts_error(const char *xml, gsize len, char **code,
			      char **message);

/*
 * An ISO 8601 time ("2026-12-01T20:15:00Z", with or without fractions or
 * an offset) as Unix seconds in *@out.  FALSE if it is not one.
 */
gboolean cred_parse_time(const char *s, gint64 *out);

#endif
