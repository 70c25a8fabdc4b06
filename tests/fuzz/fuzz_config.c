/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuzz_config - libFuzzer target for the -o option strings
 * (config_parse_options()), the entry point that sees argv and fstab.
 *
 * The first input byte picks the mode (modulo 4); the rest is:
 *   0  an -o string, parsed with and without a pass-through array: what
 *      the strict parse accepts the lenient one accepts too and passes
 *      nothing through; a failure is EINVAL with a one-line message (keys
 *      and values escaped); a success leaves a config whose every field is
 *      in its documented range, whose endpoints are normalized (and parse
 *      back to themselves), and which config_describe() can print;
 *   1  any bytes as the value of index=, escaped the way the header says:
 *      the parsed path is exactly those bytes ("\," and "\\" round-trip);
 *   2  an endpoint URL with a user:password part holding a marker: it is
 *      refused, and the marker appears in no error message;
 *   3  an -o string where an option name contains "secret", "token" or
 *      "password": refused (even when unknown options pass through), and
 *      the value appears in no error message.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fuzz.h"

#define MARKER "Pa55w0rdMarker"

static const char *const known[] = {
	"endpoint",
	"region",
	"addressing",
	"ca_file",
	"index",
	"profile",
	"anonymous",
	"connect_timeout",
	"stall_timeout",
	"request_timeout",
	"max_attempts",
	"max_connections",
	"ro",
	"rw",
};

static void check_error(const GError *error)
{
	CHECK(error && error->domain == BFS_ERROR && error->code == EINVAL);
	CHECK(error->message && error->message[0]);
	for (const char *p = error->message; *p; p++)
		CHECK((guchar)*p >= 0x20 && *p != 0x7f);
	CHECK(g_utf8_validate(error->message, -1, NULL));
}

static void check_endpoint(const char *url)
{
	struct config again;
	g_autoptr(GError) error = NULL;
	g_autofree char *opt = g_strconcat("endpoint=", url, NULL);
	const char *host;

	CHECK(g_str_has_prefix(url, "http://") ||
	      g_str_has_prefix(url, "https://"));
	host = strstr(url, "://") + 3;
	CHECK(*host && !strchr(host, '/') && !strchr(url, '@'));
	for (const char *p = host; *p; p++)
		CHECK(!g_ascii_isupper(*p) && (guchar)*p > 0x20);
	CHECK(!g_str_has_suffix(url, ":80") || g_str_has_prefix(url, "https"));
	CHECK(!g_str_has_suffix(url, ":443") || g_str_has_prefix(url, "http:"));
	/* Normalized means a fixed point.  ',' and '\' cannot be in it. */
	CHECK(!strchr(url, ',') && !strchr(url, '\\'));
	config_init(&again);
	CHECK(config_parse_options(&again, opt, NULL, &error));
	CHECK(again.endpoints->len == 1);
	CHECK(strcmp(again.endpoints->pdata[0], url) == 0);
	config_clear(&again);
}

static void check_config(const struct config *cfg)
{
	g_autofree char *text = config_describe(cfg);

	CHECK(text && g_str_has_suffix(text, "\n"));
	/* The description says which writes the mount allows (-o ro). */
	CHECK(strstr(text, cfg->read_only
				   ? "writes:           none (-o ro)"
				   : "writes:           new names only"));
	CHECK(cfg->max_attempts >= 1 && cfg->max_attempts <= 100);
	CHECK(cfg->max_connections <= 1000000);
	CHECK(cfg->connect_timeout > 0 && cfg->connect_timeout <= 3600);
	CHECK(cfg->stall_timeout > 0 && cfg->stall_timeout <= 3600);
	CHECK(cfg->request_timeout >= 0 && cfg->request_timeout <= 86400);
	CHECK(!cfg->index_path || cfg->index_path[0]);
	CHECK(!cfg->ca_file || cfg->ca_file[0]);
	if (cfg->region) {
		CHECK(cfg->region[0] && strlen(cfg->region) <= 64);
		for (const char *p = cfg->region; *p; p++)
			CHECK(g_ascii_isalnum(*p) || strchr("-_.", *p));
	}
	for (guint i = 0; i < cfg->endpoints->len; i++) {
		check_endpoint(cfg->endpoints->pdata[i]);
		for (guint j = 0; j < i; j++)
			CHECK(strcmp(cfg->endpoints->pdata[i],
				     cfg->endpoints->pdata[j]) != 0);
	}
}

