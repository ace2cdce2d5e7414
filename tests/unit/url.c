/* Unit tests for src/url.c: hl_url_parse / hl_url_free. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "net/net.h"

static void expect_tcp(const char *s, const char *host, int port, int db,
                       const char *user, const char *pass) {
    hl_url u;
    int rc = hl_url_parse(s, &u);
    cr_assert_eq(rc, 0, "'%s' rejected (%d)", s ? s : "(null)", rc);
    cr_assert_not_null(u.host, "'%s': no host", s ? s : "(null)");
    cr_assert_str_eq(u.host, host, "'%s': host", s ? s : "(null)");
    cr_assert_null(u.path);
    cr_assert_eq(u.port, port, "'%s': port %d, want %d", s ? s : "(null)", u.port, port);
    cr_assert_eq(u.db, db, "'%s': db %d, want %d", s ? s : "(null)", u.db, db);
    if (user) cr_assert_str_eq(u.user ? u.user : "(null)", user, "'%s': user", s);
    else cr_assert_null(u.user, "'%s': user '%s', want none", s, u.user);
    if (pass) cr_assert_str_eq(u.pass ? u.pass : "(null)", pass, "'%s': pass", s);
    else cr_assert_null(u.pass, "'%s': pass '%s', want none", s, u.pass);
    hl_url_free(&u);
    cr_assert_null(u.host);
    hl_url_free(&u); /* a freed url may be freed again */
}

static void expect_unix(const char *s, const char *path, int db) {
    hl_url u;
    int rc = hl_url_parse(s, &u);
    cr_assert_eq(rc, 0, "'%s' rejected (%d)", s, rc);
    cr_assert_null(u.host, "'%s': host set for a unix socket", s);
    cr_assert_not_null(u.path);
    cr_assert_str_eq(u.path, path);
    cr_assert_eq(u.db, db);
    cr_assert_null(u.user);
    cr_assert_null(u.pass);
    hl_url_free(&u);
}

static void expect_bad(const char *s) {
    hl_url u;
    memset(&u, 0xA5, sizeof(u)); /* garbage in: the parser must not read it */
    int rc = hl_url_parse(s, &u);
    cr_assert_eq(rc, HILOCK_EURL, "'%s' accepted (rc %d, host '%s', port %d, db %d)", s, rc,
                 rc == 0 && u.host ? u.host : "", u.port, u.db);
    /* A rejected url holds nothing, and freeing it is harmless. */
    cr_assert_null(u.host);
    cr_assert_null(u.path);
    cr_assert_null(u.user);
    cr_assert_null(u.pass);
    hl_url_free(&u);
}

Test(url, null_is_default) {
    expect_tcp(NULL, "127.0.0.1", 6379, 0, NULL, NULL);
}

Test(url, host_port_db) {
    expect_tcp("redis://host", "host", 6379, 0, NULL, NULL);
    expect_tcp("redis://localhost", "localhost", 6379, 0, NULL, NULL);
    expect_tcp("redis://127.0.0.1", "127.0.0.1", 6379, 0, NULL, NULL);
    expect_tcp("redis://host:6380", "host", 6380, 0, NULL, NULL);
    expect_tcp("redis://host:6380/3", "host", 6380, 3, NULL, NULL);
    expect_tcp("redis://host/5", "host", 6379, 5, NULL, NULL);
    expect_tcp("redis://host/", "host", 6379, 0, NULL, NULL);
    expect_tcp("redis://host:1", "host", 1, 0, NULL, NULL);
    expect_tcp("redis://host:65535", "host", 65535, 0, NULL, NULL);
    expect_tcp("redis://host:06379", "host", 6379, 0, NULL, NULL);
    expect_tcp("redis://redis.example.com:7000/15", "redis.example.com", 7000, 15, NULL, NULL);
}

Test(url, auth) {
    expect_tcp("redis://:pass@host", "host", 6379, 0, NULL, "pass");
    expect_tcp("redis://user:pass@host:1234/2", "host", 1234, 2, "user", "pass");
    expect_tcp("redis://default:s3cret@10.0.0.1", "10.0.0.1", 6379, 0, "default", "s3cret");
    /* A bare userinfo is a password, as redis-cli takes it. */
    expect_tcp("redis://secret@host", "host", 6379, 0, NULL, "secret");
    /* Empty password. */
    expect_tcp("redis://user:@host", "host", 6379, 0, "user", "");
}

