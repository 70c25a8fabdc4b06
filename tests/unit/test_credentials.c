/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <string.h>

#include <glib/gstdio.h>

#include "credentials.h"
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
		"profile 'dev' in %s: aws_access_key_id is missing (only "
		"static keys are supported, not role_arn, sso_* or "
		"credential_process)",
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

/* The reload on ExpiredToken: new keys from the rewritten file, a clear
 * EACCES when nothing was renewed, and no secret in any message. */
static void test_reload(struct fixture *f, gconstpointer data)
{
	g_autofree char *source = NULL;
	g_autofree char *want = NULL;
	g_autoptr(GError) error = NULL;
	struct credentials *old, *fresh;

	(void)data;
	write_file(f->cred_path, "[default]\naws_access_key_id = ASIAOLD\n"
				 "aws_secret_access_key = s3cr3tOLD\n"
				 "aws_session_token = t0k3nOLD\n");
	old = load_ok(NULL);

	/* Nothing renewed yet. */
	fresh = credentials_reload(old, NULL, FALSE, &error);
	g_assert_null(fresh);
	g_assert_error(error, BFS_ERROR, EACCES);
	source = g_strdup_printf("profile 'default' in %s", f->cred_path);
	want = g_strdup_printf(
		"the credentials from %s expired and it still holds the same "
		"ones: renew them there (new aws_access_key_id, "
		"aws_secret_access_key and aws_session_token); bucketfs reads "
		"it again at the next ExpiredToken",
		source);
	g_assert_cmpstr(error->message, ==, want);
	g_clear_error(&error);

	/* Only the token renewed is enough. */
	write_file(f->cred_path, "[default]\naws_access_key_id = ASIAOLD\n"
				 "aws_secret_access_key = s3cr3tOLD\n"
				 "aws_session_token = t0k3nNEW\n");
	fresh = credentials_reload(old, NULL, FALSE, &error);
	g_assert_no_error(error);
	g_assert_cmpstr(fresh->session_token, ==, "t0k3nNEW");
	g_assert_false(credentials_equal(old, fresh));
	credentials_free(fresh);

	/* All three renewed. */
	write_file(f->cred_path, "[default]\naws_access_key_id = ASIANEW\n"
				 "aws_secret_access_key = s3cr3tNEW\n"
				 "aws_session_token = t0k3nNEW2\n");
	fresh = credentials_reload(old, NULL, FALSE, &error);
	g_assert_no_error(error);
	g_assert_cmpstr(fresh->access_key_id, ==, "ASIANEW");
	g_assert_cmpstr(fresh->secret_access_key, ==, "s3cr3tNEW");
	g_assert_cmpstr(fresh->source, ==, source);
	g_assert_true(credentials_equal(fresh, fresh));
	credentials_free(fresh);

	/* A file broken while being rewritten: the load's own error. */
	write_file(f->cred_path, "[default]\naws_access_key_id = ASIANEW\n");
	fresh = credentials_reload(old, NULL, FALSE, &error);
	g_assert_null(fresh);
	g_assert_error(error, BFS_ERROR, EINVAL);
	g_assert_true(g_str_has_prefix(error->message,
				       "reading the credentials again: "));
	g_assert_null(strstr(error->message, "s3cr3t"));
	g_assert_null(strstr(error->message, "t0k3n"));
	g_clear_error(&error);
	credentials_free(old);

	/* The environment cannot change under a running process. */
	g_setenv("AWS_ACCESS_KEY_ID", "ASIAENV", TRUE);
	g_setenv("AWS_SECRET_ACCESS_KEY", "s3cr3tENV", TRUE);
	g_setenv("AWS_SESSION_TOKEN", "t0k3nENV", TRUE);
	old = load_ok(NULL);
	fresh = credentials_reload(old, NULL, FALSE, &error);
	g_assert_null(fresh);
	g_assert_error(error, BFS_ERROR, EACCES);
	g_assert_nonnull(strstr(error->message, "cannot see a changed "
						"environment"));
	g_assert_null(strstr(error->message, "s3cr3t"));
	g_assert_null(strstr(error->message, "t0k3n"));
	g_clear_error(&error);
	credentials_free(old);

	/* Anonymous: nothing to renew. */
	old = credentials_load(NULL, TRUE, &error);
	g_assert_no_error(error);
	fresh = credentials_reload(old, NULL, TRUE, &error);
	g_assert_null(fresh);
	g_assert_error(error, BFS_ERROR, EACCES);
	credentials_free(old);
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

	return g_test_run();
}
