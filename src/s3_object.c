/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Object verbs: GET (async, blocking, to a file descriptor), HEAD, PUT,
 * DELETE, and s3:// object URLs.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "log.h"
#include "s3_internal.h"
#include "sigv4.h"

/* -- GET, HEAD ---------------------------------------------------------- */

static struct http_request *get_request(struct s3 *s3, const char *key,
					const struct s3_get_args *args,
					struct call **call_out)
{
	struct call *call = call_new(s3, CALL_GET, key);
	g_autofree char *what = NULL;
	struct http_request *req;

	call->offset = args ? args->offset : 0;
	call->length = args ? args->length : 0;
	call->ranged = call->offset > 0 || call->length > 0;
	if (call->ranged) {
		if (call->length)
			g_ptr_array_add(
				call->sign_headers,
				g_strdup_printf(
					"Range: bytes=%" PRIu64 "-%" PRIu64,
					call->offset,
					call->offset + call->length - 1));
		else
			g_ptr_array_add(call->sign_headers,
					g_strdup_printf("Range: bytes=%" PRIu64
							"-",
							call->offset));
	}
	if (args && args->if_match) {
		call->if_match = g_strdup(args->if_match);
		g_ptr_array_add(
			call->sign_headers,
			g_strdup_printf("If-Match: \"%s\"", args->if_match));
	}
	what = call_describe(s3, "GET", key);
	req = request_for(call, what, args ? args->endpoint : -1);
	if (call->length)
		http_request_set_body_limit(req, call->length, call->length);
	if (args && args->hedge)
		http_request_set_hedge(req, TRUE);
	if (args && args->quick_done)
		http_request_set_quick_done(req, TRUE);
	if (args && args->shareable)
		http_request_set_shareable(req, TRUE);
	*call_out = call;
	return req;
}

void s3_get_async(struct s3 *s3, const char *key,
		  const struct s3_get_args *args, s3_get_done_fn done,
		  void *user)
{
	struct call *call;
	struct http_request *req = get_request(s3, key, args, &call);

	call->get_done = done;
	call->user = user;
	http_submit(s3->http, req);
}

GBytes *s3_get(struct s3 *s3, const char *key, const struct s3_get_args *args,
	       struct s3_object_meta *meta, GError **error)
{
	struct sync sync = { 0 };
	struct call *call;
	struct http_request *req = get_request(s3, key, args, &call);
	gboolean ok = run_sync(s3, call, req, &sync, error);

	if (meta)
		meta_move(meta, &sync.meta);
	s3_object_meta_clear(&sync.meta);
	if (!ok)
		return NULL;
	return sync.data;
}

gboolean s3_head(struct s3 *s3, const char *key, int endpoint,
		 struct s3_object_meta *meta, GError **error)
{
	struct sync sync = { 0 };
	struct call *call = call_new(s3, CALL_HEAD, key);
	g_autofree char *what = call_describe(s3, "HEAD", key);
	struct http_request *req = request_for(call, what, endpoint);
	gboolean ok = run_sync(s3, call, req, &sync, error);

	if (meta)
		meta_move(meta, &sync.meta);
	s3_object_meta_clear(&sync.meta);
	return ok;
}

/* -- PUT, DELETE ------------------------------------------------------- */

gboolean s3_put(struct s3 *s3, const char *key, GBytes *body,
		const char *content_type, struct s3_object_meta *meta,
		GError **error)
{
	struct sync sync = { 0 };
	struct call *call = call_new(s3, CALL_PUT, key);
	g_autofree char *what = call_describe(s3, "PUT", key);
	struct http_request *req;
	gsize len;
	const guchar *p = g_bytes_get_data(body, &len);
	gboolean ok;

	g_return_val_if_fail(key && *key && body, FALSE);
	/* Hashed once here, not per attempt on the event thread: bodies may
	 * be gigabytes.  A signed payload also lets the server reject a body
	 * damaged on the way. */
	call->payload_sha256 = sigv4_payload_sha256(p, len);
	g_ptr_array_add(call->sign_headers,
			g_strdup_printf("Content-Type: %s",
					content_type ? content_type
						     : "application/"
						       "octet-stream"));
	req = request_for(call, what, -1);
	http_request_set_upload(req, body);
	/* Putting the same bytes twice is harmless: retry like a GET. */
	http_request_set_idempotent(req, TRUE);
	ok = run_sync(s3, call, req, &sync, error);
	if (ok)
		sync.meta.size = len;
	if (meta)
		meta_move(meta, &sync.meta);
	s3_object_meta_clear(&sync.meta);
	return ok;
}

