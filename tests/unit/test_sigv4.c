/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_sigv4 - SigV4 against the worked examples of the S3 API reference
 * ("Signature Calculations for the Authorization Header: Transferring
 * Payload in a Single Chunk"), plus the encoding and canonicalization rules.
 * The random cross-check against botocore is sigv4_botocore.py.
 */
#include <string.h>

#include "sigv4.h"

#define EX_HOST	      "examplebucket.s3.amazonaws.com"
#define EX_TIME	      G_GINT64_CONSTANT(1369353600) /* 20130524T000000Z */
#define EX_SCOPE      "20130524/us-east-1/s3/aws4_request"
#define EX_CREDENTIAL "AKIAIOSFODNN7EXAMPLE/" EX_SCOPE
#define PUT_BODY_SHA256                                                        \
	"44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"

/* From the worked examples: SHA-256 of each canonical request, signature. */
#define GET_OBJECT_CR_SHA256                                                   \
	"7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
#define GET_OBJECT_SIGNATURE                                                   \
	"f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
#define PUT_OBJECT_CR_SHA256                                                   \
	"9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d"
#define PUT_OBJECT_SIGNATURE                                                   \
	"98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
#define LIFECYCLE_CR_SHA256                                                    \
	"9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca"
#define LIFECYCLE_SIGNATURE                                                    \
	"fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
#define LIST_OBJECTS_CR_SHA256                                                 \
	"df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7"
#define LIST_OBJECTS_SIGNATURE                                                 \
	"34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"

static const struct sigv4_credentials ex_creds = {
	.access_key_id = "AKIAIOSFODNN7EXAMPLE",
	.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
};

static struct sigv4_request ex_request(const char *method, const char *path,
				       const char *query)
{
	return (struct sigv4_request){
		.method = method,
		.host = EX_HOST,
		.path = path,
		.query = query,
		.region = "us-east-1",
		.service = "s3",
		.unix_time = EX_TIME,
	};
}

/* The value of header @name in a sigv4_sign() result, or NULL. */
static const char *header_value(char **headers, const char *name)
{
	gsize len = strlen(name);

	for (gsize i = 0; headers[i]; i++) {
		if (g_ascii_strncasecmp(headers[i], name, len) == 0 &&
		    headers[i][len] == ':' && headers[i][len + 1] == ' ')
			return headers[i] + len + 2;
	}
	return NULL;
}

static void check_example(const struct sigv4_request *req,
			  const char *want_canonical, const char *want_hash,
			  const char *want_signed_headers,
			  const char *want_signature)
{
	g_autofree char *signed_headers = NULL;
	g_autofree char *canonical =
		sigv4_canonical_request(req, &ex_creds, &signed_headers);
	g_autofree char *sts = sigv4_string_to_sign(req, canonical);
	g_autofree char *want_sts = g_strconcat(
		"AWS4-HMAC-SHA256\n20130524T000000Z\n" EX_SCOPE "\n", want_hash,
		NULL);
	g_autofree char *want_auth =
		g_strdup_printf("AWS4-HMAC-SHA256 Credential=" EX_CREDENTIAL
				", SignedHeaders=%s, Signature=%s",
				want_signed_headers, want_signature);
	g_auto(GStrv) headers = sigv4_sign(&ex_creds, req);

	g_assert_cmpstr(canonical, ==, want_canonical);
	g_assert_cmpstr(signed_headers, ==, want_signed_headers);
	g_assert_cmpstr(sts, ==, want_sts);
	g_assert_nonnull(headers);
	g_assert_cmpstr(header_value(headers, "Authorization"), ==, want_auth);
}

/*
 * The canonical requests of the four examples, line by line as published.
 * clang-format would reflow them.
 */
/* clang-format off */
static const char get_object_canonical[] =
	"GET\n"
	"/test.txt\n"
	"\n"
	"host:examplebucket.s3.amazonaws.com\n"
	"range:bytes=0-9\n"
	"x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
	"x-amz-date:20130524T000000Z\n"
	"\n"
	"host;range;x-amz-content-sha256;x-amz-date\n"
	SIGV4_EMPTY_SHA256;

static const char put_object_canonical[] =
	"PUT\n"
	"/test%24file.text\n"
	"\n"
	"date:Fri, 24 May 2013 00:00:00 GMT\n"
	"host:examplebucket.s3.amazonaws.com\n"
	"x-amz-content-sha256:" PUT_BODY_SHA256 "\n"
	"x-amz-date:20130524T000000Z\n"
	"x-amz-storage-class:REDUCED_REDUNDANCY\n"
	"\n"
	"date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
	PUT_BODY_SHA256;

static const char lifecycle_canonical[] =
	"GET\n"
	"/\n"
	"lifecycle=\n"
	"host:examplebucket.s3.amazonaws.com\n"
	"x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
	"x-amz-date:20130524T000000Z\n"
	"\n"
	"host;x-amz-content-sha256;x-amz-date\n"
	SIGV4_EMPTY_SHA256;

static const char list_objects_canonical[] =
	"GET\n"
	"/\n"
	"max-keys=2&prefix=J\n"
	"host:examplebucket.s3.amazonaws.com\n"
	"x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
	"x-amz-date:20130524T000000Z\n"
	"\n"
	"host;x-amz-content-sha256;x-amz-date\n"
	SIGV4_EMPTY_SHA256;
/* clang-format on */

static void test_example_get_object(void)
{
	static const char *const extra[] = { "Range: bytes=0-9", NULL };
	struct sigv4_request req = ex_request("GET", "/test.txt", NULL);

	req.headers = extra;
	check_example(&req, get_object_canonical, GET_OBJECT_CR_SHA256,
		      "host;range;x-amz-content-sha256;x-amz-date",
		      GET_OBJECT_SIGNATURE);
}

static void test_example_put_object(void)
{
	static const char *const extra[] = {
		"Date: Fri, 24 May 2013 00:00:00 GMT",
		"x-amz-storage-class: REDUCED_REDUNDANCY",
		NULL,
	};
	g_autofree char *key = sigv4_uri_encode("test$file.text", -1, TRUE);
	g_autofree char *path = g_strconcat("/", key, NULL);
	struct sigv4_request req = ex_request("PUT", path, NULL);

	g_assert_cmpstr(path, ==, "/test%24file.text");
	req.headers = extra;
	req.payload_sha256 = PUT_BODY_SHA256;
	check_example(&req, put_object_canonical, PUT_OBJECT_CR_SHA256,
		      "date;host;x-amz-content-sha256;x-amz-date;"
		      "x-amz-storage-class",
		      PUT_OBJECT_SIGNATURE);
}

static void test_example_get_lifecycle(void)
{
	struct sigv4_request req = ex_request("GET", "/", "lifecycle");

	check_example(&req, lifecycle_canonical, LIFECYCLE_CR_SHA256,
		      "host;x-amz-content-sha256;x-amz-date",
		      LIFECYCLE_SIGNATURE);
}

static void test_example_list_objects(void)
{
	/* Given out of order: the canonical query sorts it. */
	struct sigv4_request req =
		ex_request("GET", "/", "prefix=J&max-keys=2");

	check_example(&req, list_objects_canonical, LIST_OBJECTS_CR_SHA256,
		      "host;x-amz-content-sha256;x-amz-date",
		      LIST_OBJECTS_SIGNATURE);
}

static void test_sign_headers(void)
{
	struct sigv4_request req = ex_request("GET", "/", "lifecycle");
	g_auto(GStrv) headers = sigv4_sign(&ex_creds, &req);

	g_assert_cmpuint(g_strv_length(headers), ==, 3);
	g_assert_cmpstr(headers[0], ==, "x-amz-date: 20130524T000000Z");
	g_assert_cmpstr(headers[1], ==,
			"x-amz-content-sha256: " SIGV4_EMPTY_SHA256);
	g_assert_true(g_str_has_prefix(headers[2], "Authorization: "));
}

static void test_session_token(void)
{
	const struct sigv4_credentials creds = {
		.access_key_id = ex_creds.access_key_id,
		.secret_access_key = ex_creds.secret_access_key,
		.session_token = "  FwoGZXIvYXdzEBYa+/tok=  ",
	};
	struct sigv4_request req = ex_request("GET", "/test.txt", NULL);
	g_autofree char *signed_headers = NULL;
	g_autofree char *canonical =
		sigv4_canonical_request(&req, &creds, &signed_headers);
	g_auto(GStrv) headers = sigv4_sign(&creds, &req);
	g_auto(GStrv) plain = sigv4_sign(&ex_creds, &req);
	const char *auth = header_value(headers, "Authorization");

	g_assert_nonnull(strstr(canonical,
				"\nx-amz-date:20130524T000000Z\n"
				"x-amz-security-token:FwoGZXIvYXdzEBYa+/tok=\n"
				"\n"));
	g_assert_cmpstr(signed_headers, ==,
			"host;x-amz-content-sha256;x-amz-date;"
			"x-amz-security-token");
	g_assert_cmpuint(g_strv_length(headers), ==, 4);
	g_assert_cmpstr(headers[2], ==,
			"x-amz-security-token:   FwoGZXIvYXdzEBYa+/tok=  ");
	g_assert_nonnull(strstr(auth, "SignedHeaders=host;x-amz-content-sha256;"
				      "x-amz-date;x-amz-security-token, "));
	g_assert_cmpstr(auth, !=, header_value(plain, "Authorization"));

	/* An empty token is no token. */
	{
		struct sigv4_credentials empty = creds;
		g_auto(GStrv) h = NULL;

		empty.session_token = "";
		h = sigv4_sign(&empty, &req);
		g_assert_cmpstrv(h, plain);
	}
}

/* OpenSSL's SHA-256 of a payload, against GLib's and a known value, at
 * sizes around its 64-byte blocks and one of megabytes. */
static void test_payload_sha256(void)
{
	static const gsize sizes[] = { 0, 1, 55, 56, 63, 64, 65, 1000003 };
	g_autofree guchar *buf = g_malloc(1000003);
	g_autofree char *abc = sigv4_payload_sha256("abc", 3);
	g_autofree char *none = sigv4_payload_sha256(NULL, 0);
	gsize i;

	for (i = 0; i < 1000003; i++)
		buf[i] = (guchar)(i * 7 + i / 251);
	g_assert_cmpstr(abc, ==,
			"ba7816bf8f01cfea414140de5dae2223"
			"b00361a396177a9cb410ff61f20015ad");
	g_assert_cmpstr(none, ==, SIGV4_EMPTY_SHA256);
	for (i = 0; i < G_N_ELEMENTS(sizes); i++) {
		g_autofree char *got = sigv4_payload_sha256(buf, sizes[i]);
		g_autofree char *want = g_compute_checksum_for_data(
			G_CHECKSUM_SHA256, buf, sizes[i]);

		g_assert_cmpstr(got, ==, want);
	}
}

static void test_payload_hash(void)
{
	struct sigv4_request req = ex_request("GET", "/k", NULL);
	g_autofree char *empty = sigv4_canonical_request(&req, NULL, NULL);
	g_autofree char *unsigned_cr = NULL;
	g_auto(GStrv) headers = NULL;

	g_assert_true(g_str_has_suffix(empty, "\n" SIGV4_EMPTY_SHA256));
	g_assert_nonnull(strstr(
		empty, "\nx-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"));

	req.payload_sha256 = SIGV4_UNSIGNED_PAYLOAD;
	unsigned_cr = sigv4_canonical_request(&req, NULL, NULL);
	g_assert_true(g_str_has_suffix(unsigned_cr, "\nUNSIGNED-PAYLOAD"));
	g_assert_nonnull(strstr(unsigned_cr,
				"\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n"));
	headers = sigv4_sign(&ex_creds, &req);
	g_assert_cmpstr(headers[1], ==,
			"x-amz-content-sha256: UNSIGNED-PAYLOAD");
}

static void test_uri_encode(void)
{
	static const struct {
		const char *in;
		gboolean keep_slash;
		const char *out;
	} cases[] = {
		{ "", TRUE, "" },
		{ "AZaz09-._~", FALSE, "AZaz09-._~" },
		{ "a b", TRUE, "a%20b" },
		{ "a+b", TRUE, "a%2Bb" },
		{ "a~b", FALSE, "a~b" },
		{ "a/b", TRUE, "a/b" },
		{ "a/b", FALSE, "a%2Fb" },
		{ "100%", TRUE, "100%25" },
		{ "%41", TRUE, "%2541" },
		{ "\xc3\xa9", TRUE, "%C3%A9" },		      /* é */
		{ "\xf0\x9f\x98\x80", TRUE, "%F0%9F%98%80" }, /* U+1F600 */
		{ "\x01\x7f\xff", TRUE, "%01%7F%FF" },
		{ "=&?#'*!$,;:@()[]", TRUE,
		  "%3D%26%3F%23%27%2A%21%24%2C%3B%3A%40%28%29%5B%5D" },
		{ "a//b/./../c", TRUE, "a//b/./../c" },
		{ "test$file.text", TRUE, "test%24file.text" },
	};

	for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_autofree char *got =
			sigv4_uri_encode(cases[i].in, -1, cases[i].keep_slash);

		g_assert_cmpstr(got, ==, cases[i].out);
	}

	/* With an explicit length, a NUL byte is data. */
	{
		g_autofree char *got = sigv4_uri_encode("a\0b/c", 5, FALSE);

		g_assert_cmpstr(got, ==, "a%00b%2Fc");
	}
	{
		g_autofree char *got = sigv4_uri_encode("abc", 2, FALSE);

		g_assert_cmpstr(got, ==, "ab");
	}
	{
		g_autofree char *got = sigv4_uri_encode(NULL, 0, FALSE);

		g_assert_cmpstr(got, ==, "");
	}
}

