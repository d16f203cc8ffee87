/*
 * membership.h: a timeline's safekeeper configuration (docs/design.md
 * §4.10) -- its members, joint configurations during a change, the
 * generation -- with the pure rules and the operators' text form.
 *
 * For: the type the acceptor, the proposer, the CLI and the control file
 * share, its well-formedness, comparisons, and "id@host:port,..." text.
 * Not for: its wire or disk encoding (walpush.c, sk_control.c) or quorum
 * decisions (safekeeper/acceptor.c, compute/walproposer/proposer.c).
 * Pure: libc only, no allocation, no state.
 */
#ifndef STRATA_PROTO_MEMBERSHIP_H
#define STRATA_PROTO_MEMBERSHIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Most members in one set of a configuration, and the longest member
 * address ("host:port" of its WAL-push port, without the NUL). */
#define MEMBERSHIP_MAX 7
#define MEMBER_ADDR_MAX 63

/* One safekeeper of a configuration. */
typedef struct member {
    uint64_t node_id; /* > 0, unique within a set */
    char addr[MEMBER_ADDR_MAX + 1];
} member;

/*
 * A timeline's safekeeper configuration.  Generation 0 means "none known":
 * the proposer's own list of safekeepers is the configuration and every node
 * counts (how a cluster starts).  From generation 1 on, only members count:
 * an election or a commit needs a majority of members and, while new_members
 * is not empty (a joint configuration, during a membership change), also a
 * majority of new_members.  A safekeeper that is in neither set neither votes
 * nor accepts WAL.  Generations only grow.
 */
typedef struct membership {
    uint32_t generation;
    uint32_t n_members; /* 0 only in generation 0 */
    member members[MEMBERSHIP_MAX];
    uint32_t n_new_members; /* > 0: joint configuration */
    member new_members[MEMBERSHIP_MAX];
} membership;

/* True if node_id is in members or new_members. */
bool membership_contains(const membership *m, uint64_t node_id);

/* NULL if m is well-formed (see above; addresses are printable, non-empty
 * and NUL-terminated, node ids unique within a set), else what is wrong. */
const char *membership_check(const membership *m);

/* True if a and b are the same configuration. */
bool membership_equal(const membership *a, const membership *b);

/*
 * Text form of one set, as operators and the CLI write it:
 * "id@host:port,id@host:port" (empty string: no members).  Parse returns 0,
 * or -1 with *why; format returns the length written (cap > 0; the text is
 * cut at cap - 1 bytes, which MEMBERSHIP_TEXT_MAX always fits).
 */
#define MEMBERSHIP_TEXT_MAX (MEMBERSHIP_MAX * (20 + 1 + MEMBER_ADDR_MAX + 1) + 1)
int membership_parse_set(const char *text, member *set, uint32_t *n, const char **why);
size_t membership_format_set(const member *set, uint32_t n, char *buf, size_t cap);

/* The union of both sets, members first, each node once: the proposer's
 * acceptor slots.  Returns the count (at most 2 * MEMBERSHIP_MAX). */
int membership_union(const membership *m, member *out);

#endif
