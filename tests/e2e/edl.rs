//! `edl` through the real gpuctl: Algorithm 1's clocks, rounded up to the
//! GPU's supported clocks by the core, the energy re-evaluated there, and the
//! no-DVFS baseline of the same rules.

use gpu_agent_dvfs::{Options, Profile};

use crate::harness::{success, Sim, EDL};

/// One A100-SXM4-40GB: core 210..1410 MHz in 15 MHz steps, default 1095;
/// one memory clock. `default` profile: p0 55, γ 69, c 276 (formats.md §6).
const HOST: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\n";

/// The `default` profile of a 10 s task on the A100.
fn profile() -> Profile {
    Profile {
        p0: 55.0,
        gamma: 69.0,
        c: 276.0,
        delta: 0.5,
        d: 1.0,
        t0: 0.0,
    }
    .scaled_to(10.0)
}

/// Algorithm 1 on the A100's range (the search's memory clock pinned at 1),
/// with a window, rounded up to the 15 MHz grid: (core MHz, t, P).
fn expected(window: f64) -> (u32, f64, f64) {
    let options = Options {
        fc_range: (210.0 / 1095.0, 1410.0 / 1095.0),
        fm_range: (1.0, 1.0),
        ..Options::default()
    };
    let fc = options.choose(&profile(), Some(window)).point.setting.fc;
    let mhz = ((fc * 1095.0 - 1e-6) / 15.0).ceil() as u32 * 15;
    let at = profile().at_clocks(f64::from(mhz) / 1095.0, 1.0);
    (mhz, at.t, at.p)
}

/// Runs `trace` under edl: (metrics, schedule rows split on commas).
fn run(trace: &str) -> (serde_json::Value, Vec<Vec<String>>) {
    let sim = Sim::new(&[EDL], HOST, trace);
    let schedule = sim.path("schedule.csv");
    let out = sim.run(&["--policy", "edl", "--json", "--schedule", &schedule]);
    let metrics = serde_json::from_str(&success(&out)).unwrap();
    let rows = std::fs::read_to_string(&schedule)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    (metrics, rows)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn energy_prior_tasks_run_at_their_optimum_and_save_against_default_clocks() {
    // Two 10 s tasks on one GPU, back to back: b (d 15) starts on arrival,
    // a (d 100) follows, each at its energy-optimal clocks.
    let trace = "id,arrival,workload,mem_gb,deadline,weight\nb,0,10,1,15,1\na,0,10,1,100,1\n";
    let (m, rows) = run(trace);
    let (mhz, t, p) = expected(15.0);
    assert!(mhz < 1095 && t < 15.0, "{mhz} MHz, {t} s");
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0][0].as_str(), rows[1][0].as_str()), ("b", "a"));
    for r in &rows {
        assert_eq!(r[4], mhz.to_string(), "{r:?}");
        assert_eq!((r[13].as_str(), r[14].as_str()), ("energy", "false"));
        assert!(close(r[10].parse().unwrap(), t) && close(r[11].parse().unwrap(), p));
        // E* = 400 W × 10 s.
        assert!(close(r[12].parse().unwrap(), 4000.0), "{r:?}");
    }
    // The GPU is busy from 0 to 2t: no idle energy, no overhead.
    let f = |k: &str| m[k].as_f64().unwrap();
    assert!(close(f("energy_run_j"), 2.0 * t * p));
    assert_eq!((f("energy_idle_j"), f("energy_overhead_j")), (0.0, 0.0));
    assert!(close(f("energy_j"), 2.0 * t * p));
    // Without DVFS: both at 400 W for 10 s.
    assert!(close(f("energy_baseline_j"), 8000.0));
    assert!(close(f("energy_saving"), 1.0 - 2.0 * t * p / 8000.0));
    assert_eq!(m["dmc"].as_u64(), Some(0));
}

#[test]
fn a_deadline_prior_task_is_sped_up_to_meet_its_deadline() {
    let (free_mhz, free_t, _) = expected(f64::INFINITY);
    assert!(free_t > 11.0, "the optimum takes {free_t} s");
    let (m, rows) = run("id,arrival,workload,mem_gb,deadline,weight\nx,0,10,1,11,1\n");
    let (mhz, t, _) = expected(11.0);
    assert!(mhz > free_mhz && t <= 11.0);
    assert_eq!(rows[0][4], mhz.to_string());
    assert_eq!(
        (rows[0][13].as_str(), rows[0][14].as_str()),
        ("deadline", "false")
    );
    assert!(close(rows[0][3].parse().unwrap(), t));
    assert_eq!(m["dmc"].as_u64(), Some(0));
}
