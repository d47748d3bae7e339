//! The guest's response to one level-triggered interrupt in the 7A
//! interrupt flow, and where each of its register accesses lands at each
//! level of the VIOAPIC paper (docs/mechanisms.md section 6).
//!
//! Steps (A), (B) and (D) make eight accesses to the controller, around
//! the device's own register access in step (C):
//!
//! | # | step | access | register |
//! |---|------|--------|----------|
//! | 1 | (A) read the status | read  | ISR: which lines want service |
//! | 2 | (A) read the status | read  | IRR: the line is still asserted |
//! | 3 | (B) mask            | read  | MASK (read-modify-write) |
//! | 4 | (B) mask            | write | MASK with the line's bit set |
//! | - | (C) the device      | read  | the device's read-to-clear status |
//! | 5 | (D) acknowledge     | write | ACK: clears the line's delivered bit |
//! | 6 | (D) acknowledge     | read  | ISR: the read-back that flushes the posted ACK |
//! | 7 | (D) unmask          | read  | MASK (read-modify-write) |
//! | 8 | (D) unmask          | write | MASK without the bit (the UNMASK register at `pv`) |
//!
//! Five reads and three writes. Where they land:
//! - `userspace`: all eight exit to the VMM in userspace;
//! - `kernel`: all eight exit, emulated in the kernel;
//! - `ro-page`: the reads hit a read-only page the kernel keeps current,
//!   the three writes exit to the kernel;
//! - `pv`: IRR, ISR and MASK live in a page the guest shares, so the reads
//!   are memory accesses and the mask and acknowledge writes stores under
//!   the page's lock; only the UNMASK write exits to the kernel (the paper:
//!   only unmasking needs to trap into KVM, which must re-evaluate the
//!   line).
//!
//! The levels are cumulative, each cheaper than the last: ro-page and pv
//! keep the controller in the kernel (assumed; docs/calibration.md).
//!
//! With the controller in the userspace VMM, a write that changes the
//! controller's output to the core (the level `IRR & !MASK` of the
//! device's line) makes the VMM re-evaluate the line and tell KVM through
//! a second kernel crossing of its own (an interrupt ioctl setting or
//! clearing the vCPU's pending interrupt): the interrupt's delivery goes
//! through the VMM. Back to back the line is always asserted, so the MASK
//! write drops the output and the UNMASK write raises it (delivering the
//! next interrupt); the ACK only clears the core's delivered bit, which
//! the masking already withdrew ([`toggles_line`]). In the kernel the
//! controller's output reaches the vCPU without leaving KVM.

pub use dirq_arch::vioapic::VioapicLevel;

/// What each VIOAPIC level means for this flow's register accesses.
pub trait LevelLandings {
    /// Where `access` lands at this level.
    fn lands(self, access: Access) -> Landing;
}

impl LevelLandings for VioapicLevel {
    fn lands(self, access: Access) -> Landing {
        match (self, access.kind) {
            (VioapicLevel::Userspace, _) => Landing::Userspace,
            (VioapicLevel::Kernel, _) => Landing::Kernel,
            (VioapicLevel::RoPage, AccessKind::Read) => Landing::Memory,
            (VioapicLevel::RoPage, AccessKind::Write) => Landing::Kernel,
            (VioapicLevel::Pv, AccessKind::Read) => Landing::Memory,
            (VioapicLevel::Pv, AccessKind::Write) if access.register == Register::Unmask => {
                Landing::Kernel
            }
            (VioapicLevel::Pv, AccessKind::Write) => Landing::SharedPageLocked,
        }
    }
}

/// Whether `access` changes the controller's output to the core in a
/// back-to-back interrupt (the device's line asserted): masking and
/// unmasking the line do, reads and the ACK do not.
pub fn toggles_line(access: Access) -> bool {
    access.kind == AccessKind::Write && matches!(access.register, Register::Mask | Register::Unmask)
}

/// How many of the flow's controller accesses exit at `level`.
#[cfg(test)]
pub(super) fn trapped_accesses(level: VioapicLevel) -> usize {
    controller_accesses()
        .filter(|&access| level.lands(access).exits())
        .count()
}

/// Where an access is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landing {
    /// A plain load or store to a page the guest has mapped.
    Memory,
    /// A store to the shared page under its lock (pv's MASK).
    SharedPageLocked,
    /// An exit emulated in the kernel.
    Kernel,
    /// An exit emulated in the userspace VMM.
    Userspace,
}

