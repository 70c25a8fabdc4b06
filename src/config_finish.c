/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * config_finish.c - config_finish(): the config file, the environment
 * and the defaults applied over the -o options and the URL, in the
 * order of config.h's precedence, and the whole checked.  It stands on
 * the other pieces (config_internal.h); none of them calls it.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_internal.h"
#include "cred_chain.h"
#include "credentials.h"
#include "error.h"
#include "log.h"

#define DEFAULT_REGION "us-east-1"

/*
 * No region given: the instance's, as the AWS SDKs take it, else the
 * default.  A host without IMDS costs at most its 1 s timeouts.
 */
static gboolean region_from_imds(struct config *cfg)
{
	g_autoptr(GError) ierr = NULL;
	g_autofree char *region = cred_chain_imds_region(&ierr);

	if (region && config_region_valid(region)) {
		cfg->region = g_steal_pointer(&region);
		cfg->region_source = g_strdup("EC2 instance metadata (IMDS)");
		return TRUE;
	}
	cfg->region = g_strdup(DEFAULT_REGION);
	if (!ierr || ierr->code == ENOENT)
		cfg->region_source = g_strdup("default");
	else
		cfg->region_source = g_strdup_printf(
			"default; no region from %s", ierr->message);
	return TRUE;
}

/*
 * Whether the instance metadata may know the region worth signing for:
 * unless every endpoint given (-o, the config file, the environment) is
 * another store than AWS's, or the metadata service was named.  An
 * on-premises mount must not wait on 169.254.169.254 at every start.
 */
static gboolean region_wants_imds(const struct config *cfg)
{
	guint i;

	if (config_env_get("AWS_EC2_METADATA_SERVICE_ENDPOINT") ||
	    cfg->endpoints->len == 0)
		return TRUE;
	for (i = 0; i < cfg->endpoints->len; i++)
		if (config_endpoint_is_aws(
			    g_ptr_array_index(cfg->endpoints, i)))
			return TRUE;
	return FALSE;
}

static gboolean finish_region(struct config *cfg, GError **error)
{
	static const char *const vars[] = { "AWS_REGION",
					    "AWS_DEFAULT_REGION" };
	g_autofree char *from_profile = NULL;
	const char *value;
	gsize i;

	if (cfg->region)
		return TRUE;
	for (i = 0; i < G_N_ELEMENTS(vars); i++) {
		value = config_env_get(vars[i]);
		if (!value)
			continue;
		if (!config_region_valid(value)) {
			g_autofree char *v = log_escape(value, -1);

			g_set_error(error, BFS_ERROR, EINVAL,
				    "%s: '%s' is not a region name", vars[i],
				    v);
			return FALSE;
		}
		cfg->region = g_strdup(value);
		cfg->region_source = g_strdup(vars[i]);
		return TRUE;
	}

	from_profile = credentials_profile_region(cfg->profile, error);
	if (!from_profile && error && *error) {
		g_prefix_error(error, "the region of the AWS profile: ");
		return FALSE;
	}
	/* Not AWS: IMDS would only cost time (up to a second a step). */
	if (!from_profile && !region_wants_imds(cfg)) {
		cfg->region = g_strdup(DEFAULT_REGION);
		cfg->region_source = g_strdup("default");
		return TRUE;
	}
	if (!from_profile)
		return region_from_imds(cfg);
	value = cfg->profile ? cfg->profile : config_env_get("AWS_PROFILE");
	if (!config_region_valid(from_profile)) {
		g_autofree char *v = log_escape(from_profile, -1);

		g_set_error(error, BFS_ERROR, EINVAL,
			    "region of profile '%s' in the AWS config file: "
			    "'%s' is not a region name",
			    value ? value : "default", v);
		return FALSE;
	}
	cfg->region = g_steal_pointer(&from_profile);
	cfg->region_source =
		g_strdup_printf("profile '%s' in the AWS config file",
				value ? value : "default");
	return TRUE;
}

static gboolean endpoints_from_list(struct config *cfg, const char *var,
				    const char *list, GError **error)
{
	g_auto(GStrv) items = g_strsplit(list, ",", -1);
	guint i;

	for (i = 0; items[i]; i++) {
		char *url;

		g_strstrip(items[i]);
		if (!*items[i])
			continue;
		if (!config_endpoint_parse(items[i], &url, error)) {
			g_prefix_error(error, "%s: ", var);
			return FALSE;
		}
		config_endpoints_add(cfg->endpoints, url);
	}
	return TRUE;
}

/*
 * The endpoints given: -o endpoint, the config file, else the first of the
 * environment's variables that names any.  None given: the region's AWS
 * endpoint, once the region is known (finish_default_endpoint).
 */
