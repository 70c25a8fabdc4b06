/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * S3 responses judged on the HTTP event thread: errors to errno (here
 * and nowhere else), transient or final, expired credentials renewed, Range
 * and body checks, and the multipart answers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "cred_refresh.h"
#include "credentials.h"
#include "error.h"
#include "http_date.h"
#include "log.h"
#include "s3_internal.h"

void s3_object_meta_clear(struct s3_object_meta *meta)
{
	g_clear_pointer(&meta->etag, g_free);
	g_clear_pointer(&meta->request_id, g_free);
	g_clear_pointer(&meta->endpoint, g_free);
	memset(meta, 0, sizeof(*meta));
}

/* -- judging responses -------------------------------------------------- */

static void meta_from_response(struct s3_object_meta *meta,
			       const struct http_response *resp)
{
	const char *v;

	s3_object_meta_clear(meta);
	meta->status = resp->status;
	meta->endpoint = g_strdup(resp->endpoint->url);
	meta->request_id =
		g_strdup(http_response_header(resp, "x-amz-request-id"));
	v = http_response_header(resp, "etag");
	if (v) {
		gsize n = strlen(v);

		if (n >= 2 && v[0] == '"' && v[n - 1] == '"')
			meta->etag = g_strndup(v + 1, n - 2);
		else
			meta->etag = g_strdup(v);
	}
	v = http_response_header(resp, "last-modified");
	if (v)
		meta->mtime = MAX(0, http_date_parse(v));
	v = http_response_header(resp, "date");
	if (v)
		meta->server_date = MAX(0, http_date_parse(v));
	v = http_response_header(resp, "content-length");
	if (v)
		meta->size = g_ascii_strtoull(v, NULL, 10);
}

static gboolean code_is_expired(const char *code)
{
	return code && (!strcmp(code, "ExpiredToken") ||
			!strcmp(code, "TokenRefreshRequired"));
}

static int errno_for(long status, const char *code)
{
	if (code && !strcmp(code, "RequestTimeout"))
		return ETIMEDOUT;
	if (code_is_expired(code))
		return EACCES;
	if (status == 404)
		return ENOENT;
	if (status == 403)
		return EACCES;
	if (status == 412)
		return ESTALE;
	if (status == 416)
		return EINVAL;
	if (status >= 400 && status < 500 && status != 429)
		return EINVAL;
	return EIO;
}

static gboolean status_is_transient(long status, const char *code)
{
	if (status >= 500 || status == 429)
		return status != 501;
	return code && !strcmp(code, "RequestTimeout");
}

/*
 * S3 gives RequestTime as the request's X-Amz-Date, "20190405T161530Z",
 * and ServerTime as "2019-04-05T16:46:35Z": either form.
 */
static gboolean parse_s3_time(const char *s, gint64 *out)
{
	char ext[32];

	if (s3_xml_parse_time(s, out))
		return TRUE;
	if (strlen(s) != 16 || s[8] != 'T' || s[15] != 'Z')
		return FALSE;
	g_snprintf(ext, sizeof(ext), "%.4s-%.2s-%.2sT%.2s:%.2s:%.2sZ", s, s + 4,
		   s + 6, s + 9, s + 11, s + 13);
	return s3_xml_parse_time(ext, out);
}

/* The skew an S3 RequestTimeTooSkewed error implies, in seconds. */
static void append_skew(GString *msg, const struct s3_error_info *info)
{
	gint64 server, request;

	if (!info->server_time || !info->request_time ||
	    !parse_s3_time(info->server_time, &server) ||
	    !parse_s3_time(info->request_time, &request))
		return;
	g_string_append_printf(msg,
			       " [clock skew %+" G_GINT64_FORMAT
			       " s: server time %s, our request time %s; "
			       "fix this host's clock (NTP)]",
			       request - server, info->server_time,
			       info->request_time);
}

/*
 * The canonical request a server sends back with SignatureDoesNotMatch,
 * with the session token's value cut out: a log line must not carry it.
 */
static char *redact_token(const char *cr)
{
	g_auto(GStrv) lines = g_strsplit(cr, "\n", -1);
	guint i;

	for (i = 0; lines[i]; i++) {
		if (g_ascii_strncasecmp(lines[i], "x-amz-security-token:", 21))
			continue;
		g_free(lines[i]);
		lines[i] = g_strdup("x-amz-security-token:(redacted)");
	}
	return g_strjoinv("\n", lines);
}

