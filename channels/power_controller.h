/* SPDX-License-Identifier: MIT */
/* power_controller (LOCO Appendix B, Fig. 6): the channel of a discrete-
 * time control loop between one controller node and N converter nodes,
 * built only from owned_vars:
 *
 *   "<name>/d<ID>"  owned by the controller, read by converter ID: the
 *                   command (duty cycle) for that converter;
 *   "<name>/v<ID>"  owned by converter ID, read by the controller: its
 *                   latest sample (output voltage, inductor current).
 *
 * Each owned_var has exactly two participants (the controller and one
 * converter), so a converter's sample travels to the controller only and
 * a command to its converter only: one WRITE and one placing READ per
 * message, in one doorbell. Values are 32 or 48 bytes and carry a sequence
 * number (1, 2, ...; 0 = nothing published yet); owned_var's checksum
 * makes every load return one whole message.
 *
 * Two ways to run the loop: in lockstep, each side waits for the other's
 * message of the step it needs (loco_power_ctl_gather, _wait_cmd); free-
 * running, each side takes the latest message it holds, whatever step it
 * is from, and never waits (loco_power_ctl_latest, _latest_cmd).
 *
 * The controller notices a converter that stopped publishing by a bounded
 * staleness check: a live converter whose sample has not changed for
 * STALE_NS of wall time (in a gather, counted from the start of the wait at
 * the earliest; free-running, from the first loco_power_ctl_latest) is
 * dropped from the live set; a dropped converter whose samples catch up
 * (gather) or change again (latest) is taken back.
 *
 * Recording (LOCO_HISTORY set): every message is a register write on key
 * "d<ID>"/"v<ID>" whose value is the XXH3-64 of its bytes, returning
 * once the push is placed at the reader; every load at the reader that
 * returns a value other than the previous one is a read (the initial,
 * all-zero message reads as null). Model: register (docs/demos.md).
 *
 *	struct loco_power_ctl pc;
 *	loco_power_ctl_init(&pc, mgr, NULL, "pc", controller, converters);
 *	loco_mgr_wait_ready(mgr, -1);
 *	converter: loco_power_ctl_report(&pc, thr, &sample);
 *	           loco_power_ctl_wait_cmd(&pc, thr, seq, -1, &cmd);
 *	controller: loco_power_ctl_gather(&pc, thr, seq, stale_ns, samples);
 *	            loco_power_ctl_command(&pc, thr, id, &cmd);
 * or, free-running, loco_power_ctl_latest_cmd (converter) and
 * loco_power_ctl_latest (controller) in place of the waits.
 */
#ifndef LOCO_CHANNELS_POWER_CONTROLLER_H
#define LOCO_CHANNELS_POWER_CONTROLLER_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channels/owned_var.h>
#include <loco/channel.h>

/* Message flags. */
enum {
	LOCO_PC_STOP = 1u << 0,   /* command: the run is over, stop stepping */
	LOCO_PC_DONE = 1u << 1,   /* sample: the converter saw STOP, last message */
};

/* Remote layout of a converter's sample (converter -> controller). A
 * message also carries the previous one's values: a loop pipelined one
 * step deep (the reader may still need sample SEQ-1 when SEQ lands, as
 * loco-power's do) finds both in the register. The times are the
 * publisher's loco_now_ns() (CLOCK_MONOTONIC), for the reader to measure
 * a sample's age: comparable only between nodes that share that clock
 * (one host), 0 if not set. */
struct loco_pc_sample {
	uint64_t seq;       /* 1, 2, ...; 0: nothing published yet */
	double v, i;        /* output voltage (V), inductor current (A) */
	double v_prev, i_prev;  /* the same of sample SEQ-1 */
	uint64_t flags;     /* LOCO_PC_DONE */
	uint64_t t_ns, t_prev_ns;  /* when SEQ and SEQ-1 were published */
};
static_assert(sizeof(struct loco_pc_sample) == 64, "remote layout");

/* Remote layout of a command (controller -> one converter). */
struct loco_pc_cmd {
	uint64_t seq;       /* 1, 2, ...; 0: nothing published yet */
	double duty;        /* duty cycle, 0..1 */
	double duty_prev;   /* the duty of command SEQ-1 */
	uint64_t flags;     /* LOCO_PC_STOP */
};
static_assert(sizeof(struct loco_pc_cmd) == 32, "remote layout");

struct loco_power_ctl {
	struct loco_channel base;
	uint32_t controller;
	uint64_t converters;        /* node mask */
	/* Indexed by converter id; only this converter's pair on a
	 * converter, every converter's on the controller. */
	struct loco_owned_var duty[LOCO_MAX_NODES];
	struct loco_owned_var volt[LOCO_MAX_NODES];
	struct loco_ack ack[LOCO_MAX_NODES];  /* pushes to each peer */
	/* Controller: the staleness check. */
	uint64_t live;              /* converters regulated now */
	uint64_t last_seq[LOCO_MAX_NODES];
	uint64_t last_change_ns[LOCO_MAX_NODES];
	uint64_t drops, rejoins;    /* live-set changes */
	uint64_t latest_t0;         /* the first loco_power_ctl_latest, ns */
	/* Recording: hash of the last value read per variable (and whether
	 * one was read), so only changes are recorded. */
	uint64_t seen[2][LOCO_MAX_NODES];
	uint64_t seen_any[2];
	/* Tests only: loads copy the message words out of the local copy
	 * without the checksum check, so a copy that is being placed can be
	 * returned torn (what the lin test's checker must catch). */
	bool broken_raw;
};
static_assert(offsetof(struct loco_power_ctl, base) == 0, "base first");

