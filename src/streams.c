/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * streams.c - sequential stream detection over positions, with slots
 * replaced least recently used, and a learned batch pattern.
 *
 * A stream covers the positions of its current run that it opened or
 * announced: [first, lin_end), and, once its lookahead crossed a batch
 * end, the predicted start of its next batch [wrap_to, ann).  Coverage is
 * what keeps two streams from announcing one position.
 */
#include <string.h>

#include "streams.h"

#define DEF_SLOTS     128
#define DEF_CONFIRM   3
#define DEF_AHEAD_MIN 4
#define DEF_AHEAD_MAX 32
/* The share of recent opens that must belong to a stream (continue one,
 * or start one that was continued) for anything to be announced: 3/4 of
 * the last WINDOW. */
#define WINDOW	  256
#define SHARE_NUM 3
#define SHARE_DEN 4
/* Batch-end events that must agree before a pattern is used. */
#define EVENTS 3
#define NONE   G_MAXUINT64

struct stream {
	gboolean used;
	guint64 seq;
	guint64 reader;
	guint64 stamp;	   /* last use, for LRU replacement */
	guint64 born;	   /* the open that made it (st.opens) */
	guint64 first;	   /* where the current run (batch) started */
	guint64 last;	   /* last position opened */
	guint run;	   /* opens in a row, across predicted jumps */
	guint ahead;	   /* lookahead wanted; 0 until confirmed */
	guint64 ann;	   /* next position to announce */
	guint64 wrap_from; /* if the lookahead crossed the batch end: where
			    * the run's part ends ... */
	guint64 wrap_to;   /* ... and where the next batch starts; else 0 */
};

struct event {
	guint64 len, jump;
};

struct streams {
	struct streams_options o;
	struct stream *slot;
	guint64 clock;
	/* The last WINDOW opens: whether each continued a stream. */
	guint8 recent[WINDOW]; /* by st.opens % WINDOW */
	guint recent_n, recent_cont;
	struct event ev[EVENTS];
	guint ev_at;
	guint64 pat_len, pat_jump; /* 0 while no pattern */
	struct streams_stats st;
};

struct streams *streams_new(const struct streams_options *opts)
{
	struct streams *s = g_new0(struct streams, 1);

	s->o = *opts;
	if (!s->o.slots)
		s->o.slots = DEF_SLOTS;
	if (!s->o.confirm)
		s->o.confirm = DEF_CONFIRM;
	if (!s->o.ahead_min)
		s->o.ahead_min = DEF_AHEAD_MIN;
	if (!s->o.ahead_max)
		s->o.ahead_max = DEF_AHEAD_MAX;
	s->o.ahead_max = MAX(s->o.ahead_max, s->o.ahead_min);
	s->o.confirm = MAX(s->o.confirm, 2);
	s->slot = g_new0(struct stream, s->o.slots);
	return s;
}

void streams_free(struct streams *s)
{
	if (!s)
		return;
	g_free(s->slot);
	g_free(s);
}

void streams_reset(struct streams *s)
{
	memset(s->slot, 0, sizeof(*s->slot) * s->o.slots);
	memset(s->ev, 0, sizeof(s->ev));
	s->pat_len = s->pat_jump = 0;
	s->recent_n = s->recent_cont = 0;
	memset(s->recent, 0, sizeof(s->recent));
}

/* The end of the run's own positions (opened or announced). */
static guint64 lin_end(const struct stream *t)
{
	if (t->wrap_from)
		return t->wrap_from;
	return MAX(t->ann, t->last + 1);
}

/* The first position at or after @x that a stream other than @self
 * covers; NONE if none does. */
static guint64 covered_from(const struct streams *s, const struct stream *self,
			    guint64 x)
{
	guint64 best = NONE;
	guint i;

	for (i = 0; i < s->o.slots; i++) {
		const struct stream *t = &s->slot[i];

		if (!t->used || t == self || t->seq != self->seq)
			continue;
		if (lin_end(t) > x)
			best = MIN(best, MAX(t->first, x));
		if (t->wrap_from && t->ann > x)
			best = MIN(best, MAX(t->wrap_to, x));
	}
	return best;
}

/* The last position of @t's current batch, NONE without a pattern. */
static guint64 batch_end(const struct streams *s, const struct stream *t)
{
	return s->pat_len ? t->first + s->pat_len - 1 : NONE;
}

/*
 * How well an open of @pos by @reader continues @t: 0 not at all, 1 it
 * lands among @t's announced positions, 2 it is the next one, 3 it is the
 * next one and by @t's own reader.
 */
