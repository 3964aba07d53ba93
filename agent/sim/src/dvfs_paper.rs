//! The DVFS paper's task generator (docs/dvfs.md §4, the code's
//! `rand_gen`), seeded: every distribution as the authors' code draws it.
//!
//! Per task: e = randint(10, 50); D = U(1.66, 7.61)·e; t0 = U(0.1, 0.95)·e;
//! δ = U(0.07, 0.91); P* = randint(175, 206); p0 = P*·U(0.20, 0.41);
//! γ = P*·U(0.1, 0.2); c = P* − p0 − γ; u = U(0.25, 0.75) offline or
//! U(0.15, 0.85) online; deadline = arrival + t*/u with t* = D + t0 (slots).
//! Offline: int(2048·U) tasks at slot 0. Online: int(2048·0.4) tasks at slot
//! 0, then int(2048·U) over slots 1 … 1439, the counts per slot Poisson of
//! mean n/1440, redrawn until they sum to n.

use gpu_agent_dvfs::cluster::Task;
use gpu_agent_dvfs::Profile;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Poisson};

/// Pairs (GPUs) of the paper's cluster.
pub const PAIRS: usize = 2048;
/// Utilisation of the online workload's tasks at slot 0.
pub const ONLINE_START_UTIL: f64 = 0.4;
/// Slots that receive online arrivals: 1 … ARRIVAL_SLOTS − 1.
pub const ARRIVAL_SLOTS: usize = 1440;

/// Offline (every task at slot 0) or online (arrivals over a day of slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every task at slot 0, u ~ U(0.25, 0.75).
    Offline,
    /// 819 tasks at slot 0 and Poisson arrivals, u ~ U(0.15, 0.85).
    Online,
}

/// One task drawn for `arrival`.
fn draw(rng: &mut StdRng, mode: Mode, arrival: f64) -> Task {
    let e = f64::from(rng.random_range(10u32..=50));
    let d = rng.random_range(1.66..7.61) * e;
    let t0 = rng.random_range(0.1..0.95) * e;
    let delta = rng.random_range(0.07..0.91);
    let p_star = f64::from(rng.random_range(175u32..=206));
    let p0 = p_star * rng.random_range(0.20..0.41);
    let gamma = p_star * rng.random_range(0.1..0.2);
    let c = p_star - p0 - gamma;
    let u = match mode {
        Mode::Offline => rng.random_range(0.25..0.75),
        Mode::Online => rng.random_range(0.15..0.85),
    };
    Task {
        profile: Profile {
            p0,
            gamma,
            c,
            delta,
            d,
            t0,
        },
        arrival,
        deadline: arrival + (d + t0) / u,
    }
}

/// A task set of utilisation `util` drawn from `seed`, in arrival order.
pub fn generate(mode: Mode, util: f64, seed: u64) -> Vec<Task> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = (PAIRS as f64 * util) as usize;
    match mode {
        Mode::Offline => (0..n).map(|_| draw(&mut rng, mode, 0.0)).collect(),
        Mode::Online => {
            let first = (PAIRS as f64 * ONLINE_START_UTIL) as usize;
            let mut tasks: Vec<Task> = (0..first).map(|_| draw(&mut rng, mode, 0.0)).collect();
            let counts = arrival_counts(&mut rng, n);
            for (slot, &count) in counts.iter().enumerate() {
                for _ in 0..count {
                    tasks.push(draw(&mut rng, mode, (slot + 1) as f64));
                }
            }
            tasks
        }
    }
}

/// Arrivals in slots 1 … 1439: Poisson counts of mean n/1440, redrawn until
/// they sum to `n`.
fn arrival_counts(rng: &mut StdRng, n: usize) -> Vec<usize> {
    if n == 0 {
        return vec![0; ARRIVAL_SLOTS - 1];
    }
    let poisson = Poisson::new(n as f64 / ARRIVAL_SLOTS as f64).expect("a positive mean");
    loop {
        let counts: Vec<usize> = (1..ARRIVAL_SLOTS)
            .map(|_| poisson.sample(rng) as usize)
            .collect();
        if counts.iter().sum::<usize>() == n {
            return counts;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_sets_are_seeded_and_within_the_ranges() {
        let a = generate(Mode::Offline, 1.0, 7);
        assert_eq!(a.len(), 2048);
        assert_eq!(a, generate(Mode::Offline, 1.0, 7));
        assert_ne!(a, generate(Mode::Offline, 1.0, 8));
        for t in &a {
            let p = &t.profile;
            let p_star = p.p0 + p.gamma + p.c;
            assert!(
                (175.0 - 1e-9..=206.0 + 1e-9).contains(&p_star)
                    && (p_star - p_star.round()).abs() < 1e-9,
                "{p_star}"
            );
            assert!(p.p0 >= 0.20 * p_star && p.p0 < 0.41 * p_star);
            assert!(p.gamma >= 0.1 * p_star && p.gamma < 0.2 * p_star);
            assert!((0.07..0.91).contains(&p.delta));
            let u = (p.d + p.t0) / (t.deadline - t.arrival);
            assert!((0.25..0.75).contains(&(u * (1.0 - 1e-12))), "{u}");
            assert_eq!(t.arrival, 0.0);
        }
        // u ~ U(0.25, 0.75): its mean is 0.5.
        let mean_u: f64 = a
            .iter()
            .map(|t| (t.profile.d + t.profile.t0) / t.deadline)
            .sum::<f64>()
            / a.len() as f64;
        assert!((mean_u - 0.5).abs() < 0.02, "{mean_u}");
    }

    #[test]
    fn online_arrivals_sum_exactly_and_stay_in_the_day() {
        let a = generate(Mode::Online, 1.6, 3);
        assert_eq!(a.len(), 819 + 3276);
        assert_eq!(a.iter().filter(|t| t.arrival == 0.0).count(), 819);
        assert!(a.iter().all(|t| t.arrival < ARRIVAL_SLOTS as f64));
        assert!(a.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    }
}
