/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <string.h>

#include <glib/gstdio.h>

#include "cred_chain.h"
#include "cred_parse.h"
#include "cred_refresh.h"
#include "credentials.h"
#include "sigv4.h"
#include "error.h"

static const char *const aws_env[] = {
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",	    "AWS_SESSION_TOKEN",
	"AWS_PROFILE",	     "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
};

/* A temporary HOME with the AWS files pointed into it. */
struct fixture {
	char *dir;
	char *cred_path;
	char *conf_path;
};

static void fixture_setup(struct fixture *f, gconstpointer data)
{
	g_autoptr(GError) error = NULL;
	guint i;

	(void)data;
	for (i = 0; i < G_N_ELEMENTS(aws_env); i++)
		g_unsetenv(aws_env[i]);
	f->dir = g_dir_make_tmp("bfs-creds-XXXXXX", &error);
	g_assert_no_error(error);
	f->cred_path = g_build_filename(f->dir, "credentials", NULL);
	f->conf_path = g_build_filename(f->dir, "config", NULL);
	g_setenv("AWS_SHARED_CREDENTIALS_FILE", f->cred_path, TRUE);
	g_setenv("AWS_CONFIG_FILE", f->conf_path, TRUE);
}

static void fixture_teardown(struct fixture *f, gconstpointer data)
{
	(void)data;
	g_unlink(f->cred_path);
	g_rmdir(f->cred_path);
	g_unlink(f->conf_path);
	g_rmdir(f->conf_path);
	g_assert_cmpint(g_rmdir(f->dir), ==, 0);
	g_free(f->cred_path);
	g_free(f->conf_path);
	g_free(f->dir);
}

static void write_file(const char *path, const char *contents)
{
	g_autoptr(GError) error = NULL;

	g_file_set_contents(path, contents, -1, &error);
	g_assert_no_error(error);
}

static struct credentials *load_ok(const char *profile)
{
	g_autoptr(GError) error = NULL;
	struct credentials *creds;

	creds = credentials_load(profile, FALSE, &error);
	g_assert_no_error(error);
	g_assert_nonnull(creds);
	g_assert_false(creds->anonymous);
	return creds;
}

/* Checks the error and that no secret leaked into it. */
static void load_fails(const char *profile, int code, const char *message)
{
	g_autoptr(GError) error = NULL;
	struct credentials *creds;

	creds = credentials_load(profile, FALSE, &error);
	g_assert_null(creds);
	g_assert_error(error, BFS_ERROR, code);
	g_assert_cmpstr(error->message, ==, message);
	g_assert_null(strstr(error->message, "s3cr3t"));
	g_assert_null(strstr(error->message, "t0k3n"));
}

static void test_anonymous(struct fixture *f, gconstpointer data)
{
	g_autoptr(GError) error = NULL;
	struct credentials *creds;

	(void)f;
	(void)data;
	g_setenv("AWS_ACCESS_KEY_ID", "AKIDENV", TRUE);
	g_setenv("AWS_SECRET_ACCESS_KEY", "s3cr3tENV", TRUE);
	creds = credentials_load("dev", TRUE, &error);
	g_assert_no_error(error);
	g_assert_true(creds->anonymous);
	g_assert_null(creds->access_key_id);
	g_assert_null(creds->secret_access_key);
	g_assert_null(creds->session_token);
	g_assert_cmpstr(creds->source, ==, "anonymous");
	credentials_free(creds);
	credentials_free(NULL);
}

static void test_env(struct fixture *f, gconstpointer data)
{
	g_autofree char *source = NULL;
	struct credentials *creds;

	(void)data;
	write_file(f->cred_path, "[default]\naws_access_key_id = AKIDFILE\n"
				 "aws_secret_access_key = s3cr3tFILE\n");
	g_setenv("AWS_ACCESS_KEY_ID", "AKIDENV", TRUE);
	g_setenv("AWS_SECRET_ACCESS_KEY", "s3cr3tENV", TRUE);
	/* AWS_PROFILE does not beat the keys in the environment. */
	g_setenv("AWS_PROFILE", "default", TRUE);
	creds = load_ok(NULL);
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDENV");
	g_assert_cmpstr(creds->secret_access_key, ==, "s3cr3tENV");
	g_assert_null(creds->session_token);
	g_assert_cmpstr(creds->source, ==, "environment (AWS_ACCESS_KEY_ID)");
	credentials_free(creds);

	g_setenv("AWS_SESSION_TOKEN", "t0k3nENV", TRUE);
	creds = load_ok(NULL);
	g_assert_cmpstr(creds->session_token, ==, "t0k3nENV");
	credentials_free(creds);

	/* An empty token is no token. */
	g_setenv("AWS_SESSION_TOKEN", "", TRUE);
	creds = load_ok(NULL);
	g_assert_null(creds->session_token);
	credentials_free(creds);

	/* A profile named explicitly beats the environment. */
	creds = load_ok("default");
	source = g_strdup_printf("profile 'default' in %s", f->cred_path);
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDFILE");
	g_assert_cmpstr(creds->source, ==, source);
	credentials_free(creds);
}

