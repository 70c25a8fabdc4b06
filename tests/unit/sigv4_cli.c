/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * sigv4_cli - signs one path-style S3 request for sigv4_botocore.py.
 *
 *   sigv4_cli METHOD HOST RAWKEY QUERY UNIXTIME REGION AK SK [TOKEN]
 *
 * RAWKEY is "bucket/key" as raw bytes; the path is "/" followed by
 * sigv4_uri_encode(RAWKEY, -1, TRUE).  QUERY is the raw query string ("" for
 * none).  The payload is UNSIGNED-PAYLOAD.  Prints the path on line 1 and
 * the Authorization header value on line 2.  With SIGV4_CLI_CANONICAL set in
 * the environment it also prints the canonical request on stderr.
 *
 * A test driver only: it takes the (fake) secret key on argv, which real
 * tools must never do.
 */
#include <stdio.h>
#include <string.h>

#include "sigv4.h"

int main(int argc, char **argv)
{
	struct sigv4_credentials creds = { 0 };
	struct sigv4_request req = { 0 };
	g_autofree char *key = NULL;
	g_autofree char *path = NULL;
	g_auto(GStrv) headers = NULL;
	char *end = NULL;

	if (argc != 9 && argc != 10) {
		fprintf(stderr,
			"usage: %s METHOD HOST RAWKEY QUERY UNIXTIME "
			"REGION AK SK [TOKEN]\n",
			argv[0]);
		return 2;
	}
	key = sigv4_uri_encode(argv[3], -1, TRUE);
	path = g_strconcat("/", key, NULL);

	req.method = argv[1];
	req.host = argv[2];
	req.path = path;
	req.query = argv[4];
	req.unix_time = g_ascii_strtoll(argv[5], &end, 10);
	if (!*argv[5] || *end) {
		fprintf(stderr, "%s: UNIXTIME '%s' is not a number\n", argv[0],
			argv[5]);
		return 2;
	}
	req.region = argv[6];
	req.service = "s3";
	req.payload_sha256 = SIGV4_UNSIGNED_PAYLOAD;
	creds.access_key_id = argv[7];
	creds.secret_access_key = argv[8];
	creds.session_token = argc == 10 ? argv[9] : NULL;

	if (g_getenv("SIGV4_CLI_CANONICAL")) {
		g_autofree char *canonical =
			sigv4_canonical_request(&req, &creds, NULL);

		fprintf(stderr, "%s\n", canonical);
	}
	headers = sigv4_sign(&creds, &req);
	if (!headers)
		return 1;
	for (gsize i = 0; headers[i]; i++) {
		static const char name[] = "Authorization: ";

		if (strncmp(headers[i], name, strlen(name)) == 0) {
			printf("%s\n%s\n", path, headers[i] + strlen(name));
			return 0;
		}
	}
	return 1;
}
