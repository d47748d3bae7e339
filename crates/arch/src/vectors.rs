//! A set of the 256 x86 interrupt vectors, the shape of the LAPIC's IRR, ISR
//! and TMR (Intel SDM Vol. 3, 10.8.4), of a posted-interrupt descriptor's PIR
//! and of APICv's EOI-exit bitmap. Every operation is a few word operations
//! so the simulator can call them millions of times per second.

use serde::{Deserialize, Serialize};

use crate::bits::{high_u32, low_u32};

/// 256 bits, bit `v` standing for vector `v`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VectorSet {
    words: [u64; 4],
}

impl VectorSet {
    /// The set with no vector in it.
    pub const EMPTY: VectorSet = VectorSet { words: [0; 4] };

    /// The four 64-bit words, vector 0 in bit 0 of word 0.
    pub const fn words(&self) -> [u64; 4] {
        self.words
    }

    /// Adds `vector`; returns whether it was absent before.
    #[inline]
    pub fn set(&mut self, vector: u8) -> bool {
        let (word, bit) = Self::position(vector);
        let was_absent = self.words[word] & bit == 0;
        self.words[word] |= bit;
        was_absent
    }

    /// Removes `vector`; returns whether it was present before.
    #[inline]
    pub fn clear(&mut self, vector: u8) -> bool {
        let (word, bit) = Self::position(vector);
        let was_present = self.words[word] & bit != 0;
        self.words[word] &= !bit;
        was_present
    }

    #[inline]
    pub fn contains(&self, vector: u8) -> bool {
        let (word, bit) = Self::position(vector);
        self.words[word] & bit != 0
    }

    /// The highest vector in the set: the one the LAPIC considers first.
    #[inline]
    pub fn highest(&self) -> Option<u8> {
        (0..4u8).rev().find_map(|word| {
            let top_bit = self.words[usize::from(word)].checked_ilog2()?;
            // The bit index is below 64 and the word index below 4.
            Some(word * 64 + u8::try_from(top_bit).ok()?)
        })
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.words == [0; 4]
    }

    /// Number of vectors in the set.
    pub fn len(&self) -> u32 {
        self.words.iter().map(|word| word.count_ones()).sum()
    }

    /// Adds every vector of `other`: the PIR -> virtual-IRR merge of posted
    /// interrupts (SDM 29.6).
    pub fn union_with(&mut self, other: &VectorSet) {
        for (mine, theirs) in self.words.iter_mut().zip(other.words) {
            *mine |= theirs;
        }
    }

    /// Empties the set and returns what it held (an atomic read-and-clear of
    /// a PIR, in a single-threaded model).
    pub fn take(&mut self) -> VectorSet {
        std::mem::take(self)
    }

    /// The vectors in ascending order, visiting only the set bits: the
    /// simulator walks a PIR or a self-IPI queue on every VM entry.
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0..4u8).flat_map(move |word| {
            let mut bits = self.words[usize::from(word)];
            std::iter::from_fn(move || {
                let bit = u8::try_from(bits.trailing_zeros())
                    .ok()
                    .filter(|&bit| bit < 64)?;
                bits &= bits - 1;
                Some(word * 64 + bit)
            })
        })
    }

    /// One of the eight 32-bit register banks through which the LAPIC exposes
    /// the set (SDM 10.8.4: bank `n` holds vectors 32n..32n+31). `bank` must
    /// be below 8; higher banks read as 0.
    pub fn bank(&self, bank: usize) -> u32 {
        match self.words.get(bank / 2) {
            Some(&word) if bank.is_multiple_of(2) => low_u32(word),
            Some(&word) => high_u32(word),
            None => 0,
        }
    }

    #[inline]
    fn position(vector: u8) -> (usize, u64) {
        (usize::from(vector >> 6), 1u64 << (vector & 63))
    }
}

impl std::fmt::Debug for VectorSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<u8> for VectorSet {
    fn from_iter<I: IntoIterator<Item = u8>>(vectors: I) -> Self {
        let mut set = VectorSet::EMPTY;
        for vector in vectors {
            set.set(vector);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_clear_contains_and_highest() {
        let mut set = VectorSet::EMPTY;
        assert!(set.is_empty());
        assert_eq!(set.highest(), None);
        assert!(set.set(0x31));
        assert!(
            !set.set(0x31),
            "a second set reports the vector was present"
        );
        assert!(set.set(0xFE));
        assert!(set.set(0x00));
        assert_eq!(set.highest(), Some(0xFE));
        assert_eq!(set.len(), 3);
        assert!(set.clear(0xFE));
        assert!(!set.clear(0xFE));
        assert_eq!(set.highest(), Some(0x31));
        assert!(set.contains(0x00) && !set.contains(0x01));
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0x00, 0x31]);
    }

    #[test]
    fn banks_hold_32_vectors_each() {
        let set: VectorSet = [0x00, 0x21, 0x5F, 0xFF].into_iter().collect();
        assert_eq!(set.bank(0), 1);
        assert_eq!(set.bank(1), 1 << 1);
        assert_eq!(set.bank(2), 1 << 31);
        assert_eq!(set.bank(7), 1 << 31);
        assert_eq!(set.bank(8), 0);
    }

    #[test]
    fn union_and_take() {
        let mut pir: VectorSet = [0x40, 0x80].into_iter().collect();
        let mut irr: VectorSet = [0x41].into_iter().collect();
        irr.union_with(&pir.take());
        assert!(pir.is_empty());
        assert_eq!(irr.iter().collect::<Vec<_>>(), vec![0x40, 0x41, 0x80]);
    }
}
