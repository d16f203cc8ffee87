/*
 * basebackup_tar.h: a strict, streaming reader of the ustar archive a
 * pageserver basebackup sends (docs/design.md §3.5, §6.9).
 *
 * For: decoding untrusted bytes, fed in pieces of any size, into entries
 * (directories and regular files) and file data, with every field checked
 * before use: header checksum, "ustar" magic, NUL-terminated names that are
 * relative, have no "." or ".." component, no empty component and no
 * control characters; octal fields made of octal digits; only types '0',
 * '\0' and '5' (links, devices, FIFOs, pax and GNU extension headers are
 * refused: a basebackup has none, so there is nothing to escape the target
 * directory with); bounded file size, entry count and archive size; the
 * two zero blocks of the end of the archive and nothing after them.
 * Not for: writing files (the caller's callbacks do), compression, pax.
 *
 * Pure C over the C library: no allocation, no IO, no global state, so
 * the fuzz target (tests/fuzz/fuzz_tar.c) runs it as is.
 * Threads: a reader is used by one thread at a time.
 * Errors: bbtar_feed/bbtar_finish return -1 with r->err saying what was
 * wrong and where (byte offset); the reader then stays failed.  A callback
 * returning non-zero stops the reader with its own message (bbtar_fail).
 */
#ifndef STRATA_CLI_BASEBACKUP_TAR_H
#define STRATA_CLI_BASEBACKUP_TAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BBTAR_BLOCK 512
#define BBTAR_NAME_MAX 256               /* prefix (155) + '/' + name (100) */
#define BBTAR_MAX_FILE_SIZE (1ull << 30) /* 1 GB: a relation segment */
#define BBTAR_MAX_ENTRIES 10000000u
#define BBTAR_MAX_ARCHIVE (1ull << 42) /* 4 TB */

typedef struct bbtar_entry {
    char name[BBTAR_NAME_MAX]; /* relative, no trailing '/' */
    bool is_dir;
    uint64_t size; /* 0 for a directory */
    uint32_t mode; /* permission bits only */
} bbtar_entry;

typedef struct bbtar_callbacks {
    /* A new entry; for a file, data follows (possibly in many calls) and
     * then end.  Return 0 to go on. */
    int (*begin)(const bbtar_entry *e, void *arg);
    int (*data)(const uint8_t *p, size_t n, void *arg);
    int (*end)(const bbtar_entry *e, void *arg);
    void *arg;
} bbtar_callbacks;

typedef struct bbtar_reader {
    bbtar_callbacks cb;
    uint8_t hdr[BBTAR_BLOCK];
    size_t hdr_used;
    uint64_t data_left; /* of the current file */
    uint64_t pad_left;  /* padding after it */
    bool in_file;
    int zero_blocks; /* consecutive zero headers seen */
    bool ended;      /* two zero blocks seen */
    bool failed;
    uint64_t offset; /* bytes consumed */
    uint32_t entries;
    uint64_t file_bytes;
    bbtar_entry cur;
    char err[320];
} bbtar_reader;

void bbtar_init(bbtar_reader *r, const bbtar_callbacks *cb);

/* Consumes all n bytes.  0, or -1 with r->err. */
int bbtar_feed(bbtar_reader *r, const uint8_t *p, size_t n);

/* The input is over: 0 if the archive ended properly, else -1 with r->err
 * (truncated archive). */
int bbtar_finish(bbtar_reader *r);

/* Checks one path as the reader does (for tests and callers that build
 * paths): true if it is a safe relative name. */
bool bbtar_name_is_safe(const char *name);

/* Sets r->err (for callbacks: call it, then return non-zero). */
void bbtar_fail(bbtar_reader *r, const char *msg);

#endif
