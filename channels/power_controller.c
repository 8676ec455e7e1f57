/* SPDX-License-Identifier: MIT */
/* power_controller: see power_controller.h. Two owned_vars per converter;
 * the rest is the waiting, the staleness check and the recording. */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include <loco/channels/power_controller.h>
#include <loco/history.h>
#include <loco/wait.h>

enum { VAR_DUTY, VAR_VOLT };
#define MSG_MAX 64

static uint32_t msg_len(int var)
{
	return var == VAR_DUTY ? sizeof(struct loco_pc_cmd) :
				 sizeof(struct loco_pc_sample);
}

static uint32_t self_id(const struct loco_power_ctl *pc)
{
	return loco_channel_self(&pc->base);
}

/* The pair of owned_vars of converter ID: "d<ID>" and "v<ID>", each
 * shared by the controller and that converter only. */
static int pair_init(struct loco_power_ctl *pc, uint32_t id)
{
	char name[16];
	uint64_t two = UINT64_C(1) << pc->controller | UINT64_C(1) << id;
	snprintf(name, sizeof(name), "d%u", id);
	int rc = loco_owned_var_init(&pc->duty[id], pc->base.mgr, &pc->base,
				     name, pc->controller, msg_len(VAR_DUTY), two);
	if (rc)
		return rc;
	snprintf(name, sizeof(name), "v%u", id);
	return loco_owned_var_init(&pc->volt[id], pc->base.mgr, &pc->base, name,
				   id, msg_len(VAR_VOLT), two);
}

static int pairs_init(struct loco_power_ctl *pc)
{
	uint64_t mine = loco_power_ctl_is_controller(pc) ?
			pc->converters : UINT64_C(1) << self_id(pc);
	for (uint64_t m = mine; m; m &= m - 1) {
		int rc = pair_init(pc, (uint32_t)__builtin_ctzll(m));
		if (rc)
			return rc;
	}
	return 0;
}

int loco_power_ctl_init(struct loco_power_ctl *pc, struct loco_mgr *mgr,
			struct loco_channel *parent, const char *name,
			uint32_t controller, uint64_t converters)
{
	uint64_t members = converters | UINT64_C(1) << (controller & 63);
	uint32_t self = loco_mgr_id(mgr);
	if (controller >= LOCO_MAX_NODES || !converters ||
	    converters & UINT64_C(1) << controller ||
	    !(members & UINT64_C(1) << self))
		return -EINVAL;
	memset(pc, 0, sizeof(*pc));
	int rc = loco_channel_init(&pc->base, mgr, parent, name, members, NULL);
	if (rc)
		return rc;
	pc->controller = controller;
	pc->converters = converters;
	pc->live = converters;
	rc = pairs_init(pc);
	if (!rc)
		rc = loco_channel_join(&pc->base);
	if (rc)
		loco_channel_fini(&pc->base);  /* and the pairs made */
	return rc;
}

void loco_power_ctl_fini(struct loco_power_ctl *pc)
{
	loco_channel_fini(&pc->base);
}

static uint64_t msg_hash(const void *msg, int var)
{
	return XXH3_64bits(msg, msg_len(var));
}

static void var_key(char *key, size_t len, int var, uint32_t id)
{
	snprintf(key, len, "\"%c%u\"", var == VAR_DUTY ? 'd' : 'v', id);
}

/* Store MSG into OV and push it to its one reader (placed). Recorded as
 * a register write that returns once the push is placed. */
static int publish(struct loco_power_ctl *pc, struct loco_thread *thr,
		   struct loco_owned_var *ov, int var, uint32_t id,
		   uint32_t reader, const void *msg)
{
	char key[16], args[32];
	uint64_t hid = 0;
	bool rec = loco_history_enabled(pc->base.mgr);
	if (rec) {
		var_key(key, sizeof(key), var, id);
		snprintf(args, sizeof(args), "[%" PRIu64 "]", msg_hash(msg, var));
		hid = loco_hist_inv(thr, "write", key, args);
	}
	int rc = loco_owned_var_store(ov, msg);
	struct loco_ack a = { 0, 0 };
	if (!rc)
		rc = loco_owned_var_push(ov, thr, LOCO_PUSH_PLACE, &a);
	loco_ack_union(&pc->ack[reader], &a);
	if (rec) {
		if (!rc)
			rc = loco_ack_wait(thr, &a, -1);
		if (rc)
			loco_hist_info(thr, hid);
		else
			loco_hist_ret(thr, hid, NULL);
	}
	return rc;
}

int loco_power_ctl_report(struct loco_power_ctl *pc, struct loco_thread *thr,
			  const struct loco_pc_sample *s)
{
	uint32_t self = self_id(pc);
	if (loco_power_ctl_is_controller(pc))
		return -EPERM;
	return publish(pc, thr, &pc->volt[self], VAR_VOLT, self,
		       pc->controller, s);
}

