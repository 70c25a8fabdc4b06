/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_date.c - HTTP dates: see http_date.h.
 */
#include <curl/curl.h>
#include <string.h>

#include "http_date.h"

/* The length of "Sun, 06 Nov 1994 08:49:37 GMT". */
#define FIXDATE_LEN 29

static const char days[7][4] = {
	"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"
};
static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
				    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

/* The @n decimal digits at @s, or -1 if one is not a digit. */
static int digits(const char *s, int n)
{
	int v = 0;

	while (n--) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s++ - '0');
	}
	return v;
}

static int name_index(const char *s, const char (*names)[4], int count)
{
	int i;

	for (i = 0; i < count; i++)
		if (!memcmp(s, names[i], 3))
			return i;
	return -1;
}

static gboolean is_leap(int y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Days from 1970-01-01 to @y-@m-@d (m 1..12), proleptic Gregorian. */
static gint64 days_from_civil(int y, int m, int d)
{
	gint64 era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/*
 * Whether @s has IMF-fixdate's shape (length, names, punctuation); its
 * fields are judged by parse_fixdate().
 */
static gboolean is_fixdate(const char *s)
{
	return strlen(s) == FIXDATE_LEN && name_index(s, days, 7) >= 0 &&
	       !memcmp(s + 3, ", ", 2) && s[7] == ' ' && s[11] == ' ' &&
	       s[16] == ' ' && s[19] == ':' && s[22] == ':' &&
	       !memcmp(s + 25, " GMT", 4);
}

/* An IMF-fixdate's time; -1 if a field is out of range. */
static gint64 parse_fixdate(const char *s)
{
	static const int mdays[12] = { 31, 28, 31, 30, 31, 30,
				       31, 31, 30, 31, 30, 31 };
	int day, mon, year, h, min, sec;

	day = digits(s + 5, 2);
	mon = name_index(s + 8, months, 12);
	year = digits(s + 12, 4);
	h = digits(s + 17, 2);
	min = digits(s + 20, 2);
	sec = digits(s + 23, 2);
	if (day < 1 || mon < 0 || year < 0 || h < 0 || h > 23 || min < 0 ||
	    min > 59 || sec < 0 || sec > 60)
		return -1;
	if (day > mdays[mon] + (mon == 1 && is_leap(year)))
		return -1;
	/* A leap second reads as the next second's first, as curl has it. */
	return days_from_civil(year, mon + 1, day) * 86400 + h * 3600 +
	       min * 60 + sec;
}

gint64 http_date_parse(const char *s)
{
	if (is_fixdate(s))
		return parse_fixdate(s);
	return (gint64)curl_getdate(s, NULL);
}