gboolean s3_delete(struct s3 *s3, const char *key, struct s3_object_meta *meta,
		   GError **error)
{
	struct sync sync = { 0 };
	struct call *call = call_new(s3, CALL_DELETE, key);
	g_autofree char *what = call_describe(s3, "DELETE", key);
	struct http_request *req;
	gboolean ok;

	g_return_val_if_fail(key && *key, FALSE);
	req = request_for(call, what, -1);
	http_request_set_idempotent(req, TRUE);
	ok = run_sync(s3, call, req, &sync, error);
	if (meta)
		meta_move(meta, &sync.meta);
	s3_object_meta_clear(&sync.meta);
	return ok;
}

/* Writes all of @data to @fd at @offset. */
static gboolean pwrite_all(int fd, GBytes *data, guint64 offset, GError **error)
{
	gsize len, done = 0;
	const char *p = g_bytes_get_data(data, &len);

	while (done < len) {
		ssize_t n = pwrite(fd, p + done, len - done,
				   (off_t)(offset + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			g_set_error(error, BFS_ERROR, e,
				    "writing at byte %" PRIu64 ": %s",
				    offset + done, g_strerror(e));
			return FALSE;
		}
		done += (gsize)n;
	}
	return TRUE;
}

gboolean s3_get_to_fd(struct s3 *s3, const char *key, guint64 size,
		      const char *etag, guint64 part_size, int fd,
		      s3_progress_fn progress, void *user, GError **error)
{
	guint64 off = 0;

	g_return_val_if_fail(key && etag && fd >= 0, FALSE);
	if (!part_size)
		part_size = S3_DEFAULT_PART_SIZE;
	while (off < size) {
		struct s3_get_args a = {
			.offset = off,
			.length = MIN(part_size, size - off),
			.if_match = etag,
			.endpoint = -1,
		};
		g_autoptr(GBytes) b = s3_get(s3, key, &a, NULL, error);

		if (!b)
			return FALSE;
		if (g_bytes_get_size(b) != a.length) {
			g_set_error(error, BFS_ERROR, EIO,
				    "GET s3://%s/%s: %" G_GSIZE_FORMAT
				    " bytes at offset %" PRIu64 " instead of "
				    "%" PRIu64 " (the object is shorter than "
				    "its HEAD said)",
				    s3->bucket, key, g_bytes_get_size(b), off,
				    a.length);
			return FALSE;
		}
		if (!pwrite_all(fd, b, off, error))
			return FALSE;
		off += a.length;
		if (progress)
			progress(off, size, user);
	}
	return TRUE;
}

/* Bucket names as config_parse_url() takes them: loosely. */
static gboolean bucket_name_ok(const char *b, gsize len)
{
	gsize i;

	if (len < 3 || len > 63)
		return FALSE;
	for (i = 0; i < len; i++)
		if (!g_ascii_isalnum(b[i]) && b[i] != '.' && b[i] != '-' &&
		    b[i] != '_')
			return FALSE;
	return TRUE;
}

gboolean s3_parse_object_url(const char *url, char **bucket, char **key,
			     GError **error)
{
	g_autofree char *u = log_escape(url ? url : "", -1);
	const char *rest, *slash;

	if (!url || g_ascii_strncasecmp(url, "s3://", 5) != 0)
		goto bad;
	rest = url + 5;
	slash = strchr(rest, '/');
	if (!slash || !bucket_name_ok(rest, slash - rest) || !slash[1] ||
	    g_str_has_suffix(slash + 1, "/") ||
	    !g_utf8_validate(slash + 1, -1, NULL) || strlen(slash + 1) > 1024)
		goto bad;
	*bucket = g_strndup(rest, slash - rest);
	*key = g_strdup(slash + 1);
	return TRUE;
bad:
	g_set_error(error, BFS_ERROR, EINVAL,
		    "'%s': expected s3://BUCKET/KEY (an object: a key that "
		    "is not empty and does not end with '/')",
		    u);
	return FALSE;
}
