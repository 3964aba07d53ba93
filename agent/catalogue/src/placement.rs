//! Where MIG GPU instances go: the placement tree of a profile table
//! (docs/mig.md §2).
//!
//! The memory slices of an A100 or H100 form a tree of aligned intervals:
//! `[0,8)` splits into `[0,4)` and `[4,8)`, each of those into two quarters,
//! each quarter into its slices. A profile labels the nodes whose interval it
//! can occupy (its size and one of its listed starts), so the tree comes from
//! the table alone. A layout is an antichain of labelled nodes that also keeps
//! each profile's count and the compute slices within the GPU's; a
//! configuration is the multiset of a layout's profiles.
//!
//! [`Tree::maximal_layouts`] and [`Tree::configurations`] generate every layout
//! and configuration of a table (the planner's set C); [`place`] places a
//! multiset, first-fit decreasing with backtracking.

use std::collections::BTreeSet;
use std::fmt;

use super::mig::{MigProfile, MigTable};

/// One GPU instance of a layout: a profile at a first memory slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    /// The profile.
    pub profile: &'static MigProfile,
    /// First memory slice.
    pub start: u32,
}

impl Instance {
    /// The memory slices it occupies, as a bit mask (bit `s` = slice `s`).
    fn mask(&self) -> u32 {
        ((1u32 << self.profile.placement_size) - 1) << self.start
    }
}

impl PartialOrd for Instance {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Instance {
    /// By start, then profile id (a layout's instances never share a start).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.start, self.profile.id).cmp(&(other.start, other.profile.id))
    }
}

impl fmt::Display for Instance {
    /// `4g.20gb@0`, the host file's and `Decision::MigLayout`'s spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.profile.name, self.start)
    }
}

/// The GPU instances of one GPU, ordered by start.
pub type Layout = Vec<Instance>;

/// Why a layout breaks the driver's rules (docs/mig.md §1.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// The profile cannot start at that memory slice.
    Start(Instance),
    /// Two instances share a memory slice.
    Overlap(Instance, Instance),
    /// More instances of a profile than the GPU allows.
    Count(&'static MigProfile),
    /// The instances need more compute slices than the GPU has.
    Compute(u32),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Start(i) => {
                let starts: Vec<String> = i
                    .profile
                    .placement_starts
                    .iter()
                    .map(u32::to_string)
                    .collect();
                write!(
                    f,
                    "{} cannot start at memory slice {} (valid starts: {})",
                    i.profile.name,
                    i.start,
                    starts.join(", ")
                )
            }
            LayoutError::Overlap(a, b) => write!(f, "{a} and {b} share memory slices"),
            LayoutError::Count(p) => write!(f, "{}: at most {} instance(s)", p.name, p.max_count),
            LayoutError::Compute(n) => write!(f, "{n} compute slices asked, the GPU has fewer"),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Checks a layout against the table's rules: listed starts, disjoint memory
/// slices, per-profile counts, compute slices.
pub fn check(table: &MigTable, layout: &[Instance]) -> Result<(), LayoutError> {
    for (k, i) in layout.iter().enumerate() {
        if !i.profile.placement_starts.contains(&i.start)
            || i.start + i.profile.placement_size > table.memory_slices
        {
            return Err(LayoutError::Start(*i));
        }
        if let Some(j) = layout[..k].iter().find(|j| j.mask() & i.mask() != 0) {
            return Err(LayoutError::Overlap(*j, *i));
        }
    }
    if let Some(p) = table
        .profiles
        .iter()
        .find(|p| layout.iter().filter(|i| i.profile.id == p.id).count() as u32 > p.max_count)
    {
        return Err(LayoutError::Count(p));
    }
    let compute: u32 = layout.iter().map(|i| i.profile.compute_slices).sum();
    if compute > table.compute_slices {
        return Err(LayoutError::Compute(compute));
    }
    Ok(())
}

/// A profile to place, at a fixed start or wherever it fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The profile.
    pub profile: &'static MigProfile,
    /// The first memory slice it must take; `None`: first fit.
    pub start: Option<u32>,
}

