/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>

#include "sigv4.h"

#define SIGV4_ALGORITHM "AWS4-HMAC-SHA256"
#define SHA256_LEN	32

/* 9999-12-31T23:59:59Z + 1: x-amz-date has four year digits. */
#define SIGV4_MAX_TIME G_GINT64_CONSTANT(253402300800)

/* x-amz-date and the first 8 bytes of it, the date stamp of the scope. */
struct amz_date {
	char full[sizeof("20130524T000000Z")];
	char day[sizeof("20130524")];
};

/* One canonical header; @value is already trimmed and collapsed. */
struct canon_header {
	char *name;
	GString *value;
};

/* One query parameter, both halves already in canonical (encoded) form. */
struct canon_param {
	char *name;
	char *value;
};

static gboolean is_unreserved(guchar c)
{
	return g_ascii_isalnum(c) || c == '-' || c == '.' || c == '_' ||
	       c == '~';
}

char *sigv4_uri_encode(const char *s, gssize len, gboolean keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	GString *out;
	gsize n;

	g_return_val_if_fail(s != NULL || len == 0, NULL);

	n = len < 0 ? strlen(s) : (gsize)len;
	out = g_string_sized_new(n + 1);
	for (gsize i = 0; i < n; i++) {
		guchar c = (guchar)s[i];

		if (is_unreserved(c) || (c == '/' && keep_slash)) {
			g_string_append_c(out, (char)c);
			continue;
		}
		g_string_append_c(out, '%');
		g_string_append_c(out, hex[c >> 4]);
		g_string_append_c(out, hex[c & 0xf]);
	}
	return g_string_free(out, FALSE);
}

/*
 * Percent-decodes one query name or value.  '+' is a space because S3 reads
 * a query string that way (so the canonical form must say %20).  A stray
 * '%' stays literal (and signs as %25) rather than failing: signing has no
 * error path, and such a query is the caller's bug.  The result may hold
 * NUL bytes, hence the GString.
 */
static GString *query_decode(const char *s, gsize len)
{
	GString *out = g_string_sized_new(len);

	for (gsize i = 0; i < len; i++) {
		int hi, lo;

		if (s[i] == '+') {
			g_string_append_c(out, ' ');
			continue;
		}
		if (s[i] != '%' || i + 2 >= len) {
			g_string_append_c(out, s[i]);
			continue;
		}
		hi = g_ascii_xdigit_value(s[i + 1]);
		lo = g_ascii_xdigit_value(s[i + 2]);
		if (hi < 0 || lo < 0) {
			g_string_append_c(out, s[i]);
			continue;
		}
		g_string_append_c(out, (char)(hi << 4 | lo));
		i += 2;
	}
	return out;
}

static char *query_reencode(const char *s, gsize len)
{
	GString *raw = query_decode(s, len);
	char *enc = sigv4_uri_encode(raw->str, (gssize)raw->len, FALSE);

	g_string_free(raw, TRUE);
	return enc;
}

static void canon_param_free(gpointer p)
{
	struct canon_param *param = p;

	g_free(param->name);
	g_free(param->value);
	g_free(param);
}

/* AWS sorts the encoded names, then the encoded values, by byte value. */
static gint canon_param_cmp(gconstpointer a, gconstpointer b)
{
	const struct canon_param *x = *(const struct canon_param *const *)a;
	const struct canon_param *y = *(const struct canon_param *const *)b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->value, y->value);
}

/* Empty "&&" segments are dropped: they carry no parameter. */
static void canonical_query(GString *out, const char *query)
{
	g_autoptr(GPtrArray) params =
		g_ptr_array_new_with_free_func(canon_param_free);
	const char *p = query ? query : "";

	while (*p) {
		gsize seg = strcspn(p, "&");
		const char *eq = memchr(p, '=', seg);
		gsize name_len = eq ? (gsize)(eq - p) : seg;

		if (seg > 0) {
			struct canon_param *param =
				g_new(struct canon_param, 1);

			param->name = query_reencode(p, name_len);
			param->value =
				eq ? query_reencode(eq + 1, seg - name_len - 1)
				   : g_strdup("");
			g_ptr_array_add(params, param);
		}
		p += seg;
		if (*p == '&')
			p++;
	}
	g_ptr_array_sort(params, canon_param_cmp);
	for (guint i = 0; i < params->len; i++) {
		const struct canon_param *param = params->pdata[i];

		if (i)
			g_string_append_c(out, '&');
		g_string_append_printf(out, "%s=%s", param->name, param->value);
	}
}