Test(url, percent_decoding) {
    expect_tcp("redis://:p%40ss@host", "host", 6379, 0, NULL, "p@ss");
    expect_tcp("redis://u%3Ax:p%2Fw%3a@host:1/1", "host", 1, 1, "u:x", "p/w:");
    expect_tcp("redis://:%25%20%7e@host", "host", 6379, 0, NULL, "% ~");
    expect_tcp("redis://:%c3%A9@host", "host", 6379, 0, NULL, "\xc3\xa9");
    /* An unencoded '@' in the password: the last '@' ends the userinfo. */
    expect_tcp("redis://:p@ss@host", "host", 6379, 0, NULL, "p@ss");
}

Test(url, ipv6) {
    expect_tcp("redis://[::1]:6380", "::1", 6380, 0, NULL, NULL);
    expect_tcp("redis://[::1]", "::1", 6379, 0, NULL, NULL);
    expect_tcp("redis://[fe80::1:2]:7000/4", "fe80::1:2", 7000, 4, NULL, NULL);
    expect_tcp("redis://u:p@[::1]:6380/1", "::1", 6380, 1, "u", "p");
}

Test(url, unix_socket) {
    expect_unix("unix:///tmp/redis.sock", "/tmp/redis.sock", 0);
    expect_unix("unix:///tmp/r.sock?db=3", "/tmp/r.sock", 3);
    expect_unix("unix:///var/run/redis/redis-server.sock", "/var/run/redis/redis-server.sock", 0);
    expect_unix("unix:///tmp/a%20b.sock", "/tmp/a b.sock", 0);
}

