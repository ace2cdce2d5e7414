/* hilock inspect: what Redis holds for lock names (tools/inspect.c). */
#ifndef HILOCK_TOOLS_INSPECT_H
#define HILOCK_TOOLS_INSPECT_H

#include "hilock/hilock.h"

/* `hilock inspect ...`: argv[0] is "inspect". defaults holds the CLI's
 * defaults of the URL ($HILOCK_URL or its own), the prefix and the TLS
 * settings ($HILOCK_CACERT...), which inspect's options override. Returns
 * the exit status: 0, 64 (usage) or 69 (Redis could not be used, or
 * answered an error). */
int inspect_main(int argc, char **argv, const hilock_config *defaults);

#endif