int loco_power_ctl_command(struct loco_power_ctl *pc, struct loco_thread *thr,
			   uint32_t conv, const struct loco_pc_cmd *c)
{
	if (!loco_power_ctl_is_controller(pc))
		return -EPERM;
	if (conv >= LOCO_MAX_NODES || !(pc->converters & UINT64_C(1) << conv))
		return -EINVAL;
	return publish(pc, thr, &pc->duty[conv], VAR_DUTY, conv, conv, c);
}

/* The broken load (tests only): the value words of the local copy, after
 * owned_var's {version, sum} header, without checking the sum. It yields
 * between words, as a reader preempted mid-copy would, so that the tears
 * it lets through show within a short run. */
static void load_raw(struct loco_owned_var *ov, void *dst)
{
	const _Atomic uint64_t *src = (const _Atomic uint64_t *)
		((const uint8_t *)ov->val->base + sizeof(struct loco_ov_hdr));
	uint64_t w[MSG_MAX / 8];
	for (unsigned i = 0; i < ov->len / 8; i++) {
		/* Acquire: as owned_var_load's; only the checksum is left
		 * out. */
		w[i] = atomic_load_explicit(&src[i], memory_order_acquire);
		sched_yield();
	}
	memcpy(dst, w, ov->len);
}

static int load_once(struct loco_power_ctl *pc, struct loco_owned_var *ov,
		     void *dst)
{
	if (pc->broken_raw) {
		load_raw(ov, dst);
		return 0;
	}
	return loco_owned_var_load(ov, dst);
}

/* Load this node's copy of variable VAR of converter ID into DST. When
 * recording and the value differs from the last one recorded, the load is
 * repeated as a recorded read (so its invocation precedes the load). */
static int load(struct loco_power_ctl *pc, struct loco_thread *thr, int var,
		uint32_t id, void *dst)
{
	struct loco_owned_var *ov = var == VAR_DUTY ? &pc->duty[id] :
						      &pc->volt[id];
	int rc = load_once(pc, ov, dst);
	if (rc || !loco_history_enabled(pc->base.mgr))
		return rc;
	uint64_t h = msg_hash(dst, var), bit = UINT64_C(1) << id;
	if ((pc->seen_any[var] & bit) && pc->seen[var][id] == h)
		return 0;
	char key[16], res[32];
	var_key(key, sizeof(key), var, id);
	uint64_t hid = loco_hist_inv(thr, "read", key, NULL);
	rc = load_once(pc, ov, dst);
	if (rc) {
		loco_hist_info(thr, hid);
		return rc;
	}
	h = msg_hash(dst, var);
	static const uint8_t zero[MSG_MAX];
	if (!memcmp(dst, zero, msg_len(var)))
		snprintf(res, sizeof(res), "[null]");
	else
		snprintf(res, sizeof(res), "[%" PRIu64 "]", h);
	loco_hist_ret(thr, hid, res);
	pc->seen[var][id] = h;
	pc->seen_any[var] |= bit;
	return 0;
}

/* Poll this node's pushes to the peers in MASK (errors are the flush's
 * business: a converter that died fails its pushes on RDMA). */
static void acks_poll(struct loco_power_ctl *pc, struct loco_thread *thr,
		      uint64_t mask)
{
	for (uint64_t m = mask; m; m &= m - 1) {
		unsigned p = (unsigned)__builtin_ctzll(m);
		if (pc->ack[p].peers && loco_ack_test(thr, &pc->ack[p]) == 1)
			loco_ack_clear(&pc->ack[p]);
	}
}

int loco_power_ctl_wait_cmd(struct loco_power_ctl *pc, struct loco_thread *thr,
			    uint64_t seq, int timeout_ms, struct loco_pc_cmd *out)
{
	if (loco_power_ctl_is_controller(pc))
		return -EPERM;
	struct loco_wait w;
	loco_wait_init(&w, pc->base.mgr, timeout_ms);
	uint64_t ctl = UINT64_C(1) << pc->controller;
	for (;;) {
		struct loco_pc_cmd c;
		int rc = load(pc, thr, VAR_DUTY, self_id(pc), &c);
		if (rc)
			return rc;
		if (c.seq >= seq || c.flags & LOCO_PC_STOP) {
			*out = c;
			return 0;
		}
		acks_poll(pc, thr, ctl);
		rc = loco_wait_step(&w);
		if (rc)
			return rc;
	}
}

