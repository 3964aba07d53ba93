//! The built-in catalogue of GPU models.
//!
//! Figures are NVIDIA's published specifications: memory, the default
//! (application) and maximum core clock, the memory clock, the board power limit
//! range, and a typical idle draw. The backend extends each entry with its
//! supported clock table and MIG profiles.

/// One GPU model.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuModel {
    /// Catalogue name, as host files write it.
    pub name: &'static str,
    /// Memory (GB).
    pub memory_gb: f64,
    /// Default (application) core clock, MHz.
    pub core_default_mhz: u32,
    /// Lowest supported core clock, MHz.
    pub core_min_mhz: u32,
    /// Highest supported core clock, MHz.
    pub core_max_mhz: u32,
    /// Default memory clock, MHz.
    pub mem_default_mhz: u32,
    /// Lowest supported memory clock, MHz.
    pub mem_min_mhz: u32,
    /// Highest supported memory clock, MHz.
    pub mem_max_mhz: u32,
    /// Power limit constraints and default (board power), W.
    pub power_min_w: f64,
    /// Default power limit (typical board power), W.
    pub power_default_w: f64,
    /// Highest settable power limit, W.
    pub power_max_w: f64,
    /// Typical draw when idle, W.
    pub idle_w: f64,
    /// Whether it supports MIG.
    pub mig_capable: bool,
}

/// Every model the agent knows, by name.
pub const CATALOGUE: &[GpuModel] = &[
    GpuModel {
        name: "A100-SXM4-40GB",
        memory_gb: 40.0,
        core_default_mhz: 1095,
        core_min_mhz: 210,
        core_max_mhz: 1410,
        mem_default_mhz: 1215,
        mem_min_mhz: 1215,
        mem_max_mhz: 1215,
        power_min_w: 100.0,
        power_default_w: 400.0,
        power_max_w: 400.0,
        idle_w: 55.0,
        mig_capable: true,
    },
    GpuModel {
        name: "A100-SXM4-80GB",
        memory_gb: 80.0,
        core_default_mhz: 1275,
        core_min_mhz: 210,
        core_max_mhz: 1410,
        mem_default_mhz: 1593,
        mem_min_mhz: 1593,
        mem_max_mhz: 1593,
        power_min_w: 100.0,
        power_default_w: 400.0,
        power_max_w: 400.0,
        idle_w: 60.0,
        mig_capable: true,
    },
    GpuModel {
        name: "H100-SXM5-80GB",
        memory_gb: 80.0,
        core_default_mhz: 1980,
        core_min_mhz: 345,
        core_max_mhz: 1980,
        mem_default_mhz: 2619,
        mem_min_mhz: 2619,
        mem_max_mhz: 2619,
        power_min_w: 200.0,
        power_default_w: 700.0,
        power_max_w: 700.0,
        idle_w: 70.0,
        mig_capable: true,
    },
    GpuModel {
        name: "H100-PCIe-80GB",
        memory_gb: 80.0,
        core_default_mhz: 1755,
        core_min_mhz: 345,
        core_max_mhz: 1755,
        mem_default_mhz: 1593,
        mem_min_mhz: 1593,
        mem_max_mhz: 1593,
        power_min_w: 200.0,
        power_default_w: 350.0,
        power_max_w: 350.0,
        idle_w: 50.0,
        mig_capable: true,
    },
    GpuModel {
        name: "V100-SXM2-32GB",
        memory_gb: 32.0,
        core_default_mhz: 1290,
        core_min_mhz: 135,
        core_max_mhz: 1530,
        mem_default_mhz: 877,
        mem_min_mhz: 877,
        mem_max_mhz: 877,
        power_min_w: 150.0,
        power_default_w: 300.0,
        power_max_w: 300.0,
        idle_w: 40.0,
        mig_capable: false,
    },
    GpuModel {
        name: "L4",
        memory_gb: 24.0,
        core_default_mhz: 2040,
        core_min_mhz: 210,
        core_max_mhz: 2040,
        mem_default_mhz: 6251,
        mem_min_mhz: 405,
        mem_max_mhz: 6251,
        power_min_w: 40.0,
        power_default_w: 72.0,
        power_max_w: 72.0,
        idle_w: 16.0,
        mig_capable: false,
    },
    GpuModel {
        name: "T4",
        memory_gb: 16.0,
        core_default_mhz: 1590,
        core_min_mhz: 300,
        core_max_mhz: 1590,
        mem_default_mhz: 5001,
        mem_min_mhz: 405,
        mem_max_mhz: 5001,
        power_min_w: 60.0,
        power_default_w: 70.0,
        power_max_w: 70.0,
        idle_w: 10.0,
        mig_capable: false,
    },
];

/// The catalogue entry named `name`.
pub fn lookup(name: &str) -> Option<&'static GpuModel> {
    CATALOGUE.iter().find(|m| m.name == name)
}

/// The catalogue's model names, for error messages.
pub fn names() -> Vec<&'static str> {
    CATALOGUE.iter().map(|m| m.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_consistent() {
        for m in CATALOGUE {
            assert!(
                m.core_min_mhz <= m.core_default_mhz && m.core_default_mhz <= m.core_max_mhz,
                "{}",
                m.name
            );
            assert!(
                m.mem_min_mhz <= m.mem_default_mhz && m.mem_default_mhz <= m.mem_max_mhz,
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
        assert!(lookup("RTX 9090").is_none());
    }
}