impl Landing {
    pub fn exits(self) -> bool {
        matches!(self, Landing::Kernel | Landing::Userspace)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    Read,
    Write,
}

/// The controller registers the flow touches (`dirq_arch::vioapic`'s, and
/// the acknowledge of the core's delivered bit, which the 7A flow writes
/// to the same emulated interrupt controller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Register {
    Isr,
    Irr,
    /// Read, or written to set the line's bit.
    Mask,
    Ack,
    /// The write that clears the line's MASK bit: MASK itself, or at `pv`
    /// the trapping UNMASK register.
    Unmask,
}

/// One controller register access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub kind: AccessKind,
    pub register: Register,
}

/// One step of the guest's response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The handler's own instructions (entry, dispatch, driver work).
    Handler,
    /// A controller access, in steps (A), (B) and (D).
    Controller(Access),
    /// Step (C): the device's read-to-clear status register.
    Device,
}

const fn read(register: Register) -> Step {
    Step::Controller(Access {
        kind: AccessKind::Read,
        register,
    })
}

const fn write(register: Register) -> Step {
    Step::Controller(Access {
        kind: AccessKind::Write,
        register,
    })
}

/// The response to one interrupt, in order (the table above).
pub const FLOW: [Step; 10] = [
    Step::Handler,
    read(Register::Isr),
    read(Register::Irr),
    read(Register::Mask),
    write(Register::Mask),
    Step::Device,
    write(Register::Ack),
    read(Register::Isr),
    read(Register::Mask),
    write(Register::Unmask),
];

/// The flow's controller accesses.
pub(super) fn controller_accesses() -> impl Iterator<Item = Access> {
    FLOW.iter().filter_map(|step| match step {
        Step::Controller(access) => Some(*access),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(kind: AccessKind) -> usize {
        controller_accesses()
            .filter(|access| access.kind == kind)
            .count()
    }

    #[test]
    fn eight_controller_accesses_five_reads_three_writes() {
        assert_eq!(controller_accesses().count(), 8);
        assert_eq!(count(AccessKind::Read), 5);
        assert_eq!(count(AccessKind::Write), 3);
    }

    #[test]
    fn the_device_is_read_between_mask_and_acknowledge() {
        let device = FLOW.iter().position(|&s| s == Step::Device).unwrap();
        let mask = FLOW
            .iter()
            .position(|&s| s == write(Register::Mask))
            .unwrap();
        let ack = FLOW
            .iter()
            .position(|&s| s == write(Register::Ack))
            .unwrap();
        assert!(mask < device && device < ack);
        assert_eq!(
            FLOW.last(),
            Some(&write(Register::Unmask)),
            "unmask is last"
        );
    }

    #[test]
    fn masking_and_unmasking_toggle_the_line_and_nothing_else_does() {
        let toggling: Vec<Access> = controller_accesses().filter(|&a| toggles_line(a)).collect();
        assert_eq!(
            toggling,
            [
                Access {
                    kind: AccessKind::Write,
                    register: Register::Mask
                },
                Access {
                    kind: AccessKind::Write,
                    register: Register::Unmask
                }
            ]
        );
    }

    #[test]
    fn ro_page_reads_do_not_exit_its_writes_do() {
        for access in controller_accesses() {
            let exits = VioapicLevel::RoPage.lands(access).exits();
            assert_eq!(exits, access.kind == AccessKind::Write, "{access:?}");
        }
    }

    #[test]
    fn pv_traps_only_the_unmask() {
        let trapped: Vec<usize> = FLOW
            .iter()
            .enumerate()
            .filter(|(_, step)| {
                matches!(step, Step::Controller(access) if VioapicLevel::Pv.lands(*access).exits())
            })
            .map(|(index, _)| index)
            .collect();
        assert_eq!(trapped, [9]);
    }

    #[test]
    fn each_level_traps_fewer_accesses_than_the_one_before_or_exits_cheaper() {
        let trapped = VioapicLevel::ALL.map(trapped_accesses);
        assert_eq!(trapped[0], 8);
        assert_eq!(trapped[1], 8);
        assert!(trapped[2] < trapped[1] && trapped[3] < trapped[2]);
        assert!(
            controller_accesses().all(|a| VioapicLevel::Userspace.lands(a) == Landing::Userspace)
        );
        assert!(controller_accesses().all(|a| VioapicLevel::Kernel.lands(a) == Landing::Kernel));
    }
}
