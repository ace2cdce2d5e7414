/* Inside the core: what names.c and hold.c need of the waiter engine. */
#ifndef HILOCK_ENGINE_H
#define HILOCK_ENGINE_H
#include "core/core.h"
/* Set a new name's timers. */
void hl_engine_name_init(hl_name *n);
/* A release message, a subscription ack or a timer: the head may try. */
void hl_engine_kick(hl_name *n);
#endif
