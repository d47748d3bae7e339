//! How the guest will execute on this host, decided from the host side.
//!
//! Three cases (docs/native.md): a VT-x/SVM KVM runs an ordinary x86 guest
//! on hardware; `kvm_pvm` (KVM without VT-x) runs that same guest through
//! its instruction emulator, or, when the guest switches to it, natively in
//! ring 3. Native mode is undocumented: a vCPU of a kvm_pvm that offers it
//! answers KVM_GET_MSRS of `MSR_PVM_SIGNATURE` with "PVM"; on any other KVM
//! the MSR does not exist and the read fails. The guest is told the outcome
//! (`shared->guest_exec`) and never probes for itself. What it claims back
//! (`shared->native_cpus`) is checked against KVM's own statistics
//! ([`VcpuExecStats::evidence`]).

use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::{Kvm, VcpuFd};
use serde::{Deserialize, Serialize};

use crate::config::GuestExec;

/// kvm_pvm's identification MSR; reads 0x4d5650 ("PVM").
const MSR_PVM_SIGNATURE: u32 = 0x4b56_4d11;
const PVM_SIGNATURE: u64 = 0x4d_5650;

/// Kernel modules that provide KVM's x86 backend.
const BACKENDS: &[&str] = &["kvm_intel", "kvm_amd", "kvm_pvm"];
const PVM_BACKEND: &str = "kvm_pvm";

/// Why a hypercall can never complete under kvm_pvm (probed: with KVM's
/// hypercall-patching quirk VMCALL livelocks in the emulator; without it
/// VMCALL/VMMCALL raise #UD; natively VMMCALL leaves for the outer
/// hypervisor).
pub const PVM_NO_HYPERCALLS: &str =
    "kvm_pvm cannot complete hypercalls (VMCALL/VMMCALL raise #UD or leave for the outer hypervisor)";

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot open /dev/kvm")]
    OpenKvm(#[source] kvm_ioctls::Error),
    #[error("{what} failed while probing how guests execute")]
    Kvm {
        what: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
    #[error("--guest-exec {requested} is not available on this host: {why}")]
    Unavailable {
        requested: GuestExec,
        why: &'static str,
    },
    #[error(
        "vCPU {cpu}: the guest claims native execution (bit {cpu} of the shared page's native_cpus), but KVM emulated {} instructions in {} exits over the measured window (natively at most {NATIVE_MAX_EMULATIONS_PER_EXIT} per exit): it ran under the instruction emulator",
        .stats.insn_emulation,
        .stats.exits
    )]
    ForgedNativeClaim { cpu: usize, stats: VcpuExecStats },
    #[error("vCPU {cpu}: the guest claims native execution (bit {cpu} of the shared page's native_cpus), but the run asked for {asked} and the VMM never told it to switch")]
    UnaskedNativeClaim { cpu: usize, asked: GuestExec },
    #[error("the guest claims native execution for vCPUs the run never booted (native_cpus {native_cpus:#x}, {vcpus} vCPUs)")]
    ClaimBeyondVcpus { native_cpus: u64, vcpus: usize },
}

/// Natively KVM emulates only the instructions that trap, each with its
/// own exit (measured: at most 1.0 per exit in every bench); its emulator
/// runs batches of up to `pvm_emul_batch` instructions per exit, every
/// instruction between two exits emulated (measured: 4.8 per exit for the
/// most exit-bound bench, 64 per interrupt for irq-latency, thousands for
/// compute). The ratio tells the modes apart in a window of any length.
pub const NATIVE_MAX_EMULATIONS_PER_EXIT: u64 = 2;
/// What the window's edges may add to a native count: the START and END
/// markers' exits are each counted on one side of a snapshot and their
/// emulation possibly on the other.
const WINDOW_EDGE_EMULATIONS: u64 = 4;
/// Fewer exits than this cannot show native execution: a vCPU that slept
/// through the window exits and emulates a handful in either mode. With
/// this many, emulation would have shown more than 2 per exit (measured:
/// a native whileloop's window holds 6 exits and 2 emulations).
pub const NATIVE_MIN_EXITS: u64 = 4;

/// One vCPU's KVM statistics over the measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcpuExecStats {
    /// KVM's `exits`.
    pub exits: u64,
    /// KVM's `insn_emulation`.
    pub insn_emulation: u64,
}