/* Trimall: no leading or trailing blanks, inner runs become one space. */
static void append_trimmed(GString *out, const char *v)
{
	gboolean pending_space = FALSE;

	while (g_ascii_isspace(*v))
		v++;
	for (; *v; v++) {
		if (g_ascii_isspace(*v)) {
			pending_space = TRUE;
			continue;
		}
		if (pending_space)
			g_string_append_c(out, ' ');
		pending_space = FALSE;
		g_string_append_c(out, *v);
	}
}

static void canon_header_free(gpointer p)
{
	struct canon_header *h = p;

	g_free(h->name);
	g_string_free(h->value, TRUE);
	g_free(h);
}

static gint canon_header_cmp(gconstpointer a, gconstpointer b)
{
	const struct canon_header *x = *(const struct canon_header *const *)a;
	const struct canon_header *y = *(const struct canon_header *const *)b;

	return strcmp(x->name, y->name);
}

/* Repeated names are joined with ',' in the order they were added. */
static void add_header(GPtrArray *headers, const char *name, gsize name_len,
		       const char *value)
{
	g_autofree char *lname = g_ascii_strdown(name, (gssize)name_len);
	struct canon_header *h;

	for (guint i = 0; i < headers->len; i++) {
		h = headers->pdata[i];
		if (strcmp(h->name, lname) == 0) {
			g_string_append_c(h->value, ',');
			append_trimmed(h->value, value);
			return;
		}
	}
	h = g_new(struct canon_header, 1);
	h->name = g_steal_pointer(&lname);
	h->value = g_string_new(NULL);
	append_trimmed(h->value, value);
	g_ptr_array_add(headers, h);
}

static gboolean is_reserved_header(const char *name, gsize len)
{
	static const char *const reserved[] = {
		"host",
		"authorization",
		"x-amz-date",
		"x-amz-content-sha256",
		"x-amz-security-token",
	};

	for (gsize i = 0; i < G_N_ELEMENTS(reserved); i++) {
		if (strlen(reserved[i]) == len &&
		    g_ascii_strncasecmp(name, reserved[i], len) == 0)
			return TRUE;
	}
	return FALSE;
}

/* Each "Name: value" needs a name of visible non-':' bytes, not ours. */
static gboolean headers_valid(const char *const *headers)
{
	for (gsize i = 0; headers && headers[i]; i++) {
		const char *colon = strchr(headers[i], ':');
		gsize len;

		if (!colon || colon == headers[i])
			return FALSE;
		len = (gsize)(colon - headers[i]);
		for (gsize j = 0; j < len; j++) {
			if (!g_ascii_isgraph(headers[i][j]))
				return FALSE;
		}
		if (is_reserved_header(headers[i], len))
			return FALSE;
	}
	return TRUE;
}

static gboolean request_valid(const struct sigv4_request *req)
{
	return req->method && req->method[0] && req->host && req->path &&
	       req->path[0] == '/' && req->region && req->service &&
	       req->unix_time >= 0 && req->unix_time < SIGV4_MAX_TIME &&
	       headers_valid(req->headers);
}

static void amz_date_init(struct amz_date *d, gint64 unix_time)
{
	time_t t = (time_t)unix_time;
	struct tm tm;

	/* request_valid() bounded unix_time, so neither call can fail. */
	if (!gmtime_r(&t, &tm) ||
	    strftime(d->full, sizeof(d->full), "%Y%m%dT%H%M%SZ", &tm) !=
		    sizeof(d->full) - 1)
		g_error("sigv4: cannot format time %" G_GINT64_FORMAT,
			unix_time);
	memcpy(d->day, d->full, sizeof(d->day) - 1);
	d->day[sizeof(d->day) - 1] = '\0';
}

