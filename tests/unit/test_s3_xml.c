/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_s3_xml - ListObjectsV2 and <Error> parsing on AWS documentation
 * examples, s3rver-style bodies and malformed input.
 *
 * Fixtures are read from g_test_build_filename(G_TEST_DIST, "fixtures", ...):
 * set G_TEST_SRCDIR to tests/unit of the source tree (without it GLib looks
 * next to the test binary).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "error.h"
#include "s3_xml.h"

#define AWS_NS "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""

static char *load_fixture(const char *name, gsize *len)
{
	g_autofree char *path =
		g_test_build_filename(G_TEST_DIST, "fixtures", name, NULL);
	g_autoptr(GError) error = NULL;
	char *buf = NULL;

	if (!g_file_get_contents(path, &buf, len, &error))
		g_error("fixture %s: %s (set G_TEST_SRCDIR to tests/unit)",
			path, error->message);
	return buf;
}

static struct s3_list_page *parse_list_fixture(const char *name)
{
	gsize len = 0;
	g_autofree char *buf = load_fixture(name, &len);
	g_autoptr(GError) error = NULL;
	struct s3_list_page *page = s3_xml_parse_list(buf, len, &error);

	g_assert_no_error(error);
	g_assert_nonnull(page);
	return page;
}

static const struct s3_object *object_at(const struct s3_list_page *page,
					 guint i)
{
	g_assert_cmpuint(i, <, page->objects->len);
	return page->objects->pdata[i];
}

static void check_object(const struct s3_list_page *page, guint i,
			 const char *key, guint64 size, gint64 mtime,
			 const char *etag)
{
	const struct s3_object *obj = object_at(page, i);

	g_assert_cmpstr(obj->key, ==, key);
	g_assert_cmpuint(obj->size, ==, size);
	g_assert_cmpint(obj->mtime, ==, mtime);
	g_assert_cmpstr(obj->etag, ==, etag);
}

static void test_list_aws_example(void)
{
	g_autoptr(s3_list_page) page =
		parse_list_fixture("list_aws_example.xml");

	g_assert_cmpuint(page->objects->len, ==, 2);
	check_object(page, 0, "ExampleObject.txt", 857, 1379441273,
		     "599bab3ed2c697f1d26842727561fd94");
	check_object(page, 1, "my-image.jpg", 434234, 1255369830,
		     "fba9dede5f27731c9771645a39863328");
	g_assert_cmpuint(page->common_prefixes->len, ==, 0);
	g_assert_false(page->is_truncated);
	g_assert_null(page->next_continuation_token);
	g_assert_null(page->continuation_token);
	g_assert_cmpuint(page->key_count, ==, 2);
}

static void test_list_common_prefixes(void)
{
	g_autoptr(s3_list_page) page =
		parse_list_fixture("list_common_prefixes.xml");

	g_assert_cmpuint(page->objects->len, ==, 1);
	check_object(page, 0, "sample.jpg", 142863, 1298685380,
		     "bf1d737a4d46a19f3bced6905cc8b902");
	g_assert_cmpuint(page->common_prefixes->len, ==, 2);
	g_assert_cmpstr(page->common_prefixes->pdata[0], ==, "photos/");
	g_assert_cmpstr(page->common_prefixes->pdata[1], ==, "videos/");
	g_assert_cmpuint(page->key_count, ==, 3);
}

