//! Register fields narrower than the value they are read from. Truncation
//! is the point here: these name it once instead of `as` at every site.

/// Bits 31:0 of `value`: the low dword of a 64-bit register, or a field
/// already shifted down to bit 0.
#[allow(clippy::cast_possible_truncation)] // Dropping bits 63:32 is the intent.
pub const fn low_u32(value: u64) -> u32 {
    value as u32
}

/// Bits 63:32 of `value`: the high dword of a 64-bit register.
pub const fn high_u32(value: u64) -> u32 {
    low_u32(value >> 32)
}

/// Bits 7:0 of `value`: a byte register written through a 32-bit access.
#[allow(clippy::cast_possible_truncation)] // Dropping bits 31:8 is the intent.
pub const fn low_u8(value: u32) -> u8 {
    value as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_the_named_bits() {
        assert_eq!(low_u32(0x1234_5678_9abc_def0), 0x9abc_def0);
        assert_eq!(high_u32(0x1234_5678_9abc_def0), 0x1234_5678);
        assert_eq!(low_u8(0x1234_56f0), 0xf0);
    }
}
