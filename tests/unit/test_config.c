/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <string.h>

#include <glib/gstdio.h>

#include "config.h"
#include "error.h"

static const char *const config_env[] = {
	"AWS_REGION",
	"AWS_DEFAULT_REGION",
	"AWS_PROFILE",
	"AWS_CONFIG_FILE",
	"AWS_SHARED_CREDENTIALS_FILE",
	"AWS_ENDPOINT_URL",
	"AWS_ENDPOINT_URL_S3",
	"S3_ENDPOINT_URIS",
	"AWS_CA_BUNDLE",
	"AWS_ACCESS_KEY_ID",
	"AWS_SECRET_ACCESS_KEY",
	"AWS_SESSION_TOKEN",
};

struct fixture {
	char *dir;
	char *conf_path; /* the AWS config file, absent at first */
	struct config cfg;
};

static void fixture_setup(struct fixture *f, gconstpointer data)
{
	g_autoptr(GError) error = NULL;
	guint i;

	(void)data;
	for (i = 0; i < G_N_ELEMENTS(config_env); i++)
		g_unsetenv(config_env[i]);
	f->dir = g_dir_make_tmp("bfs-config-XXXXXX", &error);
	g_assert_no_error(error);
	f->conf_path = g_build_filename(f->dir, "config", NULL);
	g_setenv("AWS_CONFIG_FILE", f->conf_path, TRUE);
	g_setenv("AWS_SHARED_CREDENTIALS_FILE", f->conf_path, TRUE);
	/* No bucketfs.conf of this machine; the file tests name theirs. */
	g_setenv("BUCKETFS_CONFIG", "none", TRUE);
	/* No test may reach a real instance metadata service. */
	g_setenv("AWS_EC2_METADATA_DISABLED", "true", TRUE);
	config_init(&f->cfg);
}

static void fixture_teardown(struct fixture *f, gconstpointer data)
{
	g_autofree char *bfs_conf =
		g_build_filename(f->dir, "bucketfs.conf", NULL);

	(void)data;
	config_clear(&f->cfg);
	config_clear(&f->cfg);
	g_unlink(f->conf_path);
	g_unlink(bfs_conf);
	g_assert_cmpint(g_rmdir(f->dir), ==, 0);
	g_free(f->conf_path);
	g_free(f->dir);
}

static void opts_ok(struct fixture *f, const char *opts)
{
	g_autoptr(GError) error = NULL;

	g_assert_true(config_parse_options(&f->cfg, opts, NULL, &error));
	g_assert_no_error(error);
}

static void opts_fail(const char *opts, const char *message)
{
	g_autoptr(GError) error = NULL;
	struct config cfg;

	config_init(&cfg);
	g_assert_false(config_parse_options(&cfg, opts, NULL, &error));
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_cmpstr(error->message, ==, message);
	config_clear(&cfg);
}

static void url_ok(struct fixture *f, const char *url)
{
	g_autoptr(GError) error = NULL;

	g_assert_true(config_parse_url(&f->cfg, url, &error));
	g_assert_no_error(error);
}

static void finish_ok(struct fixture *f)
{
	g_autoptr(GError) error = NULL;

	g_assert_true(config_finish(&f->cfg, &error));
	g_assert_no_error(error);
}

static void finish_fail(struct fixture *f, int code, const char *message)
{
	g_autoptr(GError) error = NULL;

	g_assert_false(config_finish(&f->cfg, &error));
	g_assert_error(error, BFS_ERROR, code);
	g_assert_cmpstr(error->message, ==, message);
}

static void assert_endpoints(const struct config *cfg, const char *source,
			     const char *const *want)
{
	guint n = g_strv_length((char **)want);
	guint i;

	g_assert_cmpstr(cfg->endpoint_source, ==, source);
	g_assert_cmpuint(cfg->endpoints->len, ==, n);
	for (i = 0; i < n; i++)
		g_assert_cmpstr(g_ptr_array_index(cfg->endpoints, i), ==,
				want[i]);
}

static void test_defaults(struct fixture *f, gconstpointer data)
{
	const struct config *cfg = &f->cfg;

	(void)data;
	g_assert_null(cfg->bucket);
	g_assert_cmpstr(cfg->prefix, ==, "");
	g_assert_cmpuint(cfg->endpoints->len, ==, 0);
	g_assert_cmpint(cfg->addressing, ==, ADDRESSING_AUTO);
	g_assert_cmpfloat(cfg->connect_timeout, ==, 10);
	g_assert_cmpfloat(cfg->stall_timeout, ==, 30);
	g_assert_cmpfloat(cfg->request_timeout, ==, 0);
	g_assert_cmpuint(cfg->max_attempts, ==, 10);
	g_assert_cmpuint(cfg->max_connections, ==, 0);
	g_assert_false(cfg->read_only); /* new names writable (fs.h) */
	g_assert_false(cfg->anonymous);

	url_ok(f, "s3://my-bucket/train");
	finish_ok(f);
	g_assert_cmpstr(cfg->region, ==, "us-east-1");
	g_assert_cmpstr(cfg->region_source, ==, "default");
	assert_endpoints(cfg, "default for region us-east-1",
			 (const char *const[]){
				 "https://s3.us-east-1.amazonaws.com", NULL });
	g_assert_false(cfg->endpoints_from_options);
	g_assert_cmpint(cfg->addressing, ==, ADDRESSING_VIRTUAL);
	g_assert_null(cfg->ca_file);
	g_assert_null(cfg->index_path);
	g_assert_null(cfg->profile);
}