static void test_list_continuation(void)
{
	g_autoptr(s3_list_page) first =
		parse_list_fixture("list_continuation_1.xml");
	g_autoptr(s3_list_page) second =
		parse_list_fixture("list_continuation_2.xml");

	g_assert_true(first->is_truncated);
	g_assert_cmpstr(first->next_continuation_token, ==,
			"1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	g_assert_null(first->continuation_token);
	g_assert_cmpuint(first->objects->len, ==, 3);
	check_object(first, 0, "happyface.jpg", 11, 1416598805,
		     "70ee1738b6b21e2c8a43f3a5ab0eee71");
	check_object(first, 2, "test2.jpg", 0, 1399006311,
		     "e1f4aa7c1b2a8c5d3e9f0a1b2c3d4e5f-2");

	g_assert_false(second->is_truncated);
	g_assert_null(second->next_continuation_token);
	g_assert_cmpstr(second->continuation_token, ==,
			"1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	/* the largest size there is, and a time without a fraction */
	check_object(second, 0, "zebra.jpg", G_MAXUINT64, 1416598805,
		     "70ee1738b6b21e2c8a43f3a5ab0eee71");
}

static void test_list_encoding_url(void)
{
	g_autoptr(s3_list_page) page =
		parse_list_fixture("list_encoding_url.xml");
	static const char *const keys[] = {
		"100%.csv",
		"a b.txt", /* AWS sends a space as '+' */
		"a+b.txt", /* and a '+' as %2B */
		"ctl\001char\177",
		"emoji-\xf0\x9f\x98\x80",
		"\xed\x95\x9c\xea\xb8\x80/x.txt", /* lowercase hex too */
		"raw-\xff-byte", /* not UTF-8: bytes are bytes */
	};

	g_assert_cmpuint(page->objects->len, ==, G_N_ELEMENTS(keys));
	for (guint i = 0; i < G_N_ELEMENTS(keys); i++) {
		g_assert_cmpstr(object_at(page, i)->key, ==, keys[i]);
		g_assert_cmpuint(object_at(page, i)->size, ==, i);
	}
	check_object(page, 0, "100%.csv", 0, 1709251199,
		     "d41d8cd98f00b204e9800998ecf8427e");
	g_assert_cmpuint(page->common_prefixes->len, ==, 2);
	g_assert_cmpstr(page->common_prefixes->pdata[0], ==, "run books/");
	g_assert_cmpstr(page->common_prefixes->pdata[1], ==,
			"\xed\x95\x9c\xea\xb8\x80/");
	/* Tokens are opaque: never decoded. */
	g_assert_cmpstr(page->next_continuation_token, ==, "1x+y%2F/z==");
	g_assert_true(page->is_truncated);
	g_assert_cmpuint(page->key_count, ==, 7);
}

static void test_list_s3rver(void)
{
	g_autoptr(s3_list_page) page = parse_list_fixture("list_s3rver.xml");

	g_assert_cmpuint(page->objects->len, ==, 2);
	check_object(page, 0, "train/img_0_of_2.jpeg", 322624, 1714979289,
		     "6af6ae4b6c5d3b6e35e5f0e71f2e6b1c");
	check_object(page, 1, "train/img_1_of_2.jpeg", 322624, 1714979290,
		     "0b6b2f5b7e8d4c1a9f3e2d1c0b9a8f7e");
	g_assert_false(page->is_truncated);
	g_assert_cmpuint(page->key_count, ==, 2);
}

static void test_list_empty_truncated(void)
{
	g_autoptr(s3_list_page) page =
		parse_list_fixture("list_empty_truncated.xml");

	g_assert_cmpuint(page->objects->len, ==, 0);
	g_assert_cmpuint(page->common_prefixes->len, ==, 0);
	g_assert_true(page->is_truncated);
	g_assert_cmpstr(page->continuation_token, ==, "AAAA");
	g_assert_cmpstr(page->next_continuation_token, ==, "BBBB+/=");
	g_assert_cmpuint(page->key_count, ==, 0);
}

static struct s3_list_page *parse_list_str(const char *xml)
{
	g_autoptr(GError) error = NULL;
	struct s3_list_page *page = s3_xml_parse_list(xml, strlen(xml), &error);

	g_assert_no_error(error);
	g_assert_nonnull(page);
	return page;
}

/* No namespace, a prefixed one, and any element order. */
static void test_list_namespaces(void)
{
	g_autoptr(s3_list_page) none = parse_list_str(
		"<ListBucketResult><Contents><Size>3</Size><Key>k</Key>"
		"</Contents></ListBucketResult>");
	g_autoptr(s3_list_page) prefixed = parse_list_str(
		"<s3:ListBucketResult xmlns:s3=\"http://s3.amazonaws.com/doc/"
		"2006-03-01/\"><s3:Contents><s3:Key>k</s3:Key><s3:Size>3"
		"</s3:Size></s3:Contents><s3:IsTruncated>true</s3:IsTruncated>"
		"</s3:ListBucketResult>");
	g_autoptr(s3_list_page) late_encoding = parse_list_str(
		"<ListBucketResult " AWS_NS "><Contents><Key>a+b</Key>"
		"<Size>1</Size></Contents><EncodingType>url</EncodingType>"
		"</ListBucketResult>");

	check_object(none, 0, "k", 3, 0, NULL);
	check_object(prefixed, 0, "k", 3, 0, NULL);
	g_assert_true(prefixed->is_truncated);
	check_object(late_encoding, 0, "a b", 1, 0, NULL);
}

/* Without <EncodingType>, text is taken as is, after XML's own escapes. */
static void test_list_raw_keys(void)
{
	g_autoptr(s3_list_page) page = parse_list_str(
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<ListBucketResult " AWS_NS ">"
		"<Contents><Key>a+b%20c</Key><Size>1</Size></Contents>"
		"<Contents><Key>&lt;&amp;&gt;&quot;&apos;&#x1F600;</Key>"
		"<Size>007</Size><ETag>\"unbalanced</ETag></Contents>"
		"<Contents><Key><![CDATA[x<y]]> z</Key><Size>2</Size>"
		"<ETag></ETag><Unknown><Key>ignored</Key></Unknown>"
		"</Contents>"
		"<CommonPrefixes><Prefix>p+q%2F/</Prefix></CommonPrefixes>"
		"<Something>else</Something>"
		"</ListBucketResult>");

	check_object(page, 0, "a+b%20c", 1, 0, NULL);
	check_object(page, 1, "<&>\"'\xf0\x9f\x98\x80", 7, 0, "\"unbalanced");
	check_object(page, 2, "x<y z", 2, 0, "");
	g_assert_cmpstr(page->common_prefixes->pdata[0], ==, "p+q%2F/");
}

static void check_list_error(const char *xml, gssize len, int code,
			     const char *message)
{
	g_autoptr(GError) error = NULL;
	struct s3_list_page *page = s3_xml_parse_list(
		xml, len < 0 ? strlen(xml) : (gsize)len, &error);

	g_assert_null(page);
	g_assert_error(error, BFS_ERROR, code);
	g_assert_cmpstr(error->message, ==, message);
}

static void test_list_malformed_fixtures(void)
{
	static const struct {
		const char *fixture;
		const char *message;
	} cases[] = {
		{ "bad_truncated.xml",
		  "malformed ListObjectsV2 response: line 7: Premature end of "
		  "data in tag Size line 7" },
		{ "bad_tag_mismatch.xml",
		  "malformed ListObjectsV2 response: line 3: Opening and "
		  "ending tag mismatch: Key line 3 and Contents" },
		{ "bad_wrong_root.xml",
		  "ListObjectsV2 response: root element is "
		  "<ListAllMyBucketsResult>, not <ListBucketResult>" },
		{ "bad_size.xml",
		  "ListObjectsV2 response: <Size> 'abc' of key 'x' is not a "
		  "number" },
		{ "bad_size_huge.xml",
		  "ListObjectsV2 response: <Size> '18446744073709551616' of "
		  "key 'big' is out of range" },
		{ "bad_percent.xml",
		  "ListObjectsV2 response: <Key> 'a%zz' of <Contents> #2 has "
		  "an invalid escape '%zz' at byte 1 (encoding-type url)" },
		{ "bad_missing_key.xml",
		  "ListObjectsV2 response: <Contents> #2 has no <Key>" },
		{ "bad_missing_size.xml",
		  "ListObjectsV2 response: <Contents> #3 (key 'no size here') "
		  "has no <Size>" },
		{ "bad_doctype_xxe.xml",
		  "ListObjectsV2 response: has a DOCTYPE, which S3 never "
		  "sends" },
		{ "bad_billion_laughs.xml",
		  "malformed ListObjectsV2 response: line 1: Detected an "
		  "entity reference loop" },
		{ "error_slowdown.xml",
		  "ListObjectsV2 response: S3 error SlowDown: Please reduce "
		  "your request rate. (request id 9CE2WN7KXSMGG9QD)" },
		{ "error_s3rver_nosuchbucket.xml",
		  "ListObjectsV2 response: S3 error NoSuchBucket: The "
		  "specified bucket does not exist (request id none)" },
	};

	for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
		gsize len = 0;
		g_autofree char *buf = load_fixture(cases[i].fixture, &len);

		g_test_message("fixture %s", cases[i].fixture);
		check_list_error(buf, (gssize)len, EPROTO, cases[i].message);
	}
}

#define LIST_OF(contents)                                                      \
	"<ListBucketResult " AWS_NS ">" contents "</ListBucketResult>"
#define ONE(key, size)                                                         \
	"<Contents><Key>" key "</Key><Size>" size "</Size></Contents>"
#define PREFIX(p) "<CommonPrefixes><Prefix>" p "</Prefix></CommonPrefixes>"
#define URL_LIST_OF(contents)                                                  \
	LIST_OF("<EncodingType>url</EncodingType>" contents)

static void test_list_malformed_inline(void)
{
	static const struct {
		const char *xml;
		const char *message;
	} cases[] = {
		{ "", "malformed ListObjectsV2 response: line 1: Document is "
		      "empty" },
		{ "not xml", "malformed ListObjectsV2 response: line 1: Start "
			     "tag expected, '<' not found" },
		{ LIST_OF("") "<extra/>",
		  "malformed ListObjectsV2 response: line 1: Extra content at "
		  "the end of the document" },
		{ LIST_OF(ONE("k", " 12")),
		  "ListObjectsV2 response: <Size> ' 12' of key 'k' is not a "
		  "number" },
		{ LIST_OF(ONE("k", "+12")),
		  "ListObjectsV2 response: <Size> '+12' of key 'k' is not a "
		  "number" },
		{ LIST_OF(ONE("k", "-1")),
		  "ListObjectsV2 response: <Size> '-1' of key 'k' is not a "
		  "number" },
		{ LIST_OF(ONE("k", "12abc")),
		  "ListObjectsV2 response: <Size> '12abc' of key 'k' is not a "
		  "number" },
		{ LIST_OF(ONE("k", "0x10")),
		  "ListObjectsV2 response: <Size> '0x10' of key 'k' is not a "
		  "number" },
		{ LIST_OF(ONE("k", "")),
		  "ListObjectsV2 response: <Size> '' of key 'k' is not a "
		  "number" },
		{ LIST_OF(ONE("k", "1e3")),
		  "ListObjectsV2 response: <Size> '1e3' of key 'k' is not a "
		  "number" },
		{ LIST_OF(ONE("k", "99999999999999999999999999999999999")),
		  "ListObjectsV2 response: <Size> "
		  "'99999999999999999999999999999999999' of key 'k' is out of "
		  "range" },
		{ LIST_OF(ONE("tab\tkey", "x")),
		  "ListObjectsV2 response: <Size> 'x' of key 'tab\\tkey' is "
		  "not a number" },
		{ LIST_OF(ONE("", "1")),
		  "ListObjectsV2 response: <Contents> #1 has an empty <Key>" },
		{ LIST_OF("<Contents><Key>a</Key><Key>b</Key><Size>1</Size>"
			  "</Contents>"),
		  "ListObjectsV2 response: <Contents> #1 has more than one "
		  "<Key>" },
		{ LIST_OF("<Contents><Key>a</Key><Size>1</Size><Size>2</Size>"
			  "</Contents>"),
		  "ListObjectsV2 response: <Contents> #1 (key 'a') has more "
		  "than one <Size>" },
		{ LIST_OF("<Contents><Key>a</Key><Size>1</Size><LastModified>"
			  "yesterday</LastModified></Contents>"),
		  "ListObjectsV2 response: <LastModified> 'yesterday' of key "
		  "'a' is not a time like 2009-10-12T17:50:30.000Z" },
		{ LIST_OF("<IsTruncated>yes</IsTruncated>"),
		  "ListObjectsV2 response: <IsTruncated> 'yes' is neither "
		  "true nor false" },
		{ LIST_OF("<KeyCount>4294967296</KeyCount>"),
		  "ListObjectsV2 response: <KeyCount> '4294967296' is out of "
		  "range" },
		{ LIST_OF("<KeyCount>two</KeyCount>"),
		  "ListObjectsV2 response: <KeyCount> 'two' is not a number" },
		{ LIST_OF("<EncodingType>base64</EncodingType>"),
		  "ListObjectsV2 response: unsupported <EncodingType> "
		  "'base64'" },
		{ URL_LIST_OF(ONE("100%", "1")),
		  "ListObjectsV2 response: <Key> '100%' of <Contents> #1 has "
		  "an invalid escape '%' at byte 3 (encoding-type url)" },
		{ URL_LIST_OF(ONE("ab%4", "1")),
		  "ListObjectsV2 response: <Key> 'ab%4' of <Contents> #1 has "
		  "an invalid escape '%4' at byte 2 (encoding-type url)" },
		{ URL_LIST_OF(ONE("%G0", "1")),
		  "ListObjectsV2 response: <Key> '%G0' of <Contents> #1 has "
		  "an invalid escape '%G0' at byte 0 (encoding-type url)" },
		{ URL_LIST_OF(ONE("nul%00byte", "1")),
		  "ListObjectsV2 response: <Key> 'nul%00byte' of <Contents> #1 "
		  "has a NUL escape '%00' at byte 3 (encoding-type url)" },
		{ URL_LIST_OF(ONE("%", "1")),
		  "ListObjectsV2 response: <Key> '%' of <Contents> #1 has an "
		  "invalid escape '%' at byte 0 (encoding-type url)" },
		{ URL_LIST_OF(PREFIX("a/") PREFIX("b%2/")),
		  "ListObjectsV2 response: <Prefix> 'b%2/' of <CommonPrefixes> "
		  "#2 has an invalid escape '%2/' at byte 1 (encoding-type "
		  "url)" },
		{ LIST_OF("<CommonPrefixes></CommonPrefixes>"),
		  "ListObjectsV2 response: <CommonPrefixes> #1 has no "
		  "<Prefix>" },
		{ LIST_OF("<CommonPrefixes><Prefix/></CommonPrefixes>"),
		  "ListObjectsV2 response: <CommonPrefixes> #1 has an empty "
		  "<Prefix>" },
		{ LIST_OF("<Contents><Key>&undefined;</Key></Contents>"),
		  "malformed ListObjectsV2 response: line 1: Entity "
		  "'undefined' not defined" },
		{ "<Error><Code>InternalError</Code></Error>",
		  "ListObjectsV2 response: S3 error InternalError: (no "
		  "message) (request id none)" },
		{ "<ListBucketResult><Contents><Key>\xff</Key></Contents>"
		  "</ListBucketResult>",
		  "malformed ListObjectsV2 response: line 1: Input is not "
		  "proper UTF-8, indicate encoding !\nBytes: 0xFF 0x3C 0x2F "
		  "0x4B" },
	};

	for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_test_message("inline case %" G_GSIZE_FORMAT, i);
		check_list_error(cases[i].xml, -1, EPROTO, cases[i].message);
	}
}