static int match(const struct streams *s, const struct stream *t, guint64 seq,
		 guint64 pos, guint64 reader)
{
	gboolean next = pos == t->last + 1 ||
			(s->pat_len && t->last == batch_end(s, t) &&
			 pos == t->last + s->pat_jump);

	if (!t->used || t->seq != seq || pos <= t->last)
		return 0;
	if (next)
		return reader && reader == t->reader ? 3 : 2;
	if (pos < lin_end(t) ||
	    (t->wrap_from && pos >= t->wrap_to && pos < t->ann))
		return 1;
	return 0;
}

static struct stream *find(struct streams *s, guint64 seq, guint64 pos,
			   guint64 reader, int *score_out)
{
	struct stream *best = NULL;
	int best_score = 0;
	guint i;

	for (i = 0; i < s->o.slots; i++) {
		struct stream *t = &s->slot[i];
		int score = match(s, t, seq, pos, reader);

		if (score > best_score ||
		    (score && score == best_score && t->stamp > best->stamp)) {
			best = t;
			best_score = score;
		}
	}
	*score_out = best_score;
	return best;
}

/* @reader's most recent stream of @seq, or NULL. */
static struct stream *of_reader(struct streams *s, guint64 seq, guint64 reader)
{
	struct stream *best = NULL;
	guint i;

	for (i = 0; reader && i < s->o.slots; i++) {
		struct stream *t = &s->slot[i];

		if (t->used && t->seq == seq && t->reader == reader &&
		    (!best || t->stamp > best->stamp))
			best = t;
	}
	return best;
}

/*
 * @t's reader left its run for @pos: a batch end, if it jumped forward
 * after a confirmed run.  Three agreeing in a row make the pattern.
 */
static void learn_batch_end(struct streams *s, const struct stream *t,
			    guint64 pos)
{
	struct event e;
	guint i;

	if (t->run < s->o.confirm || pos <= t->last + 1)
		return;
	e.len = t->last - t->first + 1;
	e.jump = pos - t->last;
	s->ev[s->ev_at] = e;
	s->ev_at = (s->ev_at + 1) % EVENTS;
	for (i = 0; i < EVENTS; i++)
		if (s->ev[i].len != e.len || s->ev[i].jump != e.jump)
			return;
	s->pat_len = e.len;
	s->pat_jump = e.jump;
	s->st.batch_len = e.len;
	s->st.batch_jump = e.jump;
}

static struct stream *slot_new(struct streams *s, guint64 seq, guint64 pos)
{
	struct stream *t = &s->slot[0];
	guint i;

	for (i = 0; i < s->o.slots && t->used; i++) {
		struct stream *c = &s->slot[i];

		if (!c->used || c->stamp < t->stamp)
			t = c;
	}
	memset(t, 0, sizeof(*t));
	t->used = TRUE;
	t->seq = seq;
	t->first = t->last = pos;
	t->ann = pos + 1;
	t->run = 1;
	t->born = s->st.opens;
	t->stamp = ++s->clock;
	return t;
}

/* @pos continues @t: the run goes on, through a jump if it made one. */
static void advance(struct streams *s, struct stream *t, guint64 pos)
{
	gboolean jumped = pos != t->last + 1 && pos >= lin_end(t);

	if (jumped) {
		s->st.jumps++;
		if (lin_end(t) > t->last + 1) {
			/* What it announced past its batch stays covered. */
			struct stream *rest;

			t->stamp = ++s->clock;
			rest = slot_new(s, t->seq, t->last + 1);
			rest->last = t->last;
			rest->ann = lin_end(t);
		}
		if (t->wrap_from && pos >= t->wrap_to && pos < t->ann) {
			t->first = t->wrap_to;
		} else {
			t->first = pos;
			t->ann = pos + 1;
		}
		t->wrap_from = t->wrap_to = 0;
	} else if (t->wrap_from && pos >= t->wrap_from) {
		/* Straight on past the predicted end: not a batch after all. */
		t->wrap_from = t->wrap_to = 0;
		t->ann = pos + 1;
	}
	t->last = pos;
	t->ann = MAX(t->ann, pos + 1);
	t->run++;
	if (t->run == s->o.confirm) {
		s->st.confirmed++;
		t->ahead = s->o.ahead_min;
	} else if (t->run > s->o.confirm) {
		t->ahead = MIN(t->ahead * 2, s->o.ahead_max);
	}
}

/* Positions @t announced after its last open. */
static guint64 outstanding(const struct stream *t)
{
	if (!t->wrap_from)
		return t->ann - (t->last + 1);
	return (t->wrap_from - (t->last + 1)) + (t->ann - t->wrap_to);
}