/* Detail S3 attaches to some errors, worth a clause of its own. */
static void append_error_detail(GString *msg, const struct s3_error_info *info,
				const struct http_response *resp)
{
	const char *region = info->region;

	if (!region)
		region = http_response_header(resp, "x-amz-bucket-region");
	if (info->endpoint)
		g_string_append_printf(msg,
				       " [the bucket must be addressed "
				       "through endpoint '%s']",
				       info->endpoint);
	if (region)
		g_string_append_printf(msg,
				       " [the bucket is in region '%s'; "
				       "use -o region=%s]",
				       region, region);
	if (resp->status >= 300 && resp->status < 400) {
		const char *loc = http_response_header(resp, "location");

		g_string_append_printf(msg, " [redirect%s%s not followed]",
				       loc ? " to " : "", loc ? loc : "");
	}
	if (info->code && !strcmp(info->code, "RequestTimeTooSkewed"))
		append_skew(msg, info);
	if (info->code && !strcmp(info->code, "SignatureDoesNotMatch") &&
	    info->canonical_request) {
		g_autofree char *red = redact_token(info->canonical_request);
		g_autofree char *cr = log_escape(red, -1);

		g_string_append_printf(msg, " [server's canonical request: %s]",
				       cr);
	}
}

/*
 * The server refused @used as expired: fetch new credentials now, unless
 * another request or the refresher already did.  TRUE when a retry will
 * sign with other credentials.  Event thread (cred_refresh.h: it blocks
 * only to read static keys again).
 */
static gboolean renew_credentials(struct s3 *s3, const struct credentials *used,
				  GError **error)
{
	return cred_refresh_renew(s3->creds, used, error);
}

/*
 * A HEAD answered 400 with no body, signed with temporary credentials: S3
 * says nothing more, and that is what an expired token looks like there
 * (a GET or LIST of the same moment would say ExpiredToken).
 */
static gboolean head_maybe_expired(const struct call *call,
				   const struct http_response *resp,
				   const struct credentials *used)
{
	return call->kind == CALL_HEAD && resp->status == 400 &&
	       resp->body->len == 0 && used && used->session_token;
}

static gboolean nonempty(const char *s)
{
	return s && *s;
}

/*
 * "HTTP 503 SlowDown: Please reduce your request rate. (RequestId: X)".
 * HEAD responses have no body, so for them the status alone must speak.
 */
static enum http_verdict
judge_error(struct call *call, const struct http_response *resp, GError **error)
{
	struct s3_error_info info = { 0 };
	g_autoptr(GString) msg = g_string_new(NULL);
	const char *rid = http_response_header(resp, "x-amz-request-id");
	const struct credentials *used = resp->tag; /* this attempt's */
	gboolean parsed = FALSE;
	int code;

	g_string_printf(msg, "HTTP %ld", resp->status);
	if (resp->body->len > 0 && call->kind != CALL_HEAD) {
		g_autoptr(GError) perr = NULL;

		parsed = s3_xml_parse_error((const char *)resp->body->data,
					    resp->body->len, &info, &perr);
		if (!parsed)
			g_string_append_printf(msg,
					       " (error body unreadable: "
					       "%s)",
					       perr->message);
	}
	/* Ceph RGW sends an empty <Message>, and a body may name no code:
	 * then the status speaks, as for a body-less reply. */
	if (parsed && info.request_id && *info.request_id)
		rid = info.request_id;
	if (parsed && nonempty(info.code)) {
		g_string_append_printf(msg, " %s", info.code);
		if (nonempty(info.message))
			g_string_append_printf(msg, ": %s", info.message);
	} else if (parsed && nonempty(info.message)) {
		g_string_append_printf(msg, ": %s", info.message);
	} else if (resp->status == 404) {
		g_string_append(msg, " Not Found (no such key or bucket)");
	} else if (resp->status == 403) {
		g_string_append(msg,
				" Forbidden (access denied, unknown "
				"access key or bad signature; a HEAD response "
				"carries no reason: bucketfs-doctor shows it)");
	} else if (resp->status == 412) {
		g_string_append(msg, " Precondition Failed");
	} else if (head_maybe_expired(call, resp, used)) {
		g_string_append(msg,
				" Bad Request (a HEAD response carries no "
				"reason; with temporary credentials, taken as "
				"ExpiredToken)");
		info.code = g_strdup("ExpiredToken");
	}
	append_error_detail(msg, &info, resp);
	if (rid)
		g_string_append_printf(msg, " (RequestId: %s)", rid);
	code = errno_for(resp->status, info.code);
	if (code_is_expired(info.code)) {
		g_autoptr(GError) rerr = NULL;
		gboolean renewed = renew_credentials(call->s3, used, &rerr);

		if (!renewed)
			g_string_append_printf(msg, " [%s]", rerr->message);
		g_set_error_literal(error, BFS_ERROR, code, msg->str);
		s3_error_info_clear(&info);
		return renewed ? HTTP_VERDICT_RETRY : HTTP_VERDICT_FAIL;
	}
	g_set_error_literal(error, BFS_ERROR, code, msg->str);
	{
		gboolean transient =
			status_is_transient(resp->status, info.code);

		s3_error_info_clear(&info);
		return transient ? HTTP_VERDICT_RETRY : HTTP_VERDICT_FAIL;
	}
}

