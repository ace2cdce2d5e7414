/* Unit tests for src/keys.c: key names, hash tags, CRC16 and the cluster slot.
 * The last tests check hilock_key_slot against a real redis-server in
 * cluster mode (CLUSTER KEYSLOT). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "support/harness.h"

/* ---- helpers ------------------------------------------------------------- */

static unsigned slot_of(const char *s) { return hilock_key_slot(s, strlen(s)); }

/* Deterministic pseudo-random numbers (xorshift64*). */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* A random name of 1..maxlen bytes drawn mostly from an alphabet rich in the
 * characters that matter ('{', '}', '%', ':'), sometimes any non-NUL byte. */
static size_t random_name(char *out, size_t maxlen) {
    static const char alpha[] = "{}%:ab{}%7BD5}{x";
    size_t len = 1 + (size_t)(rnd() % maxlen);
    for (size_t i = 0; i < len; i++) {
        uint64_t r = rnd();
        if (r % 8 == 0)
            out[i] = (char)(1 + (r >> 8) % 255);     /* any byte but NUL */
        else
            out[i] = alpha[(r >> 8) % (sizeof(alpha) - 1)];
    }
    out[len] = '\0';
    return len;
}

/* Names that exercise the hash-tag rule. */
static const char *const tricky[] = {
    "a", "foo", "orders:42", "user1000", "{", "}", "{}", "}{", "{{", "}}",
    "{a}", "a{b}c", "{a}{b}", "x}", "}x", "x{", "{x", "%", "%%", "%7B", "%7D",
    "%25", "%7b", "a%7Bb", "{%}", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
    "{user1000}.following", "{user1000}.followers", "hilock:{x}", ":fence", ":ch",
    "x}:fence", "x{:ch", " ", "\t\n", "\xff\xfe{\x80}", "caf\xc3\xa9", "a b c",
};
#define NTRICKY (sizeof(tricky) / sizeof(tricky[0]))

/* Check the three keys of `name` share one slot, and that slot is the one of
 * the tag alone. Returns the key's length. */
static int check_same_slot(const char *prefix, const char *name) {
    char key[HILOCK_PREFIX_MAX + 3 * HILOCK_NAME_MAX + 16];
    char other[sizeof(key) + 16];
    int n = hilock_key(prefix, name, key, sizeof(key));
    cr_assert_gt(n, 0, "hilock_key(%s) failed: %d", name, n);
    cr_assert_eq((size_t)n, strlen(key));
    unsigned s = slot_of(key);
    cr_assert_lt(s, 16384u);
    snprintf(other, sizeof(other), "%s:fence", key);
    cr_assert_eq(slot_of(other), s, "fence key of '%s' in another slot", name);
    snprintf(other, sizeof(other), "%s:ch", key);
    cr_assert_eq(slot_of(other), s, "channel of '%s' in another slot", name);
    snprintf(other, sizeof(other), "%s:q", key);
    cr_assert_eq(slot_of(other), s);
    snprintf(other, sizeof(other), "%s:w", key);
    cr_assert_eq(slot_of(other), s);

    /* The tag is exactly the escaped name: brace-free and non-empty. */
    const char *open = strchr(key, '{');
    cr_assert_not_null(open, "no '{' in key '%s'", key);
    const char *close = strchr(open + 1, '}');
    cr_assert_not_null(close);
    cr_assert_eq(close[1], '\0', "key '%s' does not end at its tag", key);
    size_t tlen = (size_t)(close - open - 1);
    cr_assert_gt(tlen, 0u);
    cr_assert_eq(tlen, hl_tag_len(name, strlen(name)));
    cr_assert_eq(s, hl_crc16(open + 1, tlen) & 16383u);
    return n;
}

/* Undo the escaping of a tag; -1 if it is not a valid encoding. */
static int unescape_tag(const char *t, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '{' || t[i] == '}') return -1;
        if (t[i] == '%') {
            if (i + 2 >= n) return -1;
            if (strncmp(t + i, "%25", 3) == 0) out[k++] = '%';
            else if (strncmp(t + i, "%7B", 3) == 0) out[k++] = '{';
            else if (strncmp(t + i, "%7D", 3) == 0) out[k++] = '}';
            else return -1;
            i += 2;
        } else {
            out[k++] = t[i];
        }
    }
    out[k] = '\0';
    return (int)k;
}

