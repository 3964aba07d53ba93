//! Algorithm A (docs/mig.md §4.3): at most (2+ε)·OPT + |C'| GPUs over the
//! configurations C' it enumerates.
//!
//! 1. Throughputs are capped at the demand (everywhere in this crate).
//! 2. U = the greedy's GPU count; the grid L = {0} ∪ {⌊(1+ε)^k⌋ : 0 ≤ k ≤
//!    ⌈log_{1+ε} U⌉}.
//! 3. Grid vectors m ∈ L^|C'| go by increasing Σm (ties lexicographic), those
//!    below the LP bound skipped; the first whose LP with y = m is feasible
//!    wins, its simplex solution a vertex. C' is all of C when |L|^|C| is at
//!    most [`FULL_ENUMERATION`], else the support C* of the LP optimum (then
//!    the guarantee holds against plans using C* only; the output says which).
//! 4. The graph jobs ∪ block types, an edge where x_ij > 0: each component
//!    has at most one cycle (checked: an error otherwise).
//! 5. A cycle is broken at its lowest-index job by zeroing the one of its two
//!    cycle edges with the smaller f·x (tie: higher block index), which roots
//!    the component; trees root at their lowest-index job.
//! 6. Away from the root, each job rounds its child blocks up to ⌈2x⌉ and its
//!    parent block down to ⌊2x⌋.
//! 7. GPUs: 2m_σ of each σ, plus the fewest extra GPUs (of any configuration)
//!    that give one more block of each type the rounding needs beyond 2Σ m_σ σ_i.
//! 8. Spare blocks go to the job with the least headroom ([`Plan::build`]);
//!    GPUs are dropped, last first, while an exact re-assignment meets every
//!    demand.
//!
//! [`Plan::build`]: crate::plan::Plan::build

use crate::greedy::greedy;
use crate::lp::{drop_spare, fixed, LpError, Solved, TOLERANCE};
use crate::plan::RoundingCheck;
use crate::problem::Problem;
use crate::solve::PlanError;

/// The most grid vectors over all of C before rounding enumerates over the
/// LP's support instead.
pub const FULL_ENUMERATION: f64 = 20_000.0;

/// The most LPs the enumeration solves before it gives up.
pub const MAX_LPS: usize = 200_000;

/// A rounded plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Rounded {
    /// Configuration of each GPU.
    pub gpus: Vec<usize>,
    /// Blocks of each type per job.
    pub x: Vec<Vec<u32>>,
    /// The guarantee and whether it holds (`within` is set by the caller on
    /// the verified plan).
    pub check: RoundingCheck,
}

/// The grid L for upper bound `u` and ratio `eps`, ascending.
pub fn grid(u: u32, eps: f64) -> Vec<u32> {
    let mut l = vec![0u32];
    if u >= 1 {
        let top = (f64::from(u).ln() / (1.0 + eps).ln()).ceil().max(0.0) as i32;
        for k in 0..=top {
            l.push((1.0 + eps).powi(k).floor() as u32);
        }
    }
    l.sort_unstable();
    l.dedup();
    l
}

/// Runs Algorithm A on `p`, whose LP relaxation is `lp`.
pub fn rounding(
    p: &Problem,
    lp: &Solved,
    eps: f64,
    progress: &mut dyn FnMut(&str),
) -> Result<Rounded, PlanError> {
    let (nb, nj) = (p.profiles.len(), p.jobs.len());
    progress("rounding: greedy for the grid's upper bound");
    let u = greedy(p)
        .ok_or_else(|| PlanError::Infeasible("greedy found no gain".into()))?
        .gpus
        .len() as u32;
    let l = grid(u, eps);
    let all = (l.len() as f64).powi(p.configurations.len() as i32) <= FULL_ENUMERATION;
    let used: Vec<usize> = if all {
        (0..p.configurations.len()).collect()
    } else {
        (0..p.configurations.len())
            .filter(|&c| lp.y[c] > TOLERANCE)
            .collect()
    };
    progress(&format!(
        "rounding: grid of {} values up to {u}, over {} configurations{}",
        l.len(),
        used.len(),
        if all { "" } else { " (the LP's support)" }
    ));
    let (m, vertex) = first_feasible(p, &l, &used, lp.bound(), progress)?;
    let grid_gpus: u32 = m.iter().sum();

    // Steps 4-6: the graph, its cycles, the rounding.
    let mut x = vertex.x.clone();
    for row in &mut x {
        for v in row.iter_mut() {
            if *v <= TOLERANCE {
                *v = 0.0;
            }
        }
    }
    let rounded = round(p, &mut x)?;

    // Step 7: 2m plus the fewest extra GPUs.
    let mut gpus: Vec<usize> = Vec::new();
    for (k, &c) in used.iter().enumerate() {
        gpus.extend(std::iter::repeat_n(c, 2 * m[k] as usize));
    }
    let have = p.supply(&gpus);
    let short: Vec<usize> = (0..nb)
        .filter(|&i| rounded[i].iter().sum::<u32>() > have[i])
        .collect();
    for i in &short {
        debug_assert_eq!(rounded[*i].iter().sum::<u32>(), have[*i] + 1);
    }
    gpus.extend(fewest_cover(p, &short));
    let bound = 2 * grid_gpus + used.len() as u32;

    // Step 8: drop GPUs while the demands stay met.
    let mut x = rounded;
    drop_spare(p, &mut gpus, &mut x);
    debug_assert_eq!(x.len(), nb);
    debug_assert!(x.iter().all(|r| r.len() == nj));
    Ok(Rounded {
        gpus,
        x,
        check: RoundingCheck {
            grid_gpus,
            configurations: used.len(),
            all_configurations: all,
            bound,
            within: false,
        },
    })
}

