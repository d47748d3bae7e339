//! The instructions that trap to KVM, named from the bytes kvm_emulate_insn
//! records (Intel SDM vol. 2, the opcode maps of appendix A): enough to say
//! what a guest instruction that exits does, not a disassembler.

/// The mnemonic of the instruction whose first bytes are `bytes` (at most
/// its recorded length); "other" for what this table does not know.
pub fn mnemonic(bytes: &[u8]) -> &'static str {
    let mut rest = bytes;
    let mut rex_w = false;
    // Legacy prefixes, then a REX prefix (SDM vol. 2, 2.1.1 and 2.2.1).
    while let Some((&prefix, tail)) = rest.split_first() {
        match prefix {
            0x66 | 0x67 | 0xF0 | 0xF2 | 0xF3 | 0x2E | 0x36 | 0x3E | 0x26 | 0x64 | 0x65 => {
                rest = tail
            }
            0x40..=0x4F => {
                rex_w = prefix & 0x08 != 0;
                rest = tail;
            }
            _ => break,
        }
    }
    match rest {
        [0x0F, 0x30, ..] => "wrmsr",
        [0x0F, 0x32, ..] => "rdmsr",
        [0x0F, 0xA2, ..] => "cpuid",
        [0x0F, 0x31, ..] => "rdtsc",
        [0x0F, 0x33, ..] => "rdpmc",
        [0x0F, 0x09, ..] => "wbinvd",
        [0x0F, 0x20, ..] => "mov from cr",
        [0x0F, 0x22, ..] => "mov to cr",
        [0x0F, 0x21, ..] | [0x0F, 0x23, ..] => "mov dr",
        [0x0F, 0x07, ..] => "sysret",
        [0x0F, 0x05, ..] => "syscall",
        [0x0F, 0x01, 0xC1, ..] => "vmcall",
        [0x0F, 0x01, 0xD9, ..] => "vmmcall",
        [0x0F, 0x01, 0xD1, ..] => "xsetbv",
        [0x0F, 0x01, 0xF8, ..] => "swapgs",
        [0x0F, 0x01, 0xF9, ..] => "rdtscp",
        [0x0F, 0x01, modrm, ..] => match (modrm >> 3) & 0b111 {
            2 => "lgdt",
            3 => "lidt",
            7 => "invlpg",
            _ => "other",
        },
        [0xE4 | 0xE5 | 0xEC | 0xED, ..] => "in",
        [0xE6 | 0xE7 | 0xEE | 0xEF, ..] => "out",
        [0x6C | 0x6D, ..] => "ins",
        [0x6E | 0x6F, ..] => "outs",
        [0xF4, ..] => "hlt",
        [0xCF, ..] if rex_w => "iretq",
        [0xCF, ..] => "iret",
        [0xFA, ..] => "cli",
        [0xFB, ..] => "sti",
        [0x9C, ..] => "pushf",
        [0x9D, ..] => "popf",
        [0xCD, ..] => "int",
        [0xCC, ..] => "int3",
        // MOV between a register and memory: under kvm_pvm an MMIO access
        // (the APIC page, a device's registers) is emulated this way.
        [0x88 | 0x89 | 0x8A | 0x8B | 0xC6 | 0xC7 | 0xA0..=0xA3, ..] => "mov (memory)",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trapping_instructions_are_named_through_their_prefixes() {
        assert_eq!(mnemonic(&[0x0F, 0x30]), "wrmsr");
        assert_eq!(mnemonic(&[0x48, 0xCF]), "iretq");
        assert_eq!(mnemonic(&[0xCF]), "iret");
        assert_eq!(mnemonic(&[0x66, 0xEF]), "out");
        assert_eq!(mnemonic(&[0xED]), "in");
        assert_eq!(mnemonic(&[0xF3, 0x6F]), "outs");
        assert_eq!(mnemonic(&[0xF4]), "hlt");
        assert_eq!(mnemonic(&[0x0F, 0x01, 0x3F]), "invlpg");
        assert_eq!(mnemonic(&[0x89, 0x02]), "mov (memory)");
        assert_eq!(mnemonic(&[0x90]), "other");
        assert_eq!(mnemonic(&[]), "other");
        assert_eq!(mnemonic(&[0x66; 15]), "other", "prefixes only");
    }
}