/* ---- CRC16 and slots: known vectors --------------------------------------- */

Test(keys, crc16_vector) {
    cr_assert_eq(hl_crc16("123456789", 9), 0x31C3);
    cr_assert_eq(hl_crc16("", 0), 0);
    /* Bytes >= 0x80 must not sign-extend. */
    cr_assert_eq(hl_crc16("\xff", 1), 0x1EF0);
}

Test(keys, slot_vectors) {
    cr_assert_eq(slot_of("foo"), 12182u);
    cr_assert_eq(slot_of("bar"), 5061u);
    cr_assert_eq(slot_of("hello"), 866u);
    cr_assert_eq(slot_of("123456789"), 0x31C3u & 16383u);
    cr_assert_eq(hilock_key_slot("", 0), 0u);
}

Test(keys, slot_hash_tags) {
    unsigned u = slot_of("user1000");
    cr_assert_eq(slot_of("{user1000}.following"), u);
    cr_assert_eq(slot_of("{user1000}.followers"), u);
    cr_assert_eq(slot_of("foo{user1000}"), u);
    /* Empty tag: the whole key is hashed. */
    cr_assert_eq(slot_of("foo{}{bar}"), hl_crc16("foo{}{bar}", 10) & 16383u);
    cr_assert_neq(slot_of("foo{}{bar}"), slot_of("bar"));
    /* The tag runs from the first '{' to the next '}'. */
    cr_assert_eq(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    cr_assert_eq(slot_of("foo{{bar}}zap"), hl_crc16("{bar", 4) & 16383u);
    cr_assert_eq(slot_of("foo{bar}{zap}"), slot_of("bar"));
    /* No closing brace, or a '}' before the '{': the whole key. */
    cr_assert_eq(slot_of("foo{bar"), hl_crc16("foo{bar", 7) & 16383u);
    cr_assert_eq(slot_of("}foo{bar}"), slot_of("bar"));
    cr_assert_eq(slot_of("}{"), hl_crc16("}{", 2) & 16383u);
    /* The length is honoured (no NUL needed, embedded NULs hashed). */
    cr_assert_eq(hilock_key_slot("foobar", 3), 12182u);
    cr_assert_eq(hilock_key_slot("{a\0b}", 5), hl_crc16("a\0b", 3) & 16383u);
    cr_assert_eq(hilock_key_slot("{ab}", 3), hl_crc16("{ab", 3) & 16383u);
}

/* ---- Key format ---------------------------------------------------------- */

Test(keys, format_default_and_custom_prefix) {
    char buf[256];
    cr_assert_eq(hilock_key(NULL, "orders", buf, sizeof(buf)), 15);
    cr_assert_str_eq(buf, "hilock:{orders}");
    cr_assert_eq(hilock_key("app:", "x", buf, sizeof(buf)), 7);
    cr_assert_str_eq(buf, "app:{x}");
    cr_assert_eq(hilock_key("", "x", buf, sizeof(buf)), 3);
    cr_assert_str_eq(buf, "{x}");
    cr_assert_eq(hilock_key("a b%:", "y", buf, sizeof(buf)), 8);
    cr_assert_str_eq(buf, "a b%:{y}");
}

Test(keys, format_escapes) {
    char buf[256];
    cr_assert_gt(hilock_key(NULL, "a{b}c%", buf, sizeof(buf)), 0);
    cr_assert_str_eq(buf, "hilock:{a%7Bb%7Dc%25}");
    cr_assert_gt(hilock_key(NULL, "{}", buf, sizeof(buf)), 0);
    cr_assert_str_eq(buf, "hilock:{%7B%7D}");
    cr_assert_gt(hilock_key(NULL, "}", buf, sizeof(buf)), 0);
    cr_assert_str_eq(buf, "hilock:{%7D}");
    cr_assert_gt(hilock_key(NULL, "%7B", buf, sizeof(buf)), 0);
    cr_assert_str_eq(buf, "hilock:{%257B}");
    cr_assert_gt(hilock_key(NULL, "caf\xc3\xa9", buf, sizeof(buf)), 0);
    cr_assert_str_eq(buf, "hilock:{caf\xc3\xa9}");
}

Test(keys, tag_len_and_key_write_agree) {
    for (size_t i = 0; i < NTRICKY; i++) {
        const char *name = tricky[i];
        size_t len = strlen(name);
        size_t tl = hl_tag_len(name, len);
        size_t esc = 0;
        for (size_t k = 0; k < len; k++)
            esc += (name[k] == '{' || name[k] == '}' || name[k] == '%');
        cr_assert_eq(tl, len + 2 * esc, "hl_tag_len('%s')", name);

        char out[512], viapub[512];
        /* Poison, to catch a missing NUL or an overrun past plen+2+tl+1. */
        memset(out, 'Z', sizeof(out));
        size_t n = hl_key_write(out, "pre:", 4, name, len);
        cr_assert_eq(n, 4 + 2 + tl);
        cr_assert_eq(out[n], '\0');
        cr_assert_eq(out[n + 1], 'Z');
        cr_assert_eq(strlen(out), n);
        cr_assert_eq(hilock_key("pre:", name, viapub, sizeof(viapub)), (int)n);
        cr_assert_str_eq(out, viapub);
    }
}

/* ---- The slot rule for every name ---------------------------------------- */

Test(keys, same_slot_tricky_names) {
    for (size_t i = 0; i < NTRICKY; i++) {
        check_same_slot(NULL, tricky[i]);
        check_same_slot("app:", tricky[i]);
        check_same_slot("", tricky[i]);
    }
}

Test(keys, same_slot_random_names) {
    char name[80];
    for (int i = 0; i < 5000; i++) {
        random_name(name, sizeof(name) - 1);
        check_same_slot(i % 2 ? "hilock:" : "x", name);
    }
}

Test(keys, same_slot_long_names) {
    static char name[HILOCK_NAME_MAX + 1];
    memset(name, '{', HILOCK_NAME_MAX);
    name[HILOCK_NAME_MAX] = '\0';
    check_same_slot(NULL, name);
    memset(name, '}', HILOCK_NAME_MAX);
    check_same_slot(NULL, name);
    for (size_t i = 0; i < HILOCK_NAME_MAX; i++) name[i] = "%}{a"[i % 4];
    check_same_slot(NULL, name);
}

/* ---- Injectivity ----------------------------------------------------------- */

Test(keys, tag_decodes_to_name) {
    char name[80], key[512], back[512];
    for (int i = 0; i < 5000; i++) {
        size_t len = random_name(name, sizeof(name) - 1);
        int n = hilock_key("p:", name, key, sizeof(key));
        cr_assert_gt(n, 0);
        cr_assert_eq(strncmp(key, "p:{", 3), 0);
        cr_assert_eq(key[n - 1], '}');
        int k = unescape_tag(key + 3, (size_t)n - 4, back);
        cr_assert_eq(k, (int)len, "key '%s' does not decode", key);
        cr_assert_eq(memcmp(back, name, len), 0, "key '%s' decodes to another name", key);
    }
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

Test(keys, distinct_names_distinct_keys) {
    enum { N = 4000 };
    char **names = calloc(N + NTRICKY, sizeof(char *));
    char **keys = calloc(N + NTRICKY, sizeof(char *));
    cr_assert(names && keys);
    size_t n = 0;
    for (size_t i = 0; i < NTRICKY; i++) names[n++] = strdup(tricky[i]);
    char buf[64];
    for (int i = 0; i < N; i++) {
        random_name(buf, 12); /* short: many near-collisions */
        names[n++] = strdup(buf);
    }
    /* Unique names only. */
    qsort(names, n, sizeof(char *), cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u > 0 && strcmp(names[u - 1], names[i]) == 0) { free(names[i]); continue; }
        names[u++] = names[i];
    }
    cr_assert_gt(u, 1000u);
    for (size_t i = 0; i < u; i++) {
        char key[256];
        cr_assert_gt(hilock_key(NULL, names[i], key, sizeof(key)), 0);
        keys[i] = strdup(key);
    }
    qsort(keys, u, sizeof(char *), cmp_str);
    for (size_t i = 1; i < u; i++)
        cr_assert_str_neq(keys[i - 1], keys[i], "two names share key '%s'", keys[i]);
    /* Hand-picked near-collisions. */
    char a[64], b[64];
    static const char *const pairs[][2] = {
        {"{", "%7B"}, {"}", "%7D"}, {"%", "%25"}, {"a{b", "a%7Bb"}, {"{}", "%7B%7D"},
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        cr_assert_gt(hilock_key(NULL, pairs[i][0], a, sizeof(a)), 0);
        cr_assert_gt(hilock_key(NULL, pairs[i][1], b, sizeof(b)), 0);
        cr_assert_str_neq(a, b);
    }
    for (size_t i = 0; i < u; i++) { free(names[i]); free(keys[i]); }
    free(names);
    free(keys);
}

/* ---- Rejections ------------------------------------------------------------ */

Test(keys, prefix_validation) {
    char buf[2048];
    cr_assert(hl_prefix_valid(""));
    cr_assert(hl_prefix_valid("hilock:"));
    cr_assert(hl_prefix_valid("a:b%c d"));
    static const char *const bad[] = {"{", "}", "a{", "a}b", "{x}", "x:{", "}{"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_not(hl_prefix_valid(bad[i]), "prefix '%s' accepted", bad[i]);
        cr_assert_eq(hilock_key(bad[i], "x", buf, sizeof(buf)), HILOCK_EINVAL,
                     "hilock_key accepted prefix '%s'", bad[i]);
    }
    char p[HILOCK_PREFIX_MAX + 2];
    memset(p, 'p', HILOCK_PREFIX_MAX);
    p[HILOCK_PREFIX_MAX] = '\0';
    cr_assert(hl_prefix_valid(p));
    cr_assert_eq(hilock_key(p, "x", buf, sizeof(buf)), HILOCK_PREFIX_MAX + 3);
    p[HILOCK_PREFIX_MAX] = 'p';
    p[HILOCK_PREFIX_MAX + 1] = '\0';
    cr_assert_not(hl_prefix_valid(p));
    cr_assert_eq(hilock_key(p, "x", buf, sizeof(buf)), HILOCK_EINVAL);
}

Test(keys, name_validation) {
    static char buf[HILOCK_PREFIX_MAX + 3 * HILOCK_NAME_MAX + 16];
    static char name[HILOCK_NAME_MAX + 2];
    cr_assert_eq(hilock_key(NULL, NULL, buf, sizeof(buf)), HILOCK_EINVAL);
    cr_assert_eq(hilock_key(NULL, "", buf, sizeof(buf)), HILOCK_EINVAL);
    memset(name, 'n', HILOCK_NAME_MAX);
    name[HILOCK_NAME_MAX] = '\0';
    cr_assert_eq(hilock_key(NULL, name, buf, sizeof(buf)), 7 + 2 + HILOCK_NAME_MAX);
    memset(name, '{', HILOCK_NAME_MAX);
    cr_assert_eq(hilock_key(NULL, name, buf, sizeof(buf)), 7 + 2 + 3 * HILOCK_NAME_MAX);
    name[HILOCK_NAME_MAX] = 'n';
    name[HILOCK_NAME_MAX + 1] = '\0';
    cr_assert_eq(hilock_key(NULL, name, buf, sizeof(buf)), HILOCK_EINVAL);
}

Test(keys, buffer_validation) {
    char buf[64];
    cr_assert_eq(hilock_key(NULL, "x", NULL, 0), HILOCK_EINVAL);
    cr_assert_eq(hilock_key(NULL, "x", NULL, 64), HILOCK_EINVAL);
    /* "hilock:{x}" is 10 bytes + NUL. */
    memset(buf, 'Z', sizeof(buf));
    cr_assert_eq(hilock_key(NULL, "x", buf, 10), HILOCK_EINVAL);
    cr_assert_eq(hilock_key(NULL, "x", buf, 0), HILOCK_EINVAL);
    cr_assert_eq(hilock_key(NULL, "x", buf, 1), HILOCK_EINVAL);
    cr_assert_eq(buf[0], 'Z', "a rejected call wrote into the buffer");
    cr_assert_eq(hilock_key(NULL, "x", buf, 11), 10);
    cr_assert_str_eq(buf, "hilock:{x}");
    cr_assert_eq(buf[11], 'Z');
    /* Escapes count: "hilock:{%7B}" is 12 bytes + NUL. */
    cr_assert_eq(hilock_key(NULL, "{", buf, 12), HILOCK_EINVAL);
    cr_assert_eq(hilock_key(NULL, "{", buf, 13), 12);
    cr_assert_str_eq(buf, "hilock:{%7B}");
}

/* ---- Against a real server: CLUSTER KEYSLOT -------------------------------- */

static test_redis cluster;

static void cluster_start(void) {
    cr_assert_eq(test_redis_start(&cluster, 0, "--cluster-enabled", "yes",
                                  "--cluster-config-file", "nodes.conf", NULL), 0,
                 "could not start redis-server in cluster mode");
}

static void cluster_stop(void) { test_redis_stop(&cluster); }

/* Pipeline CLUSTER KEYSLOT for every key and compare with hilock_key_slot. */
static void compare_slots(redisContext *c, char **keys, size_t *lens, size_t n) {
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(redisAppendCommand(c, "CLUSTER KEYSLOT %b", keys[i], lens[i]), REDIS_OK);
    for (size_t i = 0; i < n; i++) {
        void *rv = NULL;
        cr_assert_eq(redisGetReply(c, &rv), REDIS_OK, "redis: %s", c->errstr);
        redisReply *rep = rv;
        cr_assert_eq(rep->type, REDIS_REPLY_INTEGER, "CLUSTER KEYSLOT: %s",
                     rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
        unsigned mine = hilock_key_slot(keys[i], lens[i]);
        cr_assert_eq((unsigned)rep->integer, mine, "slot of key #%zu '%.*s': redis %lld, hilock %u",
                     i, (int)lens[i], keys[i], rep->integer, mine);
        freeReplyObject(rep);
    }
}

Test(keys, cluster_keyslot_matches_server, .init = cluster_start, .fini = cluster_stop,
     .timeout = 60) {
    redisContext *c = test_redis_connect(&cluster);
    cr_assert_not_null(c);
    enum { MAXK = 1600 };
    char **keys = calloc(MAXK, sizeof(char *));
    size_t *lens = calloc(MAXK, sizeof(size_t));
    cr_assert(keys && lens);
    size_t n = 0;
    char name[64], key[512];

    /* Raw keys, binary ones included: the slot function itself. */
    static const char *const raw[] = {
        "foo", "bar", "hello", "{user1000}.following", "{user1000}.followers",
        "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{", "}", "{}", "}{", "{{}}",
        "a{b", "a}b{c}", "", "123456789",
    };
    for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++) {
        keys[n] = strdup(raw[i]);
        lens[n++] = strlen(raw[i]);
    }
    for (int i = 0; i < 300; i++) {
        size_t len = random_name(name, 40);
        if (i % 5 == 0) name[rnd() % len] = '\0'; /* embedded NUL */
        keys[n] = malloc(len);
        memcpy(keys[n], name, len);
        lens[n++] = len;
    }
    /* hilock keys for tricky and random names, with their :fence and :ch. */
    for (size_t i = 0; i < NTRICKY + 300; i++) {
        const char *nm = i < NTRICKY ? tricky[i] : (random_name(name, 40), name);
        int kl = hilock_key(NULL, nm, key, sizeof(key) - 8);
        cr_assert_gt(kl, 0);
        static const char *const sfx[] = {"", ":fence", ":ch"};
        for (int s = 0; s < 3; s++) {
            char full[520];
            int fl = snprintf(full, sizeof(full), "%s%s", key, sfx[s]);
            keys[n] = strdup(full);
            lens[n++] = (size_t)fl;
        }
        cr_assert_lt(n, (size_t)MAXK);
    }
    compare_slots(c, keys, lens, n);
    for (size_t i = 0; i < n; i++) free(keys[i]);
    free(keys);
    free(lens);
    redisFree(c);
}
