/* hilock inspect: what Redis holds for lock names (tools/inspect.c). */
#ifndef HILOCK_TOOLS_INSPECT_H
#define HILOCK_TOOLS_INSPECT_H

#include "hilock/hilock.h"

/* `hilock inspect ...`, its command line read and checked by tools/hilock.c
 * (the options before `inspect` and after it, the NAMEs), but for the URL,
 * which only the library's parser can judge. */
typedef struct inspect_args {
    hilock_config cfg;      /* URL, prefix and TLS settings, defaults included */
    int url_from_env;       /* cfg.url is $HILOCK_URL's */
    int json;               /* --json */
    const char *scan;       /* --scan PATTERN, or NULL: names */
    char *const *names;
    int nnames;
} inspect_args;

/* What `hilock inspect --help` prints. */
extern const char inspect_usage[];

/* Returns the exit status: 0, 64 (a bad URL) or 69 (Redis could not be
 * used, or answered an error). */
int inspect_run(const inspect_args *a);

#endif