static void test_env_partial(struct fixture *f, gconstpointer data)
{
	(void)f;
	(void)data;
	g_setenv("AWS_ACCESS_KEY_ID", "AKIDENV", TRUE);
	load_fails(NULL, EINVAL,
		   "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is "
		   "not: set both, or unset AWS_ACCESS_KEY_ID to use a "
		   "profile");
	/* Empty counts as unset. */
	g_setenv("AWS_SECRET_ACCESS_KEY", "", TRUE);
	load_fails(NULL, EINVAL,
		   "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is "
		   "not: set both, or unset AWS_ACCESS_KEY_ID to use a "
		   "profile");
	g_unsetenv("AWS_ACCESS_KEY_ID");
	g_setenv("AWS_SECRET_ACCESS_KEY", "s3cr3tENV", TRUE);
	load_fails(NULL, EINVAL,
		   "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is "
		   "not: set both, or unset AWS_SECRET_ACCESS_KEY to use a "
		   "profile");
	g_setenv("AWS_ACCESS_KEY_ID", "AKID", TRUE);
	g_setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t\nX", TRUE);
	load_fails(NULL, EINVAL,
		   "AWS_SECRET_ACCESS_KEY contains a control character");
}

static void test_credentials_file(struct fixture *f, gconstpointer data)
{
	g_autofree char *source = NULL;
	struct credentials *creds;

	(void)data;
	write_file(f->cred_path,
		   "\xef\xbb\xbf# comment\n"
		   "; another comment\r\n"
		   "[other]\n"
		   "aws_access_key_id = AKIDOTHER\n"
		   "aws_secret_access_key = s3cr3tOTHER\n"
		   "\n"
		   "[ dev ]\r\n"
		   "  AWS_Access_Key_ID=AKIDDEV\r\n"
		   "aws_secret_access_key : s3cr3t/with+chars=and:colon\r\n"
		   "aws_session_token =   t0k3n  \t\r\n"
		   "s3 =\n"
		   "    max_concurrent_requests = 20\n"
		   "    aws_access_key_id = NESTED\n"
		   "\n"
		   "    addressing_style = path\n"
		   "region = eu-west-1\n"
		   "[dev2]\n"
		   "aws_access_key_id = AKIDDEV2\n");
	creds = load_ok("dev");
	source = g_strdup_printf("profile 'dev' in %s", f->cred_path);
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDDEV");
	g_assert_cmpstr(creds->secret_access_key, ==,
			"s3cr3t/with+chars=and:colon");
	g_assert_cmpstr(creds->session_token, ==, "t0k3n");
	g_assert_cmpstr(creds->source, ==, source);
	credentials_free(creds);

	/* AWS_PROFILE picks the profile when no keys are in the env. */
	g_setenv("AWS_PROFILE", "other", TRUE);
	creds = load_ok(NULL);
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDOTHER");
	g_assert_null(creds->session_token);
	credentials_free(creds);
}

static void test_config_file(struct fixture *f, gconstpointer data)
{
	g_autofree char *source = NULL;
	struct credentials *creds;

	(void)data;
	write_file(f->conf_path, "[default]\n"
				 "region = us-west-2\n"
				 "aws_access_key_id = AKIDDEFAULT\n"
				 "aws_secret_access_key = s3cr3tDEFAULT\n"
				 "[dev]\n"
				 "aws_access_key_id = AKIDNOTPROFILE\n"
				 "aws_secret_access_key = s3cr3tNOTPROFILE\n"
				 "[profile   dev]\n"
				 "aws_access_key_id = AKIDDEV\n"
				 "aws_secret_access_key = s3cr3tDEV\n");
	creds = load_ok("dev");
	source = g_strdup_printf("profile 'dev' in %s", f->conf_path);
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDDEV");
	g_assert_cmpstr(creds->source, ==, source);
	credentials_free(creds);

	creds = load_ok(NULL);
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDDEFAULT");
	credentials_free(creds);

	/* The credentials file wins over the config file. */
	write_file(f->cred_path, "[dev]\naws_access_key_id = AKIDCRED\n"
				 "aws_secret_access_key = s3cr3tCRED\n");
	creds = load_ok("dev");
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDCRED");
	credentials_free(creds);

	/* [profile default] is the default profile too. */
	write_file(f->conf_path, "[profile default]\n"
				 "aws_access_key_id = AKIDPD\n"
				 "aws_secret_access_key = s3cr3tPD\n");
	g_unlink(f->cred_path);
	creds = load_ok(NULL);
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDPD");
	credentials_free(creds);
}

static void test_default_paths(struct fixture *f, gconstpointer data)
{
	g_autofree char *aws_dir = g_build_filename(f->dir, ".aws", NULL);
	g_autofree char *path = g_build_filename(aws_dir, "credentials", NULL);
	g_autofree char *old_home = g_strdup(g_getenv("HOME"));
	g_autofree char *source = NULL;
	struct credentials *creds;

	(void)data;
	g_assert_cmpint(g_mkdir(aws_dir, 0700), ==, 0);
	write_file(path, "[default]\naws_access_key_id = AKIDHOME\n"
			 "aws_secret_access_key = s3cr3tHOME\n");
	g_setenv("HOME", f->dir, TRUE);
	g_unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	g_unsetenv("AWS_CONFIG_FILE");
	creds = load_ok(NULL);
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDHOME");
	credentials_free(creds);

	/* ~/ in the variables is expanded as the AWS CLI does. */
	g_setenv("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials", TRUE);
	creds = load_ok(NULL);
	source = g_strdup_printf("profile 'default' in %s", path);
	g_assert_cmpstr(creds->source, ==, source);
	credentials_free(creds);

	if (old_home)
		g_setenv("HOME", old_home, TRUE);
	g_unlink(path);
	g_rmdir(aws_dir);
}