/* Parses "bytes FIRST-LAST/TOTAL". */
static gboolean parse_content_range(const char *v, guint64 *first,
				    guint64 *last, guint64 *total)
{
	char *end;

	if (!v || strncmp(v, "bytes ", 6) != 0)
		return FALSE;
	v += 6;
	if (!g_ascii_isdigit(*v))
		return FALSE;
	*first = g_ascii_strtoull(v, &end, 10);
	if (*end != '-' || !g_ascii_isdigit(end[1]))
		return FALSE;
	*last = g_ascii_strtoull(end + 1, &end, 10);
	if (*end != '/' || !g_ascii_isdigit(end[1]))
		return FALSE;
	*total = g_ascii_strtoull(end + 1, &end, 10);
	return *end == '\0' && *first <= *last && *last < *total;
}

static G_GNUC_PRINTF(2, 3) enum http_verdict
	bad_response(GError **error, const char *fmt, ...)
{
	va_list ap;
	g_autofree char *msg = NULL;

	va_start(ap, fmt);
	msg = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	g_set_error_literal(error, BFS_ERROR, EIO, msg);
	return HTTP_VERDICT_RETRY;
}

/*
 * A 200 to a ranged GET: the server ignored the Range (RFC 9110 allows
 * it) and sent the whole object, whose length the caller's check of
 * Content-Length has confirmed.  It holds any range of the object: the
 * bytes wanted are cut out of it, and the quirk is logged once.  A body
 * that does not reach the range (an object shorter than the index says)
 * is tried once more, elsewhere if there is another endpoint; then it
 * fails: no retry can change it.
 */
static enum http_verdict judge_range_ignored(struct call *call,
					     const struct http_response *resp,
					     GError **error)
{
	guint64 len = resp->body->len;
	guint64 end =
		call->length ? MIN(call->offset + call->length, len) : len;

	if (call->offset >= len) {
		g_set_error(error, BFS_ERROR, EIO,
			    "HTTP 200 to GET with Range bytes=%" PRIu64
			    "-%s: the server ignored the Range and its "
			    "whole object of %" PRIu64
			    " bytes does not reach the range",
			    call->offset, call->length ? "…" : "", len);
		return call->range_ignored++ ? HTTP_VERDICT_FAIL
					     : HTTP_VERDICT_RETRY;
	}
	if (g_atomic_int_compare_and_exchange(&call->s3->range_quirk_logged, 0,
					      1)) {
		g_autofree char *k = log_escape(call->key ? call->key : "", -1);
		g_autofree char *last =
			call->length ? g_strdup_printf("%" PRIu64,
						       call->offset +
							       call->length - 1)
				     : g_strdup("");

		log_msg(LOG_LEVEL_NOTICE,
			"%s ignores Range: HTTP 200 with the whole object "
			"(%" PRIu64
			" bytes) to GET s3://%s/%s with Range bytes=%" PRIu64
			"-%s; the bytes wanted are taken from it (logged once)",
			resp->endpoint->url, len, call->s3->bucket, k,
			call->offset, last);
	}
	bufpool_buf_cut(resp->body, call->offset, end - call->offset);
	call->meta.size = len;
	return HTTP_VERDICT_DONE;
}

