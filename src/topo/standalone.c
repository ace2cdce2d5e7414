/* The standalone topology: one Redis server serves every slot. */
#include "topo/topo.h"

static hl_node *standalone_route(hl_topo *t, uint16_t slot) {
    (void)slot;
    return t->seed;
}

static const hl_topo_ops standalone_ops = {standalone_route, standalone_route, NULL, NULL, NULL, NULL};

int hl_topo_standalone(hl_topo *t, const hl_sub_events *sub) {
    const hl_url *u = &t->net.url;
    hl_addr a = {u->host, u->port, u->path};
    t->ops = &standalone_ops;
    t->sub = *sub;
    if ((t->seed = hl_node_new(t, &a)) == NULL) return HILOCK_ENOMEM;
    hl_conn_connect(&t->seed->cmd);
    hl_conn_connect(&t->seed->sub);
    return 0;
}
