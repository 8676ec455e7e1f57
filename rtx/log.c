/* SPDX-License-Identifier: MIT */
/* Log checksum and the repair decision table (pure functions). */
#include <loco/rtx/log.h>

#include <string.h>
/* XXH3 compiled in here (the same function, so the same sums): the two
 * short hashes of a commit's log cost a third of the library's calls. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <loco/rtx/lllock.h>

#define LOG_SUM_SEED UINT64_C(0x6c6f636f72747821) /* "locortx!" */

uint64_t loco_rtx_log_sum(const struct loco_rtx_log_hdr *h,
			  const struct loco_rtx_log_ent *e)
{
	uint64_t head[2] = { h->lockv, h->meta };
	uint64_t seed = XXH3_64bits_withSeed(head, sizeof(head), LOG_SUM_SEED);
	return XXH3_64bits_withSeed(e, loco_rtx_log_nent(h) * sizeof(*e), seed);
}

void loco_rtx_log_seal(struct loco_rtx_log_hdr *h,
		       const struct loco_rtx_log_ent *e, unsigned n,
		       uint64_t lockv, uint32_t seq, uint64_t lease_ms)
{
	h->state = loco_rtx_state_word(LOCO_RTX_LOG_INIT, seq, lease_ms);
	h->lockv = lockv;
	h->meta = loco_rtx_log_meta(seq, n);
	h->sum = loco_rtx_log_sum(h, e);
}

bool loco_rtx_log_matches(const void *buf, uint64_t lockv, unsigned max_ent)
{
	struct loco_rtx_log_hdr h;
	memcpy(&h, buf, sizeof(h));
	if (h.lockv != lockv || !loco_lllock_is_locked(lockv) ||
	    loco_rtx_log_nent(&h) > max_ent)
		return false;
	const struct loco_rtx_log_ent *e =
		(const void *)((const char *)buf + sizeof(h));
	return loco_rtx_log_sum(&h, e) == h.sum;
}

bool loco_rtx_log_open(const void *buf, unsigned max_ent)
{
	struct loco_rtx_log_hdr h;
	memcpy(&h, buf, sizeof(h));
	return loco_rtx_state_of(h.state) != LOCO_RTX_LOG_DONE &&
	       loco_rtx_state_of_log(h.state, &h) &&
	       loco_rtx_log_matches(buf, h.lockv, max_ent);
}

static enum loco_rtx_repair_action decide_state(uint64_t state,
						uint64_t now_ms)
{
	switch (loco_rtx_state_of(state)) {
	case LOCO_RTX_LOG_INIT:
		return LOCO_RTX_REPAIR_ABORT;
	case LOCO_RTX_LOG_ABORT:
		return LOCO_RTX_REPAIR_RELEASE;
	case LOCO_RTX_LOG_DOING:
		return loco_lease_over(loco_rtx_state_ms(state), now_ms) ?
		       LOCO_RTX_REPAIR_RECOMMIT : LOCO_RTX_REPAIR_WAIT;
	default:
		return LOCO_RTX_REPAIR_LATE_LOCK;
	}
}

enum loco_rtx_repair_action loco_rtx_repair_decide(uint64_t lockv,
						   bool matches,
						   uint64_t state,
						   uint64_t now_ms)
{
	if (!loco_lllock_is_locked(lockv))
		return LOCO_RTX_REPAIR_NONE;
	if (!loco_lllock_expired(lockv, now_ms))
		return LOCO_RTX_REPAIR_WAIT;
	if (loco_lllock_nolog(lockv) || !matches)
		return LOCO_RTX_REPAIR_STEAL;
	return decide_state(state, now_ms);
}

const char *loco_rtx_repair_name(enum loco_rtx_repair_action a)
{
	static const char *const names[] = {
		[LOCO_RTX_REPAIR_NONE] = "none",
		[LOCO_RTX_REPAIR_WAIT] = "wait",
		[LOCO_RTX_REPAIR_STEAL] = "steal",
		[LOCO_RTX_REPAIR_ABORT] = "abort",
		[LOCO_RTX_REPAIR_RELEASE] = "release",
		[LOCO_RTX_REPAIR_RECOMMIT] = "recommit",
		[LOCO_RTX_REPAIR_LATE_LOCK] = "late-lock",
	};
	return (unsigned)a < sizeof(names) / sizeof(names[0]) ? names[a] : "?";
}