/* Line @n (0-based) of the canonical request of @req. */
static char *canonical_line(const struct sigv4_request *req, guint n)
{
	g_autofree char *canonical = sigv4_canonical_request(req, NULL, NULL);
	g_auto(GStrv) lines = g_strsplit(canonical, "\n", -1);

	g_assert_cmpuint(g_strv_length(lines), >, n);
	return g_strdup(lines[n]);
}

static void test_canonical_query(void)
{
	static const struct {
		const char *raw;
		const char *canonical;
	} cases[] = {
		{ NULL, "" },
		{ "", "" },
		{ "b=2&a=1", "a=1&b=2" },
		{ "a=2&a=1&a=10", "a=1&a=10&a=2" },
		{ "lifecycle", "lifecycle=" },
		{ "k=", "k=" },
		{ "k=a=b", "k=a%3Db" },
		{ "&&k=v&", "k=v" },
		/* decoded, then re-encoded with AWS rules */
		{ "prefix=a%2fb", "prefix=a%2Fb" },
		{ "prefix=a/b", "prefix=a%2Fb" },
		{ "prefix=%7E%41", "prefix=~A" },
		{ "prefix=a+b", "prefix=a%20b" },
		{ "prefix=a%2Bb", "prefix=a%2Bb" },
		{ "prefix=100%", "prefix=100%25" },
		{ "prefix=%zz%4", "prefix=%25zz%254" },
		{ "prefix=\xc3\xa9", "prefix=%C3%A9" },
		{ "prefix=%00", "prefix=%00" },
		{ "continuation-token=1ueGcxLPRx1Tr%2FXYExHnhbYLgveDs2J%2Fwm36"
		  "Hy4vbOwM%3D&list-type=2",
		  "continuation-token=1ueGcxLPRx1Tr%2FXYExHnhbYLgveDs2J%2Fwm36"
		  "Hy4vbOwM%3D&list-type=2" },
		{ "list-type=2&encoding-type=url&delimiter=%2F&prefix=",
		  "delimiter=%2F&encoding-type=url&list-type=2&prefix=" },
		/* sorted by the encoded bytes: '%' (0x25) < '-' (0x2d) */
		{ "a-b=1&a%20b=2", "a%20b=2&a-b=1" },
		/* and 'a%7F' < 'a~' although 0x7f > '~' */
		{ "a~=1&a%7F=2", "a%7F=2&a~=1" },
	};

	for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct sigv4_request req = ex_request("GET", "/", cases[i].raw);
		g_autofree char *line = canonical_line(&req, 2);

		g_assert_cmpstr(line, ==, cases[i].canonical);
	}
}