static void test_url(struct fixture *f, gconstpointer data)
{
	static const struct {
		const char *url, *bucket, *prefix;
	} good[] = {
		{ "s3://bucket", "bucket", "" },
		{ "s3://bucket/", "bucket", "" },
		{ "S3://bucket/train", "bucket", "train/" },
		{ "s3://bucket/train/", "bucket", "train/" },
		{ "s3://bucket/a/b/c", "bucket", "a/b/c/" },
		{ "s3://Legacy_Bucket.1/x y", "Legacy_Bucket.1", "x y/" },
		{ "s3://abc/caf\xc3\xa9", "abc", "caf\xc3\xa9/" },
	};
	static const struct {
		const char *url, *message;
	} bad[] = {
		{ "s3:/bucket", "'s3:/bucket': expected s3://BUCKET[/PREFIX]" },
		{ "bucket", "'bucket': expected s3://BUCKET[/PREFIX]" },
		{ "", "'': expected s3://BUCKET[/PREFIX]" },
		{ "http://bucket", "'http://bucket': expected "
				   "s3://BUCKET[/PREFIX]" },
		{ "s3://", "'s3://': no bucket name; expected "
			   "s3://BUCKET[/PREFIX]" },
		{ "s3:///prefix", "'s3:///prefix': no bucket name; expected "
				  "s3://BUCKET[/PREFIX]" },
		{ "s3://ab", "'s3://ab': bucket name 'ab' is not 3 to 63 "
			     "characters long" },
		{ "s3://a234567890123456789012345678901234567890123456789012345"
		  "678901234",
		  "'s3://a23456789012345678901234567890123456789012345678901234"
		  "5678901234': bucket name 'a23456789012345678901234567890123"
		  "4567890123456789012345678901234' is not 3 to 63 characters "
		  "long" },
		{ "s3://my bucket", "'s3://my bucket': bucket name 'my bucket' "
				    "may contain only letters, digits, '.', "
				    "'-' and '_'" },
		{ "s3://bu\ncket/", "'s3://bu\\x0acket/': bucket name "
				    "'bu\\x0acket' may contain only letters, "
				    "digits, '.', '-' and '_'" },
		{ "s3://b@cket", "'s3://b@cket': bucket name 'b@cket' may "
				 "contain only letters, digits, '.', '-' and "
				 "'_'" },
		{ "s3://bucket/\xff", "'s3://bucket/\\xff': the prefix is not "
				      "valid UTF-8" },
	};
	g_autofree char *long_url = NULL;
	g_autoptr(GError) error = NULL;
	guint i;

	(void)data;
	for (i = 0; i < G_N_ELEMENTS(good); i++) {
		url_ok(f, good[i].url);
		g_assert_cmpstr(f->cfg.bucket, ==, good[i].bucket);
		g_assert_cmpstr(f->cfg.prefix, ==, good[i].prefix);
	}
	for (i = 0; i < G_N_ELEMENTS(bad); i++) {
		g_assert_false(config_parse_url(&f->cfg, bad[i].url, &error));
		g_assert_error(error, BFS_ERROR, EINVAL);
		g_assert_cmpstr(error->message, ==, bad[i].message);
		g_clear_error(&error);
	}
	/* A failed parse leaves the last good one. */
	g_assert_cmpstr(f->cfg.bucket, ==, "abc");

	long_url = g_strdup_printf("s3://abc/%01024d", 0);
	g_assert_false(config_parse_url(&f->cfg, long_url, &error));
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_true(g_str_has_suffix(error->message,
				       "': the prefix is longer than 1023 "
				       "bytes"));
}

static void test_options(struct fixture *f, gconstpointer data)
{
	const struct config *cfg = &f->cfg;

	(void)data;
	opts_ok(f, "region=eu-west-1,addressing=path,index=/var/idx,"
		   "profile=dev,anonymous,connect_timeout=2.5,"
		   "stall_timeout=.5,request_timeout=0,max_attempts=3,"
		   "max_connections=1000000,ro");
	g_assert_cmpstr(cfg->region, ==, "eu-west-1");
	g_assert_cmpstr(cfg->region_source, ==, "-o region");
	g_assert_cmpint(cfg->addressing, ==, ADDRESSING_PATH);
	g_assert_cmpstr(cfg->index_path, ==, "/var/idx");
	g_assert_cmpstr(cfg->profile, ==, "dev");
	g_assert_true(cfg->anonymous);
	g_assert_cmpfloat(cfg->connect_timeout, ==, 2.5);
	g_assert_cmpfloat(cfg->stall_timeout, ==, 0.5);
	g_assert_cmpfloat(cfg->request_timeout, ==, 0);
	g_assert_cmpuint(cfg->max_attempts, ==, 3);
	g_assert_cmpuint(cfg->max_connections, ==, 1000000);
	g_assert_true(cfg->read_only);
	g_assert_cmpuint(cfg->event_threads, ==, 0);
	opts_ok(f, "event_threads=64");
	g_assert_cmpuint(cfg->event_threads, ==, 64);

	/* Repeated: the last one wins; empty items are ignored. */
	opts_ok(f, ",,addressing=virtual,,region=us-west-2,");
	opts_ok(f, "addressing=auto,max_attempts=100,request_timeout=86400");
	opts_ok(f, "connect_timeout=3600,stall_timeout=7.");
	g_assert_cmpstr(cfg->region, ==, "us-west-2");
	g_assert_cmpint(cfg->addressing, ==, ADDRESSING_AUTO);
	g_assert_cmpuint(cfg->max_attempts, ==, 100);
	g_assert_cmpfloat(cfg->request_timeout, ==, 86400);
	g_assert_cmpfloat(cfg->connect_timeout, ==, 3600);
	g_assert_cmpfloat(cfg->stall_timeout, ==, 7);
	opts_ok(f, "");

	/* mount(8) passes "rw": accepted and noted; it does not undo an
	 * earlier "ro". */
	g_assert_false(cfg->rw_ignored);
	opts_ok(f, "rw");
	g_assert_true(cfg->rw_ignored);
	g_assert_true(cfg->read_only);
}

static void test_option_escapes(struct fixture *f, gconstpointer data)
{
	g_autoptr(GPtrArray) pass = g_ptr_array_new_with_free_func(g_free);
	g_autoptr(GError) error = NULL;

	(void)data;
	opts_ok(f, "index=/data/a\\,b\\\\c\\d=e,profile=p\\,q");
	g_assert_cmpstr(f->cfg.index_path, ==, "/data/a,b\\c\\d=e");
	g_assert_cmpstr(f->cfg.profile, ==, "p,q");

	/* Unknown options pass through, unescaped and in order. */
	g_assert_true(config_parse_options(&f->cfg,
					   "allow_other,region=eu-west-1,"
					   "fsname=a\\,b,max_read=131072",
					   pass, &error));
	g_assert_no_error(error);
	g_assert_cmpuint(pass->len, ==, 3);
	g_assert_cmpstr(g_ptr_array_index(pass, 0), ==, "allow_other");
	g_assert_cmpstr(g_ptr_array_index(pass, 1), ==, "fsname=a,b");
	g_assert_cmpstr(g_ptr_array_index(pass, 2), ==, "max_read=131072");
	g_assert_cmpstr(f->cfg.region, ==, "eu-west-1");

	/* Our options are checked even when others pass through. */
	g_assert_false(
		config_parse_options(&f->cfg, "max_attempts=0", pass, &error));
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_clear_error(&error);

	/* Secrets never pass through, and their value is not echoed. */
	g_assert_false(config_parse_options(&f->cfg, "secret_key=s3cr3t", pass,
					    &error));
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_cmpstr(error->message, ==,
			"option 'secret_key': secrets are not accepted as "
			"options (they would show in ps and /proc/mounts); "
			"use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a "
			"profile (-o profile=NAME)");
	g_assert_cmpuint(pass->len, ==, 3);
}