/* Create endpoint NAME (under PARENT, may be NULL) on the controller node
 * CONTROLLER or on one of the converters CONVERTERS (a node mask, not
 * containing CONTROLLER). This node must be one of them. Starts joining.
 * Returns 0, -EINVAL (bad ids, this node not a member), -ENOMEM, -EEXIST;
 * on failure nothing is left to finish. */
int loco_power_ctl_init(struct loco_power_ctl *pc, struct loco_mgr *mgr,
			struct loco_channel *parent, const char *name,
			uint32_t controller, uint64_t converters);

/* Free the endpoint. The pushing thread's pushes must be complete (the
 * thread destroyed, or loco_power_ctl_flush). */
void loco_power_ctl_fini(struct loco_power_ctl *pc);

static inline bool loco_power_ctl_is_controller(const struct loco_power_ctl *pc)
{
	return pc->controller == loco_channel_self(&pc->base);
}

/* Converter: publish S (S->seq should grow) to the controller.
 * Returns 0, -EPERM on the controller, or a push error.
 * Ordering: owned_var push with LOCO_PUSH_PLACE: the controller sees the
 *   samples in publish order; each is visible once its ack completes.
 * Completion: asynchronous (polled by the waits and flush); synchronous
 *   when recording.
 * Caller: the converter's one stepping thread. */
int loco_power_ctl_report(struct loco_power_ctl *pc, struct loco_thread *thr,
			  const struct loco_pc_sample *s);

/* Controller: publish C to converter CONV. Returns 0, -EPERM on a
 * converter, -EINVAL if CONV is not a converter, or a push error.
 * Ordering/Completion: as loco_power_ctl_report, towards CONV.
 * Caller: the controller's one stepping thread. */
int loco_power_ctl_command(struct loco_power_ctl *pc, struct loco_thread *thr,
			   uint32_t conv, const struct loco_pc_cmd *c);

/* Converter: wait until the controller's command has seq >= SEQ or the
 * STOP flag, up to TIMEOUT_MS (< 0: the manager's default), into *OUT.
 * Returns 0, -ETIMEDOUT, -LOCO_ETORN, -EPERM on the controller.
 * Ordering: acquire load of the pushed copy (owned_var_load).
 * Completion: synchronous (local loads; polls this node's pushes).
 * Caller: the converter's stepping thread. */
int loco_power_ctl_wait_cmd(struct loco_power_ctl *pc, struct loco_thread *thr,
			    uint64_t seq, int timeout_ms, struct loco_pc_cmd *out);

/* Controller: wait until every live converter's sample has seq >= SEQ;
 * a live converter whose sample has not changed for STALE_NS (wall time,
 * counted from the call at the earliest) is dropped instead; a dropped one whose sample has seq >= SEQ is live
 * again. OUT[id] gets every converter's latest sample (indexed by node
 * id). Returns the live mask through pc->live; 0, -LOCO_ETORN or -EPERM.
 * Never waits longer than STALE_NS.
 * Ordering: acquire loads of the pushed copies (owned_var_load).
 * Completion: synchronous (local loads; polls this node's pushes).
 * Caller: the controller's stepping thread. */
int loco_power_ctl_gather(struct loco_power_ctl *pc, struct loco_thread *thr,
			  uint64_t seq, uint64_t stale_ns,
			  struct loco_pc_sample out[LOCO_MAX_NODES]);

/* Converter, free-running: the latest command into *OUT (seq 0 and all
 * zero if none yet), without waiting; polls this node's pushes.
 * Returns 0, -LOCO_ETORN, -EPERM on the controller.
 * Ordering: acquire load of the pushed copy (owned_var_load).
 * Completion: synchronous (a local load).
 * Caller: the converter's stepping thread. */
int loco_power_ctl_latest_cmd(struct loco_power_ctl *pc,
			      struct loco_thread *thr, struct loco_pc_cmd *out);

/* Controller, free-running: every converter's latest sample into OUT[id],
 * without waiting. A live converter whose sample has not changed for
 * STALE_NS (wall time, counted from this node's first call at the
 * earliest) is dropped; a dropped one whose sample changed since the last
 * call is live again (pc->live, pc->drops, pc->rejoins). Polls this
 * node's pushes. Returns 0, -LOCO_ETORN or -EPERM.
 * Ordering: acquire loads of the pushed copies (owned_var_load).
 * Completion: synchronous (local loads).
 * Caller: the controller's stepping thread. */
int loco_power_ctl_latest(struct loco_power_ctl *pc, struct loco_thread *thr,
			  uint64_t stale_ns,
			  struct loco_pc_sample out[LOCO_MAX_NODES]);

/* Wait up to TIMEOUT_MS (< 0: the manager's default) for this node's
 * pushes to the peers in MASK to complete. Returns 0, -ETIMEDOUT or the
 * error of a failed push.
 * Ordering: the pushes carry placing READs: once complete, every message
 *   published to those peers is visible there.
 * Completion: synchronous.
 * Caller: the stepping thread. */
int loco_power_ctl_flush(struct loco_power_ctl *pc, struct loco_thread *thr,
			 uint64_t mask, int timeout_ms);

#endif
