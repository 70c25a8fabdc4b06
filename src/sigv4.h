/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * sigv4.h - AWS Signature Version 4 for S3 requests (Authorization header).
 *
 * Pure functions: no I/O, no clock, no logging, no global state.  The
 * request time comes in as struct sigv4_request.unix_time, so every output
 * is a function of the inputs and can be tested against AWS's published
 * examples and against botocore.
 *
 * What is signed (see sigv4_canonical_request()):
 *
 *   METHOD
 *   path, verbatim (S3 paths are never normalized or re-encoded)
 *   the query, decoded and re-encoded per parameter, sorted
 *   host, x-amz-content-sha256, x-amz-date, [x-amz-security-token] and the
 *   caller's extra headers: lowercase names, trimmed values, sorted
 *   the signed header names joined by ';'
 *   the payload hash
 *
 * Secrets: the secret access key and the derived signing keys are only held
 * in buffers that are wiped (OPENSSL_cleanse) before they are freed, but
 * for one: each thread keeps its last signing key (valid for one day, one
 * region, one service) and a SHA-256 of the secret it came from, to sign
 * the next request without deriving the key again.  The
 * session token is part of the signed request and appears in the returned
 * x-amz-security-token header and in sigv4_canonical_request()'s output:
 * callers must not log those.  The Authorization header value carries no
 * secret, but it is still a credential for 15 minutes: do not log it either.
 *
 * All functions may be called from any thread; they share no state
 * between threads.
 */
#ifndef BUCKETFS_SIGV4_H
#define BUCKETFS_SIGV4_H

#include <glib.h>

/* The SHA-256 of the empty payload, lowercase hex. */
#define SIGV4_EMPTY_SHA256                                                     \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* The payload hash that tells S3 the body is not signed. */
#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

struct sigv4_credentials {
	const char *access_key_id;
	const char *secret_access_key;
	const char *session_token; /* NULL (or "") when none */
};

/*
 * One request to sign.  Everything is borrowed for the duration of the call.
 */
struct sigv4_request {
	/* "GET", "HEAD", "PUT", ...; used as given */
	const char *method;
	/* exactly the Host header value sent: "h" or "h:port" */
	const char *host;
	/*
	 * The path as sent on the wire, already URI-encoded (build it with
	 * sigv4_uri_encode(key, -1, TRUE)).  Must start with '/'.  It is the
	 * canonical URI verbatim: S3 signs the path without normalizing
	 * "//", "." or "..".
	 */
	const char *path;
	/*
	 * The raw query string as sent, without '?', in any order; NULL or ""
	 * for none.  Each "name=value" is percent-decoded and re-encoded with
	 * sigv4_uri_encode(, , FALSE), so the canonical form matches what S3
	 * computes however the caller encoded it.  Decoding treats '+' as a
	 * space (S3 decodes query strings that way) and keeps a '%' that is
	 * not followed by two hex digits as a literal '%'.  A parameter with
	 * no '=' has an empty value ("lifecycle" signs as "lifecycle=").
	 */
	const char *query;
	/*
	 * SHA-256 of the body in lowercase hex, or SIGV4_UNSIGNED_PAYLOAD;
	 * NULL means SIGV4_EMPTY_SHA256.
	 */
	const char *payload_sha256;
	/*
	 * Extra headers to sign, "Name: value" each, NULL-terminated; the
	 * array itself may be NULL.  E.g. "Range: bytes=0-9",
	 * "If-Match: \"etag\"".  Names are compared case-insensitively;
	 * repeated names are joined with ',' in the order given.  Must not
	 * name host, authorization, x-amz-date, x-amz-content-sha256 or
	 * x-amz-security-token: those are sigv4's own.
	 */
	const char *const *headers;
	const char *region;  /* "us-east-1" */
	const char *service; /* "s3" */
	/* request time, seconds since the epoch, in 1970..9999 */
	gint64 unix_time;
};

/*
 * Signs @req with @creds.
 *
 * Returns a newly allocated NULL-terminated strv (free with g_strfreev()) of
 * the headers the caller must add to the request, "Name: value" each, in
 * this order:
 *
 *   x-amz-date: 20130524T000000Z
 *   x-amz-content-sha256: <payload hash>
 *   x-amz-security-token: <token>        (only with a session token)
 *   Authorization: AWS4-HMAC-SHA256 Credential=AK/20130524/REGION/SERVICE/
 *     aws4_request, SignedHeaders=a;b;c, Signature=<64 hex>
 *
 * (The Authorization value is one line; ", " separates its parts, as the
 * AWS SDKs send it.)  The host header and the extra headers must be sent
 * exactly as given in @req.  Since the strv holds the session token and
 * the signature, wipe it or at least never log it.
 *
 * Any thread.  No errors: a malformed @req (NULL field, path without a
 * leading '/', an extra header without ':' or with a reserved name) is a
 * programming error, reported by g_return_val_if_fail() with NULL.
 */
char **sigv4_sign(const struct sigv4_credentials *creds,
		  const struct sigv4_request *req);

/*
 * The SHA-256 of the @len bytes at @data (NULL with @len 0: none), in
 * lower-case hex: a payload's x-amz-content-sha256.  OpenSSL's, which
 * uses the CPU's SHA instructions: about ten times GLib's GChecksum on
 * parts of megabytes.  Returns a newly allocated string (g_free()).  Any
 * thread.  No errors.
 */
char *sigv4_payload_sha256(const void *data, gsize len);

/*
 * AWS URI encoding of the @len bytes at @s (@len -1: @s is NUL-terminated).
 * The unreserved bytes A-Z a-z 0-9 - . _ ~ are kept; every other byte,
 * including each byte of a UTF-8 sequence, becomes %XX with uppercase hex;
 * '/' is kept if and only if @keep_slash (TRUE for object key paths, FALSE
 * for query names and values).
 *
 * Returns a newly allocated string (g_free()).  Any thread.  No errors.
 */
char *sigv4_uri_encode(const char *s, gssize len, gboolean keep_slash);

/*
 * The canonical request of @req, as AWS documents it (lines joined by '\n',
 * no trailing newline).  @creds is only read for its session token, which
 * becomes the signed x-amz-security-token header; it may be NULL (no
 * token).  If @signed_headers_out is not NULL it receives the SignedHeaders
 * list ("host;range;x-amz-content-sha256;x-amz-date"), newly allocated.
 *
 * For tests and for reporting SignatureDoesNotMatch: compare with the
 * <CanonicalRequest> S3 sends back.  It may hold the session token: never
 * log it whole.
 *
 * Returns a newly allocated string (g_free()).  Any thread.  Malformed @req
 * as for sigv4_sign(): NULL.
 */
char *sigv4_canonical_request(const struct sigv4_request *req,
			      const struct sigv4_credentials *creds,
			      char **signed_headers_out);

/*
 * The string to sign for @canonical_request, with the time, region and
 * service of @req:
 *
 *   AWS4-HMAC-SHA256
 *   20130524T000000Z
 *   20130524/us-east-1/s3/aws4_request
 *   <hex SHA-256 of canonical_request>
 *
 * Holds no secret; compare with the <StringToSign> of SignatureDoesNotMatch.
 * Returns a newly allocated string (g_free()).  Any thread.  No errors
 * (NULL with g_return_val_if_fail() on NULL arguments).
 */
char *sigv4_string_to_sign(const struct sigv4_request *req,
			   const char *canonical_request);

#endif