static void test_option_errors(struct fixture *f, gconstpointer data)
{
	static const struct {
		const char *opts, *message;
	} bad[] = {
		{ "bogus", "unknown option 'bogus'" },
		{ "bogus=1", "unknown option 'bogus'" },
		{ "allow_other", "unknown option 'allow_other'" },
		{ "anonymous=1", "option 'anonymous' takes no value" },
		{ "ro=yes", "option 'ro' takes no value" },
		{ "region", "option 'region' needs a value: region=NAME" },
		{ "region=", "option 'region' needs a value: region=NAME" },
		{ "ca_file=", "option 'ca_file' needs a value: ca_file=PATH" },
		{ "index", "option 'index' needs a value: index=PATH" },
		{ "endpoint", "option 'endpoint' needs a value: endpoint=URL" },
		{ "addressing", "option 'addressing' needs a value: "
				"addressing=path|virtual|auto" },
		{ "max_attempts", "option 'max_attempts' needs a value: "
				  "max_attempts=N" },
		{ "region=us east", "option 'region': 'us east' is not a "
				    "region name (letters, digits, '-', '_', "
				    "'.')" },
		{ "addressing=vhost", "option 'addressing': 'vhost' is not one "
				      "of path, virtual or auto" },
		{ "addressing=PATH", "option 'addressing': 'PATH' is not one "
				     "of path, virtual or auto" },
		{ "profile=a]b", "option 'profile': 'a]b' is not a profile "
				 "name" },
		{ "max_attempts=3x", "option 'max_attempts': '3x' is not an "
				     "integer between 1 and 100" },
		{ "max_attempts=0", "option 'max_attempts': '0' is not an "
				    "integer between 1 and 100" },
		{ "max_attempts=101", "option 'max_attempts': '101' is not an "
				      "integer between 1 and 100" },
		{ "max_attempts=-1", "option 'max_attempts': '-1' is not an "
				     "integer between 1 and 100" },
		{ "max_attempts=+5", "option 'max_attempts': '+5' is not an "
				     "integer between 1 and 100" },
		{ "max_attempts= 5", "option 'max_attempts': ' 5' is not an "
				     "integer between 1 and 100" },
		{ "max_attempts=0x5", "option 'max_attempts': '0x5' is not an "
				      "integer between 1 and 100" },
		{ "max_attempts=99999999999999999999999",
		  "option 'max_attempts': '99999999999999999999999' is not an "
		  "integer between 1 and 100" },
		{ "max_connections=0", "option 'max_connections': '0' is not "
				       "an integer between 1 and 1000000" },
		{ "max_connections=1000001", "option 'max_connections': "
					     "'1000001' is not an integer "
					     "between 1 and 1000000" },
		{ "event_threads=0", "option 'event_threads': '0' is not an "
				     "integer between 1 and 64" },
		{ "event_threads=65", "option 'event_threads': '65' is not "
				      "an integer between 1 and 64" },
		{ "connect_timeout=0", "option 'connect_timeout': '0' is not a "
				       "number of seconds greater than 0 and "
				       "at most 3600" },
		{ "connect_timeout=0.0", "option 'connect_timeout': '0.0' is "
					 "not a number of seconds greater "
					 "than 0 and at most 3600" },
		{ "connect_timeout=3600.5", "option 'connect_timeout': "
					    "'3600.5' is not a number of "
					    "seconds greater than 0 and at "
					    "most 3600" },
		{ "connect_timeout=1e3", "option 'connect_timeout': '1e3' is "
					 "not a number of seconds greater "
					 "than 0 and at most 3600" },
		{ "connect_timeout=inf", "option 'connect_timeout': 'inf' is "
					 "not a number of seconds greater "
					 "than 0 and at most 3600" },
		{ "connect_timeout=nan", "option 'connect_timeout': 'nan' is "
					 "not a number of seconds greater "
					 "than 0 and at most 3600" },
		{ "connect_timeout=.", "option 'connect_timeout': '.' is not a "
				       "number of seconds greater than 0 and "
				       "at most 3600" },
		{ "connect_timeout=1.2.3", "option 'connect_timeout': '1.2.3' "
					   "is not a number of seconds greater "
					   "than 0 and at most 3600" },
		{ "connect_timeout=-1", "option 'connect_timeout': '-1' is not "
					"a number of seconds greater than 0 "
					"and at most 3600" },
		{ "stall_timeout=0", "option 'stall_timeout': '0' is not a "
				     "number of seconds greater than 0 and at "
				     "most 3600" },
		{ "request_timeout=86401", "option 'request_timeout': '86401' "
					   "is not a number of seconds "
					   "between 0 (none) and 86400" },
		{ "request_timeout=5s", "option 'request_timeout': '5s' is not "
					"a number of seconds between 0 (none) "
					"and 86400" },
		{ "max_attempts=5\\,6", "option 'max_attempts': '5,6' is not "
					"an integer between 1 and 100" },
		{ "max_attempts=1\n", "option 'max_attempts': '1\\x0a' is not "
				      "an integer between 1 and 100" },
		{ "password=hunter2", "option 'password': secrets are not "
				      "accepted as options (they would show "
				      "in ps and /proc/mounts); use "
				      "AWS_ACCESS_KEY_ID and "
				      "AWS_SECRET_ACCESS_KEY or a profile (-o "
				      "profile=NAME)" },
		{ "aws_session_token=x", "option 'aws_session_token': secrets "
					 "are not accepted as options (they "
					 "would show in ps and /proc/mounts); "
					 "use AWS_ACCESS_KEY_ID and "
					 "AWS_SECRET_ACCESS_KEY or a profile "
					 "(-o profile=NAME)" },
	};
	guint i;

	(void)f;
	(void)data;
	for (i = 0; i < G_N_ELEMENTS(bad); i++)
		opts_fail(bad[i].opts, bad[i].message);
}

