/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_tls.c - TLS for the direct receive path's https:// connections,
 * on OpenSSL: the context (trusting what curl trusts), the handshake,
 * and reads and writes on a non-blocking socket.
 *
 * curl connects first to every endpoint and reports every failure its
 * own way; this file only has to be as strict as curl is, never laxer:
 * the same CA file and directory (asked of curl itself), the peer's
 * certificate verified, its name (or IP address) checked against the
 * host of the URL, SNI for names, TLS 1.2 at least, ALPN http/1.1.
 *
 * Threads: the context is shared, read-only once made; a connection's
 * SSL is its loop's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>

#include <curl/curl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "error.h"
#include "http_engine.h"

/* Where curl would find its CA certificates with @ca_file set (or not):
 * curl's own defaults, as it reports them. */
static void curl_ca_locations(const char *ca_file, char **cainfo, char **capath)
{
	CURL *easy = curl_easy_init();
	char *s = NULL;

	*cainfo = *capath = NULL;
	if (!easy) {
		*cainfo = g_strdup(ca_file);
		return;
	}
	if (ca_file)
		curl_easy_setopt(easy, CURLOPT_CAINFO, ca_file);
	if (curl_easy_getinfo(easy, CURLINFO_CAINFO, &s) == CURLE_OK && s)
		*cainfo = g_strdup(s);
	s = NULL;
	if (curl_easy_getinfo(easy, CURLINFO_CAPATH, &s) == CURLE_OK && s)
		*capath = g_strdup(s);
	curl_easy_cleanup(easy);
	if (ca_file && g_strcmp0(*cainfo, ca_file) != 0) {
		g_free(*cainfo);
		*cainfo = g_strdup(ca_file);
	}
}

/* The first error on OpenSSL's queue as text, and the queue emptied. */
static void openssl_error(char *buf, gsize len)
{
	unsigned long e = ERR_get_error();

	if (e)
		ERR_error_string_n(e, buf, len);
	else
		g_strlcpy(buf, "no further detail from OpenSSL", len);
	ERR_clear_error();
}

/* OpenSSL's error queue emptied before an I/O call, as SSL_get_error()
 * needs; the queue is almost always empty, and looking costs less than
 * clearing each of its slots. */
static void errors_cleared(void)
{
	if (ERR_peek_error())
		ERR_clear_error();
}

struct tls_resume {
	GMutex lock;
	SSL_SESSION *session; /* protected by lock */
};

struct tls_resume *tls_resume_new(void)
{
	struct tls_resume *r = g_new0(struct tls_resume, 1);

	g_mutex_init(&r->lock);
	return r;
}

void tls_resume_free(struct tls_resume *r)
{
	if (!r)
		return;
	SSL_SESSION_free(r->session);
	g_mutex_clear(&r->lock);
	g_free(r);
}

void tls_resume_forget(struct tls_resume *r)
{
	if (!r)
		return;
	g_mutex_lock(&r->lock);
	g_clear_pointer(&r->session, SSL_SESSION_free);
	g_mutex_unlock(&r->lock);
}

/*
 * A session the server gave a connection of tls_new()'s: kept for the
 * endpoint's next connections.  It is only ever one of a handshake that
 * verified the certificate (a failed one gives none), and it carries the
 * name sent as SNI, which tls_new() compares before resuming: resuming
 * skips the certificate and its name check, so a session made for one
 * name must never serve another.
 */
static int tls_session_new(SSL *ssl, SSL_SESSION *session)
{
	struct tls_resume *r = SSL_get_app_data(ssl);
	const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);

	if (!r || !SSL_SESSION_is_resumable(session) ||
	    (sni && SSL_SESSION_set1_hostname(session, sni) != 1))
		return 0;
	g_mutex_lock(&r->lock);
	SSL_SESSION_free(r->session);
	r->session = session;
	g_mutex_unlock(&r->lock);
	return 1; /* the session is ours now */
}

/* Offers @r's session to @ssl when it was made for @host (@literal: an
 * address, sent without SNI, so a session without a name). */
static void tls_resume_offer(struct tls_resume *r, SSL *ssl, const char *host,
			     gboolean literal)
{
	g_mutex_lock(&r->lock);
	if (r->session) {
		const char *name = SSL_SESSION_get0_hostname(r->session);

		if (literal ? !name : !g_strcmp0(name, host))
			SSL_set_session(ssl, r->session);
	}
	g_mutex_unlock(&r->lock);
}

SSL_CTX *tls_context_new(const char *ca_file, GError **error)
{
	static const unsigned char alpn[] = "\x08http/1.1";
	g_autofree char *cainfo = NULL, *capath = NULL;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	X509_VERIFY_PARAM *param;
	struct sigaction old;
	char why[256];

	if (!ctx) {
		openssl_error(why, sizeof(why));
		g_set_error(error, BFS_ERROR, ENOMEM, "SSL_CTX_new: %s", why);
		return NULL;
	}
	/* OpenSSL writes to its socket without MSG_NOSIGNAL: a peer that
	 * has gone must give EPIPE, not end the process. */
	if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);
	curl_ca_locations(ca_file, &cainfo, &capath);
	if ((cainfo || capath) &&
	    SSL_CTX_load_verify_locations(ctx, cainfo, capath) != 1) {
		openssl_error(why, sizeof(why));
		g_set_error(error, BFS_ERROR, EINVAL,
			    "CA certificates from %s%s%s: %s",
			    cainfo ? cainfo : "",
			    cainfo && capath ? " and " : "",
			    capath ? capath : "", why);
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (!cainfo && !capath)
		SSL_CTX_set_default_verify_paths(ctx);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1);
	/* curl's own verification flags with OpenSSL. */
	param = SSL_CTX_get0_param(ctx);
	X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_PARTIAL_CHAIN |
						   X509_V_FLAG_TRUSTED_FIRST);
	X509_VERIFY_PARAM_set_hostflags(param,
					X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	/* A request is written once and never moves; a body is read in as
	 * large pieces as the socket has. */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
				      SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_read_ahead(ctx, 1);
	SSL_CTX_set_default_read_buffer_len(ctx, 64 << 10);
	/* Sessions are kept per endpoint (struct tls_resume), not in the
	 * context's own cache, which would offer any of them to any host. */
	SSL_CTX_set_session_cache_mode(
		ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, tls_session_new);
	return ctx;
}

