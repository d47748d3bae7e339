/*
 * The guest test kernel's core: descriptor tables, console, interrupt
 * dispatch, CPU bring-up and the hand-off to the benchmark the VMM chose.
 */
#include "apic.h"
#include "attack.h"
#include "bench.h"
#include "irq.h"
#include "kernel.h"
#include "x86.h"

volatile struct dirq_shared *const shared = (volatile struct dirq_shared *)DIRQ_SHARED_GPA;

struct descriptor_pointer {
    u16 limit;
    u64 base;
} __attribute__((packed));

struct idt_gate {
    u16 offset_low;
    u16 selector;
    u8 ist;
    u8 type_attr;
    u16 offset_mid;
    u32 offset_high;
    u32 reserved;
} __attribute__((packed));

#define SELECTOR_CODE64 0x08
#define GATE_INTERRUPT_PRESENT 0x8e

/* Null, 64-bit code (0x08), data (0x10). */
static const u64 gdt[3] = {0, 0x00af9a000000ffffull, 0x00cf92000000ffffull};
static struct idt_gate idt[256];
static volatile u32 idt_ready;

extern char isr_stubs[];
void gdt_load(const struct descriptor_pointer *gdtr);

void kputs(const char *s)
{
    for (; *s; s++)
        outb(DIRQ_PORT_SERIAL, (u8)*s);
}

void kput_hex(u64 value)
{
    char buf[19] = "0x";
    for (int i = 0; i < 16; i++)
        buf[2 + i] = "0123456789abcdef"[(value >> (60 - 4 * i)) & 0xf];
    buf[18] = 0;
    kputs(buf);
}

void kput_dec(u64 value)
{
    char buf[21];
    int i = 20;
    buf[i] = 0;
    do {
        buf[--i] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    kputs(&buf[i]);
}

void control(enum dirq_control command)
{
    outl(DIRQ_PORT_CONTROL, command);
    attack_note_control(command);
    if (command == DIRQ_CONTROL_BENCH_START)
        attack_at(this_cpu(), DIRQ_ATTACK_DURING);
}

void fail(enum dirq_failure failure, u64 d0, u64 d1, u64 d2, u64 d3)
{
    shared->failure_detail[0] = d0;
    shared->failure_detail[1] = d1;
    shared->failure_detail[2] = d2;
    shared->failure_detail[3] = d3;
    shared->failure = failure;
    control(DIRQ_CONTROL_FAILED);
    for (;;) {
        irq_disable();
        __asm__ volatile("hlt");
    }
}

void triple_fault(void)
{
    /* With an empty IDT, the #UD cannot be delivered, nor the #DF. */
    struct {
        u16 limit;
        u64 base;
    } __attribute__((packed)) empty = {0, 0};
    __asm__ volatile("lidt %0; ud2" ::"m"(empty));
}

u32 this_cpu(void)
{
    u64 sp = (u64)__builtin_frame_address(0);
    return (u32)((sp - DIRQ_STACKS_GPA) / DIRQ_STACK_SIZE);
}

static void set_gate(u8 vector, u64 entry)
{
    idt[vector] = (struct idt_gate){
        .offset_low = (u16)entry,
        .selector = SELECTOR_CODE64,
        .type_attr = GATE_INTERRUPT_PRESENT,
        .offset_mid = (u16)(entry >> 16),
        .offset_high = (u32)(entry >> 32),
    };
}

void set_irq_entry(u8 vector, void (*entry)(void)) { set_gate(vector, (u64)entry); }

void wait_until_at_least(volatile u64 *value, u64 target)
{
    if (shared->idle_busy) {
        irq_enable();
        while (*value < target)
            cpu_relax();
        return;
    }
    for (;;) {
        /* Check with interrupts off so a wake-up cannot slip in before hlt. */
        irq_disable();
        if (*value >= target)
            break;
        safe_halt();
    }
    irq_enable();
}

void record_sample(u64 cycles)
{
    u64 index = shared->samples_written;
    if (index < shared->samples_capacity) {
        ((volatile u64 *)shared->samples_gpa)[index] = cycles;
        shared->samples_written = index + 1;
    }
}

u64 ns_to_tsc(u64 ns) { return ns * shared->tsc_khz / 1000000; }

void isr_dispatch(struct irq_frame *frame)
{
    u64 vector = frame->vector;
    if (exec_fixup_fault(vector, &frame->rip))
        return;
    if (vector == DIRQ_VECTOR_SPURIOUS)
        return; /* SDM 11.9: a spurious interrupt needs no EOI. */
    kputs("dirq guest: unexpected vector ");
    kput_dec(vector);
    kputs(" error ");
    kput_hex(frame->error);
    kputs(" at rip ");
    kput_hex(frame->rip);
    kputs("\n");
    fail(DIRQ_FAILURE_EXCEPTION, vector, frame->error, frame->rip, this_cpu());
}

static void idt_init(void)
{
    for (int vector = 0; vector < 256; vector++)
        set_gate((u8)vector, (u64)isr_stubs + 16 * (u64)vector);
}

static void load_tables(void)
{
    struct descriptor_pointer gdtr = {sizeof(gdt) - 1, (u64)gdt};
    struct descriptor_pointer idtr = {sizeof(idt) - 1, (u64)idt};
    gdt_load(&gdtr);
    __asm__ volatile("lidt %0" ::"m"(idtr));
}

void kmain(u64 cpu)
{
    if (cpu == 0) {
        if (shared->magic != DIRQ_ABI_MAGIC || shared->abi_version != DIRQ_ABI_VERSION)
            fail(DIRQ_FAILURE_ABI_MISMATCH, shared->magic, shared->abi_version, 0, 0);
        idt_init();
        __atomic_store_n(&idt_ready, 1, __ATOMIC_RELEASE);
    } else {
        while (!__atomic_load_n(&idt_ready, __ATOMIC_ACQUIRE))
            cpu_relax();
    }
    load_tables();
    apic_init_cpu((u32)cpu);
    exec_mode_enter((u32)cpu);
    __atomic_add_fetch(&shared->cpus_online, 1, __ATOMIC_SEQ_CST);

    const struct bench *bench = bench_find(shared->bench);
    if (!bench)
        fail(DIRQ_FAILURE_UNKNOWN_BENCH, shared->bench, 0, 0, 0);

    if (cpu != 0) {
        attack_from_ap((u32)cpu, bench->ap != 0);
        if (bench->ap)
            bench->ap();
        return; /* _start parks this CPU */
    }

    while (shared->cpus_online < shared->num_cpus)
        cpu_relax();
    kputs("dirq guest: ");
    kputs(bench->name);
    kputs(" on ");
    kput_dec(shared->num_cpus);
    kputs(shared->x2apic ? " CPUs, x2APIC" : " CPUs, xAPIC");
    kputs(shared->pv_eoi ? ", PV EOI\n" : "\n");
    attack_at(0, DIRQ_ATTACK_BEFORE);
    attack_await(DIRQ_ATTACK_BEFORE);
    bench->bsp();
    attack_at(0, DIRQ_ATTACK_AFTER);
    attack_await(DIRQ_ATTACK_AFTER);
    control(DIRQ_CONTROL_DONE);
}
