/* SPDX-License-Identifier: MIT */
/* loco-lincheck: checks histories for linearizability against a model. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lincheck.h"

#define LC_TAIL 20	/* prefix ops shown without -v */

enum lc_exit {
	LC_EXIT_OK = 0,
	LC_EXIT_NOT = 1,
	LC_EXIT_UNKNOWN = 2,
};

struct lc_opts {
	const struct lc_model *model;
	enum lc_format fmt;
	double timeout;
	size_t max_mib;
	const char *html;
	bool bench;
	bool verbose;
};

struct lc_totals {
	size_t files;
	size_t ops;
	size_t counts[3];	/* per enum lc_verdict */
	size_t bad;		/* unreadable files */
	double total_ms;
	double max_ms;
};

static void lc_usage(FILE *f)
{
	size_t i;

	fputs("usage: loco-lincheck --model M [--format jsonl|jepsen] [--timeout S]\n"
	      "                     [--max-mem MIB] [--html OUT] [--bench] [-v] FILE...\n"
	      "Checks each history FILE for linearizability against model M and\n"
	      "prints 'FILE: linearizable|not linearizable|unknown (N ops, T ms)'.\n"
	      "  --format   default: sniffed from the first line\n"
	      "  --timeout  seconds per file; past it the verdict is unknown\n"
	      "  --max-mem  MiB for the search (default: half the RAM); past it\n"
	      "             the verdict is unknown\n"
	      "  --html     write a timeline of every history to OUT\n"
	      "  --bench    end with a JSON summary line\n"
	      "  -v         print the whole linearizable prefix of a failure\n"
	      "Exit: 0 all linearizable, 1 some not linearizable, 2 otherwise\n"
	      "(unknown, unreadable input or usage). Models:\n", f);
	for (i = 0; lc_models[i]; i++)
		fprintf(f, "  %-12s %s\n", lc_models[i]->name, lc_models[i]->summary);
}

static int lc_opt_bad(const char *what, const char *arg)
{
	fprintf(stderr, "loco-lincheck: bad %s '%s'\n", what, arg);
	return -EINVAL;
}

/* The options that take a value. */
static int lc_opt_value(int c, const char *arg, struct lc_opts *o)
{
	char *end;

	switch (c) {
	case 'm':
		o->model = lc_model_find(arg);
		return o->model ? 0 : lc_opt_bad("model", arg);
	case 'f':
		return lc_format_parse(arg, &o->fmt) ? lc_opt_bad("format", arg) : 0;
	case 't':
		o->timeout = strtod(arg, &end);
		return *end || !(o->timeout > 0) || !isfinite(o->timeout) ?
		       lc_opt_bad("timeout", arg) : 0;
	case 'M':
		o->max_mib = strtoul(arg, &end, 10);
		return *end || !o->max_mib || *arg == '-' ?
		       lc_opt_bad("memory limit", arg) : 0;
	default:
		o->html = arg;
		return 0;
	}
}

