/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_http_date - HTTP dates: IMF-fixdate by the fixed-format parser,
 * which agrees with curl_getdate() on every second it is given, and the
 * obsolete formats and garbage through curl_getdate().
 */
#include <curl/curl.h>
#include <time.h>

#include "http_date.h"

static const char *const wday[] = { "Sun", "Mon", "Tue", "Wed",
				    "Thu", "Fri", "Sat" };
static const char *const mon[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
				   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

static char *fixdate(time_t t)
{
	struct tm tm;

	gmtime_r(&t, &tm);
	return g_strdup_printf("%s, %02d %s %04d %02d:%02d:%02d GMT",
			       wday[tm.tm_wday], tm.tm_mday, mon[tm.tm_mon],
			       tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
			       tm.tm_sec);
}

static void test_known(void)
{
	g_assert_cmpint(http_date_parse("Sun, 06 Nov 1994 08:49:37 GMT"), ==,
			784111777);
	g_assert_cmpint(http_date_parse("Thu, 29 Feb 2024 12:00:00 GMT"), ==,
			1709208000);
	g_assert_cmpint(http_date_parse("Thu, 01 Jan 1970 00:00:00 GMT"), ==,
			0);
	g_assert_cmpint(http_date_parse("Thu, 31 Dec 2099 23:59:59 GMT"), ==,
			4102444799);
}

/* Every day from 1970 to 2150 at a random second, and month ends. */
static void test_agrees_with_curl(void)
{
	GRand *r = g_rand_new_with_seed(25);
	gint64 day;

	for (day = 0; day < 66000; day++) {
		time_t t =
			(time_t)(day * 86400 + g_rand_int_range(r, 0, 86400));
		g_autofree char *s = fixdate(t);

		g_assert_cmpint(http_date_parse(s), ==, (gint64)t);
		g_assert_cmpint(http_date_parse(s), ==,
				(gint64)curl_getdate(s, NULL));
	}
	g_rand_free(r);
}

static void test_obsolete_formats(void)
{
	/* RFC 850 and asctime, which a recipient must accept (curl's). */
	g_assert_cmpint(http_date_parse("Sunday, 06-Nov-94 08:49:37 GMT"), ==,
			784111777);
	g_assert_cmpint(http_date_parse("Sun Nov  6 08:49:37 1994"), ==,
			784111777);
	/* Not fixed-format (one-digit day, a zone other than GMT): curl. */
	g_assert_cmpint(http_date_parse("Sun, 6 Nov 1994 08:49:37 GMT"), ==,
			784111777);
	g_assert_cmpint(http_date_parse("Sun, 06 Nov 1994 09:49:37 +0100"), ==,
			784111777);
}

static void test_garbage(void)
{
	static const char *const other_shape[] = {
		"",
		"yesterday",
		"Sun, 06 Nov 1994 08:49:37 GMX",
		"Sun, 06 Nov 1994 08:49:37 GMT trailing",
	};
	static const char *const bad_fields[] = {
		"Sun, 31 Feb 2021 08:49:37 GMT",
		"Mon, 29 Feb 2021 08:49:37 GMT",
		"Sun, 00 Nov 1994 08:49:37 GMT",
		"Sun, 06 Nox 1994 08:49:37 GMT",
		"Sun, 06 Nov 1994 24:00:00 GMT",
		"Sun, 06 Nov 1994 08:60:37 GMT",
		"Sun, 06 Nov 1994 08:49:61 GMT",
		"Sun, 06 Nov 1994 08:49:3x GMT",
		"Sun, 06 Nov 19x4 08:49:37 GMT",
		"Sun, -6 Nov 1994 08:49:37 GMT",
	};
	guint i;

	for (i = 0; i < G_N_ELEMENTS(other_shape); i++)
		g_assert_cmpint(http_date_parse(other_shape[i]), ==,
				(gint64)curl_getdate(other_shape[i], NULL));
	g_assert_cmpint(http_date_parse(""), ==, -1);
	g_assert_cmpint(http_date_parse("yesterday"), ==, -1);
	for (i = 0; i < G_N_ELEMENTS(bad_fields); i++)
		g_assert_cmpint(http_date_parse(bad_fields[i]), ==, -1);
	/* A leap year's 29 February and a leap second are dates. */
	g_assert_cmpint(http_date_parse("Tue, 29 Feb 2000 00:00:00 GMT"), ==,
			951782400);
	g_assert_cmpint(http_date_parse("Sat, 31 Dec 2016 23:59:60 GMT"), ==,
			1483228800);
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/http_date/known", test_known);
	g_test_add_func("/http_date/agrees_with_curl", test_agrees_with_curl);
	g_test_add_func("/http_date/obsolete_formats", test_obsolete_formats);
	g_test_add_func("/http_date/garbage", test_garbage);
	return g_test_run();
}