static const char *payload_hash(const struct sigv4_request *req)
{
	return req->payload_sha256 ? req->payload_sha256 : SIGV4_EMPTY_SHA256;
}

static const char *token_of(const struct sigv4_credentials *creds)
{
	if (!creds || !creds->session_token || !creds->session_token[0])
		return NULL;
	return creds->session_token;
}

/* The sorted canonical headers of @req, sigv4's own included. */
static GPtrArray *collect_headers(const struct sigv4_request *req,
				  const struct sigv4_credentials *creds,
				  const struct amz_date *date)
{
	GPtrArray *headers = g_ptr_array_new_with_free_func(canon_header_free);
	const char *token = token_of(creds);

	add_header(headers, "host", 4, req->host);
	add_header(headers, "x-amz-content-sha256", 20, payload_hash(req));
	add_header(headers, "x-amz-date", 10, date->full);
	if (token)
		add_header(headers, "x-amz-security-token", 20, token);
	for (gsize i = 0; req->headers && req->headers[i]; i++) {
		const char *h = req->headers[i];
		const char *colon = strchr(h, ':');

		add_header(headers, h, (gsize)(colon - h), colon + 1);
	}
	/* g_ptr_array_sort() is stable, though names are unique by now. */
	g_ptr_array_sort(headers, canon_header_cmp);
	return headers;
}

static GString *build_canonical(const struct sigv4_request *req,
				const struct sigv4_credentials *creds,
				const struct amz_date *date,
				char **signed_headers_out)
{
	g_autoptr(GPtrArray) headers = collect_headers(req, creds, date);
	GString *out = g_string_sized_new(512);
	GString *signed_headers = g_string_sized_new(128);

	g_string_append_printf(out, "%s\n%s\n", req->method, req->path);
	canonical_query(out, req->query);
	g_string_append_c(out, '\n');
	for (guint i = 0; i < headers->len; i++) {
		const struct canon_header *h = headers->pdata[i];

		g_string_append_printf(out, "%s:%s\n", h->name, h->value->str);
		if (i)
			g_string_append_c(signed_headers, ';');
		g_string_append(signed_headers, h->name);
	}
	g_string_append_printf(out, "\n%s\n%s", signed_headers->str,
			       payload_hash(req));
	*signed_headers_out = g_string_free(signed_headers, FALSE);
	return out;
}

static void hex_encode(const guchar *bin, gsize len, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (gsize i = 0; i < len; i++) {
		out[2 * i] = hex[bin[i] >> 4];
		out[2 * i + 1] = hex[bin[i] & 0xf];
	}
	out[2 * len] = '\0';
}

/*
 * SHA-256 fetched from OpenSSL's provider once, for the process.  Through
 * EVP_sha256() and HMAC(), OpenSSL 3 looks the algorithm up again at
 * every call, which cost more than the hashing of a request (a third of
 * sigv4_sign()'s instructions, callgrind).  Kept until exit.
 */
static EVP_MD *sha256_method;

static void sha256_fetch(void)
{
	sha256_method = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (!sha256_method)
		g_error("sigv4: OpenSSL has no SHA-256");
}

/* pthread_once, not g_once: ThreadSanitizer sees its ordering. */
static const EVP_MD *sha256_md(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, sha256_fetch);
	return sha256_method;
}

/*
 * SHA-256 of @n pieces, one after the other.  OpenSSL's digests fail only
 * when out of memory, and GLib aborts on that anyway: hence g_error()
 * rather than an error path nobody can test.
 */
static void sha256_of(const void *const *data, const gsize *len, guint n,
		      guchar out[SHA256_LEN])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned int out_len = 0;
	gboolean ok;
	guint i;

	ok = ctx && EVP_DigestInit_ex(ctx, sha256_md(), NULL);
	for (i = 0; ok && i < n; i++)
		ok = EVP_DigestUpdate(ctx, data[i], len[i]);
	ok = ok && EVP_DigestFinal_ex(ctx, out, &out_len) &&
	     out_len == SHA256_LEN;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		g_error("sigv4: SHA-256 failed");
}

static void sha256(const void *data, gsize len, guchar out[SHA256_LEN])
{
	sha256_of(&data, &len, 1, out);
}