impl Request {
    /// Reads `PROFILE` or `PROFILE@START` (e.g. `3g.20gb@4`; the host file's
    /// and `Decision::MigLayout`'s spelling, docs/mig.md §6.1, §6.4) against
    /// `table`: the profile must be one of its names, the start one of the
    /// profile's placements.
    pub fn parse(table: &'static MigTable, text: &str) -> Result<Request, String> {
        let (name, start) = match text.split_once('@') {
            None => (text, None),
            Some((name, start)) => match start.parse::<u32>() {
                Ok(s) => (name, Some(s)),
                Err(_) => {
                    return Err(format!(
                        "expected PROFILE or PROFILE@START (START: the first memory slice, a number), got {text:?}"
                    ))
                }
            },
        };
        let Some(profile) = table.profile_named(name) else {
            let names: Vec<&str> = table.profiles.iter().map(|p| p.name).collect();
            return Err(format!(
                "unknown MIG profile {name:?}; this model's: {}",
                names.join(", ")
            ));
        };
        if let Some(start) = start {
            let instance = Instance { profile, start };
            if !profile.placement_starts.contains(&start) {
                return Err(LayoutError::Start(instance).to_string());
            }
        }
        Ok(Request { profile, start })
    }
}

/// Places `requests` on an empty GPU: largest first (memory, then compute,
/// fixed starts before free ones), each at its lowest free start, backtracking
/// when a later one finds no room. `None` iff no valid layout holds them all.
pub fn place(table: &MigTable, requests: &[Request]) -> Option<Layout> {
    let mut order: Vec<Request> = requests.to_vec();
    order.sort_by_key(|r| {
        (
            std::cmp::Reverse(r.profile.placement_size),
            std::cmp::Reverse(r.profile.compute_slices),
            r.start.is_none(),
            r.profile.id,
            r.start,
        )
    });
    let mut layout = Vec::with_capacity(order.len());
    if !place_from(table, &order, 0, &mut layout) {
        return None;
    }
    layout.sort();
    debug_assert_eq!(check(table, &layout), Ok(()));
    Some(layout)
}

