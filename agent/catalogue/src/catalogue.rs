//! The built-in catalogue of GPU models.
//!
//! Figures are NVIDIA's published specifications: memory, the default
//! (application) and maximum core clock, the memory clock, the board power limit
//! range, a typical idle draw, the supported clock table and, for MIG-capable
//! models, the MIG profile table.

use super::mig::{self, MigTable};

/// Supported core clocks at one memory clock: `core_max_mhz` down to
/// `core_min_mhz` in steps of `core_step_mhz`, each rounded down to whole MHz
/// (Volta's 7.5 MHz steps read 1530, 1522, 1515, ...), as the driver lists them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemClockSteps {
    /// Memory clock, MHz.
    pub mem_mhz: u32,
    /// Highest core clock at this memory clock, MHz.
    pub core_max_mhz: u32,
    /// Lowest core clock at this memory clock, MHz.
    pub core_min_mhz: u32,
    /// Distance between neighbouring core clocks, MHz.
    pub core_step_mhz: f64,
}

impl MemClockSteps {
    /// The core clocks, highest first (the driver's order).
    pub fn core_clocks(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut k = 0.0;
        loop {
            let f = (self.core_max_mhz as f64 - k * self.core_step_mhz).floor();
            if f < self.core_min_mhz as f64 {
                break;
            }
            out.push(f as u32);
            k += 1.0;
        }
        out
    }
}

/// One GPU model.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuModel {
    /// Catalogue name, as host files write it.
    pub name: &'static str,
    /// PCI device and vendor id (`0xDDDDVVVV`, NVML's `pciDeviceId`), which
    /// mig-parted's `device-filter` matches.
    pub pci_device_id: u32,
    /// The product name NVML reports.
    pub nvml_name: &'static str,
    /// Architecture, as NVML names it.
    pub architecture: &'static str,
    /// Memory (GB).
    pub memory_gb: f64,
    /// Default (application) core clock, MHz.
    pub core_default_mhz: u32,
    /// Default memory clock, MHz.
    pub mem_default_mhz: u32,
    /// The supported clock table, one entry per memory clock, highest first.
    pub clock_table: &'static [MemClockSteps],
    /// Lowest settable power limit, W.
    pub power_min_w: f64,
    /// Default power limit (typical board power), W.
    pub power_default_w: f64,
    /// Highest settable power limit, W.
    pub power_max_w: f64,
    /// Typical draw when idle, W.
    pub idle_w: f64,
    /// MIG profile table, for MIG-capable models.
    pub mig: Option<&'static MigTable>,
}

impl GpuModel {
    /// Lowest supported core clock, MHz.
    pub fn core_min_mhz(&self) -> u32 {
        self.clock_table
            .iter()
            .map(|t| t.core_min_mhz)
            .min()
            .unwrap_or(0)
    }

    /// Highest supported core clock, MHz.
    pub fn core_max_mhz(&self) -> u32 {
        self.clock_table
            .iter()
            .map(|t| t.core_max_mhz)
            .max()
            .unwrap_or(0)
    }

    /// Lowest supported memory clock, MHz.
    pub fn mem_min_mhz(&self) -> u32 {
        self.clock_table
            .iter()
            .map(|t| t.mem_mhz)
            .min()
            .unwrap_or(0)
    }

    /// Highest supported memory clock, MHz.
    pub fn mem_max_mhz(&self) -> u32 {
        self.clock_table
            .iter()
            .map(|t| t.mem_mhz)
            .max()
            .unwrap_or(0)
    }

    /// Normalised clocks (1.0 = default) in MHz: (core, memory).
    pub fn clocks_mhz(&self, clocks: gpu_agent_plugin_api::Clocks) -> (u32, u32) {
        (
            (clocks.core * f64::from(self.core_default_mhz)).round() as u32,
            (clocks.mem * f64::from(self.mem_default_mhz)).round() as u32,
        )
    }

    /// The clocks it accepts, normalised to its default clocks.
    pub fn clock_range(&self) -> gpu_agent_plugin_api::ClockRange {
        let (core, mem) = (
            f64::from(self.core_default_mhz),
            f64::from(self.mem_default_mhz),
        );
        gpu_agent_plugin_api::ClockRange {
            core_min: f64::from(self.core_min_mhz()) / core,
            core_max: f64::from(self.core_max_mhz()) / core,
            mem_min: f64::from(self.mem_min_mhz()) / mem,
            mem_max: f64::from(self.mem_max_mhz()) / mem,
        }
    }

