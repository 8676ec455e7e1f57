/* SPDX-License-Identifier: MIT */
/* loco-probe (tests only): `write SEED` fills region "probe.data" on the
 * first memory node with a pattern made from SEED; `check SEED` reads it
 * back and exits 1 unless it is intact; `loop SEED SECS` writes it, then
 * checks it again and again for SECS seconds (a client busy with the
 * memory node while a fault hits it), saying `loco-probe: looping` once
 * its first check passed (the fault is aimed at that line). Node options
 * as every program. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/loco.h>

#define WORDS 512

int main(int argc, char **argv)
{
	struct loco_opts o;
	char err[512];
	if (loco_opts_parse(&o, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, "loco-probe: %s\n", err);
		return 2;
	}
	bool loop = argc == 4 && !strcmp(argv[1], "loop");
	if (!loop && (argc != 3 || (strcmp(argv[1], "write") && strcmp(argv[1], "check")))) {
		fprintf(stderr, "usage: loco-probe write|check SEED | loop SEED SECS "
			"(plus node options)\n");
		return 2;
	}
	uint64_t until = loop ? loco_now_ns() + (uint64_t)(atof(argv[3]) * 1e9) : 0;
	uint64_t seed = strtoull(argv[2], NULL, 0), want[WORDS], got[WORDS];
	bool looping = false;
	for (unsigned i = 0; i < WORDS; i++)
		want[i] = (seed + i) * 0x9e3779b97f4a7c15ull;
	struct loco_mgr *mgr;
	struct loco_thread *thr = NULL;
	struct loco_rregion rr;
	if (loco_mgr_create(&o, &mgr))
		return 1;
	int mem = loco_mgr_first_memnode(mgr);
	int rc = mem < 0 ? mem : loco_thread_create(mgr, &thr);
	if (!rc)
		rc = loco_region_open(mgr, (uint32_t)mem, "probe.data",
				      sizeof(want), &rr);
	if (!rc && (argv[1][0] == 'w' || loop))
		rc = loco_write(thr, &rr, 0, want, sizeof(want));
	do {
		if (rc || argv[1][0] == 'w')
			break;
		rc = loco_read(thr, &rr, 0, got, sizeof(got));
		if (!rc && memcmp(got, want, sizeof(got))) {
			fprintf(stderr, "loco-probe: probe.data is not intact\n");
			rc = 1;
		}
		if (!rc && loop && !looping) {
			printf("loco-probe: looping\n");
			fflush(stdout);
			looping = true;
		}
	} while (!rc && loco_now_ns() < until);
	if (rc < 0)
		fprintf(stderr, "loco-probe: %s\n", loco_strerror(rc));
	if (thr)
		loco_thread_destroy(thr);
	loco_mgr_destroy(mgr);
	if (!rc)
		printf("loco-probe: %s ok\n", argv[1]);
	return rc ? 1 : 0;
}
