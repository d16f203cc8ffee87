/*
 * sk_change.c: the rules of a safekeeper membership change.  See
 * sk_change.h; pure, libc only, shared by the CLI and the simulator.
 *
 * STRATA_BUG_REPLACE_DONOR_STATE (simulator builds only) lets the copy take
 * the donor's term alone (sk_change_copy_term), as the CLI did before.
 *
 * STRATA_BUG_REPLACE_COPY_TO_COMMIT (simulator builds only) plants the bug
 * this module exists to prevent, as `replace` had it before: the copy ends
 * at the donor's commit position and the change completes once the new set
 * holds the highest commit position any survivor heard of, so a commit acknowledged by a majority
 * whose members had not yet heard of it can end up on a minority of the new set.
 */
#include "cli/client/sk_change.h"

#include <stdio.h>
#include <string.h>

#include "base/strata_assert.h"

int sk_change_cmp(const sk_change_pos *a, const sk_change_pos *b)
{
    if (a->last_log_term != b->last_log_term)
        return a->last_log_term < b->last_log_term ? -1 : 1;
    if (a->flush_lsn != b->flush_lsn)
        return a->flush_lsn < b->flush_lsn ? -1 : 1;
    return 0;
}

int sk_change_donor(const sk_change_pos *pos, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (pos[i].up && (best < 0 || sk_change_cmp(&pos[i], &pos[best]) > 0))
            best = i;
    return best;
}

lsn_t sk_change_copy_end(lsn_t donor_flush, lsn_t donor_commit)
{
    STRATA_ASSERT(donor_commit <= donor_flush);
#ifdef STRATA_BUG_REPLACE_COPY_TO_COMMIT
    return donor_commit;
#else
    return donor_flush;
#endif
}

static const sk_change_pos *find_pos(const sk_change_pos *pos, int n, uint64_t node_id)
{
    for (int i = 0; i < n; i++)
        if (pos[i].up && pos[i].node_id == node_id)
            return &pos[i];
    return NULL;
}

bool sk_change_copy_term(const member *set, uint32_t n_set, const sk_change_pos *pos, int n,
                         uint64_t *term)
{
    uint32_t answered = 0;
    uint64_t highest = 0;
    for (uint32_t i = 0; i < n_set; i++) {
        const sk_change_pos *p = find_pos(pos, n, set[i].node_id);
        if (p == NULL)
            continue;
        answered++;
        if (p->term > highest)
            highest = p->term;
    }
#ifdef STRATA_BUG_REPLACE_DONOR_STATE
    /* As the CLI had it: the donor's term alone, from any one answer. */
    highest = 0;
    answered = n_set;
#endif
    if (answered < n_set / 2 + 1)
        return false;
    *term = highest;
    return true;
}

bool sk_change_sync_position(const member *set, uint32_t n_set, const sk_change_pos *pos, int n,
                             sk_change_pos *out)
{
    uint32_t answered = 0;
    sk_change_pos best = {.up = false};
    for (uint32_t i = 0; i < n_set; i++) {
        const sk_change_pos *p = find_pos(pos, n, set[i].node_id);
        if (p == NULL)
            continue;
        answered++;
#ifdef STRATA_BUG_REPLACE_COPY_TO_COMMIT
        sk_change_pos c = {.up = true, .node_id = p->node_id, .flush_lsn = p->commit_lsn};
        p = &c;
#endif
        if (!best.up || sk_change_cmp(p, &best) > 0)
            best = *p;
    }
    if (answered < n_set / 2 + 1)
        return false;
    *out = best;
    return true;
}

uint32_t sk_change_count_synced(const member *set, uint32_t n_set, const sk_change_pos *pos, int n,
                                const sk_change_pos *target)
{
    uint32_t synced = 0;
    for (uint32_t i = 0; i < n_set; i++) {
        const sk_change_pos *p = find_pos(pos, n, set[i].node_id);
        if (p != NULL && sk_change_cmp(p, target) >= 0)
            synced++;
    }
    return synced;
}

bool sk_change_synced(const member *set, uint32_t n_set, const sk_change_pos *pos, int n,
                      const sk_change_pos *target)
{
    return sk_change_count_synced(set, n_set, pos, n, target) >= n_set / 2 + 1;
}

/* The index of the member at addr in set, or -1. */
static int index_at(const member *set, uint32_t n, const char *addr)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(set[i].addr, addr) == 0)
            return (int)i;
    return -1;
}

/* True if b is a with exactly the entry at addr changed to node slot_id. */
static bool is_replacement(const member *a, uint32_t na, const member *b, uint32_t nb,
                           const char *addr, uint64_t slot_id)
{
    int k = index_at(a, na, addr);
    if (na != nb || k < 0 || a[k].node_id == slot_id)
        return false;
    for (uint32_t i = 0; i < na; i++) {
        if (strcmp(a[i].addr, b[i].addr) != 0)
            return false;
        uint64_t want = (int)i == k ? slot_id : a[i].node_id;
        if (b[i].node_id != want)
            return false;
    }
    return true;
}

static bool set_has(const member *set, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (set[i].node_id == id)
            return true;
    return false;
}

sk_change_stage sk_change_classify(const membership *m, const char *addr, uint64_t slot_id,
                                   uint64_t *dead)
{
    *dead = 0;
    if (m->n_new_members > 0) {
        if (!is_replacement(m->members, m->n_members, m->new_members, m->n_new_members, addr,
                            slot_id))
            return SK_CHANGE_FOREIGN_JOINT;
        *dead = m->members[index_at(m->members, m->n_members, addr)].node_id;
        return SK_CHANGE_RESUME_JOINT;
    }
    if (set_has(m->members, m->n_members, slot_id)) {
        *dead = slot_id;
        return SK_CHANGE_FRESH;
    }
    int k = index_at(m->members, m->n_members, addr);
    if (k < 0)
        return SK_CHANGE_FRESH;
    *dead = m->members[k].node_id;
    return SK_CHANGE_SEEDED;
}

int sk_change_joint(const membership *old, uint64_t dead, uint64_t new_id, const char *new_addr,
                    membership *joint)
{
    STRATA_ASSERT(old->n_new_members == 0);
    if (!set_has(old->members, old->n_members, dead) ||
        set_has(old->members, old->n_members, new_id))
        return -1;
    *joint = *old;
    joint->generation = old->generation + 1;
    joint->n_new_members = old->n_members;
    for (uint32_t i = 0; i < old->n_members; i++) {
        member m = old->members[i];
        if (m.node_id == dead) {
            m.node_id = new_id;
            snprintf(m.addr, sizeof m.addr, "%s", new_addr);
        }
        joint->new_members[i] = m;
    }
    return 0;
}

void sk_change_settle(const membership *joint, bool finish, membership *out)
{
    STRATA_ASSERT(joint->n_new_members > 0);
    memset(out, 0, sizeof *out);
    out->generation = joint->generation + 1;
    if (finish) {
        out->n_members = joint->n_new_members;
        memcpy(out->members, joint->new_members, sizeof out->members);
    } else {
        out->n_members = joint->n_members;
        memcpy(out->members, joint->members, sizeof out->members);
    }
}