static int lc_opts_parse(int argc, char **argv, struct lc_opts *o)
{
	static const struct option longs[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "format", required_argument, NULL, 'f' },
		{ "timeout", required_argument, NULL, 't' },
		{ "max-mem", required_argument, NULL, 'M' },
		{ "html", required_argument, NULL, 'H' },
		{ "bench", no_argument, NULL, 'b' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, ret = 0;

	while (!ret && (c = getopt_long(argc, argv, "m:f:t:M:H:bvh", longs, NULL)) != -1) {
		if (c == 'h') {
			lc_usage(stdout);
			exit(LC_EXIT_OK);
		}
		if (c == 'b')
			o->bench = true;
		else if (c == 'v')
			o->verbose = true;
		else if (c != '?' && strchr("mftMH", c))
			ret = lc_opt_value(c, optarg, o);
		else
			ret = -EINVAL;
	}
	if (ret || !o->model || optind == argc) {
		lc_usage(stderr);
		return -EINVAL;
	}
	return 0;
}

static void lc_print_op(const struct lc_history *h, size_t i, FILE *f)
{
	const struct lc_op *op = &h->ops[i];

	lc_op_print(h, op, f);
	if (!op->ret_line)
		fprintf(f, "  [line %u, never returned]\n", op->inv_line);
	else if (op->unknown)
		fprintf(f, "  [lines %u-%u, outcome unknown]\n", op->inv_line, op->ret_line);
	else
		fprintf(f, "  [lines %u-%u]\n", op->inv_line, op->ret_line);
}

/* The evidence of a violation, on stderr below the verdict. */
static void lc_print_failure(const struct lc_history *h,
			     const struct lc_result *r, bool verbose)
{
	const struct lc_op *bad = &h->ops[r->fail_op];
	size_t i = 0;

	fprintf(stderr, "%s: longest linearizable prefix: %zu of %zu ops", h->name,
		r->nprefix, r->npart);
	if (h->model->partition && bad->key.kind != LC_NULL) {
		fputs(" on key ", stderr);
		lc_val_print(&bad->key, stderr);
	}
	fputc('\n', stderr);
	if (!verbose && r->nprefix > LC_TAIL) {
		i = r->nprefix - LC_TAIL;
		fprintf(stderr, "    ... %zu earlier ops (-v shows them)\n", i);
	}
	for (; i < r->nprefix; i++) {
		fprintf(stderr, "    %zu. ", i + 1);
		lc_print_op(h, r->prefix[i], stderr);
	}
	fprintf(stderr, "  state after it: %s\n  cannot linearize next: ", r->state);
	lc_print_op(h, r->fail_op, stderr);
}

static void lc_print_result(const char *path, const struct lc_opts *o,
			    const struct lc_history *h,
			    const struct lc_result *r, double ms)
{
	static const char *const words[] = { "linearizable", "not linearizable",
					     "unknown" };

	printf("%s: %s (%zu ops, %.1f ms)\n", path, words[r->verdict], h->nops, ms);
	fflush(stdout);
	if (!h->nops)
		fprintf(stderr, "%s: note: empty history\n", path);
	if (r->limit == LC_LIMIT_TIME)
		fprintf(stderr, "%s: timed out after %g s\n", path, o->timeout);
	if (r->limit == LC_LIMIT_MEMORY)
		fprintf(stderr, "%s: gave up at the memory limit of %zu MiB\n", path,
			o->max_mib);
	if (r->verdict == LC_NOT_LINEARIZABLE)
		lc_print_failure(h, r, o->verbose);
}

static void lc_totals_add(struct lc_totals *t, const struct lc_history *h,
			  const struct lc_result *r, double ms)
{
	t->files++;
	t->ops += h->nops;
	t->counts[r->verdict]++;
	t->total_ms += ms;
	t->max_ms = ms > t->max_ms ? ms : t->max_ms;
}

/* Bad input is counted and reported; only a failing --html write stops. */
static int lc_check_file(const char *path, const struct lc_opts *o,
			 FILE *html, struct lc_totals *tot)
{
	struct lc_check_opts co = { .max_bytes = o->max_mib << 20 };
	int64_t t0 = lc_now_ns();
	struct lc_history h;
	struct lc_result r;
	struct lc_diag d;
	double ms;
	int ret;

	if (o->timeout > 0)
		co.deadline_ns = t0 + (int64_t)(o->timeout * 1e9);
	ret = lc_history_read(path, o->fmt, o->model, &h, &d);
	if (ret) {
		if (d.line)
			fprintf(stderr, "%s:%u: %s\n", path, d.line, d.msg);
		else
			fprintf(stderr, "%s: %s\n", path, d.msg);
		tot->bad++;
		return 0;
	}
	ret = lc_check(&h, &co, &r);
	if (ret) {
		fprintf(stderr, "%s: %s\n", path, strerror(-ret));
		tot->bad++;
		lc_history_fini(&h);
		return 0;
	}
	ms = (double)(lc_now_ns() - t0) / 1e6;
	lc_print_result(path, o, &h, &r, ms);
	lc_totals_add(tot, &h, &r, ms);
	if (html)
		ret = lc_html_write(html, &h, &r);
	lc_result_fini(&r);
	lc_history_fini(&h);
	return ret;
}

static void lc_print_bench(const struct lc_totals *t)
{
	printf("{\"app\":\"lincheck-bench\",\"files\":%zu,\"total_ms\":%.1f,"
	       "\"max_ms\":%.1f,\"ops\":%zu,\"linearizable\":%zu,"
	       "\"not_linearizable\":%zu,\"unknown\":%zu,\"bad\":%zu}\n",
	       t->files, t->total_ms, t->max_ms, t->ops, t->counts[LC_LINEARIZABLE],
	       t->counts[LC_NOT_LINEARIZABLE], t->counts[LC_UNKNOWN], t->bad);
}

static int lc_html_open(const char *path, char **tmp, FILE **out)
{
	if (asprintf(tmp, "%s.tmp", path) < 0)
		return -ENOMEM;
	*out = fopen(*tmp, "w");
	if (!*out || lc_html_begin(*out)) {
		fprintf(stderr, "loco-lincheck: %s: %s\n", *tmp, strerror(errno));
		if (*out)
			fclose(*out);
		free(*tmp);
		return -EIO;
	}
	return 0;
}

/* The page appears under its name only once complete. */
static int lc_html_close(const char *path, char *tmp, FILE *f, bool ok)
{
	int ret = ok ? lc_html_end(f) : -EIO;

	if (fclose(f) && !ret)
		ret = -EIO;
	if (!ret && rename(tmp, path))
		ret = -errno;
	if (ret) {
		fprintf(stderr, "loco-lincheck: cannot write %s\n", path);
		remove(tmp);
	}
	free(tmp);
	return ret;
}

static int lc_run(int argc, char **argv, const struct lc_opts *o,
		  struct lc_totals *tot)
{
	FILE *html = NULL;
	char *tmp = NULL;
	int i, ret = 0;

	if (o->html && lc_html_open(o->html, &tmp, &html))
		return -EIO;
	for (i = optind; !ret && i < argc; i++)
		ret = lc_check_file(argv[i], o, html, tot);
	if (html && lc_html_close(o->html, tmp, html, !ret))
		ret = -EIO;
	return ret;
}

/* Half the RAM, so that a hopeless search ends before the OOM killer. */
static size_t lc_default_mib(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || size <= 0)
		return 0;
	return (size_t)pages / 2 / ((1u << 20) / (size_t)size);
}

int main(int argc, char **argv)
{
	struct lc_opts o = { .fmt = LC_FMT_AUTO, .max_mib = lc_default_mib() };
	struct lc_totals tot = { 0 };

	if (lc_opts_parse(argc, argv, &o))
		return LC_EXIT_UNKNOWN;
	if (lc_run(argc, argv, &o, &tot))
		return LC_EXIT_UNKNOWN;
	if (o.bench)
		lc_print_bench(&tot);
	if (tot.counts[LC_NOT_LINEARIZABLE])
		return LC_EXIT_NOT;
	if (tot.counts[LC_UNKNOWN] || tot.bad)
		return LC_EXIT_UNKNOWN;
	return LC_EXIT_OK;
}
