/* SPDX-License-Identifier: MIT */
/* rTX commit and repair (docs/rtx.md): LLLock, log, idempotent
 * TryCommit, repair and steal, with a crash possible before every step
 * that writes shared memory.
 *
 * NCLI clients each run NTX transactions in one log slot (NTX > 1: slot
 * reuse). Every transaction reads both objects and writes value + 1 to
 * both, so a serialisable history ends with each object's value equal to
 * the number of committed transactions (commit point: CAS INIT -> DOING).
 *
 * The first READ of each object is a 16-byte READ that may tear: its
 * data pointer (with the pointer's version) and its lock word are read
 * in two steps, the pointer first, so any number of steps of others may
 * fall between them (a tear with the older lock word makes the lock CAS
 * fail, or shows a lock: not modelled). The lock CAS is followed by a
 * READ back of the data pointer unless that first READ was whole
 * (loco_rtx_meta_whole: a counted version equal to the pointer's
 * version, see WHOLE).
 *
 * Adversary: a client that finds a lock held may decide its lease expired
 * (clock drift, a slow owner, a delayed op: false suspicion) and repair it
 * at once; a DOING log's repair lease always counts as expired, so several
 * executors may run one TryCommit concurrently. At most MAXCRASH clients
 * crash (stop for good) before some step. When every client has stopped,
 * a sweeper (the end-of-run repair; it does not crash) settles every log
 * and repairs every held lock, in a bounded number of passes.
 *
 * Checked (assertions; pan -DSAFETY):
 *   no double install  a transaction's new data pointer is installed at
 *                      most once per object, and only if it committed;
 *   no lost update     at the end each value = committed transactions;
 *   locks end free     at the end every lock is free and every log DONE;
 *   whole              every release to a counted version leaves it equal
 *                      to the data pointer's version.
 *
 * Broken variants, each must fail:
 *   -DBROKEN_EARLY_RELEASE  TryCommit releases the locks before it
 *      installs (the log still DOING): another client commits in between
 *      and the install CAS fails, losing the update;
 *   -DBROKEN_DONE_FIRST     TryCommit marks the log DONE before releasing
 *      and a DONE log's repair does nothing (no late-lock release): a
 *      crash in between leaves a lock held for good;
 *   -DBROKEN_NO_REREAD      the lock CAS is never followed by the READ
 *      back: a first READ torn across a commit (lock word after it,
 *      pointer before) locks from the newer version, and the install
 *      CAS fails after the commit point;
 *   -DBROKEN_WHOLE_ANY      a first READ counts as whole whenever its
 *      version is counted, without comparing it with the pointer's
 *      version: the same torn READ goes through;
 *   -DBROKEN_DATA_AFTER_DOING  (with RFU) the read for update's new data
 *      written after the commit point instead of before it (in a doorbell
 *      of its own after DOING, or on a QP that does not order it before
 *      DOING): an executor installs a block that holds no value yet.
 *
 * -DRFU=K: clients 0 .. K-1 commit as a read for update does
 * (loco_rtx_read_for_update): the log (INIT, its entries naming the new
 * blocks) and the locks are taken before the new blocks are written, and
 * the blocks are written in a step of their own between the locks and
 * the commit point (the data WRITEs share the INIT -> DOING doorbell,
 * placed before it on the QP), so any steps of others, repairs of the
 * INIT log included, fall between the locks and the data. (Its data READs
 * ride with the lock CASes; blocks are written once, before any pointer
 * names them, so reading the value with the pointer is the same.) */

#ifndef NCLI
#define NCLI 2
#endif
#ifndef NTX
#define NTX 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef RFU
#define RFU 0
#endif

#define NOBJ 2
#define NTXT (NCLI * NTX)
#define NBLK (NOBJ + NTXT * NOBJ + 12)   /* initial, new, steal copies */
#define PASSES 3                          /* sweeper passes per object */

#define L_DONE 0
#define L_INIT 1
#define L_ABORT 2
#define L_DOING 3
#define L_GONE 9                          /* slot reused meanwhile */

/* Lock words: unlocked = version (< LK); locked = LK + transaction id, or
 * LK + STEAL + client for a repairer's no-log (steal) lock. Counted
 * versions start at 0; fresh versions at FRESH0, spaced by FRESH_STEP so
 * counting up from one never reaches the next. FRESHV: "release fresh". */
