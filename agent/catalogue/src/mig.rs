//! MIG (Multi-Instance GPU) profile tables, as the driver reports them.
//!
//! Profile ids are the driver's (`nvidia-smi mig -lgip`, and the `id` field of
//! `nvmlGpuInstanceProfileInfo_t`): 1g 19, 1g+me 20, 1g with twice the memory
//! 15, 2g 14, 3g 9, 4g 5, 7g 0. Placements count memory slices: an A100 or H100
//! has 8 memory slices and 7 compute slices. The tables follow NVIDIA's MIG user
//! guide ("Supported MIG Profiles"); memory sizes are the MiB the driver lists.

use std::fmt;

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

    /// The GPU-instance profile `name` names (e.g. `3g.20gb`, `1g.5gb+me`,
    /// or `3c.3g.20gb`, the same profile with its full-size compute
    /// instance), read as [`ProfileName`] reads it: attributes in any order.
    /// `None` for a name outside the grammar, a compute-instance profile
    /// (`1c.3g.20gb`), or a profile this table lacks.
    pub fn profile_named(&self, name: &str) -> Option<&'static MigProfile> {
        let wanted = ProfileName::parse(name).ok()?;
        if wanted.is_compute_instance() {
            return None;
        }
        self.profiles
            .iter()
            .find(|p| ProfileName::parse(p.name).is_ok_and(|n| n == wanted))
    }
}

/// A MIG profile name as NVIDIA's tools read it (go-nvlib's `MigProfile`
/// grammar, which mig-parted files follow): `[<c>c.]<g>g.<gb>gb`, then
/// either `+` and attributes or `-` and attributes the profile lacks,
/// comma-separated (`1g.10gb+me`, `1g.24gb+me.all`, `1g.24gb-me`,
/// `1c.2g.10gb+gfx`). Without `<c>c.` the compute instance is the whole GPU
/// instance; two names are the same profile when their numbers and their
/// sets of attributes are equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileName {
    /// Compute slices of the compute instance (`c`; `g` when left out).
    pub compute: u32,
    /// Compute slices of the GPU instance (`g`).
    pub slices: u32,
    /// Memory, GB as the name rounds it (`gb`).
    pub memory_gb: u32,
    /// Attributes after `+`, sorted (e.g. `me`, `me.all`, `gfx`).
    pub attributes: Vec<String>,
    /// Attributes after `-`, sorted: what the profile lacks (`me`).
    pub without: Vec<String>,
}

impl ProfileName {
    /// Reads a profile name; `Err` says what breaks the grammar.
    pub fn parse(name: &str) -> Result<ProfileName, String> {
        if name.is_empty() {
            return Err("the name is empty".into());
        }
        let (base, attributes, without) = match (name.split_once('+'), name.split_once('-')) {
            (Some(_), Some(_)) => {
                return Err("it has both `+` and `-` attributes".into());
            }
            (Some((base, a)), None) => (base, attributes(a)?, Vec::new()),
            (None, Some((base, a))) => (base, Vec::new(), attributes(a)?),
            (None, None) => (name, Vec::new(), Vec::new()),
        };
        let fields: Vec<&str> = base.splitn(3, '.').collect();
        let (compute, slices, memory_gb) = match fields[..] {
            [c, g, m] => (number(c, "c")?, number(g, "g")?, number(m, "gb")?),
            [g, m] => {
                let g = number(g, "g")?;
                (g, g, number(m, "gb")?)
            }
            _ => return Err("expected 2 or 3 fields separated by `.`".into()),
        };
        Ok(ProfileName {
            compute,
            slices,
            memory_gb,
            attributes,
            without,
        })
    }

    /// Whether it names a compute instance smaller than its GPU instance.
    pub fn is_compute_instance(&self) -> bool {
        self.compute != self.slices
    }

    /// The GPU-instance profile's name: `1c.3g.20gb+me` → `3g.20gb+me`.
    pub fn gpu_instance(&self) -> ProfileName {
        ProfileName {
            compute: self.slices,
            ..self.clone()
        }
    }
}

impl fmt::Display for ProfileName {
    /// The name as NVIDIA's tools write it (attributes sorted).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_compute_instance() {
            write!(f, "{}c.", self.compute)?;
        }
        write!(f, "{}g.{}gb", self.slices, self.memory_gb)?;
        if !self.attributes.is_empty() {
            write!(f, "+{}", self.attributes.join(","))?;
        }
        if !self.without.is_empty() {
            write!(f, "-{}", self.without.join(","))?;
        }
        Ok(())
    }
}