static void test_endpoints_option(struct fixture *f, gconstpointer data)
{
	static const struct {
		const char *url, *normalized;
	} good[] = {
		{ "http://10.0.0.7:9000", "http://10.0.0.7:9000" },
		{ "HTTP://Minio.Local:9000/", "http://minio.local:9000" },
		{ "https://s3.example.com:443", "https://s3.example.com" },
		{ "http://host:80/", "http://host" },
		{ "http://host:0080", "http://host" },
		{ "https://host:80", "https://host:80" },
		{ "http://[::1]:9000", "http://[::1]:9000" },
		{ "http://[FE80::1]", "http://[fe80::1]" },
		{ "http://minio_1:9000", "http://minio_1:9000" },
	};
	static const struct {
		const char *url, *message;
	} bad[] = {
		{ "10.0.0.7:9000",
		  "'10.0.0.7:9000': expected "
		  "http://HOST[:PORT] or https://HOST[:PORT]" },
		{ "ftp://host", "'ftp://host': the scheme must be http or "
				"https" },
		{ "http://", "'http://': no host" },
		{ "http://:9000", "'http://:9000': no host" },
		{ "http://host:", "'http://host:': the port must be a number "
				  "between 1 and 65535" },
		{ "http://host:0", "'http://host:0': the port must be a number "
				   "between 1 and 65535" },
		{ "http://host:65536",
		  "'http://host:65536': the port must be a "
		  "number between 1 and 65535" },
		{ "http://host:9x", "'http://host:9x': the port must be a "
				    "number between 1 and 65535" },
		{ "http://host/bucket", "'http://host/bucket': a path is not "
					"supported (give a prefix as "
					"s3://BUCKET/PREFIX)" },
		{ "http://host//", "'http://host//': a path is not supported "
				   "(give a prefix as s3://BUCKET/PREFIX)" },
		{ "http://host?x=1", "'http://host?x=1': a query is not "
				     "supported" },
		{ "http://host/?x", "'http://host/?x': a query is not "
				    "supported" },
		{ "http://host#f", "'http://host#f': a query is not "
				   "supported" },
		{ "http://ho st", "'http://ho st': invalid character in the "
				  "host name" },
		{ "http://[::1", "'http://[::1': invalid IPv6 address" },
		{ "http://[]:80", "'http://[]:80': invalid IPv6 address" },
		{ "http://[::g]", "'http://[::g]': invalid IPv6 address" },
		{ "http://[::1]x", "'http://[::1]x': invalid IPv6 address" },
		{ "http://user:pa55word@host:9000",
		  "'http://...@host:9000': a user name or password in the URL "
		  "is not supported (credentials come from the environment or "
		  "a profile)" },
		{ "http://user:pa/55@word@host:9000",
		  "'http://...@host:9000': a user name or password in the URL "
		  "is not supported (credentials come from the environment or "
		  "a profile)" },
		{ "http://user:pa#55word@host",
		  "'http://...@host': a user name or password in the URL is "
		  "not supported (credentials come from the environment or a "
		  "profile)" },
		{ "ftp://user:pa55word@host",
		  "'ftp://...@host': the scheme must be http or https" },
		{ "user:pa55word@host:9000",
		  "'...@host:9000': expected http://HOST[:PORT] or "
		  "https://HOST[:PORT]" },
	};
	g_autofree char *opts = NULL;
	g_autofree char *message = NULL;
	guint i;

	(void)data;
	for (i = 0; i < G_N_ELEMENTS(good); i++) {
		struct fixture one = { 0 };

		config_init(&one.cfg);
		opts = g_strdup_printf("endpoint=%s", good[i].url);
		opts_ok(&one, opts);
		g_clear_pointer(&opts, g_free);
		g_assert_cmpuint(one.cfg.endpoints->len, ==, 1);
		g_assert_cmpstr(g_ptr_array_index(one.cfg.endpoints, 0), ==,
				good[i].normalized);
		g_assert_true(one.cfg.endpoints_from_options);
		config_clear(&one.cfg);
	}
	for (i = 0; i < G_N_ELEMENTS(bad); i++) {
		opts = g_strdup_printf("endpoint=%s", bad[i].url);
		message = g_strdup_printf("option 'endpoint': %s",
					  bad[i].message);
		opts_fail(opts, message);
		g_clear_pointer(&opts, g_free);
		g_clear_pointer(&message, g_free);
	}

	/* Repeatable, in order, without duplicates. */
	opts_ok(f, "endpoint=http://a:9000,endpoint=http://b:9000");
	opts_ok(f, "endpoint=HTTP://A:9000/,endpoint=http://c:9000");
	g_setenv("S3_ENDPOINT_URIS", "http://env:9000", TRUE);
	g_setenv("AWS_ENDPOINT_URL", "http://env2:9000", TRUE);
	url_ok(f, "s3://bucket");
	finish_ok(f);
	assert_endpoints(&f->cfg, "-o endpoint",
			 (const char *const[]){ "http://a:9000",
						"http://b:9000",
						"http://c:9000", NULL });
	g_assert_true(f->cfg.endpoints_from_options);
	/* Custom endpoints get path-style addressing. */
	g_assert_cmpint(f->cfg.addressing, ==, ADDRESSING_PATH);
}

static void test_endpoints_env(struct fixture *f, gconstpointer data)
{
	struct config *cfg = &f->cfg;

	(void)data;
	g_setenv("S3_ENDPOINT_URIS",
		 " http://10.0.0.7:9000 ,, http://10.0.0.8:9000/,\t"
		 "http://10.0.0.7:9000 , ",
		 TRUE);
	g_setenv("AWS_ENDPOINT_URL_S3", "http://s3only:9000", TRUE);
	g_setenv("AWS_ENDPOINT_URL", "http://all:9000", TRUE);
	url_ok(f, "s3://bucket");
	finish_ok(f);
	assert_endpoints(cfg, "S3_ENDPOINT_URIS",
			 (const char *const[]){ "http://10.0.0.7:9000",
						"http://10.0.0.8:9000", NULL });
	g_assert_false(cfg->endpoints_from_options);
	config_clear(cfg);

	/* An empty variable, or one of only separators, is unset. */
	config_init(cfg);
	g_setenv("S3_ENDPOINT_URIS", " , ", TRUE);
	url_ok(f, "s3://bucket");
	finish_ok(f);
	assert_endpoints(cfg, "AWS_ENDPOINT_URL_S3",
			 (const char *const[]){ "http://s3only:9000", NULL });
	config_clear(cfg);

	config_init(cfg);
	g_setenv("S3_ENDPOINT_URIS", "", TRUE);
	g_setenv("AWS_ENDPOINT_URL_S3", "", TRUE);
	url_ok(f, "s3://bucket");
	finish_ok(f);
	assert_endpoints(cfg, "AWS_ENDPOINT_URL",
			 (const char *const[]){ "http://all:9000", NULL });
	config_clear(cfg);

	config_init(cfg);
	g_setenv("S3_ENDPOINT_URIS", "http://ok:1,http://bad/path", TRUE);
	url_ok(f, "s3://bucket");
	finish_fail(f, EINVAL,
		    "S3_ENDPOINT_URIS: 'http://bad/path': a path is not "
		    "supported (give a prefix as s3://BUCKET/PREFIX)");
	config_clear(cfg);

	config_init(cfg);
	g_unsetenv("S3_ENDPOINT_URIS");
	g_setenv("AWS_ENDPOINT_URL", "https://u:s3cr3t@host", TRUE);
	url_ok(f, "s3://bucket");
	finish_fail(f, EINVAL,
		    "AWS_ENDPOINT_URL: 'https://...@host': a user name or "
		    "password in the URL is not supported (credentials come "
		    "from the environment or a profile)");
}