#define LK 128
#define STEAL 64
#define FRESH0 16
#define FRESH_STEP 8
#define FRESHV 255
#define LOCKED(w) ((w) >= LK)
#define OWNER(w) (((w) - LK) / NTX)

byte lock[NOBJ];
byte dptr[NOBJ];
byte dver[NOBJ];                          /* the data pointer's version */
byte bval[NBLK];
byte nextblk = NOBJ + NTXT * NOBJ;
byte fresh = FRESH0;
byte crashes = MAXCRASH;
byte running = NCLI;

/* log slot of each client */
byte lstate[NCLI];
byte lseq[NCLI];
byte llockv[NCLI];
byte lold[NCLI * NOBJ];
byte lnew[NCLI * NOBJ];

bool committed[NTXT];
byte installs[NTXT * NOBJ];

/* Maybe crash before the next step (at most MAXCRASH crashes in all).
 * Only steps that write shared memory get one: a crash before a step that
 * only reads (or writes a block nobody can see yet) looks, to every other
 * process, like a crash before the next writing step. */
#define STEP(mayfail) \
	if :: mayfail && crashes > 0 -> crashes--; goto dead :: true -> skip fi

#define NEWBLK(t, o) (NOBJ + (t) * NOBJ + (o))

/* A first READ that found counted version V and pointer version PV is
 * whole (loco_rtx_meta_whole): every commit adds one to both, a fresh
 * version (a repair's release) never matches. */
#ifdef BROKEN_WHOLE_ANY
#define WHOLE(v, pv) ((v) < FRESH0)
#else
#define WHOLE(v, pv) ((v) < FRESH0 && (v) == (pv))
#endif

/* ---- TryCommit (owner and repairers) ---------------------------------------- */

/* Install CAS: object O from OLD to NEW for transaction T. */
inline install(o, old, nw, t)
{
	d_step {
		if
		:: dptr[o] == (old) ->
			dptr[o] = (nw);
			dver[o]++;
			assert(committed[(t)]);
			installs[(t) * NOBJ + (o)]++;
			assert(installs[(t) * NOBJ + (o)] == 1)
		:: else -> skip
		fi
	}
}

/* Release CAS of object O held by W, to V (FRESHV: a fresh version). */
inline release(o, w, v)
{
	d_step {
		if
		:: lock[o] == (w) && (v) == FRESHV ->
			lock[o] = fresh;
			fresh = fresh + FRESH_STEP;
			assert(fresh < LK)
		:: lock[o] == (w) && (v) != FRESHV ->
			lock[o] = (v);
			/* what WHOLE rests on: a counted version is the
			 * pointer's version */
			assert((v) >= FRESH0 || (v) == dver[o])
		:: else -> skip
		fi
	}
}

/* State CAS of slot S's log: ST (sequence SQ) -> TO. */
inline log_cas(s, st, sq, to)
{
	d_step {
		if
		:: lstate[s] == (st) && lseq[s] == (sq) -> lstate[s] = (to)
		:: else -> skip
		fi
	}
}

/* TryCommit after INIT -> DOING: slot S's log (sequence SQ, lock word
 * W), entries O0 -> N0 and O1 -> N1, release versions R0, R1. */
inline try_commit(s, sq, w, o0, n0, o1, n1, r0, r1, mayfail)
{
#ifndef BROKEN_EARLY_RELEASE
	STEP(mayfail); install(0, o0, n0, (w) - LK);
	STEP(mayfail); install(1, o1, n1, (w) - LK);
#endif
#ifdef BROKEN_DONE_FIRST
	STEP(mayfail); log_cas(s, L_DOING, sq, L_DONE);
#endif
	STEP(mayfail); release(0, w, r0);
	STEP(mayfail); release(1, w, r1);
#ifdef BROKEN_EARLY_RELEASE
	STEP(mayfail); install(0, o0, n0, (w) - LK);
	STEP(mayfail); install(1, o1, n1, (w) - LK);
#endif
	STEP(mayfail); log_cas(s, L_DOING, sq, L_DONE)
}

/* ---- repair ------------------------------------------------------------------ */

/* Steal O's lock W: take it, switch the data to a copy of the current
 * value (a late install of the suspect now fails), release fresh. */
