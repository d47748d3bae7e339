/*
 * Interrupt masking and halting for both ways the guest runs (irq.h).
 *
 * kvm_pvm native mode, as probed (docs/native.md): VIF byte 0 is the
 * interrupt flag; with it clear an arriving interrupt sets byte 1 and is
 * held; setting byte 0 alone does not deliver a held interrupt, one
 * trapping instruction does. Delivery goes through the guest's IDT.
 */
#include "apic.h"
#include "irq.h"
#include "kernel.h"
#include "x86.h"

/* Reading it traps to KVM in native mode: the cheapest way to let KVM
 * deliver a held interrupt. */
#define MSR_PVM_SIGNATURE 0x4b564d11
#define PVM_SELECTOR_USER_CODE 0x33
#define VIF_ENABLED 0
#define VIF_PENDING 1

/* pvm.S: the restartable halt, and the MSR write that enters native mode
 * (a #GP there is tolerated: the VMM then reports the fallback). */
void pvm_safe_halt(volatile u8 *vif, u32 self_ipi_vector, volatile u64 *handled);
void pvm_enter_native(u64 vif_gpa);
extern char pvm_enter_wrmsr[];

static volatile u8 native[DIRQ_MAX_CPUS];

static volatile u8 *this_vif(void) { return (volatile u8 *)(DIRQ_VIF_GPA + DIRQ_VIF_PAGE_SIZE * (u64)this_cpu()); }

/* Whether this CPU runs natively on kvm_pvm. */
static int exec_native(void) { return native[this_cpu()]; }

void exec_mode_enter(u32 cpu)
{
    if (shared->guest_exec != DIRQ_EXEC_PVM_NATIVE)
        return;
    int attacked = shared->attack == DIRQ_ATTACK_STAY_EMULATED && shared->attack_cpu == cpu;
    if (attacked || (shared->bench == DIRQ_BENCH_HOSTILE && shared->args[0] == DIRQ_HOSTILE_FORGED_NATIVE_CLAIM)) {
        /* The attack: stay emulated and claim native mode. */
        __atomic_or_fetch(&shared->native_cpus, 1ul << cpu, __ATOMIC_SEQ_CST);
        return;
    }
    volatile u8 *vif = this_vif();
    for (u64 i = 0; i < DIRQ_VIF_PAGE_SIZE; i++)
        vif[i] = 0; /* interrupts stay disabled, as at boot */
    pvm_enter_native((u64)vif);
    u16 cs;
    __asm__ volatile("mov %%cs, %0" : "=r"(cs));
    if (cs != PVM_SELECTOR_USER_CODE)
        return; /* refused: still emulated, and the VMM says so */
    native[cpu] = 1;
    __atomic_or_fetch(&shared->native_cpus, 1ul << cpu, __ATOMIC_SEQ_CST);
}

int exec_fixup_fault(u64 vector, u64 *rip)
{
    /* #GP on the native-mode MSR write: this KVM refuses it; carry on emulated. */
    if (vector == 13 && *rip == (u64)pvm_enter_wrmsr) {
        *rip += 2; /* wrmsr is 0f 30 */
        return 1;
    }
    return 0;
}

void irq_enable(void)
{
    if (!exec_native()) {
        __asm__ volatile("sti" ::: "memory");
        return;
    }
    volatile u8 *vif = this_vif();
    vif[VIF_ENABLED] = 1;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (vif[VIF_PENDING])
        (void)rdmsr(MSR_PVM_SIGNATURE);
}

void irq_disable(void)
{
    if (!exec_native()) {
        __asm__ volatile("cli" ::: "memory");
        return;
    }
    this_vif()[VIF_ENABLED] = 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void safe_halt_with_self_ipi(u8 vector, volatile u64 *handled)
{
    if (exec_native()) {
        pvm_safe_halt(this_vif(), vector, handled);
        return;
    }
    if (vector)
        apic_send_self_ipi(vector);
    /* sti's one-instruction interrupt shadow makes "sti; hlt" race-free. */
    __asm__ volatile("sti; hlt" ::: "memory");
}

void safe_halt(void) { safe_halt_with_self_ipi(0, 0); }