/* Long and odd values are escaped and cut in messages. */
static void test_list_error_quoting(void)
{
	g_autoptr(GString) xml = g_string_new("<ListBucketResult><Contents>"
					      "<Key>");
	g_autoptr(GString) want =
		g_string_new("ListObjectsV2 response: <Size> 'x' of key '");

	/* 100 two-byte characters: cut at 200 bytes, on a boundary */
	for (int i = 0; i < 150; i++)
		g_string_append(xml, "\xc3\xa9");
	for (int i = 0; i < 100; i++)
		g_string_append(want, "\xc3\xa9");
	g_string_append(xml, "</Key><Size>x</Size></Contents>"
			     "</ListBucketResult>");
	g_string_append(want, "...' is not a number");
	check_list_error(xml->str, (gssize)xml->len, EPROTO, want->str);

	check_list_error(URL_LIST_OF(ONE("a%0A%FFb", "?")), -1, EPROTO,
			 "ListObjectsV2 response: <Size> '?' of key "
			 "'a\\n\\377b' is not a number");
}

static void test_list_nul_and_size_limits(void)
{
	static const char with_nul[] =
		"<ListBucketResult>\0</ListBucketResult>";
	g_autoptr(GError) error = NULL;

	/* libxml2 takes the NUL for the end of the input */
	check_list_error(with_nul, sizeof(with_nul) - 1, EPROTO,
			 "malformed ListObjectsV2 response: line 1: Premature "
			 "end of data in tag ListBucketResult line 1");
	/* refused before the buffer is read */
	g_assert_null(s3_xml_parse_list("x", (gsize)INT_MAX + 1, &error));
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_cmpstr(error->message, ==,
			"ListObjectsV2 response: 2147483648 bytes is too large "
			"to parse");
}

