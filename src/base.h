/* What every layer of the library shares: the public header, intrusive
 * lists, container_of, the monotonic clock. Nothing here knows Redis. */
#ifndef HILOCK_BASE_H
#define HILOCK_BASE_H

#include <stddef.h>
#include <stdint.h>
#include "hilock/hilock.h"

#define HL_CONTAINER(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Intrusive doubly linked list: circular, with a sentinel. */
typedef struct hl_link {
    struct hl_link *prev, *next;
} hl_link;

static inline void hl_list_init(hl_link *l) { l->prev = l->next = l; }
static inline int hl_list_empty(const hl_link *l) { return l->next == l; }
static inline int hl_linked(const hl_link *n) { return n->next != NULL && n->next != n; }
static inline void hl_list_push(hl_link *l, hl_link *n) {
    n->prev = l->prev; n->next = l;
    l->prev->next = n; l->prev = n;
}
static inline void hl_list_push_head(hl_link *l, hl_link *n) {
    n->next = l->next; n->prev = l;
    l->next->prev = n; l->next = n;
}
static inline void hl_list_remove(hl_link *n) {
    n->prev->next = n->next; n->next->prev = n->prev;
    n->prev = n->next = n;
}

/* Monotonic milliseconds. */
uint64_t hl_now_ms(void);
/* Monotonic microseconds (for the statistics' histograms). */
uint64_t hl_now_us(void);
/* Monotonic milliseconds, cheaper and up to a few ms late (for checks of
 * hundreds of ms made on every request). */
uint64_t hl_now_coarse_ms(void);

#endif
