/*
 * membership.c: the pure rules and the text form of proto/membership.h.
 *
 * For: checking, comparing and uniting configurations, parsing and
 * formatting a set.  Not for: encoding one (walpush.c, sk_control.c).
 */
#include "proto/membership.h"

#include <stdio.h>
#include <string.h>

static bool set_contains(const member *set, uint32_t n, uint64_t node_id)
{
    for (uint32_t i = 0; i < n && i < MEMBERSHIP_MAX; i++)
        if (set[i].node_id == node_id)
            return true;
    return false;
}

bool membership_contains(const membership *m, uint64_t node_id)
{
    return set_contains(m->members, m->n_members, node_id) ||
           set_contains(m->new_members, m->n_new_members, node_id);
}

static const char *check_set(const member *set, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (set[i].node_id == 0)
            return "membership: node id 0";
        size_t len = strnlen(set[i].addr, sizeof set[i].addr);
        if (len == 0 || len > MEMBER_ADDR_MAX)
            return "membership: empty or unterminated member address";
        for (size_t k = 0; k < len; k++)
            if (set[i].addr[k] <= ' ' || set[i].addr[k] > '~')
                return "membership: member address has a non-printable byte";
        if (set_contains(set, i, set[i].node_id))
            return "membership: a node id appears twice in one set";
    }
    return NULL;
}

const char *membership_check(const membership *m)
{
    if (m->n_members > MEMBERSHIP_MAX || m->n_new_members > MEMBERSHIP_MAX)
        return "membership: more than MEMBERSHIP_MAX members in a set";
    if (m->generation == 0 && (m->n_members != 0 || m->n_new_members != 0))
        return "membership: generation 0 has no members";
    if (m->generation > 0 && m->n_members == 0)
        return "membership: a configuration needs at least one member";
    const char *bad = check_set(m->members, m->n_members);
    return bad ? bad : check_set(m->new_members, m->n_new_members);
}

static bool set_equal(const member *a, const member *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (a[i].node_id != b[i].node_id || strcmp(a[i].addr, b[i].addr) != 0)
            return false;
    return true;
}

bool membership_equal(const membership *a, const membership *b)
{
    return a->generation == b->generation && a->n_members == b->n_members &&
           a->n_new_members == b->n_new_members &&
           set_equal(a->members, b->members, a->n_members) &&
           set_equal(a->new_members, b->new_members, a->n_new_members);
}

int membership_union(const membership *m, member *out)
{
    int n = 0;
    for (uint32_t i = 0; i < m->n_members && i < MEMBERSHIP_MAX; i++)
        out[n++] = m->members[i];
    for (uint32_t i = 0; i < m->n_new_members && i < MEMBERSHIP_MAX; i++)
        if (!set_contains(m->members, m->n_members, m->new_members[i].node_id))
            out[n++] = m->new_members[i];
    return n;
}

int membership_parse_set(const char *text, member *set, uint32_t *n_out, const char **why)
{
    uint32_t n = 0;
    const char *p = text;
    while (*p != '\0') {
        if (n == MEMBERSHIP_MAX) {
            *why = "membership: more than MEMBERSHIP_MAX members in a set";
            return -1;
        }
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *at = memchr(p, '@', len);
        if (at == NULL || at == p) {
            *why = "membership: a member is not written node_id@host:port";
            return -1;
        }
        uint64_t id = 0;
        for (const char *d = p; d < at; d++) {
            if (*d < '0' || *d > '9' || id > (UINT64_MAX - 9) / 10) {
                *why = "membership: a node id is not a number";
                return -1;
            }
            id = id * 10 + (uint64_t)(*d - '0');
        }
        size_t alen = len - (size_t)(at + 1 - p);
        if (alen == 0 || alen > MEMBER_ADDR_MAX) {
            *why = "membership: member address empty or longer than MEMBER_ADDR_MAX";
            return -1;
        }
        set[n].node_id = id;
        memcpy(set[n].addr, at + 1, alen);
        set[n].addr[alen] = '\0';
        n++;
        p += len;
        if (*p == ',') {
            p++;
            if (*p == '\0') {
                *why = "membership: trailing comma";
                return -1;
            }
        }
    }
    const char *bad = check_set(set, n);
    if (bad) {
        *why = bad;
        return -1;
    }
    *n_out = n;
    return 0;
}

size_t membership_format_set(const member *set, uint32_t n, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n && i < MEMBERSHIP_MAX; i++) {
        int w = snprintf(buf + len, cap - len, "%s%llu@%s", i > 0 ? "," : "",
                         (unsigned long long)set[i].node_id, set[i].addr);
        if (w < 0 || (size_t)w >= cap - len)
            return strlen(buf);
        len += (size_t)w;
    }
    return len;
}