/*
 * libxml2 must not print anything, whatever the input: not for parse
 * errors, and not for encoding conversion errors raised without a context.
 */
static void test_no_stderr(void)
{
	static const char *const inputs[] = {
		"<ListBucketResult><Contents>",
		"<?xml version=\"1.0\" encoding=\"no-such-charset\"?><a/>",
		"<?xml version=\"1.0\" encoding=\"UTF-16\"?><a/>",
		"<?xml version=\"1.0\" encoding=\"ISO-2022-JP\"?>"
		"<ListBucketResult><Contents><Key>\x1b$B\xff\xff\x1b(B"
		"</Key></Contents></ListBucketResult>",
		"<?xml version=\"1.0\" encoding=\"Shift_JIS\"?>"
		"<ListBucketResult><Name>\x81\xff\x82</Name>"
		"</ListBucketResult>",
		"<a xmlns:p=\"rel/uri\"><p:b/></a>",
		"<!DOCTYPE a SYSTEM \"http://127.0.0.1:1/x.dtd\"><a/>",
		"<a>\x01</a>",
	};

	if (g_test_subprocess()) {
		for (gsize i = 0; i < G_N_ELEMENTS(inputs); i++) {
			g_autoptr(GError) e1 = NULL;
			g_autoptr(GError) e2 = NULL;
			g_auto(s3_error_info) info = { 0 };
			g_autoptr(s3_list_page) page = s3_xml_parse_list(
				inputs[i], strlen(inputs[i]), &e1);

			g_assert_true(page || e1);
			if (!s3_xml_parse_error(inputs[i], strlen(inputs[i]),
						&info, &e2))
				g_assert_nonnull(e2);
		}
		return;
	}
	g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
	g_test_trap_assert_passed();
	g_test_trap_assert_stderr("");
	g_test_trap_assert_stdout("");
}

