/* SPDX-License-Identifier: MIT */
/*
 * The --html report: one self-contained page (inline CSS and SVG, no
 * scripts), a section per history with a timeline per process: one bar per
 * op from invocation to return, the linearized prefix in green with its
 * order, the op that could not be linearized in red, ops that never
 * returned fading out to the right.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lincheck.h"

#define LC_X0 110	/* left margin for lane names */
#define LC_STEP_MIN 20	/* pixels per event */
#define LC_STEP_MAX 120
#define LC_CHAR 7	/* pixels per character of a label */
#define LC_LANE 30
#define LC_BAR 20
#define LC_TOP 24

struct lc_draw {
	const struct lc_history *h;
	const struct lc_result *r;
	size_t *ops;		/* drawn ops */
	size_t n;
	size_t *x0;		/* per drawn op: rank of its invocation */
	size_t *x1;		/* rank of its return, or SIZE_MAX */
	size_t *room;		/* rank of the next invocation in its lane */
	int *lane;		/* per process, or -1 */
	int nlanes;
	long *order;		/* per history op: position in the prefix + 1 */
	size_t nevents;
	long step;		/* pixels per event */
};

static void lc_html_esc(const char *s, FILE *f)
{
	for (; *s; s++) {
		if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else if (*s == '&')
			fputs("&amp;", f);
		else if (*s == '"')
			fputs("&quot;", f);
		else
			fputc(*s, f);
	}
}

/* The op as text, with its process or not. */
static char *lc_op_text(const struct lc_history *h, const struct lc_op *op,
			bool proc)
{
	char *buf = NULL;
	size_t len;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	if (proc)
		lc_op_print(h, op, f);
	else
		lc_op_print_call(h, op, f);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

int lc_html_begin(FILE *f)
{
	fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n"
	      "<title>loco-lincheck report</title>\n<style>\n"
	      "body{font:14px sans-serif;margin:1em;color:#222}\n"
	      "section{margin-bottom:2em}\n"
	      ".scroll{overflow-x:auto;border:1px solid #ccc}\n"
	      "svg text{font:11px monospace}\n"
	      ".ok{color:#3a8a32}.no{color:#c00}.unk{color:#a60}\n"
	      "code{background:#f4f4f4}\n"
	      "</style></head><body>\n<h1>loco-lincheck report</h1>\n"
	      "<p>Bars run from invocation to return, events evenly spaced in "
	      "time order. <span class=\"ok\">Green</span>: the longest "
	      "linearizable prefix found (number = linearization order); "
	      "<span class=\"no\">red</span>: the op that cannot be linearized "
	      "after it; dashed: never returned. Hover a bar for details.</p>\n", f);
	return ferror(f) ? -EIO : 0;
}

int lc_html_end(FILE *f)
{
	fputs("</body></html>\n", f);
	return ferror(f) ? -EIO : 0;
}

static int lc_rank_cmp(const void *x, const void *y, void *arg)
{
	const int64_t *t = arg;
	size_t a = *(const size_t *)x, b = *(const size_t *)y;

	if (t[a] != t[b])
		return t[a] < t[b] ? -1 : 1;
	return (a % 2 > b % 2) - (a % 2 < b % 2);
}

/* Where labels may run to: the next op in the same lane. */
static int lc_draw_room(struct lc_draw *d, const size_t *ev)
{
	size_t *last = malloc(((size_t)d->nlanes + 1) * sizeof(*last)), i;

	if (!last)
		return -ENOMEM;
	for (i = 0; i < (size_t)d->nlanes; i++)
		last[i] = SIZE_MAX;
	for (i = 0; i < 2 * d->n; i++) {
		size_t op = ev[i] / 2;
		int lane = d->lane[d->h->ops[d->ops[op]].proc];

		if (ev[i] % 2)
			continue;
		if (last[lane] != SIZE_MAX)
			d->room[last[lane]] = i;
		last[lane] = op;
	}
	free(last);
	return 0;
}

/* Event ranks: event 2i is op i's invocation, 2i+1 its return. */
static int lc_draw_ranks(struct lc_draw *d)
{
	int64_t *t = malloc((2 * d->n + 1) * sizeof(*t));
	size_t *ev = malloc((2 * d->n + 1) * sizeof(*ev)), i;
	int ret;

	if (!t || !ev) {
		free(t);
		free(ev);
		return -ENOMEM;
	}
	for (i = 0; i < d->n; i++) {
		t[2 * i] = d->h->ops[d->ops[i]].inv;
		t[2 * i + 1] = d->h->ops[d->ops[i]].ret;
		ev[2 * i] = 2 * i;
		ev[2 * i + 1] = 2 * i + 1;
	}
	qsort_r(ev, 2 * d->n, sizeof(*ev), lc_rank_cmp, t);
	for (i = 0; i < 2 * d->n; i++) {
		size_t op = ev[i] / 2;

		if (ev[i] % 2 == 0)
			d->x0[op] = i;
		else if (t[ev[i]] != LC_T_INF)
			d->x1[op] = i;
		if (t[ev[i]] != LC_T_INF)
			d->nevents = i + 1;
	}
	ret = lc_draw_room(d, ev);
	free(t);
	free(ev);
	return ret;
}

