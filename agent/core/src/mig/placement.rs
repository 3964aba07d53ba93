//! The placement tree (mig.md §4.5): where GPU instances go on a GPU's memory
//! slices.
//!
//! Placements are aligned intervals of memory slices whose sizes are powers of
//! two, so two of them are either nested or disjoint: they form a tree
//! ([0,8) → [0,4), [4,8) → …), and a layout is an antichain of it. A layout is
//! valid when each instance starts at a listed start of its profile, no
//! profile exceeds its count, no two instances share a memory slice and the
//! compute slices fit the GPU. [`place`] finds a layout for a multiset of
//! profiles by first-fit decreasing with backtracking; it succeeds exactly
//! when some valid layout holds them all.

use std::fmt;

use super::{MigProfile, MigTable};

/// One GPU instance of a layout: a profile at its first memory slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// The instance's profile.
    pub profile: &'static MigProfile,
    /// The first memory slice it occupies.
    pub start: u32,
}

impl Placed {
    /// One past the last memory slice it occupies.
    pub fn end(&self) -> u32 {
        self.start + self.profile.placement_size
    }

    /// Whether the two share a memory slice.
    pub fn overlaps(&self, other: &Placed) -> bool {
        self.start < other.end() && other.start < self.end()
    }
}

impl fmt::Display for Placed {
    /// `4g.20gb@0`, the form of host TOML and policy requests.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.profile.name, self.start)
    }
}

/// Why a layout breaks the driver's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// A profile cannot start at this memory slice.
    Start {
        /// The profile's name.
        profile: &'static str,
        /// The requested first slice.
        start: u32,
        /// Where it may start.
        starts: &'static [u32],
    },
    /// More instances of a profile than the GPU holds.
    Count {
        /// The profile's name.
        profile: &'static str,
        /// The most the GPU holds.
        max: u32,
    },
    /// Two instances share memory slices.
    Overlap(Placed, Placed),
    /// More compute slices than the GPU has.
    Compute {
        /// Compute slices asked for.
        used: u32,
        /// Compute slices of the GPU.
        max: u32,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Start {
                profile,
                start,
                starts,
            } => {
                let starts: Vec<String> = starts.iter().map(u32::to_string).collect();
                write!(
                    f,
                    "{profile} cannot start at memory slice {start} (valid starts: {})",
                    starts.join(", ")
                )
            }
            LayoutError::Count { profile, max } => {
                write!(f, "{profile}: at most {max} instance(s) per GPU")
            }
            LayoutError::Overlap(a, b) => write!(
                f,
                "{a} (slices {}..{}) overlaps {b} (slices {}..{})",
                a.start,
                a.end(),
                b.start,
                b.end()
            ),
            LayoutError::Compute { used, max } => {
                write!(f, "{used} compute slices asked for, the GPU has {max}")
            }
        }
    }
}

impl std::error::Error for LayoutError {}

/// Checks `layout` against `table`'s rules (mig.md §2.1, rule 1).
pub fn check(table: &MigTable, layout: &[Placed]) -> Result<(), LayoutError> {
    for (i, p) in layout.iter().enumerate() {
        if !p.profile.placement_starts.contains(&p.start) || p.end() > table.memory_slices {
            return Err(LayoutError::Start {
                profile: p.profile.name,
                start: p.start,
                starts: p.profile.placement_starts,
            });
        }
        if let Some(q) = layout[..i].iter().find(|q| q.overlaps(p)) {
            return Err(LayoutError::Overlap(*q, *p));
        }
        let same = layout[..=i]
            .iter()
            .filter(|q| q.profile.id == p.profile.id)
            .count() as u32;
        if same > p.profile.max_count {
            return Err(LayoutError::Count {
                profile: p.profile.name,
                max: p.profile.max_count,
            });
        }
    }
    let used = layout.iter().map(|p| p.profile.compute_slices).sum::<u32>();
    if used > table.compute_slices {
        return Err(LayoutError::Compute {
            used,
            max: table.compute_slices,
        });
    }
    Ok(())
}