static void test_not_found(struct fixture *f, gconstpointer data)
{
	g_autofree char *msg = NULL;

	(void)data;
	/* No files at all, nothing named. */
	msg = g_strdup_printf(
		"no credentials found: set AWS_ACCESS_KEY_ID and "
		"AWS_SECRET_ACCESS_KEY, or put aws_access_key_id and "
		"aws_secret_access_key in a profile in %s (chosen with -o "
		"profile=NAME or AWS_PROFILE, else 'default'), or use -o "
		"anonymous for a public bucket",
		f->cred_path);
	load_fails(NULL, ENOENT, msg);
	g_free(msg);

	/* A default profile with only a region is not credentials. */
	write_file(f->conf_path, "[default]\nregion = eu-west-1\n");
	msg = g_strdup_printf(
		"no credentials found (profile 'default' in %s has no "
		"aws_access_key_id): set AWS_ACCESS_KEY_ID and "
		"AWS_SECRET_ACCESS_KEY, or put aws_access_key_id and "
		"aws_secret_access_key in a profile in %s (chosen with -o "
		"profile=NAME or AWS_PROFILE, else 'default'), or use -o "
		"anonymous for a public bucket",
		f->conf_path, f->cred_path);
	load_fails(NULL, ENOENT, msg);
	g_free(msg);

	/* A named profile in neither file. */
	write_file(f->cred_path, "[dev]\naws_access_key_id = A\n"
				 "aws_secret_access_key = s3cr3t\n");
	msg = g_strdup_printf("profile 'prod' not found in %s or %s",
			      f->cred_path, f->conf_path);
	load_fails("prod", ENOENT, msg);
	g_setenv("AWS_PROFILE", "prod", TRUE);
	load_fails(NULL, ENOENT, msg);
	g_free(msg);

	/* [prod] in the config file is not [profile prod]. */
	write_file(f->conf_path, "[prod]\naws_access_key_id = A\n"
				 "aws_secret_access_key = s3cr3t\n");
	msg = g_strdup_printf("profile 'prod' not found in %s or %s",
			      f->cred_path, f->conf_path);
	load_fails("prod", ENOENT, msg);
}

static void test_incomplete(struct fixture *f, gconstpointer data)
{
	g_autofree char *msg = NULL;

	(void)data;
	write_file(f->cred_path, "[dev]\naws_access_key_id = AKID\n");
	msg = g_strdup_printf(
		"profile 'dev' in %s: aws_secret_access_key is missing",
		f->cred_path);
	load_fails("dev", EINVAL, msg);
	g_free(msg);

	write_file(f->cred_path, "[dev]\naws_secret_access_key = s3cr3t\n");
	msg = g_strdup_printf(
		"profile 'dev' in %s: aws_access_key_id is missing",
		f->cred_path);
	load_fails("dev", EINVAL, msg);
	g_free(msg);

	write_file(f->cred_path, "[dev]\naws_access_key_id = AKID\n"
				 "aws_secret_access_key =\n");
	msg = g_strdup_printf(
		"profile 'dev' in %s:3: aws_secret_access_key is empty",
		f->cred_path);
	load_fails("dev", EINVAL, msg);
	g_free(msg);

	write_file(f->cred_path, "[dev]\naws_access_key_id = AKID\n"
				 "aws_secret_access_key = s3cr3t\x01X\n");
	msg = g_strdup_printf("profile 'dev' in %s:3: aws_secret_access_key "
			      "contains a control character",
			      f->cred_path);
	load_fails("dev", EINVAL, msg);
	g_free(msg);

	/* A role profile: found, but without static keys. */
	write_file(f->cred_path, "");
	write_file(f->conf_path, "[profile dev]\nrole_arn = arn:aws:x\n");
	msg = g_strdup_printf(
		"profile 'dev' in %s: aws_access_key_id is missing (static "
		"keys are needed here)",
		f->conf_path);
	load_fails("dev", EINVAL, msg);
}

static void assert_parse_error(struct fixture *f, const char *contents,
			       const char *problem)
{
	g_autofree char *msg = NULL;

	write_file(f->cred_path, contents);
	msg = g_strdup_printf("%s:%s", f->cred_path, problem);
	load_fails("dev", EINVAL, msg);
}

static void test_parse_errors(struct fixture *f, gconstpointer data)
{
	(void)data;
	/* The line holding the secret is never quoted. */
	assert_parse_error(f, "[dev]\naws_secret_access_key s3cr3tVALUE\n",
			   "2: expected 'key = value', '[section]' or a "
			   "comment");
	assert_parse_error(f, "aws_secret_access_key = s3cr3tVALUE\n",
			   "1: setting before the first [section] header");
	assert_parse_error(f, "[dev]\n = s3cr3tVALUE\n",
			   "2: setting without a name");
	assert_parse_error(f, "# x\n[dev\n", "2: section header without ']'");
	assert_parse_error(f, "[dev]\n[  ]\n", "2: empty section name");
}

static void test_nul_byte(struct fixture *f, gconstpointer data)
{
	static const char contents[] = "[dev]\nx = a\0b\n";
	g_autoptr(GError) error = NULL;
	g_autofree char *msg = NULL;

	(void)data;
	g_file_set_contents(f->cred_path, contents, sizeof(contents) - 1,
			    &error);
	g_assert_no_error(error);
	msg = g_strdup_printf("%s: contains a NUL byte, not a text file",
			      f->cred_path);
	load_fails("dev", EINVAL, msg);
}