static void test_region(struct fixture *f, gconstpointer data)
{
	struct config *cfg = &f->cfg;
	g_autoptr(GError) error = NULL;

	(void)data;
	g_file_set_contents(f->conf_path,
			    "[default]\nregion = ap-south-1\n"
			    "[profile dev]\nregion = cn-north-1\n"
			    "[profile bad]\nregion = us-west-2 # comment\n",
			    -1, &error);
	g_assert_no_error(error);
	g_setenv("AWS_REGION", "eu-west-1", TRUE);
	g_setenv("AWS_DEFAULT_REGION", "eu-west-2", TRUE);

	opts_ok(f, "region=eu-west-3");
	url_ok(f, "s3://bucket");
	finish_ok(f);
	g_assert_cmpstr(cfg->region, ==, "eu-west-3");
	g_assert_cmpstr(cfg->region_source, ==, "-o region");
	assert_endpoints(cfg, "default for region eu-west-3",
			 (const char *const[]){
				 "https://s3.eu-west-3.amazonaws.com", NULL });
	config_clear(cfg);

	config_init(cfg);
	url_ok(f, "s3://bucket");
	finish_ok(f);
	g_assert_cmpstr(cfg->region, ==, "eu-west-1");
	g_assert_cmpstr(cfg->region_source, ==, "AWS_REGION");
	config_clear(cfg);

	config_init(cfg);
	g_unsetenv("AWS_REGION");
	url_ok(f, "s3://bucket");
	finish_ok(f);
	g_assert_cmpstr(cfg->region, ==, "eu-west-2");
	g_assert_cmpstr(cfg->region_source, ==, "AWS_DEFAULT_REGION");
	config_clear(cfg);

	config_init(cfg);
	g_unsetenv("AWS_DEFAULT_REGION");
	url_ok(f, "s3://bucket");
	finish_ok(f);
	g_assert_cmpstr(cfg->region, ==, "ap-south-1");
	g_assert_cmpstr(cfg->region_source, ==,
			"profile 'default' in the AWS config file");
	config_clear(cfg);

	/* The profile from -o, and AWS China's domain. */
	config_init(cfg);
	opts_ok(f, "profile=dev");
	url_ok(f, "s3://bucket");
	finish_ok(f);
	g_assert_cmpstr(cfg->region, ==, "cn-north-1");
	g_assert_cmpstr(cfg->region_source, ==,
			"profile 'dev' in the AWS config file");
	assert_endpoints(
		cfg, "default for region cn-north-1",
		(const char *const[]){ "https://s3.cn-north-1.amazonaws.com.cn",
				       NULL });
	g_assert_cmpint(cfg->addressing, ==, ADDRESSING_VIRTUAL);
	config_clear(cfg);

	/* From AWS_PROFILE; no inline comments in AWS files. */
	config_init(cfg);
	g_setenv("AWS_PROFILE", "bad", TRUE);
	url_ok(f, "s3://bucket");
	finish_fail(f, EINVAL,
		    "region of profile 'bad' in the AWS config file: "
		    "'us-west-2 # comment' is not a region name");
	config_clear(cfg);

	config_init(cfg);
	g_setenv("AWS_REGION", "eu west", TRUE);
	url_ok(f, "s3://bucket");
	finish_fail(f, EINVAL, "AWS_REGION: 'eu west' is not a region name");
	config_clear(cfg);

	/* A broken config file is reported with its cause. */
	config_init(cfg);
	g_unsetenv("AWS_REGION");
	g_file_set_contents(f->conf_path, "[default]\nregion\n", -1, &error);
	g_assert_no_error(error);
	url_ok(f, "s3://bucket");
	g_assert_false(config_finish(cfg, &error));
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_true(g_str_has_prefix(error->message,
				       "the region of the AWS profile: "));
	g_assert_true(g_str_has_suffix(error->message,
				       "config:2: expected 'key = value', "
				       "'[section]' or a comment"));
}

static void test_addressing(struct fixture *f, gconstpointer data)
{
	static const struct {
		const char *opts, *url;
		enum addressing want;
	} cases[] = {
		{ "", "s3://my-bucket", ADDRESSING_VIRTUAL },
		{ "", "s3://my.bucket", ADDRESSING_PATH },
		{ "", "s3://My_Bucket", ADDRESSING_PATH },
		{ "", "s3://-bucket", ADDRESSING_PATH },
		{ "addressing=path", "s3://my-bucket", ADDRESSING_PATH },
		{ "endpoint=https://s3.eu-west-1.amazonaws.com", "s3://bucket",
		  ADDRESSING_VIRTUAL },
		{ "endpoint=http://minio:9000", "s3://bucket",
		  ADDRESSING_PATH },
		{ "endpoint=http://minio:9000,addressing=virtual",
		  "s3://bucket", ADDRESSING_VIRTUAL },
		{ "addressing=virtual", "s3://my.bucket", ADDRESSING_VIRTUAL },
	};
	guint i;

	(void)data;
	for (i = 0; i < G_N_ELEMENTS(cases); i++) {
		config_clear(&f->cfg);
		config_init(&f->cfg);
		opts_ok(f, cases[i].opts);
		url_ok(f, cases[i].url);
		finish_ok(f);
		g_assert_cmpint(f->cfg.addressing, ==, cases[i].want);
	}

	config_clear(&f->cfg);
	config_init(&f->cfg);
	opts_ok(f, "addressing=virtual");
	url_ok(f, "s3://My_Bucket");
	finish_fail(f, EINVAL,
		    "option 'addressing': 'virtual' needs a bucket name that "
		    "can be part of a host name, and 'My_Bucket' cannot (use "
		    "addressing=path)");
}

static void test_ca_file(struct fixture *f, gconstpointer data)
{
	g_autofree char *bundle = g_build_filename(f->dir, "ca.pem", NULL);
	g_autofree char *missing = g_build_filename(f->dir, "nope", NULL);
	g_autofree char *message = NULL;
	g_autoptr(GError) error = NULL;
	struct config *cfg = &f->cfg;
	g_autofree char *opts = NULL;

	(void)data;
	g_file_set_contents(bundle, "-----BEGIN CERTIFICATE-----\n", -1,
			    &error);
	g_assert_no_error(error);

	opts = g_strdup_printf("ca_file=%s", bundle);
	opts_ok(f, opts);
	url_ok(f, "s3://bucket");
	finish_ok(f);
	g_assert_cmpstr(cfg->ca_file, ==, bundle);
	config_clear(cfg);

	config_init(cfg);
	g_free(opts);
	opts = g_strdup_printf("ca_file=%s", missing);
	opts_ok(f, opts);
	url_ok(f, "s3://bucket");
	message = g_strdup_printf("option 'ca_file': '%s': %s", missing,
				  g_strerror(ENOENT));
	finish_fail(f, ENOENT, message);
	config_clear(cfg);

	config_init(cfg);
	g_free(opts);
	opts = g_strdup_printf("ca_file=%s", f->dir);
	opts_ok(f, opts);
	url_ok(f, "s3://bucket");
	g_free(message);
	message = g_strdup_printf("option 'ca_file': '%s': %s", f->dir,
				  g_strerror(EISDIR));
	finish_fail(f, EISDIR, message);
	config_clear(cfg);

	/* AWS_CA_BUNDLE applies to https endpoints... */
	config_init(cfg);
	g_setenv("AWS_CA_BUNDLE", bundle, TRUE);
	url_ok(f, "s3://bucket");
	finish_ok(f);
	g_assert_cmpstr(cfg->ca_file, ==, bundle);
	config_clear(cfg);

	config_init(cfg);
	g_setenv("AWS_CA_BUNDLE", missing, TRUE);
	url_ok(f, "s3://bucket");
	g_free(message);
	message = g_strdup_printf("AWS_CA_BUNDLE: '%s': %s", missing,
				  g_strerror(ENOENT));
	finish_fail(f, ENOENT, message);
	config_clear(cfg);

	/* ...and is ignored when there is none; -o ca_file wins. */
	config_init(cfg);
	opts_ok(f, "endpoint=http://minio:9000");
	url_ok(f, "s3://bucket");
	finish_ok(f);
	g_assert_null(cfg->ca_file);
	config_clear(cfg);

	config_init(cfg);
	g_free(opts);
	opts = g_strdup_printf("ca_file=%s", bundle);
	opts_ok(f, opts);
	url_ok(f, "s3://bucket");
	finish_ok(f);
	g_assert_cmpstr(cfg->ca_file, ==, bundle);

	g_unlink(bundle);
}