/// Places the profiles of a configuration wherever they fit.
pub fn place_all(table: &MigTable, profiles: &[&'static MigProfile]) -> Option<Layout> {
    let requests: Vec<Request> = profiles
        .iter()
        .map(|&profile| Request {
            profile,
            start: None,
        })
        .collect();
    place(table, &requests)
}

/// Places `requests` as [`place`] does, or says why no valid layout holds
/// them: a profile over its count, or (the message names them all) no
/// disjoint placement.
pub fn place_or_explain(table: &MigTable, requests: &[Request]) -> Result<Layout, String> {
    if let Some(p) = table
        .profiles
        .iter()
        .find(|p| requests.iter().filter(|r| r.profile.id == p.id).count() as u32 > p.max_count)
    {
        return Err(LayoutError::Count(p).to_string());
    }
    place(table, requests).ok_or_else(|| {
        let asked: Vec<String> = requests
            .iter()
            .map(|r| match r.start {
                Some(s) => format!("{}@{s}", r.profile.name),
                None => r.profile.name.to_string(),
            })
            .collect();
        format!(
            "{} cannot all be placed on one GPU: no layout gives each its own memory slices at a valid start",
            asked.join(", ")
        )
    })
}

fn place_from(table: &MigTable, order: &[Request], next: usize, layout: &mut Layout) -> bool {
    let Some(r) = order.get(next) else {
        return true;
    };
    let used = layout.iter().fold(0, |m, i| m | i.mask());
    let starts: Vec<u32> = match r.start {
        Some(s) => vec![s],
        None => r.profile.placement_starts.to_vec(),
    };
    for start in starts {
        let candidate = Instance {
            profile: r.profile,
            start,
        };
        layout.push(candidate);
        if candidate.mask() & used == 0
            && check(table, layout).is_ok()
            && place_from(table, order, next + 1, layout)
        {
            return true;
        }
        layout.pop();
    }
    false
}

/// A node of the placement tree: an aligned interval of memory slices and the
/// profiles that can occupy exactly it.
#[derive(Debug, Clone)]
struct Node {
    start: u32,
    labels: Vec<&'static MigProfile>,
    children: Vec<Node>,
}

/// The placement tree of a table over a chosen set of profiles.
#[derive(Debug, Clone)]
pub struct Tree {
    table: &'static MigTable,
    profiles: Vec<&'static MigProfile>,
    root: Node,
}

impl Tree {
    /// The tree of `table` over `profiles` (each one of the table's).
    ///
    /// # Panics
    /// If the table's memory slices or a placement size is not a power of two,
    /// or a start is not aligned to its size (no NVIDIA table is so).
    pub fn new(table: &'static MigTable, profiles: &[&'static MigProfile]) -> Tree {
        assert!(table.memory_slices.is_power_of_two());
        for p in profiles {
            assert!(p.placement_size.is_power_of_two(), "{}", p.name);
            assert!(
                p.placement_starts.iter().all(|s| s % p.placement_size == 0),
                "{}",
                p.name
            );
        }
        let root = Self::node(profiles, 0, table.memory_slices);
        Tree {
            table,
            profiles: profiles.to_vec(),
            root,
        }
    }

    /// The tree of `table` over its profiles but the `+me` ones (the planner's
    /// default, docs/mig.md §5.1).
    pub fn default_profiles(table: &'static MigTable) -> Tree {
        let profiles: Vec<&'static MigProfile> = table
            .profiles
            .iter()
            .filter(|p| !p.name.ends_with("+me"))
            .collect();
        Tree::new(table, &profiles)
    }

    fn node(profiles: &[&'static MigProfile], start: u32, size: u32) -> Node {
        let labels = profiles
            .iter()
            .copied()
            .filter(|p| p.placement_size == size && p.placement_starts.contains(&start))
            .collect();
        let children = if size > 1 {
            let half = size / 2;
            vec![
                Self::node(profiles, start, half),
                Self::node(profiles, start + half, half),
            ]
        } else {
            Vec::new()
        };
        Node {
            start,
            labels,
            children,
        }
    }

    /// The table.
    pub fn table(&self) -> &'static MigTable {
        self.table
    }

    /// The profiles the tree places.
    pub fn profiles(&self) -> &[&'static MigProfile] {
        &self.profiles
    }

    /// Every valid layout, the empty one included: each node is labelled,
    /// split into its children's layouts, or (a leaf) left empty; antichains
    /// that break a count or the compute slices are dropped.
    pub fn layouts(&self) -> Vec<Layout> {
        let mut all: Vec<Layout> = Self::antichains(&self.root)
            .into_iter()
            .filter(|l| check(self.table, l).is_ok())
            .map(|mut l| {
                l.sort();
                l
            })
            .collect();
        all.sort();
        all
    }

    fn antichains(node: &Node) -> Vec<Layout> {
        let mut out: Vec<Layout> = node
            .labels
            .iter()
            .map(|&profile| {
                vec![Instance {
                    profile,
                    start: node.start,
                }]
            })
            .collect();
        let mut product: Vec<Layout> = vec![Vec::new()];
        for child in &node.children {
            let below = Self::antichains(child);
            product = product
                .iter()
                .flat_map(|left| {
                    below.iter().map(move |right| {
                        let mut l = left.clone();
                        l.extend_from_slice(right);
                        l
                    })
                })
                .collect();
        }
        out.extend(product);
        out
    }

    /// The layouts to which no instance of the tree's profiles can be added.
    pub fn maximal_layouts(&self) -> Vec<Layout> {
        let placements: Vec<Instance> = self
            .profiles
            .iter()
            .flat_map(|&profile| {
                profile
                    .placement_starts
                    .iter()
                    .map(move |&start| Instance { profile, start })
            })
            .collect();
        self.layouts()
            .into_iter()
            .filter(|l| {
                !placements.iter().any(|extra| {
                    let mut more = l.clone();
                    more.push(*extra);
                    check(self.table, &more).is_ok()
                })
            })
            .collect()
    }

    /// The configurations of the maximal layouts, each once: the multisets of
    /// profiles a GPU can hold with nothing left to add. Every valid
    /// multiset is contained in one of them. Each is sorted largest profile
    /// first; the list is sorted by total compute slices, largest first, then
    /// by profiles.
    pub fn configurations(&self) -> Vec<Configuration> {
        let set: BTreeSet<Configuration> = self
            .maximal_layouts()
            .iter()
            .map(|l| Configuration::of(l))
            .collect();
        let mut all: Vec<Configuration> = set.into_iter().collect();
        all.sort_by_key(|c| std::cmp::Reverse(c.compute_slices()));
        all
    }
}

