/* SPDX-License-Identifier: MIT */
/* Fuzz target: loco-lincheck's history readers (the loco JSONL format the
 * recorder writes, Jepsen logs and EDN op maps) and the checker on what
 * they accept. Input: byte 0 picks the format, byte 1 the model, the rest
 * is the file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lincheck/lincheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum lc_format fmts[] = { LC_FMT_AUTO, LC_FMT_JSONL,
					       LC_FMT_JEPSEN };
	size_t nmodels = 0;
	while (lc_models[nmodels])
		nmodels++;
	if (size < 2 || !nmodels)
		return 0;
	enum lc_format fmt = fmts[data[0] % 3];
	const struct lc_model *m = lc_models[data[1] % nmodels];
	struct lc_history h;
	struct lc_diag d = { 0 };
	memset(&h, 0, sizeof(h));
	if (lc_history_parse("fuzz", (const char *)data + 2, size - 2, fmt, m,
			     &h, &d) != 0) {
		if (!d.msg[0])
			abort();       /* every refusal says why */
		return 0;
	}
	/* Bounded: a search may be exponential in a hostile history. */
	struct lc_check_opts o = { .deadline_ns = lc_now_ns() + 20000000,
				   .max_bytes = 16u << 20 };
	struct lc_result r;
	if (lc_check(&h, &o, &r) >= 0)
		lc_result_fini(&r);
	lc_history_fini(&h);
	return 0;
}
