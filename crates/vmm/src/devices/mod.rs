//! The devices the machine puts on the bus (`crate::bus`). A new device is
//! a new file implementing `PioDevice`, `MmioDevice` or `MsrDevice`,
//! registered on the `Bus` when the machine is built; its model's errors
//! join the list below.

pub mod control;
pub mod debug_exit;
pub mod event_source;
pub mod fw_cfg;
pub mod io_batch;
pub mod msi_device;
pub mod pic_masks;
pub mod pit;
pub mod pm_timer;
pub mod serial;
pub mod task_file;
pub mod testdev;
pub mod vioapic;

use crate::bus::device_model_errors;

device_model_errors!(
    vioapic::PvLockError,
    control::ControlError,
    io_batch::DoorbellError,
    dirq_arch::ioapic::IoapicError,
    dirq_arch::vioapic::VioapicError,
    dirq_arch::pit::PitError,
    vm_memory::GuestMemoryError,
    vm_memory::volatile_memory::Error,
    crate::exits::ExitsError,
);