/// Places `rest` beside the instances of `fixed`: first-fit decreasing
/// (largest placement first, lowest start first) with backtracking. Returns
/// the whole layout ordered by start, or `None` when `fixed` is invalid or no
/// valid layout holds everything.
pub fn place(
    table: &MigTable,
    fixed: &[Placed],
    rest: &[&'static MigProfile],
) -> Option<Vec<Placed>> {
    check(table, fixed).ok()?;
    let mut todo = rest.to_vec();
    todo.sort_by(|a, b| {
        (b.placement_size, b.compute_slices, a.id).cmp(&(a.placement_size, a.compute_slices, b.id))
    });
    let mut layout = fixed.to_vec();
    if !first_fit(table, &todo, 0, &mut layout) {
        return None;
    }
    layout.sort_by_key(|p| p.start);
    Some(layout)
}

/// Places `todo` in order into `layout`, the first at a start ≥ `from`,
/// backtracking; false when nothing fits.
fn first_fit(
    table: &MigTable,
    todo: &[&'static MigProfile],
    from: u32,
    layout: &mut Vec<Placed>,
) -> bool {
    let Some((&profile, more)) = todo.split_first() else {
        return true;
    };
    for &start in profile.placement_starts.iter().filter(|&&s| s >= from) {
        layout.push(Placed { profile, start });
        // Instances of one profile are interchangeable: the next one starts
        // further on, so no permutation of one layout is searched twice.
        let next = match more.first() {
            Some(n) if n.id == profile.id => start + 1,
            _ => 0,
        };
        if check(table, layout).is_ok() && first_fit(table, more, next, layout) {
            return true;
        }
        layout.pop();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::{A100_40GB, H100_80GB};

    fn p(table: &MigTable, name: &str) -> &'static MigProfile {
        table.profile_named(name).unwrap()
    }

    fn names(layout: &[Placed]) -> Vec<String> {
        layout.iter().map(Placed::to_string).collect()
    }

    fn many(table: &MigTable, spec: &[(&str, usize)]) -> Vec<&'static MigProfile> {
        spec.iter()
            .flat_map(|&(n, k)| std::iter::repeat_n(p(table, n), k))
            .collect()
    }

    #[test]
    fn largest_first_backtracking_when_the_first_fit_strands_a_profile() {
        let t = &A100_40GB;
        // 3g@0 leaves 2g@4 and one 1g@6; the second 1g has no slice 7: the
        // search moves 3g to 4.
        let got = place(
            t,
            &[],
            &many(t, &[("1g.5gb", 2), ("3g.20gb", 1), ("2g.10gb", 1)]),
        );
        assert_eq!(
            names(&got.unwrap()),
            ["2g.10gb@0", "1g.5gb@2", "1g.5gb@3", "3g.20gb@4"]
        );
        let got = place(t, &[], &many(t, &[("4g.20gb", 1), ("3g.20gb", 1)])).unwrap();
        assert_eq!(names(&got), ["4g.20gb@0", "3g.20gb@4"]);
    }

    #[test]
    fn the_spec_example_places_on_a100_and_h100() {
        let t = &A100_40GB;
        let got = place(
            t,
            &[],
            &many(t, &[("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)]),
        );
        assert_eq!(
            names(&got.unwrap()),
            ["2g.10gb@0", "1g.5gb@2", "1g.5gb@3", "3g.20gb@4"]
        );
        let t = &H100_80GB;
        let got = place(
            t,
            &[],
            &many(t, &[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)]),
        );
        assert!(got.is_some());
    }

    #[test]
    fn impossible_multisets_find_no_layout() {
        let t = &A100_40GB;
        for spec in [
            &[("1g.5gb", 8)][..],
            &[("4g.20gb", 1), ("3g.20gb", 2)],
            &[("7g.40gb", 1), ("1g.5gb", 1)],
            &[("2g.10gb", 3), ("1g.10gb", 2)],
            &[("3g.20gb", 1), ("2g.10gb", 2), ("1g.5gb", 2)],
            &[("1g.5gb+me", 2)],
        ] {
            assert_eq!(place(t, &[], &many(t, spec)), None, "{spec:?}");
        }
        // Seven 1g fit (slice 7 stays empty); 2g ×3 and one 1g too.
        assert!(place(t, &[], &many(t, &[("1g.5gb", 7)])).is_some());
        let got = place(t, &[], &many(t, &[("2g.10gb", 3), ("1g.5gb", 1)])).unwrap();
        assert_eq!(
            names(&got),
            ["2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "1g.5gb@6"]
        );
    }

    #[test]
    fn fixed_instances_stay_where_they_are() {
        let t = &A100_40GB;
        let fixed = [Placed {
            profile: p(t, "1g.5gb"),
            start: 5,
        }];
        let got = place(t, &fixed, &many(t, &[("1g.5gb", 1), ("3g.20gb", 1)])).unwrap();
        assert_eq!(names(&got), ["3g.20gb@0", "1g.5gb@4", "1g.5gb@5"]);
        // A fixed instance that breaks the rules places nothing.
        let bad = [Placed {
            profile: p(t, "2g.10gb"),
            start: 6,
        }];
        assert_eq!(place(t, &bad, &[]), None);
    }

    #[test]
    fn check_names_the_broken_rule() {
        let t = &A100_40GB;
        let at = |n: &str, start| Placed {
            profile: p(t, n),
            start,
        };
        assert_eq!(
            check(t, &[at("2g.10gb", 6)]).unwrap_err().to_string(),
            "2g.10gb cannot start at memory slice 6 (valid starts: 0, 2, 4)"
        );
        assert_eq!(
            check(t, &[at("3g.20gb", 0), at("1g.5gb", 3)])
                .unwrap_err()
                .to_string(),
            "3g.20gb@0 (slices 0..4) overlaps 1g.5gb@3 (slices 3..4)"
        );
        assert_eq!(
            check(t, &[at("1g.5gb+me", 0), at("1g.5gb+me", 1)])
                .unwrap_err()
                .to_string(),
            "1g.5gb+me: at most 1 instance(s) per GPU"
        );
        assert_eq!(check(t, &[at("4g.20gb", 0), at("3g.20gb", 4)]), Ok(()));
    }
}