static void test_error_fixtures(void)
{
	static const struct {
		const char *fixture;
		struct s3_error_info want;
	} cases[] = {
		{ "error_nosuchkey.xml",
		  { .code = "NoSuchKey",
		    .message = "The resource you requested does not exist",
		    .resource = "/mybucket/myfoto.jpg",
		    .request_id = "4442587FB7D0A2F9" } },
		{ "error_slowdown.xml",
		  { .code = "SlowDown",
		    .message = "Please reduce your request rate.",
		    .request_id = "9CE2WN7KXSMGG9QD",
		    .host_id = "8ybbKg8ax5Ry0bd2jKbErTGqkrmD6dwcwtvbqUU6vkNLu/"
			       "+hfY71Q7Tt3iTzPP2VRqAEYXW7bQw=" } },
		{ "error_time_skewed.xml",
		  { .code = "RequestTimeTooSkewed",
		    .message = "The difference between the request time and "
			       "the current time is too large.",
		    .request_time = "20130524T000000Z",
		    .server_time = "2024-05-06T07:08:09Z",
		    .request_id = "ZW9A2C9E5B5D1F7A",
		    .host_id = "AbCdEfGh+IjKl/MnOp=" } },
		{ "error_permanent_redirect.xml",
		  { .code = "PermanentRedirect",
		    .message = "The bucket you are attempting to access must "
			       "be addressed using the specified endpoint. "
			       "Please send all future requests to this "
			       "endpoint.",
		    .endpoint = "ds.s3.eu-west-1.amazonaws.com",
		    .request_id = "1DRMPG0ZTFHXJ3Y4",
		    .host_id = "Zm9vYmFy" } },
		{ "error_auth_header_malformed.xml",
		  { .code = "AuthorizationHeaderMalformed",
		    .message = "The authorization header is malformed; the "
			       "region 'us-east-1' is wrong; expecting "
			       "'eu-west-1'",
		    .region = "eu-west-1",
		    .request_id = "QXZ1X5B0S9B8K6PF",
		    .host_id = "YmF6" } },
		{ "error_s3rver_nosuchbucket.xml",
		  { .code = "NoSuchBucket",
		    .message = "The specified bucket does not exist" } },
		{ "error_signature_mismatch.xml",
		  { .code = "SignatureDoesNotMatch",
		    .message = "The request signature we calculated does not "
			       "match the signature you provided. Check your "
			       "key and signing method.",
		    .string_to_sign =
			    "AWS4-HMAC-SHA256\n"
			    "20130524T000000Z\n"
			    "20130524/us-east-1/s3/aws4_request\n"
			    "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48b"
			    "bb2dc43964946972",
		    .canonical_request =
			    "GET\n"
			    "/test.txt\n"
			    "\n"
			    "host:examplebucket.s3.amazonaws.com\n"
			    "range:bytes=0-9\n"
			    "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996f"
			    "b92427ae41e4649b934ca495991b7852b855\n"
			    "x-amz-date:20130524T000000Z\n"
			    "\n"
			    "host;range;x-amz-content-sha256;x-amz-date\n"
			    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c"
			    "a495991b7852b855",
		    .request_id = "TX5ZQ5C4H5GX1KMB",
		    .host_id = "q0Jz6cIgkBfzq3nKmUmsOQ6gyW8X3Vl8MXH2pD8VbbTtEG"
			       "x1mMcIzLT5n7t7rfNjk3Qj8J0qpko=" } },
	};

	for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
		const struct s3_error_info *want = &cases[i].want;
		g_auto(s3_error_info) got = { 0 };
		g_autoptr(GError) error = NULL;
		gsize len = 0;
		g_autofree char *buf = load_fixture(cases[i].fixture, &len);

		g_test_message("fixture %s", cases[i].fixture);
		g_assert_true(s3_xml_parse_error(buf, len, &got, &error));
		g_assert_no_error(error);
		g_assert_cmpstr(got.code, ==, want->code);
		g_assert_cmpstr(got.message, ==, want->message);
		g_assert_cmpstr(got.request_id, ==, want->request_id);
		g_assert_cmpstr(got.host_id, ==, want->host_id);
		g_assert_cmpstr(got.resource, ==, want->resource);
		g_assert_cmpstr(got.region, ==, want->region);
		g_assert_cmpstr(got.endpoint, ==, want->endpoint);
		g_assert_cmpstr(got.server_time, ==, want->server_time);
		g_assert_cmpstr(got.request_time, ==, want->request_time);
		g_assert_cmpstr(got.string_to_sign, ==, want->string_to_sign);
		g_assert_cmpstr(got.canonical_request, ==,
				want->canonical_request);
	}
}