static void test_no_bucket(struct fixture *f, gconstpointer data)
{
	(void)data;
	finish_fail(f, EINVAL,
		    "no bucket given: expected s3://BUCKET[/PREFIX]");
}

static void test_describe(struct fixture *f, gconstpointer data)
{
	g_autofree char *before = NULL;
	g_autofree char *text = NULL;

	(void)data;
	g_setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t", TRUE);
	g_setenv("AWS_SESSION_TOKEN", "t0k3n", TRUE);
	g_setenv("S3_ENDPOINT_URIS", "http://a:9000,http://b:9000", TRUE);
	url_ok(f, "s3://dset/train\n");
	opts_ok(f, "max_attempts=3,request_timeout=2.5,profile=dev");
	before = config_describe(&f->cfg);
	g_assert_nonnull(strstr(before, "endpoints:        (not resolved "
					"yet)\n"));
	finish_ok(f);
	text = config_describe(&f->cfg);
	g_test_message("%s", text);
	g_assert_cmpstr(text, ==,
			"bucket:           s3://dset/train\\x0a/\n"
			"endpoints:        http://a:9000 (S3_ENDPOINT_URIS)\n"
			"                  http://b:9000\n"
			"region:           us-east-1 (default)\n"
			"addressing:       path\n"
			"credentials:      profile 'dev' (-o profile)\n"
			"ca_file:          system default\n"
			"index:            default location\n"
			"connect_timeout:  10 s\n"
			"stall_timeout:    30 s\n"
			"request_timeout:  2.5 s\n"
			"max_attempts:     3\n"
			"retry_deadline:   60 s\n"
			"max_connections:  half the descriptor limit, at most "
			"1024 (default)\n"
			"writes:           new names only; the index's "
			"objects read-only\n");
	g_assert_null(strstr(text, "s3cr3t"));
	g_assert_null(strstr(text, "t0k3n"));
}

static void test_help(void)
{
	static const char *const options[] = {
		"endpoint=URL",	      "region=NAME",
		"addressing=STYLE",   "ca_file=PATH",
		"index=PATH",	      "profile=NAME",
		"anonymous",	      "connect_timeout=SECS",
		"stall_timeout=SECS", "request_timeout=SECS",
		"max_attempts=N",     "max_connections=N",
		"    ro  ",
	};
	const char *help = config_options_help();
	g_auto(GStrv) lines = g_strsplit(help, "\n", -1);
	guint i;

	for (i = 0; i < G_N_ELEMENTS(options); i++)
		g_assert_nonnull(strstr(help, options[i]));
	g_assert_nonnull(strstr(help, "deliberately no option for a secret"));
	g_assert_nonnull(strstr(help, "S3_ENDPOINT_URIS"));
	g_assert_true(g_str_has_suffix(help, "\n"));
	for (i = 0; lines[i]; i++)
		g_assert_cmpuint(strlen(lines[i]), <=, 72);
}

/* --- the config file --------------------------------------------------- */

/* Writes @text to DIR/@name with @mode; returns the path. */
static char *conf_write(struct fixture *f, const char *name, const char *text,
			int mode)
{
	g_autoptr(GError) error = NULL;
	char *path = g_build_filename(f->dir, name, NULL);

	g_assert_true(g_file_set_contents(path, text, -1, &error));
	g_assert_no_error(error);
	g_assert_cmpint(g_chmod(path, mode), ==, 0);
	return path;
}

/* The file @text as $BUCKETFS_CONFIG, then @url, -o @opts and finish. */
static gboolean conf_finish(struct fixture *f, const char *text,
			    const char *url, const char *opts, GError **error)
{
	g_autofree char *path = conf_write(f, "bucketfs.conf", text, 0600);

	g_setenv("BUCKETFS_CONFIG", path, TRUE);
	url_ok(f, url);
	if (opts)
		opts_ok(f, opts);
	return config_finish(&f->cfg, error);
}

static void conf_ok(struct fixture *f, const char *text, const char *url,
		    const char *opts)
{
	g_autoptr(GError) error = NULL;

	g_assert_true(conf_finish(f, text, url, opts, &error));
	g_assert_no_error(error);
}

/* The message with the temporary directory replaced by "DIR". */
static void conf_fail(struct fixture *f, const char *text, const char *opts,
		      int code, const char *message)
{
	g_autoptr(GError) error = NULL;
	g_auto(GStrv) parts = NULL;
	g_autofree char *got = NULL;

	g_assert_false(conf_finish(f, text, "s3://dset/train", opts, &error));
	g_assert_error(error, BFS_ERROR, code);
	parts = g_strsplit(error->message, f->dir, -1);
	got = g_strjoinv("DIR", parts);
	g_assert_cmpstr(got, ==, message);
}

static const char conf_text[] = "# bucketfs.conf for the tests\n"
				"[default]\n"
				"region = eu-west-1\n"
				"endpoint = http://a:9000; http://b:9000\n"
				"max_attempts = 4\n"
				"connect_timeout = 2\n"
				"anonymous = false\n"
				"\n"
				"[s3://dset]\n"
				"max_attempts = 5\n"
				"stall_timeout = 7\n"
				"\n"
				"[s3://dset/train]\n"
				"max_attempts = 6\n"
				"index = /var/cache/ds-train.idx\n"
				"\n"
				"[s3://dset/train/deeper]\n"
				"max_attempts = 7\n"
				"\n"
				"[s3://dset/tr]\n"
				"max_attempts = 8\n"
				"\n"
				"[s3://other]\n"
				"anonymous = true\n"
				"region = us-west-2\n";

static void test_file_groups(struct fixture *f, gconstpointer data)
{
	const struct config *cfg = &f->cfg;
	g_autofree char *text = NULL;

	(void)data;
	conf_ok(f, conf_text, "s3://dset/train", NULL);
	g_assert_cmpstr(cfg->region, ==, "eu-west-1");
	g_assert_true(g_str_has_suffix(cfg->region_source,
				       "/bucketfs.conf:3: [default]"));
	g_assert_cmpuint(cfg->endpoints->len, ==, 2);
	g_assert_cmpstr(g_ptr_array_index(cfg->endpoints, 1), ==,
			"http://b:9000");
	g_assert_true(g_str_has_suffix(cfg->endpoint_source,
				       "/bucketfs.conf:4: [default]"));
	g_assert_false(cfg->endpoints_from_options);
	/* [s3://dset/train] beats [s3://dset] beats [default]; [s3://dset/tr]
	 * is not a prefix by components; [s3://dset/train/deeper] is deeper. */
	g_assert_cmpuint(cfg->max_attempts, ==, 6);
	g_assert_cmpfloat(cfg->stall_timeout, ==, 7);
	g_assert_cmpfloat(cfg->connect_timeout, ==, 2);
	g_assert_cmpstr(cfg->index_path, ==, "/var/cache/ds-train.idx");
	g_assert_false(cfg->anonymous);
	g_assert_cmpint(cfg->addressing, ==, ADDRESSING_PATH);
	text = config_describe(cfg);
	g_assert_nonnull(strstr(text, "config file:      "));
	g_assert_nonnull(strstr(text, "/bucketfs.conf\n"));
}

