/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * config_describe.c - config_describe(): the human summary of a struct
 * config for --verbose and bucketfs-doctor.
 */
#include "config.h"
#include "config_internal.h"
#include "log.h"

static const char *addressing_name(enum addressing a)
{
	switch (a) {
	case ADDRESSING_PATH:
		return "path";
	case ADDRESSING_VIRTUAL:
		return "virtual";
	case ADDRESSING_AUTO:
		break;
	}
	return "auto";
}

static void describe_seconds(GString *s, const char *label, double v)
{
	if (v == 0)
		g_string_append_printf(s, "%-17s none\n", label);
	else
		g_string_append_printf(s, "%-17s %g s\n", label, v);
}

static void describe_endpoints(GString *s, const struct config *cfg)
{
	guint i;

	if (cfg->endpoints->len == 0) {
		g_string_append_printf(s, "%-17s (not resolved yet)\n",
				       "endpoints:");
		return;
	}
	for (i = 0; i < cfg->endpoints->len; i++) {
		g_autofree char *e =
			log_escape(g_ptr_array_index(cfg->endpoints, i), -1);

		g_string_append_printf(s, "%-17s %s", i ? "" : "endpoints:", e);
		if (i == 0 && cfg->endpoint_source)
			g_string_append_printf(s, " (%s)",
					       cfg->endpoint_source);
		g_string_append_c(s, '\n');
	}
}

static void describe_credentials(GString *s, const struct config *cfg)
{
	const char *env = config_env_get("AWS_PROFILE");
	g_autofree char *p = NULL;

	if (cfg->anonymous) {
		g_string_append_printf(s, "%-17s anonymous (unsigned)\n",
				       "credentials:");
		return;
	}
	if (cfg->profile) {
		p = log_escape(cfg->profile, -1);
		g_string_append_printf(s, "%-17s profile '%s' (-o profile)\n",
				       "credentials:", p);
		return;
	}
	p = log_escape(env ? env : "default", -1);
	g_string_append_printf(s,
			       "%-17s the AWS chain: environment, web "
			       "identity, profile '%s'%s, container, IMDS\n",
			       "credentials:", p, env ? " (AWS_PROFILE)" : "");
}

/* Only when a file was read: tools' output stays as it was without. */
static void describe_files(GString *s, const struct config *cfg)
{
	guint i;

	for (i = 0; cfg->files_read && i < cfg->files_read->len; i++) {
		g_autofree char *p =
			log_escape(g_ptr_array_index(cfg->files_read, i), -1);

		g_string_append_printf(s, "%-17s %s\n",
				       i ? "" : "config file:", p);
	}
}

char *config_describe(const struct config *cfg)
{
	GString *s = g_string_new(NULL);
	g_autofree char *bucket =
		log_escape(cfg->bucket ? cfg->bucket : "?", -1);
	g_autofree char *prefix =
		log_escape(cfg->prefix ? cfg->prefix : "", -1);
	g_autofree char *ca =
		cfg->ca_file ? log_escape(cfg->ca_file, -1) : NULL;
	g_autofree char *index =
		cfg->index_path ? log_escape(cfg->index_path, -1) : NULL;

	g_string_append_printf(s, "%-17s s3://%s/%s\n", "bucket:", bucket,
			       prefix);
	describe_endpoints(s, cfg);
	if (cfg->region)
		g_string_append_printf(
			s, "%-17s %s (%s)\n", "region:", cfg->region,
			cfg->region_source ? cfg->region_source : "?");
	else
		g_string_append_printf(s, "%-17s (not resolved yet)\n",
				       "region:");
	g_string_append_printf(s, "%-17s %s\n",
			       "addressing:", addressing_name(cfg->addressing));
	describe_credentials(s, cfg);
	g_string_append_printf(s, "%-17s %s\n",
			       "ca_file:", ca ? ca : "system default");
	g_string_append_printf(s, "%-17s %s\n",
			       "index:", index ? index : "default location");
	describe_seconds(s, "connect_timeout:", cfg->connect_timeout);
	describe_seconds(s, "stall_timeout:", cfg->stall_timeout);
	describe_seconds(s, "request_timeout:", cfg->request_timeout);
	g_string_append_printf(s, "%-17s %u\n",
			       "max_attempts:", cfg->max_attempts);
	describe_seconds(s, "retry_deadline:", cfg->retry_deadline);
	if (cfg->max_connections)
		g_string_append_printf(s, "%-17s %u\n", "max_connections:",
				       cfg->max_connections);
	else
		g_string_append_printf(
			s,
			"%-17s half the descriptor limit, at most %d "
			"(default)\n",
			"max_connections:", CONFIG_MOUNT_MAX_CONNECTIONS);
	if (cfg->event_threads)
		g_string_append_printf(s, "%-17s %u\n",
				       "event_threads:", cfg->event_threads);
	if (cfg->receive_curl)
		g_string_append_printf(s, "%-17s curl\n", "http_receive:");
	g_string_append_printf(s, "%-17s %s\n", "writes:",
			       cfg->read_only
				       ? "none (-o ro)"
				       : "new names only; the index's objects "
					 "read-only");
	describe_files(s, cfg);
	return g_string_free(s, FALSE);
}
