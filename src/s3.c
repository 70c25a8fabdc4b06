/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * s3.c - S3 verbs: requests are built and signed per attempt (the endpoint
 * and the clock change between attempts), judged on the HTTP event thread,
 * and mapped to errno here and nowhere else.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cred_refresh.h"
#include "credentials.h"
#include "error.h"
#include "http.h"
#include "http_date.h"
#include "log.h"
#include "s3.h"
#include "sigv4.h"

struct s3 {
	struct http *http;
	char *bucket;
	char *region;
	gboolean virtual_hosted;
	char **endpoints; /* NULL-terminated, immutable */
	/*
	 * Refreshed ahead of their expiry, and at once on ExpiredToken; a
	 * pointer it hands out stays valid until s3_free().
	 */
	struct cred_refresh *creds;
	gint range_quirk_logged; /* atomic: a server ignored a Range */
};

enum call_kind {
	CALL_GET,
	CALL_HEAD,
	CALL_LIST,
	CALL_PUT,
	CALL_DELETE,
	/* multipart upload (judge_mpu()) */
	CALL_MPU_CREATE,
	CALL_MPU_PART,
	CALL_MPU_COMPLETE,
	CALL_MPU_ABORT,
	CALL_MPU_LIST,
};

/*
 * One S3 call.  Built by the caller's thread, then owned by the HTTP
 * request (freed through its data_free): used on the event thread, then
 * by done() on a done thread (on the event thread for a quick_done GET
 * that succeeded).
 */
struct call {
	struct s3 *s3;
	enum call_kind kind;
	char *key;		 /* NULL for bucket-level calls */
	char *query;		 /* encoded, or NULL */
	GPtrArray *sign_headers; /* "Name: value", signed and sent */
	guint64 offset;
	guint64 length;
	gboolean ranged;
	guint range_ignored; /* 200s to the Range that could not serve it */
	char *if_match;
	char *payload_sha256; /* CALL_PUT: of the body, hex */
	struct s3_object_meta meta;
	struct s3_list_page *page; /* CALL_LIST result */
	gboolean probe;		   /* CALL_LIST: a malformed page is final */
	char *result; /* CALL_MPU_CREATE: UploadId; COMPLETE: ETag */
	struct s3_uploads_page *uploads; /* CALL_MPU_LIST result */
	s3_part_done_fn part_done;	 /* async CALL_MPU_PART */

	s3_get_done_fn get_done; /* async GET */
	void *user;
	struct sync *sync; /* blocking calls */
};

/* A blocking caller waits here for the engine. */
struct sync {
	GMutex lock;
	GCond cond;
	gboolean finished; /* protected by lock */
	GBytes *data;
	struct s3_object_meta meta;
	struct s3_list_page *page;
	char *result;
	struct s3_uploads_page *uploads;
	GError *error;
};

void s3_object_meta_clear(struct s3_object_meta *meta)
{
	g_clear_pointer(&meta->etag, g_free);
	g_clear_pointer(&meta->request_id, g_free);
	g_clear_pointer(&meta->endpoint, g_free);
	memset(meta, 0, sizeof(*meta));
}

static void call_free(void *p)
{
	struct call *call = p;

	g_free(call->key);
	g_free(call->query);
	g_free(call->if_match);
	g_free(call->payload_sha256);
	g_clear_pointer(&call->sign_headers, g_ptr_array_unref);
	g_clear_pointer(&call->page, s3_list_page_free);
	g_free(call->result);
	g_clear_pointer(&call->uploads, s3_uploads_page_free);
	s3_object_meta_clear(&call->meta);
	g_free(call);
}

static struct call *call_new(struct s3 *s3, enum call_kind kind,
			     const char *key)
{
	struct call *call = g_new0(struct call, 1);

	call->s3 = s3;
	call->kind = kind;
	call->key = g_strdup(key);
	call->sign_headers = g_ptr_array_new_with_free_func(g_free);
	return call;
}

/* -- building requests -------------------------------------------------- */

static const char *method_of(enum call_kind kind)
{
	switch (kind) {
	case CALL_HEAD:
		return "HEAD";
	case CALL_PUT:
	case CALL_MPU_PART:
		return "PUT";
	case CALL_DELETE:
	case CALL_MPU_ABORT:
		return "DELETE";
	case CALL_MPU_CREATE:
	case CALL_MPU_COMPLETE:
		return "POST";
	default:
		return "GET";
	}
}