    /// The lowest supported clock pair at or above the normalised `clocks`
    /// (docs/dvfs.md §6: a policy's clocks are rounded up, so a task runs
    /// no slower than its policy planned): the lowest memory clock at or above
    /// `clocks.mem` whose core clocks reach `clocks.core`, and the lowest of
    /// its core clocks at or above `clocks.core`. The default clocks are
    /// always supported (they are the application clocks). `None` when no
    /// entry of the table reaches both.
    pub fn round_up(
        &self,
        clocks: gpu_agent_plugin_api::Clocks,
    ) -> Option<gpu_agent_plugin_api::Clocks> {
        if clocks == gpu_agent_plugin_api::Clocks::DEFAULT {
            return Some(clocks);
        }
        // MHz wanted, less a hair so that a clock computed from a supported
        // one (f / default * default) is not pushed to the next step.
        const HAIR: f64 = 1e-6;
        let core = clocks.core * f64::from(self.core_default_mhz) - HAIR;
        let mem = clocks.mem * f64::from(self.mem_default_mhz) - HAIR;
        let entry = self
            .clock_table
            .iter()
            .filter(|t| f64::from(t.mem_mhz) >= mem && f64::from(t.core_max_mhz) >= core)
            .min_by_key(|t| t.mem_mhz)?;
        // Core clocks are floor(max - k*step) for k = 0, 1, ... down to min:
        // the last one at or above `core`.
        let mut k = ((f64::from(entry.core_max_mhz) - core) / entry.core_step_mhz)
            .floor()
            .max(0.0);
        let at = |k: f64| (f64::from(entry.core_max_mhz) - k * entry.core_step_mhz).floor();
        while k > 0.0 && (at(k) < core || at(k) < f64::from(entry.core_min_mhz)) {
            k -= 1.0;
        }
        Some(gpu_agent_plugin_api::Clocks {
            core: at(k) / f64::from(self.core_default_mhz),
            mem: f64::from(entry.mem_mhz) / f64::from(self.mem_default_mhz),
        })
    }

    /// Whether the model supports MIG.
    pub fn mig_capable(&self) -> bool {
        self.mig.is_some()
    }
}

