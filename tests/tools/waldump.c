/*
 * strata-waldump: prints the records in WAL segment files, one line each,
 * using Strata's own decoder (common/pg/walformat.h).  A test oracle tool: the
 * integration tests compare its output with Postgres's pg_waldump.  Not for
 * operators (no rmgr descriptions).
 *
 *   strata-waldump STARTSEG [ENDSEG]
 *
 * Segment files are named as in pg_wal (TTTTTTTTXXXXXXXXYYYYYYYY); ENDSEG
 * defaults to STARTSEG and every segment in between must exist in the same
 * directory.  The segment size comes from STARTSEG's long page header.
 * Output, one line per record (LSNs as X/Y):
 *
 *   lsn L end E rmid R info 0xII xid X len N prev P main M [blk ID SPC/DB/REL fork F blkno B img
 * 0|1 init 0|1]...
 *
 * where end is the record's end LSN (8-aligned; segment end for a switch).
 * Reading starts at STARTSEG's first byte (a record continued from the
 * previous segment is skipped) and stops at the end of ENDSEG or at the end
 * of valid WAL, which is reported on stderr.  Exit: 0 if the files were read
 * to their end or to the end of WAL (zeros), 1 on other invalid WAL or I/O
 * errors, 2 on usage errors.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lsn.h"
#include "pg/walformat.h"

static int parse_segname(const char *path, uint32_t *tli, uint64_t *log, uint64_t *seg)
{
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    const char *name = basename(copy);
    unsigned int t;
    unsigned long long l, s;
    char tail;
    if (strlen(name) != 24 || sscanf(name, "%8X%8llX%8llX%c", &t, &l, &s, &tail) != 3)
        return -1;
    *tli = t;
    *log = l;
    *seg = s;
    return 0;
}

static void print_record(const wal_record *rec, lsn_t start, lsn_t end)
{
    char a[LSN_FMT_LEN], b[LSN_FMT_LEN], c[LSN_FMT_LEN];
    printf("lsn %s end %s rmid %u info 0x%02X xid %" PRIu32 " len %" PRIu32
           " prev %s main %" PRIu32,
           lsn_format(start, a), lsn_format(end, b), rec->hdr.rmid, rec->hdr.info, rec->hdr.xid,
           rec->hdr.tot_len, lsn_format(rec->hdr.prev, c), rec->main_data_len);
    for (int id = 0; id <= rec->max_block_id; id++) {
        const wal_block_ref *blk = &rec->blocks[id];
        if (!blk->in_use)
            continue;
        printf(
            " blk %d %" PRIu32 "/%" PRIu32 "/%" PRIu32 " fork %u blkno %" PRIu32 " img %d init %d",
            id, blk->spc, blk->db, blk->rel, blk->fork, blk->blkno, blk->has_image, blk->will_init);
    }
    putchar('\n');
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: strata-waldump STARTSEG [ENDSEG]\n");
        return 2;
    }
    const char *first = argv[1];
    const char *last = argc == 3 ? argv[2] : argv[1];
    uint32_t tli, tli2;
    uint64_t log1, seg1, log2, seg2;
    if (parse_segname(first, &tli, &log1, &seg1) != 0 ||
        parse_segname(last, &tli2, &log2, &seg2) != 0 || tli != tli2) {
        fprintf(stderr, "strata-waldump: segment names must be 24 hex digits on one timeline\n");
        return 2;
    }

    /* The segment size, from the first segment's long page header. */
    FILE *f = fopen(first, "rb");
    uint8_t hdr[WAL_LONG_PHD_SIZE];
    wal_page_header ph;
    if (f == NULL || fread(hdr, 1, sizeof hdr, f) != sizeof hdr) {
        fprintf(stderr, "strata-waldump: cannot read %s: %s\n", first,
                f ? "short file" : strerror(errno));
        return 1;
    }
    fclose(f);
    if (wal_page_header_parse(hdr, sizeof hdr, &ph) != WAL_LONG_PHD_SIZE ||
        !wal_seg_size_valid(ph.seg_size)) {
        fprintf(stderr, "strata-waldump: %s does not start with a valid long page header\n", first);
        return 1;
    }
    uint32_t seg_size = ph.seg_size;
    uint64_t segs_per_log = 0x100000000ull / seg_size;
    if (seg1 >= segs_per_log || seg2 >= segs_per_log) {
        fprintf(stderr, "strata-waldump: segment number out of range for segment size %u\n",
                seg_size);
        return 2;
    }
    uint64_t segno = log1 * segs_per_log + seg1, end_segno = log2 * segs_per_log + seg2;
    if (end_segno < segno) {
        fprintf(stderr, "strata-waldump: ENDSEG precedes STARTSEG\n");
        return 2;
    }

    char dir[4096];
    snprintf(dir, sizeof dir, "%s", first);
    const char *dirname_s = dirname(dir);

    uint8_t *recbuf = malloc(WAL_READER_DEFAULT_BUF);
    uint8_t *segbuf = malloc(seg_size);
    if (recbuf == NULL || segbuf == NULL) {
        fprintf(stderr, "strata-waldump: out of memory\n");
        return 1;
    }
    wal_reader r;
    wal_reader_init(&r, segno * seg_size, seg_size, recbuf, WAL_READER_DEFAULT_BUF);
    int status = 0;
    for (; segno <= end_segno; segno++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%08X%08X%08X", dirname_s, tli,
                 (unsigned)(segno / segs_per_log), (unsigned)(segno % segs_per_log));
        f = fopen(path, "rb");
        if (f == NULL) {
            fprintf(stderr, "strata-waldump: cannot open %s: %s\n", path, strerror(errno));
            status = 1;
            break;
        }
        size_t got = fread(segbuf, 1, seg_size, f);
        fclose(f);
        if (got != seg_size) {
            fprintf(stderr, "strata-waldump: %s is shorter than a segment\n", path);
            status = 1;
            break;
        }
        lsn_t at = segno * seg_size;
        size_t off = 0;
        while (off < seg_size) {
            size_t used;
            const char *why;
            int rc = wal_reader_feed(&r, at + off, segbuf + off, seg_size - off, &used, &why);
            off += used;
            if (rc == WAL_READER_RECORD) {
                lsn_t rs, re;
                const wal_record *rec = wal_reader_record(&r, &rs, &re);
                print_record(rec, rs, re);
            } else if (rc == WAL_READER_ERROR) {
                char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
                fprintf(stderr, "strata-waldump: end of valid WAL at %s (error at %s): %s\n",
                        lsn_format(wal_reader_last_record_end(&r), a),
                        lsn_format(wal_reader_next(&r), b), why);
                status = strstr(why, "xl_tot_len is 0") != NULL ? 0 : 1;
                goto done;
            }
        }
    }
done:
    free(recbuf);
    free(segbuf);
    return status;
}
