/* hilock inspect: what Redis holds for lock names (tools/inspect.c). */
#ifndef HILOCK_TOOLS_INSPECT_H
#define HILOCK_TOOLS_INSPECT_H

/* `hilock inspect ...`: argv[0] is "inspect". url and prefix are the CLI's
 * defaults ($HILOCK_URL or its own). Returns the exit status: 0, 64 (usage)
 * or 69 (Redis could not be used, or answered an error). */
int inspect_main(int argc, char **argv, const char *url, const char *prefix);

#endif