static void sha256_hex(const char *data, gsize len,
		       char out[2 * SHA256_LEN + 1])
{
	guchar md[SHA256_LEN];

	sha256(data, len, md);
	hex_encode(md, SHA256_LEN, out);
}

char *sigv4_payload_sha256(const void *data, gsize len)
{
	char *out = g_malloc(2 * SHA256_LEN + 1);

	sha256_hex(data ? data : "", len, out);
	return out;
}

/* RFC 2104 on sha256_of(): the same bytes as HMAC(EVP_sha256(), ...). */
#define SHA256_BLOCK 64
static void hmac_sha256(const void *key, gsize key_len, const char *msg,
			guchar out[SHA256_LEN])
{
	guchar k[SHA256_BLOCK] = { 0 }, pad[SHA256_BLOCK], inner[SHA256_LEN];
	const void *parts[2];
	gsize lens[2];
	guint i;

	if (key_len > SHA256_BLOCK)
		sha256(key, key_len, k);
	else
		memcpy(k, key, key_len);
	for (i = 0; i < SHA256_BLOCK; i++)
		pad[i] = k[i] ^ 0x36;
	parts[0] = pad;
	lens[0] = SHA256_BLOCK;
	parts[1] = msg;
	lens[1] = strlen(msg);
	sha256_of(parts, lens, 2, inner);
	for (i = 0; i < SHA256_BLOCK; i++)
		pad[i] = k[i] ^ 0x5c;
	parts[1] = inner;
	lens[1] = SHA256_LEN;
	sha256_of(parts, lens, 2, out);
	OPENSSL_cleanse(k, sizeof(k));
	OPENSSL_cleanse(pad, sizeof(pad));
	OPENSSL_cleanse(inner, sizeof(inner));
}

/*
 * kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, day), region), service),
 * "aws4_request"); every intermediate key is wiped.
 */
static void derive_signing_key(const char *secret, const char *day,
			       const char *region, const char *service,
			       guchar key[SHA256_LEN])
{
	gsize secret_len = strlen(secret);
	gsize k0_len = 4 + secret_len;
	guchar *k0 = g_malloc(k0_len);
	guchar a[SHA256_LEN], b[SHA256_LEN];

	memcpy(k0, "AWS4", 4);
	memcpy(k0 + 4, secret, secret_len);
	hmac_sha256(k0, k0_len, day, a);
	OPENSSL_cleanse(k0, k0_len);
	g_free(k0);
	hmac_sha256(a, sizeof(a), region, b);
	hmac_sha256(b, sizeof(b), service, a);
	hmac_sha256(a, sizeof(a), "aws4_request", key);
	OPENSSL_cleanse(a, sizeof(a));
	OPENSSL_cleanse(b, sizeof(b));
}

/*
 * The signing key changes only with the day, the secret, the region and
 * the service, so each thread keeps its last one: four of a request's
 * five HMACs.  The secret is not kept, only its SHA-256, to tell it.
 */
#define KEY_CACHE_SCOPE 64
struct key_cache {
	gboolean valid;
	char day[sizeof("20130524")];
	char region[KEY_CACHE_SCOPE];
	char service[KEY_CACHE_SCOPE];
	guchar secret_sha[SHA256_LEN];
	guchar key[SHA256_LEN];
};

static __thread struct key_cache key_cache;

static void signing_key(const char *secret, const char *day, const char *region,
			const char *service, guchar key[SHA256_LEN])
{
	struct key_cache *kc = &key_cache;
	guchar sha[SHA256_LEN];

	if (strlen(region) >= KEY_CACHE_SCOPE ||
	    strlen(service) >= KEY_CACHE_SCOPE) {
		derive_signing_key(secret, day, region, service, key);
		return;
	}
	sha256(secret, strlen(secret), sha);
	if (!kc->valid || strcmp(kc->day, day) || strcmp(kc->region, region) ||
	    strcmp(kc->service, service) ||
	    CRYPTO_memcmp(kc->secret_sha, sha, SHA256_LEN)) {
		derive_signing_key(secret, day, region, service, kc->key);
		g_strlcpy(kc->day, day, sizeof(kc->day));
		g_strlcpy(kc->region, region, sizeof(kc->region));
		g_strlcpy(kc->service, service, sizeof(kc->service));
		memcpy(kc->secret_sha, sha, SHA256_LEN);
		kc->valid = TRUE;
	}
	OPENSSL_cleanse(sha, sizeof(sha));
	memcpy(key, kc->key, SHA256_LEN);
}

