//! MIG (Multi-Instance GPU) profile tables, as the driver reports them.
//!
//! Profile ids are the driver's (`nvidia-smi mig -lgip`, and the `id` field of
//! `nvmlGpuInstanceProfileInfo_t`): 1g 19, 1g+me 20, 1g with twice the memory
//! 15, 2g 14, 3g 9, 4g 5, 7g 0. Placements count memory slices: an A100 or H100
//! has 8 memory slices and 7 compute slices. The tables follow NVIDIA's MIG user
//! guide ("Supported MIG Profiles"); memory sizes are the MiB the driver lists.

/// One GPU-instance profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigProfile {
    /// The driver's profile id.
    pub id: u32,
    /// Profile name, e.g. `1g.5gb`.
    pub name: &'static str,
    /// Compute slices (the `g` count).
    pub compute_slices: u32,
    /// Memory (MiB).
    pub memory_mib: u64,
    /// Most instances of this profile the GPU can hold at once.
    pub max_count: u32,
    /// Memory slices one instance occupies.
    pub placement_size: u32,
    /// Memory slices where an instance may start.
    pub placement_starts: &'static [u32],
}

/// A MIG-capable model's profile table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigTable {
    /// Memory slices of the whole GPU.
    pub memory_slices: u32,
    /// Compute slices of the whole GPU.
    pub compute_slices: u32,
    /// GPU-instance profiles, smallest first.
    pub profiles: &'static [MigProfile],
}

impl MigTable {
    /// The profile with the driver's id `id`.
    pub fn profile(&self, id: u32) -> Option<&'static MigProfile> {
        self.profiles.iter().find(|p| p.id == id)
    }

    /// The profile named `name` (e.g. `3g.20gb`).
    pub fn profile_named(&self, name: &str) -> Option<&'static MigProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }
}

const ALL_ONE: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
const EVEN: &[u32] = &[0, 2, 4, 6];
const TWO_SLICE: &[u32] = &[0, 2, 4];
const HALVES: &[u32] = &[0, 4];
const WHOLE: &[u32] = &[0];

/// Builds an 8-memory-slice, 7-compute-slice table (A100 and H100) from the
/// memory (MiB) of the 1g, 1g-double, 3g and 7g profiles.
macro_rules! eight_slice_table {
    ($g1:literal, $g1d:literal, $g2:literal, $g3:literal, $g4:literal, $g7:literal,
     $m1:literal, $m2:literal, $m3:literal, $m7:literal) => {
        MigTable {
            memory_slices: 8,
            compute_slices: 7,
            profiles: &[
                MigProfile {
                    id: 19,
                    name: $g1,
                    compute_slices: 1,
                    memory_mib: $m1,
                    max_count: 7,
                    placement_size: 1,
                    placement_starts: ALL_ONE,
                },
                MigProfile {
                    id: 20,
                    name: concat!($g1, "+me"),
                    compute_slices: 1,
                    memory_mib: $m1,
                    max_count: 1,
                    placement_size: 1,
                    placement_starts: ALL_ONE,
                },
                MigProfile {
                    id: 15,
                    name: $g1d,
                    compute_slices: 1,
                    memory_mib: $m2,
                    max_count: 4,
                    placement_size: 2,
                    placement_starts: EVEN,
                },
                MigProfile {
                    id: 14,
                    name: $g2,
                    compute_slices: 2,
                    memory_mib: $m2,
                    max_count: 3,
                    placement_size: 2,
                    placement_starts: TWO_SLICE,
                },
                MigProfile {
                    id: 9,
                    name: $g3,
                    compute_slices: 3,
                    memory_mib: $m3,
                    max_count: 2,
                    placement_size: 4,
                    placement_starts: HALVES,
                },
                MigProfile {
                    id: 5,
                    name: $g4,
                    compute_slices: 4,
                    memory_mib: $m3,
                    max_count: 1,
                    placement_size: 4,
                    placement_starts: WHOLE,
                },
                MigProfile {
                    id: 0,
                    name: $g7,
                    compute_slices: 7,
                    memory_mib: $m7,
                    max_count: 1,
                    placement_size: 8,
                    placement_starts: WHOLE,
                },
            ],
        }
    };
}

/// A100-SXM4-40GB.
pub const A100_40GB: MigTable = eight_slice_table!(
    "1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", 4864, 9856, 19968, 40192
);

/// A100-SXM4-80GB.
pub const A100_80GB: MigTable = eight_slice_table!(
    "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", 9728, 19968, 40192, 80896
);

/// H100 80GB (SXM5 and PCIe).
pub const H100_80GB: MigTable = eight_slice_table!(
    "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", 9984, 20096, 40448, 81152
);

/// H200 141GB, as a real H200 reported it (`nvidia-smi mig -lgip`/`-lgipp`,
/// driver 580.159.04): the H100's ids and placements, larger memory.
pub const H200_141GB: MigTable = eight_slice_table!(
    "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", 16384, 33280, 71424, 143360
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a100_40gb_matches_nvidias_table() {
        let t = &A100_40GB;
        let row = |name: &str| {
            let p = t.profiles.iter().find(|p| p.name == name).unwrap();
            (p.id, p.max_count, p.placement_size, p.placement_starts)
        };
        assert_eq!(row("1g.5gb"), (19, 7, 1, &[0, 1, 2, 3, 4, 5, 6][..]));
        assert_eq!(row("1g.5gb+me"), (20, 1, 1, &[0, 1, 2, 3, 4, 5, 6][..]));
        assert_eq!(row("1g.10gb"), (15, 4, 2, &[0, 2, 4, 6][..]));
        assert_eq!(row("2g.10gb"), (14, 3, 2, &[0, 2, 4][..]));
        assert_eq!(row("3g.20gb"), (9, 2, 4, &[0, 4][..]));
        assert_eq!(row("4g.20gb"), (5, 1, 4, &[0][..]));
        assert_eq!(row("7g.40gb"), (0, 1, 8, &[0][..]));
    }

    #[test]
    fn h200_matches_what_a_real_h200_reported() {
        // `gpuctl inspect` on an NVIDIA H200, driver 580.159.04.
        let rows: Vec<_> = H200_141GB
            .profiles
            .iter()
            .map(|p| (p.id, p.name, p.compute_slices, p.memory_mib, p.max_count))
            .collect();
        assert_eq!(
            rows,
            [
                (19, "1g.18gb", 1, 16384, 7),
                (20, "1g.18gb+me", 1, 16384, 1),
                (15, "1g.35gb", 1, 33280, 4),
                (14, "2g.35gb", 2, 33280, 3),
                (9, "3g.71gb", 3, 71424, 2),
                (5, "4g.71gb", 4, 71424, 1),
                (0, "7g.141gb", 7, 143360, 1),
            ]
        );
        let placements = |id| {
            let p = H200_141GB.profile(id).unwrap();
            (p.placement_size, p.placement_starts)
        };
        assert_eq!(placements(15), (2, &[0, 2, 4, 6][..]));
        assert_eq!(placements(9), (4, &[0, 4][..]));
    }

    #[test]
    fn every_placement_fits_the_gpu() {
        for t in [&A100_40GB, &A100_80GB, &H100_80GB, &H200_141GB] {
            for p in t.profiles {
                assert!(p.compute_slices <= t.compute_slices, "{}", p.name);
                for s in p.placement_starts {
                    assert!(s + p.placement_size <= t.memory_slices, "{}", p.name);
                    assert_eq!(s % p.placement_size, 0, "{} is aligned", p.name);
                }
            }
        }
    }
}