static gboolean is_known(const char *item)
{
	gsize n = strcspn(item, "=");

	for (gsize i = 0; i < G_N_ELEMENTS(known); i++) {
		if (strlen(known[i]) == n && !strncmp(item, known[i], n))
			return TRUE;
	}
	return FALSE;
}

static void fuzz_options(const char *opts)
{
	struct config strict, lenient;
	g_autoptr(GError) e1 = NULL;
	g_autoptr(GError) e2 = NULL;
	g_autoptr(GPtrArray) pass = g_ptr_array_new_with_free_func(g_free);
	gboolean ok1, ok2;

	config_init(&strict);
	config_init(&lenient);
	ok1 = config_parse_options(&strict, opts, NULL, &e1);
	ok2 = config_parse_options(&lenient, opts, pass, &e2);
	if (ok1) {
		CHECK(ok2 && pass->len == 0);
		check_config(&strict);
	} else {
		check_error(e1);
	}
	if (ok2) {
		check_config(&lenient);
		for (guint i = 0; i < pass->len; i++) {
			CHECK(((char *)pass->pdata[i])[0]);
			CHECK(!is_known(pass->pdata[i]));
		}
	} else {
		check_error(e2);
	}
	config_clear(&strict);
	config_clear(&lenient);
}

/* Escapes @len bytes (no NUL) as an -o value: "\," and "\\". */
static char *escape_value(const char *s, gsize len)
{
	GString *out = g_string_new(NULL);

	for (gsize i = 0; i < len; i++) {
		if (s[i] == ',' || s[i] == '\\')
			g_string_append_c(out, '\\');
		g_string_append_c(out, s[i]);
	}
	return g_string_free(out, FALSE);
}

static void fuzz_escaped_value(const char *value)
{
	struct config cfg;
	g_autoptr(GError) error = NULL;
	g_autofree char *esc = escape_value(value, strlen(value));
	g_autofree char *opt = g_strconcat("ro,index=", esc, ",rw", NULL);
	gboolean ok;

	config_init(&cfg);
	ok = config_parse_options(&cfg, opt, NULL, &error);
	if (!*value) {
		CHECK(!ok);
		check_error(error);
	} else {
		CHECK(ok && cfg.rw_ignored);
		CHECK(strcmp(cfg.index_path, value) == 0);
	}
	config_clear(&cfg);
}

static void check_no_marker(const char *opts, GPtrArray *pass)
{
	struct config cfg;
	g_autoptr(GError) error = NULL;

	config_init(&cfg);
	CHECK(!config_parse_options(&cfg, opts, pass, &error));
	check_error(error);
	if (strstr(error->message, MARKER)) {
		fprintf(stderr, "secret in the error: %s\n", error->message);
		abort();
	}
	config_clear(&cfg);
}

static void fuzz_userinfo(const char *tail)
{
	g_autofree char *esc = NULL;
	g_autofree char *opts = NULL;
	const char *at = strrchr(tail, '@');

	/* The marker must not come back through the host part. */
	if (strstr(at ? at : tail, MARKER))
		return;
	esc = escape_value(tail, strlen(tail));
	opts = g_strdup_printf("endpoint=http://user:%s%s%s", MARKER, esc,
			       at ? "" : "@host");
	check_no_marker(opts, NULL);
}

static void fuzz_secret_name(const char *tail)
{
	static const char *const names[] = {
		"secret",	 "AWS_SECRET_ACCESS_KEY",
		"session_token", "password",
		"Passwd",	 "access_key",
		"credentials",
	};
	g_autoptr(GPtrArray) pass = g_ptr_array_new_with_free_func(g_free);
	g_autofree char *esc = escape_value(tail, strlen(tail));
	const char *name = names[strlen(tail) % G_N_ELEMENTS(names)];
	g_autofree char *opts =
		g_strdup_printf("ro,x%s=%s%s,allow_other", name, MARKER, esc);

	check_no_marker(opts, pass);
	CHECK(pass->len == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	g_autofree char *text = NULL;

	if (size == 0)
		return 0;
	/* Options are C strings: everything after a NUL is cut off. */
	text = g_strndup((const char *)data + 1, size - 1);
	switch (data[0] % 4) {
	case 0:
		fuzz_options(text);
		break;
	case 1:
		fuzz_escaped_value(text);
		break;
	case 2:
		fuzz_userinfo(text);
		break;
	case 3:
		fuzz_secret_name(text);
		break;
	}
	return 0;
}