static void check_error_doc_error(const char *xml, const char *message)
{
	struct s3_error_info info = { 0 };
	g_autoptr(GError) error = NULL;

	g_assert_false(s3_xml_parse_error(xml, strlen(xml), &info, &error));
	g_assert_error(error, BFS_ERROR, EPROTO);
	g_assert_cmpstr(error->message, ==, message);
	/* left zeroed: nothing to free */
	g_assert_null(info.code);
	g_assert_null(info.message);
	g_assert_null(info.request_id);
}

static void test_error_malformed(void)
{
	check_error_doc_error("<Error><Message>no code</Message><RequestId>R"
			      "</RequestId></Error>",
			      "S3 error response: <Error> has no <Code>");
	check_error_doc_error("<Error><Code/><Message>m</Message></Error>",
			      "S3 error response: <Error> has an empty <Code>");
	check_error_doc_error("<Err><Code>X</Code></Err>",
			      "S3 error response: root element is <Err>, not "
			      "<Error>");
	check_error_doc_error("<Error><Code>X</Code>",
			      "malformed S3 error response: line 1: Premature "
			      "end of data in tag Error line 1");
	check_error_doc_error("", "malformed S3 error response: line 1: "
				  "Document is empty");
}

static void test_error_details(void)
{
	const char *xml = "<Error xmlns=\"urn:x\"><Code> SlowDown </Code>"
			  "<Code>Second</Code><Message>a &amp; b</Message>"
			  "<Extra>x</Extra></Error>";
	g_auto(s3_error_info) info = { 0 };
	g_autoptr(GError) error = NULL;

	/* the first of each wins; whitespace kept; unknown ignored */
	g_assert_true(s3_xml_parse_error(xml, strlen(xml), &info, &error));
	g_assert_cmpstr(info.code, ==, " SlowDown ");
	g_assert_cmpstr(info.message, ==, "a & b");
	g_assert_null(info.request_id);

	/* clear, then reuse */
	s3_error_info_clear(&info);
	g_assert_null(info.code);
	g_assert_true(s3_xml_parse_error("<Error><Code>C</Code></Error>", 29,
					 &info, &error));
	g_assert_cmpstr(info.code, ==, "C");
}