static void test_file_errors(struct fixture *f, gconstpointer data)
{
	g_autofree char *path = NULL;
	g_autofree char *msg = NULL;
	g_autofree char *big = NULL;

	(void)data;
	/* A directory cannot be read (even by root, unlike mode 000). */
	g_assert_cmpint(g_mkdir(f->cred_path, 0700), ==, 0);
	msg = g_strdup_printf("%s: %s", f->cred_path, g_strerror(EISDIR));
	load_fails("dev", EISDIR, msg);
	g_free(msg);
	g_rmdir(f->cred_path);

	/* A path through a regular file. */
	write_file(f->conf_path, "");
	path = g_build_filename(f->conf_path, "credentials", NULL);
	g_setenv("AWS_SHARED_CREDENTIALS_FILE", path, TRUE);
	msg = g_strdup_printf("%s: %s", path, g_strerror(ENOTDIR));
	load_fails("dev", ENOTDIR, msg);
	g_free(msg);
	g_setenv("AWS_SHARED_CREDENTIALS_FILE", f->cred_path, TRUE);

	/* A config file is only read when the credentials file has no
	 * keys, and then its errors count too. */
	write_file(f->cred_path, "[dev]\nregion = x\n");
	g_unlink(f->conf_path);
	g_assert_cmpint(g_mkdir(f->conf_path, 0700), ==, 0);
	msg = g_strdup_printf("%s: %s", f->conf_path, g_strerror(EISDIR));
	load_fails("dev", EISDIR, msg);
	g_free(msg);
	g_rmdir(f->conf_path);

	big = g_malloc(2 * 1024 * 1024 + 1);
	memset(big, '#', 2 * 1024 * 1024);
	big[2 * 1024 * 1024] = '\0';
	write_file(f->cred_path, big);
	msg = g_strdup_printf("%s: larger than 1048576 bytes, not an AWS "
			      "configuration file",
			      f->cred_path);
	load_fails("dev", EFBIG, msg);
}

static void test_large_file_ok(struct fixture *f, gconstpointer data)
{
	GString *s = g_string_new(NULL);
	struct credentials *creds;
	int i;

	(void)data;
	/* Bigger than the first read buffer, smaller than the limit. */
	for (i = 0; i < 2000; i++)
		g_string_append_printf(s, "[p%d]\naws_access_key_id = A%d\n", i,
				       i);
	g_string_append(s, "[dev]\naws_access_key_id = AKIDLAST\n"
			   "aws_secret_access_key = s3cr3tLAST\n");
	write_file(f->cred_path, s->str);
	g_string_free(s, TRUE);
	creds = load_ok("dev");
	g_assert_cmpstr(creds->access_key_id, ==, "AKIDLAST");
	credentials_free(creds);
}

static void test_region(struct fixture *f, gconstpointer data)
{
	g_autoptr(GError) error = NULL;
	char *region;

	(void)data;
	region = credentials_profile_region(NULL, &error);
	g_assert_no_error(error);
	g_assert_null(region);

	write_file(f->conf_path, "[default]\nregion = us-west-2\n"
				 "[profile dev]\nregion=eu-central-1\n"
				 "[profile empty]\nregion =\n"
				 "[profile none]\noutput = json\n");
	region = credentials_profile_region(NULL, &error);
	g_assert_no_error(error);
	g_assert_cmpstr(region, ==, "us-west-2");
	g_free(region);

	region = credentials_profile_region("dev", &error);
	g_assert_no_error(error);
	g_assert_cmpstr(region, ==, "eu-central-1");
	g_free(region);

	g_setenv("AWS_PROFILE", "dev", TRUE);
	region = credentials_profile_region(NULL, &error);
	g_assert_no_error(error);
	g_assert_cmpstr(region, ==, "eu-central-1");
	g_free(region);

	region = credentials_profile_region("empty", &error);
	g_assert_no_error(error);
	g_assert_null(region);
	region = credentials_profile_region("none", &error);
	g_assert_no_error(error);
	g_assert_null(region);
	region = credentials_profile_region("missing", &error);
	g_assert_no_error(error);
	g_assert_null(region);

	write_file(f->conf_path, "[default]\nregion\n");
	region = credentials_profile_region(NULL, &error);
	g_assert_null(region);
	g_assert_error(error, BFS_ERROR, EINVAL);
}

static struct cred_refresh *refresh_ok(const char *profile, gboolean anonymous)
{
	g_autoptr(GError) error = NULL;
	struct cred_chain_options o = { .profile = profile,
					.anonymous = anonymous };
	struct cred_refresh *r = cred_refresh_new(&o, &error);

	g_assert_no_error(error);
	g_assert_nonnull(r);
	return r;
}

static void assert_no_secret(const GError *error)
{
	g_assert_null(strstr(error->message, "s3cr3t"));
	g_assert_null(strstr(error->message, "t0k3n"));
}

/* The renewal on ExpiredToken: new keys from the rewritten file, a clear
 * EACCES when nothing was renewed, and no secret in any message. */