Test(url, rejects) {
    static const char *const bad[] = {
        "", "http://x", "redis:/host", "redis:host", "rediss", "redis://",
        "redis://:6379", "redis://host:0", "redis://host:65536", "redis://host:99999999999",
        "redis://host:abc", "redis://host:", "redis://host:-1", "redis://host:+1",
        "redis://host: 1", "redis://host:6379x", "redis://host/x", "redis://host/-1",
        "redis://host/1x", "redis://host/1/2", "redis://ho st", "redis://[::1",
        "redis://[]:1", "redis://[::1]x", "redis://[::1]:", "redis://[::1]:0",
        "redis://user:pass@", "redis://user:pass@:1", "unix://", "unix://relative",
        "unix://tmp/x.sock", "unix:///tmp/x.sock?db=", "unix:///tmp/x.sock?db=x",
        "unix:///tmp/x.sock?foo=1", "unix:///tmp/x.sock?db=-1", "unix://?db=1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) expect_bad(bad[i]);
}

Test(url, rejects_bad_escapes) {
    static const char *const bad[] = {
        "redis://:%@host", "redis://:%4@host", "redis://:p%4@host", "redis://:%zz@host",
        "redis://:%g0@host", "redis://:%0g@host", "redis://:ab%@host", "redis://u%:p@host",
        "redis://:%00@host", "redis://%00:p@host", "redis://:a%00b@host",
        "unix:///tmp/%00.sock", "unix:///tmp/%zz.sock", "unix:///tmp/x%",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) expect_bad(bad[i]);
}

Test(url, reparse_after_free) {
    /* One struct reused: each parse starts clean, nothing leaks (ASan). */
    hl_url u;
    cr_assert_eq(hl_url_parse("redis://a:b@h:1/2", &u), 0);
    hl_url_free(&u);
    cr_assert_eq(hl_url_parse("unix:///s?db=1", &u), 0);
    cr_assert_null(u.host);
    cr_assert_str_eq(u.path, "/s");
    hl_url_free(&u);
    cr_assert_eq(hl_url_parse("redis://:x@h:1/x", &u), HILOCK_EURL);
    hl_url_free(&u);
}

/* MOVED and ASK error texts, as Redis Cluster writes them. */
Test(url, cluster_redirects) {
    unsigned slot;
    int ask, port;
    char host[64];
    cr_assert(hl_parse_redirect("MOVED 3999 127.0.0.1:6381", &ask, &slot, host, sizeof(host), &port));
    cr_expect(!ask);
    cr_expect_eq(slot, 3999);
    cr_expect_str_eq(host, "127.0.0.1");
    cr_expect_eq(port, 6381);
    cr_assert(hl_parse_redirect("ASK 0 ::1:7000", &ask, &slot, host, sizeof(host), &port));
    cr_expect(ask);
    cr_expect_str_eq(host, "::1"); /* IPv6: the port follows the last colon */
    cr_expect_eq(port, 7000);
    cr_expect(!hl_parse_redirect("MOVED 16384 127.0.0.1:1", &ask, &slot, host, sizeof(host), &port));
    cr_expect(!hl_parse_redirect("MOVED 1 nocolon", &ask, &slot, host, sizeof(host), &port));
    cr_expect(!hl_parse_redirect("ERR MOVED 1 a:1", &ask, &slot, host, sizeof(host), &port));
    cr_expect(!hl_parse_redirect("MOVED x a:1", &ask, &slot, host, sizeof(host), &port));
    /* A host longer than the buffer is cut, never overrun. */
    char small[8];
    cr_expect(!hl_parse_redirect("MOVED 1 averyveryverylonghostname:1", &ask, &slot, small, sizeof(small), &port));
}

/* redis-sentinel://[user:pass@]host[:port][,...][/db]#MASTER: the hosts
 * are sentinels (26379 by default); the credentials and db are the
 * master's; the name is the last '#''s fragment. */
Test(url, sentinel) {
    hl_url u;
    cr_assert_eq(hl_url_parse("redis-sentinel://u:p%23w@10.0.0.1,10.0.0.2:26380/3#mymaster", &u), 0);
    cr_expect_eq(u.kind, HL_URL_SENTINEL);
    cr_expect_str_eq(u.master, "mymaster");
    cr_expect_str_eq(u.host, "10.0.0.1");
    cr_expect_eq(u.port, 26379);
    cr_expect_eq(u.nmore, 1);
    cr_expect_str_eq(u.more[0].host, "10.0.0.2");
    cr_expect_eq(u.more[0].port, 26380);
    cr_expect_eq(u.db, 3);
    cr_expect_str_eq(u.user, "u");
    cr_expect_str_eq(u.pass, "p#w");
    hl_url_free(&u);
    cr_expect_null(u.master);
    /* A password with a bare '#': the master is after the last one. */
    cr_assert_eq(hl_url_parse("redis-sentinel://:a#b@h#m", &u), 0);
    cr_expect_str_eq(u.pass, "a#b");
    cr_expect_str_eq(u.master, "m");
    hl_url_free(&u);
    expect_bad("redis-sentinel://h:26379");       /* no master name */
    expect_bad("redis-sentinel://h:26379#");
    expect_bad("redis-sentinel://h#my%20master"); /* +switch-master splits on spaces */
    expect_bad("redis-sentinel://#m");
    expect_bad("redis-sentinel://h:0#m");
}

Test(url, redlock) {
    hl_url u;
    cr_assert_eq(hl_url_parse("redlock://:pw@127.0.0.1:7001,127.0.0.1:7002,127.0.0.1/2", &u), 0);
    cr_expect_eq(u.kind, HL_URL_REDLOCK);
    cr_expect_null(u.master);
    cr_expect_eq(u.port, 7001);
    cr_expect_eq(u.nmore, 2);
    cr_expect_eq(u.more[1].port, 6379);
    cr_expect_eq(u.db, 2);
    cr_expect_str_eq(u.pass, "pw");
    hl_url_free(&u);
    /* redis:// keeps a bare '#' in a password, as before. */
    expect_tcp("redis://:a#b@h:1", "h", 1, 0, NULL, "a#b");
    expect_bad("redlock://");
    expect_bad("redlock://h:99999");
    expect_bad("redlock://h1,");
    expect_bad("redlock://h#m");
}

/* The TLS forms: the same URLs with tls set; the plain ones without. */
Test(url, tls_forms) {
    static const struct { const char *s; int kind, tls; } ok[] = {
        {"redis://h:1", HL_URL_REDIS, 0},
        {"rediss://u:p@h:6380/2", HL_URL_REDIS, 1},
        {"rediss://a:1,b:2", HL_URL_REDIS, 1},
        {"rediss-sentinel://h#m", HL_URL_SENTINEL, 1},
        {"redis-sentinel://h#m", HL_URL_SENTINEL, 0},
        {"redlocks://a,b,c", HL_URL_REDLOCK, 1},
        {"redlock://a,b,c", HL_URL_REDLOCK, 0},
        {"unix:///tmp/r.sock", HL_URL_REDIS, 0},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        hl_url u;
        cr_assert_eq(hl_url_parse(ok[i].s, &u), 0, "%s", ok[i].s);
        cr_expect_eq(u.kind, ok[i].kind, "%s", ok[i].s);
        cr_expect_eq(u.tls, ok[i].tls, "%s", ok[i].s);
        hl_url_free(&u);
    }
    /* The default port is the same: Redis serves TLS wherever it is told. */
    hl_url u;
    cr_assert_eq(hl_url_parse("rediss://h", &u), 0);
    cr_expect_eq(u.port, 6379);
    hl_url_free(&u);
    expect_bad("rediss-sentinel://h");  /* no master name */
    expect_bad("redisss://h");
    expect_bad("unixs:///tmp/r.sock");
}