/// How a vCPU executed, as KVM's statistics tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecEvidence {
    Native,
    Emulated,
    /// The vCPU did too little in the window to tell.
    TooLittle,
}

impl VcpuExecStats {
    /// Emulated when KVM emulated more than a native vCPU can for its
    /// exits, whatever the window's length; native when it emulated no
    /// more and exited often enough for emulation to have shown.
    pub fn evidence(&self) -> ExecEvidence {
        let native_bound = self
            .exits
            .saturating_mul(NATIVE_MAX_EMULATIONS_PER_EXIT)
            .saturating_add(WINDOW_EDGE_EMULATIONS);
        if self.insn_emulation > native_bound {
            ExecEvidence::Emulated
        } else if self.exits >= NATIVE_MIN_EXITS {
            ExecEvidence::Native
        } else {
            ExecEvidence::TooLittle
        }
    }
}

/// What this host offers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostExec {
    /// The loaded KVM backend module (kvm_intel, kvm_amd, kvm_pvm).
    pub backend: Option<String>,
    /// kvm_pvm answers its identification MSR: native mode exists.
    pub pvm_native: bool,
}

impl HostExec {
    /// Probes with `vcpu`, any vCPU of any VM on this host.
    pub fn detect_on(vcpu: &VcpuFd) -> Self {
        HostExec {
            backend: kvm_backend(),
            pvm_native: read_msr(vcpu, MSR_PVM_SIGNATURE) == Some(PVM_SIGNATURE),
        }
    }

    /// Probes with a scratch VM and vCPU of its own.
    pub fn detect(kvm: &Kvm) -> Result<Self, ExecError> {
        let kvm_call = |what| move |source| ExecError::Kvm { what, source };
        let vm = kvm.create_vm().map_err(kvm_call("KVM_CREATE_VM"))?;
        let vcpu = vm.create_vcpu(0).map_err(kvm_call("KVM_CREATE_VCPU"))?;
        Ok(Self::detect_on(&vcpu))
    }

    /// Opens /dev/kvm and probes.
    pub fn detect_host() -> Result<Self, ExecError> {
        Self::detect(&Kvm::new().map_err(ExecError::OpenKvm)?)
    }

    pub fn is_pvm(&self) -> bool {
        self.backend.as_deref() == Some(PVM_BACKEND)
    }

    /// The modes a run can ask for here, best first.
    pub fn offered(&self) -> Vec<GuestExec> {
        match (self.is_pvm(), self.pvm_native) {
            (true, true) => vec![GuestExec::Native, GuestExec::Emulated],
            (true, false) => vec![GuestExec::Emulated],
            (false, _) => vec![GuestExec::Hardware],
        }
    }

    /// Native where the host offers it.
    pub fn default_exec(&self) -> GuestExec {
        self.offered()[0]
    }

    /// The mode a run asking for `requested` gets, or why it cannot.
    pub fn resolve(&self, requested: Option<GuestExec>) -> Result<GuestExec, ExecError> {
        let Some(requested) = requested else {
            return Ok(self.default_exec());
        };
        if self.offered().contains(&requested) {
            return Ok(requested);
        }
        let why = match requested {
            GuestExec::Native if self.is_pvm() => {
                "this kvm_pvm does not answer its native-mode MSR (0x4b564d11)"
            }
            GuestExec::Native | GuestExec::Emulated => {
                "only kvm_pvm (KVM without VT-x/SVM) has native and emulated modes; this KVM runs guests on hardware"
            }
            GuestExec::Hardware => {
                "this KVM is kvm_pvm, which has no hardware virtualization: use native or emulated"
            }
        };
        Err(ExecError::Unavailable { requested, why })
    }

    /// Whether KVM's `irq_injections` counts every interrupt delivered to
    /// a vCPU: always under kvm_pvm, which has no APICv or AVIC; on VT-x
    /// and SVM only with those off, since they post interrupts without an
    /// injection.
    pub fn injections_count_every_delivery(&self) -> bool {
        let off = |parameter: &str| {
            std::fs::read_to_string(parameter).is_ok_and(|value| matches!(value.trim(), "N" | "0"))
        };
        match self.backend.as_deref() {
            Some(PVM_BACKEND) => true,
            Some("kvm_intel") => off("/sys/module/kvm_intel/parameters/enable_apicv"),
            Some("kvm_amd") => off("/sys/module/kvm_amd/parameters/avic"),
            _ => false,
        }
    }

