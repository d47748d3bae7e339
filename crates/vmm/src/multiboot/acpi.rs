//! The few ACPI tables a PC test kernel looks for (ACPI 6.5 chapter 5): an
//! RSDP in the BIOS area where the OS searches for it (5.2.5.1), an RSDT
//! listing one FADT, and the FADT naming the PM timer's port (5.2.9).

use dirq_arch::bits::low_u32;
use vm_memory::{Bytes, GuestAddress};

use crate::devices::pm_timer;
use crate::memory::GuestMemory;

/// ACPI 5.2.5.1: the OS searches 0xe0000-0xfffff on 16-byte boundaries.
pub const RSDP_GPA: u64 = 0xf_0000;
const RSDT_GPA: u64 = RSDP_GPA + 0x40;
const FADT_GPA: u64 = RSDP_GPA + 0x80;
const HEADER_LEN: usize = 36;
/// FADT revision 1 is 116 bytes (ACPI 1.0b table 5-7).
const FADT_LEN: usize = 116;
const FADT_PM_TMR_BLK: usize = 76;
const FADT_PM_TMR_LEN: usize = 91;
const OEM_ID: &[u8; 6] = b"DIRQ  ";

/// Makes `bytes` sum to 0 mod 256 by setting the byte at `checksum`.
fn seal(bytes: &mut [u8], checksum: usize) {
    bytes[checksum] = 0;
    let sum = bytes.iter().fold(0u8, |sum, byte| sum.wrapping_add(*byte));
    bytes[checksum] = sum.wrapping_neg();
}

/// A system description table of `len` bytes with its header filled in
/// (5.2.6); the caller writes the body, then seals it.
fn table(signature: &[u8; 4], len: usize, revision: u8) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    bytes[0..4].copy_from_slice(signature);
    bytes[4..8].copy_from_slice(&low_u32(len as u64).to_le_bytes());
    bytes[8] = revision;
    bytes[10..16].copy_from_slice(OEM_ID);
    bytes[16..24].copy_from_slice(b"DIRQPC  ");
    bytes[24..28].copy_from_slice(&1u32.to_le_bytes());
    bytes[28..32].copy_from_slice(b"DIRQ");
    bytes[32..36].copy_from_slice(&1u32.to_le_bytes());
    bytes
}

/// Writes the RSDP, RSDT and FADT.
pub fn write_tables(memory: &GuestMemory) -> Result<(), vm_memory::GuestMemoryError> {
    let mut fadt = table(b"FACP", FADT_LEN, 1);
    fadt[FADT_PM_TMR_BLK..FADT_PM_TMR_BLK + 4]
        .copy_from_slice(&u32::from(pm_timer::PORT).to_le_bytes());
    fadt[FADT_PM_TMR_LEN] = pm_timer::PORTS.to_le_bytes()[0];
    seal(&mut fadt, 9);

    let mut rsdt = table(b"RSDT", HEADER_LEN + 4, 1);
    rsdt[HEADER_LEN..].copy_from_slice(&low_u32(FADT_GPA).to_le_bytes());
    seal(&mut rsdt, 9);

    // RSDP revision 0 (ACPI 1.0): 20 bytes, checksum at byte 8.
    let mut rsdp = vec![0u8; 20];
    rsdp[0..8].copy_from_slice(b"RSD PTR ");
    rsdp[9..15].copy_from_slice(OEM_ID);
    rsdp[16..20].copy_from_slice(&low_u32(RSDT_GPA).to_le_bytes());
    seal(&mut rsdp, 8);

    memory.write_slice(&rsdp, GuestAddress(RSDP_GPA))?;
    memory.write_slice(&rsdt, GuestAddress(RSDT_GPA))?;
    memory.write_slice(&fadt, GuestAddress(FADT_GPA))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestMemoryMmap;

    fn read(memory: &GuestMemory, gpa: u64, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        memory
            .read_slice(&mut bytes, GuestAddress(gpa))
            .expect("in RAM");
        bytes
    }

    fn sums_to_zero(bytes: &[u8]) -> bool {
        bytes.iter().fold(0u8, |sum, byte| sum.wrapping_add(*byte)) == 0
    }

    #[test]
    fn the_rsdp_leads_through_the_rsdt_to_a_fadt_naming_the_pm_timer() {
        let memory: GuestMemory =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).expect("RAM");
        write_tables(&memory).expect("tables fit");
        let rsdp = read(&memory, RSDP_GPA, 20);
        assert_eq!(&rsdp[0..8], b"RSD PTR ");
        assert!(sums_to_zero(&rsdp));
        let rsdt_gpa = u64::from(u32::from_le_bytes(rsdp[16..20].try_into().expect("4")));
        let rsdt = read(&memory, rsdt_gpa, HEADER_LEN + 4);
        assert_eq!(&rsdt[0..4], b"RSDT");
        assert!(sums_to_zero(&rsdt));
        let fadt_gpa = u64::from(u32::from_le_bytes(rsdt[36..40].try_into().expect("4")));
        let fadt = read(&memory, fadt_gpa, FADT_LEN);
        assert_eq!(&fadt[0..4], b"FACP");
        assert!(sums_to_zero(&fadt));
        assert_eq!(
            u32::from_le_bytes(fadt[76..80].try_into().expect("4")),
            0x608
        );
    }
}