/* The answers of multipart upload, as AWS, RGW and s3rver send them. */
static void test_multipart(void)
{
	static const char init[] =
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<InitiateMultipartUploadResult "
		"xmlns=\"http://s3.amazonaws.com/"
		"doc/2006-03-01/\"><Bucket>b</Bucket><Key>k</Key>"
		"<UploadId>VXBsb2FkIElE</UploadId>"
		"</InitiateMultipartUploadResult>";
	static const char done[] =
		"<CompleteMultipartUploadResult><Location>x</Location>"
		"<ETag>&quot;3858f62230ac3c915f300c664312c11f-9&quot;</ETag>"
		"</CompleteMultipartUploadResult>";
	static const char failed[] =
		"<?xml version=\"1.0\"?>\n<Error><Code>InternalError</Code>"
		"<Message>try again</Message></Error>";
	static const char list[] =
		"<ListMultipartUploadsResult><Bucket>b</Bucket>"
		"<IsTruncated>true</IsTruncated><NextKeyMarker>c/b</"
		"NextKeyMarker>"
		"<NextUploadIdMarker>id2</NextUploadIdMarker>"
		"<Upload><Key>c/a</Key><UploadId>id1</UploadId>"
		"<Initiated>2010-11-10T20:48:33.000Z</Initiated></Upload>"
		"<Upload><Key>c/b</Key><UploadId>id2</UploadId></Upload>"
		"</ListMultipartUploadsResult>";
	g_auto(s3_error_info) info = { 0 };
	g_autoptr(GError) error = NULL;
	g_autofree char *id = NULL, *etag = NULL, *body = NULL;
	const char *etags[] = { "\"a&b\"", "c" };
	struct s3_uploads_page *page;

	id = s3_xml_parse_initiate(init, strlen(init), &error);
	g_assert_no_error(error);
	g_assert_cmpstr(id, ==, "VXBsb2FkIElE");
	g_assert_null(s3_xml_parse_initiate(failed, strlen(failed), &error));
	g_assert_error(error, BFS_ERROR, EPROTO);
	g_assert_nonnull(strstr(error->message, "InternalError"));
	g_clear_error(&error);
	g_assert_null(s3_xml_parse_initiate("<InitiateMultipartUploadResult/>",
					    32, &error));
	g_assert_error(error, BFS_ERROR, EPROTO);
	g_clear_error(&error);

	g_assert_true(s3_xml_parse_complete(done, strlen(done), &etag, &info,
					    &error));
	g_assert_cmpstr(etag, ==, "3858f62230ac3c915f300c664312c11f-9");
	g_clear_pointer(&etag, g_free);
	/* A 200 that failed: the error in @info, no GError. */
	g_assert_false(s3_xml_parse_complete(failed, strlen(failed), &etag,
					     &info, &error));
	g_assert_no_error(error);
	g_assert_null(etag);
	g_assert_cmpstr(info.code, ==, "InternalError");
	g_assert_false(s3_xml_parse_complete("<x/>", 4, &etag, &info, &error));
	g_assert_error(error, BFS_ERROR, EPROTO);
	g_clear_error(&error);

	body = s3_xml_complete_body(etags, 2);
	g_assert_cmpstr(body, ==,
			"<CompleteMultipartUpload><Part><PartNumber>1</"
			"PartNumber><ETag>&quot;a&amp;b&quot;</ETag></Part>"
			"<Part><PartNumber>2</PartNumber><ETag>c</ETag></Part>"
			"</CompleteMultipartUpload>");

	page = s3_xml_parse_uploads(list, strlen(list), &error);
	g_assert_no_error(error);
	g_assert_cmpuint(page->uploads->len, ==, 2);
	g_assert_true(page->is_truncated);
	g_assert_cmpstr(page->next_key_marker, ==, "c/b");
	g_assert_cmpstr(page->next_upload_id_marker, ==, "id2");
	{
		const struct s3_upload *u = page->uploads->pdata[0];

		g_assert_cmpstr(u->key, ==, "c/a");
		g_assert_cmpstr(u->upload_id, ==, "id1");
		g_assert_cmpint(u->initiated, ==, 1289422113);
	}
	s3_uploads_page_free(page);
	g_assert_null(s3_xml_parse_uploads(
		"<ListMultipartUploadsResult><Upload><Key>k</Key></Upload>"
		"</ListMultipartUploadsResult>",
		86, &error));
	g_assert_error(error, BFS_ERROR, EPROTO);
	g_assert_nonnull(strstr(error->message, "<UploadId>"));
}

