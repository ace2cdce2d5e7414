/* The timer heap: a pairing heap of intrusive nodes. Insert is O(1), the
 * minimum is the root, removing any node is O(log n) amortised, and no
 * operation allocates, so starting a timer (a hold's watchdog, say) cannot
 * fail for want of memory.
 *
 * Each node keeps its first child, its next sibling, and `prev`: the
 * previous sibling, or the parent for a first child (NULL for the root). */
#include "loop/heap.h"

static hl_timer *meld(hl_timer *a, hl_timer *b) {
    if (a == NULL) return b;
    if (b == NULL) return a;
    if (b->when < a->when) { hl_timer *t = a; a = b; b = t; }
    b->prev = a;
    b->next = a->child;
    if (a->child) a->child->prev = b;
    a->child = b;
    return a;
}

/* Two-pass pairing of a sibling list, without recursion (100,000 waiters'
 * deadlines may all be siblings): pair left to right, then meld the pairs
 * right to left. */
static hl_timer *merge_siblings(hl_timer *first) {
    hl_timer *pairs = NULL;
    while (first != NULL) {
        hl_timer *a = first, *b = a->next;
        first = b ? b->next : NULL;
        a->next = a->prev = NULL;
        if (b) b->next = b->prev = NULL;
        hl_timer *m = meld(a, b);
        m->next = pairs; /* a stack of pairs, through `next` */
        pairs = m;
    }
    hl_timer *root = NULL;
    while (pairs != NULL) {
        hl_timer *m = pairs;
        pairs = m->next;
        m->next = NULL;
        root = meld(root, m);
    }
    if (root) root->prev = NULL;
    return root;
}

void hl_heap_insert(hl_timer **root, hl_timer *t) {
    t->child = t->next = t->prev = NULL;
    *root = meld(*root, t);
}

void hl_heap_remove(hl_timer **root, hl_timer *t) {
    hl_timer *sub = merge_siblings(t->child);
    if (t == *root) {
        *root = sub;
    } else {
        /* Unlink t from its siblings (or from its parent, if first child). */
        if (t->prev->child == t) t->prev->child = t->next;
        else t->prev->next = t->next;
        if (t->next) t->next->prev = t->prev;
        *root = meld(*root, sub);
    }
    t->child = t->next = t->prev = NULL;
}
