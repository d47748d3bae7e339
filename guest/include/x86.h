/* Thin wrappers around the x86 instructions the guest needs. */
#ifndef DIRQ_X86_H
#define DIRQ_X86_H

#include "types.h"

/* Port writes clobber memory: a device may read what the guest stored before
 * (the io-batch doorbell reads a whole array). */
static inline void outb(u16 port, u8 value) { __asm__ volatile("outb %0, %1" ::"a"(value), "Nd"(port) : "memory"); }
static inline void outl(u16 port, u32 value) { __asm__ volatile("outl %0, %1" ::"a"(value), "Nd"(port) : "memory"); }

static inline u8 inb(u16 port)
{
    u8 value;
    __asm__ volatile("inb %1, %0" : "=a"(value) : "Nd"(port) : "memory");
    return value;
}

static inline u64 rdtsc(void)
{
    u32 lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((u64)hi << 32) | lo;
}

static inline u64 rdmsr(u32 msr)
{
    u32 lo, hi;
    __asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
    return ((u64)hi << 32) | lo;
}

static inline void wrmsr(u32 msr, u64 value)
{
    __asm__ volatile("wrmsr" ::"c"(msr), "a"((u32)value), "d"((u32)(value >> 32)) : "memory");
}

static inline void cpuid(u32 leaf, u32 *a, u32 *b, u32 *c, u32 *d)
{
    __asm__ volatile("cpuid" : "=a"(*a), "=b"(*b), "=c"(*c), "=d"(*d) : "a"(leaf), "c"(0));
}

static inline u32 mmio_read32(u64 addr) { return *(volatile u32 *)addr; }
static inline void mmio_write32(u64 addr, u32 value) { *(volatile u32 *)addr = value; }

static inline void cpu_relax(void) { __asm__ volatile("pause" ::: "memory"); }

/* Interrupt masking and halting live in irq.h: they depend on how the guest runs. */

#endif