inline steal(o, w, me, mayfail)
{
	STEP(mayfail);
	d_step {
		if
		:: lock[o] == (w) -> lock[o] = LK + STEAL + (me); ok = 1
		:: else -> ok = 0
		fi
	}
	if
	:: ok ->
		do
		:: d_step { d = dptr[o]; nb = nextblk; nextblk++; bval[nb] = bval[d] };
		   STEP(mayfail);
		   d_step {
			if
			:: dptr[o] == d -> dptr[o] = nb; dver[o]++; ok = 2
			:: else -> skip
			fi
		   };
		   if
		   :: ok == 2 -> break
		   :: else -> skip
		   fi
		od;
		STEP(mayfail); release(o, LK + STEAL + (me), FRESHV)
	:: else -> skip
	fi
}

/* Repair the holder of lock word W found on object O; O = NOBJ: settle
 * only the log (the sweeper adopting a dead client's slot). The log is
 * read once, whole: entries are used from this copy. */
inline repair(o, w, me, mayfail)
{
	if
	:: w >= LK + STEAL ->
		if
		:: o < NOBJ -> steal(o, w, me, mayfail)
		:: else -> skip
		fi
	:: else ->
		s = OWNER(w);
		d_step {
			rst = lstate[s]; rsq = lseq[s]; rlv = llockv[s];
			ro0 = lold[s * NOBJ]; rn0 = lnew[s * NOBJ];
			ro1 = lold[s * NOBJ + 1]; rn1 = lnew[s * NOBJ + 1]
		};
		if
		:: rlv != w ->
			if
			:: o < NOBJ -> steal(o, w, me, mayfail)
			:: else -> skip
			fi
		:: else ->
			do
			:: rst == L_INIT ->
				STEP(mayfail); log_cas(s, L_INIT, rsq, L_ABORT);
				d_step {
					rst = lstate[s];
					if
					:: lseq[s] != rsq -> rst = L_GONE
					:: else -> skip
					fi
				}
			:: rst == L_ABORT ->
				STEP(mayfail); release(0, w, FRESHV);
				STEP(mayfail); release(1, w, FRESHV);
				STEP(mayfail); log_cas(s, L_ABORT, rsq, L_DONE);
				break
			:: rst == L_DOING ->
				try_commit(s, rsq, w, ro0, rn0, ro1, rn1, FRESHV,
					   FRESHV, mayfail);
				break
			:: rst == L_DONE ->
#ifndef BROKEN_DONE_FIRST
				if
				:: o < NOBJ -> STEP(mayfail); release(o, w, FRESHV)
				:: else -> skip
				fi;
#endif
				break
			:: rst == L_GONE -> break
			od
		fi
	fi
}

/* ---- clients ------------------------------------------------------------------- */

