/* The primitives: each is a set of scripts (src/prim/lua) and an hl_prim
 * for the waiter engine. Today: the mutex and the read-write lock. */
#ifndef HILOCK_PRIM_H
#define HILOCK_PRIM_H
#include "core/core.h"

extern const hl_prim hl_mutex;
extern const hl_script hl_script_mutex_acquire, hl_script_mutex_release,
    hl_script_mutex_renew, hl_script_mutex_break, hl_script_mutex_fence;
extern const hl_prim hl_rwlock;
extern const hl_script hl_script_rw_acquire, hl_script_rw_release, hl_script_rw_renew;

#endif