    /// Why hypercall-based features (PV send-IPI) cannot run here, if so.
    pub fn hypercalls_unavailable(&self) -> Option<&'static str> {
        self.is_pvm().then_some(PVM_NO_HYPERCALLS)
    }
}

/// The loaded KVM backend, from /sys/module.
pub fn kvm_backend() -> Option<String> {
    BACKENDS
        .iter()
        .find(|module| std::path::Path::new("/sys/module").join(module).exists())
        .map(|module| module.to_string())
}

/// One MSR through KVM_GET_MSRS, or `None` if KVM does not know it.
pub fn read_msr(vcpu: &VcpuFd, index: u32) -> Option<u64> {
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry {
        index,
        ..Default::default()
    }])
    .ok()?;
    match vcpu.get_msrs(&mut msrs) {
        Ok(1) => msrs.as_slice().first().map(|entry| entry.data),
        _ => None,
    }
}

/// KVM_SET_MSRS of one MSR, as the host; false if KVM refused it.
pub fn write_msr(vcpu: &VcpuFd, index: u32, data: u64) -> bool {
    Msrs::from_entries(&[kvm_msr_entry {
        index,
        data,
        ..Default::default()
    }])
    .is_ok_and(|msrs| matches!(vcpu.set_msrs(&msrs), Ok(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(backend: &str, pvm_native: bool) -> HostExec {
        HostExec {
            backend: Some(backend.to_string()),
            pvm_native,
        }
    }

    #[test]
    fn native_is_the_default_only_where_kvm_pvm_offers_it() {
        assert_eq!(host("kvm_pvm", true).default_exec(), GuestExec::Native);
        assert_eq!(host("kvm_pvm", false).default_exec(), GuestExec::Emulated);
        assert_eq!(host("kvm_intel", false).default_exec(), GuestExec::Hardware);
    }

    #[test]
    fn a_mode_the_host_lacks_is_refused_with_the_reason() {
        let pvm = host("kvm_pvm", true);
        assert_eq!(
            pvm.resolve(Some(GuestExec::Emulated)).expect("offered"),
            GuestExec::Emulated
        );
        let err = pvm.resolve(Some(GuestExec::Hardware)).expect_err("no VT-x");
        assert!(err.to_string().contains("use native or emulated"), "{err}");
        let vmx = host("kvm_intel", false);
        let err = vmx.resolve(Some(GuestExec::Native)).expect_err("no pvm");
        assert!(err.to_string().contains("only kvm_pvm"), "{err}");
        let old_pvm = host("kvm_pvm", false);
        assert!(old_pvm.resolve(Some(GuestExec::Native)).is_err());
    }

    #[test]
    fn evidence_follows_emulations_per_exit_as_measured() {
        let stats = |exits, insn_emulation| VcpuExecStats {
            exits,
            insn_emulation,
        };
        // Measured natively: timer-latency, exit-cost, whileloop.
        assert_eq!(stats(1502, 901).evidence(), ExecEvidence::Native);
        assert_eq!(stats(12027, 8001).evidence(), ExecEvidence::Native);
        assert_eq!(stats(384, 97).evidence(), ExecEvidence::Native);
        // Measured emulated: timer-latency, io-batch, whileloop.
        assert_eq!(stats(310, 43217).evidence(), ExecEvidence::Emulated);
        assert_eq!(stats(3305, 15924).evidence(), ExecEvidence::Emulated);
        assert_eq!(stats(17, 16568).evidence(), ExecEvidence::Emulated);
        // irq-latency --count 10, emulated: 64 per interrupt, few in all.
        assert_eq!(stats(35, 640).evidence(), ExecEvidence::Emulated);
        assert_eq!(stats(3, 40).evidence(), ExecEvidence::Emulated);
        // The same window run natively: at most one per exit.
        assert_eq!(stats(33, 12).evidence(), ExecEvidence::Native);
        // An idle vCPU, and one that barely ran.
        assert_eq!(stats(0, 0).evidence(), ExecEvidence::TooLittle);
        assert_eq!(stats(3, 6).evidence(), ExecEvidence::TooLittle);
    }

    #[test]
    fn hypercalls_are_unavailable_only_under_kvm_pvm() {
        assert!(host("kvm_pvm", true).hypercalls_unavailable().is_some());
        assert!(host("kvm_amd", false).hypercalls_unavailable().is_none());
    }
}
