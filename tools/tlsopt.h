/* The TLS options both commands take, `hilock` (tools/hilock.c) and
 * `hilock inspect` (tools/inspect.c): long only, each with its environment
 * variable, into a hilock_config's tls_* fields. */
#ifndef HILOCK_TOOLS_TLSOPT_H
#define HILOCK_TOOLS_TLSOPT_H

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "hilock/hilock.h"

enum { OPT_CACERT = 256, OPT_CAPATH, OPT_CERT, OPT_KEY, OPT_SNI, OPT_INSECURE };

/* Entries of a struct option array. */
#define TLS_LONGOPTS                                           \
    { "cacert", required_argument, NULL, OPT_CACERT },         \
    { "capath", required_argument, NULL, OPT_CAPATH },         \
    { "cert", required_argument, NULL, OPT_CERT },             \
    { "key", required_argument, NULL, OPT_KEY },               \
    { "sni", required_argument, NULL, OPT_SNI },               \
    { "insecure", no_argument, NULL, OPT_INSECURE }

/* getopt_long's opt (with its arg) into cfg, if it is one of the above:
 * 1, else 0. */
static inline int tls_option(hilock_config *cfg, int opt, const char *arg) {
    switch (opt) {
    case OPT_CACERT: cfg->tls_ca_file = arg; return 1;
    case OPT_CAPATH: cfg->tls_ca_dir = arg; return 1;
    case OPT_CERT: cfg->tls_cert_file = arg; return 1;
    case OPT_KEY: cfg->tls_key_file = arg; return 1;
    case OPT_SNI: cfg->tls_server_name = arg; return 1;
    case OPT_INSECURE: cfg->tls_insecure = 1; return 1;
    default: return 0;
    }
}

/* The environment's value of name; an empty variable is unset. */
static inline const char *tls_env(const char *name) {
    const char *v = getenv(name);
    return v != NULL && *v ? v : NULL;
}

/* cfg's tls_* from $HILOCK_CACERT, $HILOCK_CAPATH, $HILOCK_CERT,
 * $HILOCK_KEY, $HILOCK_SNI and $HILOCK_INSECURE (set, not 0): the
 * defaults that the options override. */
static inline void tls_from_env(hilock_config *cfg) {
    const char *insecure = tls_env("HILOCK_INSECURE");
    cfg->tls_ca_file = tls_env("HILOCK_CACERT");
    cfg->tls_ca_dir = tls_env("HILOCK_CAPATH");
    cfg->tls_cert_file = tls_env("HILOCK_CERT");
    cfg->tls_key_file = tls_env("HILOCK_KEY");
    cfg->tls_server_name = tls_env("HILOCK_SNI");
    cfg->tls_insecure = insecure != NULL && strcmp(insecure, "0") != 0;
}

#endif