static void test_canonical_path_verbatim(void)
{
	static const char *const paths[] = {
		"/",	      "/bucket/a//b", "/bucket/./x/../y",
		"/b/%20%2B~", "/b/dir/",
	};

	for (gsize i = 0; i < G_N_ELEMENTS(paths); i++) {
		struct sigv4_request req = ex_request("GET", paths[i], NULL);
		g_autofree char *line = canonical_line(&req, 1);

		g_assert_cmpstr(line, ==, paths[i]);
	}
}

static void test_canonical_headers(void)
{
	static const char *const extra[] = {
		"X-Amz-Meta-B:   two   words \t here  ",
		"If-Match: \"3858f62230ac3c915f300c664312c63f\"",
		"x-amz-meta-a:1",
		"X-AMZ-META-A: 2",
		"x-amz-meta-empty:",
		NULL,
	};
	struct sigv4_request req = ex_request("GET", "/k", NULL);
	g_autofree char *signed_headers = NULL;
	g_autofree char *canonical = NULL;
	g_autofree char *want = NULL;

	req.host = "  127.0.0.1:9000 ";
	req.headers = extra;
	canonical = sigv4_canonical_request(&req, NULL, &signed_headers);
	want = g_strconcat("GET\n/k\n\n"
			   "host:127.0.0.1:9000\n"
			   "if-match:\"3858f62230ac3c915f300c664312c63f\"\n"
			   "x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
			   "x-amz-date:20130524T000000Z\n"
			   "x-amz-meta-a:1,2\n"
			   "x-amz-meta-b:two words here\n"
			   "x-amz-meta-empty:\n"
			   "\n"
			   "host;if-match;x-amz-content-sha256;x-amz-date;"
			   "x-amz-meta-a;x-amz-meta-b;x-amz-meta-empty\n",
			   SIGV4_EMPTY_SHA256, NULL);
	g_assert_cmpstr(canonical, ==, want);
	g_assert_cmpstr(signed_headers, ==,
			"host;if-match;x-amz-content-sha256;x-amz-date;"
			"x-amz-meta-a;x-amz-meta-b;x-amz-meta-empty");
}