static int lc_proc_cmp(const void *x, const void *y, void *arg)
{
	const char *const *names = arg;

	return strverscmp(names[*(const int *)x], names[*(const int *)y]);
}

/* One lane per process with drawn ops, in natural order of names. */
static int lc_draw_lanes(struct lc_draw *d)
{
	int *procs = malloc((d->h->nprocs + 1) * sizeof(*procs)), p, n = 0;
	size_t i;

	if (!procs)
		return -ENOMEM;
	for (p = 0; p < (int)d->h->nprocs; p++)
		d->lane[p] = -1;
	for (i = 0; i < d->n; i++)
		d->lane[d->h->ops[d->ops[i]].proc] = 0;
	for (p = 0; p < (int)d->h->nprocs; p++)
		if (!d->lane[p])
			procs[n++] = p;
	qsort_r(procs, (size_t)n, sizeof(*procs), lc_proc_cmp, (void *)d->h->procs);
	for (p = 0; p < n; p++)
		d->lane[procs[p]] = p;
	d->nlanes = n;
	free(procs);
	return 0;
}

static void lc_draw_order(struct lc_draw *d)
{
	size_t i;

	for (i = 0; i < d->r->nprefix; i++)
		d->order[d->r->prefix[i]] = (long)i + 1;
}

static int lc_long_cmp(const void *x, const void *y)
{
	long a = *(const long *)x, b = *(const long *)y;

	return (a > b) - (a < b);
}

/* Pixels per event so that the median op's label fits before the next op. */
static int lc_draw_scale(struct lc_draw *d)
{
	long *need = malloc((d->n + 1) * sizeof(*need));
	size_t i;

	if (!need)
		return -ENOMEM;
	for (i = 0; i < d->n; i++) {
		size_t end = d->room[i] == SIZE_MAX ? d->nevents + 2 : d->room[i];
		char *call = lc_op_text(d->h, &d->h->ops[d->ops[i]], false);

		if (!call) {
			free(need);
			return -ENOMEM;
		}
		need[i] = (long)((strlen(call) + 4) * LC_CHAR + 8) /
			  (long)(end > d->x0[i] ? end - d->x0[i] : 1);
		free(call);
	}
	qsort(need, d->n, sizeof(*need), lc_long_cmp);
	d->step = d->n ? need[d->n / 2] : LC_STEP_MIN;
	d->step = d->step < LC_STEP_MIN ? LC_STEP_MIN :
		  d->step > LC_STEP_MAX ? LC_STEP_MAX : d->step;
	free(need);
	return 0;
}

static void lc_draw_fini(struct lc_draw *d)
{
	free(d->ops);
	free(d->x0);
	free(d->x1);
	free(d->room);
	free(d->lane);
	free(d->order);
}

static int lc_draw_init(struct lc_draw *d, const struct lc_history *h,
			const struct lc_result *r)
{
	bool part = r->verdict == LC_NOT_LINEARIZABLE;
	size_t i;

	memset(d, 0, sizeof(*d));
	d->h = h;
	d->r = r;
	d->n = part ? r->npart : h->nops;
	d->ops = malloc((d->n + 1) * sizeof(*d->ops));
	d->x0 = malloc((d->n + 1) * sizeof(*d->x0));
	d->x1 = malloc((d->n + 1) * sizeof(*d->x1));
	d->room = malloc((d->n + 1) * sizeof(*d->room));
	d->order = calloc(h->nops + 1, sizeof(*d->order));
	d->lane = malloc((h->nprocs + 1) * sizeof(*d->lane));
	if (!d->ops || !d->x0 || !d->x1 || !d->room || !d->order || !d->lane)
		return -ENOMEM;
	for (i = 0; i < d->n; i++) {
		d->ops[i] = part ? r->part[i] : i;
		d->x1[i] = SIZE_MAX;
		d->room[i] = SIZE_MAX;
	}
	lc_draw_order(d);
	if (lc_draw_lanes(d) || lc_draw_ranks(d))
		return -ENOMEM;
	return lc_draw_scale(d);
}

static void lc_draw_label(FILE *f, const char *text, long x, long y,
			  long width, long order)
{
	size_t fit = width > 12 ? (size_t)(width - 6) / LC_CHAR : 0;
	char buf[128];

	if (order)
		snprintf(buf, sizeof(buf), "%ld. %s", order, text);
	else
		snprintf(buf, sizeof(buf), "%s", text);
	if (strlen(buf) > fit && fit >= 2)
		strcpy(buf + fit - 2, "..");
	else if (strlen(buf) > fit)
		return;
	fprintf(f, "<text x=\"%ld\" y=\"%ld\">", x + 3, y + 14);
	lc_html_esc(buf, f);
	fputs("</text>\n", f);
}

