/* SPDX-License-Identifier: MIT */
/* The global protocol of channels/ticket_lock.c: tickets, the seen hint,
 * trylock, timeouts that give the last ticket back or mark it abandoned in
 * the skip table, the settle step, and releases that skip marked tickets.
 * Every remote atomic (FAA, CAS, READ of one word at the host) is one
 * atomic step; the FAA and CAS of a release are two steps (other nodes'
 * atomics may land between them). The node-local layer (local queue and
 * handovers, under a mutex) is not modelled: it only ever lets one thread
 * per node run this protocol.
 *
 * NPROC nodes make NITER attempts each, every one a lock or a trylock; a
 * waiting lock may time out at any step. SLOTS skip slots (1: a second
 * abandoned ticket finds the slot busy).
 *
 * Checked (pan -DSAFETY):
 *   exclusion   at most one node in the section;
 *   release     a release finds serving equal to the ticket it releases;
 *   no wedge    when every node is done, serving == next (the lock is
 *               free) and every skip slot is clear.
 *
 * Broken variants, each must fail:
 *   -DBROKEN_NO_SETTLE   after marking its ticket, a timed-out attempt
 *      does not check whether it was served meanwhile: a release that
 *      served it before the mark landed leaves the lock with nobody;
 *   -DBROKEN_NO_SKIP     a release only increments serving (no CAS of the
 *      next ticket's slot): an abandoned ticket is served to nobody. */

#ifndef NPROC
#define NPROC 3
#endif
#ifndef NITER
#define NITER 2
#endif
#ifndef SLOTS
#define SLOTS 2
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
 * timed-out waiter knows). */
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
		do
		:: atomic {
			old = mark[t % SLOTS];
			if
			:: old == 0 -> mark[t % SLOTS] = t + 1
			:: else
			fi
		   };
		   if
		   :: old == 0 ->
#ifndef BROKEN_NO_SETTLE
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
			:: else
			fi;
#endif
			break
		   :: else ->
			/* slot busy: wait to be served, then try again */
			atomic { s = serving };
			g = s;
			if
			:: s == t -> got = 1; break
			:: else
			fi
		   fi
		od
	:: else
	fi
}

/* global_acquire: FAA next, wait (or time out). */
inline lock()
{
	atomic { t = next; next++ };
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
	:: old == g -> t = g; got = 1
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
			:: old == s -> t = s; got = 1
			:: else
			fi
		:: else
		fi
	fi
}

proctype node()
{
	byte t, s, old, r, g = 0, k = 0;
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