static void test_file_other_bucket(struct fixture *f, gconstpointer data)
{
	(void)data;
	conf_ok(f, conf_text, "s3://other/x", NULL);
	g_assert_true(f->cfg.anonymous);
	g_assert_cmpstr(f->cfg.region, ==, "us-west-2");
	g_assert_cmpuint(f->cfg.max_attempts, ==, 4);
	g_assert_null(f->cfg.index_path);
}

/* -o beats the file whatever the order of the calls; so does the env. */
static void test_file_precedence(struct fixture *f, gconstpointer data)
{
	const struct config *cfg = &f->cfg;

	(void)data;
	g_setenv("AWS_REGION", "ap-south-1", TRUE);
	opts_ok(f, "endpoint=http://cli:1,stall_timeout=9");
	conf_ok(f, conf_text, "s3://dset/train", "max_attempts=2");
	assert_endpoints(cfg, "-o endpoint",
			 (const char *const[]){ "http://cli:1", NULL });
	g_assert_true(cfg->endpoints_from_options);
	g_assert_cmpuint(cfg->max_attempts, ==, 2);
	g_assert_cmpfloat(cfg->stall_timeout, ==, 9);
	g_assert_cmpfloat(cfg->connect_timeout, ==, 2);
	g_assert_cmpstr(cfg->region, ==, "ap-south-1");
	g_assert_cmpstr(cfg->region_source, ==, "AWS_REGION");
}

static void test_file_env_endpoints(struct fixture *f, gconstpointer data)
{
	(void)data;
	g_setenv("S3_ENDPOINT_URIS", "http://env:1", TRUE);
	conf_ok(f, conf_text, "s3://dset", NULL);
	assert_endpoints(&f->cfg, "S3_ENDPOINT_URIS",
			 (const char *const[]){ "http://env:1", NULL });
	g_assert_cmpuint(f->cfg.max_attempts, ==, 5);
}

static void test_file_profile(struct fixture *f, gconstpointer data)
{
	static const char text[] = "[default]\nprofile=from-file\n";

	(void)data;
	conf_ok(f, text, "s3://dset", NULL);
	g_assert_cmpstr(f->cfg.profile, ==, "from-file");
	config_clear(&f->cfg);
	config_init(&f->cfg);
	/* Keys in the environment beat a profile from the file. */
	g_setenv("AWS_ACCESS_KEY_ID", "AKID", TRUE);
	conf_ok(f, text, "s3://dset", NULL);
	g_assert_null(f->cfg.profile);
}

static int mount_calls;

static gboolean mount_record(void *user, const char *opt, GError **error)
{
	GPtrArray *got = user;

	mount_calls++;
	if (g_str_has_prefix(opt, "whole_max=") && strcmp(opt + 10, "8M")) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option 'whole_max': '%s' is not a number",
			    opt + 10);
		return FALSE;
	}
	g_ptr_array_add(got, g_strdup(opt));
	return TRUE;
}

static void test_file_mount_options(struct fixture *f, gconstpointer data)
{
	static const char text[] = "[default]\n"
				   "whole_max = 8M\n"
				   "allow_other = true\n"
				   "entry_timeout = 60\n"
				   "[s3://dset]\n"
				   "prefetch_depth=128\n"
				   "list_workers=2\n";
	g_autoptr(GPtrArray) got = g_ptr_array_new_with_free_func(g_free);
	g_autoptr(GPtrArray) pass = g_ptr_array_new_with_free_func(g_free);
	g_autoptr(GError) error = NULL;
	g_autofree char *joined = NULL;

	(void)data;
	config_set_mount_handler(&f->cfg, mount_record, got);
	/* -o list_workers goes to the caller; the file's must not. */
	g_assert_true(config_parse_options(&f->cfg, "list_workers=3,fsname=x",
					   pass, &error));
	g_assert_no_error(error);
	conf_ok(f, text, "s3://dset", NULL);
	g_ptr_array_add(got, NULL);
	joined = g_strjoinv(",", (char **)got->pdata);
	g_assert_cmpstr(joined, ==,
			"entry_timeout=60,whole_max=8M,prefetch_depth=128,"
			"allow_other");

	/* Without a handler (the tools) the names are checked, no more. */
	config_clear(&f->cfg);
	config_init(&f->cfg);
	mount_calls = 0;
	conf_ok(f, "[default]\nwhole_max=bogus\n", "s3://dset", NULL);
	g_assert_cmpint(mount_calls, ==, 0);

	config_clear(&f->cfg);
	config_init(&f->cfg);
	config_set_mount_handler(&f->cfg, mount_record, got);
	conf_fail(f, "[default]\n\nwhole_max=9X\n", NULL, EINVAL,
		  "DIR/bucketfs.conf:3: [default]: option 'whole_max': '9X' "
		  "is not a number");
}

static void test_file_errors(struct fixture *f, gconstpointer data)
{
	static const struct {
		const char *text, *message;
	} bad[] = {
		{ "[default]\nregion=eu-west-1\nmax_atempts=3\n",
		  "DIR/bucketfs.conf:3: [default]: unknown key 'max_atempts' "
		  "(the keys are the -o options; see bucketfs.conf(5))" },
		/* Any group, not only the ones that apply. */
		{ "[s3://elsewhere]\n# c\nfoo=1\n",
		  "DIR/bucketfs.conf:3: [s3://elsewhere]: unknown key 'foo' "
		  "(the keys are the -o options; see bucketfs.conf(5))" },
		{ "[default]\nrw=true\n",
		  "DIR/bucketfs.conf:2: [default]: unknown key 'rw' (the keys "
		  "are the -o options; see bucketfs.conf(5))" },
		{ "[default]\nconfig=/x\n",
		  "DIR/bucketfs.conf:2: [default]: unknown key 'config' (the "
		  "keys are the -o options; see bucketfs.conf(5))" },
		{ "[defaults]\nregion=x\n",
		  "DIR/bucketfs.conf:1: [defaults]: unknown group: expected "
		  "[default] or [s3://BUCKET[/PREFIX]]" },
		{ "[ds]\n",
		  "DIR/bucketfs.conf:1: [ds]: unknown group: expected "
		  "[default] or [s3://BUCKET[/PREFIX]]" },
		{ "[s3://a]\n",
		  "DIR/bucketfs.conf:1: [s3://a]: unknown group: expected "
		  "[default] or [s3://BUCKET[/PREFIX]]" },
		/* The -o parser's own messages, with the place. */
		{ "[s3://dset]\n\n\nmax_attempts = 3x\n",
		  "DIR/bucketfs.conf:4: [s3://dset]: option 'max_attempts': "
		  "'3x' "
		  "is not an integer between 1 and 100" },
		{ "[default]\nendpoint=http://a:1;ftp://b\n",
		  "DIR/bucketfs.conf:2: [default]: option 'endpoint': "
		  "'ftp://b': the scheme must be http or https" },
		{ "[default]\nregion=\n",
		  "DIR/bucketfs.conf:2: [default]: option 'region' needs a "
		  "value: region=NAME" },
		{ "[default]\nanonymous=yes please\n",
		  "DIR/bucketfs.conf:2: [default]: option 'anonymous': 'yes "
		  "please' is not true or false" },
		{ "[default]\nsecret_access_key=abc\n",
		  "DIR/bucketfs.conf:2: [default]: key 'secret_access_key': "
		  "secrets are not accepted in the config file; use "
		  "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a profile "
		  "(profile=NAME) in the AWS credentials file" },
		{ "region=x\n",
		  "config file 'DIR/bucketfs.conf': Key file does not start "
		  "with a group" },
	};
	guint i;

	(void)data;
	for (i = 0; i < G_N_ELEMENTS(bad); i++) {
		conf_fail(f, bad[i].text, NULL, EINVAL, bad[i].message);
		config_clear(&f->cfg);
		config_init(&f->cfg);
	}
}

