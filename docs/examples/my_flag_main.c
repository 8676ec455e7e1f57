/* SPDX-License-Identifier: MIT */
/* my-flag-pingpong: two nodes pass a round number back and forth through
 * two my_flags, ROUNDS times (default 1000). Run on a cluster:
 *	tools/loco-run -n 2 -- my-flag-pingpong [ROUNDS]
 * Exits 0 when every round arrived. */
#include <stdio.h>
#include <stdlib.h>

#include <loco/loco.h>

#include "my_flag.h"

static int pingpong(struct loco_mgr *mgr, struct loco_thread *thr,
		    struct my_flag *ping, struct my_flag *pong, uint64_t rounds)
{
	int rc = loco_mgr_wait_ready(mgr, -1);
	bool first = !(loco_mgr_compute_peers(mgr) &
		       ((UINT64_C(1) << loco_mgr_id(mgr)) - 1));
	for (uint64_t r = 1; !rc && r <= rounds; r++) {
		if (first) {
			rc = my_flag_set(ping, thr, r);
			if (!rc)
				rc = my_flag_wait(pong, r, -1);
		} else {
			rc = my_flag_wait(ping, r, -1);
			if (!rc)
				rc = my_flag_set(pong, thr, r);
		}
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct loco_opts opts;
	char err[256];
	if (loco_opts_parse(&opts, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, "my-flag-pingpong: %s\n", err);
		return 2;
	}
	uint64_t rounds = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000;
	struct loco_mgr *mgr;
	struct loco_thread *thr = NULL;
	struct my_flag ping, pong;
	int rc = loco_mgr_create(&opts, &mgr);
	uint32_t id = rc ? 0 : loco_mgr_id(mgr);
	if (rc) {
		fprintf(stderr, "my-flag-pingpong: %s\n", loco_strerror(rc));
		return 1;
	}
	rc = loco_thread_create(mgr, &thr);
	if (!rc)
		rc = my_flag_init(&ping, mgr, NULL, "ping", 0);
	if (!rc) {
		rc = my_flag_init(&pong, mgr, NULL, "pong", 0);
		if (!rc) {
			rc = pingpong(mgr, thr, &ping, &pong, rounds);
			my_flag_fini(&pong);
		}
		my_flag_fini(&ping);
	}
	if (thr) {
		int drc = loco_thread_destroy(thr);
		rc = rc ? rc : drc;
	}
	loco_mgr_destroy(mgr);
	if (rc) {
		fprintf(stderr, "my-flag-pingpong: %s\n", loco_strerror(rc));
		return 1;
	}
	printf("my-flag-pingpong: node %u: %llu rounds\n", id,
	       (unsigned long long)rounds);
	return 0;
}