static void test_time_format(void)
{
	static const struct {
		gint64 t;
		const char *date;
	} cases[] = {
		{ 0, "19700101T000000Z" },
		{ 1700000000, "20231114T221320Z" },
		{ 951782400, "20000229T000000Z" },
		{ G_GINT64_CONSTANT(253402300799), "99991231T235959Z" },
	};

	for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct sigv4_request req = ex_request("GET", "/", NULL);
		g_auto(GStrv) headers = NULL;
		g_autofree char *sts = NULL;
		g_autofree char *want = NULL;

		req.unix_time = cases[i].t;
		headers = sigv4_sign(&ex_creds, &req);
		g_assert_cmpstr(header_value(headers, "x-amz-date"), ==,
				cases[i].date);
		sts = sigv4_string_to_sign(&req, "");
		want = g_strdup_printf("AWS4-HMAC-SHA256\n%s\n%.8s/us-east-1/"
				       "s3/aws4_request\n" SIGV4_EMPTY_SHA256,
				       cases[i].date, cases[i].date);
		g_assert_cmpstr(sts, ==, want);
	}
}

/* Same inputs, same output; a different secret, a different signature. */
static void test_deterministic(void)
{
	struct sigv4_request req = ex_request("GET", "/a", "x=1");
	struct sigv4_credentials other = ex_creds;
	g_auto(GStrv) a = sigv4_sign(&ex_creds, &req);
	g_auto(GStrv) b = sigv4_sign(&ex_creds, &req);
	g_auto(GStrv) c = NULL;

	other.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEZ";
	c = sigv4_sign(&other, &req);
	g_assert_cmpstrv(a, b);
	g_assert_cmpstr(a[2], !=, c[2]);
}