/// The multiset of profiles of a layout, largest first.
#[derive(Debug, Clone)]
pub struct Configuration {
    /// (memory slices, compute slices, inverted id) of each instance,
    /// descending: equal multisets have equal keys.
    key: Vec<(u32, u32, u32)>,
    profiles: Vec<&'static MigProfile>,
}

impl PartialEq for Configuration {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Configuration {}

impl PartialOrd for Configuration {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Configuration {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

impl Configuration {
    /// The configuration of a layout.
    pub fn of(layout: &[Instance]) -> Configuration {
        Configuration::from_profiles(layout.iter().map(|i| i.profile).collect())
    }

    /// A configuration from its profiles, in any order (not checked for
    /// placeability: see [`place_all`]).
    pub fn from_profiles(mut profiles: Vec<&'static MigProfile>) -> Configuration {
        let key_of = |p: &MigProfile| (p.placement_size, p.compute_slices, u32::MAX - p.id);
        profiles.sort_by_key(|p| std::cmp::Reverse(key_of(p)));
        let key = profiles.iter().map(|p| key_of(p)).collect();
        Configuration { key, profiles }
    }

    /// The profiles, largest first.
    pub fn profiles(&self) -> &[&'static MigProfile] {
        &self.profiles
    }

    /// How many instances of the profile with id `id` it holds.
    pub fn count(&self, id: u32) -> u32 {
        self.profiles.iter().filter(|p| p.id == id).count() as u32
    }

