/*
 * The attack hook: the VMM may ask one CPU to attack it before, during or
 * after any bench (shared->attack, enum dirq_attack). The kernel calls the
 * hook at each of those points; all but the chosen one do nothing.
 */
#ifndef DIRQ_ATTACK_H
#define DIRQ_ATTACK_H

#include "dirq_abi.h"
#include "types.h"

/* CPU `cpu` has reached `when`: attacks if the VMM asked for it there. */
void attack_at(u32 cpu, enum dirq_attack_when when);

/* On a CPU other than 0, before its part of the bench: waits (bounded)
 * for the window to open or close if its attack is due then, answering
 * interrupts meanwhile if the bench needs it to, and attacks. */
void attack_from_ap(u32 cpu, int answers_interrupts);

/* On CPU 0, at BEFORE and AFTER: waits (bounded) for another CPU's attack there. */
void attack_await(enum dirq_attack_when when);

/* The control port saw `command` from this guest: the window's state for
 * attacks on other CPUs that wait for it. */
void attack_note_control(enum dirq_control command);

#endif
