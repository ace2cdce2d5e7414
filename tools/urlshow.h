/* A Redis URL as the tools print it, `hilock` (tools/hilock.c) and `hilock
 * inspect` (tools/inspect.c): without its user and password, which stderr
 * must not carry into a log; "***" stands in for them. And why one was
 * refused, for the usage error. */
#ifndef HILOCK_TOOLS_URLSHOW_H
#define HILOCK_TOOLS_URLSHOW_H

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* url into buf (size n), its userinfo replaced by "***". The userinfo ends
 * at the last '@' before the first '/' after "://", as the library's
 * parser reads it (a password may hold an '@'). Returns buf. */
static inline const char *url_shown(const char *url, char *buf, size_t n) {
    const char *auth = strstr(url, "://"), *at = NULL, *p;

    if (auth != NULL)
        for (p = auth + 3; *p != '\0' && *p != '/'; p++)
            if (*p == '@') at = p;
    if (at != NULL) snprintf(buf, n, "%.*s***%s", (int)(auth + 3 - url), url, at);
    else snprintf(buf, n, "%s", url);
    return buf;
}

/* Whether [s, s+n) is a decimal number in [min, max], as the library's
 * parser reads ports and databases (at most 9 digits). */
static inline int url_num_ok(const char *s, size_t n, long min, long max) {
    long v = 0;
    size_t i;

    if (n == 0 || n > 9) return 0;
    for (i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return 0;
        v = v * 10 + (s[i] - '0');
    }
    return v >= min && v <= max;
}

/* The fault of one HOST[:PORT] or [IPV6][:PORT] in [p, e), or NULL. */
static inline const char *url_why_seed(const char *p, const char *e) {
    const char *host_end = memchr(p, ':', (size_t)(e - p)), *x;

    if (e == p) return "an empty HOST (two commas, or one at an end)";
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(e - p));
        if (rb == NULL || rb == p + 1) return "an IPv6 HOST wants [ADDRESS]";
        host_end = rb + 1;
        if (host_end < e && *host_end != ':') return "want [IPV6]:PORT";
    } else if (host_end == NULL) {
        host_end = e;
    }
    if (host_end == p) return "an empty HOST before :PORT";
    for (x = p; x < host_end; x++)
        if (isspace((unsigned char)*x) || *x == '#') return "a space or # in a HOST";
    if (host_end < e && !url_num_ok(host_end + 1, (size_t)(e - host_end - 1), 1, 65535))
        return "the port is not a number from 1 to 65535";
    return NULL;
}

/* The fault of the part after "redis://" and the like, or what it wants. */
static inline const char *url_why_hosts(const char *p, int sentinel) {
    const char *end = p + strlen(p), *slash, *auth_end, *at = NULL, *x, *why, *comma;

    if (sentinel) {
        const char *hash = strrchr(p, '#');
        if (hash == NULL || hash[1] == '\0')
            return "no #MASTER at its end: want redis-sentinel://HOST[:PORT][,HOST[:PORT]...]#MASTER";
        for (x = hash + 1; *x != '\0'; x++)
            if (isspace((unsigned char)*x)) return "a space in the #MASTER name";
        end = hash;
    }
    slash = memchr(p, '/', (size_t)(end - p));
    auth_end = slash != NULL ? slash : end;
    for (x = p; x < auth_end; x++)
        if (*x == '@') at = x; /* the last one ends the userinfo, as the parser reads it */
    if (at != NULL) p = at + 1;
    if (p == auth_end) return "no HOST";
    for (; ; p = comma + 1) {
        comma = memchr(p, ',', (size_t)(auth_end - p));
        if ((why = url_why_seed(p, comma != NULL ? comma : auth_end)) != NULL) return why;
        if (comma == NULL) break;
    }
    if (slash != NULL && slash + 1 < end && !url_num_ok(slash + 1, (size_t)(end - slash - 1), 0, 1 << 20))
        return "the database after / is not a number from 0 to 1048576";
    if (at != NULL) return "a bad %-escape in the user or password";
    return "want SCHEME://[[USER]:PASS@]HOST[:PORT][,HOST[:PORT]...][/DB]";
}

/* Why the library's URL parser (src/net/url.c) refused url, as far as its
 * shape tells: the first fault a user can fix, else the form wanted. It
 * quotes nothing of url, whose userinfo may hold a password. */
static inline const char *url_why(const char *url) {
    static const char *const schemes[] = { "unix://", "redis://", "rediss://", "redis-sentinel://",
                                           "rediss-sentinel://", "redlock://", "redlocks://" };
    const char *x;
    size_t i, len;

    if (*url == '\0') return "empty";
    for (i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        len = strlen(schemes[i]);
        if (strncmp(url, schemes[i], len) != 0) continue;
        if (i > 0) return url_why_hosts(url + len, i == 3 || i == 4);
        if (url[len] != '/') return "want unix:///path/to/socket, an absolute path";
        x = strchr(url, '?');
        if (x != NULL && (strncmp(x, "?db=", 4) != 0 || !url_num_ok(x + 4, strlen(x + 4), 0, 1 << 20)))
            return "want unix:///path/to/socket?db=N, N from 0 to 1048576";
        return "a bad %-escape in the socket's path";
    }
    if (strstr(url, "://") == NULL) return "no scheme: want redis://HOST[:PORT] or another form of hilock(1)";
    return "unknown scheme: want redis://, rediss://, unix://, redis-sentinel://, rediss-sentinel://, "
           "redlock:// or redlocks://";
}

#endif