static void test_parse_time(void)
{
	static const struct {
		const char *s;
		gint64 t;
	} good[] = {
		{ "2009-10-12T17:50:30.000Z", 1255369830 },
		{ "2009-10-12T17:50:30Z", 1255369830 },
		{ "2009-10-12T17:50:30.9Z", 1255369830 },
		{ "2009-10-12T17:50:30.123456789Z", 1255369830 },
		{ "1970-01-01T00:00:00.000Z", 0 },
		{ "1969-12-31T23:59:59Z", -1 },
		{ "2000-02-29T12:00:00Z", 951825600 },
		{ "2024-02-29T23:59:59.999Z", 1709251199 },
		{ "1900-03-01T00:00:00Z", G_GINT64_CONSTANT(-2203891200) },
		{ "0001-01-01T00:00:00Z", G_GINT64_CONSTANT(-62135596800) },
		{ "9999-12-31T23:59:59Z", G_GINT64_CONSTANT(253402300799) },
	};
	static const char *const bad[] = {
		"",
		"2009",
		"2009-10-12",
		"2009-10-12T17:50:30",
		"2009-10-12 17:50:30Z",
		"2009-10-12t17:50:30z",
		"2009-10-12T17:50:30.Z",
		"2009-10-12T17:50:30.000",
		"2009-10-12T17:50:30+00:00",
		"2009-10-12T17:50:30.000Z ",
		" 2009-10-12T17:50:30Z",
		"2009-1-12T17:50:30Z",
		"20091012T175030Z",
		"2009-13-01T00:00:00Z",
		"2009-00-01T00:00:00Z",
		"2009-10-00T00:00:00Z",
		"2009-10-32T00:00:00Z",
		"2009-02-29T00:00:00Z",
		"1900-02-29T00:00:00Z",
		"2009-04-31T00:00:00Z",
		"2009-10-12T24:00:00Z",
		"2009-10-12T17:60:00Z",
		"2009-10-12T17:50:60Z",
		"+009-10-12T17:50:30Z",
		"2009-10-12T17:50:30ZZ",
		"Mon, 12 Oct 2009 17:50:30 GMT",
	};

	for (gsize i = 0; i < G_N_ELEMENTS(good); i++) {
		gint64 t = 42;

		g_test_message("good: %s", good[i].s);
		g_assert_true(s3_xml_parse_time(good[i].s, &t));
		g_assert_cmpint(t, ==, good[i].t);
	}
	for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
		gint64 t = 42;

		g_test_message("bad: %s", bad[i]);
		g_assert_false(s3_xml_parse_time(bad[i], &t));
		g_assert_cmpint(t, ==, 42);
	}
	{
		gint64 t = 42;

		g_assert_false(s3_xml_parse_time(NULL, &t));
	}
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	s3_xml_init();

	g_test_add_func("/s3_xml/list/aws-example", test_list_aws_example);
	g_test_add_func("/s3_xml/list/common-prefixes",
			test_list_common_prefixes);
	g_test_add_func("/s3_xml/list/continuation", test_list_continuation);
	g_test_add_func("/s3_xml/list/encoding-url", test_list_encoding_url);
	g_test_add_func("/s3_xml/list/s3rver", test_list_s3rver);
	g_test_add_func("/s3_xml/list/empty-truncated",
			test_list_empty_truncated);
	g_test_add_func("/s3_xml/list/namespaces", test_list_namespaces);
	g_test_add_func("/s3_xml/list/raw-keys", test_list_raw_keys);
	g_test_add_func("/s3_xml/list/malformed-fixtures",
			test_list_malformed_fixtures);
	g_test_add_func("/s3_xml/list/malformed-inline",
			test_list_malformed_inline);
	g_test_add_func("/s3_xml/list/error-quoting", test_list_error_quoting);
	g_test_add_func("/s3_xml/list/limits", test_list_nul_and_size_limits);
	g_test_add_func("/s3_xml/no-stderr", test_no_stderr);
	g_test_add_func("/s3_xml/error/fixtures", test_error_fixtures);
	g_test_add_func("/s3_xml/error/malformed", test_error_malformed);
	g_test_add_func("/s3_xml/error/details", test_error_details);
	g_test_add_func("/s3_xml/time", test_parse_time);
	g_test_add_func("/s3_xml/multipart", test_multipart);

	return g_test_run();
}
