/* The timer heap (heap.c): used by loop.c only. */
#ifndef HILOCK_HEAP_H
#define HILOCK_HEAP_H
#include "loop/loop.h"
void hl_heap_insert(hl_timer **root, hl_timer *t);
void hl_heap_remove(hl_timer **root, hl_timer *t);
#endif
