/*
 * sim.h: what the simulated cluster (sim.c) offers the membership-change
 * actor (sim_replace.c), and what the actor offers it back.
 *
 * The actor sees the cluster as `strata safekeeper replace` does: it asks
 * the running safekeepers for TIMELINE_STATUS, sends them
 * SWITCH_MEMBERSHIP, seeds a new data directory from a donor, starts and
 * stops processes.  Nothing here reaches into an acceptor's core: the rules
 * are cli/client/sk_change.c's, the transport is these calls.  Safekeepers live at
 * SIM_N_ACC fixed addresses ("sk1:5454", ...); a replaced node's successor
 * takes its address with a new node id.
 *
 * Everything is driven by the seed's one generator (sim_rnd_below), so a
 * seed replays exactly.
 */
#ifndef STRATA_TESTS_SIM_H
#define STRATA_TESTS_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/lsn.h"
#include "proto/membership.h"

#define SIM_N_ACC 3

/* ---- sim.c: the cluster ------------------------------------------------ */

uint32_t sim_rnd_below(uint32_t n);
bool sim_chance(uint32_t per_mille);
void sim_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int sim_step(void);

/* The address of safekeeper slot a, and the slot of an address (-1: none). */
const char *sim_addr(int a);
int sim_addr_index(const char *addr);

/* What TIMELINE_STATUS reports. */
typedef struct sim_status {
    uint64_t node_id;
    uint64_t term;
    lsn_t flush_lsn;  /* durable end of the last complete record; 0: no WAL */
    lsn_t commit_lsn; /* min(commit, flush) */
    uint64_t last_log_term;
    membership mconf;
} sim_status;

/* TIMELINE_STATUS of the node running at address a; false if none runs
 * there (or, with the seed's odds, the request failed). */
bool sim_acc_status(int a, sim_status *st);

/* SWITCH_MEMBERSHIP executed by the node running at a: 0 if it holds m now,
 * -1 if none runs there or it refused.  No network: the actor models
 * loss and delay of its own requests. */
int sim_acc_switch(int a, const membership *m);

/* Whether a node runs at a; whether one that stopped still has its disk. */
bool sim_acc_running(int a);
bool sim_acc_has_disk(int a);
/* The node of the data directory at a (0 if none). */
uint64_t sim_acc_node_id(int a);

/* Starts the stopped node at a from its disk (false: no disk, or running). */
bool sim_acc_start(int a);
/* Stops the node at a at once (strata stop --immediate). */
void sim_acc_stop(int a);
/* The node at a dies and its disk is lost. */
void sim_acc_lose(int a);

/*
 * Step 2 of a replace: the data directory at a (the old one moved aside)
 * gets the donor's WAL below end and a control file as cli/client/sk_client.c
 * copy_attempt writes it, for node new_id, with the donor's term or term
 * if that is higher, and configuration mconf (NULL: the donor's); the node
 * does not run yet.  False (nothing changed) if the donor does not run or
 * holds no WAL.
 */
bool sim_acc_seed(int a, int donor, uint64_t new_id, lsn_t end, uint64_t term,
                  const membership *mconf);

/* Whether the node at a holds the committed WAL durably. */
bool sim_acc_holds_committed(int a);

/* The slot of a live proposer that just advanced the committed WAL, or -1;
 * each call clears it. */
int sim_take_new_commit(void);
/* The compute in slot p is lost (its process and local WAL). */
void sim_prop_lose(int p);

/* ---- sim_replace.c: the actor ------------------------------------------ */

/* Starts a seed: whether and when this seed loses a node. */
void replace_setup(void);
/* The actor's turn, once per step. */
void replace_step(void);
/* Totals since the start of the run, for the summary line. */
void replace_print_stats(void);

#endif