struct signing {
	const struct sigv4_credentials *creds;
	const struct sigv4_request *req;
};

static gpointer sign_in_thread(gpointer data)
{
	const struct signing *s = data;

	return sigv4_sign(s->creds, s->req);
}

/*
 * Each thread keeps its last signing key: a change of secret, day or
 * region must give what a thread that never signed before gives.
 */
static void test_key_changes(void)
{
	struct sigv4_request req = ex_request("GET", "/a", "x=1");
	struct sigv4_request next_day = req, region = req, service = req;
	struct sigv4_credentials other = ex_creds;
	const struct signing cases[] = {
		{ &ex_creds, &req },	{ &other, &req },
		{ &other, &next_day },	{ &ex_creds, &next_day },
		{ &ex_creds, &region }, { &ex_creds, &service },
		{ &ex_creds, &req },	{ &ex_creds, &req },
	};
	g_auto(GStrv) previous = NULL;
	guint i;

	other.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEZ";
	next_day.unix_time += 86400;
	region.region = "eu-west-1";
	service.service = "s3-object-lambda";
	for (i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_auto(GStrv) here = sigv4_sign(cases[i].creds, cases[i].req);
		g_auto(GStrv) fresh = g_thread_join(g_thread_new(
			"sign", sign_in_thread, (gpointer)&cases[i]));
		guint n = g_strv_length(here);

		g_assert_cmpstrv(here, fresh);
		if (previous && cases[i].req == cases[i - 1].req &&
		    cases[i].creds == cases[i - 1].creds)
			g_assert_cmpstr(here[n - 1], ==, previous[n - 1]);
		else if (previous)
			g_assert_cmpstr(here[n - 1], !=, previous[n - 1]);
		g_strfreev(previous);
		previous = g_steal_pointer(&here);
	}
}