static int lc_draw_op(FILE *f, const struct lc_draw *d, size_t i, long right)
{
	const struct lc_op *op = &d->h->ops[d->ops[i]];
	static const char *const look[] = {
		"fill=\"#ddd\" stroke=\"#888\"",
		"fill=\"#bde5b8\" stroke=\"#3a8a32\"",
		"fill=\"#f4a6a6\" stroke=\"#c00\" stroke-width=\"3\"",
	};
	int cls = d->ops[i] == d->r->fail_op &&
		  d->r->verdict == LC_NOT_LINEARIZABLE ? 2 : d->order[d->ops[i]] ? 1 : 0;
	long x = LC_X0 + (long)d->x0[i] * d->step;
	long x1 = d->x1[i] == SIZE_MAX ? right :
		  LC_X0 + (long)d->x1[i] * d->step + d->step / 2;
	long y = LC_TOP + d->lane[op->proc] * LC_LANE, room;
	char *text = lc_op_text(d->h, op, true);
	char *call = lc_op_text(d->h, op, false);

	if (!text || !call) {
		free(text);
		free(call);
		return -ENOMEM;
	}
	fputs("<g><title>", f);
	lc_html_esc(text, f);
	fprintf(f, " (line %u", op->inv_line);
	if (op->ret_line)
		fprintf(f, "-%u", op->ret_line);
	fprintf(f, ")</title><rect %s%s x=\"%ld\" y=\"%ld\" width=\"%ld\" "
		"height=\"%d\" rx=\"3\"/>\n", look[cls],
		op->unknown ? " stroke-dasharray=\"4 3\" fill-opacity=\".5\"" : "",
		x, y, x1 - x, LC_BAR);
	room = d->room[i] == SIZE_MAX ? right : LC_X0 + (long)d->room[i] * d->step;
	lc_draw_label(f, call, x, y, (room > x1 ? room : x1) - x, d->order[d->ops[i]]);
	fputs("</g>\n", f);
	free(text);
	free(call);
	return 0;
}

static int lc_draw_svg(FILE *f, const struct lc_draw *d)
{
	long right = LC_X0 + (long)(d->nevents + 2) * d->step;
	long height = LC_TOP + d->nlanes * LC_LANE + 10;
	size_t i;
	int p, ret = 0;

	fprintf(f, "<div class=\"scroll\"><svg "
		"width=\"%ld\" height=\"%ld\">\n", right + 10, height);
	fprintf(f, "<text x=\"4\" y=\"14\">process</text>\n");
	for (p = 0; p < (int)d->h->nprocs; p++) {
		if (d->lane[p] < 0)
			continue;
		fprintf(f, "<line x1=\"0\" x2=\"%ld\" y1=\"%d\" y2=\"%d\" stroke=\"#eee\"/>"
			"<text x=\"4\" y=\"%d\">", right,
			LC_TOP + d->lane[p] * LC_LANE + LC_BAR / 2,
			LC_TOP + d->lane[p] * LC_LANE + LC_BAR / 2,
			LC_TOP + d->lane[p] * LC_LANE + 14);
		lc_html_esc(d->h->procs[p], f);
		fputs("</text>\n", f);
	}
	for (i = 0; !ret && i < d->n; i++)
		ret = lc_draw_op(f, d, i, right);
	fputs("</svg></div>\n", f);
	return ret;
}

static void lc_html_summary(FILE *f, const struct lc_history *h,
			    const struct lc_result *r)
{
	static const char *const cls[] = { "ok", "no", "unk" };
	static const char *const words[] = { "linearizable", "not linearizable",
					     "unknown (timed out)" };
	char *fail;

	fputs("<section><h2>", f);
	lc_html_esc(h->name, f);
	fprintf(f, ": <span class=\"%s\">%s</span> (%zu ops)</h2>\n",
		cls[r->verdict], words[r->verdict], h->nops);
	if (r->verdict != LC_NOT_LINEARIZABLE)
		return;
	fail = lc_op_text(h, &h->ops[r->fail_op], true);
	fprintf(f, "<p>Showing the %zu ops of the failing partition", r->npart);
	if (h->ops[r->fail_op].key.kind != LC_NULL && h->model->partition)
		fputs(" (one key)", f);
	fprintf(f, ". Longest linearizable prefix: %zu ops; state after it: <code>",
		r->nprefix);
	lc_html_esc(r->state, f);
	fputs("</code>; cannot linearize next: <code>", f);
	lc_html_esc(fail ? fail : "?", f);
	fprintf(f, "</code> (line %u).</p>\n", h->ops[r->fail_op].inv_line);
	free(fail);
}

int lc_html_write(FILE *f, const struct lc_history *h,
		  const struct lc_result *r)
{
	struct lc_draw d;
	int ret;

	ret = lc_draw_init(&d, h, r);
	if (!ret) {
		lc_html_summary(f, h, r);
		ret = lc_draw_svg(f, &d);
		fputs("</section>\n", f);
	}
	lc_draw_fini(&d);
	if (!ret && ferror(f))
		ret = -EIO;
	return ret;
}
