/* SPDX-License-Identifier: MIT */
/* ThreadSanitizer and liburcu: liburcu is not instrumented, so TSan sees
 * neither the publication of a node (rcu_assign_pointer inside cds_lfht)
 * nor the grace period before its reclamation. Users of cds_lfht state
 * both edges on the node's address: the writer releases before
 * publishing, a reader acquires before its first read of the node and
 * releases after its last, the reclaimer acquires before freeing. Outside
 * TSan builds the macros are nothing.
 *
 * Inside liburcu its own threads (call_rcu, the resize workqueue) hand
 * memory to each other with futexes and uatomic asm that TSan cannot see
 * either: the default suppressions ignore the allocator calls the library
 * makes itself (ours, such as a reclaimer's free, stay checked). The
 * definition is weak: every object that includes this may carry it. */
#ifndef LOCO_APPS_RCU_TSAN_H
#define LOCO_APPS_RCU_TSAN_H

#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define tsan_acquire(p) __tsan_acquire(p)
#define tsan_release(p) __tsan_release(p)

const char *__tsan_default_suppressions(void);
__attribute__((weak)) const char *__tsan_default_suppressions(void)
{
	return "called_from_lib:liburcu.so\n"
	       "called_from_lib:liburcu-cds.so\n";
}
#else
#define tsan_acquire(p) ((void)(p))
#define tsan_release(p) ((void)(p))
#endif

#endif
