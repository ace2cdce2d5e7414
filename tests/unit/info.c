/* Unit tests for the pub/sub choice from a server's INFO (src/net/conn.c):
 * hl_info_sharded_pubsub. */
#include <criterion/criterion.h>

#include "net/net.h"

#define REDIS_7 "# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\n"
#define CLUSTER "# Cluster\r\ncluster_enabled:1\r\n"
#define STANDALONE "# Cluster\r\ncluster_enabled:0\r\n"

Test(unit_info, redis_7_cluster_takes_sharded_pubsub) {
    cr_assert(hl_info_sharded_pubsub(REDIS_7 CLUSTER));
    cr_assert(hl_info_sharded_pubsub("redis_version:7.2.0\r\ncluster_enabled:1\r\n"), "first line");
}

Test(unit_info, redis_6_or_a_standalone_server_does_not) {
    cr_assert_not(hl_info_sharded_pubsub("# Server\r\nredis_version:6.2.14\r\n" CLUSTER));
    cr_assert_not(hl_info_sharded_pubsub(REDIS_7 STANDALONE));
    cr_assert_not(hl_info_sharded_pubsub(REDIS_7), "no cluster section");
    cr_assert_not(hl_info_sharded_pubsub(""));
}

Test(unit_info, valkey_by_either_version) {
    /* Valkey 8: both lines, the Redis one its compatibility version */
    cr_assert(hl_info_sharded_pubsub("# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n"
                                     "valkey_version:8.0.1\r\n" CLUSTER));
    /* a later Valkey that reports its own version alone */
    cr_assert(hl_info_sharded_pubsub("# Server\r\nserver_name:valkey\r\nvalkey_version:9.0.0\r\n" CLUSTER));
    cr_assert_not(hl_info_sharded_pubsub("# Server\r\nvalkey_version:9.0.0\r\n" STANDALONE));
}

Test(unit_info, fields_are_whole_lines) {
    /* a field whose name ends with another's is not it */
    cr_assert_not(hl_info_sharded_pubsub("# Server\r\nold_redis_version:7.0.0\r\nredis_version:6.0.0\r\n" CLUSTER));
    cr_assert_not(hl_info_sharded_pubsub(REDIS_7 "x_cluster_enabled:1\r\n"));
}