static void test_reload(struct fixture *f, gconstpointer data)
{
	g_autofree char *source = NULL;
	g_autofree char *want = NULL;
	g_autoptr(GError) error = NULL;
	const struct credentials *old, *fresh;
	struct cred_refresh *r;

	(void)data;
	write_file(f->cred_path, "[default]\naws_access_key_id = ASIAOLD\n"
				 "aws_secret_access_key = s3cr3tOLD\n"
				 "aws_session_token = t0k3nOLD\n");
	r = refresh_ok(NULL, FALSE);
	old = cred_refresh_peek(r);

	/* Nothing renewed yet. */
	g_assert_false(cred_refresh_renew(r, old, &error));
	g_assert_error(error, BFS_ERROR, EACCES);
	source = g_strdup_printf("profile 'default' in %s", f->cred_path);
	want = g_strdup_printf(
		"the credentials from %s expired and it still holds the same "
		"ones: renew them there (new aws_access_key_id, "
		"aws_secret_access_key and aws_session_token); bucketfs reads "
		"it again at the next ExpiredToken",
		source);
	g_assert_cmpstr(error->message, ==, want);
	g_assert_true(cred_refresh_peek(r) == old);
	g_clear_error(&error);

	/* Only the token renewed is enough. */
	write_file(f->cred_path, "[default]\naws_access_key_id = ASIAOLD\n"
				 "aws_secret_access_key = s3cr3tOLD\n"
				 "aws_session_token = t0k3nNEW\n");
	g_assert_true(cred_refresh_renew(r, old, &error));
	g_assert_no_error(error);
	fresh = cred_refresh_peek(r);
	g_assert_cmpstr(fresh->session_token, ==, "t0k3nNEW");
	g_assert_false(credentials_equal(old, fresh));
	/* The old ones stay readable: an attempt may still hold them. */
	g_assert_cmpstr(old->session_token, ==, "t0k3nOLD");
	/* Another request already renewed: nothing to do. */
	g_assert_true(cred_refresh_renew(r, old, &error));
	g_assert_true(cred_refresh_peek(r) == fresh);
	old = fresh;

	/* All three renewed. */
	write_file(f->cred_path, "[default]\naws_access_key_id = ASIANEW\n"
				 "aws_secret_access_key = s3cr3tNEW\n"
				 "aws_session_token = t0k3nNEW2\n");
	g_assert_true(cred_refresh_renew(r, old, &error));
	fresh = cred_refresh_peek(r);
	g_assert_cmpstr(fresh->access_key_id, ==, "ASIANEW");
	g_assert_cmpstr(fresh->secret_access_key, ==, "s3cr3tNEW");
	g_assert_cmpstr(fresh->source, ==, source);
	g_assert_cmpstr(fresh->provider, ==, "profile");
	g_assert_cmpuint(cred_refresh_count(r), ==, 2);
	old = fresh;

	/* A file broken while being rewritten: the load's own error. */
	write_file(f->cred_path, "[default]\naws_access_key_id = ASIANEW\n");
	g_assert_false(cred_refresh_renew(r, old, &error));
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_true(g_str_has_prefix(error->message,
				       "reading the credentials again: "));
	assert_no_secret(error);
	g_clear_error(&error);
	g_assert_true(cred_refresh_peek(r) == old);
	cred_refresh_free(r);

	/* The environment cannot change under a running process. */
	g_setenv("AWS_ACCESS_KEY_ID", "ASIAENV", TRUE);
	g_setenv("AWS_SECRET_ACCESS_KEY", "s3cr3tENV", TRUE);
	g_setenv("AWS_SESSION_TOKEN", "t0k3nENV", TRUE);
	r = refresh_ok(NULL, FALSE);
	g_assert_false(cred_refresh_renew(r, cred_refresh_peek(r), &error));
	g_assert_error(error, BFS_ERROR, EACCES);
	g_assert_nonnull(strstr(error->message, "cannot see a changed "
						"environment"));
	assert_no_secret(error);
	g_clear_error(&error);
	cred_refresh_free(r);

	/* Anonymous: nothing to renew. */
	r = refresh_ok(NULL, TRUE);
	g_assert_false(cred_refresh_renew(r, cred_refresh_peek(r), &error));
	g_assert_error(error, BFS_ERROR, EACCES);
	cred_refresh_free(r);
}

/* -- the providers' answers ------------------------------------------- */

#define T2030 G_GINT64_CONSTANT(1893456000)

static void json_fails(const char *json, enum cred_json_kind kind,
		       const char *want)
{
	g_autoptr(GError) error = NULL;
	struct credentials *c;

	c = cred_parse_json(json, strlen(json), kind, "answer", &error);
	g_assert_null(c);
	g_assert_error(error, BFS_ERROR, EPROTO);
	g_assert_cmpstr(error->message, ==, want);
	assert_no_secret(error);
}

static void test_parse_json(void)
{
	g_autoptr(GError) error = NULL;
	struct credentials *c;
	const char *imds = "{\"Code\":\"Success\",\"Type\":\"AWS-HMAC\","
			   "\"AccessKeyId\":\"ASIA1\",\"SecretAccessKey\":"
			   "\"s3cr3tX\",\"Token\":\"t0k3nX\",\"Expiration\":"
			   "\"2030-01-01T00:00:00Z\"}";
	const char *proc = "{\"Version\":1,\"AccessKeyId\":\"AKID\","
			   "\"SecretAccessKey\":\"s3cr3tP\"}";
	gint64 t;

	c = cred_parse_json(imds, strlen(imds), CRED_JSON_IMDS, "IMDS", &error);
	g_assert_no_error(error);
	g_assert_cmpstr(c->access_key_id, ==, "ASIA1");
	g_assert_cmpstr(c->secret_access_key, ==, "s3cr3tX");
	g_assert_cmpstr(c->session_token, ==, "t0k3nX");
	g_assert_cmpint(c->expiration, ==, T2030);
	credentials_free(c);
	/* A process may give static keys: no token, no expiry. */
	c = cred_parse_json(proc, strlen(proc), CRED_JSON_PROCESS, "out",
			    &error);
	g_assert_no_error(error);
	g_assert_null(c->session_token);
	g_assert_cmpint(c->expiration, ==, 0);
	credentials_free(c);

	json_fails("{\"Code\":\"Failed\",\"AccessKeyId\":\"A\"}",
		   CRED_JSON_IMDS, "answer: Code is 'Failed', not 'Success'");
	json_fails("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"s3cr3t\","
		   "\"Expiration\":\"2030-01-01T00:00:00Z\"}",
		   CRED_JSON_CONTAINER, "answer: no Token");
	json_fails("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":7}",
		   CRED_JSON_CONTAINER,
		   "answer: SecretAccessKey is not a string");
	json_fails("{\"AccessKeyId\":\"\",\"SecretAccessKey\":\"s3cr3t\"}",
		   CRED_JSON_CONTAINER, "answer: AccessKeyId is empty");
	json_fails("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"s3cr3t\","
		   "\"Token\":\"t0k3n\",\"Expiration\":\"t0k3n-tomorrow\"}",
		   CRED_JSON_CONTAINER,
		   "answer: Expiration is not an ISO 8601 time");
	json_fails("[\"s3cr3t\"]", CRED_JSON_CONTAINER,
		   "answer: not a JSON object");
	json_fails("{\"Version\":2,\"AccessKeyId\":\"A\"}", CRED_JSON_PROCESS,
		   "answer: Version is not 1 (the only version of "
		   "credential_process output)");
	c = cred_parse_json("{\"s3cr3t", 8, CRED_JSON_IMDS, "answer", &error);
	g_assert_null(c);
	g_assert_true(g_str_has_prefix(error->message, "answer: not JSON ("));
	assert_no_secret(error);

	g_assert_true(cred_parse_time("2030-01-01T00:00:00.250Z", &t));
	g_assert_cmpint(t, ==, T2030);
	g_assert_true(cred_parse_time("2030-01-01T01:00:00+01:00", &t));
	g_assert_cmpint(t, ==, T2030);
	g_assert_false(cred_parse_time("2030-01-01", &t));
	g_assert_false(cred_parse_time("", &t));
}

