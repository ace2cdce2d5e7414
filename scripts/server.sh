# Sourced: the server's programs by HILOCK_SERVER (redis, the default, or
# valkey: `make test SERVER=valkey`, `make bench SERVER=valkey`), and the
# packages that provide them.
case ${HILOCK_SERVER:-redis} in
valkey)
    SERVER_BIN=valkey-server CLI_BIN=valkey-cli BENCHMARK_BIN=valkey-benchmark
    SERVER_PKGS="valkey-server valkey-tools (sh scripts/deps.sh --valkey)" ;;
*)
    SERVER_BIN=redis-server CLI_BIN=redis-cli BENCHMARK_BIN=redis-benchmark
    SERVER_PKGS="redis-server redis-tools" ;;
esac