/* Whether @resp's body had chunked framing (its end is known). */
static gboolean framed(const struct http_response *resp)
{
	const char *te = http_response_header(resp, "transfer-encoding");

	return te && g_ascii_strcasecmp(te, "identity") != 0;
}

/* A 2xx GET must carry exactly the bytes asked for. */
static enum http_verdict judge_get_body(struct call *call,
					const struct http_response *resp,
					GError **error)
{
	const char *cl = http_response_header(resp, "content-length");
	const char *cr = http_response_header(resp, "content-range");
	guint64 first, last, total, len = resp->body->len;

	if (cl && g_ascii_strtoull(cl, NULL, 10) != len)
		return bad_response(error,
				    "Content-Length %s but %" PRIu64
				    " body bytes arrived",
				    cl, len);
	if (!call->ranged) {
		if (resp->status != 200)
			return bad_response(error,
					    "HTTP %ld to a whole-object "
					    "GET (expected 200)",
					    resp->status);
		call->meta.size = len;
		return HTTP_VERDICT_DONE;
	}
	if (resp->status == 200 && !cl && !framed(resp)) {
		/* A body that ends where the connection closed may be cut
		 * short: it cannot be taken for the whole object. */
		g_set_error(error, BFS_ERROR, EIO,
			    "HTTP 200 to GET with Range bytes=%" PRIu64
			    "-%s: the server ignored the Range and sent a "
			    "body with neither Content-Length nor chunked "
			    "framing, so its end cannot be trusted",
			    call->offset, call->length ? "…" : "");
		return call->range_ignored++ ? HTTP_VERDICT_FAIL
					     : HTTP_VERDICT_RETRY;
	}
	if (resp->status == 200)
		return judge_range_ignored(call, resp, error);
	if (resp->status != 206)
		return bad_response(error,
				    "HTTP %ld to GET with Range "
				    "bytes=%" PRIu64 "-%s (expected 206)",
				    resp->status, call->offset,
				    call->length ? "…" : "");
	if (!parse_content_range(cr, &first, &last, &total))
		return bad_response(error, "206 with %s Content-Range '%s'",
				    cr ? "malformed" : "no", cr ? cr : "");
	if (first != call->offset ||
	    (call->length &&
	     last != MIN(call->offset + call->length, total) - 1) ||
	    (!call->length && last != total - 1))
		return bad_response(error,
				    "Content-Range '%s' does not match "
				    "the requested range starting at %" PRIu64
				    " for %" PRIu64 " bytes",
				    cr, call->offset, call->length);
	if (last - first + 1 != len)
		return bad_response(error,
				    "Content-Range '%s' but %" PRIu64
				    " body bytes arrived",
				    cr, len);
	call->meta.size = total;
	return HTTP_VERDICT_DONE;
}

/* -- multipart upload --------------------------------------------------- */

static gboolean code_is_transient(const char *code)
{
	return code &&
	       (!strcmp(code, "InternalError") || !strcmp(code, "SlowDown") ||
		!strcmp(code, "ServiceUnavailable"));
}