proctype client(byte c)
{
	byte k, t, o, s, rst, rsq, rlv, ro0, rn0, ro1, rn1, d, nb, ok, acq, sq, w;
	byte rl[NOBJ], rd[NOBJ], rv[NOBJ], rdv[NOBJ];

	for (k : 0 .. NTX - 1) {
		t = c * NTX + k;
		acq = 0;
		w = 0;
		/* execution: read both objects (the TXObj READ may tear: its
		 * pointer half first; the data READ of a block gets what it
		 * was written with, blocks are not reused here); a held lock
		 * may be repaired */
		for (o : 0 .. NOBJ - 1) {
			d_step { rd[o] = dptr[o]; rdv[o] = dver[o]; rv[o] = bval[dptr[o]] };
			d_step { rl[o] = lock[o] };
			if
			:: LOCKED(rl[o]) ->
				w = rl[o];
				if
				:: true -> repair(o, w, c, 1)
				:: true -> skip
				fi;
				goto next
			:: else -> skip
			fi
		}
		/* the new blocks (nobody reads them before the log names
		 * them: one step with the log), then the whole log, before
		 * any lock names it */
		STEP(1);
		d_step {
			if
			:: c >= RFU ->
				bval[NEWBLK(t, 0)] = rv[0] + 1;
				bval[NEWBLK(t, 1)] = rv[1] + 1
			:: else -> skip
			fi;
			lseq[c]++; sq = lseq[c];
			lstate[c] = L_INIT; llockv[c] = LK + t;
			lold[c * NOBJ] = rd[0]; lnew[c * NOBJ] = NEWBLK(t, 0);
			lold[c * NOBJ + 1] = rd[1]; lnew[c * NOBJ + 1] = NEWBLK(t, 1)
		};
		/* lock the write set: CAS from the version read, then (same
		 * QP, so right after it) READ the TXObj back unless the first
		 * READ was whole: the data pointer must be the one read */
		for (o : 0 .. NOBJ - 1) {
			STEP(1);
			d_step {
				if
				:: lock[o] == rl[o] ->
					lock[o] = LK + t; acq = acq | (1 << o);
#ifdef BROKEN_NO_REREAD
					ok = 1
#else
					ok = WHOLE(rl[o], rdv[o]) || dptr[o] == rd[o]
#endif
				:: else -> w = lock[o]; ok = 0
				fi
			};
			if
			:: ok -> skip
			:: else -> goto abort
			fi
		}
		/* read for update: the new data, after the locks */
#ifndef BROKEN_DATA_AFTER_DOING
		if
		:: c < RFU ->
			STEP(1);
			d_step {
				bval[NEWBLK(t, 0)] = rv[0] + 1;
				bval[NEWBLK(t, 1)] = rv[1] + 1
			}
		:: else -> skip
		fi;
#endif
		/* commit point: INIT -> DOING */
		STEP(1);
		d_step {
			if
			:: lstate[c] == L_INIT && lseq[c] == sq ->
				lstate[c] = L_DOING; committed[t] = 1; ok = 1
			:: else -> ok = 0
			fi
		};
		if
		:: !ok -> goto abort
		:: else -> skip
		fi;
#ifdef BROKEN_DATA_AFTER_DOING
		if
		:: c < RFU ->
			STEP(1);
			d_step {
				bval[NEWBLK(t, 0)] = rv[0] + 1;
				bval[NEWBLK(t, 1)] = rv[1] + 1
			}
		:: else -> skip
		fi;
#endif
		try_commit(c, sq, LK + t, rd[0], NEWBLK(t, 0), rd[1], NEWBLK(t, 1),
			   rl[0] + 1, rl[1] + 1, 1);
		goto next;
abort:
		STEP(1); log_cas(c, L_INIT, sq, L_ABORT);
		if
		:: acq & 1 -> STEP(1); release(0, LK + t, rl[0])
		:: else -> skip
		fi;
		if
		:: acq & 2 -> STEP(1); release(1, LK + t, rl[1])
		:: else -> skip
		fi;
		STEP(1); log_cas(c, L_ABORT, sq, L_DONE);
		/* the lock that stopped us may be a crashed client's */
		if
		:: LOCKED(w) && o < NOBJ -> repair(o, w, c, 1)
		:: true -> skip
		fi;
next:
		skip
	}
dead:
	running--
}

/* ---- the end-of-run repair ----------------------------------------------------- */

proctype sweeper()
{
	byte o, s, c, t, rst, rsq, rlv, ro0, rn0, ro1, rn1, d, nb, ok, w, p, n;
	running == 0;
	/* settle every slot's log (loco_rtx_adopt_slot) */
	for (c : 0 .. NCLI - 1) {
		if
		:: lstate[c] != L_DONE -> w = llockv[c]; repair(NOBJ, w, NCLI, 0)
		:: else -> skip
		fi
	}
	/* repair every held lock (loco_rtx_repair_all), bounded */
	for (o : 0 .. NOBJ - 1) {
		for (p : 1 .. PASSES) {
			if
			:: LOCKED(lock[o]) -> w = lock[o]; repair(o, w, NCLI, 0)
			:: else -> skip
			fi
		}
	}
	/* the invariants */
	n = 0;
	for (t : 0 .. NTXT - 1) {
		n = n + committed[t]
	}
	for (o : 0 .. NOBJ - 1) {
		assert(!LOCKED(lock[o]));
		assert(bval[dptr[o]] == n)
	}
	for (c : 0 .. NCLI - 1) {
		assert(lstate[c] == L_DONE)
	}
dead:
	skip
}

init {
	byte i;
	atomic {
		dptr[0] = 0;
		dptr[1] = 1;
		run sweeper();
		for (i : 0 .. NCLI - 1) {
			run client(i)
		}
	}
}
