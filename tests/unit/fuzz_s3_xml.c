/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuzz_s3_xml - libFuzzer target for s3_xml: every input goes through
 * s3_xml_parse_list(), s3_xml_parse_error() and s3_xml_parse_time(), and the
 * results are checked against the header's promises.
 *
 *   clang -fsanitize=fuzzer,address,undefined -Isrc src/error.c \
 *     src/s3_xml.c tests/unit/fuzz_s3_xml.c $(pkg-config --cflags --libs \
 *     glib-2.0 libxml-2.0) -o fuzz_s3_xml
 *   ./fuzz_s3_xml -max_total_time=60 CORPUS_DIR tests/unit/fixtures
 *
 * Built with -DBFS_FUZZ_MAIN instead (any compiler, no libFuzzer), it is a
 * plain program that runs the files named on its command line once each:
 * a regression runner for saved crashes.
 */
#include <stdint.h>
#include <string.h>

#include "error.h"
#include "s3_xml.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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

static void check_page(const struct s3_list_page *page)
{
	g_assert_nonnull(page->objects);
	g_assert_nonnull(page->common_prefixes);
	for (guint i = 0; i < page->objects->len; i++) {
		const struct s3_object *obj = page->objects->pdata[i];

		g_assert_nonnull(obj->key);
		g_assert_cmpuint(strlen(obj->key), >, 0);
	}
	for (guint i = 0; i < page->common_prefixes->len; i++)
		g_assert_cmpuint(strlen(page->common_prefixes->pdata[i]), >, 0);
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
		check_page(page);
	else
		check_error(list_error);

	if (s3_xml_parse_error(buf, size, &info, &doc_error))
		g_assert_true(info.code && info.code[0]);
	else
		check_error(doc_error);

	text = g_strndup(buf, MIN(size, 64));
	if (s3_xml_parse_time(text, &t))
		g_assert_cmpuint(strlen(text), >=, 20);
	return 0;
}

#ifdef BFS_FUZZ_MAIN
int main(int argc, char **argv)
{
	LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		g_autoptr(GError) error = NULL;
		g_autofree char *buf = NULL;
		gsize len = 0;

		if (!g_file_get_contents(argv[i], &buf, &len, &error))
			g_error("%s", error->message);
		LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
	}
	return 0;
}
#endif
