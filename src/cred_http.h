/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * cred_http.h - one blocking HTTP exchange for the credential providers
 * (STS, the container endpoint, the instance metadata service).
 *
 * This is not the S3 data path: a credential fetch is rare, small and
 * made by the thread that needs it (the mount's start, the refresher, the
 * doctor), so it uses its own libcurl easy handle, with its own timeouts,
 * and never follows redirects.
 *
 * Secrets: request headers and bodies may hold tokens (the container's
 * Authorization, the web identity token) and response bodies hold keys;
 * none of them appears in an error, and cred_http_body_free() wipes the
 * response.  Errors name the method and the URL, which must not carry a
 * secret themselves (no caller puts one there).
 */
#ifndef BUCKETFS_CRED_HTTP_H
#define BUCKETFS_CRED_HTTP_H

#include <glib.h>

/* Bodies above this are refused: no credential answer is that large. */
#define CRED_HTTP_BODY_MAX (256 * 1024)

struct cred_http_request {
	const char *method; /* "GET", "PUT" or "POST" */
	const char *url;    /* http:// or https://, no secret in it */
	/* "Name: value" lines, NULL-terminated, or NULL; may hold secrets */
	const char *const *headers;
	const char *body; /* NULL for none; may hold secrets */
	gsize body_len;
	guint connect_timeout_ms; /* 0: the whole timeout */
	guint timeout_ms;	  /* the whole exchange; must be > 0 */
	const char *ca_file;	  /* NULL: the system's */
	/* The environment's proxy (https_proxy, no_proxy...) applies, as to
	 * S3's requests: for STS.  Off for the link-local metadata and
	 * container endpoints, which no proxy may stand before. */
	gboolean use_proxy;
};

/*
 * Performs @req (borrowed) and stores the HTTP status in *@status and the
 * body in a new string in *@body (free with cred_http_body_free()).  Any
 * status is a success here: the caller judges it.
 *
 * Errors (domain BFS_ERROR): the transfer failed, "PUT URL: curl 28
 * (Timeout was reached): Connection timed out after 1001 milliseconds
 * [os errno 110: Connection timed out]" with ETIMEDOUT for a timeout,
 * the OS errno when there is one (ECONNREFUSED...), else EIO; EFBIG for
 * a body over CRED_HTTP_BODY_MAX.  Any thread; blocks up to
 * @req->timeout_ms.
 */
gboolean cred_http_exchange(const struct cred_http_request *req, long *status,
			    GString **body, GError **error);

/* Wipes and frees a body from cred_http_exchange().  NULL is ignored. */
void cred_http_body_free(GString *body);

#endif
