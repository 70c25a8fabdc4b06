/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Multipart upload verbs: Create, UploadPart (async), Complete, Abort,
 * ListMultipartUploads.
 */
#include <string.h>

#include "error.h"
#include "log.h"
#include "s3_internal.h"
#include "sigv4.h"

static struct call *mpu_call(struct s3 *s3, enum call_kind kind,
			     const char *key, const char *upload_id, guint part)
{
	struct call *call = call_new(s3, kind, key);
	g_autoptr(GString) q = g_string_new(NULL);

	if (part)
		g_string_append_printf(q, "partNumber=%u", part);
	append_query(q, "uploadId", upload_id);
	if (kind == CALL_MPU_CREATE)
		g_string_append(q, "uploads=");
	call->query = g_string_free(g_steal_pointer(&q), FALSE);
	return call;
}

/* Signs @body's SHA-256 (@sha256, hex, if the caller has it) and sends
 * it with @req. */
static void mpu_set_body(struct call *call, struct http_request *req,
			 GBytes *body, const char *sha256)
{
	gsize len;
	const guchar *p = g_bytes_get_data(body, &len);

	call->payload_sha256 =
		sha256 ? g_strdup(sha256) : sigv4_payload_sha256(p, len);
	http_request_set_upload(req, body);
}

char *s3_mpu_create(struct s3 *s3, const char *key, GError **error)
{
	struct sync sync = { 0 };
	struct call *call = mpu_call(s3, CALL_MPU_CREATE, key, NULL, 0);
	g_autofree char *what = call_describe(s3, "CreateMultipartUpload", key);
	struct http_request *req = request_for(call, what, -1);
	g_autoptr(GBytes) empty = g_bytes_new_static("", 0);
	gboolean ok;

	g_ptr_array_add(call->sign_headers,
			g_strdup("Content-Type: application/octet-stream"));
	mpu_set_body(call, req, empty, NULL);
	/* A retry may leave a second upload behind: aborted by the tool
	 * that lists leftovers, never completed. */
	http_request_set_idempotent(req, TRUE);
	ok = run_sync(s3, call, req, &sync, error);
	s3_object_meta_clear(&sync.meta);
	if (!ok)
		return NULL;
	return sync.result;
}

void s3_mpu_part_async(struct s3 *s3, const char *key, const char *upload_id,
		       guint part, GBytes *body, const char *sha256,
		       struct http_cancel *cancel, s3_part_done_fn done,
		       void *user)
{
	struct call *call = mpu_call(s3, CALL_MPU_PART, key, upload_id, part);
	g_autofree char *what = NULL;
	struct http_request *req;

	what = g_strdup_printf("UploadPart %u of s3://%s/%s", part, s3->bucket,
			       key);
	req = request_for(call, what, -1);
	mpu_set_body(call, req, body, sha256);
	/* The same part number again replaces the part: harmless. */
	http_request_set_idempotent(req, TRUE);
	http_request_set_cancel(req, cancel);
	call->part_done = done;
	call->user = user;
	http_submit(s3->http, req);
}

gboolean s3_mpu_complete(struct s3 *s3, const char *key, const char *upload_id,
			 const char *const *etags, guint n, char **etag,
			 GError **error)
{
	struct sync sync = { 0 };
	struct call *call = mpu_call(s3, CALL_MPU_COMPLETE, key, upload_id, 0);
	g_autofree char *what =
		call_describe(s3, "CompleteMultipartUpload", key);
	struct http_request *req = request_for(call, what, -1);
	char *xml = s3_xml_complete_body(etags, n);
	g_autoptr(GBytes) body = g_bytes_new_take(xml, strlen(xml));
	gboolean ok;

	g_ptr_array_add(call->sign_headers,
			g_strdup("Content-Type: application/xml"));
	mpu_set_body(call, req, body, NULL);
	http_request_set_idempotent(req, TRUE);
	ok = run_sync(s3, call, req, &sync, error);
	s3_object_meta_clear(&sync.meta);
	if (etag)
		*etag = g_steal_pointer(&sync.result);
	g_free(sync.result);
	return ok;
}

gboolean s3_mpu_abort(struct s3 *s3, const char *key, const char *upload_id,
		      GError **error)
{
	struct sync sync = { 0 };
	struct call *call = mpu_call(s3, CALL_MPU_ABORT, key, upload_id, 0);
	g_autofree char *what = call_describe(s3, "AbortMultipartUpload", key);
	struct http_request *req = request_for(call, what, -1);
	gboolean ok;

	http_request_set_idempotent(req, TRUE);
	ok = run_sync(s3, call, req, &sync, error);
	s3_object_meta_clear(&sync.meta);
	return ok;
}

struct s3_uploads_page *s3_mpu_list(struct s3 *s3, const char *prefix,
				    const char *key_marker,
				    const char *upload_id_marker,
				    GError **error)
{
	struct sync sync = { 0 };
	struct call *call = call_new(s3, CALL_MPU_LIST, NULL);
	g_autofree char *what =
		call_describe(s3, "ListMultipartUploads", prefix);
	g_autoptr(GString) q = g_string_new(NULL);
	struct http_request *req;
	gboolean ok;

	append_query(q, "key-marker", key_marker);
	append_query(q, "prefix", prefix);
	append_query(q, "upload-id-marker", upload_id_marker);
	g_string_append_printf(q, "%suploads=", q->len ? "&" : "");
	call->query = g_string_free(g_steal_pointer(&q), FALSE);
	req = request_for(call, what, -1);
	ok = run_sync(s3, call, req, &sync, error);
	s3_object_meta_clear(&sync.meta);
	return ok ? sync.uploads : NULL;
}
