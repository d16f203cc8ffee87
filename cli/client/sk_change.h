/*
 * sk_change.h: the rules of a safekeeper membership change, as pure
 * functions over what the safekeepers report (TIMELINE_STATUS), so that
 * `strata safekeeper replace` (cli/cmd/cmd_safekeeper.c) and the simulator's
 * replace actor (tests/sim/) decide by the same code.  No IO here.
 *
 * A replacement (docs/design.md §4.10) must not lose a commit that only
 * some survivors hold.  An acknowledged commit is on a majority of the old
 * configuration, but a survivor learns the commit position lazily, so
 * nothing but the flush positions says where the acknowledged WAL ends.
 * Hence the rules here:
 *
 *   - the donor is the survivor with the highest (last_log_term, flush_lsn),
 *     the one a proposer's election would pick, and the new member gets
 *     its WAL up to that flush, not up to a commit position;
 *   - the change completes only once a majority of the new set holds the
 *     sync position: the highest (last_log_term, flush_lsn) over a majority
 *     of the old members, read after the joint configuration was taken.
 *     Any majority of the old set intersects the majority that acknowledged
 *     a commit, so the sync position covers every acknowledged commit.
 *
 * Interrupted changes are classified by sk_change_classify, so a re-run
 * resumes a joint configuration that is its own or rolls back one it
 * cannot finish.
 */
#ifndef STRATA_CLI_SK_CHANGE_H
#define STRATA_CLI_SK_CHANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/lsn.h"
#include "proto/membership.h"

/* What one safekeeper reports of its WAL. */
typedef struct sk_change_pos {
    bool up; /* it answered; the fields below are meaningless otherwise */
    uint64_t node_id;
    uint64_t last_log_term; /* term_history_last_log_term(history, flush) */
    lsn_t flush_lsn;
    lsn_t commit_lsn; /* min(commit, flush): what it knows is committed */
    uint64_t term;    /* the highest term it promised */
} sk_change_pos;

/* <0, 0, >0 as a's (last_log_term, flush_lsn) is below, equal to or above
 * b's: the order in which an election picks its donor (§4.2). */
int sk_change_cmp(const sk_change_pos *a, const sk_change_pos *b);

/* The index in pos[0..n) of the answering safekeeper with the highest
 * position (the lowest index among equals), or -1 when none answered. */
int sk_change_donor(const sk_change_pos *pos, int n);

/* Where the new member's copy of the donor's WAL ends: the donor's flush.
 * commit is the donor's own min(commit, flush), which may trail an
 * acknowledged commit it holds. */
lsn_t sk_change_copy_end(lsn_t donor_flush, lsn_t donor_commit);

/*
 * The term the new member's copy promises: the highest term among the
 * answering members of set, which must be a majority of it (false, *term
 * untouched, otherwise).  The replaced node's promises went with its disk;
 * every term a proposer won was granted by a majority, so any majority
 * knows the highest, and a copy promising less would let a quorum of the
 * new set elect a term a second time.
 */
bool sk_change_copy_term(const member *set, uint32_t n_set, const sk_change_pos *pos, int n,
                         uint64_t *term);

/*
 * The sync position of a change away from set[0..n_set): the highest
 * position among the answering members of set.  False (and *out untouched)
 * unless a majority of set answered: with fewer, a commit acknowledged by
 * the others could lie beyond every answer.
 */
bool sk_change_sync_position(const member *set, uint32_t n_set, const sk_change_pos *pos, int n,
                             sk_change_pos *out);

/* How many members of set[0..n_set) answered at or past target. */
uint32_t sk_change_count_synced(const member *set, uint32_t n_set, const sk_change_pos *pos, int n,
                                const sk_change_pos *target);

/* True if a majority of set[0..n_set) is at or past target. */
bool sk_change_synced(const member *set, uint32_t n_set, const sk_change_pos *pos, int n,
                      const sk_change_pos *target);

/* What a replace of one node finds the newest configuration to be. */
typedef enum sk_change_stage {
    SK_CHANGE_FRESH,        /* settled; the named node is a member: start over */
    SK_CHANGE_SEEDED,       /* settled; the named slot holds an unswitched copy */
    SK_CHANGE_RESUME_JOINT, /* joint, and it is this very change: finish it */
    SK_CHANGE_FOREIGN_JOINT /* joint, another change: roll it back first */
} sk_change_stage;

/*
 * Classifies the newest configuration m for a replace of the node in slot
 * addr whose id the cluster now records as slot_id:
 *
 *   - joint, and new_members is members with one node at addr replaced by
 *     slot_id: RESUME_JOINT, *dead = the replaced node;
 *   - joint otherwise: FOREIGN_JOINT;
 *   - settled with slot_id a member: FRESH, *dead = slot_id;
 *   - settled without slot_id, but a member at addr: SEEDED (an earlier
 *     run recorded and seeded a new node, then stopped before the joint
 *     switch), *dead = that member;
 *   - settled with neither: FOREIGN_JOINT is never returned for it;
 *     the result is FRESH with *dead = 0 (nothing at addr to replace).
 */
sk_change_stage sk_change_classify(const membership *m, const char *addr, uint64_t slot_id,
                                   uint64_t *dead);

/* The joint configuration after `old` (settled) replacing dead by (new_id,
 * new_addr): generation + 1, members = old's, new_members = old's with
 * dead's entry replaced.  0, or -1 when dead is not a member. */
int sk_change_joint(const membership *old, uint64_t dead, uint64_t new_id, const char *new_addr,
                    membership *joint);

/* The settled configuration after joint: generation + 1, its new set
 * (finish: true) or its old set (roll back: false). */
void sk_change_settle(const membership *joint, bool finish, membership *out);

#endif
