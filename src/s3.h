/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * s3.h - S3 verbs on top of the HTTP engine: GetObject, HeadObject,
 * PutObject, DeleteObject, ListObjectsV2, multipart upload, signed with
 * SigV4, errors parsed from S3's XML.
 *
 * This is the only module that turns HTTP statuses and S3 error codes into
 * errno values:
 *
 *   404 NoSuchKey/NoSuchBucket -> ENOENT     403 (any)          -> EACCES
 *   412 PreconditionFailed     -> ESTALE     416 InvalidRange   -> EINVAL
 *   400 RequestTimeout, 5xx, 429: retried; when attempts run out -> EIO
 *   (ETIMEDOUT for RequestTimeout), other 4xx -> EINVAL, 3xx -> EIO with
 *   the region or endpoint the server names (redirects are never followed)
 *   a response that contradicts the request (Content-Range, Content-Length,
 *   ETag): retried, then EIO; malformed listing XML -> EPROTO.
 *
 * Every error message is the whole cause chain, for example:
 *   GET s3://ds/train/a.jpeg via http://10.0.0.7:9000 (attempt 10/10,
 *   31.2 s): HTTP 503 SlowDown: Please reduce your request rate.
 *   (RequestId: 4442587FB7D0A2F9)
 *
 * Keys are full object keys (any prefix included), raw bytes.  They are
 * URI-encoded once into the request path and never normalized.
 */
#ifndef BUCKETFS_S3_H
#define BUCKETFS_S3_H

#include <glib.h>

#include "config.h"
#include "s3_xml.h"

struct s3;
struct http_cancel;

/* What a response said about an object or the server.  Plain data. */
struct s3_object_meta {
	guint64 size;	    /* the whole object's size */
	gint64 mtime;	    /* Last-Modified, seconds since epoch, or 0 */
	char *etag;	    /* without quotes, NULL if absent */
	char *request_id;   /* x-amz-request-id, NULL if absent */
	gint64 server_date; /* the Date header, seconds, or 0 */
	long status;	    /* HTTP status of the final response */
	char *endpoint;	    /* URL of the endpoint that answered */
};

void s3_object_meta_clear(struct s3_object_meta *meta);

/*
 * A client for cfg->bucket over cfg->endpoints, with the credentials that
 * cfg selects (fetched now, then kept fresh by cred_refresh.h's thread).  @cfg
 * must have passed config_finish(); it is copied.  Errors: those of
 * cred_chain_resolve() and http_new(), EINVAL for virtual-hosted addressing on
 * an IP-literal endpoint.  Any thread.
 */
struct s3 *s3_new(const struct config *cfg, GError **error);

/*
 * The same, for @bucket (copied) instead of cfg->bucket: same endpoints,
 * region, addressing and credentials.  For an object kept in another
 * bucket than the one mounted (a published index, see bucketfs-index(1)).
 */
struct s3 *s3_new_for_bucket(const struct config *cfg, const char *bucket,
			     GError **error);

/*
 * Cancels what is in flight or queued (ECANCELED) and makes every later
 * call fail at once with ECANCELED; @s3 stays valid until s3_free().
 * For a shutdown that must not wait on the network.  Not from a callback.
 */
void s3_shutdown(struct s3 *s3);

/* Cancels what is in flight (ECANCELED) and frees.  Not from a callback. */
void s3_free(struct s3 *s3);

/* The bucket name and where the credentials came from.  Borrowed. */
const char *s3_bucket(const struct s3 *s3);
const char *s3_credentials_source(const struct s3 *s3);

/* The HTTP engine, for its counters.  Borrowed until s3_free(). */
struct http *s3_get_http(struct s3 *s3);

/* The endpoints, as configured.  Borrowed; NULL-terminated. */
const char *const *s3_endpoints(const struct s3 *s3);

