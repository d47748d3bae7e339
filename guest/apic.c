/*
 * Local APIC access. Every access here is what the benchmarks measure: in
 * xAPIC mode an MMIO access to DIRQ_LAPIC_GPA, in x2APIC mode an MSR access
 * (SDM Vol. 3 10.12), and with PV EOI usually no access at all.
 */
#include "apic.h"
#include "kernel.h"
#include "x86.h"

#define MSR_IA32_APIC_BASE 0x1b
#define APIC_BASE_X2APIC_ENABLE (1ul << 10)
#define APIC_BASE_GLOBAL_ENABLE (1ul << 11)
#define MSR_X2APIC_BASE 0x800
#define MSR_X2APIC_ICR 0x830
#define MSR_X2APIC_EOI 0x80b
#define MSR_X2APIC_IRR0 0x820
#define APIC_REG_EOI 0x0b0
#define ICR_SELF (1u << 18)
#define ICR_ALL_BUT_SELF (3u << 18)
#define MSR_X2APIC_SELF_IPI 0x83f
#define MSR_IA32_TSC_DEADLINE 0x6e0
#define MSR_KVM_PV_EOI_EN 0x4b564d04
#define KVM_MSR_ENABLED 1ul

#define SVR_APIC_ENABLE 0x100
#define LVT_MASKED (1u << 16)
#define LVT_TIMER_ONESHOT (0u << 17)
#define LVT_TIMER_TSC_DEADLINE (2u << 17)
#define TIMER_DIVIDE_BY_1 0xb

#define CPUID_1_ECX_X2APIC (1u << 21)
#define CPUID_1_ECX_TSC_DEADLINE (1u << 24)
#define CPUID_KVM_SIGNATURE 0x40000000
#define CPUID_KVM_FEATURES 0x40000001
#define KVM_FEATURE_PV_EOI (1u << 6)
#define KVM_FEATURE_PV_SEND_IPI (1u << 11)

/* KVM sets bit 0 when the next EOI may be skipped (Documentation/virt/kvm/x86/msr.rst). */
volatile u32 pv_eoi_word[DIRQ_MAX_CPUS] __attribute__((aligned(64)));

static void require_cpuid_bits(u32 leaf, u32 value, u32 mask)
{
    if ((value & mask) != mask)
        fail(DIRQ_FAILURE_MISSING_FEATURE, leaf, mask, 0, 0);
}

void apic_write(u32 reg, u32 value)
{
    if (shared->x2apic)
        wrmsr(MSR_X2APIC_BASE + (reg >> 4), value);
    else
        mmio_write32(DIRQ_LAPIC_GPA + reg, value);
}

/* Every CPUID the guest needs, read before exec_mode_enter(): natively
 * CPUID returns the physical CPU's values, not KVM's. */
static void check_features(void)
{
    u32 a, b, c, d;
    int pv_send_ipi = shared->bench == DIRQ_BENCH_IPI && shared->args[0] == DIRQ_IPI_BROADCAST_PV;
    u32 kvm_features = (shared->pv_eoi ? KVM_FEATURE_PV_EOI : 0) | (pv_send_ipi ? KVM_FEATURE_PV_SEND_IPI : 0);
    cpuid(1, &a, &b, &c, &d);
    if (shared->x2apic)
        require_cpuid_bits(1, c, CPUID_1_ECX_X2APIC);
    if (shared->bench == DIRQ_BENCH_TIMER_LATENCY && shared->tsc_deadline)
        require_cpuid_bits(1, c, CPUID_1_ECX_TSC_DEADLINE);
    if (kvm_features) {
        cpuid(CPUID_KVM_SIGNATURE, &a, &b, &c, &d);
        /* "KVMKVMKVM\0\0\0" in ebx, ecx, edx. */
        if (b != 0x4b4d564b || c != 0x564b4d56 || d != 0x4d)
            fail(DIRQ_FAILURE_MISSING_FEATURE, CPUID_KVM_SIGNATURE, 0, b, c);
        cpuid(CPUID_KVM_FEATURES, &a, &b, &c, &d);
        require_cpuid_bits(CPUID_KVM_FEATURES, a, kvm_features);
    }
}

void apic_init_cpu(u32 cpu)
{
    check_features();
    if (shared->x2apic)
        wrmsr(MSR_IA32_APIC_BASE,
              rdmsr(MSR_IA32_APIC_BASE) | APIC_BASE_GLOBAL_ENABLE | APIC_BASE_X2APIC_ENABLE);
    apic_write(APIC_REG_TPR, 0);
    /* The 8259 PIC behind LINT0 is never programmed: ignore it (SDM 10.5.1). */
    apic_write(APIC_REG_LVT_LINT0, LVT_MASKED);
    apic_write(APIC_REG_LVT_TIMER, LVT_MASKED | DIRQ_VECTOR_TIMER);
    apic_write(APIC_REG_TIMER_DIVIDE, TIMER_DIVIDE_BY_1);
    apic_write(APIC_REG_SVR, SVR_APIC_ENABLE | DIRQ_VECTOR_SPURIOUS);
    if (shared->pv_eoi)
        wrmsr(MSR_KVM_PV_EOI_EN, (u64)&pv_eoi_word[cpu] | KVM_MSR_ENABLED);
}

void apic_send_ipi(u32 dest_apic_id, u8 vector)
{
    /* Fixed delivery, physical destination, edge (SDM 10.6.1). */
    if (shared->x2apic) {
        wrmsr(MSR_X2APIC_ICR, ((u64)dest_apic_id << 32) | vector);
        return;
    }
    apic_write(APIC_REG_ICR_HIGH, dest_apic_id << 24);
    apic_write(APIC_REG_ICR_LOW, vector);
}

void apic_send_self_ipi(u8 vector)
{
    if (shared->x2apic) {
        wrmsr(MSR_X2APIC_SELF_IPI, vector); /* SDM 10.12.11 */
        return;
    }
    apic_write(APIC_REG_ICR_LOW, ICR_SELF | vector);
}

void apic_send_ipi_all_but_self(u8 vector)
{
    if (shared->x2apic) {
        wrmsr(MSR_X2APIC_ICR, ICR_ALL_BUT_SELF | vector);
        return;
    }
    apic_write(APIC_REG_ICR_LOW, ICR_ALL_BUT_SELF | vector);
}

void apic_eoi(void)
{
    if (shared->x2apic)
        wrmsr(MSR_X2APIC_EOI, 0);
    else
        mmio_write32(DIRQ_LAPIC_GPA + APIC_REG_EOI, 0);
}

int apic_irr_pending(u8 vector)
{
    /* IRR bits 32n..32n+31 are in MSR 0x820 + n (SDM 10.12.1.2). */
    return (rdmsr(MSR_X2APIC_IRR0 + vector / 32) >> (vector % 32)) & 1;
}

void apic_timer_setup(u8 vector, int tsc_deadline)
{
    apic_write(APIC_REG_LVT_TIMER, (tsc_deadline ? LVT_TIMER_TSC_DEADLINE : LVT_TIMER_ONESHOT) | vector);
}

void apic_timer_arm_oneshot(u32 ticks) { apic_write(APIC_REG_TIMER_INITIAL, ticks); }

void apic_timer_arm_deadline(u64 deadline) { wrmsr(MSR_IA32_TSC_DEADLINE, deadline); }