int loco_power_ctl_latest_cmd(struct loco_power_ctl *pc,
			      struct loco_thread *thr, struct loco_pc_cmd *out)
{
	if (loco_power_ctl_is_controller(pc))
		return -EPERM;
	struct loco_pc_cmd c;
	int rc = load(pc, thr, VAR_DUTY, self_id(pc), &c);
	if (rc)
		return rc;
	acks_poll(pc, thr, UINT64_C(1) << pc->controller);
	*out = c;
	return 0;
}

/* Load every converter's sample into OUT and note when each changed.
 * Returns the converters whose sample has seq >= SEQ in *FRESH, those
 * whose sample changed since the last pass in *CHANGED. */
static int gather_pass(struct loco_power_ctl *pc, struct loco_thread *thr,
		       uint64_t seq, uint64_t now,
		       struct loco_pc_sample out[LOCO_MAX_NODES], uint64_t *fresh,
		       uint64_t *changed)
{
	*fresh = *changed = 0;
	for (uint64_t m = pc->converters; m; m &= m - 1) {
		unsigned id = (unsigned)__builtin_ctzll(m);
		int rc = load(pc, thr, VAR_VOLT, id, &out[id]);
		if (rc)
			return rc;
		if (out[id].seq != pc->last_seq[id]) {
			pc->last_seq[id] = out[id].seq;
			pc->last_change_ns[id] = now;
			*changed |= UINT64_C(1) << id;
		}
		if (out[id].seq >= seq)
			*fresh |= UINT64_C(1) << id;
	}
	return 0;
}

/* Converters in BACK that are not live are live again. */
static void take_back(struct loco_power_ctl *pc, uint64_t back)
{
	back &= pc->converters & ~pc->live;
	pc->rejoins += (uint64_t)__builtin_popcountll(back);
	pc->live |= back;
}

/* Live converters missing from FRESH whose sample has not changed for
 * STALE_NS, counted from the later of its last change and the start of
 * this wait (T0: a converter that waited for our command could not
 * publish before), are dropped. Returns true when every live converter
 * is fresh. */
static bool staleness_check(struct loco_power_ctl *pc, uint64_t fresh,
			    uint64_t t0, uint64_t now, uint64_t stale_ns)
{
	uint64_t missing = pc->live & ~fresh;
	for (uint64_t m = missing; m; m &= m - 1) {
		unsigned id = (unsigned)__builtin_ctzll(m);
		uint64_t since = pc->last_change_ns[id] > t0 ?
				 pc->last_change_ns[id] : t0;
		if (now - since > stale_ns) {
			pc->live &= ~(UINT64_C(1) << id);
			pc->drops++;
		}
	}
	return !(pc->live & ~fresh);
}

int loco_power_ctl_gather(struct loco_power_ctl *pc, struct loco_thread *thr,
			  uint64_t seq, uint64_t stale_ns,
			  struct loco_pc_sample out[LOCO_MAX_NODES])
{
	if (!loco_power_ctl_is_controller(pc))
		return -EPERM;
	uint64_t t0 = loco_now_ns();
	unsigned spins = 0;
	for (;;) {
		uint64_t fresh, changed, now = loco_now_ns();
		int rc = gather_pass(pc, thr, seq, now, out, &fresh, &changed);
		if (rc)
			return rc;
		take_back(pc, fresh);
		if (staleness_check(pc, fresh, t0, now, stale_ns))
			return 0;
		acks_poll(pc, thr, pc->converters);
		loco_backoff(&spins);
	}
}

int loco_power_ctl_latest(struct loco_power_ctl *pc, struct loco_thread *thr,
			  uint64_t stale_ns,
			  struct loco_pc_sample out[LOCO_MAX_NODES])
{
	if (!loco_power_ctl_is_controller(pc))
		return -EPERM;
	uint64_t fresh, changed, now = loco_now_ns();
	if (!pc->latest_t0)
		pc->latest_t0 = now;
	int rc = gather_pass(pc, thr, UINT64_MAX, now, out, &fresh, &changed);
	if (rc)
		return rc;
	take_back(pc, changed);
	/* A sample that changed in this pass is as good as fresh. */
	staleness_check(pc, changed, pc->latest_t0, now, stale_ns);
	acks_poll(pc, thr, pc->converters);
	return 0;
}

int loco_power_ctl_flush(struct loco_power_ctl *pc, struct loco_thread *thr,
			 uint64_t mask, int timeout_ms)
{
	int ret = 0;
	for (uint64_t m = mask; m; m &= m - 1) {
		unsigned p = (unsigned)__builtin_ctzll(m);
		if (!pc->ack[p].peers)
			continue;
		int rc = loco_ack_wait(thr, &pc->ack[p], timeout_ms);
		if (rc && !ret)
			ret = rc;
		loco_ack_clear(&pc->ack[p]);
	}
	return ret;
}