#define STS_OK                                                                 \
	"<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/"           \
	"2011-06-15/\"><AssumeRoleResult><Credentials>"                        \
	"<AccessKeyId>ASIA2</AccessKeyId>"                                     \
	"<SecretAccessKey>s3cr3tS</SecretAccessKey>"                           \
	"<SessionToken>t0k3nS</SessionToken>"                                  \
	"<Expiration>2030-01-01T00:00:00Z</Expiration></Credentials>"          \
	"<AssumedRoleUser><Arn>arn:aws:sts::1:assumed-role/r/s</Arn>"          \
	"</AssumedRoleUser></AssumeRoleResult></AssumeRoleResponse>"

static void test_parse_sts(void)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *code = NULL;
	g_autofree char *message = NULL;
	const char *no_token =
		"<AssumeRoleResponse><AssumeRoleResult><Credentials>"
		"<AccessKeyId>A</AccessKeyId><SecretAccessKey>s3cr3t"
		"</SecretAccessKey></Credentials></AssumeRoleResult>"
		"</AssumeRoleResponse>";
	const char *err =
		"<ErrorResponse><Error><Type>Sender</Type><Code>"
		"InvalidIdentityToken</Code><Message>No OpenIDConnect "
		"provider found\n</Message></Error><RequestId>1"
		"</RequestId></ErrorResponse>";
	struct credentials *c;

	c = cred_parse_sts(STS_OK, strlen(STS_OK), "AssumeRole", &error);
	g_assert_no_error(error);
	g_assert_cmpstr(c->access_key_id, ==, "ASIA2");
	g_assert_cmpstr(c->secret_access_key, ==, "s3cr3tS");
	g_assert_cmpstr(c->session_token, ==, "t0k3nS");
	g_assert_cmpstr(c->role, ==, "arn:aws:sts::1:assumed-role/r/s");
	g_assert_cmpint(c->expiration, ==, T2030);
	credentials_free(c);

	c = cred_parse_sts(no_token, strlen(no_token), "AssumeRole", &error);
	g_assert_null(c);
	g_assert_cmpstr(error->message, ==,
			"STS AssumeRole response: no Credentials/SessionToken");
	assert_no_secret(error);
	g_clear_error(&error);
	/* The answer to another action is not this one's. */
	c = cred_parse_sts(STS_OK, strlen(STS_OK), "AssumeRoleWithWebIdentity",
			   &error);
	g_assert_null(c);
	g_assert_cmpstr(error->message, ==,
			"STS AssumeRoleWithWebIdentity response: root element "
			"is not AssumeRoleWithWebIdentityResponse");
	g_clear_error(&error);
	c = cred_parse_sts("s3cr3t", 6, "AssumeRole", &error);
	g_assert_null(c);
	g_assert_cmpstr(error->message, ==, "STS AssumeRole response: not XML");
	g_clear_error(&error);

	g_assert_true(cred_parse_sts_error(err, strlen(err), &code, &message));
	g_assert_cmpstr(code, ==, "InvalidIdentityToken");
	g_assert_cmpstr(message, ==, "No OpenIDConnect provider found");
	g_clear_pointer(&code, g_free);
	g_clear_pointer(&message, g_free);
	g_assert_true(cred_parse_sts_error(
		"<Error><Code>Throttling</Code></Error>", 38, &code, &message));
	g_assert_cmpstr(code, ==, "Throttling");
	g_assert_null(message);
	g_clear_pointer(&code, g_free);
	g_assert_false(cred_parse_sts_error("<html/>", 7, &code, &message));
	g_assert_false(cred_parse_sts_error("", 0, &code, &message));
}

/* -- the chain, where it needs no network ------------------------------ */

static const char *const chain_env[] = {
	"AWS_WEB_IDENTITY_TOKEN_FILE",
	"AWS_ROLE_ARN",
	"AWS_ROLE_SESSION_NAME",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
	"AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_ENDPOINT_URL_STS",
	"AWS_EC2_METADATA_SERVICE_ENDPOINT",
};

static void chain_setup(struct fixture *f, gconstpointer data)
{
	guint i;

	fixture_setup(f, data);
	for (i = 0; i < G_N_ELEMENTS(chain_env); i++)
		g_unsetenv(chain_env[i]);
	g_setenv("AWS_EC2_METADATA_DISABLED", "true", TRUE);
}

