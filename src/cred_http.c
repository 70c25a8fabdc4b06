/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <string.h>

#include <curl/curl.h>

#include "cred_http.h"
#include "error.h"

struct sink {
	GString *body;
	gboolean too_big;
};

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
	struct sink *sink = user;
	gsize len = size * n;

	if (sink->body->len + len > CRED_HTTP_BODY_MAX) {
		sink->too_big = TRUE;
		return 0;
	}
	/* Grow by hand: a realloc would leave keys in freed memory. */
	if (sink->body->len + len + 1 > sink->body->allocated_len) {
		GString *bigger =
			g_string_sized_new(MAX(sink->body->allocated_len * 2,
					       sink->body->len + len + 1));

		g_string_append_len(bigger, sink->body->str, sink->body->len);
		cred_http_body_free(sink->body);
		sink->body = bigger;
	}
	g_string_append_len(sink->body, data, len);
	return len;
}

void cred_http_body_free(GString *body)
{
	if (!body)
		return;
	explicit_bzero(body->str, body->allocated_len);
	g_string_free(body, TRUE);
}

static void set_curl_error(GError **error, const struct cred_http_request *req,
			   CURLcode rc, const char *errbuf, long os_errno)
{
	g_autoptr(GString) msg = g_string_new(NULL);
	int code = EIO;

	g_string_printf(msg, "%s %s: curl %d (%s)", req->method, req->url,
			(int)rc, curl_easy_strerror(rc));
	if (*errbuf)
		g_string_append_printf(msg, ": %s", errbuf);
	if (os_errno) {
		g_string_append_printf(msg, " [os errno %ld: %s]", os_errno,
				       g_strerror((int)os_errno));
		code = (int)os_errno;
	}
	if (rc == CURLE_OPERATION_TIMEDOUT)
		code = ETIMEDOUT;
	g_set_error_literal(error, BFS_ERROR, code, msg->str);
}

static struct curl_slist *header_list(const struct cred_http_request *req)
{
	struct curl_slist *list = NULL;
	guint i;

	/* No "Expect: 100-continue" round trip for a small body. */
	list = curl_slist_append(list, "Expect:");
	for (i = 0; req->headers && req->headers[i]; i++)
		list = curl_slist_append(list, req->headers[i]);
	return list;
}

/* Frees @list after wiping it: a header may hold a token. */
static void wipe_headers(struct curl_slist *list)
{
	struct curl_slist *l;

	for (l = list; l; l = l->next)
		explicit_bzero(l->data, strlen(l->data));
	curl_slist_free_all(list);
}

gboolean cred_http_exchange(const struct cred_http_request *req, long *status,
			    GString **body, GError **error)
{
	char errbuf[CURL_ERROR_SIZE] = "";
	struct sink sink = { .body = g_string_sized_new(4096) };
	struct curl_slist *headers;
	long os_errno = 0;
	CURLcode rc;
	CURL *h;

	g_return_val_if_fail(req->timeout_ms > 0, FALSE);
	*body = NULL;
	*status = 0;
	h = curl_easy_init();
	if (!h) {
		cred_http_body_free(sink.body);
		g_set_error(error, BFS_ERROR, ENOMEM,
			    "%s %s: curl_easy_init failed", req->method,
			    req->url);
		return FALSE;
	}
	headers = header_list(req);
	curl_easy_setopt(h, CURLOPT_URL, req->url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)(req->connect_timeout_ms
					? req->connect_timeout_ms
					: req->timeout_ms));
	if (!req->use_proxy)
		curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
	if (req->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, req->ca_file);
	if (req->body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)req->body_len);
	} else if (!strcmp(req->method, "PUT") ||
		   !strcmp(req->method, "POST")) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
	}
	rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
	curl_easy_cleanup(h);
	wipe_headers(headers);
	if (sink.too_big) {
		cred_http_body_free(sink.body);
		g_set_error(error, BFS_ERROR, EFBIG,
			    "%s %s: HTTP %ld with a body over %d bytes, not a "
			    "credentials answer",
			    req->method, req->url, *status, CRED_HTTP_BODY_MAX);
		return FALSE;
	}
	if (rc != CURLE_OK) {
		cred_http_body_free(sink.body);
		set_curl_error(error, req, rc, errbuf, os_errno);
		return FALSE;
	}
	*body = sink.body;
	return TRUE;
}