static char *string_to_sign(const struct sigv4_request *req,
			    const struct amz_date *date, const char *canonical,
			    gsize canonical_len)
{
	char hash[2 * SHA256_LEN + 1];

	sha256_hex(canonical, canonical_len, hash);
	return g_strdup_printf(
		SIGV4_ALGORITHM "\n%s\n%s/%s/%s/aws4_request\n%s", date->full,
		date->day, req->region, req->service, hash);
}

char *sigv4_canonical_request(const struct sigv4_request *req,
			      const struct sigv4_credentials *creds,
			      char **signed_headers_out)
{
	struct amz_date date;
	char *signed_headers = NULL;
	GString *canonical;

	g_return_val_if_fail(req != NULL, NULL);
	g_return_val_if_fail(request_valid(req), NULL);

	amz_date_init(&date, req->unix_time);
	canonical = build_canonical(req, creds, &date, &signed_headers);
	if (signed_headers_out)
		*signed_headers_out = signed_headers;
	else
		g_free(signed_headers);
	return g_string_free(canonical, FALSE);
}

char *sigv4_string_to_sign(const struct sigv4_request *req,
			   const char *canonical_request)
{
	struct amz_date date;

	g_return_val_if_fail(req != NULL, NULL);
	g_return_val_if_fail(canonical_request != NULL, NULL);
	g_return_val_if_fail(req->region && req->service, NULL);
	g_return_val_if_fail(
		req->unix_time >= 0 && req->unix_time < SIGV4_MAX_TIME, NULL);

	amz_date_init(&date, req->unix_time);
	return string_to_sign(req, &date, canonical_request,
			      strlen(canonical_request));
}

char **sigv4_sign(const struct sigv4_credentials *creds,
		  const struct sigv4_request *req)
{
	g_autofree char *signed_headers = NULL;
	g_autofree char *sts = NULL;
	guchar key[SHA256_LEN], sig[SHA256_LEN];
	char sig_hex[2 * SHA256_LEN + 1];
	struct amz_date date;
	GString *canonical;
	GPtrArray *out;

	g_return_val_if_fail(creds != NULL, NULL);
	g_return_val_if_fail(creds->access_key_id != NULL, NULL);
	g_return_val_if_fail(creds->secret_access_key != NULL, NULL);
	g_return_val_if_fail(req != NULL, NULL);
	g_return_val_if_fail(request_valid(req), NULL);

	amz_date_init(&date, req->unix_time);
	canonical = build_canonical(req, creds, &date, &signed_headers);
	sts = string_to_sign(req, &date, canonical->str, canonical->len);
	/* The canonical request holds the session token, if any. */
	OPENSSL_cleanse(canonical->str, canonical->len);
	g_string_free(canonical, TRUE);

	signing_key(creds->secret_access_key, date.day, req->region,
		    req->service, key);
	hmac_sha256(key, sizeof(key), sts, sig);
	OPENSSL_cleanse(key, sizeof(key));
	hex_encode(sig, sizeof(sig), sig_hex);

	out = g_ptr_array_new();
	g_ptr_array_add(out, g_strdup_printf("x-amz-date: %s", date.full));
	g_ptr_array_add(out, g_strdup_printf("x-amz-content-sha256: %s",
					     payload_hash(req)));
	if (token_of(creds))
		g_ptr_array_add(out, g_strdup_printf("x-amz-security-token: %s",
						     token_of(creds)));
	g_ptr_array_add(
		out,
		g_strdup_printf("Authorization: " SIGV4_ALGORITHM
				" Credential=%s/%s/%s/%s/"
				"aws4_request, SignedHeaders=%s, Signature=%s",
				creds->access_key_id, date.day, req->region,
				req->service, signed_headers, sig_hex));
	g_ptr_array_add(out, NULL);
	return (char **)g_ptr_array_free(out, FALSE);
}
