//! Planned busy intervals per device, and the earliest gap that fits a task.
//!
//! A run holds its devices for at least one representable instant: one whose
//! start plus run time rounds back to its start (a run time far below the
//! clock's resolution, say 1e-300 s at 1000 s) still holds them at its start,
//! so no two runs are planned to start on a device at once.

/// Busy intervals `[start, end)` per device, indexed by device index.
#[derive(Debug, Clone)]
pub struct Timeline {
    now: f64,
    busy: Vec<Vec<(f64, f64)>>,
}

impl Timeline {
    /// Device j busy from `now` until `release[j]` (free at once when
    /// `release[j] <= now`).
    pub fn new(now: f64, release: &[f64]) -> Timeline {
        let busy = release
            .iter()
            .map(|&r| if r > now { vec![(now, r)] } else { Vec::new() })
            .collect();
        Timeline { now, busy }
    }

    /// The number of devices.
    pub fn devices(&self) -> usize {
        self.busy.len()
    }

    /// When device `j` is free of everything booked on it.
    pub fn release(&self, j: u32) -> f64 {
        self.busy[j as usize]
            .iter()
            .map(|&(_, end)| end)
            .fold(self.now, f64::max)
    }

    /// Whether device `j` has something booked at time `t`.
    pub fn busy_at(&self, j: u32, t: f64) -> bool {
        self.busy[j as usize].iter().any(|&(a, b)| a <= t && t < b)
    }

    /// The earliest start >= `from` at which every one of `devices` is free
    /// for `duration`: `from` or the end of a busy interval, whichever fits first.
    pub fn earliest(&self, devices: &[u32], from: f64, duration: f64) -> f64 {
        let mut starts: Vec<f64> = devices
            .iter()
            .flat_map(|&j| self.busy[j as usize].iter().map(|&(_, end)| end))
            .filter(|&end| end > from)
            .collect();
        starts.push(from);
        starts.sort_by(f64::total_cmp);
        starts
            .into_iter()
            .find(|&s| self.free(devices, s, held_until(s, s + duration)))
            .expect("every device is free after its last busy interval")
    }

    /// Books `[start, end)` on every one of `devices` (at least `start` itself).
    pub fn book(&mut self, devices: &[u32], start: f64, end: f64) {
        let end = held_until(start, end);
        for &j in devices {
            self.busy[j as usize].push((start, end));
        }
    }

    fn free(&self, devices: &[u32], start: f64, end: f64) -> bool {
        devices.iter().all(|&j| {
            self.busy[j as usize]
                .iter()
                .all(|&(a, b)| b <= start || end <= a)
        })
    }
}

/// The end of a run from `start` to `end` as booked: `end`, or the next
/// representable instant after `start` when `end` does not pass it.
fn held_until(start: f64, end: f64) -> f64 {
    end.max(start.next_up())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_filled_when_long_enough() {
        let mut t = Timeline::new(0.0, &[0.0, 4.0]);
        t.book(&[0], 3.0, 6.0);
        // Device 0: free 0..3, busy 3..6. Device 1: busy 0..4.
        assert_eq!(t.earliest(&[0], 0.0, 3.0), 0.0);
        assert_eq!(t.earliest(&[0], 0.0, 3.5), 6.0);
        assert_eq!(t.earliest(&[0], 1.0, 2.0), 1.0);
        assert_eq!(t.earliest(&[0, 1], 0.0, 1.0), 6.0);
        assert_eq!(t.earliest(&[1], 0.0, 1.0), 4.0);
        assert_eq!((t.release(0), t.release(1)), (6.0, 4.0));
    }

    #[test]
    fn a_run_shorter_than_the_clock_resolution_still_holds_its_start() {
        let mut t = Timeline::new(1000.0, &[0.0, 0.0]);
        // 1000 + 1e-300 == 1000: the run holds device 0 at 1000 all the same.
        t.book(&[0], 1000.0, 1000.0 + 1e-300);
        assert!(t.busy_at(0, 1000.0));
        assert_eq!(t.earliest(&[0], 1000.0, 1e-300), 1000f64.next_up());
        assert_eq!(t.earliest(&[0, 1], 1000.0, 2.0), 1000f64.next_up());
        assert_eq!(t.earliest(&[1], 1000.0, 1e-300), 1000.0);
    }

    #[test]
    fn a_gang_waits_for_its_last_device() {
        let t = Timeline::new(2.0, &[5.0, 1.0, 3.0]);
        assert_eq!(t.earliest(&[0, 1, 2], 2.0, 1.0), 5.0);
        assert_eq!(t.earliest(&[1, 2], 2.0, 1.0), 3.0);
        assert_eq!(t.release(1), 2.0);
    }
}