/// Step 3: the first grid vector (over `used`) by increasing sum whose LP is
/// feasible, and that LP's vertex.
fn first_feasible(
    p: &Problem,
    l: &[u32],
    used: &[usize],
    bound: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<u32>, Solved), PlanError> {
    let top = *l.last().expect("the grid holds 0") * used.len() as u32;
    let mut solved = 0usize;
    for sum in bound..=top {
        let mut found = None;
        let mut m = vec![0u32; used.len()];
        let mut err = None;
        with_sum(l, sum, 0, &mut m, &mut |m| {
            if solved >= MAX_LPS {
                err = Some(PlanError::Solver(format!(
                    "rounding: no feasible grid vector within {MAX_LPS} LPs"
                )));
                return true;
            }
            solved += 1;
            let mut y = vec![0u32; p.configurations.len()];
            for (k, &c) in used.iter().enumerate() {
                y[c] = m[k];
            }
            match fixed(p, &y) {
                Ok(s) => {
                    found = Some((m.to_vec(), s));
                    true
                }
                Err(LpError::Infeasible) => false,
                Err(e) => {
                    err = Some(e.into());
                    true
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        if let Some(f) = found {
            progress(&format!(
                "rounding: {solved} LPs, first feasible grid vector at {sum} GPUs"
            ));
            return Ok(f);
        }
    }
    Err(PlanError::Solver(
        "rounding: no grid vector is feasible (the grid's bound is wrong)".into(),
    ))
}

/// Calls `visit` on each vector of `l`-values with coordinates `k..` summing
/// to `sum` (coordinates before `k` set), lexicographically; stops when it
/// returns true. Returns whether it stopped.
fn with_sum(
    l: &[u32],
    sum: u32,
    k: usize,
    m: &mut Vec<u32>,
    visit: &mut dyn FnMut(&[u32]) -> bool,
) -> bool {
    let top = *l.last().expect("the grid holds 0");
    let rest = (m.len() - k) as u32;
    if k == m.len() {
        return sum == 0 && visit(m);
    }
    if sum > top * rest {
        return false;
    }
    for &v in l {
        if v > sum {
            break;
        }
        m[k] = v;
        if with_sum(l, sum - v, k + 1, m, visit) {
            return true;
        }
    }
    m[k] = 0;
    false
}

/// Steps 4-6 on the vertex `x` (tiny values already zero): the rounded
/// blocks per type and job.
fn round(p: &Problem, x: &mut [Vec<f64>]) -> Result<Vec<Vec<u32>>, PlanError> {
    let (nb, nj) = (p.profiles.len(), p.jobs.len());
    // Nodes: jobs 0..nj, blocks nj..nj+nb.
    let n = nj + nb;
    let adjacency = |x: &[Vec<f64>]| {
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, row) in x.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                if v > 0.0 {
                    adj[j].push(nj + i);
                    adj[nj + i].push(j);
                }
            }
        }
        adj
    };
    let adj = adjacency(x);
    let mut component = vec![usize::MAX; n];
    let mut roots: Vec<usize> = Vec::new();
    for start in 0..nj {
        if component[start] != usize::MAX {
            continue;
        }
        // The component of job `start` (its lowest-index job).
        let mut members = vec![start];
        component[start] = start;
        let mut k = 0;
        while k < members.len() {
            for &w in &adj[members[k]] {
                if component[w] == usize::MAX {
                    component[w] = start;
                    members.push(w);
                }
            }
            k += 1;
        }
        let edges = members.iter().map(|&v| adj[v].len()).sum::<usize>() / 2;
        if edges > members.len() {
            return Err(PlanError::Solver(format!(
                "rounding: the LP solution is not a vertex (a component of {} nodes has {edges} edges)",
                members.len()
            )));
        }
        let mut root = start;
        if edges == members.len() {
            let cycle = cycle_of(&members, &adj);
            let j0 = *cycle
                .iter()
                .filter(|&&v| v < nj)
                .min()
                .expect("a bipartite cycle holds jobs");
            let mut ends: Vec<usize> = adj[j0]
                .iter()
                .copied()
                .filter(|b| cycle.contains(b))
                .collect();
            // Smaller f·x first; tie: higher block index first.
            ends.sort_by(|&a, &b| {
                let w = |v: usize| p.capped(j0, v - nj) * x[v - nj][j0];
                w(a).total_cmp(&w(b)).then(b.cmp(&a))
            });
            x[ends[0] - nj][j0] = 0.0;
            root = j0;
        }
        roots.push(root);
    }
    let adj = adjacency(x);
    let mut out = vec![vec![0u32; nj]; nb];
    let mut seen = vec![false; n];
    for root in roots {
        // Orient away from the root: an edge (parent, child).
        seen[root] = true;
        let mut queue = vec![root];
        let mut k = 0;
        while k < queue.len() {
            let v = queue[k];
            for &w in &adj[v] {
                if seen[w] {
                    continue;
                }
                seen[w] = true;
                queue.push(w);
                let (i, j, up) = if v < nj {
                    // Job v, its child block w: round up.
                    (w - nj, v, true)
                } else {
                    // Block v, its child job w: v is w's parent block, round down.
                    (v - nj, w, false)
                };
                let twice = 2.0 * x[i][j];
                out[i][j] = if up {
                    (twice - TOLERANCE).ceil() as u32
                } else {
                    (twice + TOLERANCE).floor() as u32
                };
            }
            k += 1;
        }
    }
    Ok(out)
}

/// The nodes of the one cycle of a component (`members`, as many edges as
/// nodes): what is left after stripping leaves.
fn cycle_of(members: &[usize], adj: &[Vec<usize>]) -> Vec<usize> {
    let mut degree: std::collections::BTreeMap<usize, usize> =
        members.iter().map(|&v| (v, adj[v].len())).collect();
    let mut leaves: Vec<usize> = degree
        .iter()
        .filter(|(_, &d)| d == 1)
        .map(|(&v, _)| v)
        .collect();
    while let Some(v) = leaves.pop() {
        degree.remove(&v);
        for w in &adj[v] {
            if let Some(d) = degree.get_mut(w) {
                *d -= 1;
                if *d == 1 {
                    leaves.push(*w);
                }
            }
        }
    }
    degree.into_keys().collect()
}

/// The fewest GPUs (configuration indices) holding at least one block of
/// each type in `short`.
fn fewest_cover(p: &Problem, short: &[usize]) -> Vec<usize> {
    if short.is_empty() {
        return Vec::new();
    }
    let covers = |set: &[usize]| {
        short
            .iter()
            .all(|&i| set.iter().any(|&c| p.counts[c][i] > 0))
    };
    let nc = p.configurations.len();
    for k in 1..short.len() {
        let mut pick: Vec<usize> = (0..k).collect();
        loop {
            if covers(&pick) {
                return pick;
            }
            // Next k-combination of 0..nc.
            let mut t = k;
            while t > 0 && pick[t - 1] == nc - k + t - 1 {
                t -= 1;
            }
            if t == 0 {
                break;
            }
            pick[t - 1] += 1;
            for s in t..k {
                pick[s] = pick[s - 1] + 1;
            }
        }
    }
    // One GPU per short type always does.
    short
        .iter()
        .map(|&i| {
            (0..nc)
                .find(|&c| p.counts[c][i] > 0)
                .expect("every planned profile is in some configuration")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lp::relaxation;
    use crate::plan::Plan;
    use crate::problem::testing::worked_example;

    #[test]
    fn the_grid_has_zero_and_covers_u() {
        assert_eq!(grid(0, 0.1), [0]);
        assert_eq!(grid(1, 0.1), [0, 1]);
        assert_eq!(grid(8, 0.5), [0, 1, 2, 3, 5, 7, 11]);
        // The smallest grid value >= v is <= (1+eps) v.
        for u in 1..40 {
            for eps in [0.1, 0.5, 1.0] {
                let l = grid(u, eps);
                for v in 1..=u {
                    let up = *l.iter().find(|&&g| g >= v).unwrap();
                    assert!(f64::from(up) <= (1.0 + eps) * f64::from(v) + 1e-9);
                }
            }
        }
    }

    #[test]
    fn sums_go_in_lexicographic_order() {
        let mut seen = Vec::new();
        with_sum(&[0, 1, 2], 2, 0, &mut vec![0; 3], &mut |m| {
            seen.push(m.to_vec());
            false
        });
        assert_eq!(
            seen,
            [
                [0, 0, 2],
                [0, 1, 1],
                [0, 2, 0],
                [1, 0, 1],
                [1, 1, 0],
                [2, 0, 0]
            ]
        );
    }

    #[test]
    fn the_worked_example_is_within_its_bound() {
        let p = worked_example();
        let lp = relaxation(&p).unwrap();
        let r = rounding(&p, &lp, 0.1, &mut |_| {}).unwrap();
        let plan = Plan::build(&p, &r.gpus, &r.x);
        assert_eq!(plan.verify(&p, lp.bound()), Ok(()));
        assert!(r.gpus.len() as u32 <= r.check.bound, "{:?}", r.check);
        assert!(!r.check.all_configurations);
    }
}
