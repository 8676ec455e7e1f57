/* SPDX-License-Identifier: MIT */
/* The global protocol of channels/ticket_lock.c: tickets, the seen hint,
 * trylock, timeouts that give the last ticket back or mark it abandoned in
 * the skip table, the settle step, releases that skip marked tickets, and
 * the reclaim of a node's abandoned ticket by its next lock attempt.
 * Every remote atomic (FAA, CAS, READ of one word at the host) is one
 * atomic step; the FAA and CAS of a release are two steps (other nodes'
 * atomics may land between them). The node-local layer (local queue and
 * handovers, under a mutex) is not modelled: it only ever lets one thread
 * per node run this protocol, and keeps the node's abandoned ticket (ab).
 *
 * NPROC nodes make NITER attempts each, every one a lock or a trylock; a
 * waiting lock may time out at any step. SLOTS skip slots (default NPROC).
 *
 * Checked (pan -DSAFETY):
 *   exclusion   at most one node in the section;
 *   release     a release finds serving equal to the ticket it releases;
 *   bounded     at most NPROC tickets are outstanding (next - serving), so
 *               with SLOTS >= NPROC a timed-out attempt always finds its
 *               ticket's skip slot free: leaving never waits;
 *   no wedge    when every node is done, serving == next (the lock is
 *               free) and every skip slot is clear.
 *
 * Broken variants, each must fail:
 *   -DBROKEN_NO_SETTLE   after marking its ticket, a timed-out attempt
 *      does not check whether it was served meanwhile: a release that
 *      served it before the mark landed leaves the lock with nobody;
 *   -DBROKEN_NO_SKIP     a release only increments serving (no CAS of the
 *      next ticket's slot): an abandoned ticket is served to nobody;
 *   -DBROKEN_NO_RECLAIM  a lock attempt always takes a new ticket: a node
 *      piles up abandoned tickets and one finds its slot busy. */

#ifndef NPROC
#define NPROC 3
#endif
#ifndef NITER
#define NITER 2
#endif
#ifndef SLOTS
#define SLOTS NPROC
#endif

byte next = 0;
byte serving = 0;
byte mark[SLOTS];
byte in_cs = 0;
byte done = 0;

/* serve_next: serving++, then CAS the next ticket's slot from t + 2 to 0;
 * a marked next ticket is released in turn. */
inline release(r)
{
	do
	:: atomic { assert(serving == r); serving++ };
	   g = r + 1;
	   atomic {
		if
#ifndef BROKEN_NO_SKIP
		:: mark[(r + 1) % SLOTS] == r + 2 ->
			mark[(r + 1) % SLOTS] = 0;
			r++
#endif
		:: else -> r = 255
		fi
	   };
	   if
	   :: r == 255 -> break
	   :: else
	   fi
	od
}

/* ticket_leave + mark_settle for ticket t (not served yet, as far as the
 * timed-out waiter knows); an abandoned ticket no release passed yet is
 * kept in ab. */
inline leave()
{
	atomic {
		if
		:: next == t + 1 -> next = t; old = 1
		:: else -> old = 0
		fi
	};
	if
	:: old == 0 ->
		atomic {
			old = mark[t % SLOTS];
			if
			:: old == 0 -> mark[t % SLOTS] = t + 1
			:: else
			fi
		};
		/* the slot is free: at most NPROC tickets are outstanding */
		assert(old == 0);
#ifdef BROKEN_NO_SETTLE
		ab = t + 1;
#else
		/* mark_settle: serving at t takes the mark back (or finds it
		 * released past); the ticket is kept only while serving is
		 * below it */
		atomic { s = serving };
		g = s;
		if
		:: s == t ->
			atomic {
				if
				:: mark[t % SLOTS] == t + 1 ->
					mark[t % SLOTS] = 0; got = 1
				:: else
				fi
			}
		:: s < t -> ab = t + 1
		:: else
		fi
#endif
	:: else
	fi
}

/* global_acquire: reclaim this node's abandoned ticket if it is still
 * marked (CAS its slot back to 0), else FAA next; wait (or time out). */
inline lock()
{
	old = 0;
#ifndef BROKEN_NO_RECLAIM
	if
	:: ab != 0 ->
		atomic {
			if
			:: mark[(ab - 1) % SLOTS] == ab ->
				mark[(ab - 1) % SLOTS] = 0; old = 1
			:: else
			fi
		};
		t = ab - 1
	:: else
	fi;
#endif
	ab = 0;
	if
	:: old == 0 ->
		atomic { t = next; next++; assert(next - serving <= NPROC) }
	:: else
	fi;
	if
	:: g == t -> got = 1
	:: else ->
		do
		:: atomic { s = serving };
		   g = s;
		   if
		   :: s == t -> got = 1; break
		   :: else
		   fi
		:: break
		od;
		if
		:: !got -> leave()
		:: else
		fi
	fi
}

/* global_try: CAS next from the seen value; if stale, READ serving and
 * CAS once more. */
inline trylock()
{
	atomic {
		old = next;
		if
		:: next == g -> next = g + 1
		:: else
		fi
	};
	if
	:: old == g -> t = g; got = 1; ab = 0
	:: else ->
		atomic { s = serving };
		g = s;
		if
		:: s == old ->
			atomic {
				old = next;
				if
				:: next == s -> next = s + 1
				:: else
				fi
			};
			if
			:: old == s -> t = s; got = 1; ab = 0
			:: else
			fi
		:: else
		fi
	fi
}

proctype node()
{
	byte t, s, old, r, g = 0, k = 0, ab = 0;
	bit got;
	do
	:: k < NITER ->
		got = 0;
		if
		:: lock()
		:: trylock()
		fi;
		if
		:: got ->
			in_cs++;
			assert(in_cs == 1);
			in_cs--;
			r = t;
			release(r)
		:: else
		fi;
		k++
	:: else -> break
	od;
	done++
}

init
{
	byte i;
	atomic {
		for (i : 1 .. NPROC) {
			run node()
		}
	};
	done == NPROC;
	assert(serving == next);
	for (i : 0 .. SLOTS - 1) {
		assert(mark[i] == 0)
	}
}