static void test_file_secret_not_echoed(struct fixture *f, gconstpointer data)
{
	g_autoptr(GError) error = NULL;

	(void)data;
	g_assert_false(conf_finish(f, "[default]\naws_secret=hunter2\n",
				   "s3://dset", NULL, &error));
	g_assert_null(strstr(error->message, "hunter2"));
}

static void test_file_where(struct fixture *f, gconstpointer data)
{
	g_autofree char *missing = g_build_filename(f->dir, "nope", NULL);
	g_autofree char *open = NULL;
	g_autofree char *other = NULL;
	g_autofree char *msg = NULL;
	g_autofree char *opts = NULL;
	g_autoptr(GError) error = NULL;

	(void)data;
	/* A named file must exist. */
	g_setenv("BUCKETFS_CONFIG", missing, TRUE);
	url_ok(f, "s3://dset");
	msg = g_strdup_printf("config file '%s': No such file or directory",
			      missing);
	finish_fail(f, ENOENT, msg);
	config_clear(&f->cfg);
	config_init(&f->cfg);

	/* Others may write it: not trusted. */
	open = conf_write(f, "open.conf", "[default]\nregion=eu-west-3\n",
			  0666);
	g_setenv("BUCKETFS_CONFIG", open, TRUE);
	url_ok(f, "s3://dset");
	g_assert_false(config_finish(&f->cfg, &error));
	g_assert_error(error, BFS_ERROR, EACCES);
	g_assert_nonnull(strstr(error->message, "others may write it (mode "
						"0666): not trusted"));
	g_clear_error(&error);
	config_clear(&f->cfg);
	config_init(&f->cfg);

	/* -o config= beats $BUCKETFS_CONFIG; "none" reads nothing. */
	other = conf_write(f, "other.conf", "[default]\nregion=eu-west-2\n",
			   0644);
	opts = g_strdup_printf("config=%s", other);
	opts_ok(f, opts);
	url_ok(f, "s3://dset");
	finish_ok(f);
	g_assert_cmpstr(f->cfg.region, ==, "eu-west-2");
	config_clear(&f->cfg);
	config_init(&f->cfg);
	opts_ok(f, "config=none");
	url_ok(f, "s3://dset");
	finish_ok(f);
	g_assert_cmpstr(f->cfg.region, ==, "us-east-1");
	g_assert_cmpuint(f->cfg.files_read->len, ==, 0);

	g_unlink(open);
	g_unlink(other);
}

/* Without a named file: ~/.config/bucketfs/bucketfs.conf (see main()). */
static void test_file_user(struct fixture *f, gconstpointer data)
{
	g_autofree char *dir =
		g_build_filename(g_get_user_config_dir(), "bucketfs", NULL);
	g_autofree char *path = g_build_filename(dir, "bucketfs.conf", NULL);
	g_autoptr(GError) error = NULL;

	(void)data;
	g_assert_cmpint(g_mkdir_with_parents(dir, 0700), ==, 0);
	g_assert_true(g_file_set_contents(
		path, "[s3://dset]\nconnect_timeout=3\n", -1, &error));
	g_unsetenv("BUCKETFS_CONFIG");
	url_ok(f, "s3://dset");
	finish_ok(f);
	g_assert_cmpfloat(f->cfg.connect_timeout, ==, 3);
	g_assert_cmpstr(g_ptr_array_index(f->cfg.files_read,
					  f->cfg.files_read->len - 1),
			==, path);
	g_unlink(path);
	g_rmdir(dir);
}

static void test_file_mount_keys(void)
{
	const char *const *keys = config_mount_keys();
	guint i;

	for (i = 0; keys[i]; i++)
		g_assert_null(strchr(keys[i], '='));
	g_assert_cmpuint(i, >=, 9);
}

int main(int argc, char **argv)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *home = NULL;
	int rc;

	g_test_init(&argc, &argv, NULL);
	/* ~/.config is read once per process: a private one, before that. */
	home = g_dir_make_tmp("bfs-config-home-XXXXXX", &error);
	g_assert_no_error(error);
	g_setenv("XDG_CONFIG_HOME", home, TRUE);

#define ADD(name, fn)                                                          \
	g_test_add("/config/" name, struct fixture, NULL, fixture_setup, fn,   \
		   fixture_teardown)
	ADD("defaults", test_defaults);
	ADD("url", test_url);
	ADD("options", test_options);
	ADD("option-escapes", test_option_escapes);
	ADD("option-errors", test_option_errors);
	ADD("endpoints/option", test_endpoints_option);
	ADD("endpoints/env", test_endpoints_env);
	ADD("region", test_region);
	ADD("addressing", test_addressing);
	ADD("ca-file", test_ca_file);
	ADD("no-bucket", test_no_bucket);
	ADD("describe", test_describe);
	ADD("file/groups", test_file_groups);
	ADD("file/other-bucket", test_file_other_bucket);
	ADD("file/precedence", test_file_precedence);
	ADD("file/env-endpoints", test_file_env_endpoints);
	ADD("file/profile", test_file_profile);
	ADD("file/mount-options", test_file_mount_options);
	ADD("file/errors", test_file_errors);
	ADD("file/secret-not-echoed", test_file_secret_not_echoed);
	ADD("file/where", test_file_where);
	ADD("file/user", test_file_user);
#undef ADD
	g_test_add_func("/config/help", test_help);
	g_test_add_func("/config/file/mount-keys", test_file_mount_keys);

	rc = g_test_run();
	g_rmdir(home);
	return rc;
}
