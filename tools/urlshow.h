/* A Redis URL as the tools print it, `hilock` (tools/hilock.c) and `hilock
 * inspect` (tools/inspect.c): without its user and password, which stderr
 * must not carry into a log; "***" stands in for them. */
#ifndef HILOCK_TOOLS_URLSHOW_H
#define HILOCK_TOOLS_URLSHOW_H

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

#endif