struct s3_get_args {
	guint64 offset;	      /* first byte */
	guint64 length;	      /* bytes wanted; 0 = to the end */
	const char *if_match; /* ETag (unquoted) the object must have */
	int endpoint;	      /* index to pin every attempt to, or -1 */
	gboolean hedge;	      /* may be duplicated on another endpoint when
			       * slow (small objects only, see http.h) */
	gboolean quick_done;  /* done() is short and never blocks: on
			       * success it runs on the HTTP event thread
			       * (http_request_set_quick_done()) */
	gboolean shareable;   /* the bytes may be lent to the kernel as a
			       * file (http_request_set_shareable()) */
};

/*
 * Called once when a GET ends, on an HTTP done thread (see http.h), or on
 * its event thread for a quick_done GET that succeeded; it must not block.  On
 * success @data holds exactly the bytes asked for (fewer only at the end of the
 * object) and @error is NULL; on failure @data is NULL.
 * @data and @meta are borrowed for the call; take a ref to keep @data.
 */
typedef void (*s3_get_done_fn)(GBytes *data, const struct s3_object_meta *meta,
			       const GError *error, void *user);

/* Starts a GET of @key (copied).  Any thread; returns at once. */
void s3_get_async(struct s3 *s3, const char *key,
		  const struct s3_get_args *args, s3_get_done_fn done,
		  void *user);

/*
 * Blocking GET.  Returns the bytes (owned by the caller) and fills @meta
 * if not NULL (clear it with s3_object_meta_clear()).  Any thread except
 * the HTTP engine's own.
 */
GBytes *s3_get(struct s3 *s3, const char *key, const struct s3_get_args *args,
	       struct s3_object_meta *meta, GError **error);

/* Blocking HEAD of @key; @endpoint pins it (-1: any).  Fills @meta. */
gboolean s3_head(struct s3 *s3, const char *key, int endpoint,
		 struct s3_object_meta *meta, GError **error);

/*
 * Blocking PutObject of @body (referenced while in flight) as @key.  The
 * payload's SHA-256 is signed (x-amz-content-sha256), Content-Length is
 * the body's size and Content-Type @content_type (NULL:
 * application/octet-stream).  One request: S3 takes up to 5 GiB that way
 * (larger bodies fail with the server's EntityTooLarge, EINVAL).  Fills
 * @meta (the new ETag, request id; size = the body's) if not NULL.
 * Errors as for GET.  Any thread except the HTTP engine's own.
 */
gboolean s3_put(struct s3 *s3, const char *key, GBytes *body,
		const char *content_type, struct s3_object_meta *meta,
		GError **error);

/*
 * Blocking DeleteObject of @key.  S3 answers 204 whether or not the key
 * existed; a server that answers 404 gives ENOENT.  Fills @meta if not
 * NULL.  Errors as for GET.  Any thread except the HTTP engine's own.
 */
gboolean s3_delete(struct s3 *s3, const char *key, struct s3_object_meta *meta,
		   GError **error);

/* The part size of s3_get_to_fd() when 0 is given: 16 MiB. */
#define S3_DEFAULT_PART_SIZE ((guint64)16 << 20)

/* Progress of s3_get_to_fd(): bytes written so far, of @total. */
typedef void (*s3_progress_fn)(guint64 done, guint64 total, void *user);

/*
 * Downloads the @size bytes of @key, which must still have ETag @etag
 * (from a HEAD: every part is a GET with If-Match, so a replaced object
 * gives ESTALE, never a mix of two versions), into @fd from offset 0 with
 * pwrite(), @part_size bytes per GET (0: S3_DEFAULT_PART_SIZE), one part
 * after the other.  @progress (may be NULL) is called after each part on
 * the calling thread.  Nothing is truncated, synced or closed.  Errors:
 * those of GET; EIO for a part shorter than asked; the errno of a failed
 * pwrite().  Blocking; any thread except the HTTP engine's own.
 */
gboolean s3_get_to_fd(struct s3 *s3, const char *key, guint64 size,
		      const char *etag, guint64 part_size, int fd,
		      s3_progress_fn progress, void *user, GError **error);

/*
 * Splits "s3://BUCKET/KEY" (scheme case insensitive) into newly allocated
 * @bucket and @key (g_free both).  The key is taken verbatim (not
 * percent-decoded) and must be a non-empty UTF-8 object key of at most
 * 1024 bytes not ending with '/'; the bucket is checked as
 * config_parse_url() does.  Errors: EINVAL naming the URL.  Pure; any
 * thread.
 */