void tls_context_free(SSL_CTX *ctx)
{
	SSL_CTX_free(ctx);
}

SSL *tls_new(SSL_CTX *ctx, int fd, const char *host, struct tls_resume *resume,
	     char *why, gsize len)
{
	SSL *ssl = SSL_new(ctx);
	unsigned char ip[16];
	gboolean literal = inet_pton(AF_INET, host, ip) == 1 ||
			   inet_pton(AF_INET6, host, ip) == 1;
	gboolean ok;

	if (!ssl) {
		openssl_error(why, len);
		return NULL;
	}
	ok = SSL_set_fd(ssl, fd) == 1;
	/* As curl: SNI for a name only; the name or the address checked. */
	if (ok && literal)
		ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) ==
		     1;
	else if (ok)
		ok = SSL_set_tlsext_host_name(ssl, host) == 1 &&
		     SSL_set1_host(ssl, host) == 1;
	if (!ok) {
		openssl_error(why, len);
		SSL_free(ssl);
		return NULL;
	}
	if (resume) {
		SSL_set_app_data(ssl, resume);
		tls_resume_offer(resume, ssl, host, literal);
	}
	SSL_set_connect_state(ssl);
	return ssl;
}

gboolean tls_resumed(SSL *ssl)
{
	return SSL_session_reused(ssl) == 1;
}

void tls_free(SSL *ssl, gboolean clean)
{
	if (!ssl)
		return;
	if (clean)
		SSL_shutdown(ssl); /* one close_notify, not waited for */
	SSL_free(ssl);
	ERR_clear_error();
}

/*
 * What an OpenSSL call's @ret means: 1 = go on, 0 = wait for *@events,
 * -1 = failed (errno set, @why its text) or the end: *@eof is 1 after
 * the peer's close_notify, 2 when the connection ended without one.
 */
static int tls_outcome(SSL *ssl, int ret, guint32 *events, int *eof, char *why,
		       gsize len)
{
	int e = errno;

	switch (SSL_get_error(ssl, ret)) {
	case SSL_ERROR_NONE:
		return 1;
	case SSL_ERROR_WANT_READ:
		*events = EPOLLIN;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		*events = EPOLLIN | EPOLLOUT;
		return 0;
	case SSL_ERROR_ZERO_RETURN:
		*eof = 1;
		ERR_clear_error();
		return -1;
	case SSL_ERROR_SYSCALL:
		if (ERR_peek_error() == 0) {
			ERR_clear_error();
			if (!e) {
				*eof = 2;
				return -1;
			}
			g_strlcpy(why, g_strerror(e), len);
			errno = e;
			return -1;
		}
		G_GNUC_FALLTHROUGH;
	case SSL_ERROR_SSL:
		if (ERR_GET_REASON(ERR_peek_error()) ==
		    SSL_R_UNEXPECTED_EOF_WHILE_READING) {
			ERR_clear_error();
			*eof = 2;
			return -1;
		}
		G_GNUC_FALLTHROUGH;
	default:
		openssl_error(why, len);
		errno = EPROTO;
		return -1;
	}
}

int tls_handshake(SSL *ssl, guint32 *events, char *why, gsize len)
{
	int eof = 0, r;

	errors_cleared();
	r = tls_outcome(ssl, SSL_do_handshake(ssl), events, &eof, why, len);
	if (r < 0) {
		long v = SSL_get_verify_result(ssl);

		if (eof)
			g_strlcpy(why, "the server closed the connection", len);
		if (v != X509_V_OK) {
			gsize n = strlen(why);

			g_snprintf(why + n, len - n,
				   " [TLS verify result %ld: %s]", v,
				   X509_verify_cert_error_string(v));
		}
	}
	return r;
}

ssize_t tls_recv(SSL *ssl, void *buf, gsize n, guint32 *events, char *why,
		 gsize len)
{
	size_t got = 0;
	int eof = 0, r;

	errors_cleared();
	r = tls_outcome(ssl, SSL_read_ex(ssl, buf, n, &got), events, &eof, why,
			len);
	if (r > 0)
		return (ssize_t)got;
	if (eof == 2)
		g_strlcpy(why,
			  "the server closed the connection without a TLS "
			  "close_notify",
			  len);
	if (eof)
		return 0;
	if (!r)
		errno = EAGAIN;
	return -1;
}

ssize_t tls_send(SSL *ssl, const void *buf, gsize n, guint32 *events, char *why,
		 gsize len)
{
	size_t put = 0;
	int eof = 0, r;

	errors_cleared();
	r = tls_outcome(ssl, SSL_write_ex(ssl, buf, n, &put), events, &eof, why,
			len);
	if (r > 0)
		return (ssize_t)put;
	if (!r)
		errno = EAGAIN;
	else if (eof)
		errno = EPIPE;
	return -1;
}

gboolean tls_pending(SSL *ssl)
{
	return SSL_has_pending(ssl);
}