static void chain_teardown(struct fixture *f, gconstpointer data)
{
	guint i;

	for (i = 0; i < G_N_ELEMENTS(chain_env); i++)
		g_unsetenv(chain_env[i]);
	fixture_teardown(f, data);
}

/* Resolves with @profile; checks the errno and that @part is in the
 * message, and that no secret is. */
static void chain_fails(const char *profile, int code, const char *part)
{
	g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func(g_free);
	g_autoptr(GError) error = NULL;
	struct cred_chain_options o = { .profile = profile };
	struct credentials *c = cred_chain_resolve(&o, trace, &error);

	g_assert_null(c);
	g_assert_nonnull(error);
	if (!strstr(error->message, part))
		g_error("'%s' not in '%s'", part, error->message);
	g_assert_error(error, BFS_ERROR, code);
	assert_no_secret(error);
}

static struct credentials *chain_ok(const char *profile, GPtrArray *trace)
{
	g_autoptr(GError) error = NULL;
	struct cred_chain_options o = { .profile = profile };
	struct credentials *c = cred_chain_resolve(&o, trace, &error);

	g_assert_no_error(error);
	g_assert_nonnull(c);
	return c;
}

static void test_chain_order(struct fixture *f, gconstpointer data)
{
	g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func(g_free);
	struct credentials *c;

	(void)data;
	/* Nothing anywhere: every provider says why. */
	chain_fails(NULL, ENOENT, "no credentials found: ");
	chain_fails(NULL, ENOENT,
		    "[environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
		    "not set; web identity: AWS_WEB_IDENTITY_TOKEN_FILE not "
		    "set; shared files: profile 'default' not found in ");
	chain_fails(NULL, ENOENT,
		    "; container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and "
		    "_FULL_URI not set; IMDS: disabled by "
		    "AWS_EC2_METADATA_DISABLED]");

	/* The environment before web identity and the files. */
	write_file(f->cred_path, "[default]\naws_access_key_id = AKIDFILE\n"
				 "aws_secret_access_key = s3cr3tFILE\n");
	g_setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/token", TRUE);
	g_setenv("AWS_ACCESS_KEY_ID", "AKIDENV", TRUE);
	g_setenv("AWS_SECRET_ACCESS_KEY", "s3cr3tENV", TRUE);
	c = chain_ok(NULL, trace);
	g_assert_cmpstr(c->provider, ==, "environment");
	g_assert_cmpint(c->expiration, ==, 0);
	g_assert_cmpuint(trace->len, ==, 1);
	g_assert_true(g_str_has_prefix(g_ptr_array_index(trace, 0),
				       "environment: answered: "));
	credentials_free(c);

	/* Web identity, configured, fails: no falling through to files. */
	g_unsetenv("AWS_ACCESS_KEY_ID");
	g_unsetenv("AWS_SECRET_ACCESS_KEY");
	chain_fails(NULL, EINVAL,
		    "web identity: AWS_WEB_IDENTITY_TOKEN_FILE is set but "
		    "AWS_ROLE_ARN is not");
	g_setenv("AWS_ROLE_ARN", "arn:aws:iam::1:role/r", TRUE);
	chain_fails(NULL, ENOENT,
		    "web identity (AWS_WEB_IDENTITY_TOKEN_FILE "
		    "/nonexistent/token): web identity token file "
		    "/nonexistent/token: No such file or directory");

	/* Without it, the files; a named profile alone is asked. */
	g_unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
	c = chain_ok(NULL, NULL);
	g_assert_cmpstr(c->provider, ==, "profile");
	g_assert_cmpstr(c->access_key_id, ==, "AKIDFILE");
	credentials_free(c);
	chain_fails("other", ENOENT,
		    "shared files (-o profile=other): profile 'other' not "
		    "found in ");
	g_setenv("AWS_PROFILE", "other", TRUE);
	chain_fails(NULL, ENOENT, "shared files: profile 'other' not found");
}

static void test_chain_profiles(struct fixture *f, gconstpointer data)
{
	struct credentials *c;

	(void)data;
	write_file(f->conf_path,
		   "[profile nosrc]\nrole_arn = arn:aws:iam::1:role/r\n"
		   "[profile badsrc]\nrole_arn = arn:aws:iam::1:role/r\n"
		   "credential_source = Moon\n"
		   "[profile envsrc]\nrole_arn = arn:aws:iam::1:role/r\n"
		   "credential_source = Environment\n"
		   "[profile loop1]\nrole_arn = arn:aws:iam::1:role/r\n"
		   "source_profile = loop2\n"
		   "[profile loop2]\nrole_arn = arn:aws:iam::1:role/r\n"
		   "source_profile = loop1\n"
		   "[profile webonly]\nweb_identity_token_file = /t\n"
		   "[profile sso]\nsso_start_url = https://x\n"
		   "[profile empty]\nregion = eu-west-1\n"
		   "[profile proc]\ncredential_process = /bin/sh -c 'echo "
		   "\"{\\\"Version\\\": 1, \\\"AccessKeyId\\\": \\\"AKIDP\\\", "
		   "\\\"SecretAccessKey\\\": \\\"s3cr3tP\\\"}\"'\n"
		   "[profile procfail]\ncredential_process = /bin/sh -c "
		   "'echo \"it broke\" >&2; exit 4' s3cr3t-arg\n"
		   "[profile procjunk]\ncredential_process = /bin/echo "
		   "s3cr3t\n"
		   "[profile procmissing]\ncredential_process = "
		   "/nonexistent/helper\n");
	chain_fails("nosrc", EINVAL,
		    "profile 'nosrc': role_arn needs source_profile, "
		    "credential_source or web_identity_token_file");
	chain_fails("badsrc", EINVAL,
		    "profile 'badsrc': credential_source 'Moon' is not "
		    "Environment, Ec2InstanceMetadata or EcsContainer");
	chain_fails("envsrc", ENOENT,
		    "credential_source Environment, but AWS_ACCESS_KEY_ID is "
		    "not set");
	chain_fails("loop1", ELOOP, "source_profile links (a loop?)");
	chain_fails("webonly", EINVAL,
		    "profile 'webonly': web_identity_token_file needs "
		    "role_arn");
	chain_fails("sso", EINVAL,
		    "SSO (sso_start_url, sso_session) is not "
		    "supported yet");
	chain_fails("empty", EINVAL, "profile 'empty' in ");
	chain_fails("procfail", EACCES,
		    "credential_process '/bin/sh' of profile 'procfail' exited "
		    "with status 4: it broke");
	chain_fails("procjunk", EPROTO,
		    "credential_process '/bin/echo' of profile 'procjunk': "
		    "output: not JSON");
	chain_fails("procmissing", ENOENT,
		    "credential_process '/nonexistent/helper' of profile "
		    "'procmissing': ");

	c = chain_ok("proc", NULL);
	g_assert_cmpstr(c->provider, ==, "credential-process");
	g_assert_cmpstr(c->access_key_id, ==, "AKIDP");
	g_assert_cmpstr(c->source, ==,
			"credential_process '/bin/sh' of profile 'proc'");
	credentials_free(c);
}