/// Every model the agent knows, by name.
pub const CATALOGUE: &[GpuModel] = &[
    GpuModel {
        name: "A100-SXM4-40GB",
        pci_device_id: 0x20B0_10DE,
        nvml_name: "NVIDIA A100-SXM4-40GB",
        architecture: "Ampere",
        memory_gb: 40.0,
        core_default_mhz: 1095,
        mem_default_mhz: 1215,
        clock_table: &[MemClockSteps {
            mem_mhz: 1215,
            core_max_mhz: 1410,
            core_min_mhz: 210,
            core_step_mhz: 15.0,
        }],
        power_min_w: 100.0,
        power_default_w: 400.0,
        power_max_w: 400.0,
        idle_w: 55.0,
        mig: Some(&mig::A100_40GB),
    },
    GpuModel {
        name: "A100-SXM4-80GB",
        pci_device_id: 0x20B2_10DE,
        nvml_name: "NVIDIA A100-SXM4-80GB",
        architecture: "Ampere",
        memory_gb: 80.0,
        core_default_mhz: 1275,
        mem_default_mhz: 1593,
        clock_table: &[MemClockSteps {
            mem_mhz: 1593,
            core_max_mhz: 1410,
            core_min_mhz: 210,
            core_step_mhz: 15.0,
        }],
        power_min_w: 100.0,
        power_default_w: 400.0,
        power_max_w: 400.0,
        idle_w: 60.0,
        mig: Some(&mig::A100_80GB),
    },
    // Clock table, power limits and MIG table compared with a real H100 80GB
    // HBM3 (driver 580.159.04) by the read-only conformance suite: it lists
    // a second memory clock, 1593 MHz, with the same core clocks.
    GpuModel {
        name: "H100-SXM5-80GB",
        pci_device_id: 0x2330_10DE,
        nvml_name: "NVIDIA H100 80GB HBM3",
        architecture: "Hopper",
        memory_gb: 80.0,
        core_default_mhz: 1980,
        mem_default_mhz: 2619,
        clock_table: &[
            MemClockSteps {
                mem_mhz: 2619,
                core_max_mhz: 1980,
                core_min_mhz: 345,
                core_step_mhz: 15.0,
            },
            MemClockSteps {
                mem_mhz: 1593,
                core_max_mhz: 1980,
                core_min_mhz: 345,
                core_step_mhz: 15.0,
            },
        ],
        power_min_w: 200.0,
        power_default_w: 700.0,
        power_max_w: 700.0,
        idle_w: 70.0,
        mig: Some(&mig::H100_80GB),
    },
    GpuModel {
        name: "H100-PCIe-80GB",
        pci_device_id: 0x2331_10DE,
        nvml_name: "NVIDIA H100 PCIe",
        architecture: "Hopper",
        memory_gb: 80.0,
        core_default_mhz: 1755,
        mem_default_mhz: 1593,
        clock_table: &[MemClockSteps {
            mem_mhz: 1593,
            core_max_mhz: 1755,
            core_min_mhz: 345,
            core_step_mhz: 15.0,
        }],
        power_min_w: 200.0,
        power_default_w: 350.0,
        power_max_w: 350.0,
        idle_w: 50.0,
        mig: Some(&mig::H100_80GB),
    },
    // Read off a real H200 (driver 580.159.04) with `gpuctl inspect`: clock
    // table, power limits, idle draw at 345 MHz and the MIG table.
    GpuModel {
        name: "H200-SXM-141GB",
        pci_device_id: 0x2335_10DE,
        nvml_name: "NVIDIA H200",
        architecture: "Hopper",
        memory_gb: 141.0,
        core_default_mhz: 1980,
        mem_default_mhz: 3201,
        clock_table: &[
            MemClockSteps {
                mem_mhz: 3201,
                core_max_mhz: 1980,
                core_min_mhz: 345,
                core_step_mhz: 15.0,
            },
            MemClockSteps {
                mem_mhz: 2201,
                core_max_mhz: 1980,
                core_min_mhz: 345,
                core_step_mhz: 15.0,
            },
        ],
        power_min_w: 200.0,
        power_default_w: 700.0,
        power_max_w: 700.0,
        idle_w: 80.0,
        mig: Some(&mig::H200_141GB),
    },
    GpuModel {
        name: "V100-SXM2-32GB",
        pci_device_id: 0x1DB5_10DE,
        nvml_name: "Tesla V100-SXM2-32GB",
        architecture: "Volta",
        memory_gb: 32.0,
        core_default_mhz: 1290,
        mem_default_mhz: 877,
        clock_table: &[MemClockSteps {
            mem_mhz: 877,
            core_max_mhz: 1530,
            core_min_mhz: 135,
            core_step_mhz: 7.5,
        }],
        power_min_w: 150.0,
        power_default_w: 300.0,
        power_max_w: 300.0,
        idle_w: 40.0,
        mig: None,
    },
    GpuModel {
        name: "L4",
        pci_device_id: 0x27B8_10DE,
        nvml_name: "NVIDIA L4",
        architecture: "Ada Lovelace",
        memory_gb: 24.0,
        core_default_mhz: 2040,
        mem_default_mhz: 6251,
        clock_table: &[
            MemClockSteps {
                mem_mhz: 6251,
                core_max_mhz: 2040,
                core_min_mhz: 210,
                core_step_mhz: 15.0,
            },
            MemClockSteps {
                mem_mhz: 405,
                core_max_mhz: 420,
                core_min_mhz: 210,
                core_step_mhz: 15.0,
            },
        ],
        power_min_w: 40.0,
        power_default_w: 72.0,
        power_max_w: 72.0,
        idle_w: 16.0,
        mig: None,
    },
    GpuModel {
        name: "T4",
        pci_device_id: 0x1EB8_10DE,
        nvml_name: "Tesla T4",
        architecture: "Turing",
        memory_gb: 16.0,
        core_default_mhz: 1590,
        mem_default_mhz: 5001,
        clock_table: &[
            MemClockSteps {
                mem_mhz: 5001,
                core_max_mhz: 1590,
                core_min_mhz: 300,
                core_step_mhz: 15.0,
            },
            MemClockSteps {
                mem_mhz: 405,
                core_max_mhz: 405,
                core_min_mhz: 300,
                core_step_mhz: 15.0,
            },
        ],
        power_min_w: 60.0,
        power_default_w: 70.0,
        power_max_w: 70.0,
        idle_w: 10.0,
        mig: None,
    },
    // NVIDIA's A30 datasheet: 930 MHz base (the application clock) to
    // 1440 MHz boost, HBM2 at 1215 MHz, 165 W.
    GpuModel {
        name: "A30-PCIe-24GB",
        pci_device_id: 0x20B7_10DE,
        nvml_name: "NVIDIA A30",
        architecture: "Ampere",
        memory_gb: 24.0,
        core_default_mhz: 930,
        mem_default_mhz: 1215,
        clock_table: &[MemClockSteps {
            mem_mhz: 1215,
            core_max_mhz: 1440,
            core_min_mhz: 210,
            core_step_mhz: 15.0,
        }],
        power_min_w: 100.0,
        power_default_w: 165.0,
        power_max_w: 165.0,
        idle_w: 30.0,
        mig: Some(&mig::A30_24GB),
    },
];