static void emit(struct streams *s, GArray *out, guint64 from, guint64 to)
{
	guint64 p;

	for (p = from; p < to; p++)
		g_array_append_val(out, p);
	s->st.announced += to - from;
}

/* @t's lookahead: its own, within its share of the budget. */
static guint64 wanted(const struct streams *s, const struct stream *t)
{
	guint active = 0, i;

	if (!s->o.budget)
		return t->ahead;
	for (i = 0; i < s->o.slots; i++) {
		const struct stream *c = &s->slot[i];

		active += c->used && c->ahead && c->stamp + WINDOW > s->clock;
	}
	return MIN(t->ahead, MAX(s->o.ahead_min, s->o.budget / MAX(active, 1)));
}

/* Announces ahead of @t's last open, up to its lookahead, within its
 * batch, then into its predicted next batch. */
static void extend(struct streams *s, struct stream *t, GArray *out)
{
	guint64 want = wanted(s, t), have = outstanding(t), limit, end, room;

	if (have >= want)
		return;
	if (!t->wrap_from) {
		end = batch_end(s, t);
		limit = MIN(covered_from(s, t, t->ann),
			    end == NONE ? NONE : end + 1);
		room = limit > t->ann ? MIN(limit - t->ann, want - have) : 0;
		emit(s, out, t->ann, t->ann + room);
		t->ann += room;
		have += room;
		if (have >= want || end == NONE || t->ann != end + 1)
			return;
		/* Across the batch end, to where the reader will resume. */
		t->wrap_from = t->ann;
		t->wrap_to = t->ann = end + s->pat_jump;
	}
	/* The next batch is a prediction: a few of it, until the reader
	 * gets there. */
	end = MIN(t->wrap_to + MIN(s->o.ahead_min, s->pat_len),
		  covered_from(s, t, t->ann));
	room = end > t->ann ? MIN(end - t->ann, want - have) : 0;
	emit(s, out, t->ann, t->ann + room);
	t->ann += room;
}

/* Records whether the open now (st.opens) continued @t; the open that
 * started @t counts as sequential too once @t is continued. */
static void note_recent(struct streams *s, const struct stream *t)
{
	guint at = s->st.opens % WINDOW;

	if (s->recent_n == WINDOW)
		s->recent_cont -= s->recent[at];
	else
		s->recent_n++;
	s->recent[at] = t != NULL;
	s->recent_cont += t != NULL;
	s->st.continued += t != NULL;
	if (t && t->run == 1 && s->st.opens - t->born < WINDOW &&
	    !s->recent[t->born % WINDOW]) {
		s->recent[t->born % WINDOW] = 1;
		s->recent_cont++;
	}
}

/*
 * Another reader landed at @pos among @t's announced positions (@t ran
 * past its batch into another reader's): that reader takes them over
 * from @pos on, and @t keeps the part before.
 */
static struct stream *split(struct streams *s, struct stream *t, guint64 pos)
{
	struct stream *n;

	t->stamp = ++s->clock;
	n = slot_new(s, t->seq, pos);
	if (pos < lin_end(t)) {
		n->ann = lin_end(t);
		if (t->wrap_from)
			t->wrap_from = pos;
		else
			t->ann = pos;
	} else {
		n->ann = t->ann;
		t->ann = pos;
		if (pos == t->wrap_to) {
			t->ann = t->wrap_from;
			t->wrap_from = t->wrap_to = 0;
		}
	}
	return n;
}

guint streams_open(struct streams *s, guint64 seq, guint64 pos, guint64 reader,
		   GArray *out)
{
	int score;
	struct stream *t = find(s, seq, pos, reader, &score);
	guint before = out->len;

	s->st.opens++;
	note_recent(s, t);
	if (t && score == 1 && reader && t->reader && reader != t->reader) {
		t = split(s, t, pos);
	} else if (t) {
		advance(s, t, pos);
	} else {
		struct stream *prev = of_reader(s, seq, reader);

		if (prev)
			learn_batch_end(s, prev, pos);
		t = slot_new(s, seq, pos);
	}
	t->reader = reader;
	t->stamp = ++s->clock;
	if (t->ahead && s->recent_cont * SHARE_DEN >= s->recent_n * SHARE_NUM)
		extend(s, t, out);
	return out->len - before;
}

void streams_get_stats(const struct streams *s, struct streams_stats *out)
{
	guint i;

	*out = s->st;
	out->tracked = 0;
	for (i = 0; i < s->o.slots; i++)
		out->tracked += s->slot[i].used;
}