static gboolean finish_endpoints(struct config *cfg, GError **error)
{
	static const char *const vars[] = {
		"S3_ENDPOINT_URIS",
		"AWS_ENDPOINT_URL_S3",
		"AWS_ENDPOINT_URL",
	};
	gsize i;

	if (cfg->endpoints->len > 0) {
		if (cfg->endpoint_source)
			return TRUE; /* from the config file */
		cfg->endpoints_from_options = TRUE;
		cfg->endpoint_source = g_strdup("-o endpoint");
		return TRUE;
	}
	for (i = 0; i < G_N_ELEMENTS(vars); i++) {
		const char *value = config_env_get(vars[i]);

		if (!value)
			continue;
		if (!endpoints_from_list(cfg, vars[i], value, error))
			return FALSE;
		if (cfg->endpoints->len == 0)
			continue;
		cfg->endpoint_source = g_strdup(vars[i]);
		return TRUE;
	}
	return TRUE;
}

static gboolean finish_default_endpoint(struct config *cfg)
{
	const char *domain;

	if (cfg->endpoints->len > 0)
		return TRUE;
	domain = g_str_has_prefix(cfg->region, "cn-") ? "amazonaws.com.cn"
						      : "amazonaws.com";
	g_ptr_array_add(cfg->endpoints, g_strdup_printf("https://s3.%s.%s",
							cfg->region, domain));
	cfg->endpoint_source =
		g_strdup_printf("default for region %s", cfg->region);
	return TRUE;
}

static gboolean finish_addressing(struct config *cfg, GError **error)
{
	g_autofree char *b = NULL;
	gboolean aws = TRUE;
	guint i;

	if (cfg->addressing == ADDRESSING_PATH)
		return TRUE;
	if (cfg->addressing == ADDRESSING_VIRTUAL) {
		if (config_bucket_dns_compatible(cfg->bucket, TRUE))
			return TRUE;
		b = log_escape(cfg->bucket, -1);
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option 'addressing': 'virtual' needs a bucket "
			    "name that can be part of a host name, and '%s' "
			    "cannot (use addressing=path)",
			    b);
		return FALSE;
	}
	for (i = 0; i < cfg->endpoints->len; i++)
		aws = aws && config_endpoint_is_aws(
				     g_ptr_array_index(cfg->endpoints, i));
	/* Dots break the TLS wildcard match of bucket.s3.amazonaws.com. */
	cfg->addressing =
		aws && config_bucket_dns_compatible(cfg->bucket, FALSE)
			? ADDRESSING_VIRTUAL
			: ADDRESSING_PATH;
	return TRUE;
}

static gboolean any_https(const struct config *cfg)
{
	guint i;

	for (i = 0; i < cfg->endpoints->len; i++) {
		if (g_str_has_prefix(g_ptr_array_index(cfg->endpoints, i),
				     "https://"))
			return TRUE;
	}
	return FALSE;
}

static gboolean ca_file_check(const char *path, const char *what,
			      GError **error)
{
	g_autofree char *p = log_escape(path, -1);
	struct stat st;
	int err = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		err = errno;
	else if (fstat(fd, &st) < 0)
		err = errno;
	else if (S_ISDIR(st.st_mode))
		err = EISDIR;
	if (fd >= 0)
		close(fd);
	if (!err)
		return TRUE;
	g_set_error(error, BFS_ERROR, err, "%s: '%s': %s", what, p,
		    g_strerror(err));
	return FALSE;
}

static gboolean finish_ca_file(struct config *cfg, GError **error)
{
	const char *env = config_env_get("AWS_CA_BUNDLE");

	if (cfg->ca_file)
		return ca_file_check(cfg->ca_file, "option 'ca_file'", error);
	if (!env || !any_https(cfg))
		return TRUE;
	if (!ca_file_check(env, "AWS_CA_BUNDLE", error))
		return FALSE;
	cfg->ca_file = g_strdup(env);
	return TRUE;
}

gboolean config_finish(struct config *cfg, GError **error)
{
	g_return_val_if_fail(cfg != NULL && cfg->endpoints != NULL, FALSE);
	g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

	if (!cfg->bucket) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "no bucket given: expected s3://BUCKET[/PREFIX]");
		return FALSE;
	}
	/* Endpoints first: they say whether IMDS may know the region. */
	return config_file_apply(cfg, error) && finish_endpoints(cfg, error) &&
	       finish_region(cfg, error) && finish_default_endpoint(cfg) &&
	       finish_addressing(cfg, error) && finish_ca_file(cfg, error);
}