gboolean s3_parse_object_url(const char *url, char **bucket, char **key,
			     GError **error);

struct s3_list_args {
	const char *prefix;    /* NULL = whole bucket */
	const char *delimiter; /* NULL = none */
	const char *continuation_token;
	const char *start_after;
	guint max_keys;		  /* 0 = server default (1000) */
	gboolean no_url_encoding; /* don't send encoding-type=url */
	int endpoint;		  /* pin, or -1 */
	gboolean probe;		  /* an answer that does not parse fails at once
				   * (EPROTO) instead of being retried */
};

/*
 * One blocking ListObjectsV2 page.  Returns the page (free with
 * s3_list_page_free()); fills @meta (request id, server date) if not NULL.
 */
struct s3_list_page *s3_list(struct s3 *s3, const struct s3_list_args *args,
			     struct s3_object_meta *meta, GError **error);

/*
 * Receives each page of s3_list_all() in order; the page is borrowed (steal
 * its arrays' elements if needed).  Return FALSE with @error set to stop.
 */
typedef gboolean (*s3_list_fn)(struct s3_list_page *page, void *user,
			       GError **error);

/*
 * Lists every page from @args on, following continuation tokens, going on
 * through pages that are empty but truncated.  Fails with EPROTO when a
 * continuation token repeats or a truncated page has none.  Blocking.
 */
gboolean s3_list_all(struct s3 *s3, const struct s3_list_args *args,
		     s3_list_fn fn, void *user, GError **error);

/*
 * Multipart upload (upload.h drives it).  Each call is one request with
 * the engine's retries (all of them idempotent: a part sent twice
 * replaces itself, an abort or complete repeated is answered 404
 * NoSuchUpload, ENOENT).  Errors as for PUT; Complete also fails when a
 * 200 carries an <Error> (EINVAL, or retried for InternalError).
 */

/* CreateMultipartUpload of @key: its UploadId (g_free), or NULL.
 * Blocking; any thread except the HTTP engine's own. */
char *s3_mpu_create(struct s3 *s3, const char *key, GError **error);

/*
 * Called once when an UploadPart ends, on an HTTP done thread; must not
 * block.  @etag (borrowed) is the part's, @error NULL, or @etag NULL and
 * @error the whole cause chain.
 */
typedef void (*s3_part_done_fn)(const char *etag, const GError *error,
				void *user);

/* Starts UploadPart @part (1..10000) of @body (referenced while in
 * flight), its SHA-256 signed: @sha256 (hex, copied) if the caller has
 * computed it (sigv4_payload_sha256()), else computed here, on the
 * caller's thread.  @cancel (may be NULL; referenced): once set, the
 * part ends with ECANCELED, unsent if it has not started (http.h).  Any
 * thread; returns at once. */
void s3_mpu_part_async(struct s3 *s3, const char *key, const char *upload_id,
		       guint part, GBytes *body, const char *sha256,
		       struct http_cancel *cancel, s3_part_done_fn done,
		       void *user);

/* CompleteMultipartUpload of parts 1..@n with ETags @etags; the object's
 * new ETag in *@etag (g_free; may be NULL) if @etag is not NULL.
 * Blocking. */
gboolean s3_mpu_complete(struct s3 *s3, const char *key, const char *upload_id,
			 const char *const *etags, guint n, char **etag,
			 GError **error);

/* AbortMultipartUpload.  Blocking. */
gboolean s3_mpu_abort(struct s3 *s3, const char *key, const char *upload_id,
		      GError **error);

/* One ListMultipartUploads page of the uploads under @prefix (NULL: all),
 * after the markers (NULL: from the start).  Free with
 * s3_uploads_page_free().  Blocking. */
struct s3_uploads_page *s3_mpu_list(struct s3 *s3, const char *prefix,
				    const char *key_marker,
				    const char *upload_id_marker,
				    GError **error);

#endif
