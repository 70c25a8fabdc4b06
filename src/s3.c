/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * s3.c - S3 verbs: requests are built and signed per attempt (the endpoint
 * and the clock change between attempts), judged on the HTTP event thread,
 * and mapped to errno in s3_judge.c and nowhere else.
 *
 * This file holds the client's life (new, shutdown, free) and what it
 * answers about itself.  The other pieces: s3_request.c (calls built,
 * signed per attempt, completed, waited for), s3_judge.c (responses
 * judged), s3_object.c (GET, HEAD, PUT, DELETE), s3_list.c
 * (ListObjectsV2), s3_mpu.c (multipart uploads).
 */
#include <string.h>

#include "cred_refresh.h"
#include "credentials.h"
#include "error.h"
#include "log.h"
#include "s3_internal.h"

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