static void test_chain_container(struct fixture *f, gconstpointer data)
{
	(void)f;
	(void)data;
	/* Plain http carries the token only to the host itself. */
	g_setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.1.2.3/creds",
		 TRUE);
	g_setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "t0k3nC", TRUE);
	chain_fails(NULL, EINVAL, "plain http only to a loopback address");
	g_setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "ftp://127.0.0.1/x",
		 TRUE);
	chain_fails(NULL, EINVAL, "is not an http(s) URL");
	/* Nothing listens on port 1 of loopback. */
	g_setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c",
		 TRUE);
	chain_fails(NULL, ECONNREFUSED,
		    "container: GET http://127.0.0.1:1/c: curl 7 ");
	g_setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/nonexistent/t",
		 TRUE);
	chain_fails(NULL, ENOENT,
		    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE /nonexistent/t: "
		    "No such file or directory");
	g_unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	g_setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "t0k3n\r\nX-Evil: 1",
		 TRUE);
	chain_fails(NULL, EINVAL,
		    "AWS_CONTAINER_AUTHORIZATION_TOKEN holds a line break");
	g_unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	/* The IMDS endpoint override; port 1 again. */
	g_unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	g_unsetenv("AWS_EC2_METADATA_DISABLED");
	g_setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1/",
		 TRUE);
	chain_fails(NULL, ENOENT,
		    "IMDS: PUT http://127.0.0.1:1/latest/api/token: curl 7 ");
}

/* The per-thread signing-key cache never signs with an old secret. */
static gpointer sign_fresh(gpointer data)
{
	const struct sigv4_credentials *c = data;
	struct sigv4_request r = {
		.method = "GET",
		.host = "h",
		.path = "/b/k",
		.region = "us-east-1",
		.service = "s3",
		.unix_time = 1700000000,
	};

	return sigv4_sign(c, &r);
}

static char *auth_of(char **headers)
{
	char *a = g_strdup(headers[g_strv_length(headers) - 1]);

	g_strfreev(headers);
	return a;
}

static void test_signing_key_follows_secret(void)
{
	struct sigv4_credentials a = { "AKID", "s3cr3tA", NULL };
	struct sigv4_credentials b = { "AKID", "s3cr3tB", NULL };
	g_autofree char *a1 = auth_of(sign_fresh(&a));
	g_autofree char *b1 = auth_of(sign_fresh(&b));
	g_autofree char *a2 = auth_of(sign_fresh(&a));
	g_autofree char *b_other =
		auth_of(g_thread_join(g_thread_new("fresh", sign_fresh, &b)));

	/* Same thread, secret swapped and back: each its own signature,
	 * equal to what a thread with an empty cache computes. */
	g_assert_cmpstr(a1, !=, b1);
	g_assert_cmpstr(a1, ==, a2);
	g_assert_cmpstr(b1, ==, b_other);
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

#define ADD(name, fn)                                                          \
	g_test_add("/credentials/" name, struct fixture, NULL, fixture_setup,  \
		   fn, fixture_teardown)
	ADD("anonymous", test_anonymous);
	ADD("env", test_env);
	ADD("env-partial", test_env_partial);
	ADD("credentials-file", test_credentials_file);
	ADD("config-file", test_config_file);
	ADD("default-paths", test_default_paths);
	ADD("not-found", test_not_found);
	ADD("incomplete", test_incomplete);
	ADD("parse-errors", test_parse_errors);
	ADD("nul-byte", test_nul_byte);
	ADD("file-errors", test_file_errors);
	ADD("large-file-ok", test_large_file_ok);
	ADD("region", test_region);
	ADD("reload", test_reload);
#undef ADD
#define ADD(name, fn)                                                          \
	g_test_add("/credentials/" name, struct fixture, NULL, chain_setup,    \
		   fn, chain_teardown)
	ADD("chain-order", test_chain_order);
	ADD("chain-profiles", test_chain_profiles);
	ADD("chain-container", test_chain_container);
#undef ADD
	g_test_add_func("/credentials/parse-json", test_parse_json);
	g_test_add_func("/credentials/parse-sts", test_parse_sts);
	g_test_add_func("/credentials/signing-key-follows-secret",
			test_signing_key_follows_secret);

	return g_test_run();
}
