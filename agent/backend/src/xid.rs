//! Which device events take a GPU out of service, and why: the one table the
//! daemon consults for every [`DeviceEvent`](crate::DeviceEvent).
//!
//! NVML's "critical XID" events include errors that concern one process and
//! leave the GPU sound (the driver's resolution for them is to restart the
//! application), next to errors after which the GPU must not take work until
//! it is reset or serviced. The codes and reasons follow NVIDIA's Xid catalog
//! (docs.nvidia.com/deploy/xid-errors, "Analyzing Xid Errors with the Xid
//! Catalog": each code's resolution bucket, RESTART_APP versus RESET_GPU /
//! RESTART_BM / CONTACT_SUPPORT) and its dynamic page retirement guide
//! (docs.nvidia.com/deploy/dynamic-page-retirement: 48, 63, 64).

use crate::DeviceEventKind;

/// An XID code with what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xid {
    /// The code.
    pub code: u64,
    /// What the driver reports, in short.
    pub meaning: &'static str,
    /// Why the agent acts on it as it does.
    pub why: &'static str,
}

/// XIDs that take the GPU offline: its running task is stopped and nothing
/// is placed on it until an admin brings it back (after a GPU reset).
pub const CRITICAL: &[Xid] = &[
    Xid {
        code: 48,
        meaning: "double-bit ECC error",
        why: "uncorrectable memory error: data on the GPU is corrupt; the driver retires the page, which takes effect only after a GPU reset",
    },
    Xid {
        code: 63,
        meaning: "ECC page retirement or row remapping pending",
        why: "a page or row was marked bad; the GPU runs on the faulty memory until it is reset",
    },
    Xid {
        code: 64,
        meaning: "ECC page retirement or row remapping failed",
        why: "a bad page or row could not be retired: the memory fault stays, the GPU needs servicing",
    },
    Xid {
        code: 74,
        meaning: "NVLink error",
        why: "a fatal link error: transfers over NVLink are unreliable until the GPU is reset",
    },
    Xid {
        code: 79,
        meaning: "GPU has fallen off the bus",
        why: "the GPU no longer answers on PCIe; it needs a reset or a reboot",
    },
    Xid {
        code: 92,
        meaning: "high single-bit ECC error rate",
        why: "correctable errors at a rate that foretells uncorrectable ones",
    },
    Xid {
        code: 94,
        meaning: "contained ECC error",
        why: "an uncorrectable error the driver contained to one application; the row is remapped only at the next GPU reset",
    },
    Xid {
        code: 95,
        meaning: "uncontained ECC error",
        why: "an uncorrectable error that may have reached every application on the GPU; it needs a reset",
    },
];

/// XIDs NVML reports as critical that concern one process, not the GPU: the
/// process ends (or its author fixes it) and the GPU stays online.
pub const APPLICATION: &[Xid] = &[
    Xid {
        code: 13,
        meaning: "graphics engine exception",
        why: "usually an out-of-range access in the application's kernel",
    },
    Xid {
        code: 31,
        meaning: "GPU memory page fault",
        why: "the application accessed an invalid address",
    },
    Xid {
        code: 43,
        meaning: "GPU stopped processing",
        why: "the application's channel was reset after its own fault",
    },
    Xid {
        code: 45,
        meaning: "preemptive cleanup",
        why: "the driver cleaned up after a process that ended or was killed",
    },
];

/// What an event means for the GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The GPU goes offline; the text is its health as users see it
    /// (`lost`, `xid 79: GPU has fallen off the bus`).
    Offline(String),
    /// The GPU stays online; the text says why (for the log).
    Online(String),
}

/// What `event` means for its GPU. An XID in neither table is logged and
/// leaves the GPU online: the catalog's other codes are driver, display or
/// per-application conditions, and taking a GPU offline on an unknown code
/// would let one misbehaving application drain a host.
pub fn verdict(event: DeviceEventKind) -> Verdict {
    let code = match event {
        DeviceEventKind::GpuLost => return Verdict::Offline("lost".into()),
        DeviceEventKind::Xid(code) => code,
    };
    if let Some(x) = CRITICAL.iter().find(|x| x.code == code) {
        return Verdict::Offline(format!("xid {code}: {}", x.meaning));
    }
    match APPLICATION.iter().find(|x| x.code == code) {
        Some(x) => Verdict::Online(format!(
            "xid {code}: {} ({}: an application error; the GPU stays online)",
            x.meaning, x.why
        )),
        None => Verdict::Online(format!(
            "xid {code}: not one that takes a GPU offline; the GPU stays online"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issues_codes_take_a_gpu_offline_and_application_errors_do_not() {
        for code in [48, 63, 64, 74, 79, 92, 94, 95] {
            assert!(
                matches!(verdict(DeviceEventKind::Xid(code)), Verdict::Offline(_)),
                "xid {code}"
            );
        }
        for code in [13, 31, 43, 45, 8, 999] {
            assert!(
                matches!(verdict(DeviceEventKind::Xid(code)), Verdict::Online(_)),
                "xid {code}"
            );
        }
        assert_eq!(
            verdict(DeviceEventKind::Xid(79)),
            Verdict::Offline("xid 79: GPU has fallen off the bus".into())
        );
        assert_eq!(
            verdict(DeviceEventKind::GpuLost),
            Verdict::Offline("lost".into())
        );
        assert_eq!(
            verdict(DeviceEventKind::Xid(13)),
            Verdict::Online("xid 13: graphics engine exception (usually an out-of-range access in the application's kernel: an application error; the GPU stays online)".into())
        );
    }

    #[test]
    fn each_code_is_in_one_table_once() {
        let mut codes: Vec<u64> = CRITICAL.iter().chain(APPLICATION).map(|x| x.code).collect();
        let n = codes.len();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), n);
    }
}