static void expect_invalid(const struct sigv4_request *req)
{
	char **headers;

	g_test_expect_message(G_LOG_DOMAIN, G_LOG_LEVEL_CRITICAL,
			      "*request_valid*");
	headers = sigv4_sign(&ex_creds, req);
	g_test_assert_expected_messages();
	g_assert_null(headers);
}

static void test_invalid_requests(void)
{
	static const char *const no_colon[] = { "Range bytes=0-9", NULL };
	static const char *const empty_name[] = { ": v", NULL };
	static const char *const space_name[] = { "X Y: v", NULL };
	static const char *const reserved[] = { "Host: other", NULL };
	static const char *const reserved2[] = { "X-Amz-Date: x", NULL };
	struct sigv4_request req = ex_request("GET", "no-slash", NULL);

	expect_invalid(&req);
	req = ex_request("GET", "/", NULL);
	req.unix_time = -1;
	expect_invalid(&req);
	req.unix_time = G_GINT64_CONSTANT(253402300800);
	expect_invalid(&req);
	req = ex_request("GET", "/", NULL);
	req.region = NULL;
	expect_invalid(&req);
	req = ex_request("GET", "/", NULL);
	req.headers = no_colon;
	expect_invalid(&req);
	req.headers = empty_name;
	expect_invalid(&req);
	req.headers = space_name;
	expect_invalid(&req);
	req.headers = reserved;
	expect_invalid(&req);
	req.headers = reserved2;
	expect_invalid(&req);
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/sigv4/aws-example/get-object",
			test_example_get_object);
	g_test_add_func("/sigv4/aws-example/put-object",
			test_example_put_object);
	g_test_add_func("/sigv4/aws-example/get-lifecycle",
			test_example_get_lifecycle);
	g_test_add_func("/sigv4/aws-example/list-objects",
			test_example_list_objects);
	g_test_add_func("/sigv4/sign/headers", test_sign_headers);
	g_test_add_func("/sigv4/sign/session-token", test_session_token);
	g_test_add_func("/sigv4/sign/payload-hash", test_payload_hash);
	g_test_add_func("/sigv4/payload-sha256", test_payload_sha256);
	g_test_add_func("/sigv4/sign/deterministic", test_deterministic);
	g_test_add_func("/sigv4/sign/key-changes", test_key_changes);
	g_test_add_func("/sigv4/sign/invalid", test_invalid_requests);
	g_test_add_func("/sigv4/uri-encode", test_uri_encode);
	g_test_add_func("/sigv4/canonical/query", test_canonical_query);
	g_test_add_func("/sigv4/canonical/path", test_canonical_path_verbatim);
	g_test_add_func("/sigv4/canonical/headers", test_canonical_headers);
	g_test_add_func("/sigv4/time", test_time_format);

	return g_test_run();
}