    /// Total compute slices.
    pub fn compute_slices(&self) -> u32 {
        self.profiles.iter().map(|p| p.compute_slices).sum()
    }
}

impl fmt::Display for Configuration {
    /// `4g.20gb + 3g.20gb`; repeated profiles with a count: `3g.20gb + 1g.5gb x4`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let mut k = 0;
        while k < self.profiles.len() {
            let p = self.profiles[k];
            let n = self.profiles[k..]
                .iter()
                .take_while(|q| q.id == p.id)
                .count();
            parts.push(if n == 1 {
                p.name.to_string()
            } else {
                format!("{} x{}", p.name, n)
            });
            k += n;
        }
        if parts.is_empty() {
            write!(f, "(empty)")
        } else {
            write!(f, "{}", parts.join(" + "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::{A100_40GB, A30_24GB, H100_80GB};

    fn profiles(table: &'static MigTable, ids: &[u32]) -> Vec<&'static MigProfile> {
        ids.iter().map(|&id| table.profile(id).unwrap()).collect()
    }

    fn named(table: &'static MigTable, name: &str) -> &'static MigProfile {
        table.profiles.iter().find(|p| p.name == name).unwrap()
    }

    #[test]
    fn requests_read_profile_and_start_and_place_or_say_why_not() {
        let parse = |text: &str| Request::parse(&A100_40GB, text);
        let layout = |texts: &[&str]| {
            let requests: Vec<Request> = texts.iter().map(|t| parse(t).unwrap()).collect();
            place_or_explain(&A100_40GB, &requests)
                .map(|l| l.iter().map(Instance::to_string).collect::<Vec<_>>())
        };
        // First fit would put 3g at 0 and strand the second 2g: it backtracks.
        assert_eq!(
            layout(&["3g.20gb", "2g.10gb", "2g.10gb"]).unwrap(),
            ["2g.10gb@0", "2g.10gb@2", "3g.20gb@4"]
        );
        assert_eq!(
            layout(&["1g.5gb@6", "4g.20gb"]).unwrap(),
            ["4g.20gb@0", "1g.5gb@6"]
        );
        assert_eq!(
            parse("3g.40gb").unwrap_err(),
            "unknown MIG profile \"3g.40gb\"; this model's: 1g.5gb, 1g.5gb+me, 1g.10gb, \
             2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
        );
        assert_eq!(
            parse("3g.20gb@2").unwrap_err(),
            "3g.20gb cannot start at memory slice 2 (valid starts: 0, 4)"
        );
        assert_eq!(
            parse("3g.20gb@x").unwrap_err(),
            "expected PROFILE or PROFILE@START (START: the first memory slice, a number), got \"3g.20gb@x\""
        );
        assert_eq!(
            layout(&["3g.20gb", "3g.20gb", "3g.20gb"]).unwrap_err(),
            "3g.20gb: at most 2 instance(s)"
        );
        assert_eq!(
            layout(&["4g.20gb", "3g.20gb@0"]).unwrap_err(),
            "4g.20gb, 3g.20gb@0 cannot all be placed on one GPU: no layout gives each its own memory slices at a valid start"
        );
    }

    #[test]
    fn a100_has_nvidias_19_layouts_and_14_configurations() {
        let tree = Tree::new(&A100_40GB, &profiles(&A100_40GB, &[19, 14, 9, 5, 0]));
        let layouts = tree.maximal_layouts();
        assert_eq!(layouts.len(), 19);
        assert_eq!(tree.configurations().len(), 14);
        // Row 1 of the spec's table, and row 12 (2g+2g | 2g+1g).
        let text: Vec<String> = layouts
            .iter()
            .map(|l| {
                l.iter()
                    .map(Instance::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        assert!(text.contains(&"7g.40gb@0".to_string()));
        assert!(text.contains(&"2g.10gb@0,2g.10gb@2,2g.10gb@4,1g.5gb@6".to_string()));
        assert!(text.contains(&"4g.20gb@0,3g.20gb@4".to_string()));
        // Slice 7 stays empty unless 3g or 7g covers it.
        for l in &layouts {
            let covers_7 = l.iter().any(|i| i.mask() & (1 << 7) != 0);
            let big = l
                .iter()
                .any(|i| i.profile.id == 9 && i.start == 4 || i.profile.id == 0);
            assert_eq!(covers_7, big, "{l:?}");
        }
    }

    #[test]
    fn with_1g_10gb_there_are_78_layouts_and_38_configurations() {
        let tree = Tree::new(&A100_40GB, &profiles(&A100_40GB, &[19, 15, 14, 9, 5, 0]));
        assert_eq!(tree.maximal_layouts().len(), 78);
        assert_eq!(tree.configurations().len(), 38);
        // The default set (all but +me) is the same one.
        let default = Tree::default_profiles(&A100_40GB);
        assert_eq!(default.configurations(), tree.configurations());
    }

    #[test]
    fn h100_has_the_same_structure() {
        let tree = Tree::new(&H100_80GB, &profiles(&H100_80GB, &[19, 14, 9, 5, 0]));
        assert_eq!(tree.maximal_layouts().len(), 19);
        assert_eq!(tree.configurations().len(), 14);
    }

    #[test]
    fn a30_has_five_maximal_layouts_and_four_configurations() {
        // 4g; 2g+2g; 2g with two 1g, either half; four 1g.
        let tree = Tree::default_profiles(&A30_24GB);
        let layouts: Vec<String> = tree
            .maximal_layouts()
            .iter()
            .map(|l| {
                let names: Vec<String> = l.iter().map(Instance::to_string).collect();
                names.join(" ")
            })
            .collect();
        assert_eq!(
            layouts,
            [
                "4g.24gb@0",
                "2g.12gb@0 2g.12gb@2",
                "2g.12gb@0 1g.6gb@2 1g.6gb@3",
                "1g.6gb@0 1g.6gb@1 2g.12gb@2",
                "1g.6gb@0 1g.6gb@1 1g.6gb@2 1g.6gb@3",
            ]
        );
        assert_eq!(tree.configurations().len(), 4);
    }

    #[test]
    fn every_generated_layout_is_valid_and_every_placement_appears() {
        let tree = Tree::default_profiles(&A100_40GB);
        let all = tree.layouts();
        assert!(all.contains(&Vec::new()));
        for l in &all {
            assert_eq!(check(&A100_40GB, l), Ok(()), "{l:?}");
        }
        for p in tree.profiles() {
            for &start in p.placement_starts {
                let single = vec![Instance { profile: p, start }];
                assert!(all.contains(&single), "{p:?}@{start}");
            }
        }
        let distinct: BTreeSet<&Layout> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
    }

    #[test]
    fn every_configuration_places_and_no_maximal_layout_takes_more() {
        let tree = Tree::default_profiles(&A100_40GB);
        for c in tree.configurations() {
            let layout = place_all(&A100_40GB, c.profiles()).expect("placeable");
            assert_eq!(Configuration::of(&layout), c);
        }
        for l in tree.maximal_layouts() {
            for extra in tree.profiles() {
                let mut requests: Vec<Request> = l
                    .iter()
                    .map(|i| Request {
                        profile: i.profile,
                        start: Some(i.start),
                    })
                    .collect();
                requests.push(Request {
                    profile: extra,
                    start: None,
                });
                assert_eq!(place(&A100_40GB, &requests), None, "{l:?} + {}", extra.name);
            }
        }
        // A configuration may still lie inside another: 3g + 1g x3 (slice 7
        // empty) inside 3g + 1g x4, as the spec's 14 include both.
        let small = Configuration::from_profiles(profiles(&A100_40GB, &[9, 19, 19, 19]));
        assert!(tree.configurations().contains(&small));
    }

    #[test]
    fn first_fit_decreasing_backtracks() {
        let t = &A100_40GB;
        let (g1, g1d, g2, g3, g4) = (
            named(t, "1g.5gb"),
            named(t, "1g.10gb"),
            named(t, "2g.10gb"),
            named(t, "3g.20gb"),
            named(t, "4g.20gb"),
        );
        // 4g takes [0,4); 3g must go to 4.
        let l = place_all(t, &[g3, g4]).unwrap();
        assert_eq!(l[0].to_string(), "4g.20gb@0");
        assert_eq!(l[1].to_string(), "3g.20gb@4");
        // 1g.10gb first fit would take 0 and leave 2g no room; 2g goes first.
        let l = place_all(t, &[g1d, g2, g2, g2]).unwrap();
        let text: Vec<String> = l.iter().map(Instance::to_string).collect();
        assert_eq!(text, ["2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "1g.10gb@6"]);
        // A fixed 1g at 0 pushes 2g and 3g aside; a fixed 3g at 0 leaves no room
        // for 4g.
        let at = |profile, start| Request {
            profile,
            start: Some(start),
        };
        let free = |profile| Request {
            profile,
            start: None,
        };
        let l = place(t, &[at(g1, 0), free(g2), free(g3)]).unwrap();
        let text: Vec<String> = l.iter().map(Instance::to_string).collect();
        assert_eq!(text, ["1g.5gb@0", "2g.10gb@2", "3g.20gb@4"]);
        assert_eq!(place(t, &[at(g3, 0), free(g4)]), None);
        // Counts and memory.
        assert_eq!(place_all(t, &[g1; 8]), None);
        assert_eq!(place_all(t, &[g3, g3, g1]), None);
        assert_eq!(place_all(t, &[g2, g2, g2, g2]), None);
    }

    #[test]
    fn check_names_what_is_wrong() {
        let t = &A100_40GB;
        let i = |name, start| Instance {
            profile: named(t, name),
            start,
        };
        assert_eq!(
            check(t, &[i("2g.10gb", 1)]).unwrap_err().to_string(),
            "2g.10gb cannot start at memory slice 1 (valid starts: 0, 2, 4)"
        );
        assert_eq!(
            check(t, &[i("4g.20gb", 0), i("2g.10gb", 2)])
                .unwrap_err()
                .to_string(),
            "4g.20gb@0 and 2g.10gb@2 share memory slices"
        );
        assert_eq!(
            check(t, &[i("1g.5gb+me", 0), i("1g.5gb+me", 1)]).unwrap_err(),
            LayoutError::Count(named(t, "1g.5gb+me"))
        );
    }

    #[test]
    fn configurations_print_as_counts() {
        let t = &A100_40GB;
        let c = Configuration::from_profiles(vec![
            named(t, "1g.5gb"),
            named(t, "3g.20gb"),
            named(t, "1g.5gb"),
        ]);
        assert_eq!(c.to_string(), "3g.20gb + 1g.5gb x2");
        assert_eq!(c.count(19), 2);
        assert_eq!(c.compute_slices(), 5);
    }
}
