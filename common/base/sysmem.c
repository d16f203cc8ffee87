/*
 * sysmem.c: RAM and the memory cgroup's limit.  See sysmem.h.
 */
#include "base/sysmem.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The number in file path, or 0 when it is missing, "max" or not a number. */
static uint64_t read_limit(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    unsigned long long v = 0;
    int n = fscanf(f, "%llu", &v);
    fclose(f);
    return n == 1 ? (uint64_t)v : 0;
}

uint64_t sysmem_cgroup_limit_bytes(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f == NULL)
        return 0;
    uint64_t limit = 0;
    char line[4096], path[4200];
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        /* "ID:CONTROLLERS:PATH": v1 names memory among the controllers, v2
         * has ID 0 and none. */
        char *c1 = strchr(line, ':');
        char *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c1 = '\0';
        *c2 = '\0';
        const char *controllers = c1 + 1, *cg = c2 + 1;
        if (strcmp(cg, "/") == 0)
            cg = "";
        uint64_t v = 0;
        if (strcmp(controllers, "memory") == 0 || strstr(controllers, "memory,") != NULL ||
            strstr(controllers, ",memory") != NULL) {
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", cg);
            v = read_limit(path);
        } else if (strcmp(line, "0") == 0 && controllers[0] == '\0') {
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", cg);
            v = read_limit(path);
        }
        /* v1 reports "no limit" as a huge page-aligned number. */
        if (v > 0 && v < ((uint64_t)1 << 60) && (limit == 0 || v < limit))
            limit = v;
    }
    fclose(f);
    return limit;
}

uint64_t sysmem_usable_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t mem = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
    uint64_t cg = sysmem_cgroup_limit_bytes();
    return cg > 0 && (mem == 0 || cg < mem) ? cg : mem;
}
