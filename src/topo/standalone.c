/* The standalone topology: one Redis server serves every slot. */
#include "topo/topo.h"

static hl_node *standalone_route(hl_topo *t, uint16_t slot) {
    (void)slot;
    return HL_CONTAINER(t->nodes.next, hl_node, link);
}

static const hl_topo_ops standalone_ops = {standalone_route};

int hl_topo_standalone(hl_topo *t, const hl_sub_events *sub) {
    t->ops = &standalone_ops;
    t->sub = *sub;
    hl_node *n = hl_node_new(t);
    if (n == NULL) return HILOCK_ENOMEM;
    hl_conn_connect(&n->cmd);
    hl_conn_connect(&n->sub);
    return 0;
}