/// The catalogue entry named `name`.
pub fn lookup(name: &str) -> Option<&'static GpuModel> {
    CATALOGUE.iter().find(|m| m.name == name)
}

/// The model whose NVML product name is `nvml_name`.
pub fn lookup_nvml(nvml_name: &str) -> Option<&'static GpuModel> {
    CATALOGUE.iter().find(|m| m.nvml_name == nvml_name)
}

/// The catalogue's model names, for error messages.
pub fn names() -> Vec<&'static str> {
    CATALOGUE.iter().map(|m| m.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_plugin_api::Clocks;

    #[test]
    fn clocks_round_up_to_supported_ones() {
        let a100 = lookup("A100-SXM4-40GB").unwrap();
        assert_eq!(a100.round_up(Clocks::DEFAULT), Some(Clocks::DEFAULT));
        // 0.5 * 1095 = 547.5 MHz → 1410 - 15*57 = 555 MHz.
        let half = Clocks {
            core: 0.5,
            mem: 1.0,
        };
        assert_eq!(
            a100.round_up(half),
            Some(Clocks {
                core: 555.0 / 1095.0,
                mem: 1.0
            })
        );
        // A supported clock stays itself; the highest stays the highest.
        let c = Clocks {
            core: 555.0 / 1095.0,
            mem: 1.0,
        };
        assert_eq!(a100.round_up(c), Some(c));
        let max = Clocks {
            core: 1410.0 / 1095.0,
            mem: 1.0,
        };
        assert_eq!(a100.round_up(max), Some(max));
        // Volta's 7.5 MHz steps: 1000 MHz → 1530 - 7.5*70 = 1005.
        let v100 = lookup("V100-SXM2-32GB").unwrap();
        let r = v100
            .round_up(Clocks {
                core: 1000.0 / 1290.0,
                mem: 1.0,
            })
            .unwrap();
        assert_eq!(v100.clocks_mhz(r), (1005, 877));
        // Above the table: nothing.
        assert_eq!(
            a100.round_up(Clocks {
                core: 1.0,
                mem: 1.1
            }),
            None
        );
        // Every model: the range's ends are supported, and any clock within
        // the range rounds to a supported one no lower than asked.
        for m in CATALOGUE {
            let r = m.clock_range();
            for (core, mem) in [(r.core_min, r.mem_min), (r.core_max, r.mem_max), (1.0, 1.0)] {
                let got = m.round_up(Clocks { core, mem }).unwrap();
                assert!(
                    got.core >= core - 1e-12 && got.mem >= mem - 1e-12,
                    "{}",
                    m.name
                );
            }
            let mut fc = r.core_min;
            while fc <= r.core_max {
                let got = m.round_up(Clocks { core: fc, mem: 1.0 }).unwrap();
                let (mhz, _) = m.clocks_mhz(got);
                assert!(got.core >= fc - 1e-9, "{} {fc}", m.name);
                assert!(
                    m.clock_table.iter().any(|t| t.core_clocks().contains(&mhz)),
                    "{}: {mhz} MHz is not supported",
                    m.name
                );
                fc += 0.013;
            }
        }
    }

    #[test]
    fn entries_are_consistent() {
        for m in CATALOGUE {
            assert!(
                m.core_min_mhz() <= m.core_default_mhz && m.core_default_mhz <= m.core_max_mhz(),
                "{}",
                m.name
            );
            assert!(
                m.mem_min_mhz() <= m.mem_default_mhz && m.mem_default_mhz <= m.mem_max_mhz(),
                "{}",
                m.name
            );
            assert!(
                m.power_min_w <= m.power_default_w && m.power_default_w <= m.power_max_w,
                "{}",
                m.name
            );
            assert!(m.idle_w < m.power_default_w, "{}", m.name);
        }
        assert_eq!(lookup("T4").unwrap().memory_gb, 16.0);
        for m in CATALOGUE {
            let top = &m.clock_table[0];
            assert_eq!(top.mem_mhz, m.mem_default_mhz, "{}", m.name);
            assert!(
                top.core_clocks().contains(&m.core_default_mhz),
                "{}",
                m.name
            );
        }
        assert!(lookup("RTX 9090").is_none());
    }

    #[test]
    fn clock_tables_step_as_the_driver_lists_them() {
        let a100 = lookup("A100-SXM4-40GB").unwrap().clock_table[0].core_clocks();
        assert_eq!(
            (a100.len(), a100[0], a100[1], a100[80]),
            (81, 1410, 1395, 210)
        );
        let v100 = lookup("V100-SXM2-32GB").unwrap().clock_table[0].core_clocks();
        assert_eq!(&v100[..4], &[1530, 1522, 1515, 1507]);
        assert_eq!(*v100.last().unwrap(), 135);
    }
}
