/*
 * term_history.c: the pure rules of proto/term_history.h.
 *
 * For: validity and the last log term of a term history.
 * Not for: encoding it (walpush.c, sk_control.c).
 */
#include "proto/term_history.h"

bool term_history_valid(const term_history *h)
{
    if (h->n > TERM_HISTORY_MAX)
        return false;
    for (uint32_t i = 1; i < h->n; i++) {
        if (h->entries[i].term <= h->entries[i - 1].term)
            return false;
        if (h->entries[i].lsn < h->entries[i - 1].lsn)
            return false;
    }
    return true;
}

uint64_t term_history_last_log_term(const term_history *h, lsn_t flush_lsn)
{
    uint64_t term = 0;
    for (uint32_t i = 0; i < h->n && i < TERM_HISTORY_MAX; i++) {
        if (h->entries[i].lsn > flush_lsn)
            break;
        term = h->entries[i].term;
    }
    return term;
}