/// One `<n><unit>` field of a profile name.
fn number(field: &str, unit: &str) -> Result<u32, String> {
    let digits = field
        .strip_suffix(unit)
        .ok_or_else(|| format!("`{field}` is not `<number>{unit}`"))?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{field}` is not `<number>{unit}`"));
    }
    digits
        .parse()
        .map_err(|_| format!("`{field}`: the number is too large"))
}

/// The attributes after `+` or `-`: comma-separated, each distinct, of
/// letters, digits and inner dots, not beginning with a digit.
fn attributes(list: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for a in list.split(',') {
        if a.is_empty() {
            return Err("an attribute is empty".into());
        }
        if !a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.') {
            return Err(format!(
                "attribute `{a}` holds a character other than a letter, a digit or `.`"
            ));
        }
        if a.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("attribute `{a}` begins with a digit"));
        }
        if a.starts_with('.') || a.ends_with('.') {
            return Err(format!("attribute `{a}` begins or ends with `.`"));
        }
        if out.iter().any(|b| b == a) {
            return Err(format!("attribute `{a}` is given twice"));
        }
        out.push(a.to_string());
    }
    out.sort();
    Ok(out)
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

const QUARTERS: &[u32] = &[0, 1, 2, 3];
const HALVES_OF_FOUR: &[u32] = &[0, 2];

/// A30 24GB: 4 memory slices and 4 compute slices. Ids, counts and
/// placements as NVIDIA's MIG user guide lists them (the `+me` forms since
/// R470 for 1g and R525 for 2g); memory the MiB of its GiB figures (5.81,
/// 11.69, 23.44).
pub const A30_24GB: MigTable = MigTable {
    memory_slices: 4,
    compute_slices: 4,
    profiles: &[
        MigProfile {
            id: 14,
            name: "1g.6gb",
            compute_slices: 1,
            memory_mib: 5952,
            max_count: 4,
            placement_size: 1,
            placement_starts: QUARTERS,
        },
        MigProfile {
            id: 21,
            name: "1g.6gb+me",
            compute_slices: 1,
            memory_mib: 5952,
            max_count: 1,
            placement_size: 1,
            placement_starts: QUARTERS,
        },
        MigProfile {
            id: 5,
            name: "2g.12gb",
            compute_slices: 2,
            memory_mib: 11968,
            max_count: 2,
            placement_size: 2,
            placement_starts: HALVES_OF_FOUR,
        },
        MigProfile {
            id: 6,
            name: "2g.12gb+me",
            compute_slices: 2,
            memory_mib: 11968,
            max_count: 1,
            placement_size: 2,
            placement_starts: HALVES_OF_FOUR,
        },
        MigProfile {
            id: 0,
            name: "4g.24gb",
            compute_slices: 4,
            memory_mib: 24000,
            max_count: 1,
            placement_size: 4,
            placement_starts: WHOLE,
        },
    ],
};

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
    fn h100_matches_what_a_real_h100_reported() {
        // The read-only conformance suite on an NVIDIA H100 80GB HBM3, driver
        // 580.159.04, MIG mode off: the driver answered profile indices 0-4,
        // 7 and 9 (and their placements); 5, 6, 8 and 10-16 (the 8 and 6
        // slice, 2g+me, +gfx, -me and +me.all forms) Not Supported.
        let rows: Vec<_> = H100_80GB
            .profiles
            .iter()
            .map(|p| {
                (
                    p.id,
                    p.name,
                    p.compute_slices,
                    p.memory_mib,
                    p.max_count,
                    p.placement_size,
                    p.placement_starts,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (19, "1g.10gb", 1, 9984, 7, 1, &[0, 1, 2, 3, 4, 5, 6][..]),
                (20, "1g.10gb+me", 1, 9984, 1, 1, &[0, 1, 2, 3, 4, 5, 6][..]),
                (15, "1g.20gb", 1, 20096, 4, 2, &[0, 2, 4, 6][..]),
                (14, "2g.20gb", 2, 20096, 3, 2, &[0, 2, 4][..]),
                (9, "3g.40gb", 3, 40448, 2, 4, &[0, 4][..]),
                (5, "4g.40gb", 4, 40448, 1, 4, &[0][..]),
                (0, "7g.80gb", 7, 81152, 1, 8, &[0][..]),
            ]
        );
    }

    #[test]
    fn profile_names_read_as_nvidias_tools_read_them() {
        let read = |s: &str| ProfileName::parse(s).map(|n| n.to_string());
        for (name, canonical) in [
            ("3g.20gb", "3g.20gb"),
            ("1g.5gb+me", "1g.5gb+me"),
            ("1g.24gb+me.all", "1g.24gb+me.all"),
            ("1g.24gb-me", "1g.24gb-me"),
            ("2g.48gb+gfx", "2g.48gb+gfx"),
            ("1g.24gb+me,gfx", "1g.24gb+gfx,me"),
            ("1c.3g.20gb", "1c.3g.20gb"),
            ("1c.2g.24gb+gfx", "1c.2g.24gb+gfx"),
            ("3c.3g.20gb", "3g.20gb"),
            ("01g.05gb", "1g.5gb"),
        ] {
            assert_eq!(read(name).as_deref(), Ok(canonical), "{name}");
        }
        for (name, why) in [
            ("", "the name is empty"),
            ("3g", "expected 2 or 3 fields separated by `.`"),
            ("3g.20", "`20` is not `<number>gb`"),
            ("g.20gb", "`g` is not `<number>g`"),
            ("3g.20GB", "`20GB` is not `<number>gb`"),
            ("1x.3g.20gb", "`1x` is not `<number>c`"),
            ("1c.3g.20gb.x", "`20gb.x` is not `<number>gb`"),
            (" 3g.20gb", "` 3g` is not `<number>g`"),
            ("1g.24gb+me-gfx", "it has both `+` and `-` attributes"),
            ("1g.24gb+", "an attribute is empty"),
            ("1g.24gb+me,", "an attribute is empty"),
            ("1g.24gb+me,me", "attribute `me` is given twice"),
            ("1g.24gb+2me", "attribute `2me` begins with a digit"),
            ("1g.24gb+.me", "attribute `.me` begins or ends with `.`"),
            ("1g.24gb+me.", "attribute `me.` begins or ends with `.`"),
            (
                "1g.24gb+m_e",
                "attribute `m_e` holds a character other than a letter, a digit or `.`",
            ),
            (
                "99999999999g.5gb",
                "`99999999999g`: the number is too large",
            ),
        ] {
            assert_eq!(read(name), Err(why.to_string()), "{name:?}");
        }
        let ci = ProfileName::parse("1c.3g.20gb+me").unwrap();
        assert!(ci.is_compute_instance());
        assert_eq!(ci.gpu_instance().to_string(), "3g.20gb+me");
    }

    #[test]
    fn a_table_finds_a_profile_by_any_spelling_of_its_name() {
        let t = &A100_40GB;
        assert_eq!(t.profile_named("3g.20gb").map(|p| p.id), Some(9));
        assert_eq!(t.profile_named("7c.7g.40gb").map(|p| p.id), Some(0));
        assert_eq!(t.profile_named("1g.5gb+me").map(|p| p.id), Some(20));
        assert_eq!(t.profile_named("1c.3g.20gb"), None);
        assert_eq!(t.profile_named("1g.5gb-me"), None);
        assert_eq!(t.profile_named("1g.5gb+me.all"), None);
        assert_eq!(t.profile_named("3g.20"), None);
        assert_eq!(A30_24GB.profile_named("2g.12gb+me").map(|p| p.id), Some(6));
    }

    #[test]
    fn a30_has_four_slices_and_nvidias_profiles() {
        let rows: Vec<_> = A30_24GB
            .profiles
            .iter()
            .map(|p| {
                (
                    p.id,
                    p.name,
                    p.compute_slices,
                    p.max_count,
                    p.placement_size,
                    p.placement_starts,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (14, "1g.6gb", 1, 4, 1, &[0, 1, 2, 3][..]),
                (21, "1g.6gb+me", 1, 1, 1, &[0, 1, 2, 3][..]),
                (5, "2g.12gb", 2, 2, 2, &[0, 2][..]),
                (6, "2g.12gb+me", 2, 1, 2, &[0, 2][..]),
                (0, "4g.24gb", 4, 1, 4, &[0][..]),
            ]
        );
        assert_eq!((A30_24GB.memory_slices, A30_24GB.compute_slices), (4, 4));
    }

    #[test]
    fn every_catalogued_name_is_in_the_grammar_and_names_itself() {
        for t in [&A100_40GB, &A100_80GB, &H100_80GB, &H200_141GB, &A30_24GB] {
            for p in t.profiles {
                let n = ProfileName::parse(p.name).unwrap();
                assert_eq!(n.to_string(), p.name);
                assert_eq!(t.profile_named(p.name), Some(p));
            }
        }
    }

    #[test]
    fn every_placement_fits_the_gpu() {
        for t in [&A100_40GB, &A100_80GB, &H100_80GB, &H200_141GB, &A30_24GB] {
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