/* Complete's answer: S3 may say 200 and still fail it, in the body. */
static enum http_verdict judge_complete(struct call *call,
					const struct http_response *resp,
					GError **error)
{
	g_auto(s3_error_info) info = { 0 };
	g_autoptr(GError) perr = NULL;
	const char *rid = call->meta.request_id;

	g_clear_pointer(&call->result, g_free);
	if (s3_xml_parse_complete((const char *)resp->body->data,
				  resp->body->len, &call->result, &info, &perr))
		return HTTP_VERDICT_DONE;
	/*
	 * A 200 whose body is an <Error>, or not the result at all: S3
	 * failed after sending the status line.  AWS documents it, and the
	 * SDKs retry it, as a 500: the upload is still there to complete
	 * (a retry that finds it gone is judged by upload.c).
	 */
	if (perr) {
		g_set_error(error, BFS_ERROR, EIO,
			    "HTTP %ld with a bad body: %s%s%s%s", resp->status,
			    perr->message, rid ? " (RequestId: " : "",
			    rid ? rid : "", rid ? ")" : "");
		return HTTP_VERDICT_RETRY;
	}
	/* The upload gone, as a 404 says it: a Complete retried after its
	 * answer was lost (upload.c looks for the object). */
	if (!g_strcmp0(info.code, "NoSuchUpload")) {
		g_set_error(error, BFS_ERROR, ENOENT,
			    "HTTP %ld with an error in its body: NoSuchUpload: "
			    "%s (RequestId: %s)",
			    resp->status, info.message ? info.message : "",
			    info.request_id ? info.request_id
					    : (rid ? rid : "none"));
		return HTTP_VERDICT_FAIL;
	}
	/* Retried whatever the code, as botocore does; the code still
	 * says what the last failure means. */
	g_set_error(
		error, BFS_ERROR, code_is_transient(info.code) ? EIO : EINVAL,
		"HTTP %ld with an error in its body: %s: %s (RequestId: %s)",
		resp->status, info.code ? info.code : "(no code)",
		info.message ? info.message : "",
		info.request_id ? info.request_id : (rid ? rid : "none"));
	return HTTP_VERDICT_RETRY;
}

static enum http_verdict
judge_mpu(struct call *call, const struct http_response *resp, GError **error)
{
	const char *body = (const char *)resp->body->data;
	g_autoptr(GError) perr = NULL;

	switch (call->kind) {
	case CALL_MPU_CREATE:
		g_clear_pointer(&call->result, g_free);
		call->result =
			s3_xml_parse_initiate(body, resp->body->len, &perr);
		break;
	case CALL_MPU_PART:
		if (!call->meta.etag || !*call->meta.etag)
			g_set_error_literal(&perr, BFS_ERROR, EPROTO,
					    "UploadPart answered without an "
					    "ETag");
		break;
	case CALL_MPU_COMPLETE:
		return judge_complete(call, resp, error);
	case CALL_MPU_LIST:
		g_clear_pointer(&call->uploads, s3_uploads_page_free);
		call->uploads =
			s3_xml_parse_uploads(body, resp->body->len, &perr);
		break;
	default:
		break;
	}
	if (!perr)
		return HTTP_VERDICT_DONE;
	g_set_error(error, BFS_ERROR, EPROTO, "%s%s%s%s", perr->message,
		    call->meta.request_id ? " (RequestId: " : "",
		    call->meta.request_id ? call->meta.request_id : "",
		    call->meta.request_id ? ")" : "");
	return HTTP_VERDICT_FAIL;
}

enum http_verdict call_judge(const struct http_response *resp, void *data,
			     GError **error)
{
	struct call *call = data;

	if (resp->status < 200 || resp->status >= 300)
		return judge_error(call, resp, error);
	meta_from_response(&call->meta, resp);
	if (call->kind >= CALL_MPU_CREATE)
		return judge_mpu(call, resp, error);
	if (call->kind == CALL_GET) {
		if (call->if_match && call->meta.etag &&
		    strcmp(call->if_match, call->meta.etag) != 0) {
			g_set_error(error, BFS_ERROR, ESTALE,
				    "ETag \"%s\" differs from If-Match \"%s\" "
				    "(the server ignored If-Match)",
				    call->meta.etag, call->if_match);
			return HTTP_VERDICT_FAIL;
		}
		return judge_get_body(call, resp, error);
	}
	if (call->kind == CALL_LIST) {
		g_autoptr(GError) perr = NULL;

		g_clear_pointer(&call->page, s3_list_page_free);
		call->page = s3_xml_parse_list((const char *)resp->body->data,
					       resp->body->len, &perr);
		if (!call->page) {
			const char *rid = call->meta.request_id;

			g_set_error(error, BFS_ERROR, EPROTO, "%s%s%s%s",
				    perr->message, rid ? " (RequestId: " : "",
				    rid ? rid : "", rid ? ")" : "");
			/* A page cut short on the way is worth another try;
			 * one that is always broken ends as EPROTO.  A probe
			 * only guides the lister: it gives up at once. */
			return call->probe ? HTTP_VERDICT_FAIL
					   : HTTP_VERDICT_RETRY;
		}
	}
	return HTTP_VERDICT_DONE;
}