static void append_query(GString *q, const char *name, const char *value)
{
	g_autofree char *enc = NULL;

	if (!value)
		return;
	enc = sigv4_uri_encode(value, -1, FALSE);
	g_string_append_printf(q, "%s%s=%s", q->len ? "&" : "", name, enc);
}

/*
 * URL and signature for one attempt on @ep.  Path-style puts the bucket in
 * the path, virtual-hosted in the host name; either way the key is encoded
 * exactly once and sent as is (CURLOPT_PATH_AS_IS).
 */
static gboolean call_prepare(const struct http_endpoint *ep, gint64 now,
			     GString *url, GPtrArray *headers, gpointer *tag,
			     void *data, GError **error)
{
	const struct credentials *creds;
	struct call *call = data;
	struct s3 *s3 = call->s3;
	g_autoptr(GString) path = g_string_new("/");
	g_autofree char *host = NULL;
	g_auto(GStrv) auth = NULL;
	guint i;

	(void)error;
	if (s3->virtual_hosted) {
		host = g_strdup_printf("%s.%s", s3->bucket, ep->hostport);
		g_string_printf(url, "%s://%s", ep->scheme, host);
	} else {
		g_autofree char *b = sigv4_uri_encode(s3->bucket, -1, FALSE);

		host = g_strdup(ep->hostport);
		g_string_append(path, b);
		if (call->key)
			g_string_append_c(path, '/');
	}
	if (call->key) {
		g_autofree char *k = sigv4_uri_encode(call->key, -1, TRUE);

		g_string_append(path, k);
	}
	g_string_append(url, path->str);
	if (call->query)
		g_string_append_printf(url, "?%s", call->query);
	for (i = 0; i < call->sign_headers->len; i++)
		g_ptr_array_add(headers, g_strdup(g_ptr_array_index(
						 call->sign_headers, i)));
	creds = cred_refresh_peek(s3->creds);
	/* Judged per attempt: a hedge may sign with renewed credentials
	 * while its twin still runs with the expired ones. */
	*tag = (gpointer)creds;
	if (creds->anonymous)
		return TRUE;
	g_ptr_array_add(call->sign_headers, NULL);
	{
		struct sigv4_credentials c = {
			.access_key_id = creds->access_key_id,
			.secret_access_key = creds->secret_access_key,
			.session_token = creds->session_token,
		};
		struct sigv4_request r = {
			.method = method_of(call->kind),
			.host = host,
			.path = path->str,
			.query = call->query,
			.payload_sha256 = call->payload_sha256,
			.headers =
				(const char *const *)call->sign_headers->pdata,
			.region = s3->region,
			.service = "s3",
			.unix_time = now,
		};

		auth = sigv4_sign(&c, &r);
	}
	g_ptr_array_remove_index(call->sign_headers,
				 call->sign_headers->len - 1);
	for (i = 0; auth[i]; i++)
		g_ptr_array_add(headers, g_steal_pointer(&auth[i]));
	return TRUE;
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

static enum http_verdict bad_response(GError **error, const char *fmt, ...)
	G_GNUC_PRINTF(2, 3);

static enum http_verdict bad_response(GError **error, const char *fmt, ...)
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

static enum http_verdict
judge_mpu(struct call *call, const struct http_response *resp, GError **error);

static enum http_verdict call_judge(const struct http_response *resp,
				    void *data, GError **error)
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

/* -- completion --------------------------------------------------------- */

static void meta_move(struct s3_object_meta *to, struct s3_object_meta *from)
{
	s3_object_meta_clear(to);
	*to = *from;
	memset(from, 0, sizeof(*from));
}

static void call_done(struct http_request *req, struct http_response *resp,
		      const GError *error, void *data)
{
	struct call *call = data;
	g_autoptr(GBytes) bytes = NULL;

	(void)req;
	if (!error && call->kind == CALL_GET)
		bytes = bufpool_buf_free_to_bytes(g_steal_pointer(&resp->body));
	if (call->get_done) {
		call->get_done(bytes, &call->meta, error, call->user);
		return;
	}
	if (call->part_done) {
		call->part_done(error ? NULL : call->meta.etag, error,
				call->user);
		return;
	}
	g_mutex_lock(&call->sync->lock);
	call->sync->data = g_steal_pointer(&bytes);
	call->sync->page = g_steal_pointer(&call->page);
	call->sync->result = g_steal_pointer(&call->result);
	call->sync->uploads = g_steal_pointer(&call->uploads);
	meta_move(&call->sync->meta, &call->meta);
	call->sync->error = error ? g_error_copy(error) : NULL;
	call->sync->finished = TRUE;
	g_cond_signal(&call->sync->cond);
	g_mutex_unlock(&call->sync->lock);
}

static char *describe(struct s3 *s3, const char *verb, const char *key)
{
	g_autofree char *k = log_escape(key ? key : "", -1);

	return g_strdup_printf("%s s3://%s/%s", verb, s3->bucket, k);
}

static struct http_request *request_for(struct call *call, const char *what,
					int endpoint)
{
	struct http_request *req;

	req = http_request_new(method_of(call->kind), what, call_prepare,
			       call_judge, call_done, call, call_free);
	if (endpoint >= 0)
		http_request_pin_endpoint(req, endpoint);
	return req;
}

/* Submits and waits; the results land in @sync. */
static gboolean run_sync(struct s3 *s3, struct call *call,
			 struct http_request *req, struct sync *sync,
			 GError **error)
{
	g_mutex_init(&sync->lock);
	g_cond_init(&sync->cond);
	call->sync = sync;
	http_submit(s3->http, req);
	g_mutex_lock(&sync->lock);
	while (!sync->finished)
		g_cond_wait(&sync->cond, &sync->lock);
	g_mutex_unlock(&sync->lock);
	g_mutex_clear(&sync->lock);
	g_cond_clear(&sync->cond);
	if (sync->error) {
		g_propagate_error(error, sync->error);
		sync->error = NULL;
		return FALSE;
	}
	return TRUE;
}

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
	what = describe(s3, "GET", key);
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
	g_autofree char *what = describe(s3, "HEAD", key);
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
	g_autofree char *what = describe(s3, "PUT", key);
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
	g_autofree char *what = describe(s3, "DELETE", key);
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

/* -- ListObjectsV2 ------------------------------------------------------ */

static char *list_query(const struct s3_list_args *args)
{
	GString *q = g_string_new("list-type=2");

	append_query(q, "continuation-token", args->continuation_token);
	append_query(q, "delimiter", args->delimiter);
	if (!args->no_url_encoding)
		append_query(q, "encoding-type", "url");
	if (args->max_keys)
		g_string_append_printf(q, "&max-keys=%u", args->max_keys);
	append_query(q, "prefix", args->prefix);
	append_query(q, "start-after", args->start_after);
	return g_string_free(q, FALSE);
}

struct s3_list_page *s3_list(struct s3 *s3, const struct s3_list_args *args,
			     struct s3_object_meta *meta, GError **error)
{
	struct sync sync = { 0 };
	struct call *call = call_new(s3, CALL_LIST, NULL);
	g_autofree char *what = NULL;
	struct http_request *req;
	gboolean ok;

	call->query = list_query(args);
	call->probe = args->probe;
	what = describe(s3, "LIST", args->prefix);
	req = request_for(call, what, args->endpoint);
	ok = run_sync(s3, call, req, &sync, error);
	if (meta)
		meta_move(meta, &sync.meta);
	s3_object_meta_clear(&sync.meta);
	return ok ? sync.page : NULL;
}

gboolean s3_list_all(struct s3 *s3, const struct s3_list_args *args,
		     s3_list_fn fn, void *user, GError **error)
{
	struct s3_list_args a = *args;
	g_autoptr(GHashTable) seen =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	g_autofree char *token = g_strdup(args->continuation_token);
	g_autofree char *p = log_escape(args->prefix ? args->prefix : "", -1);
	guint pages = 0;

	for (;;) {
		g_autoptr(s3_list_page) page = NULL;

		a.continuation_token = token;
		page = s3_list(s3, &a, NULL, error);
		if (!page) {
			g_prefix_error(error, "listing s3://%s/%s, page %u: ",
				       s3->bucket, p, pages + 1);
			return FALSE;
		}
		pages++;
		if (!fn(page, user, error))
			return FALSE;
		if (!page->is_truncated)
			return TRUE;
		if (!page->next_continuation_token) {
			g_set_error(error, BFS_ERROR, EPROTO,
				    "listing s3://%s/%s, page %u: truncated "
				    "page without NextContinuationToken",
				    s3->bucket, p, pages);
			return FALSE;
		}
		if (!g_hash_table_add(
			    seen, g_strdup(page->next_continuation_token))) {
			g_autofree char *t =
				log_escape(page->next_continuation_token, -1);

			g_set_error(error, BFS_ERROR, EPROTO,
				    "listing s3://%s/%s, page %u: continuation "
				    "token '%s' repeats: the server is "
				    "looping, stopping",
				    s3->bucket, p, pages, t);
			return FALSE;
		}
		g_free(token);
		token = g_strdup(page->next_continuation_token);
	}
}

/* -- lifecycle ---------------------------------------------------------- */

struct s3 *s3_new(const struct config *cfg, GError **error)
{
	return s3_new_for_bucket(cfg, cfg->bucket, error);
}

struct s3 *s3_new_for_bucket(const struct config *cfg, const char *bucket,
			     GError **error)
{
	struct s3 *s3 = g_new0(struct s3, 1);
	struct http_options o = { 0 };
	guint i;

	s3_xml_init();

	s3->bucket = g_strdup(bucket);
	s3->region = g_strdup(cfg->region);
	s3->virtual_hosted = cfg->addressing == ADDRESSING_VIRTUAL;
	s3->endpoints = g_new0(char *, cfg->endpoints->len + 1);
	for (i = 0; i < cfg->endpoints->len; i++) {
		const char *ep = g_ptr_array_index(cfg->endpoints, i);

		s3->endpoints[i] = g_strdup(ep);
		if (s3->virtual_hosted && strstr(ep, "://[")) {
			g_set_error(error, BFS_ERROR, EINVAL,
				    "endpoint '%s': virtual-hosted addressing "
				    "needs a host name, not an IP literal; use "
				    "-o addressing=path",
				    ep);
			goto fail;
		}
	}
	{
		struct cred_chain_options co = {
			.profile = cfg->profile,
			.anonymous = cfg->anonymous,
			.region = cfg->region,
			.ca_file = cfg->ca_file,
		};

		s3->creds = cred_refresh_new(&co, error);
		if (!s3->creds)
			goto fail;
	}
	o.endpoints = (const char *const *)s3->endpoints;
	o.ca_file = cfg->ca_file;
	o.connect_timeout = cfg->connect_timeout;
	o.stall_timeout = cfg->stall_timeout;
	o.request_timeout = cfg->request_timeout;
	o.max_attempts = cfg->max_attempts;
	o.retry_deadline = cfg->retry_deadline;
	o.max_connections = cfg->max_connections
				    ? cfg->max_connections
				    : CONFIG_DEFAULT_MAX_CONNECTIONS;
	o.event_threads = cfg->event_threads;
	o.direct_receive = !cfg->receive_curl;
	s3->http = http_new(&o, error);
	if (!s3->http)
		goto fail;
	return s3;
fail:
	s3_free(s3);
	return NULL;
}

void s3_shutdown(struct s3 *s3)
{
	if (s3)
		http_shutdown(s3->http);
}

void s3_free(struct s3 *s3)
{
	if (!s3)
		return;
	http_free(s3->http);
	g_clear_pointer(&s3->creds, cred_refresh_free);
	g_strfreev(s3->endpoints);
	g_free(s3->bucket);
	g_free(s3->region);
	g_free(s3);
}

const char *s3_bucket(const struct s3 *s3)
{
	return s3->bucket;
}

const char *s3_credentials_source(const struct s3 *s3)
{
	/* Borrowed until s3_free(): replaced credentials are retired, not
	 * freed. */
	return cred_refresh_peek(s3->creds)->source;
}

struct http *s3_get_http(struct s3 *s3)
{
	return s3->http;
}

const char *const *s3_endpoints(const struct s3 *s3)
{
	return (const char *const *)s3->endpoints;
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
	g_autofree char *what = describe(s3, "CreateMultipartUpload", key);
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
	g_autofree char *what = describe(s3, "CompleteMultipartUpload", key);
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
	g_autofree char *what = describe(s3, "AbortMultipartUpload", key);
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
	g_autofree char *what = describe(s3, "ListMultipartUploads", prefix);
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
