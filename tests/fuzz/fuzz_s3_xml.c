/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuzz_s3_xml - libFuzzer target for s3_xml: every input goes through
 * s3_xml_parse_list(), s3_xml_parse_error(), s3_xml_parse_time() and the
 * multipart parsers (initiate, complete, uploads), and the
 * results are checked against the header's promises: keys and prefixes are
 * never empty and, decoding only ever shrinking text, together no longer
 * than the input; a failure is a BFS_ERROR with a positive errno and a
 * message; a parsed time is the second its fields name (checked against an
 * independent date model).
 *
 * Built and run by tests/fuzz/meson.build (-Dfuzz=true with clang; the
 * seeds are tests/unit/fixtures and tests/fuzz/corpus/s3_xml), or by hand:
 *
 *   ./fuzz_s3_xml -max_total_time=60 CORPUS_DIR tests/unit/fixtures
 *
 * With any compiler it is also linked with replay_main.c into a program
 * that runs the seed files once each: a regression test in every build.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "fuzz.h"
#include "s3_xml.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	s3_xml_init();
	return 0;
}

static void check_error(const GError *error)
{
	g_assert_nonnull(error);
	g_assert_true(error->domain == BFS_ERROR);
	g_assert_cmpint(error->code, >, 0);
	g_assert_true(error->message && error->message[0]);
}

static void check_page(const struct s3_list_page *page, size_t size)
{
	size_t total = 0;

	g_assert_nonnull(page->objects);
	g_assert_nonnull(page->common_prefixes);
	for (guint i = 0; i < page->objects->len; i++) {
		const struct s3_object *obj = page->objects->pdata[i];

		g_assert_nonnull(obj->key);
		g_assert_cmpuint(strlen(obj->key), >, 0);
		total += strlen(obj->key);
		if (obj->etag)
			total += strlen(obj->etag);
	}
	for (guint i = 0; i < page->common_prefixes->len; i++) {
		g_assert_cmpuint(strlen(page->common_prefixes->pdata[i]), >, 0);
		total += strlen(page->common_prefixes->pdata[i]);
	}
	/* Entities and %XX only ever shrink: the text came from the input. */
	g_assert_cmpuint(total, <=, size);
}

/*
 * A parsed time is the one its fields name, by an independent model: the
 * C library's timegm(), not a copy of s3_xml.c's own calendar arithmetic.
 */
static void check_time(const char *text, gint64 t)
{
	struct tm tm = { 0 };
	int y, mo;

	g_assert_cmpint(sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo,
			       &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
			       &tm.tm_sec),
			==, 6);
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	g_assert_cmpint(t, ==, (gint64)timegm(&tm));
	g_assert_true(text[19] == '.' || text[19] == 'Z');
}

/* Multipart answers: an id, an ETag or uploads, else an error. */
static void check_multipart(const char *buf, size_t size)
{
	g_auto(s3_error_info) info = { 0 };
	g_autoptr(GError) error = NULL;
	g_autofree char *id = s3_xml_parse_initiate(buf, size, &error);
	g_autofree char *etag = NULL;
	struct s3_uploads_page *page;

	if (id)
		g_assert_cmpuint(strlen(id), >, 0);
	else
		check_error(error);
	g_clear_error(&error);
	if (!s3_xml_parse_complete(buf, size, &etag, &info, &error) && error)
		check_error(error);
	g_clear_error(&error);
	page = s3_xml_parse_uploads(buf, size, &error);
	if (!page) {
		check_error(error);
		return;
	}
	for (guint i = 0; i < page->uploads->len; i++) {
		const struct s3_upload *u = page->uploads->pdata[i];

		g_assert_true(u->key[0] && u->upload_id[0]);
	}
	s3_uploads_page_free(page);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	g_autoptr(GError) list_error = NULL;
	g_autoptr(GError) doc_error = NULL;
	g_auto(s3_error_info) info = { 0 };
	g_autoptr(s3_list_page) page = NULL;
	g_autofree char *text = NULL;
	gint64 t = 0;

	page = s3_xml_parse_list(buf, size, &list_error);
	if (page)
		check_page(page, size);
	else
		check_error(list_error);

	if (s3_xml_parse_error(buf, size, &info, &doc_error))
		g_assert_true(info.code && info.code[0]);
	else
		check_error(doc_error);

	check_multipart(buf, size);

	text = g_strndup(buf, MIN(size, 64));
	if (s3_xml_parse_time(text, &t)) {
		g_assert_cmpuint(strlen(text), >=, 20);
		check_time(text, t);
	}
	return 0;
}
